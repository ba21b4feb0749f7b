/* constrained._kernel: the token-trie walk behind per-state masks, the in-place mask writers, and the graph
 * searches over a pushdown grammar's rule table.
 *
 * Owns these hot loops and nothing else; every array is handed in by index.py through the buffer
 * protocol (numpy arrays, C-contiguous), sizes are checked here, and errors are ValueErrors.
 *
 *   build_trie   token byte strings -> sorted (memcmp), then a trie flattened in PREORDER
 *                (node byte, node depth, subtree end, terminal node of each string)
 *   check        validates a trie + transition table (class form) once, so that `walk` can trust them
 *   walk         DFA state x trie -> every token id whose bytes stay alive, and the state they lead to
 *                (ids sorted ascending). A DEAD transition skips the whole subtree. Tables are read in their
 *                class form (classes[s, symbol_class[x]]), never expanded by symbol.
 *   min_tokenization   fewest tokens that spell a given symbol string (dynamic programming with
 *                trie prefix lookups); used for budget-aware closing.
 *   follow_hops  the canonical shortest completion from a state, one hop per state (the symbol string
 *                min_tokenization is then asked about).
 *   completion_bounds   the same bound over a pushdown grammar's rules: chains tokenized piecewise, plus
 *                the bounds of the calls they stop at.
 *   apply_allowed / apply_disallowed / apply_bytemask   write -inf into float32 logits, in place.
 *   expand_runs  checks and decodes a run-length table read from the grammar cache, in one pass.
 *   or_bits      the union of bitmasks and its count (a pushdown mask's parts, combined).
 *   expand_classes   a DFA's table by symbol from its class form (take along axis 1, at memory speed).
 *   lay_out_rules   a pushdown grammar's table by combined class from its rules' DFAs (classes combined, states
 *                offset, call moves to a side table) and its reverse edges (CSR) for the graph searches below.
 *   row_classes  equal rows share a class, numbered by first appearance (symbol classes, hashed).
 *   shortest_completions / bytes_to_boundary   the rule-table graph searches a pushdown grammar is
 *                laid out with (Dijkstra over symbols and calls; backward BFS to call/return states).
 *   first_class_into   the canonical class of each shortest completion's symbol hop.
 *
 * Trie layout (n nodes, node 0 is the root at depth 0, end[0] == n):
 *   node_byte[i]  the byte on the edge into node i
 *   node_depth[i] its depth == length of the prefix it spells
 *   node_end[i]   one past the last node of its subtree (preorder => the subtree is [i, end[i]) )
 *   tok_start[i]..tok_start[i+1]  CSR range of token ids whose bytes end exactly at node i
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define DEAD (-1)
#define INF_TOKENS (INT32_MAX / 2)

/* ---- buffer helpers -------------------------------------------------------------------------- */

static int
get_buf(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t itemsize, const char *name)
{
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        return -1;
    }
    if (itemsize > 0 && view->itemsize != itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: expected items of %zd bytes, got %zd", name, itemsize,
                     view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static Py_ssize_t
n_items(Py_buffer *v)
{
    return v->itemsize ? v->len / v->itemsize : 0;
}

/* Whether any of `count` table entries is outside [DEAD, n): one branch-free pass, which the compiler vectorizes
 * (a loop that stops at the first bad entry would not be; nor would this one, inlined into a caller that only
 * tests the result: hence noinline). */
static __attribute__((noinline)) int
table_out_of_range(const int32_t *T, Py_ssize_t count, Py_ssize_t n)
{
    if (n > INT32_MAX) return 1;
    const int32_t top = (int32_t)n; /* compared as int32: a mixed-width compare is not vectorized */
    int bad = 0;
    for (Py_ssize_t k = 0; k < count; k++) bad |= (T[k] >= top) | (T[k] < DEAD);
    return bad;
}

/* Whether any of `count` entries is below `floor`: branch-free like table_out_of_range. */
static __attribute__((noinline)) int
any_below(const int32_t *T, Py_ssize_t count, int32_t floor)
{
    int bad = 0;
    for (Py_ssize_t k = 0; k < count; k++) bad |= T[k] < floor;
    return bad;
}

/* Set bits of a word, branch-free (SWAR): the build targets any x86-64, where __builtin_popcount without -mpopcnt
 * is a libgcc call per word (seen in perf: a tenth of a string state's mask). */
static inline int
popcount32(uint32_t x)
{
    x = x - ((x >> 1) & 0x55555555u);
    x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
    x = (x + (x >> 4)) & 0x0F0F0F0Fu;
    return (int)((x * 0x01010101u) >> 24);
}

/* Whether a class-form table is consistent: `classes` (int32 [n_states, n_classes], 2-D) with every entry of
 * `sc` (the class of each symbol; at least the 256 bytes) a column of it. Sets *n_states and *n_classes. */
static int
class_form_ok(Py_buffer *classes, Py_buffer *sc, Py_ssize_t *n_states, Py_ssize_t *n_classes)
{
    Py_ssize_t ncls = classes->ndim == 2 ? classes->shape[1] : 0;
    *n_classes = ncls;
    *n_states = ncls ? n_items(classes) / ncls : 0;
    if (!ncls || n_items(classes) != *n_states * ncls || n_items(sc) < 256) return 0;
    const int32_t *c = (const int32_t *)sc->buf;
    int bad = 0;
    for (Py_ssize_t j = 0; j < n_items(sc); j++) bad |= (c[j] < 0) | (c[j] >= ncls);
    return !bad;
}

/* ---- build_trie ------------------------------------------------------------------------------ */

static const uint8_t *sort_blob;  /* qsort context; build_trie holds the GIL throughout */
static const int64_t *sort_off;

static int
cmp_token(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    int64_t lx = sort_off[x + 1] - sort_off[x], ly = sort_off[y + 1] - sort_off[y];
    int64_t m = lx < ly ? lx : ly;
    int c = memcmp(sort_blob + sort_off[x], sort_blob + sort_off[y], (size_t)m);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return (x > y) - (x < y);
}

PyDoc_STRVAR(build_trie_doc,
"build_trie(blob, offsets, include, node_byte, node_depth, node_end, tok_ids, terminal)\n"
"    -> (n_nodes, n_tokens, max_depth)\n\n"
"blob: every token's bytes concatenated in id order; offsets: int64[V+1]; include: uint8[V] (non-zero =\n"
"put the token in the trie; it must be non-empty). Sorts the included tokens by bytes (ties by id) and\n"
"flattens their trie in preorder. Outputs: node_byte uint8[cap], node_depth int32[cap], node_end\n"
"int32[cap] with cap >= 1 + len(blob); tok_ids int32[V] (sorted ids, first n_tokens valid); terminal\n"
"int32[V] (node where tok_ids[k] ends).");

static PyObject *
build_trie(PyObject *self, PyObject *args)
{
    PyObject *objs[8];
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5],
                          &objs[6], &objs[7])) {
        return NULL;
    }
    Py_buffer blob, off, inc, nbyte, ndepth, nend, tids, term;
    Py_buffer *bufs[8] = {&blob, &off, &inc, &nbyte, &ndepth, &nend, &tids, &term};
    const Py_ssize_t sizes[8] = {1, 8, 1, 1, 4, 4, 4, 4};
    const int wr[8] = {0, 0, 0, 1, 1, 1, 1, 1};
    const char *names[8] = {"blob", "offsets", "include", "node_byte", "node_depth", "node_end", "tok_ids",
                            "terminal"};
    int got = 0;
    PyObject *result = NULL;
    int32_t *path = NULL;
    for (; got < 8; got++) {
        if (get_buf(objs[got], bufs[got], wr[got], sizes[got], names[got]) < 0) goto done;
    }
    const uint8_t *s = (const uint8_t *)blob.buf;
    const int64_t *o = (const int64_t *)off.buf;
    const uint8_t *in = (const uint8_t *)inc.buf;
    Py_ssize_t V = n_items(&off) - 1;
    Py_ssize_t cap = n_items(&nbyte);
    if (V < 0 || n_items(&inc) != V || n_items(&tids) != V || n_items(&term) != V || n_items(&ndepth) != cap ||
        n_items(&nend) != cap || cap < blob.len + 1 || cap > INT32_MAX || V > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "build_trie: inconsistent array sizes");
        goto done;
    }
    int32_t *ids = (int32_t *)tids.buf;
    int32_t *tm = (int32_t *)term.buf;
    Py_ssize_t n = 0;
    int64_t max_len = 0;
    for (Py_ssize_t v = 0; v < V; v++) {
        if (o[v] < 0 || o[v + 1] < o[v] || o[v + 1] > blob.len) {
            PyErr_SetString(PyExc_ValueError, "build_trie: offsets must be ascending inside blob");
            goto done;
        }
        if (!in[v]) continue;
        int64_t len = o[v + 1] - o[v];
        if (len <= 0) {
            PyErr_SetString(PyExc_ValueError, "build_trie: included tokens must be non-empty");
            goto done;
        }
        if (len > max_len) max_len = len;
        ids[n++] = (int32_t)v;
    }
    sort_blob = s;
    sort_off = o;
    qsort(ids, (size_t)n, sizeof(int32_t), cmp_token);

    uint8_t *nb = (uint8_t *)nbyte.buf;
    int32_t *nd = (int32_t *)ndepth.buf;
    int32_t *ne = (int32_t *)nend.buf;
    path = (int32_t *)malloc(sizeof(int32_t) * (size_t)(max_len + 1));
    if (!path) {
        PyErr_NoMemory();
        goto done;
    }
    int32_t n_nodes = 1;
    nb[0] = 0;
    nd[0] = 0;
    path[0] = 0;
    int64_t cur_len = 0; /* length of the open path (the previous string) */
    const uint8_t *prev = NULL;
    int64_t prev_len = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *str = s + o[ids[i]];
        int64_t len = o[ids[i] + 1] - o[ids[i]];
        int64_t lcp = 0;
        if (prev) {
            int64_t m = len < prev_len ? len : prev_len;
            while (lcp < m && str[lcp] == prev[lcp]) lcp++;
        }
        if (lcp < len) {
            for (int64_t d = lcp + 1; d <= cur_len; d++) ne[path[d]] = n_nodes; /* close the old branch */
            for (int64_t d = lcp + 1; d <= len; d++) {
                nb[n_nodes] = str[d - 1];
                nd[n_nodes] = (int32_t)d;
                path[d] = n_nodes;
                n_nodes++;
            }
            cur_len = len;
        }
        tm[i] = path[len];
        prev = str;
        prev_len = len;
    }
    for (int64_t d = 0; d <= cur_len; d++) ne[path[d]] = n_nodes;
    ne[0] = n_nodes;
    result = Py_BuildValue("(inn)", n_nodes, n, (Py_ssize_t)max_len);
done:
    free(path);
    while (got > 0) {
        got--;
        PyBuffer_Release(bufs[got]);
    }
    return result;
}

/* ---- walk ------------------------------------------------------------------------------------ */

typedef struct {
    int32_t id;
    int32_t next;
} pair_t;

#define SORT_FEW 32

/* Sort (id, next) pairs by id in place without comparisons (a comparison sort of a few thousand pairs cost more
 * than the walk that found them): the next states go into scratch[id] (int32[vsize], all -1, restored), then
 * one ordered pass emits them: over a bitset of the ids when they are few, over scratch itself when they are
 * many (a quarter of the vocabulary or more); up to SORT_FEW pairs by insertion. 0, or 1 for an id out of range, 2
 * for no memory. */
static int
sort_by_id(int32_t *oid, int32_t *onext, Py_ssize_t *count_io, int32_t *scr, Py_ssize_t vsize)
{
    Py_ssize_t count = *count_io, n_words = (vsize + 31) / 32;
    uint32_t *seen = NULL;
    if (count <= SORT_FEW) { /* a walk below a few exits: insertion sort, not a pass over a vocabulary's bits */
        for (Py_ssize_t k = 0; k < count; k++) {
            int32_t id = oid[k], next = onext[k];
            if (id < 0 || id >= vsize) return 1;
            Py_ssize_t j = k;
            for (; j > 0 && oid[j - 1] > id; j--) {
                oid[j] = oid[j - 1];
                onext[j] = onext[j - 1];
            }
            oid[j] = id;
            onext[j] = next;
        }
        return 0;
    }
    if (count * 4 < vsize && !(seen = (uint32_t *)calloc((size_t)(n_words ? n_words : 1), sizeof(uint32_t)))) {
        return 2;
    }
    for (Py_ssize_t k = 0; k < count; k++) {
        int32_t id = oid[k];
        if (id < 0 || id >= vsize) {
            for (Py_ssize_t v = 0; v < vsize; v++) scr[v] = -1;
            free(seen);
            return 1;
        }
        if (seen) seen[id >> 5] |= 1u << (id & 31);
        scr[id] = onext[k];
    }
    Py_ssize_t c = 0;
    if (seen) {
        for (Py_ssize_t w = 0; w < n_words; w++) {
            for (uint32_t word = seen[w]; word; word &= word - 1u) {
                int32_t id = (int32_t)(w * 32 + __builtin_ctz(word));
                oid[c] = id;
                onext[c++] = scr[id];
                scr[id] = -1;
            }
        }
        free(seen);
    } else {
        for (Py_ssize_t v = 0; v < vsize; v++) {
            if (scr[v] >= 0) {
                oid[c] = (int32_t)v;
                onext[c++] = scr[v];
                scr[v] = -1;
            }
        }
    }
    *count_io = c; /* duplicate ids cannot occur: each id ends at one node */
    return 0;
}

/* Append the tokens ending at trie node i (reached in state ns) to the outputs; returns the new count. Most
 * nodes end at most one token and about half end one, unpredictably, so that case is branch-free: the slot at
 * `count` is written whether or not it is kept (when count < n_tok it is in bounds). */
static inline Py_ssize_t
emit_tokens(int32_t *oid, int32_t *onext, Py_ssize_t count, const int32_t *ts, const int32_t *ti, Py_ssize_t i,
            int32_t ns, Py_ssize_t n_tok)
{
    int32_t k0 = ts[i], k1 = ts[i + 1];
    if (k1 - k0 <= 1 && count < n_tok) {
        oid[count] = ti[k0 < n_tok ? k0 : n_tok - 1];
        onext[count] = ns;
        return count + (k1 - k0);
    }
    for (int32_t k = k0; k < k1; k++) {
        oid[count] = ti[k];
        onext[count++] = ns;
    }
    return count;
}

PyDoc_STRVAR(walk_doc,
"walk(classes, symbol_class, state, node_byte, node_depth, node_end, tok_start, tok_ids, max_depth,\n"
"     out_ids, out_next, scratch) -> count\n\n"
"Walk the preorder trie from DFA `state`; write every token id whose bytes all have live\n"
"transitions into out_ids[:count] (ascending) and the state reached into out_next[:count].\n"
"The table in its class form: the state after byte x from s is classes[s, symbol_class[x]] (classes int32\n"
"[S, n_classes], -1 = dead; symbol_class int32[at least 256], each a column of classes; a table by symbol is\n"
"its own class form with symbol_class = 0..255). out arrays: int32[len(tok_ids)];\n"
"scratch: int32[V] all -1 (restored on return), V > every token id.");

