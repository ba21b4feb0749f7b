/* constrained._fsm: the native half of fsm.compile_dfa (NFA → minimal trimmed canonical DFA).
 *
 * Owns one entry point, `compile`, and nothing else. fsm.py parses the pattern, checks the NFA budget and
 * flattens the AST into a small preorder program; everything after that happens here, with the GIL
 * released:
 *
 *   program ──Thompson, attach-at-start (the exact NFA fsm._NFA builds)──► NFA over symbols
 *     ──byte equivalence classes──► subset construction (same work accounting and budgets as the
 *     Python reference; sparse rows) ──trim (reverse BFS, which also gives the distances)──► a round of
 *     Moore hashing ──► Valmari–Lehtinen partition refinement (partial DFAs) ──canonical BFS renumbering──►
 *     class table [S, n_classes], accepting, distance (the table by symbol is expanded in Python, on first
 *     use: the rule bodies of a pushdown grammar never need it)
 *
 * Program (int32, preorder; each node is an opcode and its operands, children follow their parent):
 *   OP_EMPTY                              matches ""
 *   OP_BYTE b                             one ASCII byte (the common literal)
 *   OP_CHARSET k                          instantiate charset template k
 *   OP_SPECIAL symbol                     one special-token symbol (256 + i)
 *   OP_CONCAT n  child_1 .. child_n
 *   OP_ALT n     child_1 .. child_n
 *   OP_REPEAT min max child               max == -1 means unbounded
 * Templates (int32): templates[offsets[k]..] = n_new, n_edges, then n_edges × (src, lo, hi, dst) with local
 * state ids: 0 = the start state the charset is attached at, 1..n_new = new states in creation order
 * (1 is the end state). fsm.py computes them exactly as fsm._NFA.charset would build the states.
 *
 * Budget outcomes are returned as small ints (fsm.py raises the typed errors); malformed input raises
 * ValueError, allocation failure MemoryError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_native.h"

#define DEAD (-1)

enum { OP_EMPTY = 0, OP_CHARSET = 1, OP_SPECIAL = 2, OP_CONCAT = 3, OP_ALT = 4, OP_REPEAT = 5, OP_BYTE = 6 };
enum { RC_OK = 0, RC_NOMEM = -1, RC_BAD = -2, RC_WORK = 1, RC_STATES = 2, RC_EMPTY = 3 };

#define MAX_DEPTH 2000
#define MAX_NFA (1 << 24)     /* targets are packed into 24 bits of a sort key */
#define MAX_CLASSES (1 << 20) /* classes into 20 bits each */

static int
cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void
sort_i32(int32_t *a, int64_t n)
{
    if (n < 24) { /* insertion sort: most sets are small */
        for (int64_t i = 1; i < n; i++) {
            int32_t x = a[i];
            int64_t j = i - 1;
            while (j >= 0 && a[j] > x) {
                a[j + 1] = a[j];
                j--;
            }
            a[j + 1] = x;
        }
    } else {
        qsort(a, (size_t)n, sizeof *a, cmp_i32);
    }
}

static inline uint64_t
hash_set(const int32_t *x, int64_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    for (int64_t i = 0; i < n; i++) {
        h ^= (uint32_t)x[i];
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 29;
    }
    return h;
}

/* ---- NFA construction (mirrors fsm._NFA) ------------------------------------------------------ */

typedef struct {
    const int32_t *code;
    int64_t code_len;
    const int32_t *tpl;
    int64_t tpl_len;
    const int32_t *tpl_off;
    int64_t n_tpl;
    int32_t n_symbols; /* 256 + number of special symbols */
    int64_t n_states;
    Vec ep_from, ep_to;                 /* epsilon edges, insertion order */
    Vec ed_from, ed_lo, ed_hi, ed_to;   /* symbol edges (inclusive symbol ranges), insertion order */
    int err;
} Builder;

static int64_t
new_state(Builder *b)
{
    if (b->n_states >= MAX_NFA) {
        b->err = RC_BAD;
        return 0;
    }
    return b->n_states++;
}

static void
add_eps(Builder *b, int64_t from, int64_t to)
{
    if (vec_push(&b->ep_from, (int32_t)from) || vec_push(&b->ep_to, (int32_t)to)) b->err = RC_NOMEM;
}

static void
add_edge(Builder *b, int64_t from, int32_t lo, int32_t hi, int64_t to)
{
    if (lo < 0 || hi < lo || hi >= b->n_symbols || (lo < 256 && hi >= 256)) {
        b->err = RC_BAD;
        return;
    }
    if (vec_push(&b->ed_from, (int32_t)from) || vec_push(&b->ed_lo, lo) || vec_push(&b->ed_hi, hi) ||
        vec_push(&b->ed_to, (int32_t)to))
        b->err = RC_NOMEM;
}

static inline int
operand(Builder *b, int64_t pos, int32_t *out)
{
    if (pos < 0 || pos >= b->code_len) {
        b->err = RC_BAD;
        return -1;
    }
    *out = b->code[pos];
    return 0;
}

/* Position just past the node at `pos` (no building). */
static int64_t
skip(Builder *b, int64_t pos, int depth)
{
    int32_t op, n;
    if (b->err || depth > MAX_DEPTH || operand(b, pos, &op)) {
        b->err = b->err ? b->err : RC_BAD;
        return pos;
    }
    switch (op) {
    case OP_EMPTY:
        return pos + 1;
    case OP_BYTE:
    case OP_CHARSET:
    case OP_SPECIAL:
        return pos + 2;
    case OP_CONCAT:
    case OP_ALT:
        if (operand(b, pos + 1, &n)) return pos;
        pos += 2;
        for (int32_t i = 0; i < n && !b->err; i++) pos = skip(b, pos, depth + 1);
        return pos;
    case OP_REPEAT:
        return skip(b, pos + 3, depth + 1);
    default:
        b->err = RC_BAD;
        return pos;
    }
}

