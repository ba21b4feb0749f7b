/* constrained._kernel: the token-trie walk behind per-state masks, the in-place mask writers, and the graph
 * searches over a pushdown grammar's rule table. Owns these hot loops and nothing else; one concern per source:
 *
 *   buffers.c   the buffer helpers and table checks every kernel shares (declared in kernel.h)
 *   trie.c      build_trie (token bytes sorted by memcmp, the trie flattened in preorder); Trie, the trie as
 *               one object (its arrays held, validated once when made: what every walk below takes);
 *               subtree_deepest, min_tokenization (fewest tokens spelling a symbol string, for budget-aware closing)
 *   walks.c     check (validates a table once, so that the walks can trust it), walk (DFA state x trie
 *               -> every token whose bytes stay alive and the state they lead to; a DEAD transition skips the
 *               whole subtree; tables read in their class form, classes[s, symbol_class[x]]), walk_rule,
 *               rule_exits, walk_family (the same over a pushdown grammar's rule table, stopping at boundaries)
 *   template.c  the JSON-string template shortcut: walk_exits, template_map, walk_template
 *   bits.c      bits_to_ids, ids_to_bits, or_bits; apply_allowed / apply_disallowed / apply_bytemask (write -inf
 *               into float32 logits, in place)
 *   tables.c    expand_runs (checks and decodes a cached run-length table), expand_classes, row_classes,
 *               lay_out_rules (a pushdown grammar's table from its rules' DFAs, and its reverse edges)
 *   graphs.c    shortest_completions, first_class_into, bytes_to_boundary (the rule-table graph searches),
 *               completion_bounds, follow_hops (the token bounds of canonical shortest completions)
 *   module.c    this file: the module, the Trie type and every concern's method table added to it
 */
#include "kernel.h"

static struct PyModuleDef kernel_module = {
    PyModuleDef_HEAD_INIT, "constrained._kernel",
    "Token-trie walk and mask writers for the constrained-decoding index (see src/constrained/kernel/).", -1,
    NULL,
};

PyMODINIT_FUNC
PyInit__kernel(void)
{
    PyMethodDef *tables[] = {kernel_trie_methods, kernel_walk_methods, kernel_template_methods, kernel_bits_methods,
                             kernel_table_methods, kernel_graph_methods};
    PyObject *module = PyModule_Create(&kernel_module);
    if (!module) return NULL;
    for (size_t k = 0; k < sizeof(tables) / sizeof(tables[0]); k++) {
        if (PyModule_AddFunctions(module, tables[k]) < 0) {
            Py_DECREF(module);
            return NULL;
        }
    }
    if (PyModule_AddType(module, &Trie_Type) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
