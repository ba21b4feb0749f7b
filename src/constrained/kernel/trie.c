/* The token trie: building it (build_trie), holding it as one validated object (Trie, the form every walk takes),
 * and what is read off it alone: the deepest node below each node (subtree_deepest) and the fewest tokens that
 * spell a string (min_tokenization). Layout: kernel.h. */
#include "kernel.h"

#include <stdlib.h>
#include <string.h>
#include <structmember.h>

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

/* ---- the Trie object ------------------------------------------------------------------------- */

PyDoc_STRVAR(Trie_doc,
"Trie(node_byte, node_depth, node_end, tok_start, tok_ids, root_child, max_depth, vocab_size)\n\n"
"A preorder-flattened token trie as one object: the walks take it in place of its arrays. It holds them (each\n"
"C-contiguous: node_byte uint8[n_nodes], node_depth / node_end int32[n_nodes], tok_start int32[n_nodes + 1],\n"
"tok_ids int32[n_tokens], root_child int32[256]) and checks them once, here, since the walks trust them: the root\n"
"at depth 0 ending at n_nodes, every other node's depth in [1, max_depth] and at most its predecessor's + 1, its\n"
"subtree end in (i, n_nodes], tok_start ascending from 0 to n_tokens, token ids in [0, vocab_size), root_child -1\n"
"or a depth-1 node. ValueError naming the first violation.");

/* Why the held arrays are not a trie the walks can trust (see kernel.h), or NULL. */
static const char *
trie_violation(const TrieObject *t)
{
    const int32_t *nd = t->node_depth, *ne = t->node_end, *ts = t->tok_start, *ti = t->tok_ids;
    Py_ssize_t n = t->n_nodes;
    if (n < 1 || n > INT32_MAX || t->max_depth < 0 || t->vocab_size < 0 || t->vocab_size > INT32_MAX) {
        return "trie sizes out of range";
    }
    if (nd[0] != 0 || ne[0] != n || ts[0] != 0 || ts[n] != t->n_tokens) return "bad trie root";
    for (Py_ssize_t i = 1; i < n; i++) {
        if (nd[i] < 1 || nd[i] > t->max_depth || nd[i] > nd[i - 1] + 1) return "node depth out of range";
        if (ne[i] <= i || ne[i] > n) return "node subtree end out of range";
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (ts[i] > ts[i + 1]) return "token offsets not ascending";
    }
    for (Py_ssize_t k = 0; k < t->n_tokens; k++) {
        if (ti[k] < 0 || ti[k] >= t->vocab_size) return "token id out of range";
    }
    for (int b = 0; b < 256; b++) {
        int32_t c = t->root_child[b];
        if (c != -1 && (c < 1 || c >= n || nd[c] != 1)) return "root child not a depth-1 node";
    }
    return NULL;
}