/* Builds the node at *pos beginning at `start`; returns its end state and moves *pos past the node. */
static int64_t
attach(Builder *b, int64_t *pos, int64_t start, int depth)
{
    int32_t op, x, n, lo, hi;
    int64_t p = *pos, end;
    if (b->err) return start;
    if (depth > MAX_DEPTH || operand(b, p, &op)) {
        b->err = RC_BAD;
        return start;
    }
    switch (op) {
    case OP_EMPTY:
        *pos = p + 1;
        return start;
    case OP_BYTE:
    case OP_SPECIAL:
        if (operand(b, p + 1, &x)) return start;
        *pos = p + 2;
        end = new_state(b);
        add_edge(b, start, x, x, end);
        return end;
    case OP_CHARSET: {
        if (operand(b, p + 1, &x)) return start;
        *pos = p + 2;
        if (x < 0 || x >= b->n_tpl) {
            b->err = RC_BAD;
            return start;
        }
        int64_t t = b->tpl_off[x];
        if (t < 0 || t + 2 > b->tpl_len) {
            b->err = RC_BAD;
            return start;
        }
        int32_t n_new = b->tpl[t], n_edges = b->tpl[t + 1];
        if (n_new < 1 || n_edges < 0 || t + 2 + 4 * (int64_t)n_edges > b->tpl_len) {
            b->err = RC_BAD;
            return start;
        }
        int64_t base = b->n_states;
        for (int32_t i = 0; i < n_new; i++) new_state(b);
        const int32_t *e = b->tpl + t + 2;
        for (int32_t i = 0; i < n_edges && !b->err; i++, e += 4) {
            if (e[0] < 0 || e[0] > n_new || e[3] < 0 || e[3] > n_new) {
                b->err = RC_BAD;
                break;
            }
            int64_t from = e[0] ? base + e[0] - 1 : start;
            int64_t to = e[3] ? base + e[3] - 1 : start;
            add_edge(b, from, e[1], e[2], to);
        }
        return base;
    }
    case OP_CONCAT:
        if (operand(b, p + 1, &n)) return start;
        p += 2;
        end = start;
        for (int32_t i = 0; i < n && !b->err; i++) end = attach(b, &p, end, depth + 1);
        *pos = p;
        return end;
    case OP_ALT:
        if (operand(b, p + 1, &n)) return start;
        p += 2;
        end = new_state(b);
        for (int32_t i = 0; i < n && !b->err; i++) add_eps(b, attach(b, &p, start, depth + 1), end);
        *pos = p;
        return end;
    case OP_REPEAT: {
        if (operand(b, p + 1, &lo) || operand(b, p + 2, &hi)) return start;
        if (lo < 0 || (hi >= 0 && hi < lo) || hi < -1) {
            b->err = RC_BAD;
            return start;
        }
        int64_t item = p + 3, after = skip(b, item, depth + 1), q;
        *pos = after;
        end = start;
        for (int32_t i = 0; i < lo && !b->err; i++) {
            if (hi < 0 && i == lo - 1) { /* x{n,} = x^(n-1) x+ : loop the last copy */
                int64_t loop = new_state(b);
                add_eps(b, end, loop);
                q = item;
                end = attach(b, &q, loop, depth + 1);
                add_eps(b, end, loop);
                return end;
            }
            q = item;
            end = attach(b, &q, end, depth + 1);
        }
        if (hi < 0) {
            int64_t hub = new_state(b);
            add_eps(b, end, hub);
            q = item;
            add_eps(b, attach(b, &q, hub, depth + 1), hub);
            return hub;
        }
        if (hi == lo) return end;
        int64_t exit_state = new_state(b);
        for (int32_t i = 0; i < hi - lo && !b->err; i++) {
            add_eps(b, end, exit_state);
            q = item;
            end = attach(b, &q, end, depth + 1);
        }
        add_eps(b, end, exit_state);
        return exit_state;
    }
    default:
        b->err = RC_BAD;
        return start;
    }
}

/* CSR (stable) of edges grouped by their source state: start[n + 1], order[] = edge indices. */
static int
csr(const Vec *from, int64_t n, int64_t **start_out, int32_t **order_out)
{
    int64_t *start = calloc((size_t)n + 1, sizeof *start);
    int32_t *order = malloc(((size_t)from->n + 1) * sizeof *order);
    if (!start || !order) {
        free(start);
        free(order);
        return -1;
    }
    for (int64_t i = 0; i < from->n; i++) start[from->a[i] + 1]++;
    for (int64_t s = 0; s < n; s++) start[s + 1] += start[s];
    int64_t *fill = malloc(((size_t)n + 1) * sizeof *fill);
    if (!fill) {
        free(start);
        free(order);
        return -1;
    }
    memcpy(fill, start, ((size_t)n + 1) * sizeof *fill);
    for (int64_t i = 0; i < from->n; i++) order[fill[from->a[i]]++] = (int32_t)i;
    free(fill);
    *start_out = start;
    *order_out = order;
    return 0;
}

/* ---- the subset DFA (sparse) and its transitions by label ----------------------------------------- */

typedef struct {
    int64_t n, m;
    int64_t *start;          /* [n + 1]: state s's transitions are start[s]..start[s + 1], in class order */
    int32_t *label, *target; /* [m] */
    uint8_t *accepting;
} ClassDfa;

/* The transitions numbered by target, so the ones entering a state are a range (trim, minimize's incoming
 * marks read sequentially), with their sources and, for minimize's cords, the ids grouped by label. */
typedef struct {
    int32_t *T;     /* [m]: transition t's source */
    int32_t *order; /* [m]: ids by label, sources in order within a label */
    int64_t *lab;   /* [c + 2]: order[lab[a]..lab[a + 1]) have label a */
    int64_t *adj;   /* [n + 1]: transitions adj[s]..adj[s + 1] enter s */
} Edges;

static void
edges_free(Edges *e)
{
    free(e->T);
    free(e->order);
    free(e->lab);
    free(e->adj);
    memset(e, 0, sizeof *e);
}

static int
edges_build(const ClassDfa *d, int64_t c, Edges *e)
{
    int64_t n = d->n, m = d->m;
    e->T = malloc(((size_t)m + 1) * sizeof *e->T);
    e->order = malloc(((size_t)m + 1) * sizeof *e->order);
    e->lab = calloc((size_t)c + 2, sizeof *e->lab);
    e->adj = calloc((size_t)n + 2, sizeof *e->adj);
    if (!e->T || !e->order || !e->lab || !e->adj) return -1;
    /* both shifted by one: lab[a + 1] fills a's range and ends as its end, adj likewise */
    int64_t *lab = e->lab, *adj = e->adj;
    for (int64_t j = 0; j < m; j++) {
        lab[d->label[j] + 2]++;
        adj[d->target[j] + 2]++;
    }
    for (int64_t a = 0; a < c; a++) lab[a + 2] += lab[a + 1];
    for (int64_t s = 0; s < n; s++) adj[s + 2] += adj[s + 1];
    for (int64_t s = 0; s < n; s++)
        for (int64_t j = d->start[s]; j < d->start[s + 1]; j++) {
            int64_t id = adj[d->target[j] + 1]++;
            e->T[id] = (int32_t)s;
            e->order[lab[d->label[j] + 1]++] = (int32_t)id;
        }
    return 0;
}

