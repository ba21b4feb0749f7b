/* The graph searches over a rule table a pushdown grammar is laid out with: shortest completions (Dijkstra over
 * symbols and calls), the class of each one's symbol hop, bytes to a boundary (backward BFS), and the token bounds
 * of the canonical completions (completion_bounds, follow_hops: chains tokenized by min_tokens). */
#include "kernel.h"

#include <stdlib.h>
#include <string.h>

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
"completion_bounds(classes, symbol_class, symbol_hop, dist, rule_accept, hop_a, hop_b, trie, ub, states) -> None\n\n"
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
    PyObject *o[9];
    TrieObject *trie;
    if (!PyArg_ParseTuple(args, "OOOOOOOO!OO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &Trie_Type, &trie,
                          &o[7], &o[8])) {
        return NULL;
    }
    Py_buffer b[9];
    const Py_ssize_t sizes[9] = {4, 4, 4, 8, 1, 4, 4, 8, 4};
    const int wr[9] = {0, 0, 0, 0, 0, 0, 0, 1, 0};
    const char *names[9] = {"by_class", "symbol_class", "symbol_hop", "dist", "rule_accept", "hop_a", "hop_b", "ub",
                            "states"};
    if (get_bufs(o, b, 9, sizes, wr, names) < 0) return NULL;
    PyObject *result = NULL;
    int32_t *chain = NULL, *sym = NULL, *best = NULL, *stack = NULL;
    uint8_t *pending = NULL;
    Py_ssize_t n, width, n_symbols = n_items(&b[1]), n_asked = n_items(&b[8]);
    const int32_t *cls = (const int32_t *)b[1].buf, *asked = (const int32_t *)b[8].buf;
    int bad = !class_form_ok(&b[0], &b[1], &n, &width) || n_items(&b[2]) != n || n_items(&b[3]) != n ||
              n_items(&b[4]) != n || n_items(&b[5]) != n || n_items(&b[6]) != n || n_items(&b[7]) != n;
    for (Py_ssize_t k = 0; !bad && k < n_asked; k++) bad = asked[k] < 0 || asked[k] >= n;
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "completion_bounds: inconsistent array sizes, classes or states");
        goto done;
    }
    const int32_t *T = (const int32_t *)b[0].buf, *hop = (const int32_t *)b[2].buf;
    const int64_t *dist = (const int64_t *)b[3].buf;
    const uint8_t *accept = (const uint8_t *)b[4].buf;
    const int32_t *hop_a = (const int32_t *)b[5].buf, *hop_b = (const int32_t *)b[6].buf;
    int64_t *ub = (int64_t *)b[7].buf;
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
            min_tokens(sym, L, trie, best);
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
    release_bufs(b, 9);
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

PyMethodDef kernel_graph_methods[] = {
    {"shortest_completions", shortest_completions, METH_VARARGS, shortest_completions_doc},
    {"first_class_into", first_class_into, METH_VARARGS, first_class_into_doc},
    {"bytes_to_boundary", bytes_to_boundary, METH_VARARGS, bytes_to_boundary_doc},
    {"completion_bounds", completion_bounds, METH_VARARGS, completion_bounds_doc},
    {"follow_hops", follow_hops, METH_VARARGS, follow_hops_doc},
    {NULL, NULL, 0, NULL},
};
