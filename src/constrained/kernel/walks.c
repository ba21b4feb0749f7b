/* The trie walks behind per-state masks: a DFA state (walk) or a pushdown rule state (walk_rule, rule_exits;
 * walk_family for several at once) against a Trie, reading the table in its class form; and `check`, the one pass
 * that validates what these loops trust of a table (the Trie was validated when made). */
#include "kernel.h"

#include <stdlib.h>

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
"walk(classes, symbol_class, state, trie, out_ids, out_next, scratch) -> count\n\n"
"Walk the preorder trie (a `Trie`) from DFA `state`; write every token id whose bytes all have live\n"
"transitions into out_ids[:count] (ascending) and the state reached into out_next[:count].\n"
"The table in its class form: the state after byte x from s is classes[s, symbol_class[x]] (classes int32\n"
"[S, n_classes], -1 = dead; symbol_class int32[at least 256], each a column of classes; a table by symbol is\n"
"its own class form with symbol_class = 0..255). out arrays: int32[at least trie.n_tokens];\n"
"scratch: int32[V] all -1 (restored on return), V > every token id.");

static PyObject *
walk(PyObject *self, PyObject *args)
{
    PyObject *o[5];
    TrieObject *trie;
    Py_ssize_t state;
    if (!PyArg_ParseTuple(args, "OOnO!OOO", &o[0], &o[1], &state, &Trie_Type, &trie, &o[2], &o[3], &o[4])) {
        return NULL;
    }
    Py_buffer b[5];
    const Py_ssize_t sizes[5] = {4, 4, 4, 4, 4};
    const int wr[5] = {0, 0, 1, 1, 1};
    const char *names[5] = {"classes", "symbol_class", "out_ids", "out_next", "scratch"};
    if (get_bufs(o, b, 5, sizes, wr, names) < 0) return NULL;
    PyObject *result = NULL;
    int32_t stack_states[512];
    int32_t *states = stack_states;
    const int32_t *T = (const int32_t *)b[0].buf;
    const int32_t *sc = (const int32_t *)b[1].buf;
    Py_ssize_t n_states, ncls;
    int form_ok = class_form_ok(&b[0], &b[1], &n_states, &ncls);
    Py_ssize_t n_nodes = trie->n_nodes, n_tok = trie->n_tokens, max_depth = trie->max_depth;
    Py_ssize_t vsize = n_items(&b[4]);
    if (!form_ok || state < 0 || state >= n_states || n_items(&b[2]) < n_tok || n_items(&b[3]) < n_tok) {
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
    const uint8_t *nb = trie->node_byte;
    const int32_t *nd = trie->node_depth, *ne = trie->node_end, *ts = trie->tok_start, *ti = trie->tok_ids;
    int32_t *oid = (int32_t *)b[2].buf;
    int32_t *onext = (int32_t *)b[3].buf;
    int32_t *scr = (int32_t *)b[4].buf;
    Py_ssize_t count = 0;
    int bad = 0;

    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t d = 0; d <= max_depth; d++) states[d] = (int32_t)state; /* never an unset entry */
    Py_ssize_t i = 1;
    /* The trie was validated when made (Trie) and the table by `check` (index.py calls it once per DFA), so
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
    release_bufs(b, 5);
    return result;
}

PyDoc_STRVAR(walk_rule_doc,
"walk_rule(classes, symbol_class, state, boundary, roots, trie, out_ids, out_next, out_exit_nodes,\n"
"          out_exit_states, scratch) -> (count, n_exits)\n\n"
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
    PyObject *o[9];
    TrieObject *trie;
    Py_ssize_t state;
    if (!PyArg_ParseTuple(args, "OOnOOO!OOOOO", &o[0], &o[1], &state, &o[2], &o[3], &Trie_Type, &trie, &o[4], &o[5],
                          &o[6], &o[7], &o[8])) {
        return NULL;
    }
    Py_buffer b[9];
    const Py_ssize_t sizes[9] = {4, 4, 1, 4, 4, 4, 4, 4, 4};
    const int wr[9] = {0, 0, 0, 0, 1, 1, 1, 1, 1};
    const char *names[9] = {"classes", "symbol_class", "boundary", "roots", "out_ids", "out_next", "out_exit_nodes",
                            "out_exit_states", "scratch"};
    if (get_bufs(o, b, 9, sizes, wr, names) < 0) return NULL;
    PyObject *result = NULL;
    int32_t *states = NULL;
    const int32_t *T = (const int32_t *)b[0].buf;
    const int32_t *sc = (const int32_t *)b[1].buf;
    const uint8_t *bd = (const uint8_t *)b[2].buf;
    const int32_t *roots = (const int32_t *)b[3].buf;
    int32_t *oid = (int32_t *)b[4].buf;
    int32_t *onext = (int32_t *)b[5].buf;
    int32_t *xnode = (int32_t *)b[6].buf;
    int32_t *xstate = (int32_t *)b[7].buf;
    int32_t *scr = (int32_t *)b[8].buf;
    const uint8_t *nb = trie->node_byte;
    const int32_t *nd = trie->node_depth, *ne = trie->node_end, *ts = trie->tok_start, *ti = trie->tok_ids;
    Py_ssize_t n_states, ncls;
    int form_ok = class_form_ok(&b[0], &b[1], &n_states, &ncls);
    Py_ssize_t n_nodes = trie->n_nodes, n_tok = trie->n_tokens, max_depth = trie->max_depth;
    Py_ssize_t vsize = n_items(&b[8]);
    Py_ssize_t n_roots = n_items(&b[3]);
    int bad = !form_ok || state < 0 || state >= n_states || n_items(&b[2]) != n_states || n_items(&b[4]) < n_tok ||
              n_items(&b[5]) < n_tok || n_items(&b[6]) < n_nodes || n_items(&b[7]) < n_nodes;
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
    /* trie validated when made, table by `check` (see `walk`): depth in [1, max_depth], targets in [-1, n_states) */
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
    release_bufs(b, 9);
    return result;
}