/* ---- reverse BFS (trim + distance) ----------------------------------------------------------- */

/* dist[s] = shortest symbol count from s to an accepting state, -1 if none. */
static int
reverse_bfs(const Edges *e, int64_t n, const uint8_t *accepting, int32_t *dist)
{
    int32_t *queue = malloc(((size_t)n + 1) * sizeof *queue);
    if (!queue) return -1;
    int64_t head = 0, tail = 0;
    for (int64_t s = 0; s < n; s++) {
        dist[s] = accepting[s] ? 0 : -1;
        if (accepting[s]) queue[tail++] = (int32_t)s;
    }
    while (head < tail) {
        int32_t t = queue[head++];
        for (int64_t j = e->adj[t]; j < e->adj[t + 1]; j++) {
            int32_t s = e->T[j];
            if (dist[s] < 0) {
                dist[s] = dist[t] + 1;
                queue[tail++] = s;
            }
        }
    }
    free(queue);
    return 0;
}

/* ---- refinable partition (Valmari & Lehtinen 2008; Valmari 2012) ------------------------------ */

typedef struct {
    int64_t z;
    int32_t *E, *L, *S, *F, *P;
} Partition;

static int
part_init(Partition *p, int64_t n)
{
    p->z = 0; /* the caller sets up the first sets */
    p->E = malloc(((size_t)n + 1) * sizeof(int32_t));
    p->L = malloc(((size_t)n + 1) * sizeof(int32_t));
    p->S = malloc(((size_t)n + 1) * sizeof(int32_t));
    p->F = malloc(((size_t)n + 1) * sizeof(int32_t));
    p->P = malloc(((size_t)n + 1) * sizeof(int32_t));
    return !p->E || !p->L || !p->S || !p->F || !p->P ? -1 : 0;
}

static void
part_free(Partition *p)
{
    free(p->E);
    free(p->L);
    free(p->S);
    free(p->F);
    free(p->P);
}

/* Shared by both partitions (used alternately): marked count per set, touched sets. */
typedef struct {
    int32_t *M, *W;
    int64_t w;
} Marks;

static inline void
part_mark(Partition *p, Marks *k, int32_t e)
{
    int32_t s = p->S[e], i = p->L[e], j = p->F[s] + k->M[s];
    p->E[i] = p->E[j];
    p->L[p->E[i]] = i;
    p->E[j] = e;
    p->L[e] = j;
    if (!k->M[s]++) k->W[k->w++] = s;
}

static void
part_split(Partition *p, Marks *k)
{
    while (k->w) {
        int32_t s = k->W[--k->w], j = p->F[s] + k->M[s];
        if (j == p->P[s]) {
            k->M[s] = 0;
            continue;
        }
        int64_t z = p->z;
        if (k->M[s] <= p->P[s] - j) {
            p->F[z] = p->F[s];
            p->P[z] = p->F[s] = j;
        } else {
            p->P[z] = p->P[s];
            p->F[z] = p->P[s] = j;
        }
        for (int32_t i = p->F[z]; i < p->P[z]; i++) p->S[p->E[i]] = (int32_t)z;
        k->M[s] = k->M[z] = 0;
        p->z++;
    }
}

/* A partition no finer than equivalence, cheaply (the coarser minimize's start, the less it marks): states
 * keyed by (distance, acceptance), then for max_rounds rounds of Moore's algorithm by their class and a hash of
 * their transitions' (label, target class). Equivalent states always share a key; a new class never spans two
 * old ones, so acceptance is respected whatever the hash does, and a hash collision only leaves the partition
 * coarser. cls[s] receives classes 0..z-1; returns z, -1: no memory. */
static int64_t
moore_classes(const ClassDfa *d, const int32_t *dist, int max_rounds, int32_t *cls)
{
    int64_t n = d->n, n_slots = 16, z = 0, result = -1;
    while (n_slots < 2 * n) n_slots *= 2;
    uint64_t *keys = malloc((size_t)n_slots * sizeof *keys), *h = malloc(((size_t)n + 1) * sizeof *h);
    int32_t *ids = malloc((size_t)n_slots * sizeof *ids), *old = malloc((size_t)n_slots * sizeof *old);
    if (!keys || !ids || !old || !h) goto done;
    for (int64_t s = 0; s < n; s++) {
        h[s] = (uint64_t)dist[s] << 1 | d->accepting[s];
        cls[s] = 0;
    }
    for (int round = 0;; round++) {
        for (int64_t i = 0; i < n_slots; i++) ids[i] = -1;
        int64_t nz = 0;
        for (int64_t s = 0; s < n; s++) {
            uint64_t x = h[s], i = (x ^ (x >> 29)) * 0x9E3779B97F4A7C15ULL >> 20 & (uint64_t)(n_slots - 1);
            while (ids[i] >= 0 && (keys[i] != x || old[i] != cls[s])) i = (i + 1) & (uint64_t)(n_slots - 1);
            if (ids[i] < 0) {
                ids[i] = (int32_t)nz++;
                keys[i] = x;
                old[i] = cls[s];
            }
            cls[s] = ids[i];
        }
        if (nz == z || round == max_rounds) {
            z = nz;
            break;
        }
        z = nz;
        for (int64_t s = 0; s < n; s++) {
            uint64_t x = 0x9E3779B97F4A7C15ULL;
            for (int64_t j = d->start[s]; j < d->start[s + 1]; j++) {
                x ^= ((uint64_t)d->label[j] << 32) | (uint32_t)cls[d->target[j]];
                x *= 0xff51afd7ed558ccdULL;
                x ^= x >> 29;
            }
            h[s] = x;
        }
    }
    result = z;
done:
    free(keys);
    free(ids);
    free(old);
    free(h);
    return result;
}

/* Coarsest partition of the trimmed partial DFA's states compatible with acceptance and transitions, refining
 * cls (z classes, respecting acceptance, no finer than equivalence). block[s] receives each state's block (block
 * may be cls); returns the number of blocks (or -1: no memory). */
