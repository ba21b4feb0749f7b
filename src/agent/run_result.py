"""The typed exit of one run: how it ended (`LoopOutcome`), in which phase (`Phase`), and what it left
(`RunResult`). Built by `agent.session`, traced by `agent.run_trace`.

Every path out of the session loop is an `Ending` (outcome, phase, detail, the limit breached, the final text),
which becomes the run's terminal trace event and its `RunResult`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from agent.grounding import ClaimGrounding
from agent.ledger import LedgerEntry
from agent.limits import LimitBreach, LimitKind

__all__ = ["Ending", "LoopOutcome", "Phase", "RunResult"]


class LoopOutcome(enum.StrEnum):
    """How a run ended."""

    COMPLETED = "completed"
    """The model answered with final text, which was committed."""
    CANCELLED = "cancelled"
    """The cancel token was tripped; the committed prefix is valid, nothing speculative was committed."""
    LIMIT = "limit"
    """A bound of `AgentLimits` was hit; ``RunResult.limit`` names it."""
    FAILED = "failed"
    """The engine or the trace failed; ``RunResult.detail`` says how."""


class Phase(enum.StrEnum):
    """The phase of the loop an event belongs to or a run ended in (the trace's ``phase`` field)."""

    START = "start"
    """``run_started`` and ``provenance``, before the first message is committed."""
    COMMIT = "commit"
    """A message (system, user, assistant turn) entered the committed conversation."""
    MODEL = "model"
    """A model turn: the boundary before it, generation, the output-token check."""
    PARSE = "parse"
    """The codec read the turn as FinalText | ToolCalls | MalformedToolCall."""
    VALIDATE = "validate"
    """A call's boundary (cancel, tool-call and wall limits) and its argument validation."""
    APPROVE = "approve"
    """The approval policy decided on a validated call."""
    EXECUTE = "execute"
    """A tool ran (or its earlier outcome was replayed)."""
    REINJECT = "reinject"
    """A result went back to the model as a tool message (or was left uncommitted by a cancel)."""
    FINISH = "finish"
    """The final answer was committed (or found empty)."""
    TRACE = "trace"
    """The trace could not be written or refused an event."""


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """The typed exit of one run."""

    outcome: LoopOutcome
    """Which exit the loop took."""
    limit: LimitKind | None
    """The bound hit when ``outcome`` is ``limit``; None otherwise."""
    final_text: str | None
    """The committed final answer when ``outcome`` is ``completed``; None otherwise."""
    claims: tuple[ClaimGrounding, ...] = ()
    """The final answer's claims (numbers, quoted strings, names), each with its source (`agent.grounding`); a
    claim whose ``source.grounded`` is false came from the model's memory."""
    messages: list[dict[str, Any]]
    """The committed conversation (OpenAI-format messages), system and user included."""
    ledger: tuple[LedgerEntry, ...]
    """One entry per committed transition, parallel to ``messages``."""
    steps: int
    """Model turns started."""
    tool_calls: int
    """Tool calls counted (executed or rejected)."""
    run_id: str
    """The trace's run id (or a generated one when the run is not traced)."""
    detail: str = ""
    """One sentence on how the run ended (the limit observed, the cancel reason, the failure)."""
    phase: Phase | None = None
    """The phase the run ended in (``model``, ``parse``, ``validate``, ``approve``, ``execute``...)."""


@dataclass(frozen=True, kw_only=True)
class Ending:
    """How the loop left, before it becomes the terminal event and the `RunResult`."""

    outcome: LoopOutcome
    phase: Phase
    detail: str = ""
    breach: LimitBreach | None = None
    """The limit hit, when ``outcome`` is ``limit``."""
    final_text: str | None = None
    """The committed answer, when ``outcome`` is ``completed``."""
    claims: tuple[ClaimGrounding, ...] = ()
    """The answer's claims and their sources, when ``outcome`` is ``completed``."""
    step: str | None = None
    """The trace step the ending belongs to (``model-3``, ``tool-2``), if any."""
