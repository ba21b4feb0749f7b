"""The authoritative execution record of one run: the recorder that appends its ordered JSONL events.

The trace is not logging around the real result; it *is* the history. Every line is one event (the line format,
the event vocabulary and the errors are in `agent.trace_format`)::

    {"schema": "ember.agent.trace.v1", "run_id": "run-…", "seq": 7, "event_type": "tool_execution_finished",
     "t_ms": 812.345, "ts_epoch_ms": 1767225600123, "step": "tool-3", "phase": "execute", "data": {...}}

Flow (one module per arrow)::

    session ─► TraceRecorder.emit ─► one os.write(line) on an O_APPEND fd ─► (fsync per policy) ─► file
                     │ payload(value): full | hashed {len, sha256} | summary {excerpt, len, sha256}
    file ─► trace_reader.read_trace ─► TraceRead(events, torn_tail, problems)
         ─► trace_verify.verify_trace ─► VerifyReport(problems: facts · narration: trace_narration's heuristic)

Owns: ordering (``seq`` from 0, strictly increasing, the only order), privacy transforms, crash tolerance (each
line is written whole and flushed; a crash leaves a readable prefix plus at most one torn final line), and the
data builders of the ``provenance`` and ``artifact_written`` events. Every name of the reader, the verifier and
the format is re-exported here, so ``from agent.trace import read_trace, verify_trace`` keeps working.

Refuses: emitting after a terminal event or after close (``TraceMisuseError``), non-JSON data, lines over
``MAX_LINE_BYTES``, and writing into a non-empty existing file (the file is created with ``O_EXCL``; only
``truncate=True`` replaces one).
"""

from __future__ import annotations

import enum
import errno
import hashlib
import json
import os
import stat
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent.trace_format import (MAX_LINE_BYTES, TERMINAL_EVENTS, TRACE_SCHEMA, EventType, TraceError,
                                TraceMisuseError, TraceWriteError, UnsupportedTraceSchemaError)
from agent.trace_narration import check_narration, claims_artifact
from agent.trace_reader import TraceEvent, TraceRead, read_trace
from agent.trace_verify import VerifyReport, sha256_file, verify_trace

__all__ = [
    "MAX_LINE_BYTES",
    "TERMINAL_EVENTS",
    "TRACE_SCHEMA",
    "EventType",
    "FsyncPolicy",
    "PrivacyMode",
    "TraceError",
    "TraceEvent",
    "TraceMisuseError",
    "TraceRead",
    "TraceRecorder",
    "TraceWriteError",
    "UnsupportedTraceSchemaError",
    "VerifyReport",
    "artifact_written_data",
    "check_narration",
    "check_new_trace",
    "claims_artifact",
    "provenance_data",
    "read_trace",
    "sha256_file",
    "verify_trace",
]

DEFAULT_EXCERPT_CHARS = 200
"""Characters kept by ``PrivacyMode.SUMMARY``."""
_LINE_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
"""Built once: ``json.dumps`` with these options builds an encoder per call (stateless, so shared safely)."""
_json_text = _LINE_ENCODER.encode
"""JSON text of a run id, step, phase or event data, exactly as `_encode` writes it inside the whole line (public
``JSONEncoder.encode``; circular data raises ValueError, and `_encode` then reports it)."""


_EVENT_NAMES = {kind: kind.value for kind in EventType}
"""Plain-str names (reading ``.value`` goes through a Python-level descriptor on every event)."""


class PrivacyMode(enum.StrEnum):
    """What ``TraceRecorder.payload`` keeps of prompts, generated text and tool payloads."""

    FULL = "full"
    """Payloads as they are."""
    HASHED = "hashed"
    """``{"privacy": "hashed", "len": n, "sha256": hex}``: provable equality, no content."""
    SUMMARY = "summary"
    """``{"privacy": "summary", "excerpt": first N chars, "len": n, "sha256": hex, "truncated": bool}``."""


class FsyncPolicy(enum.StrEnum):
    """When the recorder asks the OS to put lines on stable storage. Every line is *flushed* (written to the
    kernel) when appended regardless; fsync only matters for power loss / kernel crash, not process crash."""

    NONE = "none"
    TERMINAL = "terminal"
    """Default: fsync once after the terminal event (and on close, if lines were appended since); never per
    ordinary event."""
    EVERY_EVENT = "every_event"


# ---------------------------------------------------------------------------------------------------- payloads


