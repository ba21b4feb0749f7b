"""String-body shortcut: the first mask of a string-like state without walking the whole trie.

A state inside an unbounded JSON string allows almost every token (~123k of Llama-3's 128k), so the plain trie walk
visits nearly every node (~2-3 ms) — the slowest mask a grammar computes, paid once per string-valued slot, and again
for every key string of an object that admits extra keys. But such states behave alike on string-body bytes: the JSON
string-body automaton (the schema compiler's ``UNIT*``) *embeds* at them (`_kernel.template_map` checks it exactly:
every body transition maps onto the DFA's). So, once per vocabulary, we walk the trie through that small automaton
and keep

- the **pure** tokens (every byte stays inside the string body) as a bitmask, with the body state each ends in, and
- the **exits**: trie nodes where the body automaton dies (a closing quote, a control byte, a stray byte).

To mask a state s, `plan` picks a state t where the body embeds — s itself, or (for a key that may not start a known
name) the state s moves to on most bytes — and `_kernel.walk_template` walks the trie *jointly* from (s, body start):
wherever s's path meets the template's image it is synchronized for the whole subtree, so the pure bits stand and
only the exits below are walked; elsewhere tokens are decided the plain way. The result is exactly the plain walk's
(tested state by state), as a bitmask plus the few hundred tokens that are not pure; the sorted id arrays are only
built if someone asks (`index.StateMask.from_bits`). Measured on the MaskBench corpus: a string state's first mask
in ~35 µs of kernel time instead of ~2 ms.

    vocabulary trie ──(once)──► StringBodyShortcut(pure bits + body states, exit nodes + body states)
    DFA state s ──plan──► embedding at t, or None ──► _kernel.walk_template(...) | _kernel.walk(...)
"""

from __future__ import annotations

import functools
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from constrained import _kernel

if TYPE_CHECKING:
    from constrained.fsm import DFA
    from constrained.index import TokenTrie

__all__ = ["NOT_PURE", "StringBodyShortcut", "string_body_shortcut"]

NOT_PURE = 255
"""`StringBodyShortcut.pure_body_state` of a token that leaves the string body."""

_MIN_PURE_SHARE = 0.5
"""Use the shortcut only for vocabularies where most tokens are pure (any real BPE vocabulary): it wins by
skipping the pure tokens' nodes, so with few of them the exits' subtrees would be most of the trie anyway."""


@functools.cache
def _body_dfa() -> DFA:
    from constrained.fsm import compile_dfa
    from constrained.schema import UNIT

    return compile_dfa(f"{UNIT}*")


