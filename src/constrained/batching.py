"""Several sequences decoded at once: one llama.cpp context, a sequence id per slot, one ``llama_batch`` per step.

Owns the multi-sequence context (a unified KV cache: every sequence's cells in one buffer, so a shared prefix is
one set of cells tagged with several sequence ids), its slots (one generation at a time each), its prefix holders
(a shared prompt prefix evaluated once, then shared into a slot with ``llama_memory_seq_cp``), and the step loop
that advances every active generation together. Each generation keeps everything of its own: its matcher (mask,
budget-aware closing, forced runs), sampler, stop ids, cancel signal and callbacks, all in `decoding.Generation`.
Refuses to let one sequence's failure reach another: a ``llama_decode`` that fails is undone and each sequence of
the batch is evaluated alone; the one that still fails ends with `BatchDecodeError`, the others go on.

    BatchedModel.load(path, n_slots=N) ─► LlamaModel (tokenizer, vocabulary) + a context of N + H sequences
    decode(slot, prompt, matcher=...)  (any thread: it waits; or slot.submit(...) ─► Future)
        ─► the batch thread runs `step` while any generation is active:
    step: each active generation: wants_logits (stop checks, cancel, forced runs appended without logits)
          ─► one llama_batch: every one's pending ids (generations first; prompt chunks while n_batch lasts),
             logits at the last id of each that has nothing left pending
          ─► llama_decode ─► each with logits: sample (its own mask and sampler), advance, append
          ─► finished: its future resolves; the slot is free for the next generation (continuous batching)
    slot.share_prefix(ids, store) ─► a holder sequence holds ids (evaluated once, as its own sequence of the
          batch; or loaded from ``store``, and saved to it) ─► seq_cp(holder ─► slot): cells shared, not copied

Decisions:

* **Unified KV, sized per slot.** The context holds ``n_ctx * (n_slots + 1)`` cells: every slot may fill its own
  ``n_ctx`` (the per-request window) and one more window is left for prefix holders; a holder whose cells no
  slot shares is evicted (least recently used) when llama.cpp finds no room. ``llama_memory_seq_cp`` within one
  buffer only tags cells, so a 2,000-token tools prefix costs its cells once, however many slots read it.
* **Numbers differ in the last bits from a lone sequence.** llama.cpp's CPU kernels sum in another order for a
  row of a bigger batch, so a greedy pick near a tie can differ from `decode` on a `LlamaModel`; each sequence is
  still exactly what its matcher allows. A slot keeps no logits across calls: reusing its whole KV re-evaluates
  the last prompt token.
* **One lock.** The context is touched under one lock: the step (``llama_decode``, masks, sampling, callbacks)
  and every slot's KV operation (rollback, prefix copy, state files). Callbacks (``on_token``) run on the batch
  thread inside the step: keep them short.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .decoding import CancelSignal, DecodeResult, Generation
from .errors import ConstrainedError
from .llama import LlamaModel, ModelStateError
from .sampling import SamplingParams

if TYPE_CHECKING:
    from .matcher import Cursor
    from .vocabulary import Vocabulary

__all__ = ["BatchDecodeError", "BatchedModel", "KVSequence", "PrefixStore", "SharedPrefix", "Slot"]

_MIN_SHARED_TOKENS = 32
"""Prefixes shorter than this are evaluated in the slot itself: a holder costs one more batch step to fill."""


class BatchDecodeError(ConstrainedError, RuntimeError):
    """``llama_decode`` failed for this sequence even when evaluated alone; the other sequences went on."""

    def __init__(self, code: int, seq_id: int) -> None:
        self.code = code
        """llama_decode's return value (1 no KV room, 2 aborted, -1 invalid batch, < -1 fatal)."""
        self.seq_id = seq_id
        super().__init__(f"llama_decode failed with code {code} for sequence {seq_id} (evaluated alone); its "
                         "tokens were taken back out of the KV, the other sequences of the batch went on")


