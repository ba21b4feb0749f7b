"""LlamaModel: the one narrow seam between Ember and llama-cpp-python (0.3.36, unpatched).

Owns a loaded ``llama_cpp.Llama`` and exposes exactly what the decode loop and the agent engine need: exact-byte
tokenization, batched evaluation into the KV cache, a zero-copy view of the last position's logits, and KV
truncation (rollback). Refuses to let untrusted text become control tokens (``tokenize_untrusted``) and refuses
to read logits that do not belong to the last evaluated position.

    tokens ──► eval(ids) ──► llama_decode (Llama.eval: n_batch chunks, logits only for the last position)
                               │
                               ▼
               logits() = np.ctypeslib.as_array(llama_get_logits_ith(ctx, -1))   (a view, valid until next eval)
    rollback(n) ──► llama_memory_seq_rm(llama_get_memory(ctx), 0, n, -1) and Llama.n_tokens = n
                    (+ the kept logits of a batch that ended at n, so regenerating is bit-identical)

State lives in the wrapped ``Llama`` (``n_tokens``, ``input_ids``) so that ``model.llama`` stays consistent
for callers who also use llama-cpp-python's own API. SWA models (Gemma 3) are loaded with ``swa_full=True``:
without the full-size sliding-window cache a rollback would silently attend to evicted positions.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import warnings
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .errors import ConstrainedError
from .vocabulary import Vocabulary

if TYPE_CHECKING:
    import llama_cpp

__all__ = ["LlamaModel", "ContextOverflowError", "ModelStateError", "UnrepresentableTextError"]


_MAX_SNAPSHOTS = 4
"""Batch-end logits kept for exact rollback (each n_vocab float32s: 0.2 MB for SmolLM2, 1 MB for Gemma 3)."""
_AMX_BUILD = b"AMX_INT8 = 1"
_AMX_WARNING = ("ember: this llama-cpp-python build runs llama.cpp's AMX matmul, which segfaulted on every batched "
                "decode with 0.3.36 (Intel Sapphire Rapids, 2026-12-03); if it crashes, rebuild it without: "
                'CMAKE_ARGS="-DCMAKE_C_FLAGS=-mno-amx-int8 -DCMAKE_CXX_FLAGS=-mno-amx-int8" pip install '
                "--no-cache-dir --force-reinstall llama-cpp-python==0.3.36 (the Makefile does)")
"""A build whose system info says this warns at load: a segfault names nothing, this names the fix."""


class ContextOverflowError(ConstrainedError, ValueError):
    """Evaluating the tokens would exceed the context window."""

    def __init__(self, n_past: int, n_new: int, n_ctx: int) -> None:
        self.n_past = n_past
        self.n_new = n_new
        self.n_ctx = n_ctx
        super().__init__(
            f"cannot evaluate {n_new} tokens after {n_past}: the context holds {n_ctx} "
            "(load the model with a larger n_ctx, or shorten the prompt)"
        )


class UnrepresentableTextError(ConstrainedError, ValueError):
    """The vocabulary has no tokens for some bytes of the text; llama.cpp would silently drop them.

    Real case: SmolLM2's byte-level BPE lacks single-byte tokens for 0x04, 0x06, 0x13, 0x14, 0x16, 0x1D,
    0xC0, 0xC1, 0xF1, 0xF2 and 0xF5–0xFF, so e.g. U+40000 or a raw ``\\x04`` cannot be spelled.
    """

    def __init__(self, text: bytes, produced: bytes) -> None:
        self.text = text
        """The bytes asked for."""
        self.produced = produced
        """The bytes the tokens actually spell."""
        lost = sorted(set(text) - set(produced))
        super().__init__(
            f"the vocabulary cannot represent this text exactly (bytes {[hex(b) for b in lost][:8]} would be "
            f"lost): {text[:80]!r}"
        )


class ModelStateError(ConstrainedError, RuntimeError):
    """The model was asked for something its current state cannot give (e.g. logits right after a rollback)."""


class LlamaModel:
    """A loaded GGUF model: tokenizer, KV cache and logits behind one small API."""

    def __init__(self, llm: llama_cpp.Llama, *, path: str | os.PathLike[str] | None = None) -> None:
        """Wrap an already loaded ``Llama`` (it must have been created with ``logits_all=False``)."""
        self.llama = llm
        """The wrapped ``llama_cpp.Llama``."""
        self.path = Path(path if path is not None else llm.model_path)
        """The GGUF file."""
        self._has_logits = False
        self._snapshots: dict[int, np.ndarray] = {}
        self._restored: np.ndarray | None = None

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_batch: int = 512,
        verbose: bool = False,
    ) -> LlamaModel:
        """Load a GGUF file.

        ``n_threads=None`` keeps llama-cpp-python's defaults (half the cores for generation, all for prompt
        batches); an explicit ``n_threads`` is used for both. Not "all cores" by default: llama.cpp's threads
        spin while waiting, and on a busy 2-core machine 2 threads measured 1.3 s/token against 77 ms with 1.
        """
        import llama_cpp

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no GGUF file at {path}")
        if _AMX_BUILD in llama_cpp.llama_print_system_info():
            warnings.warn(_AMX_WARNING, RuntimeWarning, stacklevel=2)
        llm = llama_cpp.Llama(
            model_path=str(path), n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch, n_threads=n_threads,
            n_threads_batch=n_threads, logits_all=False, swa_full=True, verbose=verbose,
        )  # fmt: skip
        return cls(llm, path=path)

    def close(self) -> None:
        """Free the native model and context."""
        self.llama.close()

    def __enter__(self) -> LlamaModel:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- facts -----------------------------------------------------------------------------------------------

    @cached_property
    def vocabulary(self) -> Vocabulary:
        """Exact token bytes and roles (built on first use)."""
        return Vocabulary.from_llama(self.llama)

    @cached_property
    def chat_template(self) -> str | None:
        """The ``tokenizer.chat_template`` stored in the GGUF metadata, if any."""
        return self.llama.metadata.get("tokenizer.chat_template")

    @property
    def n_ctx(self) -> int:
        """Context window in tokens."""
        return self.llama.n_ctx()

    @property
    def n_vocab(self) -> int:
        """Number of token ids (the logits length)."""
        return self.llama.n_vocab()

    @cached_property
    def sha256(self) -> str:
        """sha256 hex of the GGUF file (computed on first use)."""
        digest = hashlib.sha256()
        with open(self.path, "rb") as source:
            while chunk := source.read(1 << 20):
                digest.update(chunk)
        return digest.hexdigest()

    # -- tokens <-> bytes ------------------------------------------------------------------------------------

    def tokenize(self, text: str | bytes, *, add_bos: bool = False, special: bool = False) -> list[int]:
        """llama.cpp's tokenizer, checked to be lossless. ``special=True`` parses control-token text (trusted
        template text only).

        Raises:
            UnrepresentableTextError: the tokens would not spell ``text`` exactly (llama.cpp drops bytes that the
                vocabulary has no token for).
        """
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        if not data:
            return []
        ids = self.llama.tokenize(data, add_bos=add_bos, special=special)
        produced = self.detokenize(ids)
        if produced != data and add_bos and ids and ids[0] == self._bos_id:  # an added BOS spells no input
            produced = self.detokenize(ids[1:])
        if produced != data and not (self._adds_space_prefix and produced == b" " + data):
            raise UnrepresentableTextError(data, produced)
        return ids

    @cached_property
    def _bos_id(self) -> int:
        import llama_cpp

        return llama_cpp.llama_vocab_bos(self.llama._model.vocab)

    @cached_property
    def _adds_space_prefix(self) -> bool:
        """SentencePiece models with ``add_space_prefix`` spell a leading space llama.cpp adds on purpose."""
        return self.llama.metadata.get("tokenizer.ggml.add_space_prefix", "false") == "true"

    def tokenize_untrusted(self, text: str) -> list[int]:
        """Tokenize user / tool text so that it can never forge a control token: only normal ids come out.

        llama.cpp matches USER_DEFINED tokens (Qwen's ``<tool_call>``) even with special parsing off. Wherever a
        non-normal id appears, the text is split inside that token's text and the halves are tokenized
        separately, so the same bytes come out as ordinary tokens. ``detokenize`` of the result is ``text``'s
        UTF-8 bytes.

        Raises:
            UnrepresentableTextError: as ``tokenize``.
        """
        return self._normal_tokens(text.encode("utf-8"))

    def _normal_tokens(self, data: bytes) -> list[int]:
        if not data:
            return []
        ids = self.tokenize(data)
        vocab = self.vocabulary
        offender = next((i for i in ids if vocab.is_special(i)), None)
        if offender is None:
            return ids
        split = _split_point(data, vocab.tokens[offender])
        if split is None:  # one character that tokenizes to a special id: spell it with byte tokens
            return self._byte_tokens(data)
        return self._normal_tokens(data[:split]) + self._normal_tokens(data[split:])

    def _byte_tokens(self, data: bytes) -> list[int]:
        by_bytes = self._single_byte_ids
        try:
            return [by_bytes[b] for b in data]
        except KeyError:
            raise ValueError(f"cannot spell {data!r} with ordinary tokens of {self.path.name}") from None

    @cached_property
    def _single_byte_ids(self) -> dict[int, int]:
        vocab = self.vocabulary
        table: dict[int, int] = {}
        for token_id in sorted(vocab.normal_ids or ()):
            piece = vocab.tokens[token_id]
            if len(piece) == 1:
                table.setdefault(piece[0], token_id)
        return table

    def detokenize(self, ids: Sequence[int]) -> bytes:
        """Exact bytes of the ids (special tokens rendered as their text); the inverse of ``tokenize``."""
        tokens = self.vocabulary.tokens
        return b"".join(tokens[i] for i in ids)

    def token_bytes(self, token_id: int) -> bytes:
        """Exact bytes of one token."""
        return self.vocabulary.tokens[token_id]

    # -- KV cache and logits -------------------------------------------------------------------------------------

    @property
    def n_past(self) -> int:
        """Number of tokens in the KV cache."""
        return self.llama.n_tokens

    @property
    def tokens(self) -> list[int]:
        """The token ids in the KV cache, in order."""
        return self.llama.input_ids[: self.llama.n_tokens].tolist()

    @property
    def has_logits(self) -> bool:
        """Whether ``logits()`` holds the distribution after the last token in the KV cache."""
        return (self._has_logits or self._restored is not None) and self.n_past > 0

    def eval(self, ids: Sequence[int]) -> None:
        """Append ids to the KV cache in batches of ``n_batch``; afterwards ``logits()`` is the last position's.

        Raises:
            ContextOverflowError: the context window cannot hold them.
        """
        if not ids:
            return
        if self.n_past + len(ids) > self.n_ctx:
            raise ContextOverflowError(self.n_past, len(ids), self.n_ctx)
        n_vocab = self.n_vocab
        bad = [i for i in ids if not 0 <= i < n_vocab]
        if bad:
            raise ValueError(f"token ids outside [0, {n_vocab}): {bad[:5]}")
        self._has_logits = False
        self._restored = None
        self.llama.eval(list(ids))
        self._has_logits = True
        if len(ids) > 1:
            self._snapshot()

    def _snapshot(self) -> None:
        """Keep a copy of the logits that ended a multi-token batch (see ``rollback``)."""
        if len(self._snapshots) >= _MAX_SNAPSHOTS:
            del self._snapshots[min(self._snapshots)]
        self._snapshots[self.n_past] = self.logits().copy()

    def logits(self) -> np.ndarray:
        """float32[n_vocab] view of the logits for the last position in the KV cache (no copy).

        Normally the view aliases llama.cpp's output buffer; after a rollback onto a batch end it is the
        snapshot taken then. Either way it is valid until the next ``eval``/``rollback``: copy it to keep it,
        and do not write into it.
        """
        import llama_cpp

        if not self.has_logits:
            raise ModelStateError("no logits for the current position: eval() at least one token first")
        if self._restored is not None:
            return self._restored
        pointer = llama_cpp.llama_get_logits_ith(self.llama.ctx, -1)
        if not pointer:
            raise ModelStateError("llama_get_logits_ith returned NULL")
        return np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))

    def rollback(self, n_past: int) -> None:
        """Truncate the KV cache and token history to the first ``n_past`` tokens.

        Regenerating after a rollback is token-identical to a fresh run. That needs care: llama.cpp's CPU
        kernels differ numerically between a position computed as the last row of a batch and the same token
        evaluated alone (measured on SmolLM2: logits differ by up to 0.5, and greedy picks can flip). So the
        logits that end every multi-token batch (a prompt) are kept (a few, most recent); rolling back onto
        such a position restores them and ``has_logits`` stays true. Elsewhere no logits are available until
        the next ``eval`` (a single-token eval of the same token reproduces single-token logits exactly).
        """
        import llama_cpp

        if not 0 <= n_past <= self.n_past:
            raise ValueError(f"rollback target {n_past} outside [0, {self.n_past}]")
        if n_past == self.n_past:
            return
        memory = llama_cpp.llama_get_memory(self.llama.ctx)
        if memory is None or not llama_cpp.llama_memory_seq_rm(memory, 0, n_past, -1):
            raise ModelStateError(f"llama.cpp could not truncate the KV cache to {n_past} tokens")
        self.llama.n_tokens = n_past
        self.llama._requires_eval = True  # keep Llama's own generate() honest about the truncated state
        self._has_logits = False
        for position in [p for p in self._snapshots if p > n_past]:
            del self._snapshots[position]
        self._restored = self._snapshots.get(n_past)

    def reuse_prefix(self, prompt: Sequence[int]) -> list[int]:
        """Keep the longest KV prefix shared with ``prompt`` and roll back the rest; return the ids still to
        evaluate. The whole prompt is kept only when its logits are available (a kept batch end); otherwise its
        last token is evaluated again so that fresh logits exist."""
        cached = self.tokens
        limit = min(len(cached), len(prompt))
        keep = 0
        while keep < limit and cached[keep] == prompt[keep]:
            keep += 1
        self.rollback(keep)
        if keep == len(prompt) and not self.has_logits and keep > 0:
            keep -= 1
            self.rollback(keep)
        return list(prompt[keep:])

    # -- sequence-state files ------------------------------------------------------------------------------------

    def save_sequence_state(self, path: str | os.PathLike[str], n_tokens: int) -> bool:
        """Write the KV of the first ``n_tokens`` to ``path`` in llama.cpp's sequence-state format (the KV is cut to
        them first); False when llama.cpp could not write it."""
        import llama_cpp

        self.rollback(n_tokens)
        ids = (llama_cpp.llama_token * max(n_tokens, 1))(*self.tokens)
        return bool(llama_cpp.llama_state_seq_save_file(self.llama.ctx, os.fsencode(path), 0, ids, n_tokens))

    def load_sequence_state(self, path: str | os.PathLike[str]) -> list[int] | None:
        """Replace the KV with a sequence-state file's; its token ids, or None (and an empty KV) when llama.cpp
        could not read it. No logits are available after a load: the next decode evaluates at least one token."""
        import llama_cpp

        self.rollback(0)
        capacity = self.n_ctx
        ids = (llama_cpp.llama_token * capacity)()
        count = ctypes.c_size_t(0)
        read = llama_cpp.llama_state_seq_load_file(self.llama.ctx, os.fsencode(path), 0, ids, capacity,
                                                   ctypes.byref(count))
        if not read:
            memory = llama_cpp.llama_get_memory(self.llama.ctx)  # a failed load may leave any cells behind
            if memory is not None:
                llama_cpp.llama_memory_seq_rm(memory, 0, 0, -1)
            return None
        loaded = list(ids[: count.value])
        self.llama.input_ids[: len(loaded)] = loaded
        self.llama.n_tokens = len(loaded)
        self.llama._requires_eval = True
        return loaded

    def __repr__(self) -> str:
        return f"LlamaModel(path={str(self.path)!r}, n_ctx={self.n_ctx}, n_past={self.n_past})"


def _split_point(data: bytes, special: bytes) -> int | None:
    """A byte offset strictly inside the first occurrence of ``special`` in ``data`` (after its first character),
    or inside ``data`` when it does not literally occur; None when ``data`` is a single character."""
    characters = data.decode("utf-8", errors="surrogateescape")
    if len(characters) <= 1:
        return None
    position = data.find(special) if special else -1
    if position >= 0 and len(special.decode("utf-8", errors="surrogateescape")) > 1:
        first = special.decode("utf-8", errors="surrogateescape")[0]
        return position + len(first.encode("utf-8", errors="surrogateescape"))
    half = characters[: len(characters) // 2]
    return len(half.encode("utf-8", errors="surrogateescape"))
