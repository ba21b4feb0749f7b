"""The KV state of a shared prompt prefix (system + tools), kept on disk so a restarted server does not pay it again.

Owns the files only: which prefix of a prompt is worth keeping (`shared_prefix`: what every request with the same
system message and tools renders before the first user turn), the file that holds its KV state (named by the
model's sha256 and the prefix's token ids), saving it after a request evaluated it and restoring it before a
request that needs it. Uses llama.cpp's own sequence-state files (``llama_state_seq_save_file`` /
``llama_state_seq_load_file``: the KV cells and the token ids). Refuses a file whose tokens are not the prefix.

    prompt ids ─► shared_prefix (LCP with the same render and an empty user turn) ─► P ids
    model KV shares < P ids with the prompt and a file exists ─► restore (model rolled back to 0, then loaded)
    a request evaluated the P ids itself ─► save (the KV cut to P first; the rest is re-evaluated next time)

Within one process the engine's own prefix reuse already covers repeated prefixes; this cache is for the first
request after a start, and for a prefix that another prompt evicted from the single KV sequence.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from constrained.llama import LlamaModel

__all__ = ["PrefixCache", "common_prefix_length", "default_cache_dir"]


def default_cache_dir() -> Path:
    """``$EMBER_KV_CACHE``, else ``$XDG_CACHE_HOME/ember/kv``, else ``~/.cache/ember/kv``."""
    override = os.environ.get("EMBER_KV_CACHE")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ember" / "kv"


class PrefixCache:
    """Prefix KV files in one directory for one model."""

    def __init__(self, directory: str | os.PathLike[str], *, model_sha256: str, min_tokens: int = 64) -> None:
        self.directory = Path(directory)
        """Where the ``*.kv`` files live."""
        self.model_sha256 = model_sha256
        """The model the states belong to (part of every file name)."""
        self.min_tokens = min_tokens
        """Prefixes shorter than this are evaluated, not cached (a file costs more than it saves)."""
        self.saved = 0
        """Files written by this process."""
        self.restored = 0
        """Prefixes this process loaded from disk."""

    def path_for(self, prefix: Sequence[int]) -> Path:
        digest = hashlib.sha256(self.model_sha256.encode() + b"\0" + b",".join(str(t).encode() for t in prefix))
        return self.directory / f"{digest.hexdigest()[:40]}.kv"

    def restore(self, model: LlamaModel, prompt: Sequence[int], prefix_len: int) -> bool:
        """Load the prefix's KV state when the model does not hold it already; True when it was loaded."""
        if prefix_len < self.min_tokens or common_prefix_length(model.tokens, prompt) >= prefix_len:
            return False
        prefix = list(prompt[:prefix_len])
        path = self.path_for(prefix)
        if not path.is_file():
            return False
        import llama_cpp

        model.rollback(0)
        capacity = model.n_ctx
        tokens = (llama_cpp.llama_token * capacity)()
        count = ctypes.c_size_t(0)
        read = llama_cpp.llama_state_seq_load_file(model.llama.ctx, os.fsencode(path), 0, tokens, capacity,
                                                   ctypes.byref(count))
        loaded = list(tokens[: count.value])
        if not read or loaded != prefix:
            _clear(model)
            return False
        llm = model.llama
        llm.input_ids[:prefix_len] = prefix
        llm.n_tokens = prefix_len
        self.restored += 1
        return True

    def save(self, model: LlamaModel, prompt: Sequence[int], prefix_len: int) -> bool:
        """Write the prefix's KV state unless a file has it; cuts the KV to the prefix first. True when written."""
        if prefix_len < self.min_tokens or model.n_past < prefix_len or model.tokens[:prefix_len] != list(
                prompt[:prefix_len]):
            return False
        prefix = list(prompt[:prefix_len])
        path = self.path_for(prefix)
        if path.is_file():
            return False
        import llama_cpp

        model.rollback(prefix_len)
        self.directory.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        tokens = (llama_cpp.llama_token * prefix_len)(*prefix)
        if not llama_cpp.llama_state_seq_save_file(model.llama.ctx, os.fsencode(partial), 0, tokens, prefix_len):
            partial.unlink(missing_ok=True)
            return False
        os.replace(partial, path)
        self.saved += 1
        return True


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _clear(model: LlamaModel) -> None:
    """After a failed load the KV may hold anything: empty it (and the wrapper's view) completely."""
    import llama_cpp

    memory = llama_cpp.llama_get_memory(model.llama.ctx)
    if memory is not None:
        llama_cpp.llama_memory_seq_rm(memory, 0, 0, -1)
    model.llama.n_tokens = 0
