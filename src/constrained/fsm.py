"""Regex AST → byte-level DFA: the finite-state grammar every mask is computed from.

Owns the compilation of a dialect pattern (see `constrained.regex`) into a minimal, trimmed, canonically
numbered DFA over bytes + special-token symbols, and the per-state facts the matcher needs (distance to
acceptance, the canonical next symbol toward it). Refuses, with `GrammarTooLargeError`, anything whose NFA,
subset construction or DFA would exceed its budget, and, with `EmptyLanguageError`, a pattern that accepts
nothing.

    pattern ──regex.parse──► AST ──Thompson (UTF-8 byte ranges)──► NFA
        ──byte equivalence classes──► subset construction (class alphabet) ──trim──► Hopcroft
        ──canonical BFS renumbering──► class table ──merge equal columns──► DFA.class_table [S, C] +
        DFA.symbol_classes [256 + K]   (DFA.table: the two as the kernels read them; DFA.transitions [S, 256 + K]:
        the same table by symbol, expanded on demand for the automaton operations below)

Two implementations of the same pipeline. `compile_dfa` turns the pattern into a preorder program (the flattened
AST) natively with ``constrained._pattern`` (`_Program.build` over `regex.parse` is its reference, and the
fallback for whatever it declines, every syntax error included) and checks the NFA budget on it; the native
extension ``constrained._fsm`` then builds the very same NFA and does everything else down to the class form
and ``distance`` (GIL released), with the same subset-work accounting and budgets.
`compile_dfa_reference` is the all-Python original, kept as the executable specification the native path is
tested against (identical tables, identical budget errors).

Alphabet: symbols 0..255 are bytes; symbols 256+i are the special-token terminals named in the
pattern (``(?&<tool_call>)``), in ``DFA.special_names`` order. A special-token symbol is consumed
by exactly one vocabulary token (the one whose text is that name); bytes are consumed by ordinary
tokens' byte strings.

All work happens over byte equivalence classes (bytes no edge of the NFA tells apart), so a typical JSON
schema pattern runs subset construction and minimization over ~20–60 columns instead of 256.
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
from constrained.errors import EmptyLanguageError, GrammarTooLargeError
from constrained.regex import (
    Alternation,
    Automaton,
    CharSet,
    Concat,
    Empty,
    Node,
    Repeat,
    Special,
    parse,
    special_names,
    utf8_sequences,
)

__all__ = ["DEAD", "DFA", "MAX_DFA_STATES", "MAX_NFA_STATES", "MAX_SUBSET_WORK", "ClassForm", "ClassTable",
           "compile_class_form", "compile_dfa", "compile_dfa_reference", "next_hop", "intersection", "difference",
           "automaton"]

DEAD = -1
"""Transition target meaning "no continuation": the byte is not allowed here."""

MAX_NFA_STATES = 250_000
"""Budget on NFA states (bounded repetitions expand into copies; checked before anything is built)."""

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
        pattern: the regex, in the dialect of `constrained.regex`.
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
    native = _pattern.program(pattern, allow_special)  # the same program, parsed natively
    if native is not None:
        code, templates, offsets = (memoryview(buffer).cast("i") for buffer in native[:3])
        names, size = native[3], native[4]
    else:  # anything the native parser leaves to Python, every syntax error included
        program = _Program.build(parse(pattern, allow_special=allow_special))
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
    return ClassForm(*result, tuple(names))


def compile_dfa_reference(pattern: str, *, allow_special: bool = False,
                          max_states: int = MAX_DFA_STATES) -> DFA:
    """`compile_dfa` in pure Python: the reference the native path must match table for table and error for
    error (tests only: tens of times slower)."""
    ast = parse(pattern, allow_special=allow_special)
    names = special_names(ast)
    nfa = _NFA.build(ast, names)
    symbol_class, n_classes = _byte_classes(nfa, len(names))
    class_edges = [
        [(int(symbol_class[lo]), int(symbol_class[hi]), t) for lo, hi, t in edges] for edges in nfa.edges
    ]
    table, accepting = _subset_construction(nfa, class_edges, n_classes, max_states)
    table, accepting = _trim(table, accepting, pattern)
    table, accepting = _minimize(table, accepting)
    table, accepting = _canonical_order(table, accepting)
    distance = _distance(table, accepting)
    return DFA.from_table(table[:, symbol_class], accepting=accepting, distance=distance, special_names=names)


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


# -------------------------------------------------------------------------------------------------------- NFA


class _NFA:
    """Thompson-style NFA over byte ranges (and special symbols 256+i); ``final`` is the single accepting state.

    Fragments are *attached* at an existing state instead of getting a fresh start and an epsilon link: a
    fragment only ever adds edges leaving its start state, never entering it (loops get a fresh state), so
    chaining at the previous fragment's end keeps the language and saves most epsilon moves.
    """

    def __init__(self) -> None:
        self.eps: list[list[int]] = [[]]
        """Epsilon successors per state."""
        self.edges: list[list[tuple[int, int, int]]] = [[]]
        """Symbol edges per state: (lo, hi, target), inclusive symbol range."""
        self.start = 0
        self.final = 0
        self.symbol_of: dict[str, int] = {}

    @classmethod
    def build(cls, ast: Node, names: tuple[str, ...]) -> _NFA:
        size = _estimated_size(ast)
        if size > MAX_NFA_STATES:
            raise GrammarTooLargeError("nfa_states", MAX_NFA_STATES, f"the pattern expands to ~{size} NFA states")
        nfa = cls()
        nfa.symbol_of = {name: 256 + i for i, name in enumerate(names)}
        nfa.final = nfa.attach(ast, nfa.start)
        return nfa

    def new_state(self) -> int:
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def attach(self, node: Node, start: int) -> int:
        """Build ``node`` beginning at ``start``; returns its end state."""
        if isinstance(node, CharSet):
            return self.charset(node, start)
        if isinstance(node, Concat):
            end = start
            for item in node.items:
                end = self.attach(item, end)
            return end
        if isinstance(node, Alternation):
            end = self.new_state()
            for item in node.items:
                self.eps[self.attach(item, start)].append(end)
            return end
        if isinstance(node, Repeat):
            return self.repeat(node, start)
        if isinstance(node, Special):
            end = self.new_state()
            symbol = self.symbol_of[node.name]
            self.edges[start].append((symbol, symbol, end))
            return end
        if isinstance(node, Automaton):
            if 0 not in node.accepting:
                return self.template(_automaton_template(node)[1], start)
            end = self.new_state()  # as Alternation((Empty(), automaton)): OP_ALT 2 OP_EMPTY OP_CHARSET
            self.eps[start].append(end)
            self.eps[self.template(_automaton_template(node)[1], start)].append(end)
            return end
        assert isinstance(node, Empty)
        return start

    def template(self, flat: tuple[int, ...], start: int) -> int:
        """Instantiate a template (`_charset_template` format) at ``start``, as _fsm.c does; returns its end."""
        n_new, n_edges = flat[0], flat[1]
        base = len(self.eps)
        for _ in range(n_new):
            self.new_state()
        for i in range(2, 2 + 4 * n_edges, 4):
            src, lo, hi, dst = flat[i : i + 4]
            self.edges[base + src - 1 if src else start].append((lo, hi, base + dst - 1 if dst else start))
        return base

    def charset(self, node: CharSet, start: int) -> int:
        ranges = node.ranges
        if len(ranges) == 1 and ranges[0][0] == ranges[0][1] and ranges[0][0] < 0x80:  # the common literal
            end = self.new_state()
            self.edges[start].append((ranges[0][0], ranges[0][0], end))
            return end
        end = self.new_state()
        by_suffix: dict[tuple[tuple[int, int], ...], int] = {(): end}

        def state_for(suffix: tuple[tuple[int, int], ...]) -> int:
            state = by_suffix.get(suffix)
            if state is None:
                state = self.new_state()
                lo, hi = suffix[0]
                self.edges[state].append((lo, hi, state_for(suffix[1:])))
                by_suffix[suffix] = state
            return state

        for sequence in utf8_sequences(ranges):
            lo, hi = sequence[0]
            self.edges[start].append((lo, hi, state_for(sequence[1:])))
        return end

    def repeat(self, node: Repeat, start: int) -> int:
        end = start
        for i in range(node.min):
            if node.max is None and i == node.min - 1:  # x{n,} = x^(n-1) x+ : loop the last copy
                loop = self.new_state()
                self.eps[end].append(loop)
                end = self.attach(node.item, loop)
                self.eps[end].append(loop)
                return end
            end = self.attach(node.item, end)
        if node.max is None:
            hub = self.new_state()
            self.eps[end].append(hub)
            self.eps[self.attach(node.item, hub)].append(hub)
            return hub
        if node.max == node.min:
            return end
        exit_state = self.new_state()
        for _ in range(node.max - node.min):  # nested optionals (x(x(x)?)?)?: no ambiguity to blow up subsets
            self.eps[end].append(exit_state)
            end = self.attach(node.item, end)
        self.eps[end].append(exit_state)
        return exit_state


def _estimated_size(node: Node) -> int:
    """Upper estimate of the NFA states `_NFA.fragment` creates for ``node`` (no allocation)."""
    if isinstance(node, CharSet):
        return 2 + sum(map(len, utf8_sequences(node.ranges)))
    if isinstance(node, (Concat, Alternation)):
        total = 2
        for item in node.items:
            total += _estimated_size(item)
        return total
    if isinstance(node, Repeat):
        copies = node.max if node.max is not None else node.min  # x{n,} loops its last copy
        return 3 + _estimated_size(node.item) * max(copies, 1)
    if isinstance(node, Automaton):
        return _automaton_template(node)[0] + (4 if 0 in node.accepting else 0)
    return 2


# ------------------------------------------------------------------------------------- native program

_OP_EMPTY, _OP_CHARSET, _OP_SPECIAL, _OP_CONCAT, _OP_ALT, _OP_REPEAT, _OP_BYTE = range(7)
"""Opcodes of the preorder program `constrained._fsm.compile` reads (see _fsm.c)."""

_NATIVE_WORK, _NATIVE_STATES, _NATIVE_EMPTY = 1, 2, 3
"""Budget outcomes `constrained._fsm.compile` returns instead of a table."""


@dataclass(frozen=True, kw_only=True)
class _Program:
    """The AST flattened for the native builder, which builds exactly the NFA `_NFA.build` would."""

    code: array.array
    """int32 preorder program: opcode, operands, then the children."""
    templates: array.array
    """int32 charset templates, concatenated (see `_charset_template`)."""
    offsets: array.array
    """int32 start of each template in ``templates``."""
    names: tuple[str, ...]
    """Special-token names in order of first appearance (as `regex.special_names`)."""
    size: int
    """`_estimated_size` of the AST (the NFA budget is checked on it before anything is built)."""

    @classmethod
    def build(cls, ast: Node) -> _Program:
        code = array.array("i")
        templates: list[int] = []
        offsets: list[int] = []
        template_of: dict[tuple[tuple[int, int], ...], tuple[int, int]] = {}
        symbol_of: dict[str, int] = {}
        emitted: dict[int, tuple[int, int, int]] = {}
        """id of each composite node emitted so far → (start, end) of its code and its size. A node object met
        again (the parser shares the nodes of identical groups) is copied verbatim: its templates and special
        symbols already have their numbers, so emitting it again would append exactly the same code."""

        def emit(node: Node) -> int:  # returns the node's _estimated_size
            kind = type(node)
            if kind is CharSet:
                ranges = node.ranges
                if len(ranges) == 1:
                    lo, hi = ranges[0]
                    if lo == hi and lo < 0x80:
                        code.append(_OP_BYTE)
                        code.append(lo)
                        return 3
                found = template_of.get(ranges)
                if found is None:
                    size, flat = _charset_template(ranges)
                    found = template_of[ranges] = (len(offsets), size)
                    offsets.append(len(templates))
                    templates.extend(flat)
                code.append(_OP_CHARSET)
                code.append(found[0])
                return found[1]
            if kind is Concat or kind is Alternation or kind is Repeat:
                seen = emitted.get(id(node))
                if seen is not None:
                    code.extend(code[seen[0] : seen[1]])
                    return seen[2]
                start = len(code)
                if kind is Repeat:
                    code.append(_OP_REPEAT)
                    # a count beyond int32 implies a size far over the budget, which build refuses below
                    code.append(min(node.min, _INT32_MAX))
                    code.append(-1 if node.max is None else min(node.max, _INT32_MAX))
                    copies = node.max if node.max is not None else node.min
                    size = 3 + emit(node.item) * max(copies, 1)
                else:
                    code.append(_OP_CONCAT if kind is Concat else _OP_ALT)
                    code.append(len(node.items))
                    size = 2
                    for item in node.items:
                        size += emit(item)
                emitted[id(node)] = (start, len(code), size)
                return size
            if kind is Automaton:
                found = template_of.get(node)  # type: ignore[call-overload]
                if found is None:
                    size, flat = _automaton_template(node)
                    found = template_of[node] = (len(offsets), size)  # type: ignore[index]
                    offsets.append(len(templates))
                    templates.extend(flat)
                if 0 in node.accepting:  # the empty string too: Alternation((Empty(), automaton))
                    code.extend((_OP_ALT, 2, _OP_EMPTY, _OP_CHARSET, found[0]))
                    return found[1] + 4
                code.append(_OP_CHARSET)
                code.append(found[0])
                return found[1]
            if kind is Special:
                symbol = symbol_of.get(node.name)
                if symbol is None:
                    symbol = symbol_of[node.name] = 256 + len(symbol_of)
                code.append(_OP_SPECIAL)
                code.append(symbol)
                return 2
            assert kind is Empty
            code.append(_OP_EMPTY)
            return 2

        size = emit(ast)
        if size > MAX_NFA_STATES:
            raise GrammarTooLargeError("nfa_states", MAX_NFA_STATES, f"the pattern expands to ~{size} NFA states")
        return cls(code=code, templates=array.array("i", templates), offsets=array.array("i", offsets),
                   names=tuple(symbol_of), size=size)


_INT32_MAX = 2**31 - 1


@functools.lru_cache(maxsize=4096)
def _charset_template(ranges: tuple[tuple[int, int], ...]) -> tuple[int, tuple[int, ...]]:
    """(estimated size, template) of a charset: the states and edges `_NFA.charset` adds, with local ids
    (0 = the start it is attached at, 1.. = new states in creation order, 1 being the end), flattened as
    ``n_new, n_edges, (src, lo, hi, dst) * n_edges``."""
    sequences = utf8_sequences(ranges)
    edges: list[tuple[int, int, int, int]] = []
    by_suffix: dict[tuple[tuple[int, int], ...], int] = {(): 1}
    n_new = 1

    def state_for(suffix: tuple[tuple[int, int], ...]) -> int:
        nonlocal n_new
        state = by_suffix.get(suffix)
        if state is None:
            n_new += 1
            state = n_new
            lo, hi = suffix[0]
            edges.append((state, lo, hi, state_for(suffix[1:])))
            by_suffix[suffix] = state
        return state

    for sequence in sequences:
        lo, hi = sequence[0]
        edges.append((0, lo, hi, state_for(sequence[1:])))
    flat = [n_new, len(edges)]
    for edge in edges:
        flat.extend(edge)
    return 2 + sum(map(len, sequences)), tuple(flat)


@functools.lru_cache(maxsize=256)
def _automaton_template(node: Automaton) -> tuple[int, tuple[int, ...]]:
    """(estimated size, template) of an automaton, in the `_charset_template` format.

    Local 0 is the start (only edges leave it: state 0's edges are copied there), 1 the end (only edges enter
    it: an edge into an accepting state is doubled into it); every other state that is entered and has edges of
    its own gets a local, in state order. Acceptance of the empty string is left to the caller.
    """
    has_edges = [False] * node.n_states
    entered = [False] * node.n_states
    for source, _, _, target in node.edges:
        has_edges[source] = True
        entered[target] = True
    local = [0] * node.n_states
    n_new = 1
    for state in range(node.n_states):
        if has_edges[state] and entered[state]:
            n_new += 1
            local[state] = n_new
    accepting = set(node.accepting)
    flat = [n_new, 0]
    for source, lo, hi, target in node.edges:
        for src in ((0, local[source]) if source == 0 and local[0] else (local[source],)):
            if source and not src:
                continue  # a state never entered: unreachable
            if local[target]:
                flat.extend((src, lo, hi, local[target]))
            if target in accepting:
                flat.extend((src, lo, hi, 1))
    flat[1] = (len(flat) - 2) // 4
    return 2 + n_new, tuple(flat)


def _byte_classes(nfa: _NFA, n_special: int) -> tuple[np.ndarray, int]:
    """Partition of the symbols into classes no edge tells apart: (class of each symbol, number of classes).

    Byte classes are intervals numbered in byte order; each special symbol is a class of its own, after them.
    """
    boundaries = {0, 256}
    for edges in nfa.edges:
        for lo, hi, _ in edges:
            if lo < 256:
                boundaries.add(lo)
                boundaries.add(hi + 1)
    starts = np.zeros(257, dtype=bool)
    starts[sorted(boundaries)] = True
    byte_class = np.cumsum(starts[:256]) - 1
    n_byte_classes = int(byte_class[-1]) + 1
    symbol_class = np.concatenate(
        [byte_class, np.arange(n_byte_classes, n_byte_classes + n_special)]
    ).astype(np.intp)
    return symbol_class, n_byte_classes + n_special


# ------------------------------------------------------------------------------------------ subset construction


def _subset_construction(
    nfa: _NFA, class_edges: list[list[tuple[int, int, int]]], n_classes: int, max_states: int
) -> tuple[np.ndarray, np.ndarray]:
    """Powerset construction over the class alphabet: (table int32 [S, n_classes] with -1 = dead, accepting)."""
    closures: dict[int, frozenset[int]] = {}
    eps = nfa.eps
    edges = nfa.edges
    final = nfa.final

    def closure(state: int) -> frozenset[int]:
        found = closures.get(state)
        if found is None:
            seen = {state}
            stack = [state]
            important = []
            while stack:
                q = stack.pop()
                if edges[q] or q == final:
                    important.append(q)
                for r in eps[q]:
                    if r not in seen:
                        seen.add(r)
                        stack.append(r)
            found = closures[state] = frozenset(important)
        return found

    initial = closure(nfa.start)
    index: dict[frozenset[int], int] = {initial: 0}
    sets = [initial]
    rows: list[list[int]] = []
    work = len(initial)
    empty_row = [DEAD] * n_classes
    i = 0
    while i < len(sets):
        current = sets[i]
        i += 1
        by_range: dict[tuple[int, int], set[int]] = {}
        for q in current:
            for lo, hi, target in class_edges[q]:
                targets = by_range.get((lo, hi))
                if targets is None:
                    by_range[(lo, hi)] = {target}
                else:
                    targets.add(target)
        row = empty_row.copy()
        rows.append(row)
        if not by_range:
            continue
        ranges = list(by_range)
        unions = []
        for r in ranges:
            targets = [closure(t) for t in by_range[r]]
            work += 8 * len(current) + sum(map(len, targets))  # member visits run in Python, unions in C
            unions.append(targets[0] if len(targets) == 1 else frozenset().union(*targets))
        if work > MAX_SUBSET_WORK:
            raise GrammarTooLargeError("subset_work", MAX_SUBSET_WORK, "NFA-state sets grow too large")
        if len(ranges) == 1:
            segments = [(ranges[0][0], ranges[0][1] + 1, 1)]
        else:  # sweep the class axis: the set of active ranges (a bitmask) only changes at range ends
            events = sorted([(lo, 1 << k) for k, (lo, _) in enumerate(ranges)]
                            + [(hi + 1, -(1 << k)) for k, (_, hi) in enumerate(ranges)])
            segments = []
            active = 0
            for e, (position, delta) in enumerate(events):
                active += delta
                if active and e + 1 < len(events) and events[e + 1][0] > position:
                    segments.append((position, events[e + 1][0], active))
        previous_active = 0
        target_id = DEAD
        for a, b, active in segments:
            if active != previous_active:
                previous_active = active
                if active & (active - 1) == 0:
                    key = unions[active.bit_length() - 1]
                else:
                    key = frozenset().union(*[unions[k] for k in range(len(ranges)) if active >> k & 1])
                target_id = index.get(key, -1)
                if target_id < 0:
                    target_id = len(sets)
                    if target_id >= max_states:
                        raise GrammarTooLargeError("dfa_states", max_states, "subset construction")
                    work += len(key)
                    index[key] = target_id
                    sets.append(key)
            row[a:b] = [target_id] * (b - a)
    table = np.array(rows, dtype=np.int32).reshape(len(rows), n_classes)
    accepting = np.array([final in s for s in sets], dtype=bool)
    return table, accepting


# ------------------------------------------------------------------------------------- trim, minimize, order


def _predecessors(table: np.ndarray) -> tuple[list[int], list[int]]:
    """CSR of distinct predecessors: preds[starts[t]:starts[t+1]] are the states with an edge into t."""
    n = table.shape[0]
    src, col = np.nonzero(table >= 0)
    dst = table[src, col].astype(np.int64)
    pairs = np.unique(dst * n + src)
    dst = pairs // n
    src = pairs % n
    starts = np.searchsorted(dst, np.arange(n + 1))
    return src.tolist(), starts.tolist()


def _distance(table: np.ndarray, accepting: np.ndarray) -> np.ndarray:
    """Reverse BFS from the accepting states: shortest symbol count to acceptance, -1 if unreachable."""
    preds, starts = _predecessors(table)
    distance = np.full(table.shape[0], -1, dtype=np.int32)
    frontier = np.flatnonzero(accepting).tolist()
    dist = distance.tolist()
    for s in frontier:
        dist[s] = 0
    level = 0
    while frontier:
        level += 1
        nxt = []
        for t in frontier:
            for s in preds[starts[t] : starts[t + 1]]:
                if dist[s] < 0:
                    dist[s] = level
                    nxt.append(s)
        frontier = nxt
    distance[:] = dist
    return distance


def _trim(table: np.ndarray, accepting: np.ndarray, pattern: str) -> tuple[np.ndarray, np.ndarray]:
    """Drop states that cannot reach acceptance (all states are reachable after subset construction)."""
    live = _distance(table, accepting) >= 0
    if not live[0]:
        raise EmptyLanguageError(pattern)
    if live.all():
        return table, accepting
    new_id = np.full(table.shape[0] + 1, DEAD, dtype=np.int32)  # index -1 (dead) stays dead
    new_id[:-1][live] = np.arange(int(live.sum()), dtype=np.int32)
    return new_id[table[live]], accepting[live]


def _minimize(table: np.ndarray, accepting: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hopcroft partition refinement on the partial class-level DFA; returns the quotient automaton.

    Each splitter block refines by all classes at once: a state's signature is the bitmask of classes leading
    into the splitter, and a block splits by signature (multi-way split; every part but the largest is queued
    unless the block already was). No sink state is added: with a partial transition function Hopcroft stays
    correct when *both* initial blocks start queued (Valmari & Lehtinen, 2008). The table is trimmed, so no
    live state is equivalent to the missing dead state.
    """
    n = table.shape[0]
    incoming = _incoming_masks(table)
    accept_list = accepting.tolist()
    blocks: list[set[int]] = [b for b in ({s for s in range(n) if accept_list[s]},
                                          {s for s in range(n) if not accept_list[s]}) if b]
    block_of = [0] * n
    for b, members in enumerate(blocks):
        for s in members:
            block_of[s] = b
    waiting = set(range(len(blocks)))
    while waiting:
        splitter = waiting.pop()
        signature: dict[int, int] = {}
        for t in blocks[splitter]:
            for source, mask in incoming[t]:
                signature[source] = signature.get(source, 0) | mask
        touched: dict[int, dict[int, list[int]]] = {}
        for source, sig in signature.items():
            groups = touched.get(block_of[source])
            if groups is None:
                touched[block_of[source]] = {sig: [source]}
            elif sig in groups:
                groups[sig].append(source)
            else:
                groups[sig] = [source]
        for b, groups in touched.items():
            members = blocks[b]
            parts = list(groups.values())
            if len(parts) == 1 and len(parts[0]) == len(members):
                continue
            was_waiting = b in waiting
            if sum(map(len, parts)) == len(members):  # every member touched: the largest part keeps the id
                parts.sort(key=len, reverse=True)
                blocks[b] = set(parts[0])
                parts = queued = parts[1:]
            else:  # the untouched remainder keeps the id
                for part in parts:
                    members.difference_update(part)
                largest = max(parts, key=len)
                if len(largest) > len(members) and not was_waiting:
                    waiting.add(b)
                    queued = [part for part in parts if part is not largest]
                    parts = queued + [largest]
                else:
                    queued = parts
            for part in parts:
                new_block = len(blocks)
                blocks.append(set(part))
                for s in part:
                    block_of[s] = new_block
                if was_waiting or any(part is q for q in queued):
                    waiting.add(new_block)
            if was_waiting:
                waiting.add(b)
    if len(blocks) == n:
        return table, accepting
    live_blocks = list(dict.fromkeys(block_of))  # first-occurrence order: state 0's block stays initial
    renumber = {b: i for i, b in enumerate(live_blocks)}
    block_id = np.array([renumber[block_of[s]] for s in range(n)] + [DEAD], dtype=np.int32)
    representatives = np.array([next(iter(blocks[b])) for b in live_blocks], dtype=np.intp)
    return block_id[table[representatives]], accepting[representatives]