static void
Trie_dealloc(TrieObject *self)
{
    while (self->held > 0) PyBuffer_Release(&self->views[--self->held]);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
Trie_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"node_byte", "node_depth", "node_end", "tok_start", "tok_ids", "root_child",
                               "max_depth", "vocab_size", NULL};
    PyObject *o[TRIE_ARRAYS];
    Py_ssize_t max_depth, vocab_size;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOnn:Trie", keywords, &o[0], &o[1], &o[2], &o[3], &o[4],
                                     &o[5], &max_depth, &vocab_size)) {
        return NULL;
    }
    TrieObject *self = (TrieObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    const Py_ssize_t sizes[TRIE_ARRAYS] = {1, 4, 4, 4, 4, 4};
    const char *names[TRIE_ARRAYS] = {"node_byte", "node_depth", "node_end", "tok_start", "tok_ids", "root_child"};
    for (; self->held < TRIE_ARRAYS; self->held++) {
        if (get_buf(o[self->held], &self->views[self->held], 0, sizes[self->held], names[self->held]) < 0) {
            Py_DECREF(self);
            return NULL;
        }
    }
    Py_buffer *v = self->views;
    self->node_byte = (const uint8_t *)v[TRIE_NODE_BYTE].buf;
    self->node_depth = (const int32_t *)v[TRIE_NODE_DEPTH].buf;
    self->node_end = (const int32_t *)v[TRIE_NODE_END].buf;
    self->tok_start = (const int32_t *)v[TRIE_TOK_START].buf;
    self->tok_ids = (const int32_t *)v[TRIE_TOK_IDS].buf;
    self->root_child = (const int32_t *)v[TRIE_ROOT_CHILD].buf;
    self->n_nodes = n_items(&v[TRIE_NODE_BYTE]);
    self->n_tokens = n_items(&v[TRIE_TOK_IDS]);
    self->max_depth = max_depth;
    self->vocab_size = vocab_size;
    const char *why = NULL;
    if (n_items(&v[TRIE_NODE_DEPTH]) != self->n_nodes || n_items(&v[TRIE_NODE_END]) != self->n_nodes ||
        n_items(&v[TRIE_TOK_START]) != self->n_nodes + 1 || n_items(&v[TRIE_ROOT_CHILD]) != 256) {
        why = "trie arrays disagree";
    } else {
        why = trie_violation(self);
    }
    if (why) {
        PyErr_Format(PyExc_ValueError, "Trie: %s", why);
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static PyMemberDef Trie_members[] = {
    {"n_nodes", T_PYSSIZET, offsetof(TrieObject, n_nodes), READONLY, "nodes, the root included"},
    {"n_tokens", T_PYSSIZET, offsetof(TrieObject, n_tokens), READONLY, "tokens in the trie"},
    {"max_depth", T_PYSSIZET, offsetof(TrieObject, max_depth), READONLY, "the deepest node's depth bound"},
    {"vocab_size", T_PYSSIZET, offsetof(TrieObject, vocab_size), READONLY, "every token id is below it"},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject Trie_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "constrained._kernel.Trie",
    .tp_basicsize = sizeof(TrieObject),
    .tp_dealloc = (destructor)Trie_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = Trie_doc,
    .tp_members = Trie_members,
    .tp_new = Trie_new,
};

/* ---- read off the trie alone ----------------------------------------------------------------- */

PyDoc_STRVAR(subtree_deepest_doc,
"subtree_deepest(trie, out) -> None\n\n"
"out[i] = the greatest node depth in the preorder subtree [i, node_end[i]) (int32[n_nodes]).");

static PyObject *
subtree_deepest(PyObject *self, PyObject *args)
{
    TrieObject *trie;
    PyObject *o_out;
    if (!PyArg_ParseTuple(args, "O!O", &Trie_Type, &trie, &o_out)) return NULL;
    Py_buffer bo;
    if (get_buf(o_out, &bo, 1, 4, "out") < 0) return NULL;
    Py_ssize_t n = trie->n_nodes;
    if (n_items(&bo) != n) {
        PyBuffer_Release(&bo);
        PyErr_SetString(PyExc_ValueError, "subtree_deepest: inconsistent array sizes");
        return NULL;
    }
    const int32_t *nd = trie->node_depth, *ne = trie->node_end;
    int32_t *out = (int32_t *)bo.buf;
    for (Py_ssize_t i = n - 1; i >= 0; i--) { /* children come after their parent in preorder */
        int32_t best = nd[i];
        for (Py_ssize_t c = i + 1; c < ne[i]; c = ne[c]) { /* ends validated: c < ne[c] <= n */
            if (out[c] > best) best = out[c];
        }
        out[i] = best;
    }
    PyBuffer_Release(&bo);
    Py_RETURN_NONE;
}

/* best[i] = fewest tokens spelling sym[i..L) (best[L] = 0; INF_TOKENS when none does). */
void
min_tokens(const int32_t *sym, Py_ssize_t L, const TrieObject *trie, int32_t *best)
{
    const uint8_t *nb = trie->node_byte;
    const int32_t *ne = trie->node_end, *ts = trie->tok_start, *rc = trie->root_child;
    Py_ssize_t n_nodes = trie->n_nodes;
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
"min_tokenization(symbols, trie, best) -> None\n\n"
"symbols: int32[L] (bytes 0..255; >= 256 = one special token each). Fills best int32[L+1] with\n"
"best[i] = fewest tokens spelling symbols[i:] (best[L] = 0; unreachable = INT32_MAX/2).");

static PyObject *
min_tokenization(PyObject *self, PyObject *args)
{
    PyObject *o[2];
    TrieObject *trie;
    if (!PyArg_ParseTuple(args, "OO!O", &o[0], &Trie_Type, &trie, &o[1])) return NULL;
    Py_buffer b[2];
    const Py_ssize_t sizes[2] = {4, 4};
    const int wr[2] = {0, 1};
    const char *names[2] = {"symbols", "best"};
    if (get_bufs(o, b, 2, sizes, wr, names) < 0) return NULL;
    Py_ssize_t L = n_items(&b[0]);
    if (n_items(&b[1]) != L + 1) {
        release_bufs(b, 2);
        PyErr_SetString(PyExc_ValueError, "min_tokenization: inconsistent array sizes");
        return NULL;
    }
    min_tokens((const int32_t *)b[0].buf, L, trie, (int32_t *)b[1].buf);
    release_bufs(b, 2);
    Py_RETURN_NONE;
}

PyMethodDef kernel_trie_methods[] = {
    {"build_trie", build_trie, METH_VARARGS, build_trie_doc},
    {"subtree_deepest", subtree_deepest, METH_VARARGS, subtree_deepest_doc},
    {"min_tokenization", min_tokenization, METH_VARARGS, min_tokenization_doc},
    {NULL, NULL, 0, NULL},
};