class PrefixStore(Protocol):
    """Where prefix holders load their KV from and save it to (`agent.serve.prefix_cache.PrefixCache`)."""

    def restore(self, model: KVSequence, prompt: Sequence[int], prefix_len: int) -> bool: ...

    def save(self, model: KVSequence, prompt: Sequence[int], prefix_len: int) -> bool: ...


class KVSequence:
    """One sequence id of a `BatchedModel`'s context: the token ids its KV cells hold, and their rollback."""

    def __init__(self, batch: BatchedModel, seq_id: int) -> None:
        self.batch = batch
        self.seq_id = seq_id
        """llama.cpp's sequence id."""
        self._tokens: list[int] = []

    @property
    def n_ctx(self) -> int:
        """The most tokens this sequence may hold (the per-request context window)."""
        return self.batch.n_ctx

    @property
    def n_past(self) -> int:
        """Tokens in this sequence's KV."""
        return len(self._tokens)

    @property
    def tokens(self) -> list[int]:
        """The token ids in this sequence's KV, in order."""
        return list(self._tokens)

    @property
    def has_logits(self) -> bool:
        """Always False: a sequence keeps no logits between generations (its next one evaluates a token)."""
        return False

    def rollback(self, n_past: int) -> None:
        """Take every token after the first ``n_past`` out of this sequence's KV (cells other sequences share
        stay theirs)."""
        if not 0 <= n_past <= self.n_past:
            raise ValueError(f"rollback target {n_past} outside [0, {self.n_past}]")
        if n_past == self.n_past:
            return
        with self.batch.lock:
            self.batch.remove(self.seq_id, n_past)
            del self._tokens[n_past:]

    def save_sequence_state(self, path: str | os.PathLike[str], n_tokens: int) -> bool:
        """Write the KV of the first ``n_tokens`` to ``path`` (llama.cpp's sequence-state format)."""
        import llama_cpp

        with self.batch.lock:
            self.rollback(n_tokens)
            ids = (llama_cpp.llama_token * max(n_tokens, 1))(*self._tokens)
            return bool(llama_cpp.llama_state_seq_save_file(self.batch.ctx, os.fsencode(path), self.seq_id, ids,
                                                            n_tokens))

    def load_sequence_state(self, path: str | os.PathLike[str]) -> list[int] | None:
        """Replace this sequence's KV with a sequence-state file's; its ids, or None (and an empty KV)."""
        import llama_cpp

        with self.batch.lock:
            self.rollback(0)
            capacity = self.n_ctx
            ids = (llama_cpp.llama_token * capacity)()
            count = ctypes.c_size_t(0)
            read = llama_cpp.llama_state_seq_load_file(self.batch.ctx, os.fsencode(path), self.seq_id, ids, capacity,
                                                       ctypes.byref(count))
            if not read:
                self.batch.remove(self.seq_id, 0)
                return None
            self._tokens = list(ids[: count.value])
            return self.tokens

    def adopt(self, source: KVSequence, n_tokens: int) -> None:
        """Make this sequence's KV the first ``n_tokens`` of ``source``'s: its cells are shared, not copied."""
        import llama_cpp

        with self.batch.lock:
            if n_tokens > source.n_past:
                raise ValueError(f"sequence {source.seq_id} holds {source.n_past} tokens, not {n_tokens}")
            self.batch.remove(self.seq_id, 0)
            self._tokens = []
            llama_cpp.llama_memory_seq_cp(self.batch.memory, source.seq_id, self.seq_id, 0, n_tokens)
            self._tokens = source._tokens[:n_tokens]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(seq_id={self.seq_id}, n_past={self.n_past})"


