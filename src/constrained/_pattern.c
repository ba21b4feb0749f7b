/* constrained._pattern: the native front end of fsm.compile_dfa (pattern text → the program _fsm.compile reads).
 *
 * Owns one entry point, `program(pattern, allow_special)`: a recursive-descent parser of the regex dialect that
 * builds the AST in C and flattens it into the preorder program, charset templates, template offsets, special
 * names and estimated NFA size exactly as
 *
 *     fsm._Program.build(regex.parse(pattern, allow_special=allow_special))
 *
 * does. regex.py (`_Parser`, `_concat`, `_alternation`, `_repeat`, `_normalize`, `_negate`, `utf8_sequences`) and
 * fsm.py (`_Program.build`, `_charset_template`) are the reference: the functions below carry their names and
 * mirror them step by step, since the AST simplifications shape the program and the emission orders number the
 * templates and special symbols. Whatever this module is not sure to reproduce it declines with None: every
 * syntax error and unsupported feature (it never explains errors; the Python parser does), nesting deeper than
 * regex._MAX_NESTING, surrogates, repeat counts beyond int32, a size beyond int64, a non-str pattern. The caller
 * then takes the Python path, which builds the program or raises the typed error. Allocation failure raises
 * MemoryError. The GIL is held throughout (parsing a typical 10 KB schema pattern takes tens of microseconds).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_native.h"

enum { OP_EMPTY = 0, OP_CHARSET = 1, OP_SPECIAL = 2, OP_CONCAT = 3, OP_ALT = 4, OP_REPEAT = 5, OP_BYTE = 6 };
enum { N_EMPTY, N_CHARSET, N_SPECIAL, N_CONCAT, N_ALT, N_REPEAT };
enum { ERR_NONE = 0, ERR_DECLINE = 1, ERR_NOMEM = 2 };

#define MAX_NESTING 100 /* regex._MAX_NESTING */
#define MAX_SCALAR 0x10FFFF
#define SURROGATE_LO 0xD800
#define SURROGATE_HI 0xDFFF
#define COUNT_MAX 2147483647LL /* repeat counts beyond int32 are declined (fsm._Program clamps them) */

/* ---- state ----------------------------------------------------------------------------------- */

typedef struct {
    int32_t kind;
    int32_t a, b;     /* CHARSET: first range in `ranges`, number of ranges; SPECIAL: name [a, b) in the pattern;
                         CONCAT/ALT: first child in `kids`, number of children; REPEAT: a = the item */
    int64_t min, max; /* REPEAT: counts, max -1 = unbounded */
} Node;

typedef struct {
    int32_t off, count, index; /* ranges (in `ranges`), template number */
    int64_t size;              /* the charset's _estimated_size */
    uint64_t hash;
} Template;

typedef struct {
    /* parsing */
    PyObject *pattern;
    const Py_UCS4 *s;
    int64_t n, pos;
    int allow_special, depth, err;
    Node *nodes;
    int64_t n_nodes, cap_nodes;
    int32_t empty;   /* the one Empty node */
    Vec kids;        /* children of CONCAT / ALT nodes */
    Vec ranges;      /* CharSet ranges: lo, hi pairs */
    Vec stack;       /* items of the sequences and alternations being parsed */
    Vec raw, tmp;    /* a class's ranges before _normalize / before _negate */
    /* emission (fsm._Program.build) */
    Vec code, templates, offsets;
    Template *tpl;   /* template_of: charsets met so far, by ranges */
    int64_t n_tpl;
    int32_t *slots;  /* open addressing over `tpl`: index + 1, 0 = free */
    int64_t n_slots;
    Vec names;       /* special names (start, end in the pattern) in order of first appearance */
    Vec seqs;        /* utf8_sequences of one charset: k, then k (lo, hi) byte ranges, per sequence */
    Vec suffixes;    /* _charset_template's by_suffix: (key low, key high, state) */
} Parser;

static int32_t
fail(Parser *p, int err)
{
    if (!p->err) p->err = err;
    return -1;
}

static int32_t
new_node(Parser *p, int32_t kind, int32_t a, int32_t b, int64_t min, int64_t max)
{
    if (p->n_nodes == p->cap_nodes) {
        int64_t cap = p->cap_nodes ? 2 * p->cap_nodes : 256;
        Node *q = realloc(p->nodes, (size_t)cap * sizeof *q);
        if (!q) return fail(p, ERR_NOMEM);
        p->nodes = q;
        p->cap_nodes = cap;
    }
    if (p->n_nodes >= INT32_MAX) return fail(p, ERR_DECLINE);
    Node *x = &p->nodes[p->n_nodes];
    x->kind = kind;
    x->a = a;
    x->b = b;
    x->min = min;
    x->max = max;
    return (int32_t)p->n_nodes++;
}

static inline Py_UCS4
peek(Parser *p, int64_t offset) /* 0 past the end: callers test at_end / positions where "" matters */
{
    int64_t i = p->pos + offset;
    return i < p->n ? p->s[i] : 0;
}

static inline int
has(Parser *p, int64_t offset) /* peek(offset) != "" */
{
    return p->pos + offset < p->n;
}

/* ---- character sets ---------------------------------------------------------------------------- */

