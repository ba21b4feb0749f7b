"""Run limits: one frozen object of documented bounds, enforced by named checks at named boundaries.

Owns: `AgentLimits` (the bounds), `RunUsage` (what a run has consumed so far), `LimitKind` and
`LimitBreach` (which bound a run hit, as a value). Refuses: deciding what a breach does to the
conversation; the session ends the run with outcome ``limit`` and traces ``run_terminated``.

    boundary                          check                          bounds
    ─────────────────────────────────────────────────────────────────────────────────────────────
    before each model turn            check_before_model_turn        max_model_steps, max_wall_s
    during the turn (engine budget)   max_output_tokens → max_tokens
    after the turn                    check_turn_output              max_output_tokens (cut = breach)
    before each tool call             check_before_tool_call         max_tool_calls, max_wall_s
    while a tool runs                 tool_timeout                   tool_timeout_s, tool's own, wall left
    reinjecting a result              max_result_bytes → results.result_content(max_bytes=...)  (truncates)

A check returns ``None`` or a `LimitBreach`; none of them raises, because hitting a limit is an expected
outcome of a run, not misuse. Misconfigured limits (zero, negative, NaN, infinite) raise `ValueError` at
construction.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from constrained import FinishReason

__all__ = ["MIN_RESULT_BYTES", "AgentLimits", "LimitBreach", "LimitKind", "RunUsage"]

MIN_RESULT_BYTES = 256
"""Smallest ``max_result_bytes``: room for the truncation wrapper of any result plus some payload."""
_MIN_TIMEOUT_S = 0.001
"""Floor of a wall-capped tool timeout: the wall check passed an instant ago, so the call gets a (tiny) chance
rather than a zero timeout, which the executor would refuse."""


class LimitKind(enum.StrEnum):
    """The bound that ended a run."""

    MODEL_STEPS = "model_steps"
    """``max_model_steps`` model turns were already taken."""
    TOOL_CALLS = "tool_calls"
    """``max_tool_calls`` calls were already counted."""
    WALL_TIME = "wall_time"
    """``max_wall_s`` seconds have elapsed since the run started."""
    OUTPUT_TOKENS = "output_tokens"
    """A model turn was cut at ``max_output_tokens`` before it ended on its own."""


@dataclass(frozen=True, kw_only=True)
class RunUsage:
    """What a run has consumed, as seen at a boundary."""

    steps: int = 0
    """Model turns started so far."""
    tool_calls: int = 0
    """Tool calls counted so far (every call the model requested, executed or rejected)."""
    elapsed_s: float = 0.0
    """Seconds since the run started, by the session's clock."""


@dataclass(frozen=True, kw_only=True)
class LimitBreach:
    """A bound a run hit: which one, its configured value and what was observed."""

    kind: LimitKind
    """Which bound."""
    limit: float
    """The configured value of that bound."""
    observed: float
    """What the run had consumed when the check ran."""

    def describe(self) -> str:
        """One sentence for ``RunResult.detail`` and the trace."""
        return f"limit {self.kind.value} reached: observed {self.observed:g}, limit {self.limit:g}"


@dataclass(frozen=True, kw_only=True)
class AgentLimits:
    """The bounds of one run. ``None`` removes a bound (documented, never the default)."""

    max_model_steps: int | None = 8
    """Model turns per run (a repair turn after a rejected call counts like any other). Checked before a turn."""
    max_tool_calls: int | None = 16
    """Tool calls per run, counting every call the model requested, including rejected ones and each call of a
    multi-call turn. Checked before each call."""
    max_wall_s: float | None = 600.0
    """Seconds per run by the session's clock. Checked before each model turn and each tool call; also caps the
    per-call tool timeout to the time left."""
    tool_timeout_s: float | None = 60.0
    """Seconds one tool call may run before its watchdog detaches it (``timeout`` result). A tool's own
    ``timeout_s`` can only lower it."""
    max_output_tokens: int = 256
    """Tokens one model turn may generate; passed to the engine as ``max_tokens``. A turn cut at this budget
    ends the run (``output_tokens``): a truncated turn is not a complete assistant message."""
    max_result_bytes: int = 32_768
    """UTF-8 bytes of one reinjected tool result; longer results are truncated with an explicit marker
    (`agent.results.result_content`). At least ``MIN_RESULT_BYTES``."""

    def __post_init__(self) -> None:
        for name in ("max_model_steps", "max_tool_calls", "max_wall_s", "tool_timeout_s",
                     "max_output_tokens", "max_result_bytes"):
            value = getattr(self, name)
            if value is None and name not in ("max_output_tokens", "max_result_bytes"):
                continue
            if (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0  # NaN too
                    or (isinstance(value, float) and not math.isfinite(value))):
                raise ValueError(f"AgentLimits.{name} must be a positive finite number"
                                 f"{'' if name.startswith(('max_output', 'max_result')) else ' or None'}, "
                                 f"got {value!r}")
        if self.max_result_bytes < MIN_RESULT_BYTES:
            raise ValueError(f"AgentLimits.max_result_bytes must be at least {MIN_RESULT_BYTES} (room for the "
                             f"truncation marker), got {self.max_result_bytes}")

    # -- named checks, one per boundary --

    def check_before_model_turn(self, usage: RunUsage) -> LimitBreach | None:
        """Before a model turn: may another turn start?"""
        if self.max_model_steps is not None and usage.steps >= self.max_model_steps:
            return LimitBreach(kind=LimitKind.MODEL_STEPS, limit=self.max_model_steps, observed=usage.steps)
        return self._check_wall(usage)

    def check_before_tool_call(self, usage: RunUsage) -> LimitBreach | None:
        """Before a tool call is validated and executed: may another call be counted?"""
        if self.max_tool_calls is not None and usage.tool_calls >= self.max_tool_calls:
            return LimitBreach(kind=LimitKind.TOOL_CALLS, limit=self.max_tool_calls, observed=usage.tool_calls)
        return self._check_wall(usage)

    def check_turn_output(self, n_output_tokens: int, finish_reason: FinishReason) -> LimitBreach | None:
        """After a model turn: was it cut by the output-token budget rather than ending on its own?"""
        if finish_reason == FinishReason.LENGTH or n_output_tokens > self.max_output_tokens:
            return LimitBreach(kind=LimitKind.OUTPUT_TOKENS, limit=self.max_output_tokens,
                               observed=n_output_tokens)
        return None

    def tool_timeout(self, tool_timeout_s: float | None, usage: RunUsage) -> float | None:
        """The timeout for one call: the smallest of the run's, the tool's own and the wall time left (≥ 1 ms)."""
        candidates = [t for t in (self.tool_timeout_s, tool_timeout_s) if t is not None]
        if self.max_wall_s is not None:
            candidates.append(max(self.max_wall_s - usage.elapsed_s, _MIN_TIMEOUT_S))
        return min(candidates) if candidates else None

    def _check_wall(self, usage: RunUsage) -> LimitBreach | None:
        if self.max_wall_s is not None and usage.elapsed_s >= self.max_wall_s:
            return LimitBreach(kind=LimitKind.WALL_TIME, limit=self.max_wall_s, observed=usage.elapsed_s)
        return None
