"""What a trace line is: the schema id and its versioning rule, the envelope, the event vocabulary, and the
errors of writing or reading one. Shared by the recorder (`agent.trace`) and the reader (`agent.trace_reader`).

    {"schema": "ember.agent.trace.v1", "run_id": "run-…", "seq": 7, "event_type": "tool_execution_finished",
     "t_ms": 812.345, "ts_epoch_ms": 1767225600123, "step": "tool-3", "phase": "execute", "data": {...}}

Versioning rule: ``ember.agent.trace.v1`` and ``ember.agent.trace.v1.<minor>`` are readable (a minor adds optional
fields or event types, never changes a meaning); any other major is rejected. Every event's data fields and the
OpenTelemetry mapping are in ``docs/trace.md``.
"""

from __future__ import annotations

import enum
import re

from agent.errors import AgentError

__all__ = [
    "ENVELOPE",
    "MAX_LINE_BYTES",
    "TERMINAL_EVENTS",
    "TRACE_SCHEMA",
    "TRACE_SCHEMA_MAJOR",
    "EventType",
    "TraceError",
    "TraceMisuseError",
    "TraceWriteError",
    "UnsupportedTraceSchemaError",
]

TRACE_SCHEMA = "ember.agent.trace.v1"
"""The schema every line carries. Readers accept major 1 with any minor (``…v1`` or ``…v1.<n>``)."""
TRACE_SCHEMA_MAJOR = 1
MAX_LINE_BYTES = 16 * 1024 * 1024
"""Longest line (event) the recorder writes and the reader parses; longer lines are refused / reported."""
SCHEMA_RE = re.compile(r"^ember\.agent\.trace\.v(\d+)(?:\.(\d+))?$")
"""A schema string: group 1 the major, group 2 the minor."""
ENVELOPE = ("schema", "run_id", "seq", "event_type", "t_ms", "ts_epoch_ms", "step", "phase", "data")
"""Every line's fields, in the order the recorder writes them."""

class EventType(enum.StrEnum):
    """The event vocabulary. Data fields per type are listed in ``docs/trace.md``."""

    RUN_STARTED = "run_started"
    PROVENANCE = "provenance"
    MODEL_CALL_STARTED = "model_call_started"
    MODEL_CALL_FINISHED = "model_call_finished"
    ASSISTANT_ACTION_PARSED = "assistant_action_parsed"
    REPEATS_REFUSED = "repeats_refused"
    """A turn made only of calls the conversation already answered was rolled back unrun (`agent.repeats`)."""
    TOOL_CALL_VALIDATED = "tool_call_validated"
    TOOL_CALL_REJECTED = "tool_call_rejected"
    TOOL_EXECUTION_STARTED = "tool_execution_started"
    TOOL_EXECUTION_FINISHED = "tool_execution_finished"
    TOOL_RESULT_COMMITTED = "tool_result_committed"
    TOOL_RESULT_UNCOMMITTED = "tool_result_uncommitted"
    TOOLS_CHANGED = "tools_changed"
    """Between two model turns the offered tools changed (an MCP server's ``list_changed``); data as provenance's."""
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


class TraceError(AgentError):
    """Base of every error the trace modules raise (recorder, reader)."""


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
