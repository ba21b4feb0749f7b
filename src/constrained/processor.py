"""LogitsProcessor: a Grammar as a drop-in llama-cpp-python logits processor.

Owns the glue between llama-cpp-python's ``(input_ids, scores) -> scores`` callback and one `Matcher`. Refuses
to guess: the sequence is tracked by the prompt length recorded on the first call (every later id is a
generated token, advanced in order), never inferred from ``input_ids[-1]``; a token the matcher refuses, or an
``input_ids`` that no longer extends what was seen, raises `MaskError`. Unconstrained scores are never returned.

    Llama.create_completion(prompt, logits_processor=LogitsProcessorList([LogitsProcessor(grammar)]))
        │  each step: input_ids = prompt + generated so far, scores = next-token logits
        ▼
    advance(new ids) ──► terminated? only EOS allowed : Matcher.apply_mask(scores) ──► scores

One processor follows one generation; build a new one (or call `reset`) for the next.

llama-cpp-python 0.3.x runs logits processors inside a ctypes sampler callback, where a raised exception is
printed and *swallowed* and sampling goes on with whatever scores the array holds. So on any failure the
processor first leaves only EOS finite (the generation ends at once, never unconstrained), records the error
in `error`, then raises; call `raise_if_failed()` after the completion (or check `error`) to surface it.
"""

from __future__ import annotations

import numpy as np

from constrained.errors import MaskError
from constrained.grammar import Grammar
from constrained.matcher import Matcher

__all__ = ["LogitsProcessor"]


class LogitsProcessor:
    """Constrain a llama-cpp-python generation to a grammar.

    Args:
        grammar: the compiled grammar (its vocabulary must be the model's).
        max_tokens: optional budget for budget-aware closing; pass the same ``max_tokens`` as the completion
            call so the document closes before llama.cpp cuts it.
    """

    def __init__(self, grammar: Grammar, *, max_tokens: int | None = None) -> None:
        self.grammar = grammar
        self.matcher: Matcher = grammar.matcher(max_tokens)
        """The cursor following this generation."""
        self._prompt: np.ndarray | None = None
        self._eos = np.asarray(sorted(grammar.vocabulary.eos_token_ids), dtype=np.int32)
        self.error: MaskError | None = None
        """The failure that ended this generation, if any (llama-cpp-python swallows the raise itself)."""

    def reset(self) -> None:
        """Forget the sequence: the next call starts a new generation (its input_ids are the new prompt)."""
        self._prompt = None
        self.error = None
        self.matcher.reset()

    def raise_if_failed(self) -> None:
        """Raise the recorded `MaskError`, if the generation was stopped by one."""
        if self.error is not None:
            raise self.error

    @property
    def generated_ids(self) -> tuple[int, ...]:
        """Token ids generated so far in this sequence (what the matcher has consumed)."""
        return self.matcher.token_ids

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """Advance over newly generated ids, then mask ``scores`` in place and return them.

        Raises:
            MaskError: a generated id the grammar does not allow, a sequence that does not extend the one
                followed so far, or a finished grammar in a vocabulary without EOS.
        """
        try:
            if self.error is not None:
                raise self.error
            ids = np.asarray(input_ids)
            if scores.shape[-1] < len(self.grammar.vocabulary):
                raise MaskError(
                    f"scores have {scores.shape[-1]} entries; the vocabulary has {len(self.grammar.vocabulary)}"
                )
            if self._prompt is None:
                self._prompt = ids.copy()
            self._follow(ids)
            if self.matcher.is_terminated():
                self._allow_only_eos(scores)
            else:
                self.matcher.apply_mask(scores)
            return scores
        except Exception as failure:
            self.error = failure if isinstance(failure, MaskError) else MaskError(f"logits processor failed: {failure}")
            self._end_generation(scores)
            if self.error is failure:
                raise
            raise self.error from failure

    def _end_generation(self, scores: np.ndarray) -> None:
        """Leave only EOS finite (or nothing, without EOS): never unconstrained scores."""
        scores[...] = -np.inf
        if self._eos.shape[0]:
            scores[self._eos[self._eos < scores.shape[-1]]] = 0.0

    def _follow(self, ids: np.ndarray) -> None:
        assert self._prompt is not None
        n_prompt = self._prompt.shape[0]
        consumed = self.matcher.tokens_consumed
        if ids.shape[0] < n_prompt + consumed or not np.array_equal(ids[:n_prompt], self._prompt):
            raise MaskError(
                "input_ids do not extend the sequence this LogitsProcessor follows (reused for another "
                "generation? build a new processor or call reset())"
            )
        generated = ids[n_prompt:]
        if consumed and not np.array_equal(generated[:consumed], np.asarray(self.matcher.token_ids)):
            raise MaskError("input_ids rewrote tokens this LogitsProcessor already followed")
        for token_id in generated[consumed:].tolist():
            if not self.matcher.advance(int(token_id)):
                raise MaskError(
                    f"token {token_id} ({self.grammar.vocabulary.tokens[token_id]!r}) was generated but the grammar "
                    f"does not allow it after {consumed} tokens; generation cannot continue constrained"
                )
            consumed += 1

    def _allow_only_eos(self, scores: np.ndarray) -> None:
        if self._eos.shape[0] == 0:
            raise MaskError("the grammar is complete but the vocabulary has no EOS token to end generation")
        keep = scores[self._eos].copy()
        scores[...] = -np.inf
        scores[self._eos] = np.where(np.isfinite(keep), keep, 0.0)
