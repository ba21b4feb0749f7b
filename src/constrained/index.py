"""Token index: DFA × Vocabulary → the tokens allowed in each DFA state, computed lazily and cached.

Owns the per-vocabulary token trie, the per-state allowed sets (with the state each token leads to), the
budget bound UB used for closing, and the per-state mask representation. Refuses to allow anything the
grammar does not: non-normal tokens are allowed only as the special symbols a grammar names, EOS only in
accepting states, and a state no token can leave raises `IncompatibleVocabularyError` (never an empty mask).

    Vocabulary ──(once per vocabulary)──► TokenTrie  (normal tokens' bytes, sorted, flattened in preorder)
                                             │
    DFA state s ──► _kernel.walk(DFA.table, s, trie) ──► ids alive after all their bytes + next states
                                             │   + named special tokens (symbol 256+i)  + EOS if accepting
                                             ▼
                                         StateMask (cached per state; allowed ids, next states, mask form)

The walk visits the trie in preorder keeping one DFA state per depth; a dead transition skips the whole
subtree, so a state inside a JSON structure touches a few hundred nodes and a state inside a string
touches most of them once. Each state is walked at most once per `TokenIndex`.

Budget-aware closing: ``UB(s)`` is the token count of the best tokenization (fewest tokens, dynamic
programming over trie prefixes in the kernel) of the canonical shortest completion from ``s`` (the
`fsm.next_hop` chain). Every state on that chain is a suffix of it, so one DP fills UB for the whole chain.
Under a remaining budget ``r`` a token is allowed only if ``1 + UB(next) <= r``; EOS leads to UB 0.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from constrained import _kernel
from constrained.errors import IncompatibleVocabularyError
from constrained.fsm import DEAD, DFA
from constrained.shortcut import Plan, PlanMemo, TokenGroups, string_body_shortcut
from constrained.trie import token_trie
from constrained.vocabulary import Vocabulary

__all__ = ["NO_IDS", "TERMINAL", "UNREACHABLE", "StateMask", "TokenIndex"]

TERMINAL = -2
"""Next-state value of an EOS token: the sequence ends."""
UNREACHABLE = np.iinfo(np.int32).max // 2
"""UB of a state whose canonical completion no sequence of tokens can spell (the kernel's infinity)."""

NO_IDS = np.zeros(0, dtype=np.int32)
NO_IDS.flags.writeable = False

_ALLOWED_FORM_MAX = 512
"""At most this many allowed ids (and at most 1/8 of the vocabulary): fill -inf around the allowed list.
Measured on 128k logits: ~15 µs + ~14 ns per allowed id (scattered gaps defeat vectorization)."""
_DISALLOWED_FORM_MAX = 8192
"""At most this many disallowed ids (and at most 1/16 of the vocabulary): write -inf at the disallowed list
(~1-2 ns per id). Between the two: a uint8 keep-vector, branch-free, ~20 µs flat on 128k logits."""


def _bits_to_ids(bits: np.ndarray, vocab_size: int, value: int, expected: int) -> np.ndarray:
    """Ids whose bit equals ``value`` (ascending, read-only); ``expected`` is how many there are."""
    out = np.empty(expected, dtype=np.int32)
    if _kernel.bits_to_ids(bits, vocab_size, value, out) != expected:
        raise AssertionError("bitmask population disagrees with its recorded count")
    out.flags.writeable = False
    return out


def bounds_after(next_states: np.ndarray, ub: np.ndarray, bound_of: Callable[[int], int]) -> np.ndarray:
    """UB after each of ``next_states`` (0 after EOS: `TERMINAL` and other negative states), from the table ``ub``
    (-1: not known yet), which ``bound_of`` fills for the states it lacks."""
    real = np.maximum(next_states, 0)
    bounds = ub[real]
    missing = bounds < 0
    if missing.any():
        for target in np.unique(real[missing & (next_states >= 0)]).tolist():
            bound_of(int(target))
        bounds = ub[real]
    bounds[next_states < 0] = 0
    return bounds


def _id_bits(ids: np.ndarray, vocab_size: int) -> np.ndarray:
    bits = np.empty(-(-vocab_size // 32), dtype=np.uint32)
    _kernel.ids_to_bits(np.ascontiguousarray(ids, dtype=np.int32), vocab_size, bits)
    return bits


def _clear_ids(bits: np.ndarray, ids: np.ndarray, vocab_size: int) -> None:
    if ids.shape[0]:
        bits &= ~_id_bits(ids, vocab_size)


def _set_ids(bits: np.ndarray, ids: np.ndarray, vocab_size: int) -> None:
    if ids.shape[0]:
        bits |= _id_bits(ids, vocab_size)


def budget_levels(mask: StateMask, bounds_of: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """The distinct bounds after ``mask``'s tokens, ascending (from its candidate next states, so perhaps a few
    more): every limit between two neighbours restricts the mask to the same tokens, so a budget-filtered mask is
    cached per level, not per remaining budget."""
    if not len(mask):
        return np.zeros(0, dtype=np.int64)
    return np.unique(bounds_of(mask.next_state_candidates()))


@dataclass(frozen=True, kw_only=True, eq=False)
class BitsLookup:
    """Next states for a bitmask-built `StateMask`: the listed (non-pure) ids carry their own next state; every
    other allowed id is a pure token of the string-body shortcut's template, whose next state is the embedding of
    the template state it ends in."""

    listed_ids: np.ndarray
    """int32 ascending: allowed ids that are not pure (found below exits or overridden bytes, specials, EOS)."""
    listed_next: np.ndarray
    """int32 aligned with ``listed_ids``."""
    embedding: np.ndarray
    """int32 [template states]: template state → DFA state (`shortcut.Plan.embedding`)."""
    pure_state: np.ndarray
    """[V]: the template state each pure token ends in (`shortcut.Plan.pure_state`)."""
    pure_groups: TokenGroups
    """The pure tokens by that state (`shortcut.Plan.pure_groups`)."""

    def next_state(self, token_id: int) -> int:
        position = int(np.searchsorted(self.listed_ids, token_id))
        if position < self.listed_ids.shape[0] and int(self.listed_ids[position]) == token_id:
            return int(self.listed_next[position])
        return int(self.embedding[self.pure_state[token_id]])

    def candidates(self) -> np.ndarray:
        """Every next state a token of the mask can have, and perhaps a few more (`StateMask.next_state_candidates`)."""
        return np.concatenate([self.embedding, self.listed_next]).astype(np.int32)

    def next_states(self, allowed: np.ndarray) -> np.ndarray:
        pure = self.pure_state[allowed]
        out = self.embedding[np.where(pure < self.embedding.shape[0], pure, 0)].astype(np.int32)
        out[np.searchsorted(allowed, self.listed_ids)] = self.listed_next
        return out


class RestrictedLookup:
    """Next states for a `StateMask.restricted` mask: each of its tokens moves as it does in the mask it was cut
    from."""

    __slots__ = ("parent",)

    def __init__(self, parent: StateMask) -> None:
        self.parent = parent

    def next_state(self, token_id: int) -> int:
        target = self.parent.next_state(token_id)
        assert target is not None, "a restricted mask only holds tokens of its parent"
        return target

    def candidates(self) -> np.ndarray:
        return self.parent.next_state_candidates()

    def next_states(self, allowed: np.ndarray) -> np.ndarray:
        parent = self.parent
        return parent.next_states[np.searchsorted(parent.allowed, allowed)]


class StateMask:
    """What one DFA state allows: sorted token ids, where each leads, and the cheapest way to mask logits.

    Immutable once built (arrays are read-only). Built either from the id arrays (the plain walk) or from a bitmask
    plus a next-state lookup (the string-body shortcut, `from_bits`): then the ~123k-entry id arrays are only
    built if something asks for them, and the complement list, keep-vector and bitmask come from the bits.
    """

    __slots__ = ("_allowed", "_next_states", "_count", "vocab_size", "form", "_disallowed", "_keep", "_bits",
                 "_lookup", "_ub_next")  # fmt: skip

    def __init__(self, allowed: np.ndarray, next_states: np.ndarray, vocab_size: int) -> None:
        allowed.flags.writeable = False
        next_states.flags.writeable = False
        self._allowed: np.ndarray | None = allowed
        self._next_states: np.ndarray | None = next_states
        self._bits: np.ndarray | None = None
        self._lookup: BitsLookup | RestrictedLookup | None = None
        self._setup(int(allowed.shape[0]), vocab_size)

    @classmethod
    def from_bits(cls, bits: np.ndarray, count: int, vocab_size: int,
                  lookup: BitsLookup | RestrictedLookup) -> StateMask:
        """A mask known by its bitmask (``count`` bits set) and a next-state ``lookup``."""
        mask = cls.__new__(cls)
        bits.flags.writeable = False
        mask._allowed = mask._next_states = None
        mask._bits = bits
        mask._lookup = lookup
        mask._setup(count, vocab_size)
        return mask

    def _setup(self, count: int, vocab_size: int) -> None:
        self._count = count
        self.vocab_size = vocab_size
        if count <= min(_ALLOWED_FORM_MAX, vocab_size // 8):
            form = "allowed"
        elif vocab_size - count <= min(_DISALLOWED_FORM_MAX, vocab_size // 16):
            form = "disallowed"
        else:
            form = "bytemask"
        self.form = form
        """How `apply` masks logits: ``"allowed"`` (fill around the allowed list), ``"disallowed"`` (write the
        complement list) or ``"bytemask"`` (uint8 keep-vector), whichever is cheapest for this size."""
        self._disallowed: np.ndarray | None = None
        self._keep: np.ndarray | None = None
        self._ub_next: np.ndarray | None = None

    def __len__(self) -> int:
        return self._count

    @property
    def allowed(self) -> np.ndarray:
        """int32 ascending: every allowed id (normal tokens, named specials, EOS when accepting)."""
        if self._allowed is None:
            self._materialize()
        assert self._allowed is not None
        return self._allowed

    @property
    def next_states(self) -> np.ndarray:
        """int32 aligned with ``allowed``: the DFA state after the token (`TERMINAL` for EOS)."""
        if self._next_states is None:
            self._materialize()
        assert self._next_states is not None
        return self._next_states

    def _materialize(self) -> None:
        assert self._bits is not None and self._lookup is not None
        allowed = _bits_to_ids(self.bits, self.vocab_size, 1, self._count)
        next_states = self._lookup.next_states(allowed)
        next_states.flags.writeable = False
        self._next_states = next_states
        self._allowed = allowed

    def next_state_candidates(self) -> np.ndarray:
        """int32: every state a token of this mask leads to, perhaps with a few more, without the per-token array
        of a bitmask-built mask (its template's image and its listed tokens' states)."""
        if self._next_states is None and self._lookup is not None:
            return self._lookup.candidates()
        return self.next_states

    def next_state(self, token_id: int) -> int | None:
        """Where ``token_id`` leads, or None when it is not allowed."""
        if self._allowed is None and self._lookup is not None:
            assert self._bits is not None
            if not 0 <= token_id < self.vocab_size or not (int(self._bits[token_id >> 5]) >> (token_id & 31)) & 1:
                return None
            return self._lookup.next_state(token_id)
        allowed = self.allowed
        position = int(np.searchsorted(allowed, token_id))
        if position >= allowed.shape[0] or int(allowed[position]) != token_id:
            return None
        return int(self.next_states[position])

    def restricted(self, bounds_of: Callable[[np.ndarray], np.ndarray], limit: int) -> StateMask:
        """The tokens whose next state's bound (``bounds_of``: next states → bounds) is at most ``limit``, built
        in bit space: a bitmask-built mask drops its pure tokens by the template state they end in (the smaller
        side of the groups over and within the limit) and its listed ones by their own bound, so its ~150k next
        states are never spelled out; another drops the ids over the limit."""
        bits = self.bits.copy()
        lookup = self._lookup
        if isinstance(lookup, BitsLookup) and self._next_states is None:
            bounds = bounds_of(lookup.embedding)
            over = np.flatnonzero(bounds > limit)
            if over.shape[0]:
                groups = lookup.pure_groups
                under = np.flatnonzero(bounds <= limit)
                if groups.size(over) <= groups.size(under):
                    _clear_ids(bits, groups.ids_in(over), self.vocab_size)
                else:  # most pure tokens go: keep the others (the listed ones are settled below)
                    bits &= _id_bits(np.concatenate([groups.ids_in(under), lookup.listed_ids]), self.vocab_size)
            fits = bounds_of(lookup.listed_next) <= limit
            _clear_ids(bits, lookup.listed_ids[~fits], self.vocab_size)
            _set_ids(bits, lookup.listed_ids[fits], self.vocab_size)
        else:
            too_far = self.token_bounds(bounds_of) > limit
            if np.count_nonzero(too_far) * 2 <= self._count:
                _clear_ids(bits, self.allowed[too_far], self.vocab_size)
            else:
                bits = _id_bits(self.allowed[~too_far], self.vocab_size)
        count = _kernel.or_bits((bits,), bits)
        return StateMask.from_bits(bits, count, self.vocab_size, RestrictedLookup(self))

    def token_bounds(self, bounds_of: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """The bound after each allowed token (aligned with ``allowed``), from ``bounds_of`` (next states → bounds)
        on first use: a mask belongs to one index or grammar, whose bounds these are."""
        if self._ub_next is None:
            self._ub_next = bounds_of(self.next_states)
        return self._ub_next

    @property
    def bits(self) -> np.ndarray:
        """uint32 [ceil(vocab_size / 32)]: bit ``i % 32`` of word ``i // 32`` set for every allowed id ``i``."""
        if self._bits is None:
            bits = np.empty(-(-self.vocab_size // 32), dtype=np.uint32)
            _kernel.ids_to_bits(self.allowed, self.vocab_size, bits)
            bits.flags.writeable = False
            self._bits = bits
        return self._bits

    @property
    def disallowed(self) -> np.ndarray:
        """int32 ascending: every id of the vocabulary not in ``allowed``."""
        if self._disallowed is None:
            self._disallowed = _bits_to_ids(self.bits, self.vocab_size, 0, self.vocab_size - self._count)
        return self._disallowed

    @property
    def keep(self) -> np.ndarray:
        """uint8 [vocab_size]: 1 at allowed ids."""
        if self._keep is None:
            keep = np.unpackbits(self.bits.view(np.uint8), count=self.vocab_size, bitorder="little")
            keep.flags.writeable = False
            self._keep = keep
        return self._keep

    def apply(self, logits: np.ndarray) -> None:
        """Write -inf into ``logits`` (in place) at every id this mask does not allow.

        Contiguous float32 vectors go through the C writers; other layouts (llama-cpp-python hands processors a
        strided view) through numpy, in the same form — a big mask never builds its ~123k-id allowed list here.
        """
        same_size = logits.shape[-1] == self.vocab_size
        fast = (
            logits.dtype == np.float32 and logits.ndim == 1 and logits.flags.c_contiguous and logits.flags.writeable
        )
        if self.form == "disallowed" and same_size:
            if fast:
                _kernel.apply_disallowed(logits, self.disallowed)
            else:
                logits[..., self.disallowed] = -np.inf
        elif self.form == "bytemask" and same_size:
            if fast:
                _kernel.apply_bytemask(logits, self.keep)
            else:
                np.copyto(logits, -np.inf, where=self.keep == 0)
        elif fast:
            _kernel.apply_allowed(logits, self.allowed)
        else:
            keep = logits[..., self.allowed].copy()
            logits[...] = -np.inf
            logits[..., self.allowed] = keep


class TokenIndex:
    """Per-state allowed tokens of one DFA over one vocabulary: lazy, cached, thread-safe, exportable.

    Args:
        dfa: the grammar's automaton.
        vocab: the vocabulary tokens come from.
        masks: previously computed states (from `export_masks` / the disk cache), consulted lazily: a state's
            entry is read (and turned into a `StateMask`) on its first request only; None for an unusable entry.
        preflight: check up front that every state can be left by some token (skipped for a grammar loaded from
            the disk cache, which passed it when compiled; a failing state still raises when its mask is computed).
        table_checked: the caller has already checked every transition target is in [-1, n_states) (the disk-cache
            loader does, on the table's run-length form); otherwise it is checked here, since the kernels trust it.
        bits_only: the masks are read as bitmasks only (a pushdown grammar's, joined into unions): the forms that
            write logits are not built with each mask, only if one is applied.

    Raises:
        IncompatibleVocabularyError: the DFA names a special token the vocabulary lacks, or some state
            needs bytes no token can produce.
    """

    def __init__(
        self,
        dfa: DFA,
        vocab: Vocabulary,
        *,
        masks: Mapping[int, tuple[np.ndarray, np.ndarray]] | None = None,
        preflight: bool = True,
        table_checked: bool = False,
        bits_only: bool = False,
    ) -> None:
        self.dfa = dfa
        self._bits_only = bits_only
        self.vocab = vocab
        self.trie = token_trie(vocab)
        self._width = dfa.n_symbols
        self._eos = np.asarray(sorted(vocab.eos_token_ids), dtype=np.int32)
        self._special_ids = self._resolve_specials()
        self._masks: dict[int, StateMask] = {}
        self._lock = threading.Lock()
        self._buffers: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        if not table_checked:  # the kernels trust the table: one C pass (the trie was checked once, when built)
            _kernel.check(*dfa.table)
        self._ub = np.full(dfa.n_states, -1, dtype=np.int32)
        self._next_hop: np.ndarray | None = None
        self._budget_masks: dict[tuple[int, int], StateMask] = {}
        """(state, cut) → the state's mask cut to the tokens whose next bound is at most ``cut``, one of its
        `budget_levels` (or -1): every budget within one level shares it."""
        self._levels: dict[int, np.ndarray] = {}
        self._forced: dict[int, bytes] = {}
        self._stored: Mapping[int, tuple[np.ndarray, np.ndarray]] = masks if masks is not None else {}
        self._shortcut = string_body_shortcut(self.trie)
        self._plans: PlanMemo = {}
        """State → its plan (or a counted plan proven by an earlier state, built when first asked for)."""
        if preflight:
            self._check_every_state_can_move()

    def plan(self, state: int) -> Plan | None:
        """How the string-body shortcut walks ``state`` (None: the plain walk); worked out once per state."""
        if self._shortcut is None:
            return None
        return self._shortcut.plan(self.dfa.table, state, self.trie.n_nodes, self._plans)

    def _walk_buffers(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(out ids, out next states, scratch) of the walks, allocated on the first one (a grammar whose masks are
        all stored never walks). Scratch is int32 [vocab size], all -1 between walks (the kernels restore it)."""
        if self._buffers is None:
            n_tokens = self.trie.n_tokens
            self._buffers = (np.empty(n_tokens, dtype=np.int32), np.empty(n_tokens, dtype=np.int32),
                             np.full(self.trie.vocab_size, -1, dtype=np.int32))  # fmt: skip
        return self._buffers

    # -- construction checks ---------------------------------------------------------------------------------------

    def _resolve_specials(self) -> np.ndarray:
        missing = [name for name in self.dfa.special_names if name not in self.vocab.special_ids_by_name]
        if missing:
            raise IncompatibleVocabularyError(
                f"the grammar names special tokens {missing} that vocabulary {self.vocab.name or '?'} does not have",
                missing=tuple(missing),
            )
        return np.asarray([self.vocab.special_ids_by_name[n] for n in self.dfa.special_names], dtype=np.int32)

    def _check_every_state_can_move(self) -> None:
        """Raise now, not mid-generation, for a state no token can leave (cheap test first, walk the doubtful).

        Surely movable: a state with a transition on a class holding a single-byte token's byte or a special
        symbol (each named special is a token). Worked out on the class table: a few columns, not 256+.
        """
        classes = self.dfa.symbol_classes
        movable = np.zeros(self.dfa.class_table.shape[1], dtype=bool)
        movable[classes[:256][self.trie.single_byte]] = True
        movable[classes[256:]] = True
        table = self.dfa.class_table if movable.all() else self.dfa.class_table[:, movable]
        surely = self.dfa.accepting | (table.max(axis=1, initial=DEAD) != DEAD)  # DEAD is the smallest entry
        for state in np.flatnonzero(~surely):
            self.state_mask(int(state))

    # -- masks -----------------------------------------------------------------------------------------------------

    def state_mask(self, state: int) -> StateMask:
        """Everything state ``state`` allows (ignoring any budget), computed on first request."""
        mask = self._masks.get(state)
        if mask is None:
            stored = self._stored.get(state)
            if stored is not None:
                allowed, next_states = stored
                mask = StateMask(np.asarray(allowed, dtype=np.int32), np.asarray(next_states, dtype=np.int32),
                                 self.trie.vocab_size)  # fmt: skip
            else:
                mask = self._compute(state)
            mask = self._masks.setdefault(state, mask)
        return mask

    def _compute(self, state: int) -> StateMask:
        trie = self.trie
        plan = self.plan(state)
        with self._lock:
            out_ids, out_next, scratch = self._walk_buffers()
            if plan is not None:
                assert self._shortcut is not None
                bits, count, n_normal = self._shortcut.walk(
                    self.dfa.table, state, plan, trie, out_ids, out_next, scratch
                )
            else:
                count = n_normal = _kernel.walk(*self.dfa.table, state, trie.native, out_ids, out_next, scratch)
            ids = out_ids[:count].copy()
            next_states = out_next[:count].copy()
        ids, next_states, extra_ids = self.with_extras(state, ids, next_states)
        if n_normal + extra_ids.shape[0] == 0 and not self.dfa.accepting[state]:
            live = np.flatnonzero(self.dfa.table.row(state) != DEAD)
            raise IncompatibleVocabularyError(
                f"DFA state {state} needs one of the bytes {[bytes([b]) for b in live.tolist()][:16]} and no token of "
                f"vocabulary {self.vocab.name or '?'} can produce them",
                state=state,
                missing=tuple(bytes([b]) for b in live.tolist()),
            )
        if plan is None:
            mask = StateMask(ids, next_states, trie.vocab_size)
        else:  # ids / next_states hold the non-pure allowed tokens only; the bits hold them all
            assert self._shortcut is not None
            for token_id in extra_ids.tolist():
                bits[token_id >> 5] |= np.uint32(1 << (token_id & 31))
            lookup = BitsLookup(listed_ids=ids, listed_next=next_states, embedding=plan.embedding,
                                pure_state=plan.pure_state, pure_groups=plan.pure_groups)  # fmt: skip
            mask = StateMask.from_bits(bits, n_normal + int(extra_ids.shape[0]), trie.vocab_size, lookup)
        if mask.form == "disallowed" and not self._bits_only:  # the mask forms now (once per state), not on apply
            mask.disallowed  # noqa: B018
        mask.bits  # noqa: B018 - the keep-vector of a "bytemask" mask unpacks from these bits on first apply
        return mask

    def with_extras(self, state: int, ids: np.ndarray, next_states: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        """A trie walk's (ids, next states) with ``state``'s non-trie tokens merged in (ids ascending), and those
        extra ids."""
        extra_ids, extra_next = self._extras(state)
        if extra_ids.shape[0]:
            where = np.searchsorted(ids, extra_ids)
            ids = np.insert(ids, where, extra_ids)
            next_states = np.insert(next_states, where, extra_next)
        return ids, next_states, extra_ids

    def _extras(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        """The non-trie tokens ``state`` allows: named specials with a live symbol, EOS when accepting (ids ascending,
        next states aligned)."""
        if not self._special_ids.shape[0] and not self.dfa.accepting[state]:
            return NO_IDS, NO_IDS
        extra_ids: list[int] = []
        extra_next: list[int] = []
        table = self.dfa.table
        targets = table.classes[state, table.symbol_class[256:]].tolist()  # the specials' moves (symbols 256 + i)
        for token_id, target in zip(self._special_ids.tolist(), targets):
            if target != DEAD:
                extra_ids.append(token_id)
                extra_next.append(target)
        if self.dfa.accepting[state]:
            for token_id in self._eos.tolist():
                if token_id not in extra_ids:
                    extra_ids.append(token_id)
                    extra_next.append(TERMINAL)
        ids = np.asarray(extra_ids, dtype=np.int32)
        order = np.argsort(ids, kind="stable")
        return ids[order], np.asarray(extra_next, dtype=np.int32)[order]

    def precompute(self) -> None:
        """Compute every state's mask (for the disk cache; a served grammar computes lazily)."""
        for state in range(self.dfa.n_states):
            self.state_mask(state)

    @property
    def computed_states(self) -> tuple[int, ...]:
        """States whose masks exist so far (computed here or stored), ascending."""
        return tuple(sorted(set(self._masks) | set(self._stored)))

    def export_masks(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Every known state (computed here or stored) → (allowed ids, next states), for persisting."""
        out = {int(state): stored for state in list(self._stored) if (stored := self._stored.get(state)) is not None}
        out.update((state, (mask.allowed, mask.next_states)) for state, mask in list(self._masks.items()))
        return out

    # -- budget ----------------------------------------------------------------------------------------------------

    def upper_bound(self, state: int) -> int:
        """UB(state): tokens in the best tokenization of the canonical shortest completion (0 if accepting)."""
        if state == TERMINAL:
            return 0
        ub = int(self._ub[state])
        if ub < 0:
            self._fill_chain(state)
            ub = int(self._ub[state])
        return ub

    def _fill_chain(self, state: int) -> None:
        longest = min(int(self.dfa.distance[state]), self.dfa.n_states)  # the hops to acceptance
        chain = np.empty(longest + 1, dtype=np.int32)
        symbols = np.empty(longest, dtype=np.int32)
        try:
            length = _kernel.follow_hops(*self.dfa.table, self._canonical_next_hop(), state, chain, symbols)
        except ValueError:
            length = -1
        if length < 0 or not self.dfa.accepting[chain[length]]:
            raise RuntimeError(f"DFA state {state} has no canonical hop to acceptance (untrimmed DFA)")
        best = np.empty(length + 1, dtype=np.int32)
        trie = self.trie
        _kernel.min_tokenization(symbols[:length], trie.native, best)
        self._ub[chain[:length + 1]] = best

    def _canonical_next_hop(self) -> np.ndarray:
        if self._next_hop is None:
            from constrained import fsm

            self._next_hop = np.asarray(fsm.next_hop(self.dfa), dtype=np.int32)
        return self._next_hop

    def budget_mask(self, state: int, remaining: int) -> StateMask:
        """The state's mask restricted to tokens that still leave a completion within ``remaining`` tokens."""
        mask = self.state_mask(state)
        levels = self._levels.get(state)
        if levels is None:
            levels = self._levels.setdefault(state, budget_levels(mask, self._bounds_of))
        level = int(np.searchsorted(levels, remaining - 1, side="right"))
        if level == levels.shape[0]:
            return mask
        cut = int(levels[level - 1]) if level else -1
        filtered = self._budget_masks.get((state, cut))
        if filtered is None:
            filtered = self._budget_masks.setdefault((state, cut), mask.restricted(self._bounds_of, cut))
        return filtered

    def _bounds_of(self, next_states: np.ndarray) -> np.ndarray:
        return bounds_after(next_states, self._ub, self.upper_bound)

    def needed_budget(self, state: int) -> int:
        """Fewest tokens this index can guarantee to finish from ``state`` in: min(UB(s), 1 + min UB(next))."""
        if self.dfa.accepting[state]:
            return 0
        mask = self.state_mask(state)
        best = int(mask.token_bounds(self._bounds_of).min()) + 1 if len(mask) else UNREACHABLE
        return min(self.upper_bound(state), best)

    # -- forced continuation ---------------------------------------------------------------------------------------

    def forced_bytes(self, state: int) -> bytes:
        """Bytes the grammar forces from ``state``: stops at a choice, an accepting state or a special symbol."""
        forced = self._forced.get(state)
        if forced is None:
            out = bytearray()
            current = state
            table = self.dfa.table
            while not self.dfa.accepting[current] and len(out) <= self.dfa.n_states:
                row = table.row(current, self._width)
                live = np.flatnonzero(row != DEAD)
                if live.shape[0] != 1 or live[0] >= 256:
                    break
                out.append(int(live[0]))
                current = int(row[live[0]])
            forced = bytes(out)
            self._forced[state] = forced
        return forced