PyDoc_STRVAR(rule_exits_doc,
"rule_exits(classes, symbol_class, boundary, reach, starts, start_states, trie, deepest, out_exit_nodes,\n"
"           out_exit_states) -> n_exits\n\n"
"(The table in its class form, as for `walk_rule`.) "
"The exits of `walk_rule` (nodes with children whose state is a boundary) in the subtrees rooted AT each\n"
"starts[k] (the node itself included), walked from start_states[k] at its parent. A subtree is skipped when its\n"
"deepest node is too shallow for the state to reach a boundary (reach: int32[n_states], fewest bytes to a\n"
"boundary state; deepest: int32[n_nodes], the greatest depth in each node's subtree). Output: int32[n_nodes].");

static PyObject *
rule_exits(PyObject *self, PyObject *args)
{
    PyObject *o[9];
    TrieObject *trie;
    if (!PyArg_ParseTuple(args, "OOOOOOO!OOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &Trie_Type, &trie, &o[6],
                          &o[7], &o[8])) {
        return NULL;
    }
    Py_buffer b[9];
    const Py_ssize_t sizes[9] = {4, 4, 1, 4, 4, 4, 4, 4, 4};
    const int wr[9] = {0, 0, 0, 0, 0, 0, 0, 1, 1};
    const char *names[9] = {"classes", "symbol_class", "boundary", "reach", "starts", "start_states", "deepest",
                            "out_exit_nodes", "out_exit_states"};
    if (get_bufs(o, b, 9, sizes, wr, names) < 0) return NULL;
    PyObject *result = NULL;
    int32_t *states = NULL;
    const int32_t *T = (const int32_t *)b[0].buf;
    const int32_t *sc = (const int32_t *)b[1].buf;
    const uint8_t *bd = (const uint8_t *)b[2].buf;
    const int32_t *reach = (const int32_t *)b[3].buf;
    const int32_t *st = (const int32_t *)b[4].buf;
    const int32_t *ss = (const int32_t *)b[5].buf;
    const int32_t *deepest = (const int32_t *)b[6].buf;
    int32_t *xnode = (int32_t *)b[7].buf;
    int32_t *xstate = (int32_t *)b[8].buf;
    const uint8_t *nb = trie->node_byte;
    const int32_t *nd = trie->node_depth, *ne = trie->node_end;
    Py_ssize_t n_states, ncls;
    int form_ok = class_form_ok(&b[0], &b[1], &n_states, &ncls);
    Py_ssize_t n_nodes = trie->n_nodes, max_depth = trie->max_depth;
    Py_ssize_t n_starts = n_items(&b[4]);
    if (!form_ok || n_items(&b[2]) != n_states || n_items(&b[3]) != n_states || n_items(&b[6]) != n_nodes ||
        n_items(&b[5]) != n_starts || n_items(&b[7]) < n_nodes || n_items(&b[8]) < n_nodes) {
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
    release_bufs(b, 9);
    return result;
}

PyDoc_STRVAR(walk_family_doc,
"walk_family(class_table, symbol_class, starts, boundary, roots, trie, out_member, out_ids, out_next,\n"
"            out_exit_member, out_exit_nodes, out_exit_states) -> (count, n_exits)\n\n"
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
    PyObject *o[11];
    TrieObject *trie;
    if (!PyArg_ParseTuple(args, "OOOOOO!OOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &Trie_Type, &trie, &o[5], &o[6],
                          &o[7], &o[8], &o[9], &o[10])) {
        return NULL;
    }
    Py_buffer b[11];
    const Py_ssize_t sizes[11] = {4, 4, 4, 1, 4, 4, 4, 4, 4, 4, 4};
    const int wr[11] = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1};
    const char *names[11] = {"class_table", "symbol_class", "starts", "boundary", "roots", "out_member", "out_ids",
                             "out_next", "out_exit_member", "out_exit_nodes", "out_exit_states"};
    if (get_bufs(o, b, 11, sizes, wr, names) < 0) return NULL;
    PyObject *result = NULL;
    int32_t *alive = NULL;
    const int32_t *T = (const int32_t *)b[0].buf, *sc = (const int32_t *)b[1].buf, *starts = (const int32_t *)b[2].buf;
    const uint8_t *bd = (const uint8_t *)b[3].buf;
    const int32_t *roots = (const int32_t *)b[4].buf;
    int32_t *omember = (int32_t *)b[5].buf, *oid = (int32_t *)b[6].buf, *onext = (int32_t *)b[7].buf;
    int32_t *xmember = (int32_t *)b[8].buf, *xnode = (int32_t *)b[9].buf, *xstate = (int32_t *)b[10].buf;
    const uint8_t *nb = trie->node_byte;
    const int32_t *nd = trie->node_depth, *ne = trie->node_end, *ts = trie->tok_start, *ti = trie->tok_ids;
    Py_ssize_t n_states, width, m = n_items(&b[2]); /* width: classes per state */
    int form_ok = class_form_ok(&b[0], &b[1], &n_states, &width);
    Py_ssize_t n_roots = n_items(&b[4]), n_nodes = trie->n_nodes, max_depth = trie->max_depth;
    Py_ssize_t cap = n_items(&b[6]), x_cap = n_items(&b[9]);
    int bad = !form_ok || n_items(&b[3]) != n_states || n_items(&b[5]) != cap || n_items(&b[7]) != cap ||
              n_items(&b[8]) != x_cap || n_items(&b[10]) != x_cap;
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
    /* trie validated when made: depth in [1, max_depth]; the class table's targets are in [-1, n_states) by
     * construction, or checked where a stored one is adopted (pushdown `_adopt`) */
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
    release_bufs(b, 11);
    return result;
}

