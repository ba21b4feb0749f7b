"""Vocabulary: every token's exact bytes and role, read from llama.cpp itself — never decoded lossily.

Owns the mapping token id → raw bytes (``llama_token_to_piece`` with special rendering on, the buffer grown until
the whole piece fits), which ids are ordinary text (llama attribute NORMAL or BYTE), which are special (control,
user-defined, unknown, unused — by their rendered text), and which end generation (``llama_vocab_is_eog``).
Refuses to guess: nothing is decoded to ``str`` except the *names* of special tokens, so partial UTF-8 pieces
(byte-fallback tokens, split multi-byte characters) stay exactly as the model emits them.

    GGUF file ──(vocab-only load)──┐
                                    ├─► llama_vocab* ──► tokens / attrs / EOG ──► Vocabulary (frozen)
    loaded llama_cpp.Llama ─────────┘
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # llama_cpp is imported lazily: pure-logic users and tests need no native library
    import llama_cpp

__all__ = ["Vocabulary"]

_NORMAL_ATTRS = 1 << 2 | 1 << 5  # LLAMA_TOKEN_ATTR_NORMAL | LLAMA_TOKEN_ATTR_BYTE


@dataclass(frozen=True, kw_only=True, eq=False)
class Vocabulary:
    """Every token's exact bytes and role. Token id == index into ``tokens``."""

    tokens: tuple[bytes, ...]
    """Raw bytes of each token's piece (``llama_token_to_piece``, full length, special rendering on)."""
    normal_ids: frozenset[int] | None = None
    """Ids of ordinary text tokens (llama attr NORMAL or BYTE) that may appear inside a grammar by their bytes.
    Everything else (control, user-defined, unknown, unused) is special: never allowed unless a grammar names it.
    ``None`` at construction means "every id that is neither EOS nor in ``special_ids_by_name``"; after
    construction it is always a frozenset."""
    eos_token_ids: frozenset[int] = field(default_factory=frozenset)
    """End-of-generation ids (EOS, EOT, EOM...): allowed only in accepting states, and they end the sequence."""
    special_ids_by_name: dict[str, int] = field(default_factory=dict)
    """Text of every special (non-normal, EOS included) token → its id, e.g. ``{"<tool_call>": 151657}``. When two special
    tokens render to the same text, the lower id wins; tokens rendering to no bytes have no name."""
    name: str = ""
    """Human label (model file name) for messages and benchmarks."""

    def __post_init__(self) -> None:
        if not isinstance(self.tokens, tuple):
            object.__setattr__(self, "tokens", tuple(self.tokens))
        n = len(self.tokens)
        eos = frozenset(self.eos_token_ids)
        object.__setattr__(self, "eos_token_ids", eos)
        if self.normal_ids is None:
            excluded = eos | frozenset(self.special_ids_by_name.values())
            object.__setattr__(self, "normal_ids", frozenset(range(n)) - excluded)
        else:
            object.__setattr__(self, "normal_ids", frozenset(self.normal_ids))
        assert self.normal_ids is not None
        for label, ids in (("normal_ids", self.normal_ids), ("eos_token_ids", eos),
                           ("special_ids_by_name", self.special_ids_by_name.values())):  # fmt: skip
            bad = [i for i in ids if not 0 <= i < n]
            if bad:
                raise ValueError(f"Vocabulary {label} has ids outside [0, {n}): {sorted(bad)[:5]}")
        if self.normal_ids & eos:
            raise ValueError(f"ids both normal and EOS: {sorted(self.normal_ids & eos)[:5]}")

    # -- construction --------------------------------------------------------------------------------------------

    @classmethod
    def from_tokens(
        cls,
        tokens: Iterable[bytes],
        *,
        eos_token_ids: Iterable[int] = (),
        special_ids_by_name: Mapping[str, int] | None = None,
        normal_ids: Iterable[int] | None = None,
        name: str = "",
    ) -> Vocabulary:
        """Build a vocabulary from explicit pieces, for tests of pure logic (no llama.cpp involved)."""
        return cls(
            tokens=tuple(bytes(t) for t in tokens),
            normal_ids=None if normal_ids is None else frozenset(normal_ids),
            eos_token_ids=frozenset(eos_token_ids),
            special_ids_by_name=dict(special_ids_by_name or {}),
            name=name,
        )

    @classmethod
    def from_gguf(cls, path: str | os.PathLike[str]) -> Vocabulary:
        """Read the vocabulary of any GGUF file (vocab-only files included) without loading weights."""
        import llama_cpp
        from llama_cpp import _internals

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no GGUF file at {path}")
        _ensure_backend()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        model = _internals.LlamaModel(path_model=str(path), params=params, verbose=False)
        try:
            return cls._from_vocab_handle(model.vocab, name=path.name)
        finally:
            model.close()

    @classmethod
    def from_llama(cls, llm: llama_cpp.Llama) -> Vocabulary:
        """Read the vocabulary of a loaded ``llama_cpp.Llama``."""
        return cls._from_vocab_handle(llm._model.vocab, name=Path(llm.model_path).name)

    @classmethod
    def _from_vocab_handle(cls, vocab: Any, *, name: str) -> Vocabulary:
        import llama_cpp

        n = llama_cpp.llama_vocab_n_tokens(vocab)
        tokens: list[bytes] = []
        normal: list[int] = []
        eos: list[int] = []
        specials: dict[str, int] = {}
        size = 64
        buffer = ctypes.create_string_buffer(size)
        to_piece, get_attr, is_eog = (
            llama_cpp.llama_token_to_piece, llama_cpp.llama_vocab_get_attr, llama_cpp.llama_vocab_is_eog
        )  # fmt: skip
        for token_id in range(n):
            length = to_piece(vocab, token_id, buffer, size, 0, True)
            if length < 0:  # buffer too small: -length is the size needed
                size = max(-length, 2 * size)
                buffer = ctypes.create_string_buffer(size)
                length = to_piece(vocab, token_id, buffer, size, 0, True)
                if length < 0:
                    raise RuntimeError(f"llama_token_to_piece failed for token {token_id} of {name}")
            piece = buffer.raw[:length]
            tokens.append(piece)
            if is_eog(vocab, token_id):
                eos.append(token_id)
            elif get_attr(vocab, token_id) & _NORMAL_ATTRS:
                normal.append(token_id)
                continue
            if piece:  # special or EOS: named by its rendered text so grammars can say (?&<|im_end|>)
                specials.setdefault(piece.decode("utf-8", errors="backslashreplace"), token_id)
        return cls(
            tokens=tuple(tokens),
            normal_ids=frozenset(normal),
            eos_token_ids=frozenset(eos),
            special_ids_by_name=specials,
            name=name,
        )

    # -- facts ---------------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.tokens)

    @cached_property
    def fingerprint(self) -> str:
        """sha256 hex over every token's bytes and role (normal / EOS / special name); equal iff same vocabulary."""
        digest = hashlib.sha256(b"ember.vocabulary.v1\0")
        digest.update(len(self.tokens).to_bytes(8, "little"))
        for piece in self.tokens:
            digest.update(len(piece).to_bytes(4, "little"))
            digest.update(piece)
        for label, ids in ((b"normal", self.normal_ids), (b"eos", self.eos_token_ids)):
            assert ids is not None
            digest.update(label + len(ids).to_bytes(8, "little"))
            digest.update(b"".join(i.to_bytes(4, "little") for i in sorted(ids)))
        for special_name, token_id in sorted(self.special_ids_by_name.items(), key=lambda item: item[1]):
            encoded = special_name.encode("utf-8", errors="surrogatepass")
            digest.update(token_id.to_bytes(4, "little") + len(encoded).to_bytes(4, "little") + encoded)
        return digest.hexdigest()

    def is_special(self, token_id: int) -> bool:
        """Whether the id is not an ordinary text token (special or EOS)."""
        assert self.normal_ids is not None
        return token_id not in self.normal_ids

    def __repr__(self) -> str:
        return (
            f"Vocabulary(name={self.name!r}, n_tokens={len(self.tokens)}, n_normal={len(self.normal_ids or ())}, "
            f"eos={sorted(self.eos_token_ids)}, n_special={len(self.special_ids_by_name)})"
        )


_backend_ready = False


def _ensure_backend() -> None:
    global _backend_ready
    if not _backend_ready:
        import llama_cpp

        llama_cpp.llama_backend_init()
        _backend_ready = True