static PyObject *
walk(PyObject *self, PyObject *args)
{
    PyObject *o_t, *o_sc, *o_byte, *o_depth, *o_end, *o_ts, *o_tid, *o_oid, *o_onext, *o_scr;
    Py_ssize_t state, max_depth;
    if (!PyArg_ParseTuple(args, "OOnOOOOOnOOO", &o_t, &o_sc, &state, &o_byte, &o_depth, &o_end, &o_ts,
                          &o_tid, &max_depth, &o_oid, &o_onext, &o_scr)) {
        return NULL;
    }
    Py_buffer bt, bc, bb, bd, be, bs, bi, boi, bon, bsc;
    Py_buffer *bufs[10] = {&bt, &bc, &bb, &bd, &be, &bs, &bi, &boi, &bon, &bsc};
    PyObject *objs[10] = {o_t, o_sc, o_byte, o_depth, o_end, o_ts, o_tid, o_oid, o_onext, o_scr};
    const Py_ssize_t sizes[10] = {4, 4, 1, 4, 4, 4, 4, 4, 4, 4};
    const int wr[10] = {0, 0, 0, 0, 0, 0, 0, 1, 1, 1};
    const char *names[10] = {"classes", "symbol_class", "node_byte", "node_depth", "node_end", "tok_start",
                             "tok_ids", "out_ids", "out_next", "scratch"};
    int got = 0;
    PyObject *result = NULL;
    int32_t stack_states[512];
    int32_t *states = stack_states;
    for (; got < 10; got++) {
        if (get_buf(objs[got], bufs[got], wr[got], sizes[got], names[got]) < 0) goto done;
    }
    const int32_t *T = (const int32_t *)bt.buf;
    const int32_t *sc = (const int32_t *)bc.buf;
    Py_ssize_t n_states, ncls;
    int form_ok = class_form_ok(&bt, &bc, &n_states, &ncls);
    Py_ssize_t n_nodes = n_items(&bb);
    Py_ssize_t n_tok = n_items(&bi);
    Py_ssize_t vsize = n_items(&bsc);
    if (!form_ok || state < 0 || state >= n_states ||
        n_items(&bd) != n_nodes || n_items(&be) != n_nodes || n_items(&bs) != n_nodes + 1 ||
        n_items(&boi) < n_tok || n_items(&bon) < n_tok || max_depth < 0 || n_nodes < 1) {
        PyErr_SetString(PyExc_ValueError, "walk: inconsistent array sizes");
        goto done;
    }
    if (max_depth + 1 > 512) {
        states = (int32_t *)malloc(sizeof(int32_t) * (size_t)(max_depth + 1));
        if (!states) {
            PyErr_NoMemory();
            goto done;
        }
    }
    const uint8_t *nb = (const uint8_t *)bb.buf;
    const int32_t *nd = (const int32_t *)bd.buf;
    const int32_t *ne = (const int32_t *)be.buf;
    const int32_t *ts = (const int32_t *)bs.buf;
    const int32_t *ti = (const int32_t *)bi.buf;
    int32_t *oid = (int32_t *)boi.buf;
    int32_t *onext = (int32_t *)bon.buf;
    int32_t *scr = (int32_t *)bsc.buf;
    Py_ssize_t count = 0;
    int bad = 0;

    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t d = 0; d <= max_depth; d++) states[d] = (int32_t)state; /* never an unset entry */
    Py_ssize_t i = 1;
    /* The trie and the table were validated by `check` (index.py calls it once per trie and per DFA), so
     * the hot loop trusts them: depth in [1, max_depth], end in (i, n_nodes], targets in [-1, n_states). */
    while (i < n_nodes) {
        int32_t d = nd[i];
        int32_t ns = T[(Py_ssize_t)states[d - 1] * ncls + sc[nb[i]]];
        if (ns < 0) {
            i = ne[i];
            continue;
        }
        states[d] = ns;
        count = emit_tokens(oid, onext, count, ts, ti, i, ns, n_tok);
        i++;
    }
    if (!bad) bad = sort_by_id(oid, onext, &count, scr, vsize);
    Py_END_ALLOW_THREADS

    if (bad == 2) {
        PyErr_NoMemory();
        goto done;
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "walk: corrupt trie or transition table");
        goto done;
    }
    result = PyLong_FromSsize_t(count);
done:
    if (states != stack_states) free(states);
    while (got > 0) {
        got--;
        PyBuffer_Release(bufs[got]);
    }
    return result;
}

PyDoc_STRVAR(walk_rule_doc,
"walk_rule(classes, symbol_class, state, boundary, roots, node_byte, node_depth, node_end, tok_start, tok_ids,\n"
"          max_depth, out_ids, out_next, out_exit_nodes, out_exit_states, scratch) -> (count, n_exits)\n\n"
"`walk` over the subtrees of the trie nodes `roots` (int32, ascending, none inside another's subtree; [0] = the\n"
"whole trie), each from `state`, for a pushdown grammar's combined rule table in its class form (the state\n"
"after byte x from s is classes[s, symbol_class[x]]; classes int32 [n_states, n_classes], symbol_class int32\n"
"[at least 256], each a column of classes: no rule's rows are expanded by symbol): every token below a root whose\n"
"remaining bytes stay in the table is written to out_ids/out_next (ascending ids); every node below a root that\n"
"has children and whose state is a BOUNDARY (boundary[state] != 0: the state can call a rule or return from\n"
"one) is written to out_exit_nodes/out_exit_states, in preorder, so the caller continues those subtrees through\n"
"the stack. Exit outputs: int32[n_nodes]; the other arrays as for `walk`.");

static PyObject *
walk_rule(PyObject *self, PyObject *args)
{
    PyObject *o[14];
    Py_ssize_t state, max_depth;
    if (!PyArg_ParseTuple(args, "OOnOOOOOOOnOOOOO", &o[0], &o[13], &state, &o[1], &o[12], &o[2], &o[3], &o[4],
                          &o[5], &o[6], &max_depth, &o[7], &o[8], &o[9], &o[10], &o[11])) {
        return NULL;
    }
    Py_buffer b[14];
    const Py_ssize_t sizes[14] = {4, 1, 1, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4};
    const int wr[14] = {0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0};
    const char *names[14] = {"classes", "boundary", "node_byte", "node_depth", "node_end", "tok_start",
                             "tok_ids", "out_ids", "out_next", "out_exit_nodes", "out_exit_states", "scratch",
                             "roots", "symbol_class"};
    int got = 0;
    PyObject *result = NULL;
    int32_t *states = NULL;
    for (; got < 14; got++) {
        if (get_buf(o[got], &b[got], wr[got], sizes[got], names[got]) < 0) goto done;
    }
    const int32_t *T = (const int32_t *)b[0].buf;
    const uint8_t *bd = (const uint8_t *)b[1].buf;
    const uint8_t *nb = (const uint8_t *)b[2].buf;
    const int32_t *nd = (const int32_t *)b[3].buf;
    const int32_t *ne = (const int32_t *)b[4].buf;
    const int32_t *ts = (const int32_t *)b[5].buf;
    const int32_t *ti = (const int32_t *)b[6].buf;
    int32_t *oid = (int32_t *)b[7].buf;
    int32_t *onext = (int32_t *)b[8].buf;
    int32_t *xnode = (int32_t *)b[9].buf;
    int32_t *xstate = (int32_t *)b[10].buf;
    int32_t *scr = (int32_t *)b[11].buf;
    const int32_t *roots = (const int32_t *)b[12].buf;
    const int32_t *sc = (const int32_t *)b[13].buf;
    Py_ssize_t n_states, ncls;
    int form_ok = class_form_ok(&b[0], &b[13], &n_states, &ncls);
    Py_ssize_t n_nodes = n_items(&b[2]);
    Py_ssize_t n_tok = n_items(&b[6]);
    Py_ssize_t vsize = n_items(&b[11]);
    Py_ssize_t n_roots = n_items(&b[12]);
    int bad = !form_ok || state < 0 || state >= n_states ||
              n_items(&b[1]) != n_states || n_items(&b[3]) != n_nodes || n_items(&b[4]) != n_nodes ||
              n_items(&b[5]) != n_nodes + 1 || n_items(&b[7]) < n_tok || n_items(&b[8]) < n_tok ||
              n_items(&b[9]) < n_nodes || n_items(&b[10]) < n_nodes || max_depth < 0 || n_nodes < 1;
    for (Py_ssize_t k = 0; !bad && k < n_roots; k++) {  /* disjoint subtrees: each token is found at most once */
        bad = roots[k] < 0 || roots[k] >= n_nodes || (k > 0 && roots[k] < ne[roots[k - 1]]);
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "walk_rule: inconsistent array sizes, or roots not disjoint ascending");
        goto done;
    }
    states = (int32_t *)malloc(sizeof(int32_t) * (size_t)(max_depth + 1));
    if (!states) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t count = 0, n_exits = 0;
    Py_BEGIN_ALLOW_THREADS
    /* trie and table validated by `check` (see `walk`): depth in [1, max_depth], targets in [-1, n_states) */
    for (Py_ssize_t k = 0; k < n_roots; k++) {
        int32_t root = roots[k];
        states[nd[root]] = (int32_t)state;
        for (Py_ssize_t i = root + 1, end = ne[root]; i < end;) {
            int32_t d = nd[i];
            int32_t ns = T[(Py_ssize_t)states[d - 1] * ncls + sc[nb[i]]];
            if (ns < 0) {
                i = ne[i];
                continue;
            }
            states[d] = ns;
            count = emit_tokens(oid, onext, count, ts, ti, i, ns, n_tok);
            if (bd[ns] && ne[i] > i + 1) {
                xnode[n_exits] = (int32_t)i;
                xstate[n_exits] = ns;
                n_exits++;
            }
            i++;
        }
    }
    bad = sort_by_id(oid, onext, &count, scr, vsize);
    Py_END_ALLOW_THREADS
    if (bad == 2) {
        PyErr_NoMemory();
        goto done;
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "walk_rule: corrupt trie or transition table");
        goto done;
    }
    result = Py_BuildValue("nn", count, n_exits);
done:
    free(states);
    while (got > 0) {
        got--;
        PyBuffer_Release(&b[got]);
    }
    return result;
}

PyDoc_STRVAR(rule_exits_doc,
"rule_exits(classes, symbol_class, boundary, reach, starts, start_states, node_byte, node_depth, node_end,\n"
"           deepest, max_depth, out_exit_nodes, out_exit_states) -> n_exits\n\n"
"(The table in its class form, as for `walk_rule`.) "
"The exits of `walk_rule` (nodes with children whose state is a boundary) in the subtrees rooted AT each\n"
"starts[k] (the node itself included), walked from start_states[k] at its parent. A subtree is skipped when its\n"
"deepest node is too shallow for the state to reach a boundary (reach: int32[n_states], fewest bytes to a\n"
"boundary state; deepest: int32[n_nodes], the greatest depth in each node's subtree). Output: int32[n_nodes].");

static PyObject *
rule_exits(PyObject *self, PyObject *args)
{
    PyObject *o[12];
    Py_ssize_t max_depth;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOnOO", &o[0], &o[11], &o[1], &o[9], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[10], &max_depth, &o[7], &o[8])) {
        return NULL;
    }
    Py_buffer b[12];
    const Py_ssize_t sizes[12] = {4, 1, 4, 4, 1, 4, 4, 4, 4, 4, 4, 4};
    const int wr[12] = {0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0};
    const char *names[12] = {"classes", "boundary", "starts", "start_states", "node_byte", "node_depth",
                             "node_end", "out_exit_nodes", "out_exit_states", "reach", "deepest",
                             "symbol_class"};
    int got = 0;
    PyObject *result = NULL;
    int32_t *states = NULL;
    for (; got < 12; got++) {
        if (get_buf(o[got], &b[got], wr[got], sizes[got], names[got]) < 0) goto done;
    }
    const int32_t *T = (const int32_t *)b[0].buf;
    const uint8_t *bd = (const uint8_t *)b[1].buf;
    const int32_t *st = (const int32_t *)b[2].buf;
    const int32_t *ss = (const int32_t *)b[3].buf;
    const uint8_t *nb = (const uint8_t *)b[4].buf;
    const int32_t *nd = (const int32_t *)b[5].buf;
    const int32_t *ne = (const int32_t *)b[6].buf;
    int32_t *xnode = (int32_t *)b[7].buf;
    int32_t *xstate = (int32_t *)b[8].buf;
    const int32_t *reach = (const int32_t *)b[9].buf;
    const int32_t *deepest = (const int32_t *)b[10].buf;
    const int32_t *sc = (const int32_t *)b[11].buf;
    Py_ssize_t n_states, ncls;
    int form_ok = class_form_ok(&b[0], &b[11], &n_states, &ncls);
    Py_ssize_t n_nodes = n_items(&b[4]);
    Py_ssize_t n_starts = n_items(&b[2]);
    if (!form_ok || n_items(&b[1]) != n_states ||
        n_items(&b[9]) != n_states || n_items(&b[10]) != n_nodes ||
        n_items(&b[3]) != n_starts || n_items(&b[5]) != n_nodes || n_items(&b[6]) != n_nodes ||
        n_items(&b[7]) < n_nodes || n_items(&b[8]) < n_nodes || max_depth < 0 || n_nodes < 1) {
        PyErr_SetString(PyExc_ValueError, "rule_exits: inconsistent array sizes");
        goto done;
    }
    for (Py_ssize_t k = 0; k < n_starts; k++) {
        if (st[k] < 1 || st[k] >= n_nodes || ss[k] < 0 || ss[k] >= n_states) {
            PyErr_SetString(PyExc_ValueError, "rule_exits: start node or state out of range");
            goto done;
        }
    }
    states = (int32_t *)malloc(sizeof(int32_t) * (size_t)(max_depth + 1));
    if (!states) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t n_exits = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n_starts; k++) {
        Py_ssize_t start = st[k], end = ne[start];
        states[nd[start] - 1] = ss[k];
        for (Py_ssize_t i = start; i < end;) {
            int32_t d = nd[i];
            int32_t ns = T[(Py_ssize_t)states[d - 1] * ncls + sc[nb[i]]];
            if (ns < 0) {
                i = ne[i];
                continue;
            }
            if (reach[ns] > deepest[i] - d) { /* no node below is deep enough to get to a boundary */
                i = ne[i];
                continue;
            }
            states[d] = ns;
            if (bd[ns] && ne[i] > i + 1 && n_exits < n_nodes) {
                xnode[n_exits] = (int32_t)i;
                xstate[n_exits] = ns;
                n_exits++;
            }
            i++;
        }
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(n_exits);
done:
    free(states);
    while (got > 0) {
        got--;
        PyBuffer_Release(&b[got]);
    }
    return result;
}

PyDoc_STRVAR(subtree_deepest_doc,
"subtree_deepest(node_depth, node_end, out) -> None\n\n"
"out[i] = the greatest node_depth in the preorder subtree [i, node_end[i]) (int32[n_nodes]).");

