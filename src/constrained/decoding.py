"""The decode loop: evaluate, read logits, mask, sample, advance — one visible loop, every exit a FinishReason.

Owns token generation over a ``LlamaModel`` with an optional ``Matcher``. Refuses to continue unconstrained: a
sampled token the matcher rejects raises ``MaskError``; an empty mask raises ``MaskError`` (from the sampler).

    ┌─► stop checks (cancel, grammar terminated, max_tokens)
    │     forced? (forced_batching and the grammar admits one continuation)
    │        yes: tokenize the forced bytes canonically, matcher.advance each ─► append (no logits needed);
    │             the last one is left to sampling when a longer allowed token starts with it (token healing)
    │        no : eval pending (one batch) ─► copy logits to scratch ─► matcher.apply_mask ─► sample
    │             ─► matcher.advance (False ⇒ MaskError)
    │     append: EOS ⇒ eos · stop id ⇒ stop_token · else pending += token, text += bytes, on_token(id, bytes)
    └──────────┘

Pending tokens (the prompt, sampled and forced tokens) are evaluated lazily, in one batch, at the moment logits
are needed — so a run of forced tokens costs one ``llama_decode`` together with the next sampled position.

The loop's body is `Generation` (one sequence: stop checks and forced runs in `wants_logits`, masking and sampling
in `sample`); `decode` evaluates between the two with ``model.eval``. `constrained.batching` drives several
generations with one ``llama_batch`` per step; a `BatchedSequence` (its `Slot`) handed to `decode` runs there.

Decisions:

* **Masking copies once.** ``model.logits()`` is a zero-copy view of llama.cpp's buffer; the loop copies it into
  one preallocated scratch array per generation (measured ≤ 0.12 ms for 150k floats on a busy 2-core
  machine, under 1% of a 24 ms Qwen token) and masks the copy, so
  ``model.logits()`` always tells the truth about the model and a masked value never leaks to another reader.
* **Terminators are reported, not emitted.** An EOS / stop token is the last entry of ``DecodeResult.tokens``
  but contributes no bytes to ``text`` and is not passed to ``on_token``.
* **The KV ends before the last appended tokens.** Tokens appended after the last logits read are not
  evaluated (that would cost a forward pass nobody reads); ``model.tokens`` says exactly what the KV holds.
* **Context full during generation** ends with ``length`` (the prompt itself not fitting raises
  ``ContextOverflowError``).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from .errors import MaskError
from .llama import ContextOverflowError, UnrepresentableTextError
from .sampling import Sampler, SamplingParams
from .vocabulary import Vocabulary

if TYPE_CHECKING:
    from .matcher import Cursor

__all__ = ["FinishReason", "DecodeTimings", "DecodeResult", "Generation", "BatchedSequence", "decode", "CancelSignal"]


@runtime_checkable
class CancelSignal(Protocol):
    """The one cancel protocol of the project: ``is_set()`` says whether to stop, ``reason`` why.

    `agent.cancel.CancelToken` implements it; the agent layer (session, engine, tools) types every cancel with
    it and reads ``reason`` for the trace. This loop only ever calls ``is_set()``, so an object with just that
    (a ``threading.Event``) still stops a decode.
    """

    def is_set(self) -> bool:
        """Whether the work should stop."""
        ...

    @property
    def reason(self) -> str:
        """Why it was cancelled ("" when no reason was given, or while not set)."""
        ...


@runtime_checkable
class BatchedSequence(Protocol):
    """A sequence that decodes in a batch with others (`constrained.batching.Slot`): `decode` hands it the whole
    generation, and its batch runs it, one ``llama_batch`` per step for every sequence at once."""

    def submit(self, prompt_tokens: Sequence[int] | None, *, matcher: Cursor[Any] | None, max_tokens: int,
               sampling: SamplingParams, stop_token_ids: Sequence[int], forced_batching: bool,
               on_token: Callable[[int, bytes], None] | None, cancel: CancelSignal | None) -> Future[DecodeResult]:
        """Queue the generation in the batch; the future holds its result (or the error that ended it)."""
        ...


class TokenModel(Protocol):
    """What a `Generation` reads of its model: the vocabulary, the tokenizer and the sequence's KV (its length, its
    ids, its rollback). A `LlamaModel` and a `constrained.batching.Slot` both offer it."""

    @property
    def vocabulary(self) -> Vocabulary: ...

    @property
    def n_vocab(self) -> int: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def n_past(self) -> int: ...

    @property
    def tokens(self) -> list[int]: ...

    @property
    def has_logits(self) -> bool: ...

    def tokenize(self, text: str | bytes, *, add_bos: bool = False, special: bool = False) -> list[int]: ...

    def token_bytes(self, token_id: int) -> bytes: ...

    def rollback(self, n_past: int) -> None: ...


class EvalModel(TokenModel, Protocol):
    """A `TokenModel` that `decode` evaluates itself (a `LlamaModel`): ``eval`` the pending ids, then read the
    ``logits`` after them."""

    def eval(self, ids: Sequence[int]) -> None: ...

    def logits(self) -> np.ndarray: ...


class FinishReason(enum.StrEnum):
    """Why generation stopped."""

    EOS = "eos"
    """An end-of-generation token was produced."""
    STOP_TOKEN = "stop_token"
    """A caller-given stop token id was produced."""
    LENGTH = "length"
    """``max_tokens`` was reached (or the context window filled up)."""
    GRAMMAR_COMPLETE = "grammar_complete"
    """The matcher terminated: the document is complete and nothing else may follow."""
    CANCELLED = "cancelled"
    """``cancel.is_set()`` became true."""


@dataclass(frozen=True, kw_only=True)
class DecodeTimings:
    """Where the time went (milliseconds, ``time.perf_counter``)."""

    prompt_eval_ms: float
    """Start until the first batch is evaluated: the prompt, plus any forced tokens that preceded the first
    sampled position (they share that batch)."""
    generation_ms: float
    """Everything after the prompt batch: evals, masking, sampling, forced tokenization."""
    mask_ms: float
    """Time inside ``matcher.apply_mask`` (part of ``generation_ms``)."""
    n_generated: int
    """Tokens appended after the prompt (sampled + forced, terminator included)."""
    n_forced: int
    """Of those, tokens appended by forced batching without sampling."""
    n_evals: int
    """``llama_decode`` batches issued (``eval`` calls), prompt included."""

    @property
    def per_token_ms(self) -> float:
        """Mean generation time per appended token."""
        return self.generation_ms / self.n_generated if self.n_generated else 0.0


@dataclass(frozen=True, kw_only=True)
class DecodeResult:
    """One finished generation."""

    tokens: tuple[int, ...]
    """Every appended id in order, including a final EOS / stop token."""
    text: bytes
    """Exact bytes of ``tokens`` without the final EOS / stop token."""
    finish_reason: FinishReason
    """Why it stopped."""
    n_prompt_tokens: int
    """Prompt ids evaluated by this call (0 when continuing from the current KV)."""
    timings: DecodeTimings
    """Measured durations."""


def decode(
    model: EvalModel | BatchedSequence,
    prompt_tokens: Sequence[int] | None,
    *,
    matcher: Cursor[Any] | None = None,
    max_tokens: int,
    sampling: SamplingParams = SamplingParams(),
    stop_token_ids: Sequence[int] = (),
    forced_batching: bool = False,
    on_token: Callable[[int, bytes], None] | None = None,
    cancel: CancelSignal | None = None,
) -> DecodeResult:
    """Generate up to ``max_tokens`` tokens after ``prompt_tokens`` (appended to what the KV already holds).

    Args:
        model: the model; its KV cache is extended in place (``model.reuse_prefix`` picks what to re-evaluate). A
            `constrained.batching.Slot` decodes in its batch, with the sequences of the other slots (the call blocks
            until this one is finished).
        prompt_tokens: ids to evaluate first; None / empty continues from the current state (the last KV token is
            re-evaluated when its logits are gone, e.g. after a rollback).
        matcher: constrains every appended token; None = unconstrained.
        max_tokens: upper bound on appended tokens.
        sampling: temperature / top_p / seed.
        stop_token_ids: ids that end generation like EOS.
        forced_batching: append grammar-forced continuations without sampling (needs a matcher).
        on_token: called with (id, bytes) for each appended non-terminal token, as it is appended.
        cancel: checked before every step.

    Raises:
        MaskError: the matcher refused a sampled token, or the mask left nothing to sample.
        ContextOverflowError: the prompt does not fit in the context window.
    """
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    if isinstance(model, BatchedSequence):
        return model.submit(prompt_tokens, matcher=matcher, max_tokens=max_tokens, sampling=sampling,
                            stop_token_ids=stop_token_ids, forced_batching=forced_batching, on_token=on_token,
                            cancel=cancel).result()
    generation = Generation.after(model, prompt_tokens, matcher=matcher, max_tokens=max_tokens, sampling=sampling,
                                  stop_token_ids=stop_token_ids, forced_batching=forced_batching, on_token=on_token,
                                  cancel=cancel)
    while generation.wants_logits(model.n_past, model.n_ctx):
        ids = generation.take_pending()
        model.eval(ids)
        generation.sample(model.logits(), n_evals=1 if ids else 0)
    return generation.result()


class Generation:
    """One sequence's generation in progress: the steps of the loop above that need no model call.

    `decode` drives one; `constrained.batching` drives several, evaluating the pending ids of all of them in one
    ``llama_batch`` per step. Either way the order per sequence is the same: `wants_logits` (stop checks, forced
    runs appended without logits) ─► the caller evaluates `take_pending` ─► `sample` the logits that follow ─►
    again, until `finish` is set. Not thread-safe: one driver at a time.
    """

    def __init__(self, model: TokenModel, pending: Sequence[int], *, matcher: Cursor[Any] | None, max_tokens: int,
                 sampling: SamplingParams = SamplingParams(), stop_token_ids: Sequence[int] = (),
                 forced_batching: bool = False, on_token: Callable[[int, bytes], None] | None = None,
                 cancel: CancelSignal | None = None, n_prompt: int | None = None) -> None:
        if max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
        self._model = model
        """For the vocabulary and the canonical tokenization of forced bytes (never evaluated here)."""
        self.matcher = matcher
        self.max_tokens = max_tokens
        self.pending: list[int] = list(pending)
        """Ids appended (prompt, sampled, forced) but not evaluated yet: evaluated when logits are needed."""
        self.finish: FinishReason | None = None
        """Why the generation ended; None while it runs."""
        self.cancel = cancel
        self._sampler = Sampler(sampling)
        self._eos_ids = model.vocabulary.eos_token_ids
        self._stop_ids = frozenset(stop_token_ids)
        self._forced_batching = forced_batching and matcher is not None
        self._on_token = on_token
        self._scratch = np.empty(model.n_vocab, dtype=np.float32)
        self._clock = _Clock()
        self._n_prompt = len(self.pending) if n_prompt is None else n_prompt
        self._appended: list[int] = []
        self._text = bytearray()
        self._n_forced = 0
        self._ready = False

    @classmethod
    def after(cls, model: TokenModel, prompt_tokens: Sequence[int] | None, **options: Any) -> Generation:
        """A generation of ``prompt_tokens`` after what ``model``'s KV holds; with no prompt and no logits for the
        last KV token (after a rollback), that token is taken out of the KV and evaluated again.

        Args:
            options: the keyword arguments of `Generation` (matcher, max_tokens, sampling...).

        Raises:
            ContextOverflowError: the prompt does not fit in the context window.
        """
        return cls(model, _initial_pending(model, prompt_tokens), n_prompt=len(prompt_tokens or ()), **options)

    def wants_logits(self, n_past: int, n_ctx: int) -> bool:
        """Run the steps that need no logits (stop checks, forced runs) until the next one does: True when it
        does (evaluate `pending`, then `sample`), False once `finish` is set.

        Args:
            n_past: tokens the sequence's KV holds now (``pending`` comes after them).
            n_ctx: the most tokens the sequence may hold.
        """
        while self.finish is None:
            # -- stop checks --
            self.finish = _stop_before_step(self.matcher, self.cancel, len(self._appended), self.max_tokens)
            if self.finish is not None or self._ready:
                break
            # -- a forced continuation, or logits for one sampled token --
            new: list[int] = []
            if self._forced_batching:
                assert self.matcher is not None  # forced batching is on only with a matcher (`__init__`)
                new = _forced_tokens(self._model, self.matcher, self.max_tokens - len(self._appended))
            if new:
                self._n_forced += len(new)
                self._append(new)
                continue
            if n_past + len(self.pending) > n_ctx:
                self.finish = FinishReason.LENGTH
                break
            self._ready = True
        return self.finish is None

    def take_pending(self, limit: int | None = None) -> list[int]:
        """The ids to evaluate now: all of them, or the first ``limit`` (a prompt evaluated in chunks); `sample`
        reads the logits after the last, once `pending` is empty."""
        cut = len(self.pending) if limit is None else max(0, min(limit, len(self.pending)))
        ids, self.pending = self.pending[:cut], self.pending[cut:]
        return ids

    def sample(self, logits: np.ndarray, *, n_evals: int = 1) -> None:
        """Mask and sample the logits that follow the evaluated ids, advance the matcher, append the token.

        Args:
            logits: float32[n_vocab], read only (copied into this generation's scratch before masking).
            n_evals: ``llama_decode`` batches that evaluated this sequence's ids since the last `sample`
                (counted in ``DecodeTimings.n_evals``).

        Raises:
            MaskError: the matcher refused the sampled token, or the mask left nothing to sample.
        """
        assert not self.pending, "sample() reads the logits after every pending id"
        self._ready = False
        self._clock.evaluated(n_evals)
        np.copyto(self._scratch, logits)
        if self.matcher is not None:
            self._clock.mask(self.matcher, self._scratch)
        token = self._sampler.sample(self._scratch)
        if self.matcher is not None and not self.matcher.advance(token):
            raise MaskError(f"matcher refused sampled token {token} ({self._model.token_bytes(token)!r})")
        self._append([token])

    def _append(self, new: Sequence[int]) -> None:
        for token in new:
            self._appended.append(token)
            if token in self._eos_ids:
                self.finish = FinishReason.EOS
                return
            if token in self._stop_ids:
                self.finish = FinishReason.STOP_TOKEN
                return
            self.pending.append(token)
            piece = self._model.token_bytes(token)
            self._text += piece
            if self._on_token is not None:
                self._on_token(token, piece)

    def result(self) -> DecodeResult:
        """The finished generation (``finish`` must be set)."""
        assert self.finish is not None, "the generation has not finished"
        return DecodeResult(
            tokens=tuple(self._appended),
            text=bytes(self._text),
            finish_reason=self.finish,
            n_prompt_tokens=self._n_prompt,
            timings=self._clock.timings(n_generated=len(self._appended), n_forced=self._n_forced),
        )


def _initial_pending(model: TokenModel, prompt_tokens: Sequence[int] | None) -> list[int]:
    """Prompt ids to evaluate first; when continuing without logits, re-evaluate the last KV token."""
    pending = list(prompt_tokens or ())
    if model.n_past + len(pending) > model.n_ctx:
        raise ContextOverflowError(model.n_past, len(pending), model.n_ctx)
    if not pending and not model.has_logits:
        if model.n_past == 0:
            raise ValueError("nothing to condition on: pass prompt_tokens or eval a prompt first")
        last = model.tokens[-1]
        model.rollback(model.n_past - 1)
        pending = [last]
    return pending


def _stop_before_step(
    matcher: Cursor[Any] | None, cancel: CancelSignal | None, n_appended: int, max_tokens: int
) -> FinishReason | None:
    if cancel is not None and cancel.is_set():
        return FinishReason.CANCELLED
    if matcher is not None and matcher.is_terminated():
        return FinishReason.GRAMMAR_COMPLETE
    if n_appended >= max_tokens:
        return FinishReason.LENGTH
    return None


def _forced_tokens(model: TokenModel, matcher: Cursor[Any], budget: int) -> list[int]:
    """The grammar's forced continuation as canonical tokens, already advanced in the matcher; [] when there is
    none or the matcher refuses the canonical tokenization (then the matcher is rolled back and the caller
    samples one token instead)."""
    forced = _valid_utf8_prefix(matcher.forced_bytes())
    if forced:
        try:
            candidates = model.tokenize(forced, special=False)[:budget]
        except UnrepresentableTextError:  # the vocabulary spells these bytes only token by token: sample them
            return []
    else:
        single = matcher.forced_token()
        candidates = [single] if single is not None and budget > 0 else []
    for n_done, token in enumerate(candidates):
        if not matcher.advance(token):
            if n_done:
                matcher.rollback(n_done)
            return []
    if forced and candidates and _heals(model, matcher, candidates[-1]):
        return candidates[:-1]
    return candidates


def _heals(model: TokenModel, matcher: Cursor[Any], last: int) -> bool:
    """Whether the model should choose the forced run's last token itself (token healing): the grammar also
    allows a longer token that starts with its bytes and runs on into what the model writes next (``":[`` forced,
    ``":["`` possible). Forcing the short one would hand the model a tokenization it never saw in training — it
    then closes the array (``[]``) where it meant ``["criminal law"]``. When it heals, the matcher is left before
    ``last``."""
    matcher.rollback(1)
    tokens = model.vocabulary.tokens
    piece = tokens[last]
    if any(len(tokens[t]) > len(piece) and tokens[t].startswith(piece) for t in matcher.allowed_token_ids().tolist()):
        return True
    matcher.advance(last)
    return False


def _valid_utf8_prefix(data: bytes) -> bytes:
    """The longest prefix that is complete UTF-8 (the tokenizer works on characters, not bytes)."""
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            data[:cut].decode("utf-8")
            return data[:cut]
        except UnicodeDecodeError:
            continue
    return b""


class _Clock:
    """Accumulates the durations reported in ``DecodeTimings``."""

    def __init__(self) -> None:
        self._start = time.perf_counter()
        self._prompt_done: float | None = None
        self._mask = 0.0
        self._evals = 0

    def evaluated(self, n_evals: int) -> None:
        """Logits arrived after ``n_evals`` more ``llama_decode`` batches (the first logits end the prompt)."""
        self._evals += n_evals
        if self._prompt_done is None:
            self._prompt_done = time.perf_counter()

    def mask(self, matcher: Cursor[Any], scratch: np.ndarray) -> None:
        start = time.perf_counter()
        matcher.apply_mask(scratch)
        self._mask += time.perf_counter() - start

    def timings(self, *, n_generated: int, n_forced: int) -> DecodeTimings:
        end = time.perf_counter()
        prompt_done = self._prompt_done if self._prompt_done is not None else end
        return DecodeTimings(
            prompt_eval_ms=(prompt_done - self._start) * 1e3,
            generation_ms=(end - prompt_done) * 1e3,
            mask_ms=self._mask * 1e3,
            n_generated=n_generated,
            n_forced=n_forced,
            n_evals=self._evals,
        )
