/* Shared by the native extensions (_fsm.c, _pattern.c): a growable int32 vector and a uint64 sort. Header-only
 * (static functions), so each extension stays one self-contained module. */
#ifndef EMBER_NATIVE_H
#define EMBER_NATIVE_H

#include <stdint.h>
#include <stdlib.h>

typedef struct {
    int32_t *a;
    int64_t n, cap;
} Vec;

static int
vec_reserve(Vec *v, int64_t need)
{
    if (need <= v->cap) return 0;
    int64_t cap = v->cap ? v->cap : 64;
    while (cap < need) cap *= 2;
    int32_t *p = realloc(v->a, (size_t)cap * sizeof *p);
    if (!p) return -1;
    v->a = p;
    v->cap = cap;
    return 0;
}

static inline int
vec_push(Vec *v, int32_t x)
{
    if (v->n == v->cap && vec_reserve(v, v->n + 1)) return -1;
    v->a[v->n++] = x;
    return 0;
}

static inline int
vec_push2(Vec *v, int32_t x, int32_t y)
{
    if (v->n + 2 > v->cap && vec_reserve(v, v->n + 2)) return -1;
    v->a[v->n++] = x;
    v->a[v->n++] = y;
    return 0;
}

/* Quicksort (median of three) down to insertion sort: a DFA state's edges are usually a handful. */
static void
sort_u64(uint64_t *a, int64_t n)
{
    while (n >= 24) {
        uint64_t x = a[0], y = a[n / 2], z = a[n - 1], t;
        uint64_t p = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
        int64_t i = 0, j = n - 1;
        for (;;) {
            while (a[i] < p) i++;
            while (a[j] > p) j--;
            if (i >= j) break;
            t = a[i];
            a[i++] = a[j];
            a[j--] = t;
        }
        /* a[0..j] <= p <= a[j+1..n): recurse into the smaller side */
        if (j + 1 < n - j - 1) {
            sort_u64(a, j + 1);
            a += j + 1;
            n -= j + 1;
        } else {
            sort_u64(a + j + 1, n - j - 1);
            n = j + 1;
        }
    }
    for (int64_t i = 1; i < n; i++) {
        uint64_t x = a[i];
        int64_t j = i - 1;
        while (j >= 0 && a[j] > x) {
            a[j + 1] = a[j];
            j--;
        }
        a[j + 1] = x;
    }
}

#endif
