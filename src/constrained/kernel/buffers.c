/* The buffer helpers every kernel acquires its arrays with, and the table checks they share (kernel.h). */
#include "kernel.h"

int
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

/* Whether any of `count` table entries is outside [DEAD, n): one branch-free pass, which the compiler vectorizes
 * (a loop that stops at the first bad entry would not be; nor would this one, inlined into a caller that only
 * tests the result: hence noinline). */
__attribute__((noinline)) int
table_out_of_range(const int32_t *T, Py_ssize_t count, Py_ssize_t n)
{
    if (n > INT32_MAX) return 1;
    const int32_t top = (int32_t)n; /* compared as int32: a mixed-width compare is not vectorized */
    int bad = 0;
    for (Py_ssize_t k = 0; k < count; k++) bad |= (T[k] >= top) | (T[k] < DEAD);
    return bad;
}

/* Whether any of `count` entries is below `floor`: branch-free like table_out_of_range. */
__attribute__((noinline)) int
any_below(const int32_t *T, Py_ssize_t count, int32_t floor)
{
    int bad = 0;
    for (Py_ssize_t k = 0; k < count; k++) bad |= T[k] < floor;
    return bad;
}

/* Whether a class-form table is consistent: `classes` (int32 [n_states, n_classes], 2-D) with every entry of
 * `sc` (the class of each symbol; at least the 256 bytes) a column of it. Sets *n_states and *n_classes. */
int
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

int
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

void
release_bufs(Py_buffer *bufs, int n)
{
    while (n > 0) PyBuffer_Release(&bufs[--n]);
}
