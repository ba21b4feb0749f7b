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

from constrained.automata.dfa import MAX_DFA_STATES, compile_dfa
from constrained.automata.operations import automaton, intersection
from constrained.dialect.json_lexemes import UNIT
from constrained.dialect.nodes import Automaton
from constrained.dialect.parser import automaton_text
from constrained.dialect.writer import rep
from constrained.errors import EmptyLanguageError, GrammarTooLargeError
from constrained.rules import call

__all__ = ["CHUNK_CHARS", "MIN_CHUNK_CHARS", "CountedLexeme"]

CHUNK_CHARS = 256
"""Characters per chunk rule to start with (halved while a chunk's product automaton is over its budget)."""
MIN_CHUNK_CHARS = 16
"""The smallest chunk tried before the construction is refused."""
_MAX_RULES = 20_000
"""Budget on the rules one counted lexeme writes (levels × live states)."""


def _from_state(dfa: Any, start: int, accepting: set[int]) -> Automaton:
    """``dfa`` started at ``start`` with its accepting states replaced: the reachable part, renumbered (start 0)."""
    table = dfa.transitions[:, :256].tolist()
    order, index = [start], {start: 0}
    for state in order:
        for target in table[state]:
            if target >= 0 and target not in index:
                index[target] = len(order)
                order.append(target)
    edges: list[tuple[int, int, int, int]] = []
    for new, state in enumerate(order):
        row = table[state]
        byte = 0
        while byte < 256:
            target = row[byte]
            end = byte
            while end + 1 < 256 and row[end + 1] == target:
                end += 1
            if target >= 0:
                edges.append((new, byte, end, index[target]))
            byte = end + 1
    return Automaton(n_states=len(order), accepting=tuple(sorted(index[s] for s in accepting if s in index)),
                     edges=tuple(edges))


class CountedLexeme:
    """The rules of one body DFA under one length range (see the module docstring); `entry` is the call that the
    string value's pattern puts after its opening quote."""

    def __init__(self, dfa: Any, rules: dict[str, str], prefix: str, lo: int, hi: int | None) -> None:
        self.dfa = dfa
        self.rules = rules
        self.prefix = prefix
        self.accepting = {int(s) for s in dfa.accepting.nonzero()[0]}
        self.memo: dict[tuple[int, int, int | None], str | None] = {}
        self.pieces: dict[tuple[int, tuple[int, ...], int, int | None], Any] = {}
        self.counters: dict[tuple[int, int | None], Any] = {}
        self.written = 0
        self.chunk = CHUNK_CHARS
        while True:
            try:
                self.entry = self.level(0, lo, hi)
                return
            except GrammarTooLargeError:
                if self.chunk // 2 < MIN_CHUNK_CHARS:
                    raise
                for name in [n for n in self.rules if n.startswith(prefix + ".")]:
                    del self.rules[name]
                self.chunk //= 2
                self.memo.clear()
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
        """A call of ``R(state, lo, hi)`` (None: it matches nothing)."""
        key = (state, lo, hi)
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = None  # a level only calls lower ones: no cycle reads this
        chunk = self.chunk
        if (hi is not None and hi < chunk) or (hi is None and lo < chunk):
            result = self.below(state, lo, hi)
        else:
            alternatives: list[str] = []
            if lo < chunk:
                tail = self.below(state, lo, chunk - 1)
                if tail is not None:
                    alternatives.append(tail)
            rest_lo, rest_hi = max(lo - chunk, 0), None if hi is None else hi - chunk
            for target in range(self.dfa.n_states):
                step = self.chunk_to(state, target)
                if step is None:
                    continue
                rest = self.level(target, rest_lo, rest_hi)
                if rest is not None:
                    alternatives.append(step + rest)
            result = None if not alternatives else self.rule(
                f"{self.prefix}.r{state}.{lo}.{hi}", "|".join(alternatives))
        self.memo[key] = result
        return result