class Slot(KVSequence):
    """One sequence of a batch that generates: what a `LlamaModel` offers the decode loop and the agent engine
    (tokenizer, vocabulary, KV tokens, rollback, prefix reuse), for its own sequence id.

    `constrained.decode` on a slot runs in the batch (`submit`). One generation at a time per slot; several
    slots from several threads (or several `submit` calls from one) decode together.
    """

    def __init__(self, batch: BatchedModel, seq_id: int) -> None:
        super().__init__(batch, seq_id)
        self._running: _Run | None = None

    # -- what a LlamaModel offers, delegated ------------------------------------------------------------------------

    @property
    def model(self) -> LlamaModel:
        """The batch's `LlamaModel` (tokenizer and vocabulary; its own context is not this slot's)."""
        return self.batch.model

    @property
    def vocabulary(self) -> Vocabulary:
        return self.batch.model.vocabulary

    @property
    def llama(self) -> Any:
        return self.batch.model.llama

    @property
    def path(self) -> Path:
        return self.batch.model.path

    @property
    def sha256(self) -> str:
        return self.batch.model.sha256

    @property
    def chat_template(self) -> str | None:
        return self.batch.model.chat_template

    @property
    def n_vocab(self) -> int:
        return self.batch.model.n_vocab

    def tokenize(self, text: str | bytes, *, add_bos: bool = False, special: bool = False) -> list[int]:
        return self.batch.model.tokenize(text, add_bos=add_bos, special=special)

    def tokenize_untrusted(self, text: str) -> list[int]:
        return self.batch.model.tokenize_untrusted(text)

    def detokenize(self, ids: Sequence[int]) -> bytes:
        return self.batch.model.detokenize(ids)

    def token_bytes(self, token_id: int) -> bytes:
        return self.batch.model.token_bytes(token_id)

    # -- KV reuse ---------------------------------------------------------------------------------------------------

    def reuse_prefix(self, prompt: Sequence[int]) -> list[int]:
        """Keep the longest KV prefix shared with ``prompt`` and roll back the rest; return the ids still to
        evaluate (at least one: a slot keeps no logits)."""
        keep = 0
        limit = min(len(self._tokens), len(prompt))
        while keep < limit and self._tokens[keep] == prompt[keep]:
            keep += 1
        keep = min(keep, len(prompt) - 1) if prompt else 0
        self.rollback(keep)
        return list(prompt[keep:])

    def share_prefix(self, prefix: Sequence[int], store: PrefixStore | None = None) -> SharedPrefix:
        """Start this slot's KV with ``prefix`` evaluated once for every slot: a holder sequence keeps it (filled
        by the first slot that asks, others wait for it; loaded from ``store`` when it has the prefix, and saved
        to it after an evaluation) and its cells are shared into this slot.

        Returns:
            How many leading tokens of ``prefix`` the slot's KV holds now (all of them, or none for a prefix too
            short to share: the slot's own KV is then left as it was), and whether this call evaluated them.

        Raises:
            BatchDecodeError: evaluating the prefix failed.
        """
        prefix = list(prefix)
        if len(prefix) < self.batch.min_shared_tokens or len(prefix) > self.n_ctx:
            return SharedPrefix(n_tokens=0, evaluated=False)
        if self._tokens[: len(prefix)] == prefix:
            return SharedPrefix(n_tokens=len(prefix), evaluated=False)
        holder, evaluated = self.batch.holder_for(prefix, store)
        try:
            self.adopt(holder, len(prefix))
        finally:
            self.batch.release_holder(holder)
        return SharedPrefix(n_tokens=len(prefix), evaluated=evaluated)

    # -- decoding ---------------------------------------------------------------------------------------------------

    def submit(self, prompt_tokens: Sequence[int] | None, *, matcher: Cursor[Any] | None = None, max_tokens: int,
               sampling: SamplingParams = SamplingParams(), stop_token_ids: Sequence[int] = (),
               forced_batching: bool = False, on_token: Callable[[int, bytes], None] | None = None,
               cancel: CancelSignal | None = None) -> Future[DecodeResult]:
        """Start a generation on this slot in the batch (the arguments of `constrained.decode`); its future holds
        the `DecodeResult`, or the error that ended it (`MaskError`, `BatchDecodeError`...).

        Raises:
            ModelStateError: the slot is still generating, or the batch is closed.
            ContextOverflowError: the prompt does not fit in the slot's window.
        """
        if max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
        bad = [i for i in prompt_tokens or () if not 0 <= i < self.n_vocab]
        if bad:
            raise ValueError(f"token ids outside [0, {self.n_vocab}): {bad[:5]}")
        with self.batch.lock:
            if self._running is not None:
                raise ModelStateError(f"slot {self.seq_id} is still generating: one generation per slot at a time")
            generation = Generation.after(self, prompt_tokens, matcher=matcher, max_tokens=max_tokens,
                                          sampling=sampling, stop_token_ids=stop_token_ids,
                                          forced_batching=forced_batching, on_token=on_token, cancel=cancel)
            run = _Run(sequence=self, generation=generation)
            self._running = run
        self.batch.enqueue(run)
        return run.future

    @property
    def is_generating(self) -> bool:
        """A generation of this slot is queued or running."""
        return self._running is not None

    def _ended(self) -> None:
        self._running = None