/* Appends [lo, hi] minus the surrogates (the tail of _normalize). */
static int
push_scalars(Vec *out, int32_t lo, int32_t hi)
{
    if (hi < SURROGATE_LO || lo > SURROGATE_HI) return vec_push2(out, lo, hi);
    if (lo < SURROGATE_LO && vec_push2(out, lo, SURROGATE_LO - 1)) return -1;
    if (hi > SURROGATE_HI && vec_push2(out, SURROGATE_HI + 1, hi)) return -1;
    return 0;
}

/* Sort, merge and drop surrogates: appends the canonical form of the n (lo, hi) pairs at r (sorted in place
 * through a packed copy) to out. */
static int
_normalize(const int32_t *r, int64_t n, Vec *out)
{
    if (n == 0) return 0;
    uint64_t small[16], *keys = n <= 16 ? small : malloc((size_t)n * sizeof *keys);
    if (!keys) return -1;
    for (int64_t i = 0; i < n; i++) keys[i] = ((uint64_t)(uint32_t)r[2 * i] << 32) | (uint32_t)r[2 * i + 1];
    sort_u64(keys, n);
    int rc = 0;
    int32_t lo = (int32_t)(keys[0] >> 32), hi = (int32_t)(uint32_t)keys[0];
    for (int64_t i = 1; i < n && !rc; i++) {
        int32_t l = (int32_t)(keys[i] >> 32), h = (int32_t)(uint32_t)keys[i];
        if ((int64_t)l <= (int64_t)hi + 1) {
            if (h > hi) hi = h;
        } else {
            rc = push_scalars(out, lo, hi);
            lo = l;
            hi = h;
        }
    }
    if (!rc) rc = push_scalars(out, lo, hi);
    if (keys != small) free(keys);
    return rc;
}

/* All scalar values not in the n normalized ranges at r, appended to out (already normalized: the gaps of a
 * normalized set are sorted and non-adjacent; only the surrogates need dropping). */
static int
_negate(const int32_t *r, int64_t n, Vec *out)
{
    int32_t nxt = 0;
    for (int64_t i = 0; i < n; i++) {
        if (r[2 * i] > nxt && push_scalars(out, nxt, r[2 * i] - 1)) return -1;
        nxt = r[2 * i + 1] + 1;
    }
    if (nxt <= MAX_SCALAR && push_scalars(out, nxt, MAX_SCALAR)) return -1;
    return 0;
}

static const int32_t DIGIT[] = {0x30, 0x39};
static const int32_t WORD[] = {0x30, 0x39, 0x41, 0x5A, 0x5F, 0x5F, 0x61, 0x7A};
static const int32_t SPACE[] = {0x09, 0x0D, 0x20, 0x20};
static const int32_t NEWLINE[] = {0x0A, 0x0A};

static int
is_shorthand(Py_UCS4 c)
{
    return c == 'd' || c == 'D' || c == 'w' || c == 'W' || c == 's' || c == 'S';
}

/* Appends the ranges of \d \D \w \W \s \S (ASCII meanings) to out. */
static int
_shorthand(Py_UCS4 letter, Vec *out)
{
    const int32_t *base = letter == 'd' || letter == 'D' ? DIGIT : letter == 'w' || letter == 'W' ? WORD : SPACE;
    int64_t n = base == DIGIT ? 1 : base == WORD ? 4 : 2;
    if (letter == 'D' || letter == 'W' || letter == 'S') return _negate(base, n, out);
    for (int64_t i = 0; i < n; i++)
        if (vec_push2(out, base[2 * i], base[2 * i + 1])) return -1;
    return 0;
}

/* A CharSet node over the ranges appended to p->ranges since `off`. */
static int32_t
charset_node(Parser *p, int64_t off)
{
    if (p->ranges.n / 2 > INT32_MAX) return fail(p, ERR_DECLINE);
    return new_node(p, N_CHARSET, (int32_t)(off / 2), (int32_t)((p->ranges.n - off) / 2), 0, 0);
}

static int32_t
_literal(Parser *p, Py_UCS4 cp)
{
    if (cp >= SURROGATE_LO && cp <= SURROGATE_HI) return fail(p, ERR_DECLINE);
    int64_t off = p->ranges.n;
    if (vec_push2(&p->ranges, (int32_t)cp, (int32_t)cp)) return fail(p, ERR_NOMEM);
    return charset_node(p, off);
}

/* ---- AST simplifications (regex._concat, _alternation, _repeat) -------------------------------------- */

/* _concat over the items stack[base..]: flattens Concat items, drops Empty ones, collapses a single item. */
static int32_t
_concat(Parser *p, int64_t base)
{
    int64_t start = p->kids.n;
    for (int64_t i = base; i < p->stack.n; i++) {
        Node item = p->nodes[p->stack.a[i]];
        if (item.kind == N_CONCAT) {
            if (vec_reserve(&p->kids, p->kids.n + item.b)) return fail(p, ERR_NOMEM);
            for (int32_t j = 0; j < item.b; j++) p->kids.a[p->kids.n++] = p->kids.a[item.a + j];
        } else if (item.kind != N_EMPTY) {
            if (vec_push(&p->kids, p->stack.a[i])) return fail(p, ERR_NOMEM);
        }
    }
    int64_t count = p->kids.n - start;
    if (count == 0) return p->empty;
    if (count == 1) {
        p->kids.n = start;
        return p->kids.a[start];
    }
    if (start > INT32_MAX || count > INT32_MAX) return fail(p, ERR_DECLINE);
    return new_node(p, N_CONCAT, (int32_t)start, (int32_t)count, 0, 0);
}

