"""Dialect pattern → minimal byte DFA: the finite-state grammar every mask is computed from.

Owns the `DFA` value (a minimal, trimmed, canonically numbered automaton over bytes + special-token symbols, kept
in its class form, with the per-state distance to acceptance), its `ClassTable` view for the walk kernels, the
compile budgets, and `compile_dfa`:

    pattern ──constrained._pattern (native), else Program.build(parse(...))──► preorder program
        (NFA budget checked) ──constrained._fsm (GIL released): Thompson NFA over UTF-8 byte ranges
        ──byte equivalence classes──► subset construction (class alphabet) ──trim──► Hopcroft
        ──canonical BFS renumbering──► class table ──merge equal columns──► DFA.class_table [S, C] +
        DFA.symbol_classes [256 + K]   (DFA.table: the two as the kernels read them; DFA.transitions
        [S, 256 + K]: the same table by symbol, expanded on demand for `constrained.automata.operations`)

The native parser declines what it does not handle (every syntax error included); `Program.build`
(`constrained.automata.program`) over `constrained.dialect.parser.parse` then builds the same program in Python.
Refuses, with `GrammarTooLargeError`, anything whose NFA, subset construction or DFA would exceed its budget, and,
with `EmptyLanguageError`, a pattern that accepts nothing. `next_hop` gives the canonical next symbol toward
acceptance. (The all-Python pipeline the native one is tested against lives in tests/constrained/fsm_reference.py.)

Alphabet: symbols 0..255 are bytes; symbols 256+i are the special-token terminals named in the
pattern (``(?&<tool_call>)``), in ``DFA.special_names`` order. A special-token symbol is consumed
by exactly one vocabulary token (the one whose text is that name); bytes are consumed by ordinary
tokens' byte strings.

All work happens over byte equivalence classes (bytes no edge of the NFA tells apart), so a typical JSON
schema pattern runs subset construction and minimization over ~20–60 columns instead of 256.

Imports only `constrained.dialect`, `constrained.errors`, the other automata modules and the native extensions.
"""

from __future__ import annotations

import array
import functools
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from constrained import _fsm, _kernel, _pattern
from constrained.automata.program import MAX_NFA_STATES, Program
from constrained.dialect.parser import parse
from constrained.errors import EmptyLanguageError, GrammarTooLargeError

__all__ = ["DEAD", "DFA", "MAX_DFA_STATES", "MAX_NFA_STATES", "MAX_SUBSET_WORK", "ClassForm", "ClassTable",
           "compile_class_form", "compile_dfa", "next_hop", "symbol_classes", "classes_of_rows"]

DEAD = -1
"""Transition target meaning "no continuation": the byte is not allowed here."""

MAX_DFA_STATES = 50_000
"""Default budget on the states of a compiled DFA (`compile_dfa`'s ``max_states``)."""

MAX_SUBSET_WORK = 8_000_000
"""Budget on subset-construction work (NFA-state visits and set-union sizes; about a second in the Python
reference, far less natively; both count it identically): typical schema patterns use ~1–2% of it,
pathological ones such as ``(a|aa){1000}`` hit it instead of hanging."""


class ClassTable(NamedTuple):
    """A DFA's moves in their class form, as the walk kernels read them: the move on symbol x from state s is
    ``classes[s, symbol_class[x]]``. Rows by symbol are read here one at a time, never expanded for a whole table
    (a pushdown grammar's first mask spent a third of its time expanding one)."""

    classes: np.ndarray
    """int32 [n_states, n_classes], C-contiguous; ``DEAD`` where there is no move."""
    symbol_class: np.ndarray
    """int32 [n_symbols]: each symbol's column."""

    def row(self, state: int, symbols: int = 256) -> np.ndarray:
        """The moves of ``state`` on the first ``symbols`` symbols (the bytes, unless told)."""
        return self.classes[state, self.symbol_class[:symbols]]

    def at(self, state: int, symbol: int) -> int:
        """The move of ``state`` on ``symbol``."""
        return int(self.classes[state, self.symbol_class[symbol]])


