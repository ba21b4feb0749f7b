"""Misuse of the agent API: the errors that *raise*.

Outcomes a run expects (a malformed call, invalid arguments, a tool that fails or times out, a cancel) are
values, never exceptions: see `agent.results.ResultErrorKind`, `agent.schema.ArgumentErrors` and
`agent.tool.ToolOutcome`. What is here is a programming error on the caller's side (a duplicate tool name, a
schema that is not a schema, arguments validated for a different tool, a result budget too small to say
anything): fail loud, with fields that say what and where.

    AgentError
    ├── DuplicateToolError(name)                         ValueError
    ├── ToolDefinitionError(name, detail)                ValueError
    ├── ArgumentsMismatchError(tool_name, arguments_tool, reason)   ValueError
    └── ResultBudgetError(max_bytes, min_bytes)          ValueError

(`agent.artifact` keeps its own `ArtifactError` family; it is usable without the rest of the agent.)
"""

from __future__ import annotations

__all__ = [
    "AgentError",
    "ArgumentsMismatchError",
    "DuplicateToolError",
    "ResultBudgetError",
    "ToolDefinitionError",
]


class AgentError(Exception):
    """Base of every misuse error the agent package raises."""


class DuplicateToolError(AgentError, ValueError):
    """Two tools in one registry share a name; the model could not say which one it means."""

    def __init__(self, name: str) -> None:
        super().__init__(f"tool name {name!r} is registered twice; tool names must be unique in a registry "
                         f"(namespace them, e.g. 'crm.{name}' and 'billing.{name}')")
        self.name = name


class ToolDefinitionError(AgentError, ValueError):
    """A tool cannot be defined as given: bad name, unusable signature, or a parameters schema that is not a
    valid Draft 2020-12 object schema."""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"tool {name!r}: {detail}")
        self.name = name
        self.detail = detail


class ArgumentsMismatchError(AgentError, ValueError):
    """`ValidatedArguments` were handed to a tool they were not validated for (another tool's name, or a
    different parameters schema)."""

    def __init__(self, tool_name: str, arguments_tool: str, reason: str) -> None:
        super().__init__(f"arguments validated for {arguments_tool!r} cannot run tool {tool_name!r}: {reason}")
        self.tool_name = tool_name
        self.arguments_tool = arguments_tool
        self.reason = reason


class ResultBudgetError(AgentError, ValueError):
    """``max_bytes`` is too small to hold even the truncation wrapper of a result."""

    def __init__(self, max_bytes: int, min_bytes: int) -> None:
        super().__init__(f"max_bytes={max_bytes} cannot hold a truncated result; this result needs at least "
                         f"{min_bytes} bytes for its wrapper (use a budget of a few hundred bytes or more)")
        self.max_bytes = max_bytes
        self.min_bytes = min_bytes