/* _alternation over the items stack[base..]. */
static int32_t
_alternation(Parser *p, int64_t base)
{
    int64_t count = p->stack.n - base;
    if (count == 1) return p->stack.a[base];
    int64_t start = p->kids.n;
    if (start > INT32_MAX || count > INT32_MAX) return fail(p, ERR_DECLINE);
    if (vec_reserve(&p->kids, start + count)) return fail(p, ERR_NOMEM);
    memcpy(p->kids.a + start, p->stack.a + base, (size_t)count * sizeof(int32_t));
    p->kids.n += count;
    return new_node(p, N_ALT, (int32_t)start, (int32_t)count, 0, 0);
}

/* A repetition with nested quantifiers folded as regex._repeat folds them (hi -1 = unbounded). */
static int32_t
_repeat(Parser *p, int32_t item, int64_t lo, int64_t hi)
{
    if (lo == 1 && hi == 1) return item;
    Node x = p->nodes[item];
    if (hi == 0 || x.kind == N_EMPTY) return p->empty;
    if (x.kind == N_REPEAT) {
        if (x.min == 0 && x.max == 1) return _repeat(p, x.a, 0, hi);
        if (x.max == -1 && x.min <= 1) return _repeat(p, x.a, x.min * lo, -1);
        if (lo == 0 && hi == 1 && x.min <= 1) return _repeat(p, x.a, 0, x.max);
    }
    return new_node(p, N_REPEAT, item, 0, lo, hi);
}

/* ---- parser (regex._Parser, non-ECMA) ------------------------------------------------------------ */

static int32_t parse_alternation(Parser *p);

static int
is_digit(Py_UCS4 c)
{
    return c >= '0' && c <= '9';
}

