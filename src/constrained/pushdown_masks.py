"""The masks of a pushdown grammar's configurations, and the tables its walks read.

`PushdownGrammar` (module `pushdown`) computes, per configuration set, the tokens allowed next as parts (a mask and
the stack it leaves) and families (the members of an object in any order, walked together); `ConfigMask` joins
them, applies the token budget and answers where a token leads. `CallMoves` is the call table read per state.
Nothing here compiles rules: it knows masks, tries and stacks.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from constrained import _kernel
from constrained.index import NO_IDS, TERMINAL, StateMask
from constrained.trie import TokenTrie
from constrained.rules import Guard

Config = tuple[int, tuple[int, ...]]
"""(state, continuation states of the callers, innermost last)."""
DONE: frozenset[Config] = frozenset({(TERMINAL, ())})
"""The configuration set after EOS."""
CACHE_LIMIT = 65_536
"""Entries a per-grammar mask cache holds before it starts over (`bounded_put`)."""


class MaskSource(Protocol):
    """What a `ConfigMask` asks of its grammar: the trie, and the budget bounds of parts and stacks."""

    trie: TokenTrie

    def budget_cut(self, key: Any, mask: StateMask, limit: int) -> int | None: ...

    def restricted(self, key: Any, mask: StateMask, cut: int) -> StateMask: ...

    def stack_bound(self, stack: tuple[int, ...]) -> int: ...


FAMILY_CAPACITY = (16_384, 4_096)
"""Tokens and exits a family walk first makes room for (`PushdownGrammar._walk_family` grows them when short)."""


def family_buffers(capacity: int, exit_capacity: int) -> tuple[np.ndarray, ...]:
    """Outputs of kernel `walk_family`: members, ids and next states of its tokens; members, nodes and states of
    its exits."""
    return (*(np.empty(capacity, dtype=np.int32) for _ in range(3)),
            *(np.empty(exit_capacity, dtype=np.int32) for _ in range(3)))  # fmt: skip


class CallMoves(dict):
    """Call state → its unguarded moves as stack pushes, ``((callee's start, continuations pushed), ...)``; ``()``
    for a state that calls nothing. A continuation that can only return (a call in tail position: ``a (?&=b)``) is
    not pushed, so a chain of tail calls (optional members, counted characters) keeps its stack flat; its bound is
    0 and it would pop at once. Never the start rule's: its end is the document's.

    Filled per state on first lookup from the call moves sorted by state: a document visits few of a grammar's call
    states, and building every state's entry up front was a tenth of a cold compile and of a disk-cache load. The
    few guarded moves are built at once (``guarded``)."""

    def __init__(self, src: np.ndarray, callee: np.ndarray, cont: np.ndarray, tail: np.ndarray, guard: np.ndarray,
                 guard_kinds: Sequence[Guard]) -> None:
        super().__init__()
        order = np.argsort(src, kind="stable")  # a state's moves in the order its rule's table lists them
        self._src = src[order].tolist()
        self._callee, self._cont, self._tail = callee[order].tolist(), cont[order].tolist(), tail[order].tolist()
        self._guard: list[int] | None = None
        self.guarded: dict[int, tuple[tuple[int, tuple[int, ...], int, int], ...]] = {}
        """Call state → its guarded moves: (callee's start, continuations pushed, guard kind, marker bits)."""
        if guard_kinds:
            self._guard = guard[order].tolist()
            moves: dict[int, list] = {}
            for i in np.flatnonzero(guard[order] >= 0).tolist():
                push = () if self._tail[i] else (self._cont[i],)
                moves.setdefault(self._src[i], []).append((self._callee[i], push, *guard_kinds[self._guard[i]]))
            self.guarded = {state: tuple(found) for state, found in moves.items()}

    def calls(self, state: int) -> list[tuple[int, int]]:
        """The state's (callee's start, continuation) moves, tail calls and guarded ones too."""
        return [(self._callee[i], self._cont[i]) for i in self._span(state)]

    def __missing__(self, state: int) -> tuple[tuple[int, tuple[int, ...]], ...]:
        guard = self._guard
        moves = tuple((self._callee[i], () if self._tail[i] else (self._cont[i],))
                      for i in self._span(state) if guard is None or guard[i] < 0)  # fmt: skip
        self[state] = moves
        return moves

    def _span(self, state: int) -> range:
        """Where the state's moves sit in the moves sorted by state."""
        return range(bisect.bisect_left(self._src, state), bisect.bisect_right(self._src, state))


def split_markers(stack: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    """(the current activation's markers as bits, the stack under them): the top entry when it is a marker entry
    (see the module docstring), else no markers and the whole stack."""
    return (~stack[-1], stack[:-1]) if stack and stack[-1] < 0 else (0, stack)


@functools.lru_cache(maxsize=8)
def root_children(trie: TokenTrie) -> np.ndarray:
    """The depth-1 nodes of a trie, in preorder."""
    children = trie.root_child[trie.root_child >= 0]
    return np.ascontiguousarray(np.sort(children), dtype=np.int32)


_FEW_EXITS = 32
"""Up to this many exits, `exit_groups` loops in Python (cheaper than its numpy calls)."""


def exit_groups(nodes: np.ndarray, states: np.ndarray, node_end: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """The exits (trie nodes and the states there) as (state, roots) groups whose roots are ascending and whose
    subtrees are disjoint, so one walk finds each token below them at most once (an exit below another exit of
    the same state goes to a later group)."""
    if nodes.shape[0] == 1:
        return [(int(states[0]), np.ascontiguousarray(nodes, dtype=np.int32))]
    if nodes.shape[0] <= _FEW_EXITS:  # most states: a few exits, grouped in Python
        by_state: dict[int, list[int]] = {}
        for state, node in zip(states.tolist(), nodes.tolist()):
            by_state.setdefault(state, []).append(node)
        few = []
        for state, rest in by_state.items():
            rest.sort()
            while rest:
                kept, nested, reach = [], [], -1
                for node in rest:
                    if node < reach:
                        nested.append(node)
                    else:
                        kept.append(node)
                        reach = int(node_end[node])
                few.append((state, np.asarray(kept, dtype=np.int32)))
                rest = nested
        return few
    if (states == states[0]).all():  # every exit at one state (a string's end, say)
        runs = [(int(states[0]), np.sort(nodes))]
    else:
        order = np.lexsort((nodes, states))
        nodes, states = nodes[order], states[order]
        cuts = (np.flatnonzero(states[1:] != states[:-1]) + 1).tolist()
        runs = [(int(states[a]), nodes[a:b]) for a, b in zip([0, *cuts], [*cuts, nodes.shape[0]])]
    groups = []
    for state, run in runs:
        while run.shape[0]:
            reaches = np.maximum.accumulate(node_end[run])
            inside = np.zeros(run.shape[0], dtype=bool)
            inside[1:] = run[1:] < reaches[:-1]
            groups.append((state, np.ascontiguousarray(run[~inside], dtype=np.int32)))
            run = run[inside]
    return groups


@functools.lru_cache(maxsize=8)
def subtree_deepest(trie: TokenTrie) -> np.ndarray:
    """The greatest depth in each node's subtree (the longest token below it, in bytes)."""
    out = np.empty(trie.n_nodes, dtype=np.int32)
    _kernel.subtree_deepest(trie.native, out)
    return out


def bounded_put(cache: dict, key: Any, value: Any) -> dict:
    """Insert into a cache dict, starting a fresh one when it is full (readers holding the old one stay valid)."""
    if len(cache) >= CACHE_LIMIT:
        cache = {}
    cache[key] = value
    return cache


_FEW_PARTS = 4
"""Above this many parts, `ConfigMask.next_configs` asks each part's bits before its lookup."""


class Family:
    """The walks of one state's `once` calls from the same trie nodes: an object's members after ``{`` or a
    separator. A mask takes the members its activation has not used as one part (`union`), so n members cost one
    union of a few tokens each, not n parts; moves and budgets ask for the members themselves (`moves`, `parts`).
    The members' tokens stay in one set of arrays, member after member: a member's own mask is built only when a
    budget asks for it."""

    __slots__ = ("members", "vocab_size", "_ids", "_nexts", "_owner", "_offsets", "_masks", "_unions")

    def __init__(self, members: list[tuple[int, tuple[int, ...], Any, list]], ids: np.ndarray, nexts: np.ndarray,
                 owner: np.ndarray, counts: np.ndarray, vocab_size: int) -> None:
        self.members = members
        """(marker bit, continuations pushed, part key, its exits grouped) per member."""
        self.vocab_size = vocab_size
        self._ids, self._nexts, self._owner = ids, nexts, owner
        """Every member's tokens (ascending within a member), where each leads, whose each is."""
        self._offsets = np.concatenate([[0], np.cumsum(counts)]).tolist()
        self._masks: dict[int, StateMask] = {}
        self._unions: dict[int, StateMask] = {}

    @classmethod
    def of_masks(cls, members: list[tuple[int, tuple[int, ...], Any, StateMask, list]], vocab_size: int) -> Family:
        """A family from its members' masks: (marker bit, continuations pushed, part key, mask, exits grouped)."""
        masks = [mask for _, _, _, mask, _ in members]
        counts = np.asarray([len(mask) for mask in masks], dtype=np.int64)
        family = cls([(bit, push, key, deeper) for bit, push, key, _, deeper in members],
                     np.concatenate([*(mask.allowed for mask in masks), NO_IDS]),
                     np.concatenate([*(mask.next_states for mask in masks), NO_IDS]),
                     np.repeat(np.arange(len(masks)), counts), counts, vocab_size)  # fmt: skip
        family._masks = dict(enumerate(masks))
        return family

    def mask(self, index: int) -> StateMask:
        """Member ``index``'s own mask."""
        mask = self._masks.get(index)
        if mask is None:
            lo, hi = self._offsets[index], self._offsets[index + 1]
            mask = self._masks[index] = StateMask(self._ids[lo:hi], self._nexts[lo:hi], self.vocab_size)
        return mask

    def _unused(self, markers: int) -> np.ndarray:
        """bool per member: its marker is not among ``markers``."""
        return np.fromiter((not bit & markers for bit, _, _, _ in self.members), dtype=bool,
                           count=len(self.members))  # fmt: skip

    def union(self, markers: int) -> StateMask:
        """The tokens of the members not among ``markers`` (cached per marker set)."""
        union = self._unions.get(markers)
        if union is None:  # as bits: members share tokens (a lone quote), which a bitmask counts once
            bits = np.empty(-(-self.vocab_size // 32), dtype=np.uint32)
            count = _kernel.ids_to_bits(self._ids[self._unused(markers)[self._owner]] if markers else self._ids,
                                        self.vocab_size, bits)  # fmt: skip
            union = _bits_mask(bits, count, self.vocab_size)
            if len(self._unions) >= 256:
                self._unions = {}
            self._unions[markers] = union
        return union

    def parts(self, base: tuple[int, ...], markers: int) -> list[tuple[Any, StateMask, tuple[int, ...]]]:
        """The members not among ``markers`` as ordinary parts, each with the stack its tokens keep."""
        offsets = self._offsets
        return [(key, self.mask(index), base + (~(markers | bit), *push))
                for index, (bit, push, key, _) in enumerate(self.members)
                if not bit & markers and offsets[index + 1] > offsets[index]]  # fmt: skip

    def moves(self, token_id: int, base: tuple[int, ...], markers: int) -> list[Config]:
        """Where ``token_id`` leads through the members not among ``markers``."""
        found = []
        at = np.flatnonzero(self._ids == token_id)
        for index, target in zip(self._owner[at].tolist(), self._nexts[at].tolist()):
            bit, push, _, _ = self.members[index]
            if not bit & markers:
                found.append((target, () if target == TERMINAL else base + (~(markers | bit), *push)))
        return found


class ConfigMask:
    """What a configuration set allows: parts (a state's inside mask, or the walk below one exit after a call or
    return), each with the stack its tokens keep, and member families (`Family`); the allowed set is their union."""

    __slots__ = ("grammar", "parts", "families", "combined", "_budgeted", "_all")

    def __init__(self, grammar: MaskSource, parts: list[tuple[Any, StateMask, tuple[int, ...]]],
                 families: list[tuple[Family, tuple[int, ...], int]]) -> None:
        self.grammar = grammar
        self.parts = parts
        self.families = families
        """(family, the stack under its activation's markers, the markers) per member family (`Family`)."""
        self.combined = union_masks([mask for _, mask, _ in parts] + [walk.union(markers) for walk, _, markers in families],
                               grammar.trie.vocab_size)  # fmt: skip
        self._all: list[tuple[Any, StateMask, tuple[int, ...]]] | None = None
        self._budgeted: dict[tuple[int | None, ...], StateMask] = {}
        """Per tuple of the parts' budget cuts (`PushdownGrammar.budget_cut`), what `within` allows."""

    def next_configs(self, token_id: int) -> frozenset[Config] | None:
        """Where ``token_id`` leads, or None when it is not allowed."""
        found = set()
        for walk, base, markers in self.families:
            found.update(walk.moves(token_id, base, markers))
        many = len(self.parts) > _FEW_PARTS
        word, bit = token_id >> 5, token_id & 31
        for _, mask, stack in self.parts:
            if many and not (int(mask.bits[word]) >> bit) & 1:  # the union built every part's bits: a quick no
                continue
            target = mask.next_state(token_id)
            if target is not None:
                found.add((target, () if target == TERMINAL else stack))
        return frozenset(found) if found else None

    def within(self, remaining: int) -> StateMask:
        """The allowed tokens that still leave a completion within ``remaining`` tokens (cached per tuple of the
        parts' budget cuts: a budget that shrinks inside one level costs nothing)."""
        grammar = self.grammar
        parts = self.all_parts()
        cuts = tuple(grammar.budget_cut(key, mask, remaining - grammar.stack_bound(stack) - 1)
                     for key, mask, stack in parts)  # fmt: skip
        budgeted = self._budgeted.get(cuts)
        if budgeted is None:
            if all(cut is None for cut in cuts):
                budgeted = self.combined
            else:
                kept = [mask if cut is None else grammar.restricted(key, mask, cut)
                        for (key, mask, _), cut in zip(parts, cuts)]  # fmt: skip
                budgeted = union_masks(kept, grammar.trie.vocab_size)
            if len(self._budgeted) < 64:
                self._budgeted[cuts] = budgeted
        return budgeted

    def all_parts(self) -> list[tuple[Any, StateMask, tuple[int, ...]]]:
        """Every part, each family's members spelled out as parts of their own (what budget cuts read)."""
        if self._all is None:
            self._all = self.parts + [part for walk, base, markers in self.families
                                      for part in walk.parts(base, markers)]  # fmt: skip
        return self._all


class _NoLookup:
    """The next-state lookup of a union mask: never asked (a union answers moves through its parts)."""

    def next_state(self, token_id: int) -> int:
        return 0

    def next_states(self, allowed: np.ndarray) -> np.ndarray:
        return np.zeros(allowed.shape[0], dtype=np.int32)


def union_masks(masks: Sequence[StateMask], vocab_size: int) -> StateMask:
    """One mask allowing what any of ``masks`` allows (for masking and bitmasks; moves go through the parts)."""
    masks = [mask for mask in masks if len(mask)]
    if len(masks) == 1:
        return masks[0]
    if not masks:
        return StateMask(np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32), vocab_size)
    bits = np.empty(-(-vocab_size // 32), dtype=np.uint32)
    return _bits_mask(bits, _kernel.or_bits([mask.bits for mask in masks], bits), vocab_size)


def _bits_mask(bits: np.ndarray, count: int, vocab_size: int) -> StateMask:
    """A union's mask from its bits, ``count`` of them set (moves go through its parts, so it has no next-state
    lookup: `_NoLookup` stands in, never asked, hence not a full lookup type)."""
    return StateMask.from_bits(bits, count, vocab_size, _NoLookup())  # type: ignore[arg-type]
