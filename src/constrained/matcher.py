"""Matcher: the per-sequence cursor over a Grammar — current state, token history, budget, masks.

Owns one sequence's position in the grammar and nothing shared: masks come from the grammar's `TokenIndex`
(immutable, cached, shared across sequences and threads), so a matcher is cheap to create, reset and roll
back. Refuses disallowed tokens by returning ``False`` from `advance` (never raising, never moving).

    Grammar.matcher(max_tokens) ──► Matcher ──allowed_token_ids() / apply_mask(logits)──► sampler
                                        ▲                                                   │
                                        └───────────────── advance(token_id) ◄──────────────┘

Budget: with ``max_tokens`` every token (EOS included) costs one, and a token is allowed only if the best
known completion after it still fits (``1 + UB(next) <= remaining``, see `index`), so a budgeted sequence
always ends in an accepted document. After EOS the matcher is terminated and allows nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from constrained.errors import BudgetTooSmallError
from constrained.index import TERMINAL, StateMask

if TYPE_CHECKING:
    from constrained.grammar import Grammar

__all__ = ["Matcher", "SharedMoves"]

_NOTHING = StateMask(np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32), 0)


class SharedMoves:
    """What both cursors — `Matcher` (one DFA) and `constrained.pushdown.PushdownMatcher` (rules, a stack) — do the
    same way, over their ``_mask()`` (the `StateMask` allowed next, budget applied; `_NOTHING` after EOS),
    ``advance`` and ``rollback``."""

    def _mask(self) -> StateMask:
        raise NotImplementedError

    def advance(self, token_id: int) -> bool:
        raise NotImplementedError

    def rollback(self, n_tokens: int) -> None:
        raise NotImplementedError

    def allowed_token_ids(self) -> np.ndarray:
        """Sorted int32 ids allowed next (read-only; EOS ids included iff the state is accepting)."""
        return self._mask().allowed

    def is_allowed(self, token_id: int) -> bool:
        """Whether `advance(token_id)` would succeed."""
        return self._mask().next_state(int(token_id)) is not None

    def forced_token(self) -> int | None:
        """The only allowed token when the mask has exactly one entry, else ``None``."""
        mask = self._mask()
        return int(mask.allowed[0]) if len(mask) == 1 else None

    def validate_tokens(self, token_ids: Sequence[int]) -> int:
        """How many leading ``token_ids`` `advance` would accept in a row from here; nothing changes (what a
        speculative decoder asks of its draft tokens)."""
        accepted = 0
        try:
            for token_id in token_ids:
                if not self.advance(token_id):
                    break
                accepted += 1
        finally:
            self.rollback(accepted)
        return accepted

    # -- masking ---------------------------------------------------------------------------------------------------

    def fill_bitmask(self, out: np.ndarray) -> None:
        """Write the allowed set into ``out`` (uint32 [ceil(vocab_size / 32)]): bit ``i % 32`` of word ``i // 32``
        set iff id ``i`` is allowed next — llguidance's token-bitmask layout. All zero once terminated by EOS."""
        mask = self._mask()
        if mask is _NOTHING:
            out[...] = 0
            return
        np.copyto(out, mask.bits, casting="no")

    def apply_mask(self, logits: np.ndarray) -> None:
        """Write -inf in place at every disallowed id (all of them once terminated by EOS)."""
        mask = self._mask()
        if mask is _NOTHING:
            logits[...] = -np.inf
            return
        mask.apply(logits)


class Matcher(SharedMoves):
    """One sequence's cursor in a grammar. Not thread-safe (one matcher per sequence); the grammar is.

    Args:
        grammar: the compiled grammar (shared).
        max_tokens: token budget for the whole document (EOS included), or ``None`` for no budget.

    Raises:
        BudgetTooSmallError: ``max_tokens`` cannot fit the shortest completion the index can guarantee.
    """

    def __init__(self, grammar: Grammar, max_tokens: int | None = None) -> None:
        self.grammar = grammar
        self._index = grammar.index
        self._initial = grammar.dfa.initial
        if max_tokens is not None:
            needed = self._index.needed_budget(self._initial)
            if max_tokens < needed:
                raise BudgetTooSmallError(max_tokens, needed)
        self.max_tokens = max_tokens
        """The token budget this matcher enforces, or ``None``."""
        self._n_eos = len(grammar.vocabulary.eos_token_ids)
        self._states: list[int] = [self._initial]
        self._tokens: list[int] = []

    # -- position --------------------------------------------------------------------------------------------------

    @property
    def state(self) -> int:
        """Current DFA state (`index.TERMINAL` after EOS)."""
        return self._states[-1]

    @property
    def tokens_consumed(self) -> int:
        """Tokens advanced so far (EOS included)."""
        return len(self._tokens)

    @property
    def token_ids(self) -> tuple[int, ...]:
        """The tokens advanced so far, in order."""
        return tuple(self._tokens)

    @property
    def remaining_budget(self) -> int | None:
        """Tokens left under ``max_tokens``, or ``None`` without a budget."""
        return None if self.max_tokens is None else self.max_tokens - len(self._tokens)

    def _mask(self) -> StateMask:
        state = self._states[-1]
        if state == TERMINAL:
            return _NOTHING
        if self.max_tokens is None:
            return self._index.state_mask(state)
        return self._index.budget_mask(state, self.max_tokens - len(self._tokens))

    # -- queries ---------------------------------------------------------------------------------------------------

    def is_accepting(self) -> bool:
        """Whether the bytes so far form a complete document (also true after EOS)."""
        state = self._states[-1]
        return state == TERMINAL or bool(self.grammar.dfa.accepting[state])

    def is_terminated(self) -> bool:
        """EOS consumed, or accepting with nothing but EOS (or nothing at all) allowed."""
        state = self._states[-1]
        if state == TERMINAL:
            return True
        if not self.grammar.dfa.accepting[state]:
            return False
        mask = self._mask()
        return len(mask) <= self._n_eos and bool(np.all(mask.next_states == TERMINAL))

    def forced_bytes(self) -> bytes:
        """The maximal byte string the grammar forces from here (b"" at a choice, acceptance or special)."""
        state = self._states[-1]
        return b"" if state == TERMINAL else self._index.forced_bytes(state)

    # -- moves -----------------------------------------------------------------------------------------------------

    def advance(self, token_id: int) -> bool:
        """Consume one token; ``False`` (and no change) when it is not allowed here."""
        next_state = self._mask().next_state(int(token_id))
        if next_state is None:
            return False
        self._states.append(next_state)
        self._tokens.append(int(token_id))
        return True

    def copy(self) -> Matcher:
        """An independent matcher at the same position, with the same history and budget (the grammar is shared)."""
        twin = copy.copy(self)
        twin._states, twin._tokens = list(self._states), list(self._tokens)
        return twin

    def rollback(self, n_tokens: int) -> None:
        """Undo the last ``n_tokens`` advances (EOS included)."""
        if not 0 <= n_tokens <= len(self._tokens):
            raise ValueError(f"cannot roll back {n_tokens} tokens: {len(self._tokens)} consumed")
        if n_tokens:
            del self._states[-n_tokens:]
            del self._tokens[-n_tokens:]

    def reset(self) -> None:
        """Back to the start of the grammar, budget restored."""
        del self._states[1:]
        self._tokens.clear()

    def __repr__(self) -> str:
        return (
            f"Matcher(state={self.state}, tokens_consumed={self.tokens_consumed}, "
            f"remaining_budget={self.remaining_budget}, accepting={self.is_accepting()})"
        )