static int64_t
minimize(const ClassDfa *d, const Edges *e, int64_t c, const int32_t *cls, int64_t z, int32_t *block)
{
    int64_t n = d->n, m = d->m, result = -1;
    Partition B = {0}, C = {0};
    Marks k = {0};
    const int32_t *T = e->T;
    const int64_t *adj = e->adj, *lab = e->lab;
    int64_t big = (n > m ? n : m) + 1;
    k.M = calloc((size_t)big, sizeof(int32_t));
    k.W = malloc((size_t)big * sizeof(int32_t));
    if (!k.M || !k.W) goto done;
    if (part_init(&B, n) || part_init(&C, m)) goto done;
    /* initial state partition: cls, with its largest class first (block 0 is never used as a splitter) */
    if (n) {
        int64_t *cnt = calloc((size_t)z + 1, sizeof *cnt), *pos = calloc((size_t)z + 1, sizeof *pos);
        int32_t *num = malloc(((size_t)z + 1) * sizeof *num);
        if (!cnt || !pos || !num) {
            free(cnt);
            free(pos);
            free(num);
            goto done;
        }
        for (int64_t s = 0; s < n; s++) cnt[cls[s]]++;
        int64_t big = 0, nz = 1;
        for (int64_t x = 0; x < z; x++)
            if (cnt[x] > cnt[big]) big = x;
        for (int64_t x = 0; x < z; x++) num[x] = x == big ? 0 : (int32_t)nz++;
        for (int64_t x = 0; x < z; x++) pos[num[x] + 1] = cnt[x];
        for (int64_t b = 0; b < z; b++) {
            pos[b + 1] += pos[b];
            B.F[b] = (int32_t)pos[b];
        }
        for (int64_t s = 0; s < n; s++) {
            int32_t b = num[cls[s]];
            int64_t i = pos[b]++;
            B.E[i] = (int32_t)s;
            B.L[s] = (int32_t)i;
            B.S[s] = b;
        }
        for (int64_t b = 0; b < z; b++) B.P[b] = (int32_t)pos[b];
        B.z = z;
        free(cnt);
        free(pos);
        free(num);
    }
    /* cords: one per label that occurs */
    {
        for (int64_t a = 0; a < c; a++) {
            if (lab[a + 1] == lab[a]) continue;
            C.F[C.z] = (int32_t)lab[a];
            C.P[C.z] = (int32_t)lab[a + 1];
            for (int64_t i = lab[a]; i < lab[a + 1]; i++) {
                int32_t t = e->order[i];
                C.E[i] = t;
                C.L[t] = (int32_t)i;
                C.S[t] = (int32_t)C.z;
            }
            C.z++;
        }
    }
    /* A whole-label cord only splits blocks whose states disagree on having that label. When no initial block
     * does (the usual case: the classes hash each state's labels), the initial cords count as processed, and
     * only the parts later split off them are (Hopcroft's smaller half, as for any processed cord). */
    int64_t cc = C.z;
    for (int64_t b = 0; b < B.z && cc; b++) {
        int32_t r = B.E[B.F[b]];
        int64_t deg = d->start[r + 1] - d->start[r];
        for (int32_t i = B.F[b] + 1; i < B.P[b]; i++) {
            int32_t s = B.E[i];
            if (d->start[s + 1] - d->start[s] != deg ||
                memcmp(d->label + d->start[s], d->label + d->start[r], (size_t)deg * sizeof *d->label)) {
                cc = 0;
                break;
            }
        }
    }
    for (int64_t b = 1;;) {
        while (b < B.z) {
            for (int32_t i = B.F[b]; i < B.P[b]; i++) {
                int32_t s = B.E[i];
                for (int64_t j = adj[s]; j < adj[s + 1]; j++) part_mark(&C, &k, (int32_t)j);
            }
            part_split(&C, &k);
            b++;
        }
        if (cc == C.z) break;
        for (int32_t i = C.F[cc]; i < C.P[cc]; i++) part_mark(&B, &k, T[C.E[i]]);
        part_split(&B, &k);
        cc++;
    }
    for (int64_t s = 0; s < n; s++) block[s] = B.S[s];
    result = B.z;
done:
    free(k.M);
    free(k.W);
    part_free(&B);
    part_free(&C);
    return result;
}

/* ---- subset construction ---------------------------------------------------------------------- */

typedef struct {
    int64_t n_nfa, n_classes, final;
    int64_t *eps_start, *edge_start;
    int32_t *eps_to;
    uint64_t *edge_key; /* grouped by source state: (lo class << 44) | (hi class << 24) | target */
    uint8_t *important;
    int64_t *clo_off;
    int32_t *clo_len;
    Vec clo_pool;
    int32_t *seen, *mark, *stack;
    int32_t seen_stamp, mark_stamp;
} Nfa;

static int
closure(Nfa *a, int32_t q)
{
    if (a->clo_len[q] >= 0) return 0;
    int64_t off = a->clo_pool.n, sp = 0;
    a->seen_stamp++;
    a->seen[q] = a->seen_stamp;
    a->stack[sp++] = q;
    while (sp) {
        int32_t s = a->stack[--sp];
        if (a->important[s] && vec_push(&a->clo_pool, s)) return -1;
        for (int64_t j = a->eps_start[s]; j < a->eps_start[s + 1]; j++) {
            int32_t r = a->eps_to[j];
            if (a->seen[r] != a->seen_stamp) {
                a->seen[r] = a->seen_stamp;
                a->stack[sp++] = r;
            }
        }
    }
    sort_i32(a->clo_pool.a + off, a->clo_pool.n - off);
    a->clo_off[q] = off;
    a->clo_len[q] = (int32_t)(a->clo_pool.n - off);
    return 0;
}

typedef struct {
    Vec pool;           /* members of every DFA state's NFA set, concatenated */
    int64_t *off;       /* offset of set i in pool */
    int32_t *len;
    uint64_t *hash;
    int64_t n, cap;
    int32_t *slots;     /* open addressing: set id or -1 */
    int64_t n_slots;
} SetTable;

