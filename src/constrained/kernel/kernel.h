/* constrained._kernel, shared by its sources: the constants, the buffer helpers every kernel acquires its arrays
 * with, and the functions one concern lends another. Each source file owns one concern and exports its Python
 * functions as one method table, which module.c adds to the module.
 *
 * Every array is handed in through the buffer protocol (numpy arrays, C-contiguous); sizes are checked by the
 * kernel that takes them, and errors are ValueErrors.
 *
 * Trie layout (n nodes, node 0 is the root at depth 0, end[0] == n):
 *   node_byte[i]  the byte on the edge into node i
 *   node_depth[i] its depth == length of the prefix it spells
 *   node_end[i]   one past the last node of its subtree (preorder => the subtree is [i, end[i]) )
 *   tok_start[i]..tok_start[i+1]  CSR range of token ids whose bytes end exactly at node i
 */
#ifndef CONSTRAINED_KERNEL_H
#define CONSTRAINED_KERNEL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define DEAD (-1)
#define INF_TOKENS (INT32_MAX / 2)

/* ---- buffer helpers (buffers.c) ---------------------------------------------------------------- */

/* A C-contiguous buffer of obj (writable if asked) whose items are `itemsize` bytes (any size when 0);
 * 0, or -1 with the error set (ValueError naming `name` for a wrong item size) and nothing held. */
int get_buf(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t itemsize, const char *name);

/* get_buf for n objects into bufs[0..n): 0, or -1 with every buffer released. */
int get_bufs(PyObject **objs, Py_buffer *bufs, int n, const Py_ssize_t *sizes, const int *writable,
             const char **names);

/* Releases bufs[0..n), last first. */
void release_bufs(Py_buffer *bufs, int n);

static inline Py_ssize_t
n_items(Py_buffer *v)
{
    return v->itemsize ? v->len / v->itemsize : 0;
}

/* Whether any of `count` table entries is outside [DEAD, n) (one vectorized pass). */
int table_out_of_range(const int32_t *T, Py_ssize_t count, Py_ssize_t n);

/* Whether any of `count` entries is below `floor` (one vectorized pass). */
int any_below(const int32_t *T, Py_ssize_t count, int32_t floor);

/* Whether a class-form table is consistent: `classes` (int32 [n_states, n_classes], 2-D) with every entry of
 * `sc` (the class of each symbol; at least the 256 bytes) a column of it. Sets *n_states and *n_classes. */
int class_form_ok(Py_buffer *classes, Py_buffer *sc, Py_ssize_t *n_states, Py_ssize_t *n_classes);

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

/* ---- the token trie as one object (trie.c) ------------------------------------------------------ */

/* constrained._kernel.Trie: a trie's arrays, held (their buffers stay acquired, and so their pointers valid, for
 * the object's life) and validated once when it is made, so that every walk takes one object and trusts it:
 * n_nodes >= 1; the root at depth 0 with end n_nodes and tok_start[0] == 0, tok_start[n_nodes] == n_tokens; every
 * other node's depth in [1, max_depth] and at most its predecessor's + 1, its end in (i, n_nodes]; tok_start
 * ascending; token ids in [0, vocab_size); root_child[b] -1 or a depth-1 node. */
enum { TRIE_NODE_BYTE, TRIE_NODE_DEPTH, TRIE_NODE_END, TRIE_TOK_START, TRIE_TOK_IDS, TRIE_ROOT_CHILD, TRIE_ARRAYS };

typedef struct {
    PyObject_HEAD
    Py_buffer views[TRIE_ARRAYS]; /* in the order above; each holds a reference to its array */
    int held;                     /* how many of views are acquired */
    const uint8_t *node_byte;
    const int32_t *node_depth, *node_end, *tok_start, *tok_ids, *root_child;
    Py_ssize_t n_nodes, n_tokens, max_depth, vocab_size;
} TrieObject;

extern PyTypeObject Trie_Type;

/* ---- lent across concerns ---------------------------------------------------------------------- */

/* best[i] = fewest tokens spelling sym[i..L) (best[L] = 0; INF_TOKENS when none does), by trie prefix lookups
 * (trie.c; graphs.c's completion_bounds tokenizes its chains with it). */
void min_tokens(const int32_t *sym, Py_ssize_t L, const TrieObject *trie, int32_t *best);

/* ---- the Python functions of each concern, NULL-terminated --------------------------------------- */

extern PyMethodDef kernel_trie_methods[];      /* trie.c: build_trie, subtree_deepest, min_tokenization (and the
                                                  Trie type, which module.c adds) */
extern PyMethodDef kernel_walk_methods[];      /* walks.c: check, walk, walk_rule, rule_exits, walk_family */
extern PyMethodDef kernel_template_methods[];  /* template.c: walk_exits, template_map, walk_template */
extern PyMethodDef kernel_bits_methods[];      /* bits.c: bits_to_ids, ids_to_bits, or_bits, apply_* */
extern PyMethodDef kernel_table_methods[];     /* tables.c: expand_runs, expand_classes, row_classes, lay_out_rules */
extern PyMethodDef kernel_graph_methods[];     /* graphs.c: shortest_completions, first_class_into,
                                                  bytes_to_boundary, completion_bounds, follow_hops */

#endif