static int
is_alpha(Py_UCS4 c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int
is_quantifier_start(Py_UCS4 c)
{
    return c == '*' || c == '+' || c == '?' || c == '{';
}

/* Decimal digits at i (ASCII only, as str.isascii() and str.isdigit()), saturated past COUNT_MAX. */
static int64_t
scan_digits(Parser *p, int64_t i, int64_t *value)
{
    int64_t v = 0;
    while (i < p->n && is_digit(p->s[i])) {
        if (v <= COUNT_MAX) v = v * 10 + (p->s[i] - '0');
        i++;
    }
    *value = v;
    return i;
}

/* {n} {n,} {n,m} {,m} at pos: 1 with (end, lo, hi), else 0 (hi -1 = unbounded). Counts beyond int32 decline
 * (-1): every caller would either quantify with them or raise "nothing to repeat". */
static int
scan_braces(Parser *p, int64_t *end, int64_t *lo, int64_t *hi)
{
    int64_t i = p->pos + 1, j, k, a, b;
    j = scan_digits(p, i, &a);
    if (j < p->n && p->s[j] == '}') {
        if (j == i) return 0;
        *end = j + 1;
        *lo = *hi = a;
    } else {
        if (j >= p->n || p->s[j] != ',') return 0;
        k = scan_digits(p, j + 1, &b);
        if (k >= p->n || p->s[k] != '}') return 0;
        *end = k + 1;
        *lo = j == i ? 0 : a;
        *hi = k == j + 1 ? -1 : b;
    }
    if (*lo > COUNT_MAX || *hi > COUNT_MAX) return fail(p, ERR_DECLINE);
    return 1;
}

/* * + ? or a valid brace quantifier at pos: 1 with (lo, hi) and pos moved past it; 0 if none; -1 declined. */
static int
parse_quantifier(Parser *p, int64_t *lo, int64_t *hi)
{
    if (!has(p, 0)) return 0;
    Py_UCS4 c = peek(p, 0);
    if (c == '*' || c == '+' || c == '?') {
        p->pos++;
        *lo = c == '+';
        *hi = c == '?' ? 1 : -1;
        return 1;
    }
    if (c == '{') {
        int64_t end;
        int found = scan_braces(p, &end, lo, hi);
        if (found == 1) p->pos = end;
        return found;
    }
    return 0;
}

static int32_t
parse_quantifiers(Parser *p, int32_t atom)
{
    int quantified = 0;
    for (;;) {
        int64_t lo, hi;
        int found = parse_quantifier(p, &lo, &hi);
        if (found < 0) return -1;
        if (!found) return atom;
        if (quantified) return fail(p, ERR_DECLINE); /* multiple repeat */
        if (hi != -1 && lo > hi) return fail(p, ERR_DECLINE);
        if (has(p, 0) && peek(p, 0) == '?')
            p->pos++; /* lazy: same language */
        else if (has(p, 0) && peek(p, 0) == '+')
            return fail(p, ERR_DECLINE); /* possessive */
        atom = _repeat(p, atom, lo, hi);
        if (atom < 0) return -1;
        quantified = 1;
    }
}

/* The code point of a character escape (pos just past the backslash), or -1 (declined). */
static int64_t
escape_code_point(Parser *p, int in_class)
{
    Py_UCS4 c = peek(p, 0);
    p->pos++;
    switch (c) {
    case 'n': return 0x0A;
    case 'r': return 0x0D;
    case 't': return 0x09;
    case 'f': return 0x0C;
    case 'v': return 0x0B;
    }
    if (c == 'b' && in_class) return 0x08;
    if (c == 'x' || c == 'u' || c == 'U') {
        int width = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        if (p->pos + width > p->n) return fail(p, ERR_DECLINE);
        int64_t cp = 0;
        for (int i = 0; i < width; i++) {
            Py_UCS4 d = p->s[p->pos + i];
            int v = d >= '0' && d <= '9' ? (int)(d - '0') : d >= 'a' && d <= 'f' ? (int)(d - 'a' + 10)
                    : d >= 'A' && d <= 'F' ? (int)(d - 'A' + 10) : -1;
            if (v < 0) return fail(p, ERR_DECLINE);
            cp = cp * 16 + v;
        }
        p->pos += width;
        if (cp > MAX_SCALAR) return fail(p, ERR_DECLINE);
        return cp;
    }
    if (is_digit(c) || is_alpha(c)) return fail(p, ERR_DECLINE); /* backreference, octal, unknown letter */
    return c;
}

static int32_t
parse_escape(Parser *p)
{
    p->pos++;
    if (!has(p, 0)) return fail(p, ERR_DECLINE); /* trailing backslash */
    Py_UCS4 c = peek(p, 0);
    if (is_shorthand(c)) {
        p->pos++;
        int64_t off = p->ranges.n;
        if (_shorthand(c, &p->ranges)) return fail(p, ERR_NOMEM);
        return charset_node(p, off);
    }
    if (c == 'b' || c == 'B' || c == 'A' || c == 'Z' || c == 'z' || c == 'G') return fail(p, ERR_DECLINE);
    int64_t cp = escape_code_point(p, 0);
    if (cp < 0) return -1;
    return _literal(p, (Py_UCS4)cp);
}

/* One class member at pos: 1 with the code point in *cp, 2 with a shorthand letter in *cp, -1 declined. */
static int
class_atom(Parser *p, int64_t *cp)
{
    Py_UCS4 c = peek(p, 0);
    if (c != '\\') {
        p->pos++;
        *cp = c;
        return 1;
    }
    p->pos++;
    if (!has(p, 0)) return fail(p, ERR_DECLINE);
    c = peek(p, 0);
    if (is_shorthand(c)) {
        p->pos++;
        *cp = c;
        return 2;
    }
    *cp = escape_code_point(p, 1);
    return *cp < 0 ? -1 : 1;
}

static int
is_scalar(int64_t cp)
{
    return cp < SURROGATE_LO || cp > SURROGATE_HI;
}

static int32_t
parse_class(Parser *p)
{
    p->pos++;
    int negate = 0;
    if (has(p, 0) && peek(p, 0) == '^') {
        negate = 1;
        p->pos++;
    }
    p->raw.n = 0;
    int first = 1;
    for (;;) {
        if (!has(p, 0)) return fail(p, ERR_DECLINE); /* unterminated */
        if (peek(p, 0) == ']' && !first) {
            p->pos++;
            break;
        }
        first = 0;
        int64_t lo, hi;
        int lo_kind = class_atom(p, &lo);
        if (lo_kind < 0) return -1;
        if (has(p, 1) && peek(p, 0) == '-' && peek(p, 1) != ']') {
            p->pos++;
            int hi_kind = class_atom(p, &hi);
            if (hi_kind < 0) return -1;
            if (lo_kind == 2 || hi_kind == 2 || lo > hi || !is_scalar(lo) || !is_scalar(hi))
                return fail(p, ERR_DECLINE);
            if (vec_push2(&p->raw, (int32_t)lo, (int32_t)hi)) return fail(p, ERR_NOMEM);
        } else if (lo_kind == 2) {
            if (_shorthand((Py_UCS4)lo, &p->raw)) return fail(p, ERR_NOMEM);
        } else {
            if (!is_scalar(lo)) return fail(p, ERR_DECLINE);
            if (vec_push2(&p->raw, (int32_t)lo, (int32_t)lo)) return fail(p, ERR_NOMEM);
        }
    }
    int64_t off = p->ranges.n;
    if (negate) {
        p->tmp.n = 0;
        if (_normalize(p->raw.a, p->raw.n / 2, &p->tmp) || _negate(p->tmp.a, p->tmp.n / 2, &p->ranges))
            return fail(p, ERR_NOMEM);
    } else if (_normalize(p->raw.a, p->raw.n / 2, &p->ranges)) {
        return fail(p, ERR_NOMEM);
    }
    return charset_node(p, off);
}

/* (?P<name>: name up to the next '>' must be an identifier (str.isidentifier). */
static int
parse_group_name(Parser *p)
{
    int64_t end = p->pos;
    while (end < p->n && p->s[end] != '>') end++;
    if (end >= p->n || end == p->pos) return fail(p, ERR_DECLINE);
    int ascii = 1;
    for (int64_t i = p->pos; i < end; i++) {
        Py_UCS4 c = p->s[i];
        if (c >= 0x80) {
            ascii = 0;
        } else if (!(is_alpha(c) || c == '_' || (i > p->pos && is_digit(c)))) {
            return fail(p, ERR_DECLINE);
        }
    }
    if (!ascii) {
        PyObject *name = PyUnicode_Substring(p->pattern, (Py_ssize_t)p->pos, (Py_ssize_t)end);
        if (!name) {
            PyErr_Clear();
            return fail(p, ERR_NOMEM);
        }
        int ok = PyUnicode_IsIdentifier(name);
        Py_DECREF(name);
        if (ok != 1) {
            PyErr_Clear();
            return fail(p, ERR_DECLINE);
        }
    }
    p->pos = end + 1;
    return 0;
}

/* (?&NAME) with pos at the '?': one special-token terminal. */
static int32_t
parse_special(Parser *p)
{
    if (!p->allow_special) return fail(p, ERR_DECLINE);
    int64_t start = p->pos + 2, end = start;
    while (end < p->n && p->s[end] != ')') end++;
    if (end >= p->n || end == start || end > INT32_MAX) return fail(p, ERR_DECLINE);
    p->pos = end + 1;
    return new_node(p, N_SPECIAL, (int32_t)start, (int32_t)end, 0, 0);
}

static int32_t
parse_group(Parser *p)
{
    p->pos++;
    if (has(p, 0) && peek(p, 0) == '?') {
        Py_UCS4 kind = has(p, 1) ? peek(p, 1) : 0;
        if (kind == ':') {
            p->pos += 2;
        } else if (kind == 'P' && has(p, 2) && peek(p, 2) == '<') {
            p->pos += 3;
            if (parse_group_name(p)) return -1;
        } else if (kind == '&') {
            return parse_special(p);
        } else {
            return fail(p, ERR_DECLINE);
        }
    }
    if (++p->depth > MAX_NESTING) return fail(p, ERR_DECLINE);
    int32_t node = parse_alternation(p);
    p->depth--;
    if (node < 0) return -1;
    if (!has(p, 0) || peek(p, 0) != ')') return fail(p, ERR_DECLINE); /* unterminated group */
    p->pos++;
    return node;
}

#define NOT_AN_ATOM (-2) /* parse_atom: a '{' that is not a quantifier (a literal) */

static int32_t
parse_atom(Parser *p)
{
    Py_UCS4 c = p->s[p->pos];
    if (c == '(') return parse_group(p);
    if (c == '[') return parse_class(p);
    if (c == '.') {
        p->pos++;
        int64_t off = p->ranges.n;
        if (_negate(NEWLINE, 1, &p->ranges)) return fail(p, ERR_NOMEM);
        return charset_node(p, off);
    }
    if (c == '\\') return parse_escape(p);
    if (c == '*' || c == '+' || c == '?') return fail(p, ERR_DECLINE); /* nothing to repeat */
    if (c == '{') {
        int64_t end, lo, hi;
        int found = scan_braces(p, &end, &lo, &hi);
        return found ? fail(p, ERR_DECLINE) : NOT_AN_ATOM;
    }
    p->pos++;
    return _literal(p, c);
}

/* Items up to '|', ')' or the end (or a trailing '$', top level only). */
static int32_t
parse_sequence(Parser *p, int top)
{
    int64_t base = p->stack.n;
    while (p->pos < p->n) {
        Py_UCS4 c = p->s[p->pos];
        if (c == '|' || c == ')') break;
        if (c == '$') {
            if (top && p->pos + 1 == p->n) {
                p->pos++;
                break;
            }
            return fail(p, ERR_DECLINE);
        }
        if (c == '^') return fail(p, ERR_DECLINE);
        int32_t atom = parse_atom(p);
        if (atom == NOT_AN_ATOM) {
            atom = _literal(p, '{');
            p->pos++;
        }
        if (atom < 0) return -1;
        if (p->pos < p->n && is_quantifier_start(p->s[p->pos])) {
            atom = parse_quantifiers(p, atom);
            if (atom < 0) return -1;
        }
        if (vec_push(&p->stack, atom)) return fail(p, ERR_NOMEM);
    }
    int32_t node = _concat(p, base);
    p->stack.n = base;
    return node;
}

static int32_t
parse_alternation(Parser *p)
{
    int64_t base = p->stack.n;
    for (;;) {
        int32_t node = parse_sequence(p, 0);
        if (node < 0) return -1;
        if (vec_push(&p->stack, node)) return fail(p, ERR_NOMEM);
        if (!has(p, 0) || peek(p, 0) != '|') break;
        p->pos++;
    }
    int32_t node = _alternation(p, base);
    p->stack.n = base;
    return node;
}

static int32_t
parse_top(Parser *p)
{
    int64_t base = p->stack.n;
    if (has(p, 0) && peek(p, 0) == '^') p->pos++; /* only the first branch, at position 0 */
    for (;;) {
        int32_t node = parse_sequence(p, 1);
        if (node < 0) return -1;
        if (vec_push(&p->stack, node)) return fail(p, ERR_NOMEM);
        if (!has(p, 0) || peek(p, 0) != '|') break;
        p->pos++;
        if (has(p, 0) && peek(p, 0) == '^') return fail(p, ERR_DECLINE);
    }
    if (p->pos < p->n) return fail(p, ERR_DECLINE); /* unbalanced ')' */
    int32_t node = _alternation(p, base);
    p->stack.n = base;
    return node;
}

/* ---- UTF-8 byte ranges (regex.utf8_sequences) --------------------------------------------------- */

static int
utf8_encode(int32_t cp, int32_t *out)
{
    if (cp < 0x80) {
        out[0] = cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = 0xC0 | (cp >> 6);
        out[1] = 0x80 | (cp & 0x3F);
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = 0xE0 | (cp >> 12);
        out[1] = 0x80 | ((cp >> 6) & 0x3F);
        out[2] = 0x80 | (cp & 0x3F);
        return 3;
    }
    out[0] = 0xF0 | (cp >> 18);
    out[1] = 0x80 | ((cp >> 12) & 0x3F);
    out[2] = 0x80 | ((cp >> 6) & 0x3F);
    out[3] = 0x80 | (cp & 0x3F);
    return 4;
}

/* regex._split: the byte-range sequences of [lo, hi], appended to p->seqs (k, then k byte ranges), in the order
 * of the reference's explicit stack. */
static int
_split(Parser *p, int32_t lo, int32_t hi)
{
    static const int32_t bounds[3] = {0x7F, 0x7FF, 0xFFFF};
    int32_t stack[64][2];
    int sp = 0;
    stack[sp][0] = lo;
    stack[sp][1] = hi;
    sp++;
    while (sp) {
        if (sp > 60) return fail(p, ERR_DECLINE); /* cannot happen: each split halves a 21-bit span */
        sp--;
        lo = stack[sp][0];
        hi = stack[sp][1];
        int split = 0;
        for (int b = 0; b < 3 && !split; b++) {
            if (lo <= bounds[b] && bounds[b] < hi) {
                stack[sp][0] = bounds[b] + 1, stack[sp][1] = hi, sp++;
                stack[sp][0] = lo, stack[sp][1] = bounds[b], sp++;
                split = 1;
            }
        }
        if (split) continue;
        if (hi <= 0x7F) {
            if (vec_push(&p->seqs, 1) || vec_push2(&p->seqs, lo, hi)) return fail(p, ERR_NOMEM);
            continue;
        }
        for (int i = 1; i <= 3 && !split; i++) {
            int32_t m = (1 << (6 * i)) - 1;
            if ((lo & ~m) != (hi & ~m)) {
                if (lo & m) {
                    stack[sp][0] = (lo | m) + 1, stack[sp][1] = hi, sp++;
                    stack[sp][0] = lo, stack[sp][1] = lo | m, sp++;
                    split = 1;
                } else if ((hi & m) != m) {
                    stack[sp][0] = hi & ~m, stack[sp][1] = hi, sp++;
                    stack[sp][0] = lo, stack[sp][1] = (hi & ~m) - 1, sp++;
                    split = 1;
                }
            }
        }
        if (split) continue;
        int32_t a[4], b[4];
        int k = utf8_encode(lo, a);
        if (utf8_encode(hi, b) != k) return fail(p, ERR_DECLINE); /* cannot happen after the length split */
        if (vec_push(&p->seqs, k)) return fail(p, ERR_NOMEM);
        for (int j = 0; j < k; j++)
            if (vec_push2(&p->seqs, a[j], b[j])) return fail(p, ERR_NOMEM);
    }
    return 0;
}

static int
utf8_sequences(Parser *p, const int32_t *r, int64_t n)
{
    p->seqs.n = 0;
    for (int64_t i = 0; i < n; i++)
        if (_split(p, r[2 * i], r[2 * i + 1])) return -1;
    return 0;
}

/* ---- program emission (fsm._Program.build, fsm._charset_template) ------------------------------ */

/* _charset_template's state_for: the local state reached after the suffix's first range (k ranges at r), created
 * with its edge (deeper edges first, as the reference appends after its recursive call) on first use. */
static int32_t
state_for(Parser *p, const int32_t *r, int k, int32_t *n_new)
{
    if (k == 0) return 1;
    uint64_t key = (uint64_t)k;
    for (int j = 0; j < k; j++) key = (key << 16) | ((uint64_t)r[2 * j] << 8) | (uint64_t)r[2 * j + 1];
    for (int64_t i = 0; i < p->suffixes.n; i += 3) {
        if ((uint32_t)p->suffixes.a[i] == (uint32_t)key && (uint32_t)p->suffixes.a[i + 1] == (uint32_t)(key >> 32))
            return p->suffixes.a[i + 2];
    }
    int32_t state = ++*n_new;
    int32_t dst = state_for(p, r + 2, k - 1, n_new);
    if (dst < 0) return -1;
    if (vec_push2(&p->templates, state, r[0]) || vec_push2(&p->templates, r[1], dst) ||
        vec_push2(&p->suffixes, (int32_t)(uint32_t)key, (int32_t)(uint32_t)(key >> 32)) ||
        vec_push(&p->suffixes, state))
        return fail(p, ERR_NOMEM);
    return state;
}

/* Appends the template of the n ranges at r (n_new, n_edges, then (src, lo, hi, dst) edges) to p->templates;
 * returns the charset's estimated size. */
static int64_t
_charset_template(Parser *p, const int32_t *r, int64_t n)
{
    if (utf8_sequences(p, r, n)) return -1;
    p->suffixes.n = 0;
    int64_t header = p->templates.n, size = 2;
    int32_t n_new = 1;
    if (vec_push2(&p->templates, 0, 0)) return fail(p, ERR_NOMEM);
    for (int64_t i = 0; i < p->seqs.n;) {
        int k = p->seqs.a[i];
        const int32_t *seq = p->seqs.a + i + 1;
        int32_t dst = state_for(p, seq + 2, k - 1, &n_new);
        if (dst < 0) return -1;
        if (vec_push2(&p->templates, 0, seq[0]) || vec_push2(&p->templates, seq[1], dst)) return fail(p, ERR_NOMEM);
        size += k;
        i += 1 + 2 * k;
    }
    p->templates.a[header] = n_new;
    p->templates.a[header + 1] = (int32_t)((p->templates.n - header - 2) / 4);
    return size;
}

static uint64_t
hash_ranges(const int32_t *r, int64_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)n;
    for (int64_t i = 0; i < 2 * n; i++) {
        h ^= (uint32_t)r[i];
        h *= 0x100000001b3ULL;
    }
    return h ^ (h >> 29);
}

