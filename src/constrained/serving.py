"""Our grammars behind a serving engine's structured-output contract: one request's grammar state, batch bitmasks.

When one machine is not enough, the same grammars run inside vLLM or SGLang (docs/scale-out.md). Both drive a
per-request object through the same few moves, which `RequestGrammar` provides over a `Matcher`:

    accept_tokens(request_id, ids) -> bool     all of ``ids`` in order, or none of them (False, nothing moves)
    validate_tokens(ids) -> list[int]          the accepted prefix of draft tokens; nothing moves
    rollback(n)                                undo the last ``n`` accepted tokens (speculative decoding)
    fill_bitmask(bitmask, index)               write the allowed set into row ``index`` of a batch bitmask
    is_terminated() / reset()

That is vLLM's ``StructuredOutputGrammar`` method for method (``vllm/v1/structured_output/backend_types.py``);
SGLang's grammar objects need the same moves under other names (``accept_token``, ``fill_vocab_mask``, ``copy``).
Neither engine is a dependency: the contract is duck-typed, and a bitmask row may be a numpy array or a CPU torch
tensor (int32 or uint32 words, bit ``i % 32`` of word ``i // 32`` for token ``i``, llguidance's and xgrammar's
layout). A row wider than the vocabulary (a model whose embedding has padding rows) gets zeros past it.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np

from constrained.grammar import Grammar
from constrained.matcher import Matcher, PushdownMatcher
from constrained.pushdown import PushdownGrammar

__all__ = ["RequestGrammar"]


class RequestGrammar:
    """One request's grammar state in a serving engine (see the module docstring).

    Args:
        grammar: the compiled grammar (shared by every request that uses it; thread-safe).
        max_tokens: the request's token budget for budget-aware closing, or None.
    """

    def __init__(self, grammar: Grammar | PushdownGrammar, max_tokens: int | None = None) -> None:
        self.matcher: Matcher | PushdownMatcher = grammar.matcher(max_tokens=max_tokens)
        self._words = (len(grammar.vocabulary) + 31) // 32

    @property
    def num_processed_tokens(self) -> int:
        """Tokens accepted so far (what vLLM's backends count)."""
        return self.matcher.tokens_consumed

    def accept_tokens(self, request_id: str, tokens: Sequence[int]) -> bool:
        """Advance over every token in order; if one is not allowed, nothing moves and the answer is False."""
        for n_done, token in enumerate(tokens):
            if not self.matcher.advance(token):
                self.matcher.rollback(n_done)
                return False
        return True

    def validate_tokens(self, tokens: Sequence[int]) -> list[int]:
        """The longest prefix of ``tokens`` the grammar accepts from here; the state does not change."""
        return list(tokens[: self.matcher.validate_tokens(tokens)])

    def rollback(self, num_tokens: int) -> None:
        self.matcher.rollback(num_tokens)

    def fill_bitmask(self, bitmask: Any, index: int) -> None:
        """Write the allowed set into ``bitmask[index]`` (numpy array or CPU torch tensor, 32-bit words)."""
        row = bitmask[index]
        words = row.numpy() if hasattr(row, "numpy") else np.asarray(row)
        if words.dtype.itemsize != 4 or words.ndim != 1 or len(words) < self._words:
            raise ValueError(f"bitmask row {index}: expected at least {self._words} 32-bit words, got "
                             f"{words.dtype} of shape {words.shape}")
        words = words.view(np.uint32)
        self.matcher.fill_bitmask(words[: self._words])
        words[self._words:] = 0

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()

    def reset(self) -> None:
        self.matcher.reset()

    def copy(self) -> RequestGrammar:
        """An independent state at the same position (SGLang copies a grammar object per forked request)."""
        twin = copy.copy(self)
        twin.matcher = self.matcher.copy()
        return twin