static int
sets_grow_slots(SetTable *t)
{
    int64_t n_slots = t->n_slots ? t->n_slots * 2 : 1024;
    int32_t *slots = malloc((size_t)n_slots * sizeof *slots);
    if (!slots) return -1;
    for (int64_t i = 0; i < n_slots; i++) slots[i] = -1;
    for (int64_t id = 0; id < t->n; id++) {
        uint64_t i = t->hash[id] & (uint64_t)(n_slots - 1);
        while (slots[i] >= 0) i = (i + 1) & (uint64_t)(n_slots - 1);
        slots[i] = (int32_t)id;
    }
    free(t->slots);
    t->slots = slots;
    t->n_slots = n_slots;
    return 0;
}

/* The id of set x (sorted), or -1 with *slot_out the empty slot where it would go. */
static int32_t
sets_find(SetTable *t, const int32_t *x, int64_t n, uint64_t h, int64_t *slot_out)
{
    uint64_t i = h & (uint64_t)(t->n_slots - 1);
    for (;;) {
        int32_t id = t->slots[i];
        if (id < 0) {
            *slot_out = (int64_t)i;
            return -1;
        }
        if (t->hash[id] == h && t->len[id] == n &&
            memcmp(t->pool.a + t->off[id], x, (size_t)n * sizeof *x) == 0)
            return id;
        i = (i + 1) & (uint64_t)(t->n_slots - 1);
    }
}

static int32_t
sets_add(SetTable *t, const int32_t *x, int64_t n, uint64_t h)
{
    if (t->n == t->cap) {
        int64_t cap = t->cap ? t->cap * 2 : 1024;
        int64_t *off = realloc(t->off, (size_t)cap * sizeof *off);
        if (off) t->off = off;
        int32_t *len = realloc(t->len, (size_t)cap * sizeof *len);
        if (len) t->len = len;
        uint64_t *hash = realloc(t->hash, (size_t)cap * sizeof *hash);
        if (hash) t->hash = hash;
        if (!off || !len || !hash) return -1;
        t->cap = cap;
    }
    if (vec_reserve(&t->pool, t->pool.n + n)) return -1;
    int32_t id = (int32_t)t->n++;
    t->off[id] = t->pool.n;
    t->len[id] = (int32_t)n;
    t->hash[id] = h;
    memcpy(t->pool.a + t->pool.n, x, (size_t)n * sizeof *x);
    t->pool.n += n;
    if (2 * t->n > t->n_slots) return sets_grow_slots(t);
    int64_t slot = 0;
    int32_t found = sets_find(t, x, n, h, &slot);
    (void)found;
    t->slots[slot] = id;
    return 0;
}

