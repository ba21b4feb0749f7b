/* The token trie: building it (build_trie), and what is read off it alone: the deepest node below each node
 * (subtree_deepest) and the fewest tokens that spell a string (min_tokenization). Layout: kernel.h. */
#include "kernel.h"

#include <stdlib.h>
#include <string.h>

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

/* ---- min_tokenization ------------------------------------------------------------------------ */

/* best[i] = fewest tokens spelling sym[i..L) (best[L] = 0; INF_TOKENS when none does). */
void
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

PyMethodDef kernel_trie_methods[] = {
    {"build_trie", build_trie, METH_VARARGS, build_trie_doc},
    {"subtree_deepest", subtree_deepest, METH_VARARGS, subtree_deepest_doc},
    {"min_tokenization", min_tokenization, METH_VARARGS, min_tokenization_doc},
    {NULL, NULL, 0, NULL},
};