static PyObject *
subtree_deepest(PyObject *self, PyObject *args)
{
    PyObject *o_d, *o_e, *o_out;
    if (!PyArg_ParseTuple(args, "OOO", &o_d, &o_e, &o_out)) return NULL;
    Py_buffer bd, be, bo;
    if (get_buf(o_d, &bd, 0, 4, "node_depth") < 0) return NULL;
    if (get_buf(o_e, &be, 0, 4, "node_end") < 0) {
        PyBuffer_Release(&bd);
        return NULL;
    }
    if (get_buf(o_out, &bo, 1, 4, "out") < 0) {
        PyBuffer_Release(&bd);
        PyBuffer_Release(&be);
        return NULL;
    }
    Py_ssize_t n = n_items(&bd);
    PyObject *result = NULL;
    if (n_items(&be) != n || n_items(&bo) != n) {
        PyErr_SetString(PyExc_ValueError, "subtree_deepest: inconsistent array sizes");
    } else {
        const int32_t *nd = (const int32_t *)bd.buf;
        const int32_t *ne = (const int32_t *)be.buf;
        int32_t *out = (int32_t *)bo.buf;
        for (Py_ssize_t i = n - 1; i >= 0; i--) { /* children come after their parent in preorder */
            int32_t best = nd[i];
            for (Py_ssize_t c = i + 1; c < ne[i] && c < n; c = ne[c]) {
                if (out[c] > best) best = out[c];
                if (ne[c] <= c) break; /* corrupt trie: never loop */
            }
            out[i] = best;
        }
        Py_INCREF(Py_None);
        result = Py_None;
    }
    PyBuffer_Release(&bd);
    PyBuffer_Release(&be);
    PyBuffer_Release(&bo);
    return result;
}

/* ---- template shortcut (states inside a JSON string) ------------------------------------------ */

PyDoc_STRVAR(walk_exits_doc,
"walk_exits(transitions, width, state, node_byte, node_depth, node_end, max_depth, out_nodes, out_states)\n"
"    -> count\n\n"
"Walk the preorder trie from `state` of a (small, template) DFA and record every EXIT: a node whose\n"
"parent's prefix stays alive but whose own byte is dead. out_nodes[k] = the exit node, out_states[k] =\n"
"the state after its parent's prefix. Output arrays: int32[n_nodes]. Subtrees below exits are skipped.");

static PyObject *
walk_exits(PyObject *self, PyObject *args)
{
    PyObject *o_t, *o_byte, *o_depth, *o_end, *o_nodes, *o_states;
    Py_ssize_t width, state, max_depth;
    if (!PyArg_ParseTuple(args, "OnnOOOnOO", &o_t, &width, &state, &o_byte, &o_depth, &o_end, &max_depth,
                          &o_nodes, &o_states)) {
        return NULL;
    }
    Py_buffer bt, bb, bd, be, bn, bs;
    Py_buffer *bufs[6] = {&bt, &bb, &bd, &be, &bn, &bs};
    PyObject *objs[6] = {o_t, o_byte, o_depth, o_end, o_nodes, o_states};
    const Py_ssize_t sizes[6] = {4, 1, 4, 4, 4, 4};
    const int wr[6] = {0, 0, 0, 0, 1, 1};
    const char *names[6] = {"transitions", "node_byte", "node_depth", "node_end", "out_nodes", "out_states"};
    int got = 0;
    PyObject *result = NULL;
    int32_t *states = NULL;
    for (; got < 6; got++) {
        if (get_buf(objs[got], bufs[got], wr[got], sizes[got], names[got]) < 0) goto done;
    }
    Py_ssize_t n_states = width > 0 ? n_items(&bt) / width : 0;
    Py_ssize_t n_nodes = n_items(&bb);
    if (width < 256 || n_items(&bt) != n_states * width || state < 0 || state >= n_states ||
        n_items(&bd) != n_nodes || n_items(&be) != n_nodes || n_items(&bn) < n_nodes ||
        n_items(&bs) < n_nodes || max_depth < 0 || n_nodes < 1) {
        PyErr_SetString(PyExc_ValueError, "walk_exits: inconsistent array sizes");
        goto done;
    }
    states = (int32_t *)malloc(sizeof(int32_t) * (size_t)(max_depth + 1));
    if (!states) {
        PyErr_NoMemory();
        goto done;
    }
    const int32_t *T = (const int32_t *)bt.buf;
    const uint8_t *nb = (const uint8_t *)bb.buf;
    const int32_t *nd = (const int32_t *)bd.buf;
    const int32_t *ne = (const int32_t *)be.buf;
    int32_t *on = (int32_t *)bn.buf;
    int32_t *os = (int32_t *)bs.buf;
    Py_ssize_t count = 0;
    states[0] = (int32_t)state;
    for (Py_ssize_t i = 1; i < n_nodes;) { /* trie validated by `check` (depth in [1, max_depth]) */
        int32_t d = nd[i];
        int32_t ns = T[(Py_ssize_t)states[d - 1] * width + nb[i]];
        if (ns < 0) {
            on[count] = (int32_t)i;
            os[count] = states[d - 1];
            count++;
            i = ne[i];
            continue;
        }
        states[d] = ns;
        i++;
    }
    result = PyLong_FromSsize_t(count);
done:
    free(states);
    while (got > 0) {
        got--;
        PyBuffer_Release(bufs[got]);
    }
    return result;
}

PyDoc_STRVAR(template_map_doc,
"template_map(classes, symbol_class, state, template, template_width, template_start, out_map) -> bool\n\n"
"Whether the template DFA embeds at `state` of a DFA in its class form (as for `walk_rule`): a map h\n"
"(template state -> DFA state, h[start] = state) such that every live template transition b -x-> b2 has\n"
"classes[h[b], symbol_class[x]] == h[b2] (bytes only; a target\n"
"past the template's last row counts as dead, so the first rows of a bigger template are a template too).\n"
"Fills out_map int32[template states] (-1 where unreachable) and returns True, or returns False.");

static PyObject *
template_map(PyObject *self, PyObject *args)
{
    PyObject *o_t, *o_sc, *o_tt, *o_map;
    Py_ssize_t state, twidth, tstart;
    if (!PyArg_ParseTuple(args, "OOnOnnO", &o_t, &o_sc, &state, &o_tt, &twidth, &tstart, &o_map)) return NULL;
    Py_buffer bt, bsc, btt, bm;
    if (get_buf(o_t, &bt, 0, 4, "classes") < 0) return NULL;
    if (get_buf(o_sc, &bsc, 0, 4, "symbol_class") < 0) {
        PyBuffer_Release(&bt);
        return NULL;
    }
    if (get_buf(o_tt, &btt, 0, 4, "template") < 0) {
        PyBuffer_Release(&bsc);
        PyBuffer_Release(&bt);
        return NULL;
    }
    if (get_buf(o_map, &bm, 1, 4, "out_map") < 0) {
        PyBuffer_Release(&btt);
        PyBuffer_Release(&bsc);
        PyBuffer_Release(&bt);
        return NULL;
    }
    PyObject *result = NULL;
    int32_t *queue = NULL;
    Py_ssize_t n_states, ncls;
    int form_ok = class_form_ok(&bt, &bsc, &n_states, &ncls);
    Py_ssize_t n_tmpl = twidth > 0 ? n_items(&btt) / twidth : 0;
    if (!form_ok || twidth < 256 || n_items(&btt) != n_tmpl * twidth ||
        state < 0 || state >= n_states || tstart < 0 || tstart >= n_tmpl || n_items(&bm) != n_tmpl) {
        PyErr_SetString(PyExc_ValueError, "template_map: inconsistent array sizes");
        goto done;
    }
    queue = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_tmpl ? n_tmpl : 1));
    if (!queue) {
        PyErr_NoMemory();
        goto done;
    }
    const int32_t *T = (const int32_t *)bt.buf, *TT = (const int32_t *)btt.buf, *sc = (const int32_t *)bsc.buf;
    int32_t *h = (int32_t *)bm.buf;
    for (Py_ssize_t b = 0; b < n_tmpl; b++) h[b] = -1;
    h[tstart] = (int32_t)state;
    Py_ssize_t head = 0, tail = 0;
    queue[tail++] = (int32_t)tstart;
    int ok = 1;
    while (ok && head < tail) {
        int32_t b = queue[head++];
        const int32_t *trow = TT + (Py_ssize_t)b * twidth, *row = T + (Py_ssize_t)h[b] * ncls;
        for (int x = 0; x < 256; x++) {
            int32_t b2 = trow[x];
            if (b2 < 0 || b2 >= n_tmpl) continue; /* dead, or past the template's last row: dead too */
            int32_t g = row[sc[x]];
            if (g < 0 || g >= n_states) {
                ok = 0;
                break;
            }
            if (h[b2] < 0) {
                h[b2] = g;
                queue[tail++] = b2;
            } else if (h[b2] != g) {
                ok = 0;
                break;
            }
        }
    }
    result = PyBool_FromLong(ok);
done:
    free(queue);
    PyBuffer_Release(&bm);
    PyBuffer_Release(&btt);
    PyBuffer_Release(&bsc);
    PyBuffer_Release(&bt);
    return result;
}

PyDoc_STRVAR(walk_template_doc,
"walk_template(classes, symbol_class, state, template, map, pure_bits, exit_nodes, exit_tstate, node_byte,\n"
"              node_depth, node_end, tok_start, tok_ids, max_depth, vocab_size, out_bits, out_ids, out_next,\n"
"              scratch) -> (n_found, count)\n\n"
"`walk(state)` of a DFA in its class form (as for `walk_rule`) as a bitmask, using a template DFA\n"
"(int32[n_template, 256], start 0; targets past its last row are dead, as in template_map) that embeds at some\n"
"state t (map = template_map at t: template state -> DFA state). out_bits starts as pure_bits (the tokens\n"
"whose bytes all stay inside the template, as uint32 words: bit i%32 of word i/32 = token i). The trie is\n"
"walked jointly from (state, template start); a node where the DFA state equals map[template state] is\n"
"SYNCHRONIZED: from there on the DFA follows the template, so its pure tokens are right as they are and\n"
"the walk skips the subtree, except below the template's exits inside it (exit_nodes / exit_tstate, see\n"
"walk_exits), walked from the move on that byte from map[tstate]. Elsewhere tokens are decided the plain way\n"
"(their pure bits cleared first). Tokens found by walking (none of them kept pure bits) go to out_ids[:n_found]\n"
"(ascending) with their states in out_next; count = bits set in out_bits. scratch: int32[vocab_size] all\n"
"-1 (restored). The trie must have passed `check`; everything else that indexes memory is checked here.");

/* Walk the subtree of node x, whose own state is ns, appending (token, state) pairs to found. */
static Py_ssize_t
walk_subtree(Py_ssize_t x, int32_t ns, const int32_t *T, Py_ssize_t ncls, const int32_t *sc, const uint8_t *nb,
             const int32_t *nd, const int32_t *ne, const int32_t *ts, const int32_t *ti, int32_t *states,
             pair_t *found, Py_ssize_t n)
{
    states[nd[x]] = ns;
    for (int32_t t = ts[x]; t < ts[x + 1]; t++) found[n++] = (pair_t){ti[t], ns};
    for (Py_ssize_t i = x + 1; i < ne[x];) {
        int32_t d = nd[i];
        int32_t s2 = T[(Py_ssize_t)states[d - 1] * ncls + sc[nb[i]]];
        if (s2 < 0) {
            i = ne[i];
            continue;
        }
        states[d] = s2;
        for (int32_t t = ts[i]; t < ts[i + 1]; t++) found[n++] = (pair_t){ti[t], s2};
        i++;
    }
    return n;
}

#define CLEAR_BIT(bits, id) ((bits)[(id) >> 5] &= ~(1u << ((id) & 31)))