/* template_of: the template number and size of a charset, its template emitted on first appearance. */
static int
template_of(Parser *p, const Node *x, int32_t *index, int64_t *size)
{
    const int32_t *r = p->ranges.a + 2 * (int64_t)x->a;
    uint64_t h = hash_ranges(r, x->b);
    if (p->n_slots) {
        for (uint64_t i = h & (uint64_t)(p->n_slots - 1);; i = (i + 1) & (uint64_t)(p->n_slots - 1)) {
            int32_t t = p->slots[i];
            if (!t) break;
            const Template *e = &p->tpl[t - 1];
            if (e->hash == h && e->count == x->b &&
                !memcmp(p->ranges.a + 2 * (int64_t)e->off, r, (size_t)x->b * 2 * sizeof(int32_t))) {
                *index = e->index;
                *size = e->size;
                return 0;
            }
        }
    }
    if (2 * (p->n_tpl + 1) > p->n_slots) { /* grow and rehash */
        int64_t n_slots = p->n_slots ? 2 * p->n_slots : 64;
        int32_t *slots = calloc((size_t)n_slots, sizeof *slots);
        Template *tpl = realloc(p->tpl, (size_t)(n_slots / 2) * sizeof *tpl);
        if (!slots || !tpl) {
            free(slots);
            if (tpl) p->tpl = tpl;
            return fail(p, ERR_NOMEM);
        }
        p->tpl = tpl;
        for (int64_t t = 0; t < p->n_tpl; t++) {
            uint64_t i = tpl[t].hash & (uint64_t)(n_slots - 1);
            while (slots[i]) i = (i + 1) & (uint64_t)(n_slots - 1);
            slots[i] = (int32_t)t + 1;
        }
        free(p->slots);
        p->slots = slots;
        p->n_slots = n_slots;
    }
    if (p->offsets.n >= INT32_MAX || p->templates.n >= INT32_MAX) return fail(p, ERR_DECLINE);
    if (vec_push(&p->offsets, (int32_t)p->templates.n)) return fail(p, ERR_NOMEM);
    int64_t s = _charset_template(p, r, x->b);
    if (s < 0) return -1;
    Template *e = &p->tpl[p->n_tpl];
    e->off = x->a;
    e->count = x->b;
    e->index = (int32_t)(p->offsets.n - 1);
    e->size = s;
    e->hash = h;
    uint64_t i = h & (uint64_t)(p->n_slots - 1);
    while (p->slots[i]) i = (i + 1) & (uint64_t)(p->n_slots - 1);
    p->slots[i] = (int32_t)++p->n_tpl;
    *index = e->index;
    *size = s;
    return 0;
}