/* Powerset construction over the class alphabet with fsm._subset_construction's order and accounting. */
static int
subset_construction(Nfa *a, int64_t max_states, int64_t max_work, ClassDfa *out)
{
    int rc = RC_NOMEM;
    SetTable sets = {0};
    Vec lab = {0}, tgt = {0}, acc = {0}, uni = {0}, bounds = {0};
    int64_t *start = NULL, start_cap = 0;
    int32_t *clo_state = malloc(((size_t)a->n_nfa + 1) * sizeof *clo_state); /* the state closure(t) is, or -1 */
    uint64_t *keys = NULL;
    int64_t keys_cap = 0;
    int32_t *rlo = NULL, *rhi = NULL;
    int64_t *rbeg = NULL, *rend = NULL, r_cap = 0;
    int64_t work;

    if (!clo_state || sets_grow_slots(&sets)) goto done;
    for (int64_t q = 0; q < a->n_nfa; q++) clo_state[q] = -1;
    if (closure(a, 0)) goto done;
    {
        const int32_t *init = a->clo_pool.a + a->clo_off[0];
        int64_t n0 = a->clo_len[0];
        if (sets_add(&sets, init, n0, hash_set(init, n0))) goto done;
        int has_final = bsearch(&(int32_t){(int32_t)a->final}, init, (size_t)n0, sizeof(int32_t), cmp_i32) != NULL;
        if (vec_push(&acc, has_final)) goto done;
        work = n0;
    }
    for (int64_t i = 0; i < sets.n; i++) {
        /* the current set (only read before new sets are added: the pool may move then) */
        int64_t n_cur = sets.len[i];
        const int32_t *cur = sets.pool.a + sets.off[i];
        if (i + 2 > start_cap) {
            int64_t cap = start_cap ? 2 * start_cap : 1024;
            int64_t *p = realloc(start, (size_t)cap * sizeof *p);
            if (!p) goto done;
            start = p;
            start_cap = cap;
        }
        start[i] = lab.n;
        /* edges of the members, as sorted distinct (lo, hi, target) keys */
        int64_t n_keys = 0;
        for (int64_t x = 0; x < n_cur; x++) {
            int32_t q = cur[x];
            int64_t need = n_keys + (a->edge_start[q + 1] - a->edge_start[q]);
            if (need > keys_cap) {
                int64_t cap = keys_cap ? keys_cap : 256;
                while (cap < need) cap *= 2;
                uint64_t *p = realloc(keys, (size_t)cap * sizeof *p);
                if (!p) goto done;
                keys = p;
                keys_cap = cap;
            }
            memcpy(keys + n_keys, a->edge_key + a->edge_start[q], (size_t)(need - n_keys) * sizeof *keys);
            n_keys = need;
        }
        if (!n_keys) continue;
        sort_u64(keys, n_keys);
        /* distinct ranges, each with its distinct targets keys[rbeg[r]..rend[r]) */
        int64_t n_ranges = 0, w = 0;
        for (int64_t x = 0; x < n_keys; x++) {
            if (w && keys[x] == keys[w - 1]) continue;
            keys[w++] = keys[x];
        }
        n_keys = w;
        for (int64_t x = 0; x < n_keys; x++) {
            if (x && (keys[x] >> 24) == (keys[x - 1] >> 24)) {
                rend[n_ranges - 1] = x + 1;
                continue;
            }
            if (n_ranges == r_cap) {
                int64_t cap = r_cap ? r_cap * 2 : 64;
                int32_t *p1 = realloc(rlo, (size_t)cap * sizeof *p1);
                if (p1) rlo = p1;
                int32_t *p2 = realloc(rhi, (size_t)cap * sizeof *p2);
                if (p2) rhi = p2;
                int64_t *p3 = realloc(rbeg, (size_t)cap * sizeof *p3);
                if (p3) rbeg = p3;
                int64_t *p4 = realloc(rend, (size_t)cap * sizeof *p4);
                if (p4) rend = p4;
                if (!p1 || !p2 || !p3 || !p4) goto done;
                r_cap = cap;
            }
            rlo[n_ranges] = (int32_t)(keys[x] >> 44);
            rhi[n_ranges] = (int32_t)((keys[x] >> 24) & 0xFFFFF);
            rbeg[n_ranges] = x;
            rend[n_ranges] = x + 1;
            n_ranges++;
        }

        for (int64_t r = 0; r < n_ranges; r++) {
            work += 8 * n_cur;
            for (int64_t x = rbeg[r]; x < rend[r]; x++) {
                int32_t t = (int32_t)(keys[x] & 0xFFFFFF);
                if (a->clo_len[t] < 0 && closure(a, t)) goto done;
                work += a->clo_len[t];
            }
        }
        if (work > max_work) {
            rc = RC_WORK;
            goto done;
        }
        /* elementary segments of the class axis: the active ranges are constant inside each */
        if (vec_reserve(&bounds, 2 * n_ranges)) goto done;
        bounds.n = 0;
        for (int64_t r = 0; r < n_ranges; r++) {
            bounds.a[bounds.n++] = rlo[r];
            bounds.a[bounds.n++] = rhi[r] + 1;
        }
        sort_i32(bounds.a, bounds.n);
        for (int64_t x = 0; x + 1 < bounds.n; x++) {
            int32_t lo = bounds.a[x], hi = bounds.a[x + 1];
            if (lo == hi) continue;
            int64_t n_targets = 0;
            int32_t first = -1;
            for (int64_t r = 0; r < n_ranges && rlo[r] <= lo; r++) {
                if (rhi[r] + 1 < hi) continue;
                if (!n_targets) first = (int32_t)(keys[rbeg[r]] & 0xFFFFFF);
                n_targets += rend[r] - rbeg[r];
            }
            if (!n_targets) continue;
            /* most segments have one target, whose closure is usually a known state already */
            int32_t id = n_targets == 1 ? clo_state[first] : -1;
            if (id < 0) {
                a->mark_stamp++;
                uni.n = 0;
                for (int64_t r = 0; r < n_ranges && rlo[r] <= lo; r++) {
                    if (rhi[r] + 1 < hi) continue;
                    for (int64_t y = rbeg[r]; y < rend[r]; y++) {
                        int32_t t = (int32_t)(keys[y] & 0xFFFFFF);
                        const int32_t *cl = a->clo_pool.a + a->clo_off[t];
                        int32_t cn = a->clo_len[t];
                        if (vec_reserve(&uni, uni.n + cn)) goto done;
                        for (int32_t z = 0; z < cn; z++) {
                            int32_t s = cl[z];
                            if (a->mark[s] != a->mark_stamp) {
                                a->mark[s] = a->mark_stamp;
                                uni.a[uni.n++] = s;
                            }
                        }
                    }
                }
                if (n_targets > 1) sort_i32(uni.a, uni.n); /* a single closure is already sorted */
                uint64_t h = hash_set(uni.a, uni.n);
                int64_t slot = 0;
                id = sets_find(&sets, uni.a, uni.n, h, &slot);
                if (id < 0) {
                    if (sets.n >= max_states) {
                        rc = RC_STATES;
                        goto done;
                    }
                    work += uni.n;
                    id = (int32_t)sets.n;
                    if (sets_add(&sets, uni.a, uni.n, h)) goto done;
                    int has_final = a->mark[a->final] == a->mark_stamp;
                    if (vec_push(&acc, has_final)) goto done;
                }
                if (n_targets == 1) clo_state[first] = id;
            }
            if (lab.n + (hi - lo) >= INT32_MAX || vec_reserve(&lab, lab.n + (hi - lo)) ||
                vec_reserve(&tgt, lab.n + (hi - lo)))
                goto done;
            for (int32_t k = lo; k < hi; k++) {
                lab.a[lab.n++] = k;
                tgt.a[tgt.n++] = id;
            }
        }
    }
    start[sets.n] = lab.n;
    out->n = sets.n;
    out->m = lab.n;
    out->start = start;
    out->label = lab.a;
    out->target = tgt.a;
    start = NULL;
    lab.a = tgt.a = NULL;
    out->accepting = malloc((size_t)sets.n + 1);
    if (!out->accepting) goto done;
    for (int64_t s = 0; s < sets.n; s++) out->accepting[s] = (uint8_t)acc.a[s];
    rc = RC_OK;
done:
    free(sets.pool.a);
    free(sets.off);
    free(sets.len);
    free(sets.hash);
    free(sets.slots);
    free(start);
    free(lab.a);
    free(tgt.a);
    free(acc.a);
    free(clo_state);
    free(uni.a);
    free(bounds.a);
    free(keys);
    free(rlo);
    free(rhi);
    free(rbeg);
    free(rend);
    return rc;
}

/* ---- the whole pipeline ------------------------------------------------------------------------ */

typedef struct {
    int32_t *table;   /* [n, n_classes], canonical */
    uint8_t *accepting;
    int32_t *distance;
    uint8_t byte_class[256];
    int64_t n, n_classes, n_byte_classes;
} Result;