static PyObject *
walk_template(PyObject *self, PyObject *args)
{
    enum { NB = 16 };
    PyObject *o[NB];
    Py_ssize_t state, max_depth, vsize;
    if (!PyArg_ParseTuple(args, "OOnOOOOOOOOOOnnOOOO", &o[0], &o[15], &state, &o[1], &o[2], &o[3], &o[4], &o[5],
                          &o[6], &o[7], &o[8], &o[9], &o[10], &max_depth, &vsize, &o[11], &o[12], &o[13], &o[14])) {
        return NULL;
    }
    Py_buffer bt, btt, bm, bpb, ben, bet, bb, bd, be, bs, bi, bob, boi, bon, bsc, bsym;
    Py_buffer *bufs[NB] = {&bt, &btt, &bm, &bpb, &ben, &bet, &bb, &bd, &be, &bs, &bi, &bob, &boi, &bon, &bsc, &bsym};
    const Py_ssize_t sizes[NB] = {4, 4, 4, 4, 4, 4, 1, 4, 4, 4, 4, 4, 4, 4, 4, 4};
    const int wr[NB] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0};
    const char *names[NB] = {"classes", "template", "map", "pure_bits", "exit_nodes", "exit_tstate",
                             "node_byte", "node_depth", "node_end", "tok_start", "tok_ids", "out_bits", "out_ids",
                             "out_next", "scratch", "symbol_class"};
    int got = 0;
    PyObject *result = NULL;
    int32_t *gs = NULL, *bst = NULL, *states = NULL, *sync = NULL;
    pair_t *found = NULL;
    uint32_t *seen = NULL;
    for (; got < NB; got++) {
        if (get_buf(o[got], bufs[got], wr[got], sizes[got], names[got]) < 0) goto done;
    }
    Py_ssize_t n_states, ncls, n_tmpl = n_items(&bm);
    int form_ok = class_form_ok(&bt, &bsym, &n_states, &ncls);
    Py_ssize_t n_nodes = n_items(&bb), n_tok = n_items(&bi), n_exit = n_items(&ben);
    Py_ssize_t n_words = (vsize + 31) / 32;
    if (!form_ok || state < 0 || state >= n_states ||
        n_items(&btt) != n_tmpl * 256 || n_tmpl < 1 || n_items(&bet) != n_exit || n_items(&bd) != n_nodes ||
        n_items(&be) != n_nodes || n_items(&bs) != n_nodes + 1 || vsize < 1 || n_items(&bpb) != n_words ||
        n_items(&bob) != n_words || n_items(&boi) < n_tok || n_items(&bon) < n_tok || n_items(&bsc) != vsize ||
        max_depth < 0 || n_nodes < 1) {
        PyErr_SetString(PyExc_ValueError, "walk_template: inconsistent array sizes");
        goto done;
    }
    const int32_t *T = (const int32_t *)bt.buf, *TT = (const int32_t *)btt.buf, *h = (const int32_t *)bm.buf;
    const int32_t *sc = (const int32_t *)bsym.buf;
    const uint32_t *pb = (const uint32_t *)bpb.buf;
    const int32_t *en = (const int32_t *)ben.buf, *et = (const int32_t *)bet.buf;
    const uint8_t *nb = (const uint8_t *)bb.buf;
    const int32_t *nd = (const int32_t *)bd.buf, *ne = (const int32_t *)be.buf;
    const int32_t *ts = (const int32_t *)bs.buf, *ti = (const int32_t *)bi.buf;
    uint32_t *bits = (uint32_t *)bob.buf;
    int32_t *oid = (int32_t *)boi.buf, *onext = (int32_t *)bon.buf, *scr = (int32_t *)bsc.buf;
    /* vectorized passes: a counted template has ~1,700 rows (430k entries), checked on every call */
    int bad_args = any_below(h, n_tmpl, 0) || table_out_of_range(h, n_tmpl, n_states) ||
                   any_below(TT, n_tmpl * 256, -1);
    for (Py_ssize_t k = 0; !bad_args && k < n_exit; k++) {
        bad_args = en[k] < 1 || en[k] >= n_nodes || et[k] < 0 || et[k] >= n_tmpl || (k > 0 && en[k] <= en[k - 1]);
    }
    if (bad_args) {
        PyErr_SetString(PyExc_ValueError, "walk_template: map, template or exits out of range");
        goto done;
    }
    gs = (int32_t *)malloc(sizeof(int32_t) * (size_t)(max_depth + 1));
    bst = (int32_t *)malloc(sizeof(int32_t) * (size_t)(max_depth + 1));
    states = (int32_t *)malloc(sizeof(int32_t) * (size_t)(max_depth + 1));
    sync = (int32_t *)malloc(sizeof(int32_t) * (size_t)n_nodes);
    found = (pair_t *)malloc(sizeof(pair_t) * (size_t)(n_tok + 1));
    seen = (uint32_t *)calloc((size_t)n_words, sizeof(uint32_t));
    if (!gs || !bst || !states || !sync || !found || !seen) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t n_found = 0, n_sync = 0, count = 0;
    Py_BEGIN_ALLOW_THREADS
    memcpy(bits, pb, sizeof(uint32_t) * (size_t)n_words);
    gs[0] = (int32_t)state;
    bst[0] = 0;
    for (Py_ssize_t i = 1; i < n_nodes;) { /* the joint walk, over the region where the two disagree */
        int32_t d = nd[i], x = nb[i];
        int32_t g = T[(Py_ssize_t)gs[d - 1] * ncls + sc[x]];
        int32_t b = bst[d - 1] >= 0 ? TT[(Py_ssize_t)bst[d - 1] * 256 + x] : -1;
        if (b >= n_tmpl) b = -1; /* past the template's last row: dead */
        if (b >= 0 && g == h[b]) { /* synchronized: the template's answer holds for the whole subtree */
            sync[n_sync++] = (int32_t)i;
            i = ne[i];
            continue;
        }
        if (g < 0) { /* dead: nothing below is allowed */
            for (int32_t k = ts[i]; k < ts[ne[i]]; k++) CLEAR_BIT(bits, ti[k]);
            i = ne[i];
            continue;
        }
        for (int32_t k = ts[i]; k < ts[i + 1]; k++) {
            CLEAR_BIT(bits, ti[k]);
            found[n_found++] = (pair_t){ti[k], g};
        }
        gs[d] = g;
        bst[d] = b;
        i++;
    }
    Py_ssize_t r = 0;
    for (Py_ssize_t k = 0; k < n_exit; k++) { /* exits inside synchronized subtrees (both lists in preorder) */
        while (r < n_sync && ne[sync[r]] <= en[k]) r++;
        if (r >= n_sync || en[k] < sync[r]) continue;
        int32_t ns = T[(Py_ssize_t)h[et[k]] * ncls + sc[nb[en[k]]]];
        if (ns >= 0) n_found = walk_subtree(en[k], ns, T, ncls, sc, nb, nd, ne, ts, ti, states, found, n_found);
    }
    /* Sort the found tokens by id without comparisons: their bits go into `seen` (a token is found once), their
     * next states into scratch[id]; a pass over the set bits then emits them in order (and restores scratch). */
    for (Py_ssize_t k = 0; k < n_found; k++) {
        seen[found[k].id >> 5] |= 1u << (found[k].id & 31);
        scr[found[k].id] = found[k].next;
    }
    Py_ssize_t n_out = 0;
    for (Py_ssize_t w = 0; w < n_words; w++) {
        uint32_t word = seen[w];
        bits[w] |= word;
        count += popcount32(bits[w]);
        while (word) {
            int32_t id = (int32_t)(w * 32 + __builtin_ctz(word));
            oid[n_out] = id;
            onext[n_out++] = scr[id];
            scr[id] = -1;
            word &= word - 1u;
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(nn)", n_found, count);
done:
    free(seen);
    free(found);
    free(sync);
    free(states);
    free(bst);
    free(gs);
    while (got > 0) {
        got--;
        PyBuffer_Release(bufs[got]);
    }
    return result;
}

PyDoc_STRVAR(bits_to_ids_doc,
"bits_to_ids(bits, vocab_size, value, out) -> count\n\n"
"The ids i < vocab_size whose bit (bit i%32 of uint32 word i/32) equals value (0 or 1), ascending, into\n"
"out int32[...] (large enough for every match). Whole words that cannot match are skipped.");

static PyObject *
bits_to_ids(PyObject *self, PyObject *args)
{
    PyObject *o_b, *o_out;
    Py_ssize_t vsize;
    int value;
    if (!PyArg_ParseTuple(args, "OnpO", &o_b, &vsize, &value, &o_out)) return NULL;
    Py_buffer bb, bo;
    if (get_buf(o_b, &bb, 0, 4, "bits") < 0) return NULL;
    if (get_buf(o_out, &bo, 1, 4, "out") < 0) {
        PyBuffer_Release(&bb);
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n_words = (vsize + 31) / 32;
    if (vsize < 0 || n_items(&bb) != n_words) {
        PyErr_SetString(PyExc_ValueError, "bits_to_ids: bits must hold one bit per id");
        goto done;
    }
    const uint32_t *bits = (const uint32_t *)bb.buf;
    int32_t *out = (int32_t *)bo.buf;
    Py_ssize_t cap = n_items(&bo), count = 0;
    for (Py_ssize_t w = 0; w < n_words; w++) {
        uint32_t word = value ? bits[w] : ~bits[w];
        if (w == n_words - 1 && (vsize & 31)) word &= (1u << (vsize & 31)) - 1u;
        while (word) {
            if (count >= cap) {
                PyErr_SetString(PyExc_ValueError, "bits_to_ids: out is too small");
                goto done;
            }
            out[count++] = (int32_t)(w * 32 + __builtin_ctz(word));
            word &= word - 1u;
        }
    }
    result = PyLong_FromSsize_t(count);
done:
    PyBuffer_Release(&bo);
    PyBuffer_Release(&bb);
    return result;
}

PyDoc_STRVAR(ids_to_bits_doc,
"ids_to_bits(ids, vocab_size, out) -> int\n\n"
"The bitmask of a set of ids: out uint32[ceil(vocab_size / 32)] is zeroed, then bit i%32 of word i/32 is\n"
"set for every id i in ids (int32, each in [0, vocab_size); repeats allowed). Returns the bits set: the\n"
"number of distinct ids.");

static PyObject *
ids_to_bits(PyObject *self, PyObject *args)
{
    PyObject *o_ids, *o_out;
    Py_ssize_t vsize;
    if (!PyArg_ParseTuple(args, "OnO", &o_ids, &vsize, &o_out)) return NULL;
    Py_buffer bi, bo;
    if (get_buf(o_ids, &bi, 0, 4, "ids") < 0) return NULL;
    if (get_buf(o_out, &bo, 1, 4, "out") < 0) {
        PyBuffer_Release(&bi);
        return NULL;
    }
    PyObject *result = NULL;
    const int32_t *ids = (const int32_t *)bi.buf;
    uint32_t *bits = (uint32_t *)bo.buf;
    Py_ssize_t n = n_items(&bi), n_words = (vsize + 31) / 32;
    if (vsize < 0 || n_items(&bo) != n_words) {
        PyErr_SetString(PyExc_ValueError, "ids_to_bits: out must hold one bit per id");
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        if (ids[k] < 0 || ids[k] >= vsize) {
            PyErr_SetString(PyExc_ValueError, "ids_to_bits: id outside the vocabulary");
            goto done;
        }
    }
    memset(bits, 0, sizeof(uint32_t) * (size_t)n_words);
    Py_ssize_t set = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        uint32_t bit = 1u << (ids[k] & 31), *word = &bits[ids[k] >> 5];
        set += !(*word & bit);
        *word |= bit;
    }
    result = PyLong_FromSsize_t(set);
done:
    PyBuffer_Release(&bo);
    PyBuffer_Release(&bi);
    return result;
}

PyDoc_STRVAR(or_bits_doc,
"or_bits(masks, out) -> int\n\n"
"The union of bitmasks: out (uint32) is the bitwise OR of every array in the sequence masks (each as long as\n"
"out; out may be the first of them), and the count of its set bits is returned. One call where a union of a\n"
"dozen parts cost a dozen numpy calls and a count.");

static PyObject *
or_bits(PyObject *self, PyObject *args)
{
    PyObject *o_masks, *o_out;
    if (!PyArg_ParseTuple(args, "OO", &o_masks, &o_out)) return NULL;
    PyObject *masks = PySequence_Fast(o_masks, "or_bits: masks must be a sequence");
    if (masks == NULL) return NULL;
    Py_buffer bo;
    if (get_buf(o_out, &bo, 1, 4, "out") < 0) {
        Py_DECREF(masks);
        return NULL;
    }
    uint32_t *out = (uint32_t *)bo.buf;
    Py_ssize_t n_words = n_items(&bo), n_masks = PySequence_Fast_GET_SIZE(masks);
    PyObject *result = NULL;
    for (Py_ssize_t m = 0; m < n_masks; m++) {
        Py_buffer bm;
        if (get_buf(PySequence_Fast_GET_ITEM(masks, m), &bm, 0, 4, "masks") < 0) goto done;
        if (n_items(&bm) != n_words) {
            PyBuffer_Release(&bm);
            PyErr_SetString(PyExc_ValueError, "or_bits: every mask must be as long as out");
            goto done;
        }
        const uint32_t *bits = (const uint32_t *)bm.buf;
        if (m == 0) {
            memmove(out, bits, sizeof(uint32_t) * (size_t)n_words);
        } else {
            for (Py_ssize_t k = 0; k < n_words; k++) out[k] |= bits[k];
        }
        PyBuffer_Release(&bm);
    }
    if (n_masks == 0) memset(out, 0, sizeof(uint32_t) * (size_t)n_words);
    Py_ssize_t count = 0;
    for (Py_ssize_t k = 0; k < n_words; k++) count += popcount32(out[k]);
    result = PyLong_FromSsize_t(count);
done:
    PyBuffer_Release(&bo);
    Py_DECREF(masks);
    return result;
}

PyDoc_STRVAR(check_doc,
"check(classes, symbol_class, node_depth, node_end, tok_start, tok_ids, max_depth, vocab_size) -> None\n\n"
"Validate what `walk` trusts: the class form (as for `walk`), every transition in [-1, n_states), every node's\n"
"depth in [1, max_depth]\n"
"and no deeper than its parent + 1, subtree ends in (i, n_nodes], CSR offsets ascending within tok_ids,\n"
"token ids in [0, vocab_size). Raises ValueError naming the first violation.");

static PyObject *
check(PyObject *self, PyObject *args)
{
    PyObject *o_t, *o_c, *o_d, *o_e, *o_s, *o_i;
    Py_ssize_t max_depth, vsize;
    if (!PyArg_ParseTuple(args, "OOOOOOnn", &o_t, &o_c, &o_d, &o_e, &o_s, &o_i, &max_depth, &vsize)) return NULL;
    Py_buffer bt, bc, bd, be, bs, bi;
    Py_buffer *bufs[6] = {&bt, &bc, &bd, &be, &bs, &bi};
    PyObject *objs[6] = {o_t, o_c, o_d, o_e, o_s, o_i};
    const char *names[6] = {"classes", "symbol_class", "node_depth", "node_end", "tok_start", "tok_ids"};
    int got = 0;
    PyObject *result = NULL;
    const char *why = NULL;
    for (; got < 6; got++) {
        if (get_buf(objs[got], bufs[got], 0, 4, names[got]) < 0) goto done;
    }
    Py_ssize_t n_states, ncls;
    int form_ok = class_form_ok(&bt, &bc, &n_states, &ncls);
    Py_ssize_t n_nodes = n_items(&bd), n_tok = n_items(&bi);
    const int32_t *T = (const int32_t *)bt.buf, *nd = (const int32_t *)bd.buf, *ne = (const int32_t *)be.buf;
    const int32_t *ts = (const int32_t *)bs.buf, *ti = (const int32_t *)bi.buf;
    if (!form_ok) why = "classes is not [n_states, n_classes] with a class in range for each of >= 256 symbols";
    else if (n_nodes < 1 || n_items(&be) != n_nodes || n_items(&bs) != n_nodes + 1) why = "trie arrays disagree";
    else if (nd[0] != 0 || ne[0] != n_nodes || ts[0] != 0 || ts[n_nodes] != n_tok) why = "bad trie root";
    if (!why) { /* one branch-free (vectorizable) pass: the smallest and largest target */
        int32_t lo = 0, hi = 0;
        Py_ssize_t n_t = n_items(&bt);
        for (Py_ssize_t k = 0; k < n_t; k++) {
            lo = T[k] < lo ? T[k] : lo;
            hi = T[k] > hi ? T[k] : hi;
        }
        if (n_t && (lo < -1 || hi >= n_states)) why = "transition target out of range";
    }
    for (Py_ssize_t i = 1; !why && i < n_nodes; i++) {
        if (nd[i] < 1 || nd[i] > max_depth || nd[i] > nd[i - 1] + 1) why = "node depth out of range";
        else if (ne[i] <= i || ne[i] > n_nodes) why = "node subtree end out of range";
        else if (ts[i] > ts[i + 1]) why = "token offsets not ascending";
    }
    for (Py_ssize_t k = 0; !why && k < n_tok; k++) {
        if (ti[k] < 0 || ti[k] >= vsize) why = "token id out of range";
    }
    if (why) {
        PyErr_Format(PyExc_ValueError, "check: %s", why);
        goto done;
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    while (got > 0) {
        got--;
        PyBuffer_Release(bufs[got]);
    }
    return result;
}

/* ---- min_tokenization ------------------------------------------------------------------------ */

/* best[i] = fewest tokens spelling sym[i..L) (best[L] = 0; INF_TOKENS when none does). */
static void
min_tokens(const int32_t *sym, Py_ssize_t L, const uint8_t *nb, const int32_t *ne, const int32_t *ts,
           const int32_t *rc, Py_ssize_t n_nodes, int32_t *best)
{
    best[L] = 0;
    for (Py_ssize_t i = L - 1; i >= 0; i--) {
        int32_t b = INF_TOKENS;
        if (sym[i] >= 256 || sym[i] < 0) {
            if (sym[i] >= 256 && best[i + 1] < INF_TOKENS) b = best[i + 1] + 1;
            best[i] = b;
            continue;
        }
        int32_t node = rc[sym[i]];
        Py_ssize_t j = i;
        while (node > 0 && node < n_nodes) {
            /* node spells symbols[i..j] */
            if (ts[node + 1] > ts[node] && best[j + 1] < INF_TOKENS && best[j + 1] + 1 < b) b = best[j + 1] + 1;
            j++;
            if (j >= L || sym[j] < 0 || sym[j] >= 256) break;
            /* find the child of node with byte sym[j]: children are node+1, then successive ends */
            int32_t c = node + 1, want = sym[j], found = -1;
            while (c < ne[node]) {
                if (nb[c] == want) {
                    found = c;
                    break;
                }
                c = ne[c];
            }
            node = found;
        }
        best[i] = b;
    }
}

PyDoc_STRVAR(min_tokenization_doc,
"min_tokenization(symbols, node_byte, node_end, tok_start, root_child, best) -> None\n\n"
"symbols: int32[L] (bytes 0..255; >= 256 = one special token each). Fills best int32[L+1] with\n"
"best[i] = fewest tokens spelling symbols[i:] (best[L] = 0; unreachable = INT32_MAX/2).\n"
"root_child: int32[256], the trie node under the root for each byte (-1 if none).");

static PyObject *
min_tokenization(PyObject *self, PyObject *args)
{
    PyObject *o_sym, *o_byte, *o_end, *o_ts, *o_rc, *o_best;
    if (!PyArg_ParseTuple(args, "OOOOOO", &o_sym, &o_byte, &o_end, &o_ts, &o_rc, &o_best)) {
        return NULL;
    }
    Py_buffer bsym, bb, be, bs, brc, bbest;
    Py_buffer *bufs[6] = {&bsym, &bb, &be, &bs, &brc, &bbest};
    PyObject *objs[6] = {o_sym, o_byte, o_end, o_ts, o_rc, o_best};
    const Py_ssize_t sizes[6] = {4, 1, 4, 4, 4, 4};
    const int wr[6] = {0, 0, 0, 0, 0, 1};
    const char *names[6] = {"symbols", "node_byte", "node_end", "tok_start", "root_child", "best"};
    int got = 0;
    PyObject *result = NULL;
    for (; got < 6; got++) {
        if (get_buf(objs[got], bufs[got], wr[got], sizes[got], names[got]) < 0) goto done;
    }
    Py_ssize_t L = n_items(&bsym), n_nodes = n_items(&bb);
    if (n_items(&bbest) != L + 1 || n_items(&be) != n_nodes || n_items(&bs) != n_nodes + 1 ||
        n_items(&brc) != 256) {
        PyErr_SetString(PyExc_ValueError, "min_tokenization: inconsistent array sizes");
        goto done;
    }
    min_tokens((const int32_t *)bsym.buf, L, (const uint8_t *)bb.buf, (const int32_t *)be.buf,
               (const int32_t *)bs.buf, (const int32_t *)brc.buf, n_nodes, (int32_t *)bbest.buf);
    Py_INCREF(Py_None);
    result = Py_None;
done:
    while (got > 0) {
        got--;
        PyBuffer_Release(bufs[got]);
    }
    return result;
}

/* ---- mask writers ---------------------------------------------------------------------------- */

PyDoc_STRVAR(apply_allowed_doc,
"apply_allowed(logits, allowed) -> None\n\n"
"logits: float32[n], writable; allowed: int32 ascending, each in [0, n). Writes -inf everywhere\n"
"except at the allowed indices (fills the gaps; no temporary storage).");

static PyObject *
apply_allowed(PyObject *self, PyObject *args)
{
    PyObject *o_l, *o_a;
    if (!PyArg_ParseTuple(args, "OO", &o_l, &o_a)) return NULL;
    Py_buffer bl, ba;
    if (get_buf(o_l, &bl, 1, 4, "logits") < 0) return NULL;
    if (get_buf(o_a, &ba, 0, 4, "allowed") < 0) {
        PyBuffer_Release(&bl);
        return NULL;
    }
    float *l = (float *)bl.buf;
    const int32_t *a = (const int32_t *)ba.buf;
    Py_ssize_t n = n_items(&bl), k = n_items(&ba);
    int bad = 0;
    for (Py_ssize_t i = 0; i < k; i++) {
        if (a[i] < 0 || a[i] >= n || (i > 0 && a[i] <= a[i - 1])) {
            bad = 1;
            break;
        }
    }
    if (!bad) {
        const float neg = -INFINITY;
        Py_ssize_t pos = 0;
        for (Py_ssize_t i = 0; i < k; i++) {
            for (Py_ssize_t v = pos; v < a[i]; v++) l[v] = neg;
            pos = (Py_ssize_t)a[i] + 1;
        }
        for (Py_ssize_t v = pos; v < n; v++) l[v] = neg;
    }
    PyBuffer_Release(&ba);
    PyBuffer_Release(&bl);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "apply_allowed: ids must be ascending and inside the logits");
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(apply_disallowed_doc,
"apply_disallowed(logits, disallowed) -> None\n\n"
"logits: float32[n], writable; disallowed: int32, each in [0, n). Writes -inf at those indices.");

static PyObject *
apply_disallowed(PyObject *self, PyObject *args)
{
    PyObject *o_l, *o_d;
    if (!PyArg_ParseTuple(args, "OO", &o_l, &o_d)) return NULL;
    Py_buffer bl, bd;
    if (get_buf(o_l, &bl, 1, 4, "logits") < 0) return NULL;
    if (get_buf(o_d, &bd, 0, 4, "disallowed") < 0) {
        PyBuffer_Release(&bl);
        return NULL;
    }
    float *l = (float *)bl.buf;
    const int32_t *d = (const int32_t *)bd.buf;
    Py_ssize_t n = n_items(&bl), k = n_items(&bd);
    int bad = 0;
    for (Py_ssize_t i = 0; i < k; i++) {
        if (d[i] < 0 || d[i] >= n) {
            bad = 1;
            break;
        }
    }
    if (!bad) {
        const float neg = -INFINITY;
        for (Py_ssize_t i = 0; i < k; i++) l[d[i]] = neg;
    }
    PyBuffer_Release(&bd);
    PyBuffer_Release(&bl);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "apply_disallowed: ids must be inside the logits");
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(apply_bytemask_doc,
"apply_bytemask(logits, keep) -> None\n\n"
"logits: float32[n], writable; keep: uint8[n] (0 = disallowed). Writes -inf where keep is 0\n"
"(branch-free, vectorizable: the form for states allowing a middling share of the vocabulary).");

static PyObject *
apply_bytemask(PyObject *self, PyObject *args)
{
    PyObject *o_l, *o_k;
    if (!PyArg_ParseTuple(args, "OO", &o_l, &o_k)) return NULL;
    Py_buffer bl, bk;
    if (get_buf(o_l, &bl, 1, 4, "logits") < 0) return NULL;
    if (get_buf(o_k, &bk, 0, 1, "keep") < 0) {
        PyBuffer_Release(&bl);
        return NULL;
    }
    Py_ssize_t n = n_items(&bl);
    int bad = n_items(&bk) != n;
    if (!bad) {
        float *restrict l = (float *)bl.buf;
        const uint8_t *restrict k = (const uint8_t *)bk.buf;
        const float neg = -INFINITY;
        for (Py_ssize_t i = 0; i < n; i++) l[i] = k[i] ? l[i] : neg;
    }
    PyBuffer_Release(&bk);
    PyBuffer_Release(&bl);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "apply_bytemask: keep must have one byte per logit");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* ---- run-length decoding (what grammar_file loads tables from) -------------------------------- */

PyDoc_STRVAR(expand_runs_doc,
"expand_runs(values, lengths, lo, hi, out) -> bool\n\n"
"Fill out (int32) with each value repeated its length, in order, if every value is in [lo, hi), every length\n"
">= 0, and the lengths add up to exactly len(out); otherwise return False (out partly written). One pass that\n"
"both checks and decodes what a cache file claims, so that a table read from disk can be trusted by `walk`.");

static PyObject *
expand_runs(PyObject *self, PyObject *args)
{
    PyObject *o_v, *o_l, *o_out;
    long long lo, hi;
    if (!PyArg_ParseTuple(args, "OOLLO", &o_v, &o_l, &lo, &hi, &o_out)) return NULL;
    Py_buffer bv, bl, bo;
    if (get_buf(o_v, &bv, 0, 4, "values") < 0) return NULL;
    if (get_buf(o_l, &bl, 0, 4, "lengths") < 0) {
        PyBuffer_Release(&bv);
        return NULL;
    }
    if (get_buf(o_out, &bo, 1, 4, "out") < 0) {
        PyBuffer_Release(&bv);
        PyBuffer_Release(&bl);
        return NULL;
    }
    const int32_t *v = (const int32_t *)bv.buf, *len = (const int32_t *)bl.buf;
    int32_t *out = (int32_t *)bo.buf;
    Py_ssize_t n_runs = n_items(&bv), n_out = n_items(&bo), at = 0;
    int ok = n_items(&bl) == n_runs;
    for (Py_ssize_t r = 0; ok && r < n_runs; r++) {
        int32_t value = v[r], length = len[r];
        if (value < lo || value >= hi || length < 0 || length > n_out - at) {
            ok = 0;
            break;
        }
        for (int32_t k = 0; k < length; k++) out[at + k] = value;
        at += length;
    }
    PyBuffer_Release(&bv);
    PyBuffer_Release(&bl);
    PyBuffer_Release(&bo);
    return PyBool_FromLong(ok && at == n_out);
}

/* ---- rule graphs: shortest completions and bytes to a boundary (pushdown.py) ------------------- */

static int
get_bufs(PyObject **objs, Py_buffer *bufs, int n, const Py_ssize_t *sizes, const int *writable, const char **names)
{
    for (int i = 0; i < n; i++) {
        if (get_buf(objs[i], &bufs[i], writable[i], sizes[i], names[i]) < 0) {
            while (i > 0) PyBuffer_Release(&bufs[--i]);
            return -1;
        }
    }
    return 0;
}

static void
release_bufs(Py_buffer *bufs, int n)
{
    while (n > 0) PyBuffer_Release(&bufs[--n]);
}

PyDoc_STRVAR(expand_classes_doc,
"expand_classes(class_table, symbol_class, out)\n\n"
"Fill out (int32 [n, width]) with the table by symbol of a class table (int32 [n, classes]):\n"
"out[s, j] = class_table[s, symbol_class[j]]. Every symbol_class entry must be a column of class_table\n"
"(ValueError otherwise, out untouched). What numpy's take along axis 1 does, at memory speed: a DFA's table\n"
"is expanded from its class form whenever masks are first walked.");

static PyObject *
expand_classes(PyObject *self, PyObject *args)
{
    PyObject *o[3];
    if (!PyArg_ParseTuple(args, "OOO", &o[0], &o[1], &o[2])) return NULL;
    Py_buffer b[3];
    const Py_ssize_t sizes[3] = {4, 4, 4};
    const int wr[3] = {0, 0, 1};
    const char *names[3] = {"class_table", "symbol_class", "out"};
    if (get_bufs(o, b, 3, sizes, wr, names) < 0) return NULL;
    const int32_t *C = (const int32_t *)b[0].buf, *sc = (const int32_t *)b[1].buf;
    int32_t *out = (int32_t *)b[2].buf;
    Py_ssize_t width = n_items(&b[1]), classes = b[0].ndim == 2 ? b[0].shape[1] : 0;
    Py_ssize_t n = classes ? n_items(&b[0]) / classes : 0;
    int bad = b[0].ndim != 2 || n_items(&b[2]) != n * width;
    for (Py_ssize_t j = 0; !bad && j < width; j++) bad = sc[j] < 0 || sc[j] >= classes;
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "expand_classes: inconsistent shapes or a symbol class out of range");
        release_bufs(b, 3);
        return NULL;
    }
    for (Py_ssize_t s = 0; s < n; s++) {
        const int32_t *row = C + s * classes;
        int32_t *to = out + s * width;
        for (Py_ssize_t j = 0; j < width; j++) to[j] = row[sc[j]];
    }
    release_bufs(b, 3);
    Py_RETURN_NONE;
}