/* The symbol of a special name: 256 + its rank in order of first appearance. */
static int32_t
special_symbol(Parser *p, int32_t start, int32_t end)
{
    int64_t len = end - start;
    for (int64_t i = 0; i < p->names.n; i += 2) {
        int32_t s = p->names.a[i], e = p->names.a[i + 1];
        if (e - s == len && !memcmp(p->s + s, p->s + start, (size_t)len * sizeof(Py_UCS4)))
            return 256 + (int32_t)(i / 2);
    }
    if (vec_push2(&p->names, start, end)) return fail(p, ERR_NOMEM);
    return 256 + (int32_t)(p->names.n / 2 - 1);
}

/* _Program.build's emit: appends the node's code; returns its _estimated_size, -1 on failure. */
static int64_t
emit(Parser *p, int32_t idx)
{
    const Node x = p->nodes[idx];
    int64_t size, child;
    switch (x.kind) {
    case N_CHARSET: {
        const int32_t *r = p->ranges.a + 2 * (int64_t)x.a;
        if (x.b == 1 && r[0] == r[1] && r[0] < 0x80) {
            if (vec_push2(&p->code, OP_BYTE, r[0])) return fail(p, ERR_NOMEM);
            return 3;
        }
        int32_t index;
        if (template_of(p, &x, &index, &size)) return -1;
        if (vec_push2(&p->code, OP_CHARSET, index)) return fail(p, ERR_NOMEM);
        return size;
    }
    case N_CONCAT:
    case N_ALT:
        if (vec_push2(&p->code, x.kind == N_CONCAT ? OP_CONCAT : OP_ALT, x.b)) return fail(p, ERR_NOMEM);
        size = 2;
        for (int32_t i = 0; i < x.b; i++) {
            child = emit(p, p->kids.a[x.a + i]);
            if (child < 0) return -1;
            if (__builtin_add_overflow(size, child, &size)) return fail(p, ERR_DECLINE);
        }
        return size;
    case N_REPEAT: {
        if (vec_push2(&p->code, OP_REPEAT, (int32_t)x.min) || vec_push(&p->code, (int32_t)x.max))
            return fail(p, ERR_NOMEM);
        child = emit(p, x.a);
        if (child < 0) return -1;
        int64_t copies = x.max != -1 ? x.max : x.min;
        if (copies < 1) copies = 1;
        if (__builtin_mul_overflow(child, copies, &size) || __builtin_add_overflow(size, 3, &size))
            return fail(p, ERR_DECLINE);
        return size;
    }
    case N_SPECIAL: {
        int32_t symbol = special_symbol(p, x.a, x.b);
        if (symbol < 0 || vec_push2(&p->code, OP_SPECIAL, symbol)) return fail(p, ERR_NOMEM);
        return 2;
    }
    default:
        if (vec_push(&p->code, OP_EMPTY)) return fail(p, ERR_NOMEM);
        return 2;
    }
}

