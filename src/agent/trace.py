"""The authoritative execution record of one run: an ordered JSONL event log, its reader and its verifier.

The trace is not logging around the real result; it *is* the history. Every line is one event::

    {"schema": "ember.agent.trace.v1", "run_id": "run-…", "seq": 7, "event_type": "tool_execution_finished",
     "t_ms": 812.345, "ts_epoch_ms": 1767225600123, "step": "tool-3", "phase": "execute", "data": {...}}

Flow::

    session ─► TraceRecorder.emit ─► one os.write(line) on an O_APPEND fd ─► (fsync per policy) ─► file
                     │ payload(value): full | hashed {len, sha256} | summary {excerpt, len, sha256}
    file ─► read_trace ─► TraceRead(events, torn_tail, problems) ─► verify_trace ─► VerifyReport

Owns: the event vocabulary (``EventType``), the line envelope, ordering (``seq`` from 0, strictly increasing, the
only order), privacy transforms, crash tolerance (each line is written whole and flushed; a crash leaves a
readable prefix plus at most one torn final line), and the checks that make a trace trustworthy (one run, one
terminal event last, every artifact produced by a traced tool execution and matching its bytes on disk, no final
answer claiming a write that never ran).

Refuses: emitting after a terminal event or after close (``TraceMisuseError``), non-JSON data, lines over
``MAX_LINE_BYTES``, writing into a non-empty existing file (the file is created with ``O_EXCL``; only
``truncate=True`` replaces one), and reading a trace of an unknown schema *major*
(``UnsupportedTraceSchemaError``). Versioning rule: ``ember.agent.trace.v1`` and ``ember.agent.trace.v1.<minor>``
are readable by this module (a minor adds optional fields or event types, never changes a meaning); any other
major is rejected. The schema, every event's data fields and the OpenTelemetry mapping are in ``docs/trace.md``.
"""

from __future__ import annotations

import enum
import errno
import hashlib
import io
import json
import math
import os
import re
import stat
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from agent.json_text import plain_encoder

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
    "check_new_trace",
    "claims_artifact",
    "provenance_data",
    "read_trace",
    "sha256_file",
    "verify_trace",
]

TRACE_SCHEMA = "ember.agent.trace.v1"
"""The schema every line carries. Readers accept major 1 with any minor (``…v1`` or ``…v1.<n>``)."""
TRACE_SCHEMA_MAJOR = 1
MAX_LINE_BYTES = 16 * 1024 * 1024
"""Longest line (event) the recorder writes and the reader parses; longer lines are refused / reported."""
DEFAULT_EXCERPT_CHARS = 200
"""Characters kept by ``PrivacyMode.SUMMARY``."""
_SCHEMA_RE = re.compile(r"^ember\.agent\.trace\.v(\d+)(?:\.(\d+))?$")
_ENVELOPE = ("schema", "run_id", "seq", "event_type", "t_ms", "ts_epoch_ms", "step", "phase", "data")
_TORN_TAIL_MAX_CHARS = 65536
_LINE_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
"""Built once: ``json.dumps`` with these options builds an encoder per call (stateless, so shared safely)."""
_json_string = json.encoder.encode_basestring
"""A str as JSON text, exactly as `_LINE_ENCODER` writes it (``ensure_ascii=False``)."""
_data_text = plain_encoder(_LINE_ENCODER)
"""`_LINE_ENCODER.encode` for an event's data dict; circular data ends in RecursionError, and `_encode` then
reports it."""