/* Parse (array, width) into a read-only int32 buffer of n rows of `width`; ValueError "<kernel>: <name> is not
 * [n, width]" (or the buffer's own error) otherwise. Returns 0, or -1 with the buffer released. */
static int
get_rows(PyObject *args, const char *kernel, const char *name, Py_buffer *b, Py_ssize_t *n, Py_ssize_t *width)
{
    PyObject *o[1];
    const Py_ssize_t sizes[1] = {4};
    const int wr[1] = {0};
    const char *names[1] = {name};
    if (!PyArg_ParseTuple(args, "On", &o[0], width) || get_bufs(o, b, 1, sizes, wr, names) < 0) return -1;
    *n = *width > 0 ? n_items(b) / *width : 0;
    if (*width < 1 || n_items(b) != *n * *width || *n >= INT32_MAX / 2) {
        PyErr_Format(PyExc_ValueError, "%s: %s is not [n, width]", kernel, name);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

/* Equal rows of an int32 [n, width] array share a class, numbered in order of first appearance: class_of[n] and
 * each class's first row (first[n] room). Returns the number of classes, or -1 with MemoryError set. */
static Py_ssize_t
classify_rows(const int32_t *R, Py_ssize_t n, Py_ssize_t width, int32_t *class_of, int32_t *first)
{
    size_t slots = 2;
    while (slots < 2 * (size_t)n) slots <<= 1;
    int32_t *slot = (int32_t *)malloc(sizeof(int32_t) * slots);  /* a class (its first row) or -1 */
    if (!slot) {
        PyErr_NoMemory();
        return -1;
    }
    memset(slot, 0xff, sizeof(int32_t) * slots);
    int32_t classes = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const int32_t *row = R + i * width;
        uint64_t h = 1469598103934665603ULL;  /* FNV-1a over the row's words */
        for (Py_ssize_t j = 0; j < width; j++) h = (h ^ (uint32_t)row[j]) * 1099511628211ULL;
        size_t at = (size_t)(h ^ (h >> 29)) & (slots - 1);
        while (slot[at] >= 0 && memcmp(R + (Py_ssize_t)first[slot[at]] * width, row, sizeof(int32_t) * width)) {
            at = (at + 1) & (slots - 1);
        }
        if (slot[at] < 0) {
            slot[at] = classes;
            first[classes++] = (int32_t)i;
        }
        class_of[i] = slot[at];
    }
    free(slot);
    return classes;
}

PyDoc_STRVAR(row_classes_doc,
"row_classes(rows, width) -> (class_of, first)\n\n"
"Equal rows of an int32 [n, width] array share a class, numbered in order of first appearance: two bytes\n"
"objects of int32, the class of each row [n] and each class's first row [classes]. How symbols are grouped\n"
"into classes (a row is a symbol's column, or its class in each rule): one hashed pass, where sorting the rows\n"
"as opaque keys cost most of a small grammar's class step.");

static PyObject *
row_classes(PyObject *self, PyObject *args)
{
    Py_buffer b[1];
    Py_ssize_t n, width;
    if (get_rows(args, "row_classes", "rows", &b[0], &n, &width) < 0) return NULL;
    int32_t *class_of = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    int32_t *first = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    PyObject *result = NULL;
    Py_ssize_t classes = -1;
    if (!class_of || !first) {
        PyErr_NoMemory();
    } else {
        classes = classify_rows((const int32_t *)b[0].buf, n, width, class_of, first);
    }
    if (classes >= 0) {
        result = Py_BuildValue("y#y#", (const char *)class_of, (Py_ssize_t)sizeof(int32_t) * n, (const char *)first,
                               (Py_ssize_t)sizeof(int32_t) * classes);
    }
    free(class_of);
    free(first);
    release_bufs(b, 1);
    return result;
}

/* One rule of `lay_out_rules`: its DFA in class form (n states, c classes, k special symbols), where its states
 * start in the combined numbering, and its all-dead class (-1 if none). */
typedef struct {
    Py_ssize_t n, c, k;
    const int32_t *table, *symbol_class, *columns;
    const uint8_t *accepting;
    int32_t base, dead;
    int32_t *edges;     /* the classes that are moves: a byte's or a special token's (a call's is no edge) */
    Py_ssize_t n_edges;
} RuleBlock;

/* The distinct predecessors of every state of blocks side by side (CSR: into[start[t] .. start[t+1]) are the
 * sources s with an edge s -> t on some symbol, each once, ascending), reading each block's table through its edge
 * classes only. Returns 0, or -1 with MemoryError set. */
static int
reverse_edges(const RuleBlock *blocks, Py_ssize_t n_blocks, Py_ssize_t n, int32_t **start_out, int32_t **into_out)
{
    int32_t *start = (int32_t *)calloc((size_t)n + 1, sizeof(int32_t));
    int32_t *mark = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    int32_t *into = NULL, *fill = mark; /* the second pass reuses mark: the next free slot per target */
    if (!start || !mark) goto fail;
    for (Py_ssize_t t = 0; t < n; t++) mark[t] = -1;
    for (int pass = 0; pass < 2; pass++) { /* count each state's sources, then write them */
        for (Py_ssize_t b = 0; b < n_blocks; b++) {
            const RuleBlock *block = &blocks[b];
            for (Py_ssize_t s = 0; s < block->n; s++) {
                const int32_t *row = block->table + s * block->c;
                int32_t source = block->base + (int32_t)s;
                for (Py_ssize_t i = 0; i < block->n_edges; i++) {
                    int32_t t = row[block->edges[i]];
                    if (t < 0) continue;
                    t += block->base;
                    if (!pass && mark[t] != source) {
                        mark[t] = source;
                        start[t + 1]++;
                    } else if (pass && (fill[t] == start[t] || into[fill[t] - 1] != source)) {
                        into[fill[t]++] = source;
                    }
                }
            }
        }
        if (pass) break;
        for (Py_ssize_t t = 0; t < n; t++) start[t + 1] += start[t];
        into = (int32_t *)malloc(sizeof(int32_t) * (size_t)(start[n] ? start[n] : 1));
        if (!into) goto fail;
        for (Py_ssize_t t = 0; t < n; t++) fill[t] = start[t];
    }
    free(mark);
    *start_out = start;
    *into_out = into;
    return 0;
fail:
    free(start);
    free(mark);
    free(into);
    PyErr_NoMemory();
    return -1;
}

/* Whether the rule's column `x` is DEAD in every state. */
static int
column_dead(const RuleBlock *rule, int32_t x)
{
    for (Py_ssize_t s = 0; s < rule->n; s++) {
        if (rule->table[s * rule->c + x] != DEAD) return 0;
    }
    return 1;
}

/* The class whose column is DEAD in every state, or -1. Byte 0xFF never occurs in UTF-8, so its class is tried
 * first (classes are canonical: at most one is dead). */
static int32_t
dead_class(const RuleBlock *rule)
{
    int32_t guess = rule->symbol_class[0xFF];
    if (column_dead(rule, guess)) return guess;
    for (int32_t x = 0; x < (int32_t)rule->c; x++) {
        if (x != guess && column_dead(rule, x)) return x;
    }
    return -1;
}

/* Read and check one (n_states, class_table, symbol_class, accepting, columns) entry into `rule`, its buffers into
 * b[0..4). Returns 0, or -1 with ValueError (or the buffer's error) set and nothing held. */
static int
read_rule_block(PyObject *item, Py_ssize_t width, RuleBlock *rule, Py_buffer *b)
{
    PyObject *o[4];
    Py_ssize_t n;
    if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "nOOOO", &n, &o[0], &o[1], &o[2], &o[3])) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "lay_out_rules: a rule is not (n_states, class_table, symbol_class, "
                                              "accepting, columns)");
        }
        return -1;
    }
    const Py_ssize_t sizes[4] = {0, 0, 0, 0};  /* bytes or int32 arrays alike: sizes are checked in bytes */
    const int wr[4] = {0, 0, 0, 0};
    const char *names[4] = {"class_table", "symbol_class", "accepting", "columns"};
    if (get_bufs(o, b, 4, sizes, wr, names) < 0) return -1;
    Py_ssize_t bytes[4] = {b[0].len, b[1].len, b[2].len, b[3].len};
    rule->n = n;
    rule->c = n > 0 ? bytes[0] / 4 / n : 0;
    rule->k = bytes[1] / 4 - 256;
    rule->table = (const int32_t *)b[0].buf;
    rule->symbol_class = (const int32_t *)b[1].buf;
    rule->accepting = (const uint8_t *)b[2].buf;
    rule->columns = (const int32_t *)b[3].buf;
    int bad = n < 1 || n >= INT32_MAX || rule->c < 1 || bytes[0] != 4 * n * rule->c || bytes[1] % 4 ||
              rule->k < 0 || bytes[2] != n || bytes[3] != 4 * rule->k ||
              table_out_of_range(rule->table, n * rule->c, n) ||
              table_out_of_range(rule->symbol_class, 256 + rule->k, rule->c) ||
              any_below(rule->symbol_class, 256 + rule->k, 0);
    for (Py_ssize_t j = 0; !bad && j < rule->k; j++) {  /* a combined special column, or a call (negative) */
        bad = rule->columns[j] >= width || (rule->columns[j] >= 0 && rule->columns[j] < 256);
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "lay_out_rules: inconsistent shapes, a class, state or column out of range");
        release_bufs(b, 4);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(lay_out_rules_doc,
"lay_out_rules(rules, width)\n"
"    -> (symbol_class, first_symbols, by_class, rule_accept, call_src, call_index, call_cont, pred_start, pred)\n\n"
"A pushdown grammar's table from its rules' DFAs in class form, laid side by side (states numbered rule after\n"
"rule). rules: a sequence of (n_states, class_table, symbol_class, accepting, columns): class_table int32 [n, c]\n"
"with entries in [-1, n), symbol_class int32 [256 + k] in [0, c), accepting uint8 [n], and columns int32 [k]:\n"
"each special symbol's combined column in [256, width), or -1 - j for call j (calls go to a side table).\n"
"Returns int32 bytes unless said: each combined symbol's class [width] (two symbols share one exactly when they\n"
"share a class in every rule; a symbol a rule lacks reads its all-dead column), numbered in order of first\n"
"symbol; each class's first symbol; the table by combined class [total, classes] (a bytearray: the caller cuts\n"
"it); rule_accept (uint8 [total], a bytearray); every call move as call states, call indices j and\n"
"continuations, rule by rule, call by call in the rule's order, states ascending; and the table's predecessors\n"
"(pred_start, pred: into[start[t] .. start[t+1]) are the sources s with an edge s -> t on some symbol, each once,\n"
"ascending), read from each rule's own few classes. ValueError on anything out of range. One pass over the\n"
"rules where numpy took a dozen small array operations per rule.");