/* ---- module ---------------------------------------------------------------------------------------- */

PyDoc_STRVAR(program_doc,
"program(pattern, allow_special) -> (code: bytes, templates: bytes, offsets: bytes, names: tuple, size: int) | None\n\n"
"Exactly fsm._Program.build(regex.parse(pattern, allow_special=allow_special)) as native int32 bytes (code,\n"
"templates, offsets), special names and estimated NFA size; None for anything not handled here (every syntax\n"
"error included): the caller then takes the Python path.");

static PyObject *
program(PyObject *self, PyObject *args)
{
    PyObject *pattern, *names = NULL, *out = NULL;
    int allow_special;
    if (!PyArg_ParseTuple(args, "Op", &pattern, &allow_special)) return NULL;
    if (!PyUnicode_CheckExact(pattern)) Py_RETURN_NONE;
    Parser p = {0};
    p.pattern = pattern;
    p.allow_special = allow_special;
    p.n = PyUnicode_GET_LENGTH(pattern);
    Py_UCS4 *s = PyUnicode_AsUCS4Copy(pattern);
    if (!s) return NULL;
    p.s = s;
    int64_t size = -1;
    p.empty = new_node(&p, N_EMPTY, 0, 0, 0, 0);
    int32_t root = p.empty < 0 ? -1 : parse_top(&p);
    if (root >= 0) size = emit(&p, root);
    if (p.err == ERR_NOMEM) {
        PyErr_NoMemory();
        goto done;
    }
    if (p.err || size < 0) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    names = PyTuple_New((Py_ssize_t)(p.names.n / 2));
    if (!names) goto done;
    for (int64_t i = 0; i < p.names.n; i += 2) {
        PyObject *name = PyUnicode_Substring(pattern, p.names.a[i], p.names.a[i + 1]);
        if (!name) goto done;
        PyTuple_SET_ITEM(names, (Py_ssize_t)(i / 2), name);
    }
    out = Py_BuildValue("(NNNOL)", PyBytes_FromStringAndSize((const char *)p.code.a, (Py_ssize_t)(p.code.n * 4)),
                        PyBytes_FromStringAndSize((const char *)p.templates.a, (Py_ssize_t)(p.templates.n * 4)),
                        PyBytes_FromStringAndSize((const char *)p.offsets.a, (Py_ssize_t)(p.offsets.n * 4)), names,
                        (long long)size);
done:
    Py_XDECREF(names);
    PyMem_Free(s);
    free(p.nodes);
    free(p.kids.a);
    free(p.ranges.a);
    free(p.stack.a);
    free(p.raw.a);
    free(p.tmp.a);
    free(p.code.a);
    free(p.templates.a);
    free(p.offsets.a);
    free(p.tpl);
    free(p.slots);
    free(p.names.a);
    free(p.seqs.a);
    free(p.suffixes.a);
    return out;
}

static PyMethodDef pattern_methods[] = {
    {"program", program, METH_VARARGS, program_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef pattern_module = {
    PyModuleDef_HEAD_INIT, "constrained._pattern",
    "Native pattern → program front end of constrained.fsm.compile_dfa (see _pattern.c).", -1, pattern_methods,
};

PyMODINIT_FUNC
PyInit__pattern(void)
{
    return PyModule_Create(&pattern_module);
}
