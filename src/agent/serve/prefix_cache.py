"""The KV state of a shared prompt prefix (system + tools), kept on disk so a restarted server does not pay it again.

Owns the files only: which prefix of a prompt is worth keeping (`shared_prefix`: what every request with the same
system message and tools renders before the first user turn), the file that holds its KV state (named by the
model's sha256 and the prefix's token ids), saving it after a request evaluated it and restoring it before a
request that needs it. Uses llama.cpp's own sequence-state files (``llama_state_seq_save_file`` /
``llama_state_seq_load_file``: the KV cells and the token ids, through the model's ``save_sequence_state`` /
``load_sequence_state``). Refuses a file whose tokens are not the prefix.

    prompt ids ─► shared_prefix (LCP with the same render and an empty user turn) ─► P ids
    model KV shares < P ids with the prompt and a file exists ─► restore (model rolled back to 0, then loaded)
    a request evaluated the P ids itself ─► save (the KV cut to P first; the rest is re-evaluated next time)

Within one process the engine's own prefix reuse already covers repeated prefixes (with ``--parallel``, the
batch's prefix holders: `constrained.batching`); this cache is for the first request after a start, and for a
prefix that another prompt evicted from the KV.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

__all__ = ["PrefixCache", "SequenceStateModel", "common_prefix_length", "default_cache_dir"]


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

    def restore(self, model: SequenceStateModel, prompt: Sequence[int], prefix_len: int) -> bool:
        """Load the prefix's KV state when the model does not hold it already; True when it was loaded."""
        if prefix_len < self.min_tokens or common_prefix_length(model.tokens, prompt) >= prefix_len:
            return False
        prefix = list(prompt[:prefix_len])
        path = self.path_for(prefix)
        if not path.is_file():
            return False
        loaded = model.load_sequence_state(path)
        if loaded != prefix:
            if loaded is not None:
                model.rollback(0)
            return False
        self.restored += 1
        return True

    def save(self, model: SequenceStateModel, prompt: Sequence[int], prefix_len: int) -> bool:
        """Write the prefix's KV state unless a file has it; cuts the KV to the prefix first. True when written."""
        if prefix_len < self.min_tokens or model.n_past < prefix_len or model.tokens[:prefix_len] != list(
                prompt[:prefix_len]):
            return False
        prefix = list(prompt[:prefix_len])
        path = self.path_for(prefix)
        if path.is_file():
            return False
        self.directory.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        if not model.save_sequence_state(partial, prefix_len):
            partial.unlink(missing_ok=True)
            return False
        os.replace(partial, path)
        self.saved += 1
        return True


class SequenceStateModel(Protocol):
    """What the cache needs of a model: its KV's token ids, a rollback, and llama.cpp's sequence-state files
    (`constrained.llama.LlamaModel`, and each sequence of a `constrained.batching.BatchedModel`)."""

    @property
    def tokens(self) -> list[int]: ...

    @property
    def n_past(self) -> int: ...

    def rollback(self, n_past: int) -> None: ...

    def save_sequence_state(self, path: str | os.PathLike[str], n_tokens: int) -> bool: ...

    def load_sequence_state(self, path: str | os.PathLike[str]) -> list[int] | None: ...


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