static PyObject *
lay_out_rules(PyObject *self, PyObject *args)
{
    PyObject *rules_obj;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "On", &rules_obj, &width)) return NULL;
    if (width < 256 || width > INT32_MAX / 2) {
        PyErr_SetString(PyExc_ValueError, "lay_out_rules: width out of range");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(rules_obj, "lay_out_rules: rules must be a sequence");
    if (!seq) return NULL;
    Py_ssize_t n_rules = PySequence_Fast_GET_SIZE(seq), held = 0, total = 0, classes = 0, rule_classes = 0;
    PyObject *result = NULL, *by_class = NULL, *accept = NULL;
    RuleBlock *rules = (RuleBlock *)calloc((size_t)(n_rules ? n_rules : 1), sizeof(RuleBlock));
    Py_buffer *bufs = (Py_buffer *)calloc((size_t)(4 * n_rules + 1), sizeof(Py_buffer));
    int32_t *matrix = NULL, *class_of = NULL, *first = NULL, *column = NULL, *calls = NULL, *edges = NULL;
    int32_t *pred_start = NULL, *pred_into = NULL;
    uint8_t *is_edge = NULL;
    if (!rules || !bufs) {
        PyErr_NoMemory();
        goto done;
    }
    if (!n_rules) {
        PyErr_SetString(PyExc_ValueError, "lay_out_rules: no rules");
        goto done;
    }
    for (Py_ssize_t r = 0; r < n_rules; r++) {
        if (read_rule_block(PySequence_Fast_GET_ITEM(seq, r), width, &rules[r], bufs + held) < 0) goto done;
        held += 4;
        if (total > INT32_MAX - 1 - rules[r].n) {
            PyErr_SetString(PyExc_ValueError, "lay_out_rules: more states than int32 numbers");
            goto done;
        }
        rules[r].base = (int32_t)total;
        rules[r].dead = dead_class(&rules[r]);
        total += rules[r].n;
        rule_classes += rules[r].c;
    }
    edges = (int32_t *)malloc(sizeof(int32_t) * (size_t)rule_classes);  /* every rule's edge classes, in a row */
    is_edge = (uint8_t *)malloc((size_t)rule_classes);
    if (!edges || !is_edge) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t r = 0, at = 0; r < n_rules; r++) {
        RuleBlock *rule = &rules[r];
        memset(is_edge, 0, (size_t)rule->c);
        for (Py_ssize_t x = 0; x < 256 + rule->k; x++) {
            is_edge[rule->symbol_class[x]] |= x < 256 || rule->columns[x - 256] >= 0;
        }
        rule->edges = edges + at;
        for (int32_t c = 0; c < (int32_t)rule->c; c++) {
            if (is_edge[c]) edges[at + rule->n_edges++] = c;
        }
        at += rule->n_edges;
    }
    /* each symbol's class in every rule: a row per symbol, a column per rule */
    matrix = (int32_t *)malloc(sizeof(int32_t) * (size_t)(width * n_rules));
    class_of = (int32_t *)malloc(sizeof(int32_t) * (size_t)width);
    first = (int32_t *)malloc(sizeof(int32_t) * (size_t)width);
    column = (int32_t *)malloc(sizeof(int32_t) * (size_t)width);
    if (!matrix || !class_of || !first || !column) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t r = 0; r < n_rules; r++) {
        const RuleBlock *rule = &rules[r];
        for (Py_ssize_t x = 0; x < width; x++) matrix[x * n_rules + r] = x < 256 ? rule->symbol_class[x] : rule->dead;
        for (Py_ssize_t j = 0; j < rule->k; j++) {
            if (rule->columns[j] >= 0) matrix[rule->columns[j] * n_rules + r] = rule->symbol_class[256 + j];
        }
    }
    classes = classify_rows(matrix, width, n_rules, class_of, first);
    if (classes < 0) goto done;
    if (total > PY_SSIZE_T_MAX / 4 / classes) {
        PyErr_NoMemory();
        goto done;
    }
    by_class = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)sizeof(int32_t) * total * classes);
    accept = PyByteArray_FromStringAndSize(NULL, total);
    if (!by_class || !accept) goto done;
    int32_t *out = (int32_t *)PyByteArray_AS_STRING(by_class);
    uint8_t *acc = (uint8_t *)PyByteArray_AS_STRING(accept);
    Py_ssize_t moves = 0;
    for (Py_ssize_t r = 0; r < n_rules; r++) {
        const RuleBlock *rule = &rules[r];
        for (Py_ssize_t j = 0; j < classes; j++) column[j] = matrix[(Py_ssize_t)first[j] * n_rules + r];
        for (Py_ssize_t s = 0; s < rule->n; s++) {
            const int32_t *row = rule->table + s * rule->c;
            int32_t *to = out + (rule->base + s) * classes;
            for (Py_ssize_t j = 0; j < classes; j++) {
                int32_t t = column[j] < 0 ? DEAD : row[column[j]];
                to[j] = t < 0 ? DEAD : t + rule->base;
            }
            acc[rule->base + s] = rule->accepting[s] != 0;
        }
        for (Py_ssize_t j = 0; j < rule->k; j++) {
            if (rule->columns[j] >= 0) continue;
            int32_t x = rule->symbol_class[256 + j];
            for (Py_ssize_t s = 0; s < rule->n; s++) moves += rule->table[s * rule->c + x] >= 0;
        }
    }
    calls = (int32_t *)malloc(sizeof(int32_t) * (size_t)(3 * moves + 1));
    if (!calls) {
        PyErr_NoMemory();
        goto done;
    }
    if (reverse_edges(rules, n_rules, total, &pred_start, &pred_into) < 0) goto done;
    Py_ssize_t m = 0;
    for (Py_ssize_t r = 0; r < n_rules; r++) {
        const RuleBlock *rule = &rules[r];
        for (Py_ssize_t j = 0; j < rule->k; j++) {
            if (rule->columns[j] >= 0) continue;
            int32_t x = rule->symbol_class[256 + j], index = -1 - rule->columns[j];
            for (Py_ssize_t s = 0; s < rule->n; s++) {
                int32_t t = rule->table[s * rule->c + x];
                if (t < 0) continue;
                calls[m] = rule->base + (int32_t)s;
                calls[moves + m] = index;
                calls[2 * moves + m] = rule->base + t;
                m++;
            }
        }
    }
    Py_ssize_t word = (Py_ssize_t)sizeof(int32_t);
    result = Py_BuildValue("y#y#OOy#y#y#y#y#", (const char *)class_of, word * width, (const char *)first,
                           word * classes, by_class, accept, (const char *)calls, word * moves,
                           (const char *)(calls + moves), word * moves, (const char *)(calls + 2 * moves),
                           word * moves, (const char *)pred_start, word * (total + 1), (const char *)pred_into,
                           word * pred_start[total]);
done:
    Py_XDECREF(by_class);
    Py_XDECREF(accept);
    free(matrix);
    free(class_of);
    free(first);
    free(column);
    free(calls);
    free(edges);
    free(is_edge);
    free(pred_start);
    free(pred_into);
    release_bufs(bufs, (int)held);
    free(bufs);
    free(rules);
    Py_DECREF(seq);
    return result;
}

/* Whether (start, into) is not the CSR of a graph over n states: start[0 .. n] from 0, never decreasing, ending
 * at `edges`; every entry of into a state. */
static int
csr_out_of_range(const int32_t *start, Py_ssize_t n_start, const int32_t *into, Py_ssize_t edges, Py_ssize_t n)
{
    if (n_start != n + 1 || start[0] != 0 || start[n] != edges) return 1;
    int bad = 0;
    for (Py_ssize_t t = 0; t < n; t++) bad |= start[t + 1] < start[t];
    return bad || any_below(into, edges, 0) || table_out_of_range(into, edges, n);
}

