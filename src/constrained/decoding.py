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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from .errors import MaskError
from .llama import ContextOverflowError, UnrepresentableTextError
from .sampling import Sampler, SamplingParams

if TYPE_CHECKING:
    from .llama import LlamaModel
    from .matcher import Matcher

__all__ = ["FinishReason", "DecodeTimings", "DecodeResult", "decode", "CancelSignal"]


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
    model: LlamaModel,
    prompt_tokens: Sequence[int] | None,
    *,
    matcher: Matcher | None = None,
    max_tokens: int,
    sampling: SamplingParams = SamplingParams(),
    stop_token_ids: Sequence[int] = (),
    forced_batching: bool = False,
    on_token: Callable[[int, bytes], None] | None = None,
    cancel: CancelSignal | None = None,
) -> DecodeResult:
    """Generate up to ``max_tokens`` tokens after ``prompt_tokens`` (appended to what the KV already holds).

    Args:
        model: the model; its KV cache is extended in place (``model.reuse_prefix`` picks what to re-evaluate).
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
    sampler = Sampler(sampling)
    eos_ids = model.vocabulary.eos_token_ids
    stop_ids = frozenset(stop_token_ids)
    scratch = np.empty(model.n_vocab, dtype=np.float32)
    clock = _Clock()
    pending = _initial_pending(model, prompt_tokens)
    n_prompt = len(prompt_tokens or ())
    appended: list[int] = []
    text = bytearray()
    n_forced = 0
    finish: FinishReason | None = None

    while finish is None:
        # -- stop checks --
        finish = _stop_before_step(matcher, cancel, len(appended), max_tokens)
        if finish is not None:
            break
        # -- forced continuation or one sampled token --
        new = _forced_tokens(model, matcher, max_tokens - len(appended)) if forced_batching and matcher else []
        if new:
            n_forced += len(new)
        else:
            if model.n_past + len(pending) > model.n_ctx:
                finish = FinishReason.LENGTH
                break
            clock.eval(model, pending)
            pending = []
            np.copyto(scratch, model.logits())
            if matcher is not None:
                clock.mask(matcher, scratch)
            token = sampler.sample(scratch)
            if matcher is not None and not matcher.advance(token):
                raise MaskError(f"matcher refused sampled token {token} ({model.token_bytes(token)!r})")
            new = [token]
        # -- append --
        for token in new:
            appended.append(token)
            if token in eos_ids:
                finish = FinishReason.EOS
                break
            if token in stop_ids:
                finish = FinishReason.STOP_TOKEN
                break
            pending.append(token)
            piece = model.token_bytes(token)
            text += piece
            if on_token is not None:
                on_token(token, piece)

    return DecodeResult(
        tokens=tuple(appended),
        text=bytes(text),
        finish_reason=finish,
        n_prompt_tokens=n_prompt,
        timings=clock.timings(n_generated=len(appended), n_forced=n_forced),
    )


def _initial_pending(model: LlamaModel, prompt_tokens: Sequence[int] | None) -> list[int]:
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
    matcher: Matcher | None, cancel: CancelSignal | None, n_appended: int, max_tokens: int
) -> FinishReason | None:
    if cancel is not None and cancel.is_set():
        return FinishReason.CANCELLED
    if matcher is not None and matcher.is_terminated():
        return FinishReason.GRAMMAR_COMPLETE
    if n_appended >= max_tokens:
        return FinishReason.LENGTH
    return None


def _forced_tokens(model: LlamaModel, matcher: Matcher, budget: int) -> list[int]:
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


def _heals(model: LlamaModel, matcher: Matcher, last: int) -> bool:
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

    def eval(self, model: LlamaModel, ids: Sequence[int]) -> None:
        if ids:
            model.eval(ids)
            self._evals += 1
        if self._prompt_done is None:
            self._prompt_done = time.perf_counter()

    def mask(self, matcher: Matcher, scratch: np.ndarray) -> None:
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