@dataclass(frozen=True, kw_only=True)
class SharedPrefix:
    """What `Slot.share_prefix` did."""

    n_tokens: int
    """Leading tokens of the prefix the slot's KV holds now (0: too short to share, nothing done)."""
    evaluated: bool
    """This call evaluated them (the first to ask for the prefix, and no store had it): they were not reused."""


@dataclass(eq=False)
class _Run:
    """One unit of work in the batch: a generation on a slot, or a prefix evaluated into a holder."""

    sequence: KVSequence
    generation: Generation | None = None
    """None for a prefix fill: ``prefill`` is evaluated, nothing is sampled."""
    prefill: list[int] = field(default_factory=list)
    future: Future[Any] = field(default_factory=Future)
    n_evals: int = 0
    """Batches that evaluated this run's ids since its last sample."""

    @property
    def pending(self) -> list[int]:
        return self.generation.pending if self.generation is not None else self.prefill

    def take(self, limit: int) -> list[int]:
        if self.generation is not None:
            return self.generation.take_pending(limit)
        ids, self.prefill = self.prefill[:limit], self.prefill[limit:]
        return ids


@dataclass(eq=False)
class _Holder:
    sequence: KVSequence
    key: tuple[int, ...] | None = None
    filled: bool = False
    users: int = 0
    last_used: float = 0.0