/* Group calls by one of their endpoints (CSR over states; entries are call indices, ascending). */
static int32_t *
calls_by(const int32_t *key, Py_ssize_t m, Py_ssize_t n, int32_t **start_out)
{
    int32_t *start = (int32_t *)calloc((size_t)n + 1, sizeof(int32_t));
    int32_t *order = (int32_t *)malloc(sizeof(int32_t) * (size_t)(m ? m : 1));
    if (!start || !order) {
        free(start);
        free(order);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t k = 0; k < m; k++) start[key[k] + 1]++;
    for (Py_ssize_t t = 0; t < n; t++) start[t + 1] += start[t];
    int32_t *fill = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (!fill) {
        free(start);
        free(order);
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(fill, start, sizeof(int32_t) * (size_t)n);
    for (Py_ssize_t k = 0; k < m; k++) order[fill[key[k]]++] = (int32_t)k;
    free(fill);
    *start_out = start;
    return order;
}

typedef struct { int64_t d; int32_t state; } heap_item;

static int
heap_less(heap_item a, heap_item b)
{
    return a.d < b.d || (a.d == b.d && a.state < b.state);
}

typedef struct { heap_item *items; Py_ssize_t size, cap; } heap;

static int
heap_push(heap *h, int64_t d, int32_t state)
{
    if (h->size == h->cap) {
        Py_ssize_t cap = h->cap ? 2 * h->cap : 1024;
        heap_item *grown = (heap_item *)realloc(h->items, sizeof(heap_item) * (size_t)cap);
        if (!grown) return -1;
        h->items = grown;
        h->cap = cap;
    }
    heap_item x = {d, state};
    Py_ssize_t i = h->size++;
    while (i > 0) {
        Py_ssize_t parent = (i - 1) / 2;
        if (!heap_less(x, h->items[parent])) break;
        h->items[i] = h->items[parent];
        i = parent;
    }
    h->items[i] = x;
    return 0;
}

static heap_item
heap_pop(heap *h)
{
    heap_item top = h->items[0], last = h->items[--h->size];
    Py_ssize_t i = 0;
    for (;;) {
        Py_ssize_t child = 2 * i + 1;
        if (child >= h->size) break;
        if (child + 1 < h->size && heap_less(h->items[child + 1], h->items[child])) child++;
        if (!heap_less(h->items[child], last)) break;
        h->items[i] = h->items[child];
        i = child;
    }
    if (h->size > 0) h->items[i] = last;
    return top;
}

enum { HOP_NONE = 0, HOP_SYMBOL = 1, HOP_CALL = 2 };

/* Whether hop (kind, a, b) is canonically before (ok, oa, ob): calls before symbols, then by (a, b). */
static int
hop_before(int kind, int32_t a, int32_t b, int ok, int32_t oa, int32_t ob)
{
    if (kind != ok) return kind == HOP_CALL;
    return a < oa || (a == oa && b < ob);
}

PyDoc_STRVAR(shortest_completions_doc,
"shortest_completions(pred_start, pred, rule_accept, call_src, call_callee, call_cont, unreachable,\n"
"                     dist, final, hop_kind, hop_a, hop_b)\n\n"
"Shortest completion of every state of a rule table (given as its predecessors from `lay_out_rules`;\n"
"n = len(rule_accept)) within its rule: Knuth's generalisation of Dijkstra, where a symbol edge weighs 1 and\n"
"a call s -> (callee, cont) weighs dist[callee] + dist[cont]. Accepting states (rule_accept uint8[n]) are at\n"
"0. Outputs, each [n]: dist int64 (`unreachable` where no completion), final uint8 (1 where finished),\n"
"hop_kind uint8 (0 none, 1 symbol: hop_a = the target state, 2 call: hop_a = callee, hop_b = continuation),\n"
"hop_a / hop_b int32. Among equal distances the canonical hop wins (a call before a symbol, then the smaller\n"
"target / (callee, continuation)); states are finished in (dist, state) order, so the result is deterministic.");

static PyObject *
shortest_completions(PyObject *self, PyObject *args)
{
    PyObject *o[11];
    long long unreachable;
    if (!PyArg_ParseTuple(args, "OOOOOOLOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &unreachable, &o[6],
                          &o[7], &o[8], &o[9], &o[10])) {
        return NULL;
    }
    Py_buffer b[11];
    const Py_ssize_t sizes[11] = {4, 4, 1, 4, 4, 4, 8, 1, 1, 4, 4};
    const int wr[11] = {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1};
    const char *names[11] = {"pred_start", "pred", "rule_accept", "call_src", "call_callee", "call_cont", "dist",
                             "final", "hop_kind", "hop_a", "hop_b"};
    if (get_bufs(o, b, 11, sizes, wr, names) < 0) return NULL;
    PyObject *result = NULL;
    int32_t *callee_start = NULL, *by_callee = NULL, *cont_start = NULL, *by_cont = NULL;
    heap h = {NULL, 0, 0};
    Py_ssize_t n = n_items(&b[2]), m = n_items(&b[3]);
    const int32_t *rev_start = (const int32_t *)b[0].buf, *rev = (const int32_t *)b[1].buf,
                  *csrc = (const int32_t *)b[3].buf, *ccallee = (const int32_t *)b[4].buf,
                  *ccont = (const int32_t *)b[5].buf;
    int bad = n >= INT32_MAX || n_items(&b[4]) != m || n_items(&b[5]) != m ||
              csr_out_of_range(rev_start, n_items(&b[0]), rev, n_items(&b[1]), n);
    for (int k = 6; k < 11; k++) bad = bad || n_items(&b[k]) != n;
    for (Py_ssize_t k = 0; !bad && k < m; k++) {
        bad = csrc[k] < 0 || csrc[k] >= n || ccallee[k] < 0 || ccallee[k] >= n || ccont[k] < 0 || ccont[k] >= n;
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "shortest_completions: inconsistent array sizes or states");
        goto done;
    }
    if (!(by_callee = calls_by(ccallee, m, n, &callee_start))) goto done;
    if (!(by_cont = calls_by(ccont, m, n, &cont_start))) goto done;
    const uint8_t *accept = (const uint8_t *)b[2].buf;
    int64_t *dist = (int64_t *)b[6].buf;
    uint8_t *final = (uint8_t *)b[7].buf, *kind = (uint8_t *)b[8].buf;
    int32_t *ha = (int32_t *)b[9].buf, *hb = (int32_t *)b[10].buf;
    for (Py_ssize_t s = 0; s < n; s++) {
        dist[s] = accept[s] ? 0 : (int64_t)unreachable;
        final[s] = 0;
        kind[s] = HOP_NONE;
        ha[s] = hb[s] = -1;
        if (accept[s] && heap_push(&h, 0, (int32_t)s) < 0) goto oom;
    }
#define RELAX(S, D, KIND, A, B)                                                                            \
    do {                                                                                                   \
        int32_t s_ = (S);                                                                                  \
        int64_t d_ = (D);                                                                                  \
        if (d_ < dist[s_] || (d_ == dist[s_] && kind[s_] != HOP_NONE && hop_before(KIND, A, B, kind[s_],   \
                                                                                   ha[s_], hb[s_]))) {     \
            dist[s_] = d_;                                                                                 \
            kind[s_] = (KIND);                                                                             \
            ha[s_] = (A);                                                                                  \
            hb[s_] = (B);                                                                                  \
            if (heap_push(&h, d_, s_) < 0) goto oom;                                                       \
        }                                                                                                  \
    } while (0)
    while (h.size > 0) {
        heap_item top = heap_pop(&h);
        int32_t u = top.state;
        int64_t d = top.d;
        if (final[u] || d != dist[u]) continue;
        final[u] = 1;
        for (int32_t k = rev_start[u]; k < rev_start[u + 1]; k++) {
            if (!final[rev[k]]) RELAX(rev[k], d + 1, HOP_SYMBOL, u, -1);
        }
        for (int32_t k = cont_start[u]; k < cont_start[u + 1]; k++) {
            int32_t c = by_cont[k], s = csrc[c], callee = ccallee[c];
            if (final[callee] && !final[s]) RELAX(s, dist[callee] + d, HOP_CALL, callee, u);
        }
        for (int32_t k = callee_start[u]; k < callee_start[u + 1]; k++) {
            int32_t c = by_callee[k], s = csrc[c], cont = ccont[c];
            if (final[cont] && !final[s]) RELAX(s, d + dist[cont], HOP_CALL, u, cont);
        }
    }
#undef RELAX
    Py_INCREF(Py_None);
    result = Py_None;
    goto done;
oom:
    PyErr_NoMemory();
done:
    free(h.items);
    free(callee_start);
    free(by_callee);
    free(cont_start);
    free(by_cont);
    release_bufs(b, 11);
    return result;
}

PyDoc_STRVAR(first_class_into_doc,
"first_class_into(classes, states, targets, out) -> None\n\n"
"out[k] = the first column c of classes (int32 [n_states, n_classes]) with classes[states[k], c] == targets[k]:\n"
"the class of a shortest completion's symbol hop whose first symbol is the canonical one (classes are numbered in\n"
"order of their first symbol). ValueError for a state out of range or a target no column of its row reaches.");

static PyObject *
first_class_into(PyObject *self, PyObject *args)
{
    PyObject *o[4];
    if (!PyArg_ParseTuple(args, "OOOO", &o[0], &o[1], &o[2], &o[3])) return NULL;
    Py_buffer b[4];
    const Py_ssize_t sizes[4] = {4, 4, 4, 4};
    const int wr[4] = {0, 0, 0, 1};
    const char *names[4] = {"classes", "states", "targets", "out"};
    if (get_bufs(o, b, 4, sizes, wr, names) < 0) return NULL;
    const int32_t *C = (const int32_t *)b[0].buf, *st = (const int32_t *)b[1].buf, *tg = (const int32_t *)b[2].buf;
    int32_t *out = (int32_t *)b[3].buf;
    Py_ssize_t ncls = b[0].ndim == 2 ? b[0].shape[1] : 0, n = n_items(&b[1]);
    Py_ssize_t n_states = ncls ? n_items(&b[0]) / ncls : 0;
    int bad = !ncls || n_items(&b[2]) != n || n_items(&b[3]) != n;
    for (Py_ssize_t k = 0; !bad && k < n; k++) {
        Py_ssize_t c = 0;
        if (st[k] >= 0 && st[k] < n_states) {
            const int32_t *row = C + (Py_ssize_t)st[k] * ncls;
            while (c < ncls && row[c] != tg[k]) c++;
        }
        bad = c == ncls || st[k] < 0 || st[k] >= n_states;
        out[k] = (int32_t)c;
    }
    release_bufs(b, 4);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "first_class_into: a state out of range or a target its row never reaches");
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(bytes_to_boundary_doc,
"bytes_to_boundary(pred_start, pred, boundary, cap, reach)\n\n"
"Fewest symbols from every state to a boundary state (boundary uint8[n] non-zero), by a backward\n"
"breadth-first search over a table's predecessors (`lay_out_rules`); reach int32[n] is filled, `cap` where it\n"
"is cap or more.");

static PyObject *
bytes_to_boundary(PyObject *self, PyObject *args)
{
    PyObject *o[4];
    Py_ssize_t cap;
    if (!PyArg_ParseTuple(args, "OOOnO", &o[0], &o[1], &o[2], &cap, &o[3])) return NULL;
    Py_buffer b[4];
    const Py_ssize_t sizes[4] = {4, 4, 1, 4};
    const int wr[4] = {0, 0, 0, 1};
    const char *names[4] = {"pred_start", "pred", "boundary", "reach"};
    if (get_bufs(o, b, 4, sizes, wr, names) < 0) return NULL;
    PyObject *result = NULL;
    int32_t *queue = NULL;
    Py_ssize_t n = n_items(&b[2]);
    const int32_t *rev_start = (const int32_t *)b[0].buf, *rev = (const int32_t *)b[1].buf;
    if (n >= INT32_MAX || n_items(&b[3]) != n || cap < 0 || cap > INT32_MAX ||
        csr_out_of_range(rev_start, n_items(&b[0]), rev, n_items(&b[1]), n)) {
        PyErr_SetString(PyExc_ValueError, "bytes_to_boundary: inconsistent array sizes or states");
        goto done;
    }
    queue = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (!queue) {
        PyErr_NoMemory();
        goto done;
    }
    const uint8_t *boundary = (const uint8_t *)b[2].buf;
    int32_t *reach = (int32_t *)b[3].buf;
    Py_ssize_t head = 0, tail = 0;
    for (Py_ssize_t s = 0; s < n; s++) {
        reach[s] = boundary[s] ? 0 : (int32_t)cap;
        if (boundary[s] && cap > 0) queue[tail++] = (int32_t)s;
    }
    while (head < tail) {
        int32_t t = queue[head++];
        int32_t next = reach[t] + 1;
        if (next >= cap) continue;
        for (int32_t k = rev_start[t]; k < rev_start[t + 1]; k++) {
            int32_t s = rev[k];
            if (reach[s] > next) {
                reach[s] = next;
                queue[tail++] = s;
            }
        }
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    free(queue);
    release_bufs(b, 4);
    return result;
}

/* ---- completion_bounds ----------------------------------------------------------------------- */

/* From s, while hop[s] >= 0: chain[L] = s, symbols[L] = hop[s], s = its target (T int32[n * width] by class,
 * cls int32[n_symbols] each symbol's column). Returns L (chain[L] where it stopped), or -1 when a hop leads to
 * DEAD or past `cap` hops. */
static Py_ssize_t
follow_chain(const int32_t *T, Py_ssize_t width, const int32_t *cls, Py_ssize_t n_symbols, Py_ssize_t n,
             const int32_t *hop, int32_t s, int32_t *chain, int32_t *symbols, Py_ssize_t cap)
{
    Py_ssize_t L = 0;
    chain[0] = s;
    while (hop[s] >= 0) {
        int32_t symbol = hop[s], t = DEAD;
        if (symbol < n_symbols) t = T[(Py_ssize_t)s * width + cls[symbol]];
        if (L >= cap || t < 0 || t >= n) return -1;
        symbols[L++] = symbol;
        chain[L] = s = t;
    }
    return L;
}

PyDoc_STRVAR(completion_bounds_doc,
"completion_bounds(classes, symbol_class, symbol_hop, dist, rule_accept, hop_a, hop_b, node_byte, node_end,\n"
"                  tok_start, root_child, ub, states) -> None\n\n"
"UB of each of `states` (int32) in a pushdown grammar's rule table (n states, in its class form as for `walk`),\n"
"in one call (a mask asks hundreds of them), filling ub (int64[n], -1 = not known yet) for every\n"
"state on the way: the fewest tokens of the state's canonical shortest completion, tokenized piecewise -- its\n"
"chain of symbol hops (symbol_hop int32[n], -1 where the chain stops) by min_tokenization, plus UB(hop_a) +\n"
"UB(hop_b) (callee start, continuation) where the chain stops at a call rather than at the rule's end\n"
"(dist int64[n] == 0 and rule_accept uint8[n]). Capped at INT32_MAX/2. Depth-first over an explicit stack;\n"
"a call cycle is a ValueError.");

static PyObject *
completion_bounds(PyObject *self, PyObject *args)
{
    PyObject *o[13];
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOO", &o[0], &o[11], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7],
                          &o[8], &o[9], &o[10], &o[12])) {
        return NULL;
    }
    Py_buffer b[13];
    const Py_ssize_t sizes[13] = {4, 4, 8, 1, 4, 4, 1, 4, 4, 4, 8, 4, 4};
    const int wr[13] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0};
    const char *names[13] = {"by_class", "symbol_hop", "dist", "rule_accept", "hop_a", "hop_b", "node_byte",
                             "node_end", "tok_start", "root_child", "ub", "symbol_class", "states"};
    if (get_bufs(o, b, 13, sizes, wr, names) < 0) return NULL;
    PyObject *result = NULL;
    int32_t *chain = NULL, *sym = NULL, *best = NULL, *stack = NULL;
    uint8_t *pending = NULL;
    Py_ssize_t n, width, n_nodes = n_items(&b[6]), n_symbols = n_items(&b[11]), n_asked = n_items(&b[12]);
    const int32_t *cls = (const int32_t *)b[11].buf, *asked = (const int32_t *)b[12].buf;
    int bad = !class_form_ok(&b[0], &b[11], &n, &width) || n_items(&b[1]) != n || n_items(&b[2]) != n ||
              n_items(&b[3]) != n || n_items(&b[4]) != n || n_items(&b[5]) != n || n_items(&b[10]) != n ||
              n_items(&b[7]) != n_nodes || n_items(&b[8]) != n_nodes + 1 || n_items(&b[9]) != 256;
    for (Py_ssize_t k = 0; !bad && k < n_asked; k++) bad = asked[k] < 0 || asked[k] >= n;
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "completion_bounds: inconsistent array sizes, classes or states");
        goto done;
    }
    const int32_t *T = (const int32_t *)b[0].buf, *hop = (const int32_t *)b[1].buf;
    const int64_t *dist = (const int64_t *)b[2].buf;
    const uint8_t *accept = (const uint8_t *)b[3].buf;
    const int32_t *hop_a = (const int32_t *)b[4].buf, *hop_b = (const int32_t *)b[5].buf;
    int64_t *ub = (int64_t *)b[10].buf;
    chain = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1));
    sym = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1));
    best = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1));
    stack = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1));
    pending = (uint8_t *)calloc((size_t)n, 1);
    if (!chain || !sym || !best || !stack || !pending) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t top = 0;
    for (Py_ssize_t q = 0; q < n_asked; q++) {  /* one depth-first pass per state asked, scratch shared */
        int32_t state = asked[q];
        if (ub[state] >= 0) continue;
        stack[top++] = state;
        pending[state] = 1;
        while (top > 0) {
            int32_t s = stack[top - 1];
            if (ub[s] >= 0) {
                pending[s] = 0;
                top--;
                continue;
            }
            Py_ssize_t L = follow_chain(T, width, cls, n_symbols, n, hop, s, chain, sym, n);
            if (L < 0) {
                PyErr_Format(PyExc_ValueError, "completion_bounds: the hops from state %d lead nowhere", s);
                goto done;
            }
            int32_t c = chain[L];
            int64_t tail = 0;
            if (dist[c] > 0 || !accept[c]) {  /* the chain stops at a call: its callee, then its continuation */
                int32_t need[2] = {hop_a[c], hop_b[c]}, waiting = 0;
                for (int k = 0; k < 2; k++) {
                    if (need[k] < 0 || need[k] >= n) {
                        PyErr_Format(PyExc_ValueError, "completion_bounds: state %d calls nowhere", c);
                        goto done;
                    }
                    if (ub[need[k]] < 0 && !waiting) {
                        if (pending[need[k]]) {
                            PyErr_Format(PyExc_ValueError, "completion_bounds: a call cycle through state %d",
                                         need[k]);
                            goto done;
                        }
                        pending[need[k]] = 1;
                        stack[top++] = need[k];
                        waiting = 1;
                    }
                }
                if (waiting) continue;
                tail = ub[need[0]] + ub[need[1]];
            }
            min_tokens(sym, L, (const uint8_t *)b[6].buf, (const int32_t *)b[7].buf, (const int32_t *)b[8].buf,
                       (const int32_t *)b[9].buf, n_nodes, best);
            for (Py_ssize_t i = 0; i <= L; i++) {
                int64_t v = (int64_t)best[i] + tail;
                ub[chain[i]] = v < INF_TOKENS ? v : INF_TOKENS;
            }
        }
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    free(chain);
    free(sym);
    free(best);
    free(stack);
    free(pending);
    release_bufs(b, 13);
    return result;
}