def _canonical_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _privacy_transform(value: Any, mode: PrivacyMode, excerpt_chars: int) -> Any:
    if mode is PrivacyMode.FULL:
        return value
    text = _canonical_text(value)
    digest = {"len": len(text), "sha256": _sha256_text(text)}
    if mode is PrivacyMode.HASHED:
        return {"privacy": "hashed", **digest}
    return {"privacy": "summary", "excerpt": text[:excerpt_chars], **digest,
            "truncated": len(text) > excerpt_chars}


def provenance_data(*, runtime_version: str, model_sha256: str | None, tokenizer_sha256: str | None,
                    codec_id: str, tool_schema_sha256: str, config: Mapping[str, Any],
                    limits: Mapping[str, Any], model_name: str | None = None,
                    **extra: Any) -> dict[str, Any]:
    """The ``provenance`` event's data: what pins this run's behaviour (runtime, model bytes, tokenizer, codec,
    tool-schema snapshot, configuration and limits). Extra keyword fields are kept as given."""
    return {"runtime_version": runtime_version, "model_name": model_name, "model_sha256": model_sha256,
            "tokenizer_sha256": tokenizer_sha256, "codec_id": codec_id,
            "tool_schema_sha256": tool_schema_sha256, "config": dict(config), "limits": dict(limits), **extra}


def artifact_written_data(ref: Any, *, call_id: str, tool: str) -> dict[str, Any]:
    """The ``artifact_written`` event's data for an ``ArtifactRef`` produced by tool call ``call_id``."""
    return {"call_id": call_id, "tool": tool, "artifact_id": ref.id, "name": ref.name, "sha256": ref.sha256,
            "size_bytes": ref.size_bytes}


# ---------------------------------------------------------------------------------------------------- recorder