class EventType(enum.StrEnum):
    """The event vocabulary. Data fields per type are listed in ``docs/trace.md``."""

    RUN_STARTED = "run_started"
    PROVENANCE = "provenance"
    MODEL_CALL_STARTED = "model_call_started"
    MODEL_CALL_FINISHED = "model_call_finished"
    ASSISTANT_ACTION_PARSED = "assistant_action_parsed"
    TOOL_CALL_VALIDATED = "tool_call_validated"
    TOOL_CALL_REJECTED = "tool_call_rejected"
    TOOL_EXECUTION_STARTED = "tool_execution_started"
    TOOL_EXECUTION_FINISHED = "tool_execution_finished"
    TOOL_RESULT_COMMITTED = "tool_result_committed"
    TOOL_RESULT_UNCOMMITTED = "tool_result_uncommitted"
    MESSAGE_COMMITTED = "message_committed"
    ARTIFACT_WRITTEN = "artifact_written"
    TOKEN = "token"
    """Per-token event; dropped unless the recorder was built with ``token_events=True``."""
    RUN_COMPLETED = "run_completed"
    RUN_FAILED = "run_failed"
    RUN_CANCELLED = "run_cancelled"
    RUN_TERMINATED = "run_terminated"
    """A limit ended the run; ``data["limit"]`` names it."""


TERMINAL_EVENTS = frozenset({EventType.RUN_COMPLETED, EventType.RUN_FAILED, EventType.RUN_CANCELLED,
                             EventType.RUN_TERMINATED})
"""Exactly one of these ends every complete trace, as its last line."""
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


class TraceError(Exception):
    """Base of every error this module raises."""


class TraceMisuseError(TraceError, ValueError):
    """The caller broke the recorder contract (emit after a terminal event or close, bad data, oversize line)."""

    def __init__(self, message: str, *, event_type: str | None = None) -> None:
        super().__init__(message)
        self.event_type = event_type


class TraceWriteError(TraceError, OSError):
    """The trace could not be written (disk full, read-only location, I/O error). What was written before stays
    a readable prefix; the recorder refuses further events. The session turns this into a terminal failure."""

    def __init__(self, message: str, *, path: str, errno_code: int | None, seq: int | None) -> None:
        super().__init__(message)
        self.path = path
        self.errno_code = errno_code
        self.seq = seq


class UnsupportedTraceSchemaError(TraceError, ValueError):
    """A line carries a schema major this reader does not understand (e.g. ``ember.agent.trace.v2``)."""

    def __init__(self, message: str, *, schema: str, line_no: int) -> None:
        super().__init__(message)
        self.schema = schema
        self.line_no = line_no


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


def sha256_file(path: str | os.PathLike[str], *, chunk_bytes: int = 1 << 20) -> str:
    """Hex sha256 of a file, streamed (model files are hundreds of MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


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
                self._prefix = f'{{"schema":"{TRACE_SCHEMA}","run_id":{_LINE_ENCODER.encode(run_id)},"seq":'
            except (TypeError, ValueError, RecursionError):
                return None
            self._prefix_run_id = run_id
        try:
            body = _data_text(data)
        except (TypeError, ValueError, RecursionError):
            return None  # `_encode` reports it
        try:
            line = (f'{self._prefix}{seq},"event_type":"{name}","t_ms":{t_ms!r},"ts_epoch_ms":{ts_epoch_ms},'
                    f'"step":{"null" if step is None else _json_string(step)},'
                    f'"phase":{"null" if phase is None else _json_string(phase)},"data":{body}}}\n').encode("utf-8")
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


# ------------------------------------------------------------------------------------------------------ reader


@dataclass(frozen=True, kw_only=True)
class TraceEvent:
    """One parsed line. Unknown fields are ignored; unknown event types are kept as strings."""

    schema: str
    """The line's schema string (major 1, any minor)."""
    run_id: str
    seq: int
    event_type: str
    """An ``EventType`` value, or an unknown type from a newer minor (compare with ``EventType`` members)."""
    t_ms: float
    """Milliseconds since run start, monotonic clock."""
    ts_epoch_ms: int
    """Wall-clock time of the event (for latency and correlation only; order comes from ``seq``)."""
    step: str | None
    phase: str | None
    data: dict[str, Any]
    line_no: int
    """1-based line number in the file."""

    def to_json(self) -> dict[str, Any]:
        """The envelope as written (without ``line_no``)."""
        return {k: getattr(self, k) for k in _ENVELOPE}