/* ---- follow_hops ----------------------------------------------------------------------------- */

PyDoc_STRVAR(follow_hops_doc,
"follow_hops(classes, symbol_class, hop, state, chain, symbols) -> int\n\n"
"From `state`, while hop[s] >= 0: records s in chain and hop[s] in symbols, moves to\n"
"classes[s, symbol_class[hop[s]]] (the class form, as for `walk`). Returns L, the hops taken: chain[0..L] the\n"
"states (chain[L] where it stopped), symbols[0..L) the symbols. hop int32[n] (-1 stops);\n"
"symbols int32[cap], chain int32[cap + 1]. A hop into DEAD, or more than cap hops, is a ValueError.");

static PyObject *
follow_hops(PyObject *self, PyObject *args)
{
    PyObject *o[5];
    Py_ssize_t state;
    if (!PyArg_ParseTuple(args, "OOOnOO", &o[0], &o[1], &o[2], &state, &o[3], &o[4])) return NULL;
    Py_buffer b[5];
    const Py_ssize_t sizes[5] = {4, 4, 4, 4, 4};
    const int wr[5] = {0, 0, 0, 1, 1};
    const char *names[5] = {"classes", "symbol_class", "hop", "chain", "symbols"};
    if (get_bufs(o, b, 5, sizes, wr, names) < 0) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n, ncls, cap = n_items(&b[4]);
    if (!class_form_ok(&b[0], &b[1], &n, &ncls) || n_items(&b[2]) != n || n_items(&b[3]) != cap + 1 || state < 0 ||
        state >= n) {
        PyErr_SetString(PyExc_ValueError, "follow_hops: inconsistent array sizes or state");
        goto done;
    }
    const int32_t *T = (const int32_t *)b[0].buf, *sc = (const int32_t *)b[1].buf, *hop = (const int32_t *)b[2].buf;
    int32_t *chain = (int32_t *)b[3].buf, *symbols = (int32_t *)b[4].buf;
    Py_ssize_t L = follow_chain(T, ncls, sc, n_items(&b[1]), n, hop, (int32_t)state, chain, symbols, cap);
    if (L < 0) {
        PyErr_Format(PyExc_ValueError, "follow_hops: the hops from state %zd lead nowhere or past the cap", state);
        goto done;
    }
    result = PyLong_FromSsize_t(L);
done:
    release_bufs(b, 5);
    return result;
}

PyDoc_STRVAR(walk_family_doc,
"walk_family(class_table, symbol_class, starts, boundary, roots, node_byte, node_depth, node_end, tok_start,\n"
"            tok_ids, max_depth, out_member, out_ids, out_next, out_exit_member, out_exit_nodes, out_exit_states)\n"
"            -> (count, n_exits)\n\n"
"`walk_rule` from each of several states (`starts`, int32: the first states of an object's members) below the\n"
"same `roots`, in one pass over the trie: a node is visited while some member is still alive there, so members\n"
"whose keys part after a byte or two cost that byte or two, not a walk each. The table is read in its class form\n"
"(class_table[s, symbol_class[byte]], int32 [n_states, n_classes]): no member's rows need expanding. Writes\n"
"(member index, token id, state reached) per token a member's bytes keep in the table, in preorder\n"
"(out_member/out_ids/out_next), and (member index, node, state) per exit (a node with children whose state is a\n"
"boundary). When an output would overflow, nothing more is written and the counts returned exceed the capacity:\n"
"call again with room for them.");

static PyObject *
walk_family(PyObject *self, PyObject *args)
{
    PyObject *o[15];
    PyObject *o_symbol_class;
    Py_ssize_t max_depth;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOnOOOOOO", &o[0], &o_symbol_class, &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7], &o[8], &max_depth, &o[9], &o[10], &o[11], &o[12], &o[13], &o[14])) {
        return NULL;
    }
    Py_buffer b[15], sc_buf;
    const Py_ssize_t sizes[15] = {4, 4, 1, 4, 1, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4};
    const int wr[15] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1};
    const char *names[15] = {"class_table", "starts", "boundary", "roots", "node_byte", "node_depth", "node_end",
                             "tok_start", "tok_ids", "out_member", "out_ids", "out_next", "out_exit_member",
                             "out_exit_nodes", "out_exit_states"};
    if (get_buf(o_symbol_class, &sc_buf, 0, 4, "symbol_class") < 0) return NULL;
    if (get_bufs(o, b, 15, sizes, wr, names) < 0) {
        PyBuffer_Release(&sc_buf);
        return NULL;
    }
    PyObject *result = NULL;
    int32_t *alive = NULL;
    const int32_t *T = (const int32_t *)b[0].buf, *starts = (const int32_t *)b[1].buf;
    const uint8_t *bd = (const uint8_t *)b[2].buf, *nb = (const uint8_t *)b[4].buf;
    const int32_t *roots = (const int32_t *)b[3].buf, *nd = (const int32_t *)b[5].buf, *ne = (const int32_t *)b[6].buf;
    const int32_t *ts = (const int32_t *)b[7].buf, *ti = (const int32_t *)b[8].buf;
    int32_t *omember = (int32_t *)b[9].buf, *oid = (int32_t *)b[10].buf, *onext = (int32_t *)b[11].buf;
    int32_t *xmember = (int32_t *)b[12].buf, *xnode = (int32_t *)b[13].buf, *xstate = (int32_t *)b[14].buf;
    const int32_t *sc = (const int32_t *)sc_buf.buf;
    Py_ssize_t n_states, width, m = n_items(&b[1]); /* width: classes per state */
    int form_ok = class_form_ok(&b[0], &sc_buf, &n_states, &width);
    Py_ssize_t n_roots = n_items(&b[3]), n_nodes = n_items(&b[4]);
    Py_ssize_t cap = n_items(&b[10]), x_cap = n_items(&b[13]);
    int bad = !form_ok || n_items(&b[2]) != n_states || n_nodes < 1 || n_items(&b[5]) != n_nodes || n_items(&b[6]) != n_nodes || n_items(&b[7]) != n_nodes + 1 ||
              n_items(&b[9]) != cap || n_items(&b[11]) != cap || n_items(&b[12]) != x_cap ||
              n_items(&b[14]) != x_cap || max_depth < 0;
    for (Py_ssize_t k = 0; !bad && k < m; k++) bad = starts[k] < 0 || starts[k] >= n_states;
    for (Py_ssize_t k = 0; !bad && k < n_roots; k++) {  /* disjoint subtrees: each token is found at most once */
        bad = roots[k] < 0 || roots[k] >= n_nodes || (k > 0 && roots[k] < ne[roots[k - 1]]);
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "walk_family: inconsistent array sizes, states or classes out of range, or "
                        "roots not disjoint ascending");
        goto done;
    }
    /* row d of alive: how many members are live at the current node of depth d, then their (member, state) pairs */
    alive = (int32_t *)malloc(sizeof(int32_t) * (size_t)(max_depth + 1) * (size_t)(2 * m + 1));
    if (!alive) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t count = 0, n_exits = 0, stride = 2 * m + 1;
    Py_BEGIN_ALLOW_THREADS
    /* trie validated by `check` (see `walk`): depth in [1, max_depth]; the class table's targets are in
     * [-1, n_states) by construction, or checked where a stored one is adopted (pushdown `_adopt`) */
    for (Py_ssize_t k = 0; k < n_roots; k++) {
        int32_t root = roots[k];
        int32_t *top = alive + (Py_ssize_t)nd[root] * stride;
        top[0] = (int32_t)m;
        for (Py_ssize_t j = 0; j < m; j++) {
            top[1 + 2 * j] = (int32_t)j;
            top[2 + 2 * j] = starts[j];
        }
        for (Py_ssize_t i = root + 1, end = ne[root]; i < end;) {
            int32_t d = nd[i];
            const int32_t *up = alive + (Py_ssize_t)(d - 1) * stride;
            int32_t *here = alive + (Py_ssize_t)d * stride, n_here = 0;
            int32_t k0 = ts[i], k1 = ts[i + 1];
            for (int32_t j = 0; j < up[0]; j++) {
                int32_t member = up[1 + 2 * j];
                int32_t ns = T[(Py_ssize_t)up[2 + 2 * j] * width + sc[nb[i]]];
                if (ns < 0) continue;
                here[1 + 2 * n_here] = member;
                here[2 + 2 * n_here] = ns;
                n_here++;
                for (int32_t t = k0; t < k1; t++, count++) {
                    if (count < cap) {
                        omember[count] = member;
                        oid[count] = ti[t];
                        onext[count] = ns;
                    }
                }
                if (bd[ns] && ne[i] > i + 1) {
                    if (n_exits < x_cap) {
                        xmember[n_exits] = member;
                        xnode[n_exits] = (int32_t)i;
                        xstate[n_exits] = ns;
                    }
                    n_exits++;
                }
            }
            here[0] = n_here;
            i = n_here ? i + 1 : ne[i];
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("nn", count, n_exits);
done:
    free(alive);
    release_bufs(b, 15);
    PyBuffer_Release(&sc_buf);
    return result;
}

/* ---- module ---------------------------------------------------------------------------------- */

static PyMethodDef kernel_methods[] = {
    {"build_trie", build_trie, METH_VARARGS, build_trie_doc},
    {"walk", walk, METH_VARARGS, walk_doc},
    {"walk_rule", walk_rule, METH_VARARGS, walk_rule_doc},
    {"walk_family", walk_family, METH_VARARGS, walk_family_doc},
    {"rule_exits", rule_exits, METH_VARARGS, rule_exits_doc},
    {"subtree_deepest", subtree_deepest, METH_VARARGS, subtree_deepest_doc},
    {"check", check, METH_VARARGS, check_doc},
    {"walk_exits", walk_exits, METH_VARARGS, walk_exits_doc},
    {"template_map", template_map, METH_VARARGS, template_map_doc},
    {"walk_template", walk_template, METH_VARARGS, walk_template_doc},
    {"bits_to_ids", bits_to_ids, METH_VARARGS, bits_to_ids_doc},
    {"ids_to_bits", ids_to_bits, METH_VARARGS, ids_to_bits_doc},
    {"or_bits", or_bits, METH_VARARGS, or_bits_doc},
    {"min_tokenization", min_tokenization, METH_VARARGS, min_tokenization_doc},
    {"follow_hops", follow_hops, METH_VARARGS, follow_hops_doc},
    {"completion_bounds", completion_bounds, METH_VARARGS, completion_bounds_doc},
    {"apply_allowed", apply_allowed, METH_VARARGS, apply_allowed_doc},
    {"apply_disallowed", apply_disallowed, METH_VARARGS, apply_disallowed_doc},
    {"apply_bytemask", apply_bytemask, METH_VARARGS, apply_bytemask_doc},
    {"expand_runs", expand_runs, METH_VARARGS, expand_runs_doc},
    {"expand_classes", expand_classes, METH_VARARGS, expand_classes_doc},
    {"lay_out_rules", lay_out_rules, METH_VARARGS, lay_out_rules_doc},
    {"row_classes", row_classes, METH_VARARGS, row_classes_doc},
    {"shortest_completions", shortest_completions, METH_VARARGS, shortest_completions_doc},
    {"bytes_to_boundary", bytes_to_boundary, METH_VARARGS, bytes_to_boundary_doc},
    {"first_class_into", first_class_into, METH_VARARGS, first_class_into_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kernel_module = {
    PyModuleDef_HEAD_INIT, "constrained._kernel",
    "Token-trie walk and mask writers for the constrained-decoding index (see _kernel.c).", -1,
    kernel_methods,
};

PyMODINIT_FUNC
PyInit__kernel(void)
{
    return PyModule_Create(&kernel_module);
}
