"""Approval: whether a validated call may run, asked before any effect.

    ValidatedArguments ─► check_approval(policy, tool, args) ─► ApprovalDecision(allowed, reason)
                             policy raised / answered something else ─► denied (fail closed)

`default_policy` allows data, orchestration and run-local actions and denies actions marked ``external=True``
(effects outside the run) and tools marked ``requires_approval=True`` (an MCP action that may destroy data). A
denial is traced and reinjected as ``denied_by_policy``; the tool never runs. `pre_approved` approves named tools
(glob patterns) and leaves every other call to another policy.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from agent.schema import ValidatedArguments
from agent.tool.definition import Tool, ToolKind

__all__ = ["ApprovalDecision", "ApprovalPolicy", "check_approval", "default_policy", "pre_approved"]


@dataclass(frozen=True, kw_only=True)
class ApprovalDecision:
    """Whether a validated call may run, and why (the reason is traced, and reinjected on denial)."""

    allowed: bool
    reason: str


class ApprovalPolicy(Protocol):
    """Decides, per validated call, whether it may execute. Called before any effect."""

    def __call__(self, tool: Tool, args: ValidatedArguments) -> ApprovalDecision: ...


def default_policy(tool: Tool, args: ValidatedArguments) -> ApprovalDecision:
    """Allow data, orchestration and run-local action tools; deny actions with effects outside the run and tools
    that require approval."""
    if tool.requires_approval:
        return ApprovalDecision(allowed=False, reason=f"tool {tool.name!r} requires approval and the default policy "
                                                      f"approves nothing; the user must pre-approve it")
    if tool.kind is ToolKind.ACTION and tool.external:
        return ApprovalDecision(allowed=False, reason=f"tool {tool.name!r} has effects outside this run and the "
                                                      f"default policy does not approve external actions")
    return ApprovalDecision(allowed=True, reason=f"{tool.kind.value} tool allowed by the default policy")


def pre_approved(patterns: Iterable[str], otherwise: ApprovalPolicy = default_policy) -> ApprovalPolicy:
    """A policy that approves every call of a tool whose name matches one of ``patterns`` (`fnmatch` globs:
    ``fs.write_file``, ``memory.*``) and asks ``otherwise`` about the rest.

    Raises:
        ValueError: a pattern is not a non-empty string.
    """
    globs = tuple(patterns)
    if not all(isinstance(p, str) and p for p in globs):
        raise ValueError(f"pre_approved takes non-empty tool-name patterns, got {globs!r}")

    def policy(tool: Tool, args: ValidatedArguments) -> ApprovalDecision:
        for glob in globs:
            if fnmatch.fnmatchcase(tool.name, glob):
                return ApprovalDecision(allowed=True, reason=f"tool {tool.name!r} pre-approved by the user "
                                                             f"({glob})")
        return otherwise(tool, args)

    policy.__name__ = f"pre_approved({', '.join(globs)})"
    return policy


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


