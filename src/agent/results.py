"""What a tool call returns to the model: the one builder of ok and ok:false results, and their bounded text.

    ToolOutcome / ArgumentErrors / malformed call ─► ok_result | error_result ─► dict ─► result_content(max_bytes)
                                                                                        └─► (JSON text, truncated?)

Every result the session reinjects, the trace records and a codec renders is built here, so they cannot
disagree about shape:

    {"ok": true,  "result": <JSON value>}
    {"ok": false, "kind": "invalid_arguments", "detail": "...", "errors": [{"path": "a", "reason": "..."}]}

``errors`` is always present on ok:false results (empty when the failure is not about particular arguments).

Truncation policy (`result_content`): the text the model receives is **always valid JSON**. Cutting the JSON
text itself would hand the model a broken document, so an oversized result is replaced by a wrapper that
carries a prefix of the payload as a string, with the marker fields ``truncated: true`` and ``original_bytes``
(the size of the full text):

    {"ok": true,  "truncated": true, "original_bytes": 90210, "result": "<prefix of the value>"}
    {"ok": false, "kind": "...", "truncated": true, "original_bytes": 90210, "detail": "<prefix of detail+errors>"}

The payload of an ok result is the value itself when it is a string (so file text stays readable), else its
compact JSON text. Prefixes end on a code-point boundary (never inside a UTF-8 sequence); the wrapper is the
longest one whose UTF-8 encoding fits ``max_bytes``. A grapheme cluster (e.g. a letter and its combining accent)
may still be split. Unpaired surrogates are written as ``\\udXXX`` escapes so the text is always encodable.

Refuses: a ``max_bytes`` too small for the wrapper (`ResultBudgetError`), non-JSON values (``TypeError`` /
``ValueError`` from `json`; tool values were already checked by `agent.tool.execute_tool`).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agent.errors import ResultBudgetError

if TYPE_CHECKING:
    from agent.argument_errors import ArgumentError

__all__ = ["ResultErrorKind", "error_result", "ok_result", "result_content", "result_json"]


class ResultErrorKind(enum.StrEnum):
    """Why a call produced an ok:false result."""

    MALFORMED_CALL = "malformed_call"
    """The turn attempted a call that could not be parsed."""
    UNKNOWN_TOOL = "unknown_tool"
    INVALID_ARGUMENTS = "invalid_arguments"
    DENIED_BY_POLICY = "denied_by_policy"
    EXECUTION_FAILED = "execution_failed"
    """The tool ran and raised (or reported a failure)."""
    SERVER_FAILED = "server_failed"
    """The server that runs the tool (an MCP server) failed under the call: it exited, sent malformed JSON-RPC or
    answered with a protocol error. Whether the effect happened is unknown."""
    TIMEOUT = "timeout"
    """The watchdog gave up; the worker was detached and its late result discarded."""
    CANCELLED = "cancelled"
    RESULT_NOT_SERIALIZABLE = "result_not_serializable"
    LIMIT_EXCEEDED = "limit_exceeded"


def ok_result(value: Any) -> dict[str, Any]:
    """``{"ok": true, "result": value}``."""
    return {"ok": True, "result": value}


def error_result(kind: ResultErrorKind | str, detail: str,
                 errors: Sequence[ArgumentError] = ()) -> dict[str, Any]:
    """``{"ok": false, "kind": ..., "detail": ..., "errors": [{"path": ..., "reason": ...}, ...]}``.

    Raises:
        ValueError: ``kind`` is not a `ResultErrorKind`.
    """
    kind = ResultErrorKind(kind)
    return {"ok": False, "kind": kind.value, "detail": str(detail),
            "errors": [{"path": e.path, "reason": e.reason} for e in errors]}


_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def result_json(value: Any) -> str:
    """Compact JSON text (``ensure_ascii=False``) that is always encodable as UTF-8."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if _SURROGATE_RE.search(text):
        text = _SURROGATE_RE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def result_content(result: dict[str, Any], *, max_bytes: int) -> tuple[str, bool]:
    """The JSON text of ``result`` in at most ``max_bytes`` UTF-8 bytes, and whether it had to be truncated.

    Raises:
        ResultBudgetError: ``max_bytes`` cannot hold even an empty truncation wrapper.
    """
    text = result_json(result)
    original_bytes = _size(text)
    if original_bytes <= max_bytes:
        return text, False
    if result.get("ok") is True:
        value = result.get("result")
        payload = value if isinstance(value, str) else result_json(value)
        head: dict[str, Any] = {"ok": True, "truncated": True, "original_bytes": original_bytes}
        field = "result"
    else:
        errors = result.get("errors") or []
        payload = str(result.get("detail", "")) + (f" errors: {result_json(errors)}" if errors else "")
        head = {"ok": False, "kind": result.get("kind"), "truncated": True, "original_bytes": original_bytes}
        field = "detail"

    def wrapped(n_chars: int) -> str:
        return result_json({**head, field: payload[:n_chars]})

    smallest = wrapped(0)
    if _size(smallest) > max_bytes:
        raise ResultBudgetError(max_bytes, _size(smallest))
    lo, hi = 0, min(len(payload), max_bytes)  # every code point costs at least one byte
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _size(wrapped(mid)) <= max_bytes:
            lo = mid
        else:
            hi = mid - 1
    return wrapped(lo), True