@dataclass(frozen=True, kw_only=True)
class TraceRead:
    """The outcome of reading a trace: the valid events in file order, a torn last line if any, and every
    problem found (corrupt, oversize or malformed lines; those lines are skipped)."""

    events: tuple[TraceEvent, ...]
    torn_tail: str | None
    """The unterminated final line (decoded with replacement, capped at 64 Ki chars), or None."""
    problems: tuple[str, ...]
    """Human-readable, each prefixed with ``line N:``."""


def _reject_constant(token: str) -> Any:
    raise ValueError(f"non-standard JSON constant {token}")


def _parse_line(raw: bytes, line_no: int) -> TraceEvent | str:
    """A parsed event, or a problem string. Raises UnsupportedTraceSchemaError for a foreign major."""
    try:
        obj = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as e:
        return f"line {line_no}: not UTF-8 ({e.reason} at byte {e.start})"
    except (ValueError, RecursionError) as e:
        return f"line {line_no}: not JSON ({str(e)[:120]})"
    if not isinstance(obj, dict):
        return f"line {line_no}: not a JSON object"
    schema = obj.get("schema")
    if not isinstance(schema, str):
        return f"line {line_no}: missing or non-string schema"
    m = _SCHEMA_RE.match(schema)
    if m is None:
        return f"line {line_no}: unrecognised schema {schema[:80]!r}"
    if int(m.group(1)) != TRACE_SCHEMA_MAJOR:
        raise UnsupportedTraceSchemaError(
            f"line {line_no}: trace schema {schema!r} has major {m.group(1)}; this reader understands "
            f"{TRACE_SCHEMA} (major {TRACE_SCHEMA_MAJOR}, any minor)", schema=schema, line_no=line_no)
    checks = (("run_id", str), ("seq", int), ("event_type", str), ("t_ms", (int, float)),
              ("ts_epoch_ms", int), ("step", (str, type(None))), ("phase", (str, type(None))), ("data", dict))
    for name, types in checks:
        if name not in obj:
            return f"line {line_no}: missing field {name}"
        value = obj[name]
        if not isinstance(value, types) or (isinstance(value, bool) and name in ("seq", "t_ms", "ts_epoch_ms")):
            return f"line {line_no}: field {name} has type {type(value).__name__}"
    try:
        t_ms = float(obj["t_ms"])
    except OverflowError:  # an integer beyond the float range
        t_ms = math.inf
    if not math.isfinite(t_ms):
        return f"line {line_no}: field t_ms is out of range"
    return TraceEvent(schema=schema, run_id=obj["run_id"], seq=obj["seq"], event_type=obj["event_type"],
                      t_ms=t_ms, ts_epoch_ms=obj["ts_epoch_ms"], step=obj["step"],
                      phase=obj["phase"], data=obj["data"], line_no=line_no)


def _read_stream(f: BinaryIO) -> TraceRead:
    events: list[TraceEvent] = []
    problems: list[str] = []
    torn: str | None = None
    line_no = 0
    while True:
        raw = f.readline(MAX_LINE_BYTES + 1)
        if not raw:
            break
        line_no += 1
        if not raw.endswith(b"\n"):
            if len(raw) <= MAX_LINE_BYTES:  # end of file without a newline: a torn write
                torn = raw.decode("utf-8", "replace")[:_TORN_TAIL_MAX_CHARS]
                break
            problems.append(f"line {line_no}: longer than MAX_LINE_BYTES ({MAX_LINE_BYTES}); skipped")
            head = raw
            while raw and not raw.endswith(b"\n"):  # skip the rest of the oversize line
                raw = f.readline(MAX_LINE_BYTES + 1)
            if not raw:
                torn = head[:_TORN_TAIL_MAX_CHARS].decode("utf-8", "replace")
                break
            continue
        body = raw[:-1]
        if not body.strip():
            problems.append(f"line {line_no}: blank line")
            continue
        parsed = _parse_line(body, line_no)
        if isinstance(parsed, str):
            problems.append(parsed)
        else:
            events.append(parsed)
    return TraceRead(events=tuple(events), torn_tail=torn, problems=tuple(problems))


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


