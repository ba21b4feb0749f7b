"""Approval: whether a validated call may run, asked before any effect.

    ValidatedArguments ─► check_approval(policy, tool, args) ─► ApprovalDecision(allowed, reason)
                             policy raised / answered something else ─► denied (fail closed)

`default_policy` allows data, orchestration and run-local actions and denies actions marked ``external=True``
(effects outside the run). A denial is traced and reinjected as ``denied_by_policy``; the tool never runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from agent.schema import ValidatedArguments
from agent.tool.definition import Tool, ToolKind

__all__ = ["ApprovalDecision", "ApprovalPolicy", "check_approval", "default_policy"]


@dataclass(frozen=True, kw_only=True)
class ApprovalDecision:
    """Whether a validated call may run, and why (the reason is traced, and reinjected on denial)."""

    allowed: bool
    reason: str


class ApprovalPolicy(Protocol):
    """Decides, per validated call, whether it may execute. Called before any effect."""

    def __call__(self, tool: Tool, args: ValidatedArguments) -> ApprovalDecision: ...


def default_policy(tool: Tool, args: ValidatedArguments) -> ApprovalDecision:
    """Allow data, orchestration and run-local action tools; deny actions with effects outside the run."""
    if tool.kind is ToolKind.ACTION and tool.external:
        return ApprovalDecision(allowed=False, reason=f"tool {tool.name!r} has effects outside this run and the "
                                                      f"default policy does not approve external actions")
    return ApprovalDecision(allowed=True, reason=f"{tool.kind.value} tool allowed by the default policy")


def check_approval(policy: ApprovalPolicy, tool: Tool, args: ValidatedArguments) -> ApprovalDecision:
    """Ask ``policy``; a policy that raises or answers something else denies (fail closed)."""
    try:
        decision = policy(tool, args)
    except Exception as exc:
        return ApprovalDecision(allowed=False, reason=f"approval policy failed: {type(exc).__name__}: {exc}")
    if not isinstance(decision, ApprovalDecision):
        return ApprovalDecision(allowed=False, reason=f"approval policy returned {type(decision).__name__}, "
                                                      f"not an ApprovalDecision")
    return decision