class BatchedModel:
    """One loaded model decoding up to ``n_slots`` sequences at once (see the module docstring).

    Args:
        model: the loaded `LlamaModel` whose weights, tokenizer and vocabulary the batch uses (its own context is
            left alone).
        n_slots: sequences that may generate at once.
        n_ctx: the context window of each slot.
        n_threads: llama.cpp threads (None: the model's own settings).
        n_batch: most tokens per ``llama_decode`` (prompts longer than what is left are evaluated in chunks).
        n_holders: shared prefixes kept at once.
    """

    def __init__(self, model: LlamaModel, *, n_slots: int, n_ctx: int = 4096, n_threads: int | None = None,
                 n_batch: int = 512, n_holders: int = 2) -> None:
        import llama_cpp

        if n_slots < 1:
            raise ValueError(f"n_slots must be >= 1, got {n_slots}")
        if n_holders < 1:
            raise ValueError(f"n_holders must be >= 1, got {n_holders}")
        self.model = model
        self.n_slots = n_slots
        self.n_ctx = n_ctx
        """Each slot's context window."""
        self.n_batch = n_batch
        self.min_shared_tokens = _MIN_SHARED_TOKENS
        """Prefixes shorter than this are not shared through a holder (`Slot.share_prefix` returns 0)."""
        params = llama_cpp.llama_context_default_params()
        source = model.llama.context_params
        params.n_ctx = n_ctx * (n_slots + 1)
        params.n_batch = params.n_ubatch = n_batch
        params.n_seq_max = n_slots + n_holders
        params.kv_unified = True
        params.swa_full = True
        params.n_threads = n_threads if n_threads is not None else source.n_threads
        params.n_threads_batch = n_threads if n_threads is not None else source.n_threads_batch
        params.type_k, params.type_v = source.type_k, source.type_v
        params.flash_attn_type = source.flash_attn_type
        ctx = llama_cpp.llama_init_from_model(model.llama.model, params)
        if not ctx:
            raise ModelStateError(f"llama.cpp could not create a context of {params.n_ctx} tokens for {n_slots} "
                                  "slots (lower --parallel or --n-ctx)")
        self.ctx = ctx
        """The batch's llama.cpp context (one unified KV cache)."""
        self.memory = llama_cpp.llama_get_memory(ctx)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self.lock = threading.RLock()
        """Held for every use of the context: a step, a rollback, a prefix copy, a state file."""
        self.slots: tuple[Slot, ...] = tuple(Slot(self, i) for i in range(n_slots))
        """The sequences that generate (sequence ids 0..n_slots-1)."""
        self._holders = [_Holder(KVSequence(self, n_slots + i)) for i in range(n_holders)]
        self._holders_changed = threading.Condition(self.lock)
        self._incoming: list[_Run] = []
        self._active: list[_Run] = []
        self._work = threading.Condition(threading.Lock())
        self._closed = False
        self.steps = 0
        """``step`` calls that evaluated something (for tests and benchmarks)."""
        self.failed_decodes = 0
        """``llama_decode`` calls that failed and were retried sequence by sequence."""
        self.prefixes_evaluated = 0
        """Shared prefixes evaluated into a holder (not loaded from a store)."""
        self._thread = threading.Thread(target=self._loop, name="ember-batch", daemon=True)
        self._thread.start()

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, n_slots: int, n_ctx: int = 4096, n_threads: int | None = None,
             n_batch: int = 512, n_holders: int = 2) -> BatchedModel:
        """Load a GGUF file for ``n_slots`` concurrent sequences of ``n_ctx`` tokens each."""
        model = LlamaModel.load(path, n_ctx=256, n_threads=n_threads, n_batch=256)  # its context stays unused
        try:
            return cls(model, n_slots=n_slots, n_ctx=n_ctx, n_threads=n_threads, n_batch=n_batch,
                       n_holders=n_holders)
        except BaseException:
            model.close()
            raise

    @property
    def kv_bytes_per_token(self) -> int:
        """KV cache bytes one token of one sequence takes (keys and values of every layer)."""
        import llama_cpp

        model = self.model.llama.model
        n_head, n_head_kv = llama_cpp.llama_model_n_head(model), llama_cpp.llama_model_n_head_kv(model)
        head_dim = llama_cpp.llama_model_n_embd(model) // max(n_head, 1)
        element = {1: 2, 0: 4}.get(self.model.llama.context_params.type_k, 2)  # f16 (1) by default, f32 (0)
        return 2 * llama_cpp.llama_model_n_layer(model) * n_head_kv * head_dim * element

    @property
    def kv_capacity_bytes(self) -> int:
        """Bytes of the KV cache allocated for every slot's window and the prefix holders' one."""
        return self.kv_bytes_per_token * self.n_ctx * (self.n_slots + 1)

    def close(self) -> None:
        """Stop the batch thread (generations still running end with ``ModelStateError``) and free the context
        and the model."""
        import llama_cpp

        with self._work:
            self._closed = True
            self._work.notify_all()
        self._thread.join(timeout=60)
        with self.lock:
            for run in self._incoming + self._active:
                self._end(run, error=ModelStateError("the batch was closed"))
            self._incoming, self._active = [], []
            if self.ctx is not None:
                llama_cpp.llama_batch_free(self._batch)
                llama_cpp.llama_free(self.ctx)
                self.ctx = None
        self.model.close()

    def __enter__(self) -> BatchedModel:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- runs ---------------------------------------------------------------------------------------------------

    def enqueue(self, run: _Run) -> None:
        """Hand a run to the batch thread (it joins the next step)."""
        with self._work:
            if self._closed:
                self._end(run, error=ModelStateError("the batch is closed"))
                return
            self._incoming.append(run)
            self._work.notify()

    def _loop(self) -> None:
        while True:
            with self._work:
                while not self._incoming and not self._active and not self._closed:
                    self._work.wait()
                if self._closed:
                    return
            self.step()

    def step(self) -> None:
        """Advance every active run by one ``llama_decode`` (the batch thread calls it; see the module docstring)."""
        with self.lock:
            with self._work:
                self._active += self._incoming
                self._incoming = []
            ready = [run for run in self._active if self._wants_logits(run)]
            parts = self._parts(ready)
            if not parts:
                return
            self.steps += 1
            self._evaluate(parts)

    def _wants_logits(self, run: _Run) -> bool:
        """Run a generation's steps without logits; a finished or failed run leaves the batch here."""
        if run.generation is None:
            if run.prefill:
                return True
            self._end(run, result=run.sequence.n_past)
            return False
        try:
            if run.generation.wants_logits(run.sequence.n_past, run.sequence.n_ctx):
                return True
            self._end(run, result=run.generation.result())
        except Exception as error:  # this sequence's failure (a callback, the matcher): the others go on
            self._end(run, error=error)
        return False

    def _parts(self, ready: list[_Run]) -> list[tuple[_Run, list[int], bool]]:
        """Each run's ids for this step, generations before prompt chunks, at most ``n_batch`` in all: (run, ids,
        whether its logits are read)."""
        budget = self.n_batch
        parts = []
        for run in sorted(ready, key=lambda r: len(r.pending)):
            if budget <= 0:
                break
            ids = run.take(budget)
            budget -= len(ids)
            parts.append((run, ids, run.generation is not None and not run.pending))
        return parts

    def _evaluate(self, parts: list[tuple[_Run, list[int], bool]]) -> None:
        before = {id(run): run.sequence.n_past for run, _, _ in parts}
        code = self._decode(parts)
        if code == 1 and self._evict_holders():
            self._undo(parts, before)
            code = self._decode(parts)
        if code == 0:
            self._after(parts)
            return
        # -- a failed batch: undo it, then each sequence alone; the one that fails alone fails by itself --
        self.failed_decodes += 1
        self._undo(parts, before)
        for part in parts:
            run, ids, _ = part
            code = self._decode([part])
            if code == 0:
                self._after([part])
            else:
                self._undo([part], before)
                self._end(run, error=BatchDecodeError(code, run.sequence.seq_id))

    def _decode(self, parts: list[tuple[_Run, list[int], bool]]) -> int:
        """One llama_decode of every part's ids at its sequence's next positions."""
        import llama_cpp

        batch = self._batch
        i = 0
        for run, ids, logits in parts:
            seq_id, start = run.sequence.seq_id, run.sequence.n_past
            for offset, token in enumerate(ids):
                batch.token[i] = token
                batch.pos[i] = start + offset
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = seq_id
                batch.logits[i] = 1 if logits and offset == len(ids) - 1 else 0
                i += 1
        batch.n_tokens = i
        return int(llama_cpp.llama_decode(self.ctx, batch))

    def _undo(self, parts: list[tuple[_Run, list[int], bool]], before: dict[int, int]) -> None:
        """Take a failed batch's cells back out of the KV (llama.cpp may keep the ubatches it finished)."""
        for run, _, _ in parts:
            self.remove(run.sequence.seq_id, before[id(run)])

    def _after(self, parts: list[tuple[_Run, list[int], bool]]) -> None:
        """The ids are in the KV: record them, and sample every run whose logits were read."""
        import llama_cpp

        index = 0
        for run, ids, logits in parts:
            run.sequence._tokens += ids
            run.n_evals += 1
            index += len(ids)
            if run.generation is None and not run.prefill:
                self._end(run, result=run.sequence.n_past)
            if not logits:
                continue
            assert run.generation is not None
            pointer = llama_cpp.llama_get_logits_ith(self.ctx, index - 1)
            try:
                if not pointer:
                    raise ModelStateError("llama_get_logits_ith returned NULL")
                run.generation.sample(np.ctypeslib.as_array(pointer, shape=(self.model.n_vocab,)),
                                      n_evals=run.n_evals)
                run.n_evals = 0
                if run.generation.finish is not None:
                    self._end(run, result=run.generation.result())
            except Exception as error:  # a MaskError, a callback's: this sequence only
                self._end(run, error=error)

    def _end(self, run: _Run, *, result: Any = None, error: BaseException | None = None) -> None:
        if run in self._active:
            self._active.remove(run)
        if isinstance(run.sequence, Slot):
            run.sequence._ended()
        if run.future.done():
            return
        if error is not None:
            run.future.set_exception(error)
        else:
            run.future.set_result(result)

    def remove(self, seq_id: int, start: int) -> None:
        """Drop a sequence's cells from position ``start`` on (shared cells stay with their other sequences)."""
        import llama_cpp

        if not llama_cpp.llama_memory_seq_rm(self.memory, seq_id, start, -1):
            raise ModelStateError(f"llama.cpp could not remove sequence {seq_id} from position {start}")

    # -- prefix holders -----------------------------------------------------------------------------------------

    def holder_for(self, prefix: list[int], store: PrefixStore | None = None) -> tuple[KVSequence, bool]:
        """The holder sequence of ``prefix``, filled (by this call, or by the one already filling it: this waits),
        and whether this call evaluated it; held for the caller until `release_holder`.

        Raises:
            BatchDecodeError: evaluating the prefix failed.
            ModelStateError: every holder is in use.
        """
        key = tuple(prefix)
        with self._holders_changed:
            while True:
                holder = next((h for h in self._holders if h.key == key), None)
                if holder is not None and holder.filled:
                    holder.users += 1
                    holder.last_used = time.monotonic()
                    return holder.sequence, False
                if holder is None:
                    break
                self._holders_changed.wait()
            free = [h for h in self._holders if h.users == 0 and (h.filled or h.key is None)]
            if not free:
                raise ModelStateError("every prefix holder is in use")
            holder = min(free, key=lambda h: (h.key is not None, h.last_used))
            holder.sequence.rollback(0)
            holder.key, holder.filled, holder.users = key, False, 1
        try:
            evaluated = self._fill(holder.sequence, prefix, store)
        except BaseException:
            with self._holders_changed:
                holder.sequence.rollback(0)
                holder.key, holder.users = None, 0
                self._holders_changed.notify_all()
            raise
        with self._holders_changed:
            holder.filled = True
            holder.last_used = time.monotonic()
            self._holders_changed.notify_all()
        return holder.sequence, evaluated

    def release_holder(self, sequence: KVSequence) -> None:
        with self._holders_changed:
            holder = next(h for h in self._holders if h.sequence is sequence)
            holder.users -= 1

    def _fill(self, sequence: KVSequence, prefix: list[int], store: PrefixStore | None) -> bool:
        """Load the prefix from the store, or evaluate it (and save it there); True when it was evaluated."""
        if store is not None and store.restore(sequence, prefix, len(prefix)):
            return False
        run = _Run(sequence=sequence, prefill=list(prefix))
        self.enqueue(run)
        run.future.result()
        self.prefixes_evaluated += 1
        if store is not None:
            store.save(sequence, prefix, len(prefix))
        return True

    def _evict_holders(self) -> bool:
        """Free the cells of filled holders no slot is copying from (called when llama.cpp finds no KV room)."""
        evicted = False
        for holder in self._holders:
            if holder.filled and holder.users == 0:
                holder.sequence.rollback(0)
                holder.key, holder.filled = None, False
                evicted = True
        return evicted

    def __repr__(self) -> str:
        return f"BatchedModel(path={str(self.model.path)!r}, n_slots={self.n_slots}, n_ctx={self.n_ctx})"