def read_trace(source: str | os.PathLike[str] | BinaryIO | bytes) -> TraceRead:
    """Read a trace tolerantly: keep every valid line, report the rest.

    A final line without its newline is a torn write (crash mid-append): it is reported in ``torn_tail`` and
    not parsed, even if it happens to be complete JSON (an event is committed only with its newline).

    Args:
        source: a path, an open binary file, or the file's bytes.

    Raises:
        UnsupportedTraceSchemaError: a line carries an unknown schema major.
        OSError: the path cannot be opened.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _read_stream(io.BytesIO(bytes(source)))
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            return _read_stream(f)
    return _read_stream(source)


# ---------------------------------------------------------------------------------------------------- verifier


@dataclass(frozen=True, kw_only=True)
class VerifyReport:
    """Whether a trace is a complete, consistent execution record. ``ok`` iff ``problems`` is empty."""

    ok: bool
    problems: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    """Things not checked or worth a look (unknown event types, artifacts not checked on disk…)."""
    n_events: int = 0


_WRITE_VERB = r"(?:wrote|written|writ(?:e|ing)|saved?|saving|created?|creating|stored?|storing|generated|exported)"
_FILE_NOUN = r"(?:file|files|artifact|artifacts|document|report|markdown|csv|json)"
_FILENAME = r"[\w.-]+\.(?:md|txt|json|csv|html?|ya?ml|py|log|xml|tsv|pdf|png|svg)\b"
_ARTIFACT_ID_RE = re.compile(r"\b\d{4,}-[0-9a-f]{12}(?:-[A-Za-z0-9._-]+)?")
_CLAIM_RE = re.compile(rf"\b{_WRITE_VERB}\b[^.!?\n]{{0,80}}?(?:\b{_FILE_NOUN}\b|{_FILENAME})"
                       rf"|(?:\b{_FILE_NOUN}\b|{_FILENAME})[^.!?\n]{{0,80}}?\b{_WRITE_VERB}\b", re.IGNORECASE)
_NEGATION_RE = re.compile(r"\b(?:not|never|no|cannot|can't|couldn't|didn't|did not|unable|failed to)\b",
                          re.IGNORECASE)


def claims_artifact(text: str) -> bool:
    """Heuristic: does this answer claim that a file/artifact was written? True if a sentence pairs a write verb
    (wrote, saved, created, …) with a file noun or a file name and is not negated, or if it names an artifact id
    (``NNNN-<12 hex>-name``)."""
    if _ARTIFACT_ID_RE.search(text):
        return True
    for sentence in re.split(r"(?<=[.!?])\s+|\n+", text):
        m = _CLAIM_RE.search(sentence)
        if m and not _NEGATION_RE.search(sentence[:m.end()]):
            return True
    return False


def _final_text(events: list[TraceEvent]) -> tuple[str | None, str | None]:
    """(final answer text, where it came from) — run_completed.final_text, else the last assistant message."""
    candidates: list[tuple[Any, str]] = []
    for ev in reversed(events):
        if ev.event_type == EventType.RUN_COMPLETED and "final_text" in ev.data:
            candidates.append((ev.data["final_text"], f"run_completed (seq {ev.seq})"))
            break
    for ev in reversed(events):
        if ev.event_type == EventType.MESSAGE_COMMITTED and ev.data.get("role") == "assistant":
            candidates.append((ev.data.get("content"), f"message_committed (seq {ev.seq})"))
            break
    for value, origin in candidates:
        if isinstance(value, str):
            return value, origin
        if isinstance(value, dict) and isinstance(value.get("excerpt"), str):
            return value["excerpt"], origin + " summary excerpt"
    return None, (candidates[0][1] if candidates else None)


def _check_envelope(events: list[TraceEvent], problems: list[str], warnings: list[str]) -> None:
    if not events:
        problems.append("trace holds no events")
        return
    run_ids = sorted({ev.run_id for ev in events})
    if len(run_ids) > 1:
        problems.append(f"more than one run_id: {run_ids[:5]}")
    for i, ev in enumerate(events):
        if ev.seq != i:
            problems.append(f"line {ev.line_no}: seq {ev.seq} where {i} was expected (seq starts at 0, "
                            "strictly increasing, no gaps)")
            break
    for prev, ev in zip(events, events[1:]):
        if ev.t_ms < prev.t_ms:
            warnings.append(f"seq {ev.seq}: t_ms goes backwards ({prev.t_ms} -> {ev.t_ms})")
            break
    if events[0].event_type != EventType.RUN_STARTED:
        problems.append(f"first event is {events[0].event_type}, not run_started")
    if not any(ev.event_type == EventType.PROVENANCE for ev in events):
        problems.append("no provenance event")
    terminals = [ev for ev in events if ev.event_type in TERMINAL_EVENTS]
    if not terminals:
        problems.append("no terminal event (run_completed / run_failed / run_cancelled / run_terminated)")
    elif len(terminals) > 1:
        problems.append(f"{len(terminals)} terminal events (seq {[t.seq for t in terminals]}); exactly one allowed")
    elif terminals[0] is not events[-1]:
        problems.append(f"terminal event {terminals[0].event_type} (seq {terminals[0].seq}) is not the last event")
    if terminals and terminals[-1].event_type == EventType.RUN_TERMINATED and not terminals[-1].data.get("limit"):
        problems.append(f"run_terminated (seq {terminals[-1].seq}) does not name its limit")
    known = set(EventType)
    unknown = sorted({ev.event_type for ev in events if ev.event_type not in known})
    if unknown:
        warnings.append(f"unknown event types kept: {unknown}")


def _check_executions(events: list[TraceEvent], artifact_root: Path | None, problems: list[str],
                      warnings: list[str]) -> bool:
    """Tool execution pairing and artifact provenance. Returns whether a write_artifact execution succeeded."""
    started: dict[str, TraceEvent] = {}
    finished: dict[str, TraceEvent] = {}
    written: dict[str, TraceEvent] = {}
    wrote_artifact = False
    for ev in events:
        call_id = ev.data.get("call_id")
        if ev.event_type == EventType.TOOL_EXECUTION_STARTED:
            if not isinstance(call_id, str):
                problems.append(f"seq {ev.seq}: tool_execution_started without a call_id")
            elif call_id in started:
                problems.append(f"seq {ev.seq}: call {call_id} executed twice")
            else:
                started[call_id] = ev
        elif ev.event_type == EventType.TOOL_EXECUTION_FINISHED:
            if not isinstance(call_id, str):
                problems.append(f"seq {ev.seq}: tool_execution_finished without a string call_id")
                continue
            if call_id not in started:
                problems.append(f"seq {ev.seq}: tool_execution_finished for call {call_id!r} that never started")
                continue
            finished[call_id] = ev
            if ev.data.get("ok") is True and ev.data.get("tool") == "write_artifact":
                wrote_artifact = True
        elif ev.event_type == EventType.ARTIFACT_WRITTEN:
            artifact_id = ev.data.get("artifact_id")
            if not isinstance(artifact_id, str):
                problems.append(f"seq {ev.seq}: artifact_written without an artifact_id")
                continue
            if artifact_id in written:
                problems.append(f"seq {ev.seq}: artifact {artifact_id} recorded twice")
            written[artifact_id] = ev
            if not isinstance(call_id, str) or call_id not in started:
                problems.append(f"seq {ev.seq}: artifact {artifact_id} was not produced by a traced tool execution "
                                f"(no tool_execution_started for call {call_id!r} before it)")
    for call_id, ev in started.items():
        if call_id not in finished:
            terminal = events[-1].event_type
            msg = f"seq {ev.seq}: tool execution {call_id} has no tool_execution_finished"
            (problems if terminal == EventType.RUN_COMPLETED else warnings).append(msg)
    listed: dict[str, str] = {}
    for call_id, ev in finished.items():
        ids = ev.data.get("artifact_ids", [])
        if not isinstance(ids, list):
            problems.append(f"seq {ev.seq}: artifact_ids is not a list")
            continue
        for artifact_id in ids:
            if not isinstance(artifact_id, str):
                problems.append(f"seq {ev.seq}: call {call_id} lists an artifact id of type "
                                f"{type(artifact_id).__name__}, not a string")
                continue
            listed[artifact_id] = call_id
            if artifact_id not in written:
                problems.append(f"seq {ev.seq}: call {call_id} lists artifact {artifact_id} but no artifact_written "
                                "event records it")
    for artifact_id, ev in written.items():
        owner = ev.data.get("call_id")
        if isinstance(owner, str) and owner in started and listed.get(artifact_id) != ev.data.get("call_id"):
            problems.append(f"seq {ev.seq}: artifact {artifact_id} is not listed by tool_execution_finished of "
                            f"call {ev.data.get('call_id')}")
        _check_artifact_on_disk(ev, artifact_id, artifact_root, problems)
    if written and artifact_root is None:
        warnings.append(f"{len(written)} artifact(s) not checked on disk (no artifact_root given)")
    return wrote_artifact


def _check_artifact_on_disk(ev: TraceEvent, artifact_id: str, root: Path | None, problems: list[str]) -> None:
    if root is None:
        return
    if "/" in artifact_id or "\\" in artifact_id or artifact_id in (".", ".."):
        problems.append(f"seq {ev.seq}: artifact id {artifact_id!r} is not a plain file name")
        return
    path = root / artifact_id
    if not path.is_file():
        problems.append(f"seq {ev.seq}: artifact {artifact_id} missing under {root}")
        return
    digest = sha256_file(path)
    if digest != ev.data.get("sha256"):
        problems.append(f"seq {ev.seq}: artifact {artifact_id} sha256 {digest} does not match the trace "
                        f"({ev.data.get('sha256')})")
    elif "size_bytes" in ev.data and path.stat().st_size != ev.data["size_bytes"]:
        problems.append(f"seq {ev.seq}: artifact {artifact_id} size differs from the trace")


def verify_trace(path: str | os.PathLike[str] | BinaryIO | bytes, *,
                 artifact_root: str | os.PathLike[str] | None = None) -> VerifyReport:
    """Check that a trace is a complete, consistent execution record. Never raises for a bad trace (an unknown
    schema major is reported as a problem); raises ``OSError`` only if the trace itself cannot be opened.

    Checks: every line parses with the v1 envelope; seq 0,1,2,… without gaps; one run_id; run_started first;
    a provenance event; exactly one terminal event, last; every started tool execution finished (a problem for a
    completed run); every artifact_written follows a tool_execution_started of its call, is listed by that call's
    tool_execution_finished, and (given ``artifact_root``) exists there with the recorded sha256 and size; and if
    the final answer claims a file/artifact was written, a ``write_artifact`` execution succeeded, and every
    artifact id the answer names was recorded.
    """
    problems: list[str] = []
    warnings: list[str] = []
    try:
        read = read_trace(path)
    except UnsupportedTraceSchemaError as e:
        return VerifyReport(ok=False, problems=(str(e),))
    problems.extend(read.problems)
    if read.torn_tail is not None:
        problems.append(f"torn final line ({len(read.torn_tail)} chars): the run was interrupted mid-write")
    events = list(read.events)
    _check_envelope(events, problems, warnings)
    root = Path(artifact_root) if artifact_root is not None else None
    wrote_artifact = _check_executions(events, root, problems, warnings)
    text, origin = _final_text(events)
    if text is None:
        if origin is not None:
            warnings.append(f"final answer at {origin} is hashed; artifact-claim check skipped")
    else:
        if claims_artifact(text) and not wrote_artifact:
            problems.append(f"final answer claims an artifact but no write_artifact execution exists "
                            f"(answer from {origin})")
        recorded = [r for ev in events if ev.event_type == EventType.ARTIFACT_WRITTEN
                    and isinstance(r := ev.data.get("artifact_id"), str)]  # non-strings were reported above
        for named in (n.rstrip("._-") for n in _ARTIFACT_ID_RE.findall(text)):
            if not any(r == named or r.startswith(named) for r in recorded):
                problems.append(f"final answer names artifact {named} that the trace never recorded")
    return VerifyReport(ok=not problems, problems=tuple(problems), warnings=tuple(warnings),
                        n_events=len(events))
