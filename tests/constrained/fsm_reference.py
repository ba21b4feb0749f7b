"""The all-Python DFA compiler: the executable specification `constrained.automata.dfa.compile_dfa` is tested
against (identical tables, acceptance, distances, special names, fingerprints, and identical budget and
empty-language errors at the same limits; tens of times slower).

    pattern ──parse──► AST ──Thompson (UTF-8 byte ranges)──► NFA ──byte equivalence classes──► subset construction
        (class alphabet) ──trim──► Hopcroft ──canonical BFS renumbering──► DFA.from_table

The NFA is the one the native builder instantiates from `Program.build`'s program (same templates, same
attachment of fragments); trimming, minimization and ordering are the production passes of
`constrained.automata.minimize`. Budgets are read from their modules at call time, so a test that patches
``constrained.automata.dfa.MAX_SUBSET_WORK`` (or ``constrained.automata.program.MAX_NFA_STATES``) patches both paths.
"""

from __future__ import annotations

import numpy as np

from constrained.automata import dfa as automata_dfa
from constrained.automata import program as automata_program
from constrained.automata.dfa import DEAD, DFA, MAX_DFA_STATES
from constrained.automata.minimize import canonical_order, distances, minimize, trim
from constrained.automata.program import automaton_template
from constrained.dialect.nodes import (
    Alternation,
    Automaton,
    CharSet,
    Concat,
    Empty,
    Node,
    Repeat,
    Special,
    special_names,
    utf8_sequences,
)
from constrained.dialect.parser import parse
from constrained.errors import GrammarTooLargeError

__all__ = ["compile_dfa_reference"]


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
    table, accepting = trim(table, accepting, pattern)
    table, accepting = minimize(table, accepting)
    table, accepting = canonical_order(table, accepting)
    distance = distances(table, accepting)
    return DFA.from_table(table[:, symbol_class], accepting=accepting, distance=distance, special_names=names)


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
        if size > automata_program.MAX_NFA_STATES:
            raise GrammarTooLargeError("nfa_states", automata_program.MAX_NFA_STATES,
                                       f"the pattern expands to ~{size} NFA states")
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
                return self.template(automaton_template(node)[1], start)
            end = self.new_state()  # as Alternation((Empty(), automaton)): OP_ALT 2 OP_EMPTY OP_CHARSET
            self.eps[start].append(end)
            self.eps[self.template(automaton_template(node)[1], start)].append(end)
            return end
        assert isinstance(node, Empty)
        return start

    def template(self, flat: tuple[int, ...], start: int) -> int:
        """Instantiate a template (`charset_template` format) at ``start``, as _fsm.c does; returns its end."""
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
    """Upper estimate of the NFA states `_NFA.attach` creates for ``node`` (no allocation); what
    `Program.build` computes as ``size``."""
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
        return automaton_template(node)[0] + (4 if 0 in node.accepting else 0)
    return 2


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
            target_sets = [closure(t) for t in by_range[r]]
            work += 8 * len(current) + sum(map(len, target_sets))  # member visits run in Python, unions in C
            unions.append(target_sets[0] if len(target_sets) == 1 else frozenset().union(*target_sets))
        if work > automata_dfa.MAX_SUBSET_WORK:
            raise GrammarTooLargeError("subset_work", automata_dfa.MAX_SUBSET_WORK, "NFA-state sets grow too large")
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
