"""Reading a trace back, tolerantly: every valid line as a `TraceEvent`, the rest reported, a torn last line
kept apart.

    file ─► read_trace ─► TraceRead(events, torn_tail, problems)

A final line without its newline is a torn write (a crash mid-append): reported, never parsed. Corrupt, oversize
or malformed lines are skipped and reported (``line N: …``). A line of another schema major raises
`UnsupportedTraceSchemaError`: it is not this format.
"""

from __future__ import annotations

import io
import json
import math
import os
from dataclasses import dataclass
from typing import Any, BinaryIO

from agent.trace_format import (ENVELOPE, MAX_LINE_BYTES, SCHEMA_RE, TRACE_SCHEMA, TRACE_SCHEMA_MAJOR,
                                UnsupportedTraceSchemaError)

__all__ = ["TraceEvent", "TraceRead", "read_trace"]

_TORN_TAIL_MAX_CHARS = 65536


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
        return {k: getattr(self, k) for k in ENVELOPE}


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
    m = SCHEMA_RE.match(schema)
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
