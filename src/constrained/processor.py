"""LogitsProcessor: a Grammar as a drop-in llama-cpp-python logits processor.

Owns the glue between llama-cpp-python's ``(input_ids, scores) -> scores`` callback and one `Matcher`. Refuses
to guess: the sequence is tracked by the prompt length recorded on the first call (every later id is a
generated token, advanced in order), never inferred from ``input_ids[-1]``; a token the matcher refuses, or an
``input_ids`` that no longer extends what was seen, raises `MaskError`. Unconstrained scores are never returned.

    processor = LogitsProcessor(grammar, max_tokens=N)
    Llama.create_completion(prompt, **processor.completion_kwargs())   logits_processor, max_tokens=N + 1, stop=[]
        │  each step: input_ids = prompt + generated so far, scores = next-token logits
        ▼
    advance(new ids) ──► terminated? only EOS allowed : Matcher.apply_mask(scores) ──► scores

**One budget, in both places.** The processor closes the document within its ``max_tokens`` (budget-aware
closing); ``create_completion`` cuts the text at *its* ``max_tokens`` whatever the grammar says. If the
completion's limit is the tighter one, an open document (a string, an object with ``additionalProperties``) is
cut mid-way: measured on SmolLM2 at temperature 1, an unbudgeted processor under ``max_tokens=48`` ended 19 of 60
documents truncated (3 open schemas x 20 seeds); budgeted as below, 0 of 60. So `completion_kwargs` derives the
completion's settings from the processor's one budget, and the budget defaults to what keeps a plain
``create_completion(prompt, logits_processor=LogitsProcessorList([LogitsProcessor(grammar)]))`` complete under
llama-cpp-python's default ``max_tokens=16``. The completion gets one token more than the document: a finished
document is ended by an EOS the processor forces, so ``finish_reason`` is ``"stop"``, never ``"length"``. The
budget must also fit the context: llama-cpp-python silently shortens ``max_tokens`` to ``n_ctx - prompt tokens``.

One processor follows one generation; build a new one, call `reset`, or use `completion_kwargs` (which resets)
for the next.

llama-cpp-python 0.3.x runs logits processors inside a ctypes sampler callback, where a raised exception is
printed and *swallowed* and sampling goes on with whatever scores the array holds. So on any failure the
processor first leaves only EOS finite (the generation ends at once, never unconstrained), records the error
in `error`, then raises; call `raise_if_failed()` after the completion (or check `error`) to surface it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from constrained.errors import BudgetTooSmallError, MaskError
from constrained.grammar import Grammar
from constrained.matcher import Matcher, PushdownMatcher
from constrained.pushdown import PushdownGrammar

__all__ = ["DEFAULT_BUDGET", "LLAMA_CPP_DEFAULT_MAX_TOKENS", "LogitsProcessor"]

LLAMA_CPP_DEFAULT_MAX_TOKENS = 16
"""llama-cpp-python's ``create_completion`` default ``max_tokens`` (a test pins it to the installed version)."""

DEFAULT_BUDGET = LLAMA_CPP_DEFAULT_MAX_TOKENS - 1
"""The budget a processor closes its document within unless given another: the document and the EOS that ends it
fit in a default ``create_completion``."""


class LogitsProcessor:
    """Constrain a llama-cpp-python generation to a grammar.

    Args:
        grammar: the compiled grammar (its vocabulary must be the model's).
        max_tokens: the token budget the document is closed within. Give ``create_completion`` at least one more
            — ``**processor.completion_kwargs()`` does — or a longer document is cut at the completion's limit.
            Defaults to `DEFAULT_BUDGET` (15), which fits llama-cpp-python's default ``max_tokens=16``.
            ``None``: no budget (only safe when nothing else limits the completion either, e.g.
            ``max_tokens=-1`` and a grammar whose documents are short).

    Raises:
        BudgetTooSmallError: ``max_tokens`` cannot fit the shortest accepted document.
    """

    def __init__(self, grammar: Grammar | PushdownGrammar, *, max_tokens: int | None = DEFAULT_BUDGET) -> None:
        self.grammar = grammar
        try:
            self.matcher: Matcher | PushdownMatcher = grammar.matcher(max_tokens)
            """The cursor following this generation."""
        except BudgetTooSmallError as error:
            error.add_note(f"use LogitsProcessor(grammar, max_tokens=N) with N >= {error.needed}, then "
                           "create_completion(prompt, **processor.completion_kwargs()) to give the completion that "
                           "budget" + (f" (the default, {DEFAULT_BUDGET}, fits llama-cpp-python's default "
                                       f"max_tokens={LLAMA_CPP_DEFAULT_MAX_TOKENS})"
                                       if max_tokens == DEFAULT_BUDGET else ""))
            raise
        self.max_tokens = max_tokens
        """The budget the document closes within (``None``: none)."""
        self._prompt: np.ndarray | None = None
        self._eos = np.asarray(sorted(grammar.vocabulary.eos_token_ids), dtype=np.int32)
        self.error: MaskError | None = None
        """The failure that ended this generation, if any (llama-cpp-python swallows the raise itself)."""
        self._issued = False

    def completion_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``Llama.create_completion`` (or ``__call__``) that make it one complete
        constrained generation: ``llm.create_completion(prompt, **processor.completion_kwargs())``.

        Resets the processor (each call starts a new generation) and returns ``logits_processor`` (this
        processor), ``max_tokens`` (its budget plus one, for the EOS that ends a finished document; ``-1``,
        unlimited, when it has no budget) and ``stop=[]`` (a stop string would cut a document the grammar is still
        writing; the grammar ends generation with EOS itself).
        Add sampling options beside it (``temperature``, ``seed``…); giving ``max_tokens`` or ``stop`` again is a
        ``TypeError``, on purpose. Not ``logit_bias``: llama-cpp-python 0.3.x then drops every logits processor
        (``LogitsProcessorList.extend`` returns None) and generates unconstrained; `raise_if_failed` reports a
        processor that never ran.
        """
        import llama_cpp

        self.reset()
        self._issued = True
        return {
            "logits_processor": llama_cpp.LogitsProcessorList([self]),
            "max_tokens": -1 if self.max_tokens is None else self.max_tokens + 1,
            "stop": [],
        }

    def reset(self) -> None:
        """Forget the sequence: the next call starts a new generation (its input_ids are the new prompt)."""
        self._prompt = None
        self.error = None
        self._issued = False
        self.matcher.reset()

    def raise_if_failed(self) -> None:
        """Raise the recorded `MaskError`, if the generation was stopped by one, or a `MaskError` if a generation
        set up by `completion_kwargs` never called the processor (its output is unconstrained)."""
        if self.error is not None:
            raise self.error
        if self._issued and self._prompt is None:
            raise MaskError("the completion never called this LogitsProcessor, so its output is unconstrained "
                            "(llama-cpp-python 0.3.x drops logits processors when logit_bias is given)")

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