@dataclass(frozen=True, kw_only=True, eq=False)
class DFA:
    """An immutable, minimal, trimmed deterministic automaton over bytes + special-token symbols.

    Trimmed: every state can reach an accepting state (dead ends are removed, so "allowed" at the byte level
    always means "can still complete"). Canonical: states are numbered in breadth-first order from the
    initial state, visiting symbols in increasing order, so equal languages give equal tables.
    """

    symbol_classes: np.ndarray
    """int32 [256 + len(special_names)]: each symbol's class; symbols with equal columns share one, and classes are
    numbered in order of their first symbol (the canonical form, see `symbol_classes`). Read-only."""
    class_table: np.ndarray
    """int32 [n_states, n_classes]: the transitions by class; ``DEAD`` (-1) where there is none. Read-only."""
    accepting: np.ndarray
    """bool [n_states]."""
    initial: int
    """The start state (always 0)."""
    special_names: tuple[str, ...]
    """Names (token texts) of the special-token terminals; symbol ``256 + i`` is ``special_names[i]``."""
    distance: np.ndarray
    """int32 [n_states]: shortest number of symbols from the state to an accepting state (0 if accepting)."""

    @functools.cached_property
    def fingerprint(self) -> str:
        """sha256 hex of the canonical class form: equal languages-as-compiled hash equal (cache key part).
        Worked out on first use: the rule DFAs of a pushdown grammar never need one."""
        return _fingerprint(self.symbol_classes, self.class_table, self.accepting, self.special_names)

    @functools.cached_property
    def table(self) -> ClassTable:
        """The moves in their class form, as the walk kernels read them."""
        return ClassTable(np.ascontiguousarray(self.class_table, dtype=np.int32),
                          np.ascontiguousarray(self.symbol_classes, dtype=np.int32))

    @functools.cached_property
    def transitions(self) -> np.ndarray:
        """int32 [n_states, 256 + len(special_names)]: the table by symbol. Read-only.

        Expanded from the class form on first use, for the automaton operations (products, automaton text); masks,
        budgets and forced bytes read `table` and never expand it (a few classes are ~5x smaller than 256+
        symbols to keep, hash, store and load).
        """
        table = np.empty((self.n_states, self.n_symbols), dtype=np.int32)
        _kernel.expand_classes(np.ascontiguousarray(self.class_table, dtype=np.int32),
                               np.ascontiguousarray(self.symbol_classes, dtype=np.int32), table)
        table.flags.writeable = False
        return table

    @classmethod
    def from_table(
        cls, transitions: np.ndarray, *, accepting: np.ndarray, distance: np.ndarray, special_names: tuple[str, ...],
        classes: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> DFA:  # fmt: skip
        """The DFA of a canonical table given by symbol (as the compilers produce it), with its class form worked
        out; ``classes``: the class form when the caller already has it (a partition of the symbols known to have
        equal columns, numbered in order of first symbol, and the table by class), so nothing is compared."""
        transitions = np.ascontiguousarray(transitions, dtype=np.int32)
        if classes is None:
            classes = symbol_classes(transitions)
        dfa = cls.from_classes(*classes, accepting=accepting, distance=distance, special_names=special_names)
        transitions.flags.writeable = False
        dfa.__dict__["transitions"] = transitions  # already expanded: seed the cached property
        return dfa

    @classmethod
    def from_classes(
        cls,
        symbol_class: np.ndarray,
        class_table: np.ndarray,
        *,
        accepting: np.ndarray,
        distance: np.ndarray,
        special_names: tuple[str, ...],
    ) -> DFA:
        """The DFA of a canonical table given in its class form."""
        for array_ in (symbol_class, class_table, accepting, distance):
            array_.flags.writeable = False
        return cls(
            symbol_classes=symbol_class, class_table=class_table, accepting=accepting, initial=0,
            special_names=special_names, distance=distance,
        )  # fmt: skip

    @property
    def n_states(self) -> int:
        return int(self.class_table.shape[0])

    def __repr__(self) -> str:  # the arrays would print thousands of numbers
        return (f"DFA(n_states={self.n_states}, n_symbols={self.n_symbols}, special_names={self.special_names!r}, "
                f"fingerprint={self.fingerprint[:16]!r}...)")

    @property
    def n_symbols(self) -> int:
        """256 bytes plus one symbol per special-token terminal."""
        return int(self.symbol_classes.shape[0])

    def walk(self, symbols: Iterable[int], state: int = 0) -> int:
        """The state reached from ``state`` by ``symbols`` (bytes or symbol ids), or ``DEAD``."""
        classes, symbol_class = self.table
        for symbol in symbols:
            state = int(classes[state, symbol_class[symbol]])
            if state == DEAD:
                return DEAD
        return state

    def accepts(self, symbols: Iterable[int]) -> bool:
        """Whether the whole symbol sequence (e.g. a ``bytes`` value) is in the language."""
        state = self.walk(symbols)
        return state != DEAD and bool(self.accepting[state])


class ClassForm(NamedTuple):
    """A compiled pattern as the native compiler returns it, before it becomes a `DFA`: what a pushdown grammar
    lays out by the hundred, where wrapping each rule in arrays cost as much as compiling a small one."""

    n_states: int
    accepting: bytes
    """uint8 [n_states]."""
    distance: bytes
    """int32 [n_states]."""
    symbol_class: bytes
    """int32 [256 + len(special_names)]."""
    class_table: bytes
    """int32 [n_states, classes]."""
    special_names: tuple[str, ...]


def compile_dfa(pattern: str, *, allow_special: bool = False, max_states: int = MAX_DFA_STATES) -> DFA:
    """Compile a dialect pattern (full-match) into its minimal trimmed byte DFA.

    Args:
        pattern: the regex, in the dialect of `constrained.dialect.parser`.
        allow_special: admit ``(?&NAME)`` special-token terminals (codec grammars only).
        max_states: budget on DFA states during subset construction.

    Raises:
        RegexSyntaxError: the pattern is not in the dialect.
        GrammarTooLargeError: the NFA, the subset construction or the DFA exceeds its budget.
        EmptyLanguageError: the pattern accepts no string at all.
    """
    form = compile_class_form(pattern, allow_special=allow_special, max_states=max_states)
    return DFA.from_classes(
        np.frombuffer(form.symbol_class, dtype=np.int32),
        np.frombuffer(form.class_table, dtype=np.int32).reshape(form.n_states, -1),
        accepting=np.frombuffer(form.accepting, dtype=np.bool_),
        distance=np.frombuffer(form.distance, dtype=np.int32),
        special_names=form.special_names,
    )


def compile_class_form(pattern: str, *, allow_special: bool = False, max_states: int = MAX_DFA_STATES) -> ClassForm:
    """`compile_dfa` up to the native compiler's output (same arguments, same errors)."""
    code: memoryview | array.array[int]
    templates: memoryview | array.array[int]
    offsets: memoryview | array.array[int]
    native = _pattern.program(pattern, allow_special)  # the same program, parsed natively
    if native is not None:
        code, templates, offsets = (memoryview(buffer).cast("i") for buffer in native[:3])
        names, size = native[3], native[4]
    else:  # anything the native parser leaves to Python, every syntax error included
        program = Program.build(parse(pattern, allow_special=allow_special))
        code, templates, offsets, names, size = (program.code, program.templates, program.offsets, program.names,
                                                 program.size)
    if size > MAX_NFA_STATES:
        raise GrammarTooLargeError("nfa_states", MAX_NFA_STATES, f"the pattern expands to ~{size} NFA states")
    result = _fsm.compile(code, templates, offsets, len(names), max_states, MAX_SUBSET_WORK)
    if isinstance(result, int):
        if result == _NATIVE_WORK:
            raise GrammarTooLargeError("subset_work", MAX_SUBSET_WORK, "NFA-state sets grow too large")
        if result == _NATIVE_STATES:
            raise GrammarTooLargeError("dfa_states", max_states, "subset construction")
        if result == _NATIVE_EMPTY:
            raise EmptyLanguageError(pattern)
        raise AssertionError(f"unexpected outcome {result} from constrained._fsm.compile")
    n_states, accepting, distance, symbol_class, class_table = result
    return ClassForm(n_states, accepting, distance, symbol_class, class_table, tuple(names))


def symbol_classes(transitions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The canonical class form of a table: (int32 class of each symbol, int32 [n_states, n_classes]).

    Symbols whose columns are equal share a class; classes are numbered in order of their first symbol, so equal
    tables give equal forms. The native compiler returns the same form (``symbol_classes`` in _fsm.c) from the
    classes it already has; this is the definition, for tables built elsewhere.
    """
    class_of, first = classes_of_rows(np.ascontiguousarray(transitions.T, dtype=np.int32))
    return class_of, np.ascontiguousarray(transitions[:, first], dtype=np.int32)


def classes_of_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Equal rows of an int32 [n, width] array share a class, numbered in order of first appearance: (int32
    class of each row, the index of each class's first row). Kernel `row_classes`."""
    class_of, first = _kernel.row_classes(rows, rows.shape[1])
    return np.frombuffer(class_of, dtype=np.int32), np.frombuffer(first, dtype=np.int32)


def next_hop(dfa: DFA) -> np.ndarray:
    """For each state, the smallest symbol on a shortest path to acceptance; ``-1`` for accepting states.

    Following it from any state reaches an accepting state in exactly ``dfa.distance[state]`` symbols.
    """
    classes, symbol_class = dfa.table
    distance = dfa.distance
    target_distance = np.where(classes >= 0, distance[np.maximum(classes, 0)], -2)
    on_shortest = target_distance == (distance[:, None] - 1)
    # classes are numbered in order of their first symbol, so the first class on a shortest path holds the
    # smallest symbol on one, as its first symbol
    first_symbol = np.unique(symbol_class, return_index=True)[1]
    hop = first_symbol[np.argmax(on_shortest, axis=1)].astype(np.int32)
    hop[dfa.accepting] = -1
    return hop


_NATIVE_WORK, _NATIVE_STATES, _NATIVE_EMPTY = 1, 2, 3
"""Budget outcomes `constrained._fsm.compile` returns instead of a table."""


def _fingerprint(
    symbol_class: np.ndarray, class_table: np.ndarray, accepting: np.ndarray, names: tuple[str, ...]
) -> str:
    """sha256 of the table in its canonical class form (a few columns instead of 256: ~10x less to hash)."""
    digest = hashlib.sha256(b"ember.dfa.v2\0")
    digest.update(np.array(class_table.shape, dtype="<i8").tobytes())
    digest.update(np.ascontiguousarray(symbol_class, dtype="<i4").data)
    digest.update(np.ascontiguousarray(class_table, dtype="<i4").data)  # the buffer itself: no copy
    digest.update(accepting.astype(np.uint8).tobytes())
    digest.update(json.dumps(list(names)).encode("utf-8"))
    return digest.hexdigest()