def _incoming_masks(table: np.ndarray) -> list[list[tuple[int, int]]]:
    """For each state t, the (source, bitmask of classes) pairs of the edges into t."""
    n, n_classes = table.shape
    src, col = np.nonzero(table >= 0)
    dst = table[src, col].astype(np.int64)
    key = dst * n + src
    order = np.argsort(key, kind="stable")
    key, col = key[order], col[order]
    first = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]])) if key.size else np.zeros(0, np.intp)
    incoming: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    words = []
    for w in range(0, n_classes, 62):  # 62 classes per int64 word, combined into Python ints
        in_word = (col >= w) & (col < w + 62)
        bits = np.where(in_word, np.left_shift(np.int64(1), (col - w).clip(0, 61)), 0)
        words.append(np.bitwise_or.reduceat(bits, first).tolist() if key.size else [])
    keys = key[first].tolist()
    for i, k in enumerate(keys):
        mask = words[0][i]
        for w in range(1, len(words)):
            mask |= words[w][i] << (62 * w)
        incoming[k // n].append((k % n, mask))
    return incoming


def _canonical_order(table: np.ndarray, accepting: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Renumber states in BFS order from state 0, visiting classes (hence symbols) in increasing order."""
    n = table.shape[0]
    rows = table.tolist()
    order = [0]
    new_id = [-1] * n
    new_id[0] = 0
    for s in order:
        for t in rows[s]:
            if t >= 0 and new_id[t] < 0:
                new_id[t] = len(order)
                order.append(t)
    mapping = np.array(new_id + [DEAD], dtype=np.int32)
    old = np.array(order, dtype=np.intp)
    return mapping[table[old]], accepting[old]


def _fingerprint(
    symbol_class: np.ndarray, class_table: np.ndarray, accepting: np.ndarray, names: tuple[str, ...]
) -> str:
    """sha256 of the table in its canonical class form (a few columns instead of 256: ~10x less to hash)."""
    digest = hashlib.sha256(b"ember.dfa.v2\0")
    digest.update(np.array(class_table.shape, dtype="<i8").tobytes())
    digest.update(np.ascontiguousarray(symbol_class, dtype="<i4"))
    digest.update(np.ascontiguousarray(class_table, dtype="<i4"))  # the buffer itself: no copy
    digest.update(accepting.astype(np.uint8).tobytes())
    digest.update(json.dumps(list(names)).encode("utf-8"))
    return digest.hexdigest()


# ------------------------------------------------------------------------------------------ language operations

MAX_PRODUCT_STATES = 200_000
"""Budget on the reachable pairs of a product (`intersection`, `difference`) before it is trimmed and minimized."""


def intersection(a: DFA, b: DFA, *, max_states: int = 4096) -> DFA | None:
    """The minimal DFA of L(a) ∩ L(b) (byte automata), or None when it is empty.

    Raises:
        GrammarTooLargeError: the product or the minimal result exceeds its budget.
    """
    return _product(a, b, complement_b=False, max_states=max_states)


def difference(universe: DFA, a: DFA, *, max_states: int = 4096) -> DFA | None:
    """The minimal DFA of L(universe) ∖ L(a): the complement of ``a`` within ``universe``; None when empty.

    Raises:
        GrammarTooLargeError: the product or the minimal result exceeds its budget.
    """
    return _product(universe, a, complement_b=True, max_states=max_states)


def automaton(dfa: DFA) -> Automaton:
    """The `regex.Automaton` node of a byte DFA (``regex.automaton_text`` writes it into a pattern)."""
    if dfa.special_names:
        raise ValueError("an automaton node has bytes only, not special-token symbols")
    table = np.asarray(dfa.transitions[:, :256])
    n = table.shape[0]
    change = np.ones((n, 256), dtype=bool)
    change[:, 1:] = table[:, 1:] != table[:, :-1]
    rows, los = np.nonzero(change)  # run starts, row-major: sorted by (state, byte)
    his = np.empty_like(los)
    his[:-1] = np.where(rows[1:] == rows[:-1], los[1:] - 1, 255)
    his[-1:] = 255
    targets = table[rows, los]
    keep = targets >= 0
    edges = tuple(zip(rows[keep].tolist(), los[keep].tolist(), his[keep].tolist(), targets[keep].tolist()))
    return Automaton(n_states=n, accepting=tuple(np.flatnonzero(dfa.accepting).tolist()), edges=edges)


def _product(a: DFA, b: DFA, *, complement_b: bool, max_states: int) -> DFA | None:
    """Reachable pairs of the product, level by level over the joint byte classes; then trim, minimize, order."""
    if a.special_names or b.special_names:
        raise ValueError("language operations take byte automata (no special-token symbols)")
    joint = np.ascontiguousarray(np.stack([a.symbol_classes[:256], b.symbol_classes[:256]], axis=1), dtype=np.int32)
    class_of_byte, first = classes_of_rows(joint)  # joint classes numbered by their first byte
    table_a = a.class_table[:, a.symbol_classes[first]]
    table_b = b.class_table[:, b.symbol_classes[first]]
    accept_b = b.accepting
    n_b = table_b.shape[0]
    if complement_b:  # a sink stands for b's missing transitions: everything b rejects from there on
        table_b = np.where(table_b < 0, n_b, table_b)
        table_b = np.vstack([table_b, np.full((1, table_b.shape[1]), n_b, dtype=table_b.dtype)])
        accept_b = np.append(accept_b, False)
        n_b += 1
    cells = a.n_states * n_b
    if cells > 1 << 25:
        raise GrammarTooLargeError("product_states", MAX_PRODUCT_STATES, f"{a.n_states} × {n_b} state pairs")
    ids = np.full(cells, DEAD, dtype=np.int64)
    ids[0] = 0
    fa, fb = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    pair_a, pair_b, rows = [fa], [fb], []
    hi = 1
    while fa.size:
        next_a, next_b = table_a[fa], table_b[fb]
        valid = (next_a >= 0) & (next_b >= 0)
        key = np.where(valid, next_a.astype(np.int64) * n_b + next_b, 0)
        fresh = np.unique(key[valid])
        fresh = fresh[ids[fresh] < 0]
        ids[fresh] = np.arange(hi, hi + fresh.size)
        if hi + fresh.size > MAX_PRODUCT_STATES:
            raise GrammarTooLargeError("product_states", MAX_PRODUCT_STATES, "intersecting string languages")
        fa, fb = fresh // n_b, fresh % n_b
        pair_a.append(fa)
        pair_b.append(fb)
        rows.append(np.where(valid, ids[key], DEAD).astype(np.int32))
        hi += fresh.size
    all_a, all_b = np.concatenate(pair_a), np.concatenate(pair_b)
    accepting = a.accepting[all_a] & (~accept_b[all_b] if complement_b else accept_b[all_b])
    table = np.vstack(rows)
    try:
        table, accepting = _trim(table, accepting, "")
    except EmptyLanguageError:
        return None
    table, accepting = _minimize(table, accepting)
    table, accepting = _canonical_order(table, accepting)
    if table.shape[0] > max_states:
        raise GrammarTooLargeError("dfa_states", max_states, f"a computed string language has {table.shape[0]} states")
    distance = _distance(table, accepting)
    return DFA.from_table(table[:, class_of_byte], accepting=accepting, distance=distance, special_names=())
