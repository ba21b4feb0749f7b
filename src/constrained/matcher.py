"""Cursors: one sequence's position in a compiled grammar — current state, token history, budget, masks.

`Matcher` walks one DFA, `PushdownMatcher` a pushdown grammar's configuration sets (state, stack); both are a
`Cursor`, which owns the history, the budget and every move that does not depend on the kind of grammar.
A cursor owns one sequence's position and nothing shared: masks come from the grammar's `TokenIndex`
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
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from constrained.errors import BudgetTooSmallError
from constrained.index import TERMINAL, StateMask, TokenIndex
from constrained.pushdown_masks import DONE, Config, ConfigMask
from constrained.vocabulary import Vocabulary

__all__ = ["Cursor", "Matcher", "NO_TOKENS", "PushdownMatcher"]

NO_TOKENS = StateMask(np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32), 0)
"""The mask after EOS: nothing is allowed."""

Position = TypeVar("Position")


class Cursor(Generic[Position]):
    """What both cursors do the same way: the positions passed (one per token, the start first), the tokens, the
    budget, and every move over ``_mask()`` (the `StateMask` allowed next, budget applied; `NO_TOKENS` after EOS)
    and ``_follow`` (where an allowed token leads)."""

    def __init__(self, initial: Position, max_tokens: int | None, needed: int, n_eos: int) -> None:
        if max_tokens is not None and max_tokens < needed:
            raise BudgetTooSmallError(max_tokens, needed)
        self.max_tokens = max_tokens
        """The token budget this matcher enforces, or ``None``."""
        self._n_eos = n_eos
        self._history: list[Position] = [initial]
        self._tokens: list[int] = []

    def _mask(self) -> StateMask:
        raise NotImplementedError

    def _follow(self, token_id: int, mask: StateMask) -> Position | None:
        """Where an allowed ``token_id`` leads (``mask``: the current one), or ``None``."""
        raise NotImplementedError

    def is_accepting(self) -> bool:
        """Whether the bytes so far form a complete document (also true after EOS)."""
        raise NotImplementedError

    def is_terminated(self) -> bool:
        """EOS consumed, or accepting with nothing but EOS (or nothing at all) allowed."""
        raise NotImplementedError

    def forced_bytes(self) -> bytes:
        """The maximal byte string the grammar forces from here (b"" at a choice, acceptance or special)."""
        raise NotImplementedError

    # -- position --------------------------------------------------------------------------------------------------

    @property
    def state(self) -> Position:
        """The current position (a DFA state, `index.TERMINAL` after EOS; or a pushdown configuration set)."""
        return self._history[-1]

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

    # -- queries ---------------------------------------------------------------------------------------------------

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
        if mask is NO_TOKENS:
            out[...] = 0
            return
        np.copyto(out, mask.bits, casting="no")

    def apply_mask(self, logits: np.ndarray) -> None:
        """Write -inf in place at every disallowed id (all of them once terminated by EOS)."""
        mask = self._mask()
        if mask is NO_TOKENS:
            logits[...] = -np.inf
            return
        mask.apply(logits)

    # -- moves -----------------------------------------------------------------------------------------------------

    def advance(self, token_id: int) -> bool:
        """Consume one token; ``False`` (and no change) when it is not allowed here."""
        token_id = int(token_id)
        following = self._follow(token_id, self._mask())
        if following is None:
            return False
        self._history.append(following)
        self._tokens.append(token_id)
        return True

    def copy(self: _C) -> _C:
        """An independent cursor at the same position, with the same history and budget (the grammar is shared)."""
        twin = copy.copy(self)
        twin._history, twin._tokens = list(self._history), list(self._tokens)
        return twin

    def rollback(self, n_tokens: int) -> None:
        """Undo the last ``n_tokens`` advances (EOS included)."""
        if not 0 <= n_tokens <= len(self._tokens):
            raise ValueError(f"cannot roll back {n_tokens} tokens: {len(self._tokens)} consumed")
        if n_tokens:
            del self._history[-n_tokens:]
            del self._tokens[-n_tokens:]

    def reset(self) -> None:
        """Back to the start of the grammar, budget restored."""
        del self._history[1:]
        self._tokens.clear()


_C = TypeVar("_C", bound=Cursor[Any])


class DfaGrammar(Protocol):
    """What a `Matcher` reads of its grammar (`constrained.Grammar`)."""

    @property
    def dfa(self) -> Any: ...

    @property
    def index(self) -> TokenIndex: ...

    @property
    def vocabulary(self) -> Vocabulary: ...


class Matcher(Cursor[int]):
    """One sequence's cursor in a grammar. Not thread-safe (one matcher per sequence); the grammar is.

    Args:
        grammar: the compiled grammar (shared).
        max_tokens: token budget for the whole document (EOS included), or ``None`` for no budget.

    Raises:
        BudgetTooSmallError: ``max_tokens`` cannot fit the shortest completion the index can guarantee.
    """

    def __init__(self, grammar: DfaGrammar, max_tokens: int | None = None) -> None:
        self.grammar = grammar
        self._index = grammar.index
        initial = int(grammar.dfa.initial)
        needed = 0 if max_tokens is None else self._index.needed_budget(initial)
        super().__init__(initial, max_tokens, needed, len(grammar.vocabulary.eos_token_ids))

    def _mask(self) -> StateMask:
        state = self._history[-1]
        if state == TERMINAL:
            return NO_TOKENS
        if self.max_tokens is None:
            return self._index.state_mask(state)
        return self._index.budget_mask(state, self.max_tokens - len(self._tokens))

    def _follow(self, token_id: int, mask: StateMask) -> int | None:
        return mask.next_state(token_id)

    def is_accepting(self) -> bool:
        """Whether the bytes so far form a complete document (also true after EOS)."""
        state = self._history[-1]
        return state == TERMINAL or bool(self.grammar.dfa.accepting[state])

    def is_terminated(self) -> bool:
        """EOS consumed, or accepting with nothing but EOS (or nothing at all) allowed."""
        state = self._history[-1]
        if state == TERMINAL:
            return True
        if not self.grammar.dfa.accepting[state]:
            return False
        mask = self._mask()
        return len(mask) <= self._n_eos and bool(np.all(mask.next_states == TERMINAL))

    def forced_bytes(self) -> bytes:
        """The maximal byte string the grammar forces from here (b"" at a choice, acceptance or special)."""
        state = self._history[-1]
        return b"" if state == TERMINAL else self._index.forced_bytes(state)

    def __repr__(self) -> str:
        return (
            f"Matcher(state={self.state}, tokens_consumed={self.tokens_consumed}, "
            f"remaining_budget={self.remaining_budget}, accepting={self.is_accepting()})"
        )


class PushdownGrammarView(Protocol):
    """What a `PushdownMatcher` reads of its grammar (`constrained.PushdownGrammar`)."""

    @property
    def initial(self) -> frozenset[Config]: ...

    @property
    def vocabulary(self) -> Vocabulary: ...

    @property
    def eos_ids(self) -> frozenset[int]: ...

    def closure(self, configs: frozenset[Config]) -> tuple[Config, ...]: ...

    def upper_bound(self, configs: tuple[Config, ...]) -> int: ...

    def mask(self, configs: frozenset[Config]) -> ConfigMask: ...

    def is_accepting(self, configs: frozenset[Config]) -> bool: ...

    def forced_bytes(self, configs: frozenset[Config]) -> bytes: ...


class PushdownMatcher(Cursor[frozenset[Config]]):
    """One sequence's cursor in a pushdown grammar: the `Matcher` interface over configuration sets."""

    def __init__(self, grammar: PushdownGrammarView, max_tokens: int | None = None) -> None:
        self.grammar = grammar
        needed = 0 if max_tokens is None else grammar.upper_bound(grammar.closure(grammar.initial))
        super().__init__(grammar.initial, max_tokens, needed, len(grammar.vocabulary.eos_token_ids))

    @property
    def configurations(self) -> frozenset[Config]:
        """The current (state, stack) configurations."""
        return self._history[-1]

    @property
    def stack_depth(self) -> int:
        """The deepest stack among the current configurations (rules entered and not yet finished)."""
        return max(sum(entry >= 0 for entry in stack) for _, stack in self._history[-1])

    def _mask(self) -> StateMask:
        configs = self._history[-1]
        if configs == DONE:
            return NO_TOKENS
        raw = self.grammar.mask(configs)
        return raw.combined if self.max_tokens is None else raw.within(self.max_tokens - len(self._tokens))

    def _follow(self, token_id: int, mask: StateMask) -> frozenset[Config] | None:
        if mask.next_state(token_id) is None:
            return None
        following = self.grammar.mask(self._history[-1]).next_configs(token_id)
        if following is not None and any(state == TERMINAL for state, _ in following):
            return DONE
        return following

    def is_accepting(self) -> bool:
        return self.grammar.is_accepting(self._history[-1])

    def is_terminated(self) -> bool:
        configs = self._history[-1]
        if configs == DONE:
            return True
        if not self.grammar.is_accepting(configs):
            return False
        allowed = self._mask().allowed
        return len(allowed) <= self._n_eos and all(int(t) in self.grammar.eos_ids for t in allowed.tolist())

    def forced_bytes(self) -> bytes:
        configs = self._history[-1]
        return b"" if configs == DONE else self.grammar.forced_bytes(configs)

    def __repr__(self) -> str:
        return (f"PushdownMatcher(configurations={len(self._history[-1])}, stack_depth={self.stack_depth}, "
                f"tokens_consumed={self.tokens_consumed}, accepting={self.is_accepting()})")  # fmt: skip
