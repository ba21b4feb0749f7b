"""Byte automata: dialect values → minimal DFAs over bytes and special-token symbols, and operations on them.

Knows nothing of tokens, masks or schemas: it imports only `constrained.dialect`, `constrained.errors` and the
native extensions.

    program     AST → the preorder program the native NFA builder reads (`Program.build`), NFA budget, templates
    dfa         the `DFA` value and `ClassTable`; `compile_dfa` (native path, `Program.build` fallback), budgets
    minimize    table passes: distances to acceptance, trim, Hopcroft minimization, canonical renumbering
    operations  intersection, difference, and a DFA as a dialect `Automaton` node
"""