static int
run(Builder *b, int64_t n_special, int64_t max_states, int64_t max_work, Result *res)
{
    int rc = RC_NOMEM;
    Nfa a = {0};
    ClassDfa d = {0};
    Edges e = {0};
    int32_t *eps_order = NULL, *edge_order = NULL, *dist = NULL, *new_id = NULL, *block = NULL;
    int32_t *rep = NULL, *order = NULL;

    b->n_states = 1;
    int64_t pos = 0;
    a.final = attach(b, &pos, 0, 0);
    if (!b->err && pos != b->code_len) b->err = RC_BAD;
    if (b->err) return b->err;
    a.n_nfa = b->n_states;

    /* byte classes: intervals cut at every edge bound, numbered in byte order; specials after */
    uint8_t cut[257] = {0};
    cut[0] = cut[256] = 1;
    for (int64_t e = 0; e < b->ed_lo.n; e++)
        if (b->ed_lo.a[e] < 256) {
            cut[b->ed_lo.a[e]] = 1;
            cut[b->ed_hi.a[e] + 1] = 1;
        }
    int32_t n_byte = 0;
    for (int k = 0; k < 256; k++) {
        n_byte += cut[k];
        res->byte_class[k] = (uint8_t)(n_byte - 1);
    }
    a.n_classes = n_byte + n_special;
    if (a.n_classes >= MAX_CLASSES) return RC_BAD;

    if (csr(&b->ep_from, a.n_nfa, &a.eps_start, &eps_order) ||
        csr(&b->ed_from, a.n_nfa, &a.edge_start, &edge_order))
        goto done;
    a.eps_to = malloc(((size_t)b->ep_to.n + 1) * sizeof(int32_t));
    a.edge_key = malloc(((size_t)b->ed_lo.n + 1) * sizeof(uint64_t));
    a.important = calloc((size_t)a.n_nfa, 1);
    a.clo_off = malloc((size_t)a.n_nfa * sizeof(int64_t));
    a.clo_len = malloc((size_t)a.n_nfa * sizeof(int32_t));
    a.seen = calloc((size_t)a.n_nfa, sizeof(int32_t));
    a.mark = calloc((size_t)a.n_nfa, sizeof(int32_t));
    a.stack = malloc((size_t)a.n_nfa * sizeof(int32_t));
    if (!a.eps_to || !a.edge_key || !a.important || !a.clo_off || !a.clo_len ||
        !a.seen || !a.mark || !a.stack)
        goto done;
    for (int64_t j = 0; j < b->ep_to.n; j++) a.eps_to[j] = b->ep_to.a[eps_order[j]];
    for (int64_t j = 0; j < b->ed_lo.n; j++) {
        int32_t e = edge_order[j], lo = b->ed_lo.a[e], hi = b->ed_hi.a[e];
        uint64_t clo = lo < 256 ? res->byte_class[lo] : n_byte + (lo - 256);
        uint64_t chi = hi < 256 ? res->byte_class[hi] : n_byte + (hi - 256);
        a.edge_key[j] = clo << 44 | chi << 24 | (uint64_t)b->ed_to.a[e];
    }
    for (int64_t s = 0; s < a.n_nfa; s++) {
        a.important[s] = a.edge_start[s + 1] > a.edge_start[s] || s == a.final;
        a.clo_len[s] = -1;
    }

    rc = subset_construction(&a, max_states, max_work, &d);
    if (rc != RC_OK) goto done;
    rc = RC_NOMEM;
    int64_t nc = a.n_classes, n = d.n;

    /* trim: keep the states that can reach acceptance (all are reachable) */
    dist = calloc((size_t)n + 1, sizeof *dist);
    new_id = malloc(((size_t)n + 1) * sizeof *new_id);
    if (!dist || !new_id || edges_build(&d, nc, &e) || reverse_bfs(&e, n, d.accepting, dist)) goto done;
    if (dist[0] < 0) {
        rc = RC_EMPTY;
        goto done;
    }
    int64_t live = 0;
    for (int64_t s = 0; s < n; s++) new_id[s] = dist[s] >= 0 ? (int32_t)live++ : DEAD;
    if (live < n) { /* drop the dead states and the transitions into them (rows only move down) */
        int64_t m = 0, from = 0;
        for (int64_t s = 0; s < n; s++) {
            int64_t to = d.start[s + 1];
            if (new_id[s] >= 0) {
                d.start[new_id[s]] = m;
                for (int64_t j = from; j < to; j++)
                    if (new_id[d.target[j]] >= 0) {
                        d.label[m] = d.label[j];
                        d.target[m++] = new_id[d.target[j]];
                    }
                d.accepting[new_id[s]] = d.accepting[s];
                dist[new_id[s]] = dist[s];
            }
            from = to;
        }
        d.start[live] = m;
        d.n = n = live;
        d.m = m;
        edges_free(&e);
        if (edges_build(&d, nc, &e)) goto done;
    }

    /* partition refinement */
    block = malloc(((size_t)n + 1) * sizeof *block);
    if (!block) goto done;
    int64_t z = moore_classes(&d, dist, 1, block);
    if (z < 0) goto done;
    int64_t nb = minimize(&d, &e, nc, block, z, block);
    if (nb < 0) goto done;
    edges_free(&e);
    rep = malloc(((size_t)nb + 1) * sizeof *rep);
    order = malloc(((size_t)nb + 1) * sizeof *order);
    res->table = malloc(((size_t)nb * nc + 1) * sizeof *res->table);
    res->accepting = malloc((size_t)nb + 1);
    res->distance = malloc(((size_t)nb + 1) * sizeof(int32_t));
    if (!rep || !order || !res->table || !res->accepting || !res->distance) goto done;
    for (int64_t x = 0; x < nb; x++) rep[x] = -1;
    for (int64_t s = 0; s < n; s++)
        if (rep[block[s]] < 0) rep[block[s]] = (int32_t)s;

    /* the quotient in canonical numbering: BFS from the initial block, classes (hence symbols) in increasing
     * order, read off each block's first state; distance is a property of the language, so it carries over */
    for (int64_t x = 0; x < nb; x++) new_id[x] = DEAD;
    for (int64_t i = 0; i < nb * nc; i++) res->table[i] = DEAD;
    int64_t n_order = 0;
    order[n_order++] = block[0];
    new_id[block[0]] = 0;
    for (int64_t h = 0; h < n_order; h++) {
        int32_t r = rep[order[h]], *row = res->table + h * nc;
        for (int64_t j = d.start[r]; j < d.start[r + 1]; j++) {
            int32_t t = block[d.target[j]];
            if (new_id[t] < 0) {
                new_id[t] = (int32_t)n_order;
                order[n_order++] = t;
            }
            row[d.label[j]] = new_id[t];
        }
        res->accepting[h] = d.accepting[r];
        res->distance[h] = dist[r];
    }
    res->n = n_order;
    res->n_classes = nc;
    res->n_byte_classes = n_byte;
    rc = RC_OK;
done:
    edges_free(&e);
    free(eps_order);
    free(edge_order);
    free(a.eps_start);
    free(a.edge_start);
    free(a.eps_to);
    free(a.edge_key);
    free(a.important);
    free(a.clo_off);
    free(a.clo_len);
    free(a.clo_pool.a);
    free(a.seen);
    free(a.mark);
    free(a.stack);
    free(d.start);
    free(d.label);
    free(d.target);
    free(d.accepting);
    free(dist);
    free(new_id);
    free(block);
    free(rep);
    free(order);
    return rc;
}

static void
builder_free(Builder *b)
{
    free(b->ep_from.a);
    free(b->ep_to.a);
    free(b->ed_from.a);
    free(b->ed_lo.a);
    free(b->ed_hi.a);
    free(b->ed_to.a);
}

