"""Content-addressed, atomically published artifacts: the only way a run's output bytes become a file.

    write(name, bytes) ─► .ember-tmp-<pid>-<rand> in root ─► write all, fsync ─► rename to id ─► fsync(root)
                                                                            └─► ArtifactRef(id, sha256, …)

An artifact id is ``NNNN-<sha256[:12]>-<name>``: ``NNNN`` the store's sequence (4 digits, wider past 9999),
the first 12 hex digits of the content hash, and the name reduced to ``[A-Za-z0-9._-]``. A final name only ever
appears by ``rename`` of a fully written and fsynced temp file, so a crash (even SIGKILL) never leaves a partial
artifact under its final name; it may leave a temp file, which ``refs`` ignores and ``remove_stale_temps``
deletes once its writer process is gone.

Owns: naming, atomic publication, integrity (``verify``, and ``read`` refuses bytes that do not match their id).
Refuses: non-bytes data, ids that are not store ids (no path traversal). One writer *process* per root is
assumed (threads are serialized by a lock); ``trace.verify_trace`` checks a run's artifacts against the trace.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

from agent.errors import AgentError

__all__ = [
    "ArtifactError",
    "ArtifactIntegrityError",
    "ArtifactNotFoundError",
    "ArtifactRef",
    "ArtifactStore",
    "InvalidArtifactIdError",
    "sanitize_name",
]

TEMP_PREFIX = ".ember-tmp-"
"""Temp files are ``.ember-tmp-<pid>-<hex>``: hidden, and never matching the id pattern."""
MAX_NAME_CHARS = 100
_ID_RE = re.compile(r"^(\d{4,})-([0-9a-f]{12})-([A-Za-z0-9._-]+)$")
_UNSAFE_RE = re.compile(r"[^A-Za-z0-9._-]")
_ROOT_LOCKS: dict[Path, threading.Lock] = {}
_ROOT_LOCKS_GUARD = threading.Lock()


def _root_lock(root: Path) -> threading.Lock:
    """One lock per root in this process, shared by every ArtifactStore opened on it."""
    with _ROOT_LOCKS_GUARD:
        return _ROOT_LOCKS.setdefault(root, threading.Lock())


class ArtifactError(AgentError):
    """Base of every error this module raises."""


class InvalidArtifactIdError(ArtifactError, ValueError):
    """The id is not of the form ``NNNN-<12 hex>-<name>`` (misuse; never a path)."""

    def __init__(self, artifact_id: str) -> None:
        super().__init__(f"{artifact_id!r} is not an artifact id (expected NNNN-<12 hex sha256>-<name>)")
        self.artifact_id = artifact_id


class ArtifactNotFoundError(ArtifactError, FileNotFoundError):
    """No artifact with this id in the store."""

    def __init__(self, artifact_id: str, root: Path) -> None:
        super().__init__(f"no artifact {artifact_id} in {root}")
        self.artifact_id = artifact_id
        self.root = root


class ArtifactIntegrityError(ArtifactError):
    """The stored bytes no longer hash to the id they were published under."""

    def __init__(self, artifact_id: str, actual_sha256: str) -> None:
        super().__init__(f"artifact {artifact_id} content hashes to {actual_sha256}, not its id's prefix")
        self.artifact_id = artifact_id
        self.actual_sha256 = actual_sha256


@dataclass(frozen=True, kw_only=True)
class ArtifactRef:
    """A published artifact: the fact that these bytes exist under this id."""

    id: str
    """``NNNN-<sha256[:12]>-<name>``; also the file name under the store root."""
    name: str
    """The sanitized name."""
    sha256: str
    """Hex sha256 of the content (full 64 digits)."""
    size_bytes: int
    path: Path
    """Absolute path of the published file."""

    def to_json(self) -> dict[str, object]:
        """A JSON form for tool results and traces (no local path)."""
        return {"id": self.id, "name": self.name, "sha256": self.sha256, "size_bytes": self.size_bytes}


def sanitize_name(name: str) -> str:
    """Reduce a requested name to ``[A-Za-z0-9._-]``, no leading dots, at most ``MAX_NAME_CHARS`` characters
    (keeping the extension when cutting); ``artifact`` if nothing is left."""
    clean = _UNSAFE_RE.sub("_", name).lstrip(".")
    if len(clean) > MAX_NAME_CHARS:
        stem, dot, ext = clean.rpartition(".")
        keep = ("." + ext) if dot and stem and len(ext) <= 10 else ""
        clean = clean[:MAX_NAME_CHARS - len(keep)] + keep
    return clean or "artifact"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ArtifactStore:
    """A directory of immutable, content-addressed artifacts."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        """Open (creating if needed) the store at ``root``."""
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = _root_lock(self.root)

    def write(self, name: str, data: bytes | bytearray | memoryview) -> ArtifactRef:
        """Publish ``data`` atomically under a new id and return its reference.

        Raises:
            TypeError: ``data`` is not bytes-like (encode text first).
            OSError: the store cannot be written (disk full, read-only); no final name is created.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"artifact data must be bytes, got {type(data).__name__}; encode text first")
        content = bytes(data)
        clean = sanitize_name(name)
        digest = hashlib.sha256(content).hexdigest()
        with self._lock:
            seq = max((int(m.group(1)) for m in self._id_matches()), default=-1) + 1
            artifact_id = f"{seq:04d}-{digest[:12]}-{clean}"
            final = self.root / artifact_id
            temp = self.root / f"{TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
            try:
                try:
                    view = memoryview(content)
                    while view:
                        view = view[os.write(fd, view):]
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.rename(temp, final)
            except BaseException:
                temp.unlink(missing_ok=True)
                raise
            _fsync_dir(self.root)
        return ArtifactRef(id=artifact_id, name=clean, sha256=digest, size_bytes=len(content), path=final)

    def read(self, artifact_id: str) -> bytes:
        """The artifact's bytes, checked against the hash prefix in its id.

        Raises:
            InvalidArtifactIdError, ArtifactNotFoundError, ArtifactIntegrityError.
        """
        m = _ID_RE.match(artifact_id)
        if m is None:
            raise InvalidArtifactIdError(artifact_id)
        try:
            content = (self.root / artifact_id).read_bytes()
        except FileNotFoundError:
            raise ArtifactNotFoundError(artifact_id, self.root) from None
        actual = hashlib.sha256(content).hexdigest()
        if not actual.startswith(m.group(2)):
            raise ArtifactIntegrityError(artifact_id, actual)
        return content

    def verify(self, ref: ArtifactRef) -> bool:
        """True iff the file under ``ref.id`` exists in this store and its bytes match ``ref.sha256``,
        ``ref.size_bytes`` and the id's hash prefix."""
        m = _ID_RE.match(ref.id)
        if m is None or not ref.sha256.startswith(m.group(2)):
            return False
        path = self.root / ref.id
        try:
            content = path.read_bytes()
        except OSError:
            return False
        return len(content) == ref.size_bytes and hashlib.sha256(content).hexdigest() == ref.sha256

    def refs(self) -> list[ArtifactRef]:
        """Every published artifact, in sequence order, hashed from disk (a tampered file yields a ref whose
        ``verify`` is false). Temp files and foreign names are ignored."""
        out = []
        for m in sorted(self._id_matches(), key=lambda m: (int(m.group(1)), m.group(0))):
            path = self.root / m.group(0)
            content = path.read_bytes()
            out.append(ArtifactRef(id=m.group(0), name=m.group(3), sha256=hashlib.sha256(content).hexdigest(),
                                   size_bytes=len(content), path=path))
        return out

    def remove_stale_temps(self) -> int:
        """Delete temp files left by crashed writers (their pid is gone, or this process holds no write in
        flight). Returns how many were removed."""
        removed = 0
        with self._lock:
            for entry in os.scandir(self.root):
                if not entry.name.startswith(TEMP_PREFIX):
                    continue
                pid_text = entry.name[len(TEMP_PREFIX):].split("-", 1)[0]
                pid = int(pid_text) if pid_text.isdigit() else -1
                if pid == os.getpid() or pid <= 0 or not _pid_alive(pid):
                    Path(entry.path).unlink(missing_ok=True)
                    removed += 1
        return removed

    def _id_matches(self) -> list[re.Match[str]]:
        matches = []
        for entry in os.scandir(self.root):
            m = _ID_RE.match(entry.name)
            if m is not None and entry.is_file(follow_symlinks=False):
                matches.append(m)
        return matches