class TraceRecorder:
    """Appends events for one run to a JSONL file. Thread-safe: ``seq`` order equals file order.

    Each event is serialized to one line and written with a single ``os.write`` on an ``O_APPEND`` descriptor,
    so lines never interleave and a crash leaves whole lines plus at most one torn final line. On a write
    failure the recorder truncates any partial line it wrote, raises ``TraceWriteError`` and refuses every later
    event (fail closed).
    """

    def __init__(self, path: str | os.PathLike[str], *, run_id: str | None = None,
                 privacy: PrivacyMode | str = PrivacyMode.FULL,
                 fsync: FsyncPolicy | str | bool = FsyncPolicy.TERMINAL, token_events: bool = False,
                 excerpt_chars: int = DEFAULT_EXCERPT_CHARS, truncate: bool = False) -> None:
        """Create ``path`` exclusively (``O_CREAT | O_EXCL``) and append to it.

        Only ``truncate=True`` may replace an existing file. Without it, when the exclusive create finds the path
        taken, a non-empty regular file is refused and left untouched; an empty one, or a non-regular one
        (``/dev/null``, a FIFO), is appended to (nothing is there to lose). No other path truncates anything.

        Args:
            run_id: defaults to ``run-<uuid4 hex>``.
            privacy: transform applied by ``payload``.
            fsync: a ``FsyncPolicy``; ``True`` means every event, ``False`` means none.
            token_events: keep ``EventType.TOKEN`` events (off: they are dropped).
            excerpt_chars: characters kept by ``PrivacyMode.SUMMARY``.
            truncate: replace an existing non-empty file (otherwise refused: one file, one run).

        Raises:
            TraceWriteError: the file cannot be created or opened for writing.
            TraceMisuseError: the file already holds bytes and ``truncate`` is false.
        """
        self.path = Path(path)
        self.run_id = run_id if run_id is not None else f"run-{uuid.uuid4().hex}"
        self.privacy = PrivacyMode(privacy)
        self.fsync_policy = (FsyncPolicy.EVERY_EVENT if fsync is True else FsyncPolicy.NONE if fsync is False
                             else FsyncPolicy(fsync))
        self.token_events = token_events
        self.excerpt_chars = excerpt_chars
        self._lock = threading.Lock()
        self._seq = 0
        self._terminal: str | None = None
        self._closed = False
        self._failed: TraceWriteError | None = None
        self._unsynced = False
        """Lines were appended since the last fsync (close skips a redundant fsync after the terminal one)."""
        self._t0_ns = time.monotonic_ns()
        self._prefix = ""
        """The line's constant head, up to ``"seq":``, for `_encode_fast` (built for ``_prefix_run_id``)."""
        self._prefix_run_id: object = None
        flags = os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        existed = False
        try:
            try:
                self._fd = os.open(self.path, flags | os.O_CREAT | (0 if truncate else os.O_EXCL), 0o644)
            except FileExistsError:  # checked below: only an empty or non-regular file is taken as it is
                existed = True
                self._fd = os.open(self.path, flags)
        except OSError as e:
            raise TraceWriteError(f"cannot open trace {self.path} for writing: {e.strerror}", path=str(self.path),
                                  errno_code=e.errno, seq=None) from e
        st = os.fstat(self._fd)
        if stat.S_ISREG(st.st_mode) and st.st_size > 0:
            if truncate:  # the only way to replace a file
                os.ftruncate(self._fd, 0)
            elif existed:  # the exclusive create failed: the bytes were there before this recorder
                os.close(self._fd)
                raise TraceMisuseError(f"trace file {self.path} already holds {st.st_size} bytes; one file per "
                                       "run, never overwritten (pass truncate=True to replace it)")
            # else: this recorder created the file and a racing one appended since; append after it, never cut
        self._regular = stat.S_ISREG(st.st_mode)

    # -- public ---------------------------------------------------------------------------------------------------

    def payload(self, value: Any) -> Any:
        """The privacy-transformed form of a prompt, generated text or tool payload (str or any JSON value; a
        non-string is hashed as canonical JSON: sorted keys, compact separators, UTF-8)."""
        return _privacy_transform(value, self.privacy, self.excerpt_chars)

    def emit(self, event_type: EventType | str, *, step: str | None = None, phase: str | None = None,
             data: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """Append one event and flush it. Returns the event as written, or ``None`` for a dropped token event.

        Raises:
            TraceMisuseError: unknown event type, a terminal event was already emitted, the recorder is closed,
                ``data`` is not JSON-serializable, or the line exceeds ``MAX_LINE_BYTES``.
            TraceWriteError: the write failed (now or on an earlier event).
        """
        if type(event_type) is EventType:
            kind = event_type
        else:
            try:
                kind = EventType(event_type)
            except ValueError:
                raise TraceMisuseError(f"unknown event type {event_type!r}; use an EventType",
                                       event_type=str(event_type)) from None
        if kind is EventType.TOKEN and not self.token_events:
            return None
        with self._lock:
            if self._failed is not None:
                raise TraceWriteError(f"trace {self.path} is unwritable since seq {self._failed.seq}; "
                                      f"refusing {kind}", path=str(self.path), errno_code=self._failed.errno_code,
                                      seq=self._seq)
            if self._closed:
                raise TraceMisuseError(f"trace {self.path} is closed; cannot emit {kind}", event_type=kind)
            if self._terminal is not None:
                raise TraceMisuseError(f"run {self.run_id} already ended with {self._terminal}; cannot emit {kind}",
                                       event_type=kind)
            name, seq = _EVENT_NAMES[kind], self._seq
            t_ms = (time.monotonic_ns() - self._t0_ns) // 1000 / 1000  # whole µs: 3 decimals
            ts_epoch_ms = time.time_ns() // 1_000_000
            body = dict(data) if data is not None else {}
            event = {"schema": TRACE_SCHEMA, "run_id": self.run_id, "seq": seq, "event_type": name, "t_ms": t_ms,
                     "ts_epoch_ms": ts_epoch_ms, "step": step, "phase": phase, "data": body}
            line = self._encode_fast(name, seq, t_ms, ts_epoch_ms, step, phase, body) or self._encode(event)
            self._append(line)
            self._unsynced = True
            self._seq += 1
            terminal = kind in TERMINAL_EVENTS
            if terminal:
                self._terminal = name
            if self.fsync_policy is FsyncPolicy.EVERY_EVENT or (terminal and self.fsync_policy is FsyncPolicy.TERMINAL):
                self._sync()
            return event

    @property
    def next_seq(self) -> int:
        """The seq the next event will carry (= number of events written)."""
        return self._seq

    @property
    def is_terminated(self) -> bool:
        """True once a terminal event was written."""
        return self._terminal is not None

    def close(self) -> None:
        """Fsync lines not yet synced (unless policy is none) and close. Idempotent. Closing without a terminal
        event is allowed: the trace then reads as an interrupted run (``verify_trace`` reports the missing
        terminal event)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self.fsync_policy is not FsyncPolicy.NONE and self._failed is None and self._unsynced:
                    self._sync()
            finally:
                os.close(self._fd)

    def __enter__(self) -> TraceRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- private --------------------------------------------------------------------------------------------------

    def _encode_fast(self, name: str, seq: int, t_ms: float, ts_epoch_ms: int, step: Any, phase: Any,
                     data: dict[str, Any]) -> bytes | None:
        """`_encode`'s exact bytes for the usual event (string or null step and phase, UTF-8-encodable text),
        assembled around the JSON of ``data`` instead of encoding the whole envelope again; None otherwise."""
        if not ((step is None or type(step) is str) and (phase is None or type(phase) is str)):
            return None
        run_id = self.run_id
        if run_id is not self._prefix_run_id:
            try:
                self._prefix = f'{{"schema":"{TRACE_SCHEMA}","run_id":{_json_text(run_id)},"seq":'
            except (TypeError, ValueError, RecursionError):
                return None
            self._prefix_run_id = run_id
        try:
            body = _json_text(data)
        except (TypeError, ValueError, RecursionError):
            return None  # `_encode` reports it
        try:
            line = (f'{self._prefix}{seq},"event_type":"{name}","t_ms":{t_ms!r},"ts_epoch_ms":{ts_epoch_ms},'
                    f'"step":{"null" if step is None else _json_text(step)},'
                    f'"phase":{"null" if phase is None else _json_text(phase)},"data":{body}}}\n').encode("utf-8")
        except UnicodeEncodeError:
            return None  # `_encode` falls back to \u escapes
        return line if len(line) <= MAX_LINE_BYTES else None  # `_encode` refuses an oversize line

    def _encode(self, event: dict[str, Any]) -> bytes:
        try:
            text = _LINE_ENCODER.encode(event)
        except (TypeError, ValueError, RecursionError) as e:
            raise TraceMisuseError(f"{event['event_type']} data is not JSON-serializable: {e}",
                                   event_type=event["event_type"]) from None
        try:
            line = (text + "\n").encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: fall back to \u escapes, still valid JSON
            line = (json.dumps(event, ensure_ascii=True, separators=(",", ":"), allow_nan=False) + "\n").encode()
        if len(line) > MAX_LINE_BYTES:
            raise TraceMisuseError(f"{event['event_type']} line is {len(line)} bytes, over MAX_LINE_BYTES "
                                   f"({MAX_LINE_BYTES}); bound the payload first", event_type=event["event_type"])
        return line

    def _append(self, line: bytes) -> None:
        written = 0
        try:
            while written < len(line):  # a regular file writes all at once unless the device is full
                n = os.write(self._fd, line[written:] if written else line)
                if n == 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                written += n
        except OSError as e:
            if written and self._regular:
                try:  # take back the partial line so the file stays a clean prefix: it is the file's last
                    # ``written`` bytes (one writer per file; the lock orders this process's appends)
                    os.ftruncate(self._fd, os.lseek(self._fd, 0, os.SEEK_END) - written)
                except OSError:
                    pass
            self._failed = TraceWriteError(
                f"writing seq {self._seq} to trace {self.path} failed after {written} of {len(line)} bytes: "
                f"{e.strerror or e}", path=str(self.path), errno_code=e.errno, seq=self._seq)
            raise self._failed from e

    def _sync(self) -> None:
        try:
            os.fsync(self._fd)
            self._unsynced = False
        except OSError as e:
            if e.errno in (errno.EINVAL, errno.EROFS) and not self._regular:
                return  # character devices and pipes cannot be synced
            self._failed = TraceWriteError(f"fsync of trace {self.path} failed: {e.strerror}",
                                           path=str(self.path), errno_code=e.errno, seq=self._seq)
            raise self._failed from e


def check_new_trace(path: str | os.PathLike[str], *, replace: bool = False) -> None:
    """Refuse, before any work starts, a trace path that `TraceRecorder` would refuse: an existing non-empty
    regular file (unless ``replace``) or a directory. The recorder checks again when it opens the file
    (exclusively), so a file that appears in between is refused there too.

    Raises:
        TraceMisuseError: the path holds a non-empty file and ``replace`` is false, or is a directory.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise TraceMisuseError(f"{os.fspath(path)}: cannot be checked ({e.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise TraceMisuseError(f"{os.fspath(path)}: is a directory, not a trace file")
    if stat.S_ISREG(st.st_mode) and st.st_size > 0 and not replace:
        raise TraceMisuseError(f"{os.fspath(path)}: already holds {st.st_size:,} bytes; a trace is never "
                               "overwritten (choose another path, or replace it explicitly)")
