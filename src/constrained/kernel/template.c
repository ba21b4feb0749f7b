/* The JSON-string template shortcut (shortcut.py): a small template DFA's exits from the trie (walk_exits),
 * whether it embeds at a state (template_map), and the joint walk that reuses its answer (walk_template). */
#include "kernel.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t id;
    int32_t next;
} pair_t;

PyDoc_STRVAR(walk_exits_doc,
"walk_exits(transitions, width, state, trie, out_nodes, out_states) -> count\n\n"
"Walk the preorder trie (a `Trie`) from `state` of a (small, template) DFA and record every EXIT: a node whose\n"
"parent's prefix stays alive but whose own byte is dead. out_nodes[k] = the exit node, out_states[k] =\n"
"the state after its parent's prefix. Output arrays: int32[n_nodes]. Subtrees below exits are skipped.");

static PyObject *
walk_exits(PyObject *self, PyObject *args)
{
    PyObject *o[3];
    TrieObject *trie;
    Py_ssize_t width, state;
    if (!PyArg_ParseTuple(args, "OnnO!OO", &o[0], &width, &state, &Trie_Type, &trie, &o[1], &o[2])) return NULL;
    Py_buffer b[3];
    const Py_ssize_t sizes[3] = {4, 4, 4};
    const int wr[3] = {0, 1, 1};
    const char *names[3] = {"transitions", "out_nodes", "out_states"};
    if (get_bufs(o, b, 3, sizes, wr, names) < 0) return NULL;
    PyObject *result = NULL;
    int32_t *states = NULL;
    Py_ssize_t n_states = width > 0 ? n_items(&b[0]) / width : 0;
    Py_ssize_t n_nodes = trie->n_nodes;
    if (width < 256 || n_items(&b[0]) != n_states * width || state < 0 || state >= n_states ||
        n_items(&b[1]) < n_nodes || n_items(&b[2]) < n_nodes) {
        PyErr_SetString(PyExc_ValueError, "walk_exits: inconsistent array sizes");
        goto done;
    }
    states = (int32_t *)malloc(sizeof(int32_t) * (size_t)(trie->max_depth + 1));
    if (!states) {
        PyErr_NoMemory();
        goto done;
    }
    const int32_t *T = (const int32_t *)b[0].buf;
    const uint8_t *nb = trie->node_byte;
    const int32_t *nd = trie->node_depth, *ne = trie->node_end;
    int32_t *on = (int32_t *)b[1].buf;
    int32_t *os = (int32_t *)b[2].buf;
    Py_ssize_t count = 0;
    states[0] = (int32_t)state;
    for (Py_ssize_t i = 1; i < n_nodes;) { /* trie validated when made (depth in [1, max_depth]) */
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
    release_bufs(b, 3);
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
"walk_template(classes, symbol_class, state, template, map, pure_bits, exit_nodes, exit_tstate, trie, out_bits,\n"
"              out_ids, out_next, scratch) -> (n_found, count)\n\n"
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
"-1 (restored), vocab_size = trie.vocab_size. The trie (a `Trie`) was validated when made; everything else\n"
"that indexes memory is checked here.");

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
    enum { NB = 11 };
    PyObject *o[NB];
    TrieObject *trie;
    Py_ssize_t state;
    if (!PyArg_ParseTuple(args, "OOnOOOOOO!OOOO", &o[0], &o[10], &state, &o[1], &o[2], &o[3], &o[4], &o[5],
                          &Trie_Type, &trie, &o[6], &o[7], &o[8], &o[9])) {
        return NULL;
    }
    Py_buffer bt, btt, bm, bpb, ben, bet, bob, boi, bon, bsc, bsym;
    Py_buffer *bufs[NB] = {&bt, &btt, &bm, &bpb, &ben, &bet, &bob, &boi, &bon, &bsc, &bsym};
    const Py_ssize_t sizes[NB] = {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4};
    const int wr[NB] = {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0};
    const char *names[NB] = {"classes", "template", "map", "pure_bits", "exit_nodes", "exit_tstate", "out_bits",
                             "out_ids", "out_next", "scratch", "symbol_class"};
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
    Py_ssize_t n_nodes = trie->n_nodes, n_tok = trie->n_tokens, n_exit = n_items(&ben);
    Py_ssize_t max_depth = trie->max_depth, vsize = trie->vocab_size;
    Py_ssize_t n_words = (vsize + 31) / 32;
    if (!form_ok || state < 0 || state >= n_states ||
        n_items(&btt) != n_tmpl * 256 || n_tmpl < 1 || n_items(&bet) != n_exit || vsize < 1 ||
        n_items(&bpb) != n_words || n_items(&bob) != n_words || n_items(&boi) < n_tok || n_items(&bon) < n_tok ||
        n_items(&bsc) != vsize) {
        PyErr_SetString(PyExc_ValueError, "walk_template: inconsistent array sizes");
        goto done;
    }
    const int32_t *T = (const int32_t *)bt.buf, *TT = (const int32_t *)btt.buf, *h = (const int32_t *)bm.buf;
    const int32_t *sc = (const int32_t *)bsym.buf;
    const uint32_t *pb = (const uint32_t *)bpb.buf;
    const int32_t *en = (const int32_t *)ben.buf, *et = (const int32_t *)bet.buf;
    const uint8_t *nb = trie->node_byte;
    const int32_t *nd = trie->node_depth, *ne = trie->node_end, *ts = trie->tok_start, *ti = trie->tok_ids;
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

PyMethodDef kernel_template_methods[] = {
    {"walk_exits", walk_exits, METH_VARARGS, walk_exits_doc},
    {"template_map", template_map, METH_VARARGS, template_map_doc},
    {"walk_template", walk_template, METH_VARARGS, walk_template_doc},
    {NULL, NULL, 0, NULL},
};
