"""Tools: what a tool is, which ones a session offers, and how one validated call runs.

    Tool.from_function / from_pydantic / from_openai ─► Tool ─► ToolRegistry ─► specs() ─► codec (render, grammar)

    ValidatedArguments ─► execute_tool ─► approval? ─► idempotency replay? ─► watchdog ─► ToolOutcome

One job per module, each re-exported here (``from agent.tool import Tool, ToolRegistry, execute_tool`` is the
import to use):

- `agent.tool.definition`: `Tool`, `ToolKind`, `ToolServer`, `ToolContext`, `ToolFailure`, `grounded` (definitions,
  checked at definition)
- `agent.tool.registry`: `ToolRegistry` (the ordered, unique-by-name set a session offers)
- `agent.tool.approval`: `ApprovalDecision`, `ApprovalPolicy`, `default_policy`, `pre_approved`, `check_approval`
  (fail closed)
- `agent.tool.idempotency`: `IdempotencyStore` (an action runs at most once per key)
- `agent.tool.outcome`: `ToolOutcome` (what an execution attempt produced: a value, never an exception)
- `agent.tool.execution`: `execute_tool` (approval → idempotency → a watchdog over a worker thread)

Layered without cycles: definition ← registry, approval, idempotency (← outcome) ← execution. A tool runs
through `execute_tool(tool, args, ctx, ...)`: the one door from `ValidatedArguments` to an effect.
"""

from agent.tool.approval import ApprovalDecision, ApprovalPolicy, check_approval, default_policy, pre_approved
from agent.tool.definition import (TOOL_NAME_RE, CancelSignal, Tool, ToolContext, ToolFailure, ToolFunction,
                                   ToolKind, ToolServer, grounded)
from agent.tool.execution import execute_tool
from agent.tool.idempotency import IDEMPOTENCY_KEY_FIELD, IdempotencyStore
from agent.tool.outcome import ToolOutcome
from agent.tool.registry import ToolRegistry

__all__ = [
    "IDEMPOTENCY_KEY_FIELD",
    "TOOL_NAME_RE",
    "ApprovalDecision",
    "ApprovalPolicy",
    "CancelSignal",
    "IdempotencyStore",
    "Tool",
    "ToolContext",
    "ToolFailure",
    "ToolFunction",
    "ToolKind",
    "ToolOutcome",
    "ToolRegistry",
    "ToolServer",
    "check_approval",
    "default_policy",
    "execute_tool",
    "grounded",
    "pre_approved",
]
