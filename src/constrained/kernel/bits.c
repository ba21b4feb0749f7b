/* Masks as bits and as logits: bitmask <-> ids (bits_to_ids, ids_to_bits), unions (or_bits), and the writers that
 * put -inf into float32 logits in place (apply_allowed, apply_disallowed, apply_bytemask). */
#include "kernel.h"

#include <math.h>
#include <string.h>

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

PyMethodDef kernel_bits_methods[] = {
    {"bits_to_ids", bits_to_ids, METH_VARARGS, bits_to_ids_doc},
    {"ids_to_bits", ids_to_bits, METH_VARARGS, ids_to_bits_doc},
    {"or_bits", or_bits, METH_VARARGS, or_bits_doc},
    {"apply_allowed", apply_allowed, METH_VARARGS, apply_allowed_doc},
    {"apply_disallowed", apply_disallowed, METH_VARARGS, apply_disallowed_doc},
    {"apply_bytemask", apply_bytemask, METH_VARARGS, apply_bytemask_doc},
    {NULL, NULL, 0, NULL},
};
