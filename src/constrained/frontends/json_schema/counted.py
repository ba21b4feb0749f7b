"""Rule mode: a string language under lengths one automaton cannot count, as rules that count in chunks.

Owns `CountedLexeme`: the strings of a body DFA ``D`` (a ``pattern``, a ``format``, their intersection) whose length
in JSON characters (code points: one `json_lexemes.UNIT` each, whatever its escape) lies in ``[lo, hi]``, written as
rules of the pushdown grammar instead of one product automaton (which grows with the bound: ``uri`` with
``maxLength: 65536`` is millions of states). The rule it keeps: a call of ``R(q, lo, hi)`` matches exactly the
bodies ``w`` with ``lo <= |w| <= hi`` that take ``D`` from state ``q`` to an accepting state, then the closing quote.

    R(q, lo, hi) = B(q, lo, hi) "                          hi < chunk (one product automaton, small)
    R(q, lo, hi) = B(q, lo, chunk-1) " | Σ_q' C(q→q') R(q', 0, hi-chunk)         lo < chunk <= hi
    R(q, lo, hi) = Σ_q' C(q→q') R(q', lo-chunk, hi-chunk)                        chunk <= lo
    R(q, 0, None) = D from q, "     (no count left to keep)

``C(q→q')`` is exactly ``chunk`` characters taking ``D`` from ``q`` to ``q'`` (one rule per pair, shared by every
level), ``B(q, a, b)`` between ``a`` and ``b`` characters from ``q`` to acceptance. Both are products of ``D`` with a
counter of at most ``chunk`` characters, so their size does not grow with the bound; the levels are rules of a few
calls each. Every length is split one way (below a chunk, or a chunk and the rest) and ``D`` is deterministic, so
a string has one parse; a rule ends only at a chunk's end or after the quote, and the rest is a tail call.

Imports only the dialect, the automata, `constrained.rules` and `constrained.errors`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from constrained.automata.dfa import MAX_DFA_STATES, compile_dfa
from constrained.automata.operations import automaton, intersection
from constrained.dialect.json_lexemes import UNIT
from constrained.dialect.nodes import Automaton
from constrained.dialect.parser import automaton_text
from constrained.dialect.writer import rep
from constrained.errors import EmptyLanguageError, GrammarTooLargeError
from constrained.rules import call

__all__ = ["CHUNK_CHARS", "MIN_CHUNK_CHARS", "MAX_COUNTED_STATES", "CountedLexeme"]

CHUNK_CHARS = 256
"""Characters per chunk rule to start with (halved while a chunk's product automaton is over its budget)."""
MIN_CHUNK_CHARS = 16
"""The smallest chunk tried before the construction is refused."""
_MAX_RULES = 20_000
"""Budget on the rules one counted lexeme writes (levels × live states)."""
MAX_COUNTED_STATES = 128
"""Most states of the body DFA counted this way (a chunk rule per pair of states a chunk connects)."""


def _from_state(dfa: Any, start: int, accepting: set[int]) -> Automaton:
    """``dfa`` started at ``start`` with its accepting states replaced: the reachable part, renumbered (start 0)."""
    table = np.asarray(dfa.transitions[:, :256])
    order, index = [start], {start: 0}
    for state in order:
        for target in np.unique(table[state]).tolist():
            if target >= 0 and target not in index:
                index[target] = len(order)
                order.append(target)
    remap = np.full(table.shape[0] + 1, -1, dtype=np.int64)
    remap[order] = np.arange(len(order))
    rows_table = remap[table[order]]  # -1 stays -1 (the last entry of remap)
    n = len(order)
    change = np.ones((n, 256), dtype=bool)
    change[:, 1:] = rows_table[:, 1:] != rows_table[:, :-1]
    rows, los = np.nonzero(change)
    his = np.empty_like(los)
    his[:-1] = np.where(rows[1:] == rows[:-1], los[1:] - 1, 255)
    his[-1:] = 255
    targets = rows_table[rows, los]
    keep = targets >= 0
    edges = tuple(zip(rows[keep].tolist(), los[keep].tolist(), his[keep].tolist(), targets[keep].tolist()))
    return Automaton(n_states=n, accepting=tuple(sorted(index[s] for s in accepting if s in index)), edges=edges)


def _unit_steps(dfa: Any) -> np.ndarray:
    """bool [S, S]: whether one character (one `UNIT`, any spelling) takes ``dfa`` from a state to another."""
    unit = compile_dfa(UNIT)
    table, moves = np.asarray(dfa.transitions[:, :256]), np.asarray(unit.transitions[:, :256])
    n = table.shape[0]
    steps = np.zeros((n, n), dtype=bool)
    pairs = np.stack([np.arange(n), np.arange(n), np.zeros(n, dtype=np.int64)], axis=1)  # (source, state, unit)
    while pairs.size:
        nxt_d, nxt_u = table[pairs[:, 1]], moves[pairs[:, 2]]
        ok = (nxt_d >= 0) & (nxt_u >= 0)
        k, b = np.nonzero(ok)
        fresh = np.unique(np.stack([pairs[k, 0], nxt_d[k, b], nxt_u[k, b]], axis=1), axis=0)
        done = unit.accepting[fresh[:, 2]]
        steps[fresh[done, 0], fresh[done, 1]] = True
        pairs = fresh[~done]
    return steps


class CountedLexeme:
    """The rules of one body DFA under one length range (see the module docstring); `entry` is the call that the
    string value's pattern puts after its opening quote."""

    def __init__(self, dfa: Any, rules: dict[str, str], prefix: str, lo: int, hi: int | None) -> None:
        self.dfa = dfa
        self.rules = rules
        self.prefix = prefix
        self.accepting = {int(s) for s in dfa.accepting.nonzero()[0]}
        self.pieces: dict[tuple[int, tuple[int, ...], int, int | None], Any] = {}
        self.counters: dict[tuple[int, int | None], Any] = {}
        self.written = 0
        if dfa.n_states > MAX_COUNTED_STATES:
            raise GrammarTooLargeError("dfa_states", MAX_COUNTED_STATES, f"the string language has {dfa.n_states} "
                                       "states, too many to count its length in chunk rules (one per pair of states)")
        self.steps = _unit_steps(dfa)
        self.chunk = CHUNK_CHARS
        while True:
            try:
                self.entry = self.level(0, lo, hi)
                return
            except GrammarTooLargeError:
                if self.chunk // 2 < max(MIN_CHUNK_CHARS, 1):
                    raise
                for name in [n for n in self.rules if n.startswith(prefix + ".")]:
                    del self.rules[name]
                self.chunk //= 2
                self.pieces.clear()
                self.written = 0

    def counter(self, lo: int, hi: int | None) -> Any:
        key = (lo, hi)
        if key not in self.counters:
            self.counters[key] = compile_dfa(rep(UNIT, lo, hi))
        return self.counters[key]

    def piece(self, state: int, targets: tuple[int, ...], lo: int, hi: int | None) -> Any:
        """The DFA of the bodies of ``lo..hi`` characters taking ``D`` from ``state`` into ``targets`` (None: none)."""
        key = (state, targets, lo, hi)
        if key not in self.pieces:
            node = _from_state(self.dfa, state, set(targets))
            if not node.accepting:
                self.pieces[key] = None
            else:
                try:
                    moved = compile_dfa(automaton_text(node))
                except EmptyLanguageError:
                    self.pieces[key] = None
                else:
                    self.pieces[key] = intersection(moved, self.counter(lo, hi), max_states=MAX_DFA_STATES)
        return self.pieces[key]

    def rule(self, name: str, body: str) -> str:
        if name not in self.rules:
            self.written += 1
            if self.written > _MAX_RULES:
                raise GrammarTooLargeError("rules", _MAX_RULES, "a counted string lexeme needs more rules")
            self.rules[name] = body
        return call(name)

    def below(self, state: int, lo: int, hi: int | None) -> str | None:
        """A call of the bodies of ``lo..hi`` characters from ``state`` to acceptance, and the quote (None: none)."""
        name = f"{self.prefix}.b{state}.{lo}.{hi}"
        if name in self.rules:
            return call(name)
        dfa = self.piece(state, tuple(sorted(self.accepting)), lo, hi)
        if dfa is None:
            return None
        return self.rule(name, automaton_text(automaton(dfa)) + '"')

    def chunk_to(self, state: int, target: int) -> str | None:
        """A call of exactly one chunk of characters taking ``D`` from ``state`` to ``target`` (None: none)."""
        name = f"{self.prefix}.c{state}.{target}"
        if name in self.rules:
            return call(name)
        dfa = self.piece(state, (target,), self.chunk, self.chunk)
        if dfa is None:
            return None
        return self.rule(name, automaton_text(automaton(dfa)))

    def level(self, state: int, lo: int, hi: int | None) -> str | None:
        """A call of ``R(state, lo, hi)`` (None: it matches nothing), built bottom-up over the levels (no recursion:
        a bound of a million characters is thousands of levels) for the states a chunk can reach there."""
        chunk = self.chunk
        bounds: list[tuple[int, int | None]] = []
        while (hi is not None and hi >= chunk) or (hi is None and lo >= chunk):
            bounds.append((lo, hi))
            lo, hi = max(lo - chunk, 0), None if hi is None else hi - chunk
            if len(bounds) > _MAX_RULES:
                raise GrammarTooLargeError("rules", _MAX_RULES, "a counted string lexeme needs more levels")
        links = np.eye(self.steps.shape[0], dtype=bool)  # which states one chunk connects: steps ** chunk
        power, base = chunk, self.steps.astype(np.int64)
        while power:
            if power & 1:
                links = (links.astype(np.int64) @ base) > 0
            base = ((base @ base) > 0).astype(np.int64)
            power >>= 1
        reach = [{state}]
        for _ in bounds:
            reach.append({t for q in reach[-1] for t in np.flatnonzero(links[q]).tolist()
                          if self.chunk_to(q, t) is not None})
        calls = {q: self.below(q, lo, hi) for q in reach[-1]}
        for depth in range(len(bounds) - 1, -1, -1):
            lo, hi = bounds[depth]
            above: dict[int, str | None] = {}
            for q in reach[depth]:
                alternatives: list[str] = []
                tail = self.below(q, lo, chunk - 1) if lo < chunk else None
                if tail is not None:
                    alternatives.append(tail)
                for target in np.flatnonzero(links[q]).tolist():
                    rest = calls.get(target)
                    step = None if rest is None else self.chunk_to(q, target)
                    if step is not None and rest is not None:
                        alternatives.append(step + rest)
                above[q] = self.rule(f"{self.prefix}.r{q}.{lo}.{hi}", "|".join(alternatives)) if alternatives else None
            calls = above
        return calls[state]