static int
get_i32(PyObject *obj, Py_buffer *view, const char *name)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (view->itemsize != 4 || !view->format || (strcmp(view->format, "i") && strcmp(view->format, "<i") &&
                                                 strcmp(view->format, "=i"))) {
        PyErr_Format(PyExc_ValueError, "%s: expected an int32 buffer", name);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* The canonical class form of the final table: symbols with equal columns share a class, classes numbered in
 * order of their first symbol. sym_class[256 + n_special] receives each symbol's class, *table_out a fresh
 * [n, classes] table; returns the number of classes (-1: no memory). Equal tables give equal forms, whatever
 * byte classes the NFA happened to cut (that is what makes it a fingerprint input). */
static int64_t
symbol_classes(const Result *res, int64_t n_special, int32_t *sym_class, int32_t **table_out)
{
    int64_t n = res->n, nc = res->n_classes, width = 256 + n_special, m = 0, result = -1;
    uint64_t *hash = malloc(((size_t)nc + 1) * sizeof *hash);
    int32_t *group = malloc(((size_t)nc + 1) * sizeof *group), *rep = malloc(((size_t)nc + 1) * sizeof *rep);
    int32_t *table = NULL;
    if (!hash || !group || !rep) goto done;
    for (int64_t k = 0; k < nc; k++) {
        hash[k] = 0x9E3779B97F4A7C15ULL;
        group[k] = -1;
    }
    for (int64_t s = 0; s < n; s++) {
        const int32_t *row = res->table + s * nc;
        for (int64_t k = 0; k < nc; k++) hash[k] = (hash[k] ^ (uint32_t)row[k]) * 0xff51afd7ed558ccdULL;
    }
    for (int64_t x = 0; x < width; x++) {
        int64_t k = x < 256 ? res->byte_class[x] : res->n_byte_classes + (x - 256);
        if (group[k] < 0) {
            for (int64_t j = 0; j < m && group[k] < 0; j++) {
                int64_t r = rep[j], s = 0;
                if (hash[r] != hash[k]) continue;
                while (s < n && res->table[s * nc + r] == res->table[s * nc + k]) s++;
                if (s == n) group[k] = (int32_t)j;
            }
            if (group[k] < 0) {
                rep[m] = (int32_t)k;
                group[k] = (int32_t)m++;
            }
        }
        sym_class[x] = group[k];
    }
    table = malloc(((size_t)n * m + 1) * sizeof *table);
    if (!table) goto done;
    for (int64_t s = 0; s < n; s++)
        for (int64_t j = 0; j < m; j++) table[s * m + j] = res->table[s * nc + rep[j]];
    *table_out = table;
    result = m;
done:
    free(hash);
    free(group);
    free(rep);
    return result;
}

PyDoc_STRVAR(compile_doc,
"compile(program, templates, template_offsets, n_special, max_states, max_work)\n"
"    -> (n_states, accepting: bytes, distance: bytes, symbol_classes: bytes, class_table: bytes) | int\n\n"
"Build the NFA the program describes and return its minimal trimmed canonical DFA in its canonical class form:\n"
"accepting one byte per state, distance int32 per state, each symbol's class (int32 [256 + n_special]) and the\n"
"table by class (int32 [n_states, n_classes], DEAD = -1; see symbol_classes). On a\n"
"budget outcome, returns an int instead: 1 = subset work over max_work, 2 = more than max_states DFA\n"
"states, 3 = the language is empty.");

static PyObject *
compile_(PyObject *self, PyObject *args)
{
    PyObject *o_code, *o_tpl, *o_off;
    long long n_special, max_states, max_work;
    if (!PyArg_ParseTuple(args, "OOOLLL", &o_code, &o_tpl, &o_off, &n_special, &max_states, &max_work))
        return NULL;
    if (n_special < 0 || n_special > 1000000) {
        PyErr_SetString(PyExc_ValueError, "compile: bad n_special");
        return NULL;
    }
    Py_buffer bc, bt, bo;
    if (get_i32(o_code, &bc, "program") < 0) return NULL;
    if (get_i32(o_tpl, &bt, "templates") < 0) {
        PyBuffer_Release(&bc);
        return NULL;
    }
    if (get_i32(o_off, &bo, "template_offsets") < 0) {
        PyBuffer_Release(&bc);
        PyBuffer_Release(&bt);
        return NULL;
    }
    Builder b = {0};
    b.code = bc.buf;
    b.code_len = bc.len / 4;
    b.tpl = bt.buf;
    b.tpl_len = bt.len / 4;
    b.tpl_off = bo.buf;
    b.n_tpl = bo.len / 4;
    b.n_symbols = (int32_t)(256 + n_special);
    Result res = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = run(&b, n_special, max_states, max_work, &res);
    Py_END_ALLOW_THREADS
    builder_free(&b);
    PyBuffer_Release(&bc);
    PyBuffer_Release(&bt);
    PyBuffer_Release(&bo);
    PyObject *out = NULL;
    if (rc == RC_OK) {
        int64_t width = 256 + n_special;
        int32_t *sym_class = malloc((size_t)width * sizeof *sym_class), *classes = NULL;
        int64_t m = sym_class ? symbol_classes(&res, n_special, sym_class, &classes) : -1;
        if (m < 0) {
            PyErr_NoMemory();
        } else {
            out = Py_BuildValue("(Ly#y#y#y#)", (long long)res.n, (const char *)res.accepting, (Py_ssize_t)res.n,
                                (const char *)res.distance, (Py_ssize_t)(res.n * 4), (const char *)sym_class,
                                (Py_ssize_t)(width * 4), (const char *)classes, (Py_ssize_t)(res.n * m * 4));
        }
        free(sym_class);
        free(classes);
    } else if (rc == RC_NOMEM) {
        PyErr_NoMemory();
    } else if (rc == RC_BAD) {
        PyErr_SetString(PyExc_ValueError, "compile: malformed program or templates");
    } else {
        out = PyLong_FromLong(rc);
    }
    free(res.table);
    free(res.accepting);
    free(res.distance);
    return out;
}

static PyMethodDef fsm_methods[] = {
    {"compile", compile_, METH_VARARGS, compile_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fsm_module = {
    PyModuleDef_HEAD_INIT, "constrained._fsm",
    "Native NFA → minimal DFA compilation behind constrained.fsm.compile_dfa (see _fsm.c).", -1, fsm_methods,
};

PyMODINIT_FUNC
PyInit__fsm(void)
{
    return PyModule_Create(&fsm_module);
}