@dataclass(frozen=True, kw_only=True, eq=False)
class StringBodyShortcut:
    """The JSON string-body automaton's view of one vocabulary trie (see the module docstring)."""

    body_transitions: np.ndarray
    """int32 [body states, 256]: the string-body DFA (state 0 = inside the string, between characters)."""
    pure_bits: np.ndarray
    """uint32 [ceil(V / 32)]: bit i set for every pure token i (all its bytes stay inside the string body)."""
    pure_body_state: np.ndarray
    """uint8 [V]: the body state a pure token ends in (`NOT_PURE` for the others)."""
    exit_nodes: np.ndarray
    """int32: trie nodes whose byte the body automaton refuses after an in-body prefix."""
    exit_body_state: np.ndarray
    """int32 aligned with ``exit_nodes``: the body state after that prefix."""
    subtree_nodes: np.ndarray
    """int64 [256]: trie nodes under each first byte (what a first byte where s and t disagree may cost)."""

    @classmethod
    def build(cls, trie: TokenTrie) -> StringBodyShortcut:
        body = _body_dfa()
        table = np.ascontiguousarray(body.transitions, dtype=np.int32)
        if table.shape[1] != 256 or body.initial != 0 or table.shape[0] >= NOT_PURE:
            raise AssertionError("the string-body automaton must be a small byte DFA starting at state 0")
        _kernel.check(table, 256, trie.node_depth, trie.node_end, trie.tok_start, trie.tok_ids, trie.max_depth,
                      trie.vocab_size)  # fmt: skip
        ids = np.empty(trie.n_tokens, dtype=np.int32)
        ends = np.empty(trie.n_tokens, dtype=np.int32)
        scratch = np.full(trie.vocab_size, -1, dtype=np.int32)
        count = _kernel.walk(table, 256, 0, trie.node_byte, trie.node_depth, trie.node_end, trie.tok_start,
                             trie.tok_ids, trie.max_depth, ids, ends, scratch)  # fmt: skip
        pure_body_state = np.full(trie.vocab_size, NOT_PURE, dtype=np.uint8)
        pure_body_state[ids[:count]] = ends[:count]
        n_words = (trie.vocab_size + 31) // 32
        pure = np.zeros(n_words * 32, dtype=np.uint8)
        pure[ids[:count]] = 1
        pure_bits = np.packbits(pure, bitorder="little").view(np.uint32).copy()
        nodes = np.empty(trie.n_nodes, dtype=np.int32)
        states = np.empty(trie.n_nodes, dtype=np.int32)
        n_exits = _kernel.walk_exits(table, 256, 0, trie.node_byte, trie.node_depth, trie.node_end, trie.max_depth,
                                     nodes, states)  # fmt: skip
        depth_one = np.flatnonzero(trie.node_depth == 1)
        subtree_nodes = np.zeros(256, dtype=np.int64)
        subtree_nodes[trie.node_byte[depth_one]] = trie.node_end[depth_one] - depth_one
        shortcut = cls(
            body_transitions=table, pure_bits=pure_bits, pure_body_state=pure_body_state,
            exit_nodes=nodes[:n_exits].copy(), exit_body_state=states[:n_exits].copy(),
            subtree_nodes=subtree_nodes,
        )  # fmt: skip
        for array in vars(shortcut).values():
            array.flags.writeable = False
        return shortcut

    @property
    def n_pure(self) -> int:
        return int(np.count_nonzero(self.pure_body_state != NOT_PURE))

    def embedding(self, transitions: np.ndarray, state: int) -> np.ndarray | None:
        """The map body state → DFA state if the string body embeds at ``state`` (body state 0 ↦ ``state``)."""
        out = np.empty(self.body_transitions.shape[0], dtype=np.int32)
        width = int(transitions.shape[1])
        if _kernel.template_map(transitions, width, state, self.body_transitions, 256, 0, out):
            return out
        return None

    def plan(self, transitions: np.ndarray, state: int, n_nodes: int) -> np.ndarray | None:
        """The embedding to walk ``state`` with (body state → DFA state, at some state t), or None when the plain
        walk is as cheap.

        t is ``state`` itself when the body embeds there; otherwise the state it moves to on most printable bytes
        (a key string that must not start a known name moves to the free string body on every other byte). The
        joint walk is exact whichever t is chosen — it only skips subtrees where ``state``'s path and the
        template's agree — but it is refused when the first bytes where they disagree lead to most of the trie.
        """
        embedding = self.embedding(transitions, state)
        if embedding is not None:
            return embedding
        row = transitions[state, :256]
        printable = row[0x20:0x7F]
        live = printable[printable >= 0]
        if live.shape[0] * 2 < printable.shape[0]:  # no string-like state: most printable bytes are dead here
            return None
        target = int(np.bincount(live).argmax())
        embedding = self.embedding(transitions, target)
        if embedding is None:
            return None
        disagree = row != transitions[target, :256]
        if int(self.subtree_nodes[disagree].sum()) * 2 > n_nodes:
            return None
        return embedding

    def walk(
        self, transitions: np.ndarray, state: int, embedding: np.ndarray, trie: TokenTrie,
        out_ids: np.ndarray, out_next: np.ndarray, scratch: np.ndarray,
    ) -> tuple[np.ndarray, int, int]:  # fmt: skip
        """``state``'s allowed tokens, walked with ``embedding`` (from `plan`): (bitmask of them all, how many of
        them are not pure — their ids ascending and next states written to ``out_ids`` / ``out_next`` — and how
        many there are in all). ``scratch``: int32 [vocab size], all -1 (restored)."""
        bits = np.empty_like(self.pure_bits)
        n_found, count = _kernel.walk_template(
            transitions, int(transitions.shape[1]), state, self.body_transitions, embedding, self.pure_bits,
            self.exit_nodes, self.exit_body_state, trie.node_byte, trie.node_depth, trie.node_end, trie.tok_start,
            trie.tok_ids, trie.max_depth, trie.vocab_size, bits, out_ids, out_next, scratch,
        )  # fmt: skip
        return bits, n_found, count


_shortcuts: weakref.WeakKeyDictionary[TokenTrie, StringBodyShortcut | None] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def string_body_shortcut(trie: TokenTrie) -> StringBodyShortcut | None:
    """The trie's shortcut, built once per trie; None where it would not pay (few pure tokens)."""
    with _lock:
        if trie not in _shortcuts:
            shortcut = StringBodyShortcut.build(trie)
            worth_it = shortcut.n_pure >= _MIN_PURE_SHARE * trie.n_tokens
            _shortcuts[trie] = shortcut if worth_it else None
        return _shortcuts[trie]
