"""What one tool execution attempt produced: `ToolOutcome`, a value, never an exception.

Built by `agent.tool.execution` (and replayed by `agent.tool.idempotency`); the session turns it into the
ok / ok:false result the model receives (`ToolOutcome.to_result`, through `agent.results`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent.results import ResultErrorKind, error_result, ok_result

if TYPE_CHECKING:
    from agent.artifact import ArtifactRef

__all__ = ["ToolOutcome"]


@dataclass(frozen=True, kw_only=True)
class ToolOutcome:
    """What one execution attempt produced. A value, never an exception."""

    ok: bool
    value: Any = None
    """The tool's JSON result (a private copy) when ``ok``; None otherwise."""
    error_kind: ResultErrorKind | None = None
    """Why it failed; None when ``ok``."""
    detail: str = ""
    """Model-facing explanation of a failure."""
    duration_ms: float = 0.0
    """Wall time from start to outcome (for a replay: the original call's)."""
    artifacts: tuple[ArtifactRef, ...] = ()
    """Artifacts the call published through ``ctx.artifacts`` (also on failure: effects are real)."""
    replayed: bool = False
    """True when the idempotency store returned an earlier outcome instead of running again."""
    linked_runs: tuple[str, ...] = ()
    """Nested run ids the call linked (orchestration tools)."""
    started: bool = False
    """Whether the function began running, i.e. whether effects may exist."""

    def to_result(self) -> dict[str, Any]:
        """The ok / ok:false result the model receives (`agent.results`)."""
        if self.ok:
            return ok_result(self.value)
        return error_result(self.error_kind or ResultErrorKind.EXECUTION_FAILED, self.detail)