PyDoc_STRVAR(check_doc,
"check(classes, symbol_class) -> None\n\n"
"Validate what the walks trust of a table (a trie is validated when its `Trie` is made): the class form (as for\n"
"`walk`) and every transition in [-1, n_states). Raises ValueError naming the first violation.");

static PyObject *
check(PyObject *self, PyObject *args)
{
    PyObject *o[2];
    if (!PyArg_ParseTuple(args, "OO", &o[0], &o[1])) return NULL;
    Py_buffer b[2];
    const Py_ssize_t sizes[2] = {4, 4};
    const int wr[2] = {0, 0};
    const char *names[2] = {"classes", "symbol_class"};
    if (get_bufs(o, b, 2, sizes, wr, names) < 0) return NULL;
    const char *why = NULL;
    Py_ssize_t n_states, ncls;
    if (!class_form_ok(&b[0], &b[1], &n_states, &ncls)) {
        why = "classes is not [n_states, n_classes] with a class in range for each of >= 256 symbols";
    } else { /* one branch-free (vectorizable) pass: the smallest and largest target */
        const int32_t *T = (const int32_t *)b[0].buf;
        int32_t lo = 0, hi = 0;
        Py_ssize_t n_t = n_items(&b[0]);
        for (Py_ssize_t k = 0; k < n_t; k++) {
            lo = T[k] < lo ? T[k] : lo;
            hi = T[k] > hi ? T[k] : hi;
        }
        if (n_t && (lo < -1 || hi >= n_states)) why = "transition target out of range";
    }
    release_bufs(b, 2);
    if (why) {
        PyErr_Format(PyExc_ValueError, "check: %s", why);
        return NULL;
    }
    Py_RETURN_NONE;
}

PyMethodDef kernel_walk_methods[] = {
    {"check", check, METH_VARARGS, check_doc},
    {"walk", walk, METH_VARARGS, walk_doc},
    {"walk_rule", walk_rule, METH_VARARGS, walk_rule_doc},
    {"walk_family", walk_family, METH_VARARGS, walk_family_doc},
    {"rule_exits", rule_exits, METH_VARARGS, rule_exits_doc},
    {NULL, NULL, 0, NULL},
};
