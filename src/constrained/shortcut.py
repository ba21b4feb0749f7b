"""String-body shortcut: the first mask of a string-like state without walking the whole trie.

A state inside an unbounded JSON string allows almost every token (~123k of Llama-3's 128k), so the plain trie walk
visits nearly every node (~2-3 ms) — the slowest mask a grammar computes, paid once per string-valued slot, and again
for every key string of an object that admits extra keys. But such states behave alike on string-body bytes: the JSON
string-body automaton (the schema compiler's ``UNIT*``) *embeds* at them (`_kernel.template_map` checks it exactly:
every body transition maps onto the DFA's). So, once per vocabulary, we walk the trie through that small automaton
and keep

- the **pure** tokens (every byte stays inside the string body) as a bitmask, with the body state each ends in, and
- the **exits**: trie nodes where the body automaton dies (a closing quote, a control byte, a stray byte).

A string with a ``maxLength`` has one state per characters left, and none of them embeds the unbounded body. For
those, the walk keeps each pure token's character count too: with m characters left, the *counted* body (at most m
characters, `counted_template`) embeds at the state, its pure tokens are the pure tokens that fit in m, and its exits
the exits reached within m (`counted_plan`: exact, or refused where the DFA goes on past its count).

To mask a state s, `plan` picks a template that embeds at a state t — the body at s itself, the counted body at s, or
(for a key that may not start a known name) the body at the state s moves to on most bytes — and
`_kernel.walk_template` walks the trie *jointly* from (s, template start):
wherever s's path meets the template's image it is synchronized for the whole subtree, so the pure bits stand and
only the exits below are walked; elsewhere tokens are decided the plain way. The result is exactly the plain walk's
(tested state by state), as a bitmask plus the few hundred tokens that are not pure; the sorted id arrays are only
built if someone asks (`index.StateMask.from_bits`). Measured on the MaskBench corpus: a string state's first mask
in ~35 µs of kernel time instead of ~2 ms.

    vocabulary trie ──(once)──► StringBodyShortcut(pure bits + body states + characters, exits + the same)
    DFA state s ──plan──► Plan (a template embedded at t) | None ──► _kernel.walk_template | _kernel.walk
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
    from constrained.fsm import DFA, ClassTable
    from constrained.trie import TokenTrie

__all__ = ["NOT_PURE", "Plan", "PlanMemo", "StringBodyShortcut", "TokenGroups", "counted_template", "string_body_shortcut"]

NOT_PURE = 255
"""`StringBodyShortcut.pure_body_state` of a token that leaves the string body."""

_MIN_PURE_SHARE = 0.5
"""Use the shortcut only for vocabularies where most tokens are pure (any real BPE vocabulary): it wins by
skipping the pure tokens' nodes, so with few of them the exits' subtrees would be most of the trie anyway."""


_NEVER = np.iinfo(np.int32).max
"""`StringBodyShortcut.pure_need` / `pure_counted_state` of a token that leaves the string body."""
_EACH_BYTE = np.arange(256, dtype=np.int32)
"""The class map of a table by byte: each byte its own column (how the walk kernel reads such a table)."""

_UNIT_BYTE = ord("a")
"""A one-byte character of the string body: followed from a state, it counts the characters left there."""


@functools.cache
def _body_dfa() -> DFA:
    from constrained.fsm import compile_dfa
    from constrained.dialect.json_lexemes import UNIT

    return compile_dfa(f"{UNIT}*")


def counted_template(m: int) -> np.ndarray:
    """The string body with at most ``m`` characters, as a byte DFA (start 0): state ``k * n + b`` has completed
    k characters and is in body state b (n body states); ``m * n``, the last, has used them all. The first rows
    of one table for the longest count asked so far (the kernels read a target past the last row as dead): 256
    levels, or the next power of two that holds ``m``."""
    return _counted_table(1 << max(m, 255).bit_length())[: m * _body_dfa().n_states + 1]


@functools.lru_cache(maxsize=4)
def _counted_table(m: int) -> np.ndarray:
    body = _body_dfa().transitions
    n = body.shape[0]
    table = np.full((m * n + 1, 256), -1, dtype=np.int32)
    levels = table[: m * n].reshape(m, n, 256)
    np.add(np.where(body == 0, n, body)[None], (np.arange(m, dtype=np.int32) * n)[:, None, None], out=levels)
    levels[:, body < 0] = -1
    table.flags.writeable = False
    return table


@dataclass(frozen=True, eq=False)
class TokenGroups:
    """Pure tokens grouped by the template state they end in: what a budget cut drops, state by state, without a
    pass over the vocabulary (`index.StateMask.restricted`)."""

    ids: np.ndarray
    """int32: token ids, grouped by state (ascending within a group)."""
    offsets: np.ndarray
    """int64 [states + 1]: group s is ``ids[offsets[s]:offsets[s + 1]]``."""

    @classmethod
    def of(cls, states: np.ndarray, n_states: int) -> TokenGroups:
        """The tokens whose ``states`` entry (one per token id) is below ``n_states`` (< 65536), by that state."""
        if n_states >= 1 << 16:
            raise ValueError(f"TokenGroups: {n_states} states do not fit the 16-bit sort keys")
        ids = np.flatnonzero(states < n_states)
        keys = states[ids].astype(np.uint16)
        order = np.argsort(keys, kind="stable")  # a radix sort on 16-bit keys
        offsets = np.zeros(n_states + 1, dtype=np.int64)
        np.cumsum(np.bincount(keys, minlength=n_states), out=offsets[1:])
        groups = cls(ids[order].astype(np.int32), offsets)
        groups.ids.flags.writeable = groups.offsets.flags.writeable = False
        return groups

    def size(self, states: np.ndarray) -> int:
        """How many tokens end in ``states`` (distinct, each below the groups' count)."""
        return int((self.offsets[states + 1] - self.offsets[states]).sum())

    def ids_in(self, states: np.ndarray) -> np.ndarray:
        """The tokens that end in ``states`` (distinct, each below the groups' count), grouped by state."""
        chosen = np.zeros(self.offsets.shape[0] - 1, dtype=bool)
        chosen[states] = True
        return self.ids[np.repeat(chosen, np.diff(self.offsets))]


@dataclass(frozen=True, kw_only=True, eq=False)
class Plan:
    """How `StringBodyShortcut.walk` masks one state: a template automaton (start 0) that embeds at some state,
    with the template's view of the trie (its pure tokens and its exits)."""

    template: np.ndarray
    """int32 [template states, 256]: the unbounded string body, or a counted one (`counted_template`)."""
    embedding: np.ndarray
    """int32 [template states]: template state → DFA state."""
    pure_bits: np.ndarray
    """uint32 [ceil(V / 32)]: the tokens whose bytes all stay inside the template."""
    pure_state: np.ndarray
    """[V]: the template state each of them ends in (at least the template's size for the others)."""
    pure_groups: TokenGroups
    """The tokens of ``pure_state`` grouped by it."""
    exits: np.ndarray
    """int32: which of the shortcut's exits (indices into its ``exit_nodes``) the template reaches."""
    exit_nodes: np.ndarray
    """int32: those exit nodes."""
    exit_state: np.ndarray
    """int32 aligned with ``exit_nodes``: the template state before each."""


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
    exit_first_byte: np.ndarray
    """uint8 aligned with ``exit_nodes``: the first byte of the prefix (its depth-1 ancestor's byte)."""
    subtree_nodes: np.ndarray
    """int64 [256]: trie nodes under each first byte (what a first byte where s and t disagree may cost)."""
    exit_units: np.ndarray
    """int32 aligned with ``exit_nodes``: characters completed before that exit."""
    pure_need: np.ndarray
    """int32 [V]: characters a pure token needs left (a started character counts); `_NEVER` for the others."""
    pure_counted_state: np.ndarray
    """int32 [V]: the counted template state a pure token ends in (`counted_template`); `_NEVER` for the others."""
    body_groups: TokenGroups
    """The pure tokens by the body state they end in."""
    counted_groups: TokenGroups
    """The pure tokens by the counted template state they end in."""
    max_depth: int
    """The trie's longest token, in bytes: a counted body longer than this many characters looks unbounded to
    every token."""

    @classmethod
    def build(cls, trie: TokenTrie) -> StringBodyShortcut:
        body = _body_dfa()
        table = np.ascontiguousarray(body.transitions, dtype=np.int32)
        if table.shape[1] != 256 or body.initial != 0 or table.shape[0] >= NOT_PURE:
            raise AssertionError("the string-body automaton must be a small byte DFA starting at state 0")
        _kernel.check(*body.table)
        n_body = table.shape[0]
        counted = counted_template(trie.max_depth + 1)  # deep enough never to run out within a token
        ids = np.empty(trie.n_tokens, dtype=np.int32)
        ends = np.empty(trie.n_tokens, dtype=np.int32)
        scratch = np.full(trie.vocab_size, -1, dtype=np.int32)
        count = _kernel.walk(counted, _EACH_BYTE, 0, trie.native, ids, ends, scratch)
        units, body_state = ends[:count] // n_body, ends[:count] % n_body
        pure_body_state = np.full(trie.vocab_size, NOT_PURE, dtype=np.uint8)
        pure_body_state[ids[:count]] = body_state
        pure_need = np.full(trie.vocab_size, _NEVER, dtype=np.int32)
        pure_need[ids[:count]] = units + (body_state != 0)
        pure_counted_state = np.full(trie.vocab_size, _NEVER, dtype=np.int32)
        pure_counted_state[ids[:count]] = ends[:count]
        n_words = (trie.vocab_size + 31) // 32
        pure = np.zeros(n_words * 32, dtype=np.uint8)
        pure[ids[:count]] = 1
        pure_bits = np.packbits(pure, bitorder="little").view(np.uint32).copy()
        nodes = np.empty(trie.n_nodes, dtype=np.int32)
        states = np.empty(trie.n_nodes, dtype=np.int32)
        n_exits = _kernel.walk_exits(counted, 256, 0, trie.native, nodes, states)
        depth_one = np.flatnonzero(trie.node_depth == 1)
        ancestor = depth_one[np.searchsorted(depth_one, nodes[:n_exits], side="right") - 1]
        subtree_nodes = np.zeros(256, dtype=np.int64)
        subtree_nodes[trie.node_byte[depth_one]] = trie.node_end[depth_one] - depth_one
        shortcut = cls(
            body_transitions=table, pure_bits=pure_bits, pure_body_state=pure_body_state,
            exit_nodes=nodes[:n_exits].copy(), exit_body_state=states[:n_exits] % n_body,
            exit_first_byte=trie.node_byte[ancestor],
            subtree_nodes=subtree_nodes, exit_units=states[:n_exits] // n_body, pure_need=pure_need,
            pure_counted_state=pure_counted_state, body_groups=TokenGroups.of(pure_body_state, n_body),
            counted_groups=TokenGroups.of(pure_counted_state, counted.shape[0]), max_depth=int(trie.max_depth),
        )  # fmt: skip
        for value in vars(shortcut).values():
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
        return shortcut

    @property
    def n_pure(self) -> int:
        return int(np.count_nonzero(self.pure_body_state != NOT_PURE))

    def embedding(self, table: ClassTable, state: int) -> np.ndarray | None:
        """The map body state → DFA state if the string body embeds at ``state`` (body state 0 ↦ ``state``)."""
        out = np.empty(self.body_transitions.shape[0], dtype=np.int32)
        if _kernel.template_map(*table, state, self.body_transitions, 256, 0, out):
            return out
        return None

    def plan(self, table: ClassTable, state: int, n_nodes: int,
             memo: dict[int, Plan | _Counted | None] | None = None) -> Plan | None:  # fmt: skip
        """How to walk ``state`` (a template embedded at some state t), or None when the plain walk is as cheap.

        The unbounded string body at t = ``state``; else a counted body (a string with a ``maxLength``: at most
        m more characters, `counted_plan`); else the unbounded body at the state ``state`` moves to on most
        printable bytes (a key string that must not start a known name moves to the free string body on every
        other byte). The joint walk is exact whichever t is chosen — it only skips subtrees where ``state``'s path
        and the template's agree — but it is refused when the first bytes where they disagree lead to most of
        the trie. ``memo``: the plans of one table so far (a counted plan also proves those of the states its
        characters lead to), kept by the caller.
        """
        if memo is None:
            return self._plan(table, state, n_nodes, {})
        if state not in memo:
            plan = memo[state] = self._plan(table, state, n_nodes, memo)
            return plan
        known = memo[state]
        if isinstance(known, _Counted):
            known = memo[state] = self._counted(known.m, known.embedding)
        return known

    def _plan(self, table: ClassTable, state: int, n_nodes: int,
              memo: dict[int, Plan | _Counted | None]) -> Plan | None:  # fmt: skip
        row = table.row(state)
        printable = row[0x20:0x7F]
        live = printable[printable >= 0]
        if live.shape[0] * 2 < printable.shape[0]:  # no string-like state: most printable bytes are dead here
            return None  # (nor can the body embed: it takes every printable byte but the quote)
        embedding = self.embedding(table, state)
        if embedding is not None:
            return self._unbounded(embedding)
        counted = self.counted_plan(table, state, memo)
        if counted is not None:
            return counted
        target = int(np.bincount(live).argmax())
        embedding = self.embedding(table, target)
        if embedding is None:
            return None
        disagree = row != table.row(target)
        if int(self.subtree_nodes[disagree].sum()) * 2 > n_nodes:
            return None
        return self._unbounded(embedding)

    def _unbounded(self, embedding: np.ndarray) -> Plan:
        return Plan(template=self.body_transitions, embedding=embedding, pure_bits=self.pure_bits,
                    pure_state=self.pure_body_state, pure_groups=self.body_groups, exits=_every_exit(self),
                    exit_nodes=self.exit_nodes, exit_state=self.exit_body_state)  # fmt: skip

    def counted_plan(self, table: ClassTable, state: int,
                     memo: dict[int, Plan | _Counted | None] | None = None) -> Plan | None:  # fmt: skip
        """The plan for a state inside a string with at most m more characters, or None.

        m is counted along one-byte characters, followed up to twice the cap (the longest token plus one, which
        no token can tell from more); the counted body (`counted_template`) must embed at ``state``, and where the
        string ends within the characters followed, the DFA must end where the template does: no character after
        the m-th. Then the template's pure tokens are those that need at most min(m, cap) characters, and its exits
        the shortcut's exits reached within that. The one embedding also holds the k-th next state's (the
        template's rows from level k on), put in ``memo``: the states of a long string are planned once per cap
        characters, not each on its own."""
        cap = self.max_depth + 1
        reach = 2 * cap
        chain, seen = [state], {state}
        while len(chain) <= reach and (current := table.at(chain[-1], _UNIT_BYTE)) >= 0:
            if current in seen:
                return None  # the characters loop: no count (an unbounded body, embedded here or one byte on)
            chain.append(current)
            seen.add(current)
        m = len(chain) - 1
        if m == 0:
            return None
        ended = m < reach  # else the characters may go on: every state followed has at least the cap left
        embedding = self._counted_embedding(table, state, m, ended)
        if embedding is None:
            if m <= cap:
                return None
            m, embedding = cap, self._counted_embedding(table, state, cap, ended=False)  # as if unending
            if embedding is None:
                return None
        elif memo is not None:
            n_body = self.body_transitions.shape[0]
            last = m - 1 if ended else m - cap  # the last state along the chain whose plan the embedding proves
            for k in range(1, last + 1):
                left = min(m - k, cap)
                memo.setdefault(chain[k], _Counted(left, embedding[k * n_body:(k + left) * n_body + 1]))
        left = min(m, cap)
        return self._counted(left, embedding[: left * self.body_transitions.shape[0] + 1])

    def _counted_embedding(self, table: ClassTable, state: int, m: int, ended: bool) -> np.ndarray | None:
        """The counted body with m characters embedded at ``state`` (None: it does not embed); when the string
        ``ended`` after m characters, also no character may follow the m-th."""
        template = counted_template(m)
        embedding = np.empty(template.shape[0], dtype=np.int32)
        if not _kernel.template_map(*table, state, template, 256, 0, embedding):
            return None
        if ended and (table.row(int(embedding[-1]))[self.body_transitions[0] >= 0] >= 0).any():
            return None  # the DFA goes on where the template has used its m characters
        return embedding

    def _counted(self, m: int, embedding: np.ndarray) -> Plan:
        pure_bits, exits, exit_nodes, exit_state = _counted_view(self, m)
        return Plan(template=counted_template(m), embedding=embedding, pure_bits=pure_bits,
                    pure_state=self.pure_counted_state, pure_groups=self.counted_groups, exits=exits,
                    exit_nodes=exit_nodes, exit_state=exit_state)  # fmt: skip

    def walk(
        self, table: ClassTable, state: int, plan: Plan, trie: TokenTrie,
        out_ids: np.ndarray, out_next: np.ndarray, scratch: np.ndarray,
    ) -> tuple[np.ndarray, int, int]:  # fmt: skip
        """``state``'s allowed tokens, walked with ``plan`` (from `plan`): (bitmask of them all, how many of them
        are not pure — their ids ascending and next states written to ``out_ids`` / ``out_next`` — and how many
        there are in all). ``scratch``: int32 [vocab size], all -1 (restored)."""
        bits = np.empty_like(plan.pure_bits)
        n_found, count = _kernel.walk_template(
            *table, state, plan.template, plan.embedding, plan.pure_bits,
            plan.exit_nodes, plan.exit_state, trie.native, bits, out_ids, out_next, scratch,
        )  # fmt: skip
        return bits, n_found, count


@functools.lru_cache(maxsize=8)
def _every_exit(shortcut: StringBodyShortcut) -> np.ndarray:
    exits = np.arange(shortcut.exit_nodes.shape[0], dtype=np.int32)
    exits.flags.writeable = False
    return exits


@functools.lru_cache(maxsize=1024)
def _counted_view(shortcut: StringBodyShortcut, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(pure bits, exits, their nodes, their template states) of the body with at most m characters left: the
    same for every such state."""
    n_words = shortcut.pure_bits.shape[0]
    fits = np.zeros(n_words * 32, dtype=np.uint8)
    fits[: shortcut.pure_need.shape[0]] = shortcut.pure_need <= m
    bits = np.packbits(fits, bitorder="little").view(np.uint32).copy()
    exits = np.flatnonzero(shortcut.exit_units + (shortcut.exit_body_state != 0) <= m).astype(np.int32)
    n_body = shortcut.body_transitions.shape[0]
    view = (bits, exits, shortcut.exit_nodes[exits],
            (shortcut.exit_units[exits] * n_body + shortcut.exit_body_state[exits]).astype(np.int32))
    for array in view:
        array.flags.writeable = False
    return view


@dataclass(frozen=True, eq=False)
class _Counted:
    """A counted plan proven by a state before it (`counted_plan`), built when first asked for."""

    m: int
    embedding: np.ndarray


PlanMemo = dict[int, "Plan | _Counted | None"]
"""The plans of one table so far, by state (`StringBodyShortcut.plan`'s ``memo``, kept by its caller)."""


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
