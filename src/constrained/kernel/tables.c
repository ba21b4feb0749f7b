/* Tables: decoding a stored run-length table (expand_runs), a class form expanded by symbol (expand_classes),
 * equal rows grouped into classes (row_classes), and a pushdown grammar's combined table laid out from its rules'
 * DFAs with its reverse edges (lay_out_rules). */
#include "kernel.h"

#include <stdlib.h>
#include <string.h>

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

PyMethodDef kernel_table_methods[] = {
    {"expand_runs", expand_runs, METH_VARARGS, expand_runs_doc},
    {"expand_classes", expand_classes, METH_VARARGS, expand_classes_doc},
    {"row_classes", row_classes, METH_VARARGS, row_classes_doc},
    {"lay_out_rules", lay_out_rules, METH_VARARGS, lay_out_rules_doc},
    {NULL, NULL, 0, NULL},
};
