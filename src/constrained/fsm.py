"""Moved to `constrained.automata` (dfa, program, minimize, operations); kept for one release.

Re-exports the public names other code reads from here; new code imports from `constrained.automata.*`. The
all-Python reference compiler (``compile_dfa_reference``) moved to tests/constrained/fsm_reference.py.
"""

from __future__ import annotations

from constrained.automata.dfa import (
    DEAD,
    DFA,
    MAX_DFA_STATES,
    MAX_NFA_STATES,
    MAX_SUBSET_WORK,
    ClassForm,
    ClassTable,
    classes_of_rows,
    compile_class_form,
    compile_dfa,
    next_hop,
    symbol_classes,
)
from constrained.automata.operations import MAX_PRODUCT_STATES, automaton, difference, intersection
from constrained.errors import EmptyLanguageError, GrammarTooLargeError

__all__ = [
    "DEAD",
    "DFA",
    "MAX_DFA_STATES",
    "MAX_NFA_STATES",
    "MAX_SUBSET_WORK",
    "MAX_PRODUCT_STATES",
    "ClassForm",
    "ClassTable",
    "compile_class_form",
    "compile_dfa",
    "next_hop",
    "symbol_classes",
    "classes_of_rows",
    "intersection",
    "difference",
    "automaton",
    "EmptyLanguageError",
    "GrammarTooLargeError",
]
