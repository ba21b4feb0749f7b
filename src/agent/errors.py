"""Misuse of the agent API: the errors that *raise*, all under one root, `AgentError`.

Outcomes a run expects (a malformed call, invalid arguments, a tool that fails or times out, a cancel) are
values, never exceptions: see `agent.results.ResultErrorKind`, `agent.schema.ArgumentErrors` and
`agent.tool.ToolOutcome`. What raises is a programming error on the caller's side or input our API cannot use
(a duplicate tool name, a schema that is not a schema, an unknown codec, a trace that cannot be written): fail
loud, with fields that say what and where. Each family keeps a second, standard base (``ValueError``,
``OSError``…), so ``except ValueError`` clauses keep working; ``except AgentError`` catches them all (the CLI
does: one line, exit 2).

    AgentError                                                        (here)
    ├── DuplicateToolError(name)                          ValueError  (here)
    ├── ToolDefinitionError(name, detail)                 ValueError  (here)
    ├── ArgumentsMismatchError(tool_name, arguments_tool, reason)  ValueError  (here)
    ├── ResultBudgetError(max_bytes, min_bytes)           ValueError  (here)
    ├── InputError                                        ValueError  agent.inputs: a CLI flag or input file
    ├── SessionError                                                  agent.session: misuse of a Session
    │   └── ToolChoicePlanError(choice, tools)            ValueError
    ├── LedgerError                                                   agent.ledger: a commit out of order
    ├── EngineError                                                   agent.engine: the model turn failed
    │   ├── ContextWindowError(n_prompt_tokens, max_tokens, n_ctx)
    │   └── ScriptExhaustedError(n_turns)                             agent.testkit
    ├── ProtocolError                                                 agent.protocol.base: codecs
    │   ├── UnknownCodecError(family_or_model, known)     ValueError
    │   ├── MessageFormatError(index, reason)             ValueError
    │   ├── TemplateVariableError(names, accepted)        TypeError
    │   ├── ToolChoiceError(tool_choice, offered, reason) ValueError
    │   └── ToolNameError(name, reason)                   ValueError
    ├── TraceError                                                    agent.trace_format: recorder and reader
    │   ├── TraceMisuseError(event_type)                  ValueError
    │   ├── TraceWriteError(path, errno_code, seq)        OSError
    │   └── UnsupportedTraceSchemaError(schema, line_no)  ValueError
    ├── ArtifactError                                                 agent.artifact
    │   ├── InvalidArtifactIdError(artifact_id)           ValueError
    │   ├── ArtifactNotFoundError(artifact_id, root)      FileNotFoundError
    │   └── ArtifactIntegrityError(artifact_id, actual_sha256)
    └── ModelStoreError(model, detail, expected_sha256, actual_sha256, hint)  RuntimeError  agent.models

Not here, by design: `agent.tool.ToolFailure` is how a *tool* fails its call (it becomes an ok:false result,
never reaches the caller), and `constrained.errors.ConstrainedError` is the engine package's own root
(`constrained` never imports `agent`). This module imports nothing of the agent, so any module may use it.
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
