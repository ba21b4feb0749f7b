"""AST → preorder program: the flattened form of a dialect AST that the native NFA builder reads.

Owns `Program` (``Program.build``: the Python front end of `constrained.automata.dfa.compile_dfa`, used for every
pattern the native parser ``constrained._pattern`` declines, every syntax error included, and the specification
that parser is tested against), the opcodes of the program, the NFA-state budget checked on it before anything is
built, and the templates a charset or an embedded automaton is instantiated from (`charset_template`,
`automaton_template`: the states and byte edges of their Thompson fragments).

Imports only `constrained.dialect` and `constrained.errors`.
"""

from __future__ import annotations

import array
import functools
from dataclasses import dataclass

from constrained.dialect.nodes import (
    Alternation,
    Automaton,
    CharSet,
    Concat,
    Empty,
    Node,
    Repeat,
    Special,
    utf8_sequences,
)
from constrained.errors import GrammarTooLargeError

__all__ = [
    "MAX_NFA_STATES",
    "OP_EMPTY",
    "OP_CHARSET",
    "OP_SPECIAL",
    "OP_CONCAT",
    "OP_ALT",
    "OP_REPEAT",
    "OP_BYTE",
    "Program",
    "charset_template",
    "automaton_template",
]

MAX_NFA_STATES = 250_000
"""Budget on NFA states (bounded repetitions expand into copies; checked before anything is built)."""


OP_EMPTY, OP_CHARSET, OP_SPECIAL, OP_CONCAT, OP_ALT, OP_REPEAT, OP_BYTE = range(7)
"""Opcodes of the preorder program `constrained._fsm.compile` reads (see _fsm.c)."""


@dataclass(frozen=True, kw_only=True)
class Program:
    """The AST flattened for the native builder: a preorder program whose NFA (built in _fsm.c) is the Thompson NFA
    of the AST, charsets and automata instantiated from their templates."""

    code: array.array
    """int32 preorder program: opcode, operands, then the children."""
    templates: array.array
    """int32 charset templates, concatenated (see `charset_template`)."""
    offsets: array.array
    """int32 start of each template in ``templates``."""
    names: tuple[str, ...]
    """Special-token names in order of first appearance (as `constrained.dialect.nodes.special_names`)."""
    size: int
    """Upper estimate of the AST's NFA states (the NFA budget is checked on it before anything is built)."""

    @classmethod
    def build(cls, ast: Node) -> Program:
        code = array.array("i")
        templates: list[int] = []
        offsets: list[int] = []
        template_of: dict[tuple[tuple[int, int], ...], tuple[int, int]] = {}
        automaton_of: dict[Automaton, tuple[int, int]] = {}
        symbol_of: dict[str, int] = {}
        emitted: dict[int, tuple[int, int, int]] = {}
        """id of each composite node emitted so far → (start, end) of its code and its size. A node object met
        again (the parser shares the nodes of identical groups) is copied verbatim: its templates and special
        symbols already have their numbers, so emitting it again would append exactly the same code."""

        def emit(node: Node) -> int:  # returns the node's estimated NFA size (`size`)
            if isinstance(node, CharSet):
                ranges = node.ranges
                if len(ranges) == 1:
                    lo, hi = ranges[0]
                    if lo == hi and lo < 0x80:
                        code.append(OP_BYTE)
                        code.append(lo)
                        return 3
                found = template_of.get(ranges)
                if found is None:
                    size, flat = charset_template(ranges)
                    found = template_of[ranges] = (len(offsets), size)
                    offsets.append(len(templates))
                    templates.extend(flat)
                code.append(OP_CHARSET)
                code.append(found[0])
                return found[1]
            if isinstance(node, (Concat, Alternation, Repeat)):
                seen = emitted.get(id(node))
                if seen is not None:
                    code.extend(code[seen[0] : seen[1]])
                    return seen[2]
                start = len(code)
                if isinstance(node, Repeat):
                    code.append(OP_REPEAT)
                    # a count beyond int32 implies a size far over the budget, which build refuses below
                    code.append(min(node.min, _INT32_MAX))
                    code.append(-1 if node.max is None else min(node.max, _INT32_MAX))
                    copies = node.max if node.max is not None else node.min
                    size = 3 + emit(node.item) * max(copies, 1)
                else:
                    code.append(OP_CONCAT if isinstance(node, Concat) else OP_ALT)
                    code.append(len(node.items))
                    size = 2
                    for item in node.items:
                        size += emit(item)
                emitted[id(node)] = (start, len(code), size)
                return size
            if isinstance(node, Automaton):
                found = automaton_of.get(node)
                if found is None:
                    size, flat = automaton_template(node)
                    found = automaton_of[node] = (len(offsets), size)
                    offsets.append(len(templates))
                    templates.extend(flat)
                if 0 in node.accepting:  # the empty string too: Alternation((Empty(), automaton))
                    code.extend((OP_ALT, 2, OP_EMPTY, OP_CHARSET, found[0]))
                    return found[1] + 4
                code.append(OP_CHARSET)
                code.append(found[0])
                return found[1]
            if isinstance(node, Special):
                symbol = symbol_of.get(node.name)
                if symbol is None:
                    symbol = symbol_of[node.name] = 256 + len(symbol_of)
                code.append(OP_SPECIAL)
                code.append(symbol)
                return 2
            assert isinstance(node, Empty)
            code.append(OP_EMPTY)
            return 2

        size = emit(ast)
        if size > MAX_NFA_STATES:
            raise GrammarTooLargeError("nfa_states", MAX_NFA_STATES, f"the pattern expands to ~{size} NFA states")
        return cls(code=code, templates=array.array("i", templates), offsets=array.array("i", offsets),
                   names=tuple(symbol_of), size=size)


_INT32_MAX = 2**31 - 1


@functools.lru_cache(maxsize=4096)
def charset_template(ranges: tuple[tuple[int, int], ...]) -> tuple[int, tuple[int, ...]]:
    """(estimated size, template) of a charset: the states and edges a Thompson NFA adds for it, with local ids
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
def automaton_template(node: Automaton) -> tuple[int, tuple[int, ...]]:
    """(estimated size, template) of an automaton, in the `charset_template` format.

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
