"""Tool calling above an unchanged inference core: the model proposes, this package decides and records.

    user message ─► session (one loop; limits checked at named boundaries)
        ├─ engine     ChatModelEngine: one model turn as a transaction over constrained.decode (commit | rollback)
        ├─ protocol/  codecs per model family: render prompts, parse turns → FinalText | ToolCalls | MalformedToolCall,
        │             tool-call grammars (lazy, special-token triggers)
        ├─ schema     raw JSON → ValidatedArguments (every error, with paths); json_depth: how deep model and
        │             tool JSON may nest, checked where it enters
        ├─ tool       Tool / ToolRegistry, approval, idempotency, watchdog execution; builtins: read_file, calculator,
        │             write_artifact
        ├─ results    the one builder of ok / ok:false results reinjected to the model
        ├─ ledger     the committed conversation; generated text rolls back, executed effects do not
        ├─ trace      the authoritative JSONL execution record (trace_report: timeline, HTML)
        └─ artifact   atomic, content-addressed artifacts
    models (pinned GGUFs from PyPI) · chat (model + codec) · runner / calls / demo / cli (the `ember` command)

Model-family syntax lives only in `agent.protocol`; mask internals only in `constrained`.
"""

from agent.artifact import ArtifactRef, ArtifactStore
from agent.cancel import CancelToken
from agent.engine import ChatModelEngine, EngineError, ModelTurn, TurnEngine
from agent.errors import AgentError, ToolDefinitionError
from agent.ledger import CommitLedger, EntryKind, LedgerEntry, LedgerError
from agent.limits import AgentLimits, LimitBreach, LimitKind, RunUsage
from agent.protocol import codec_for
from agent.protocol.base import (Action, Codec, FinalText, MalformedReason, MalformedToolCall, ToolCall, ToolCalls,
                                 ToolSpec)
from agent.results import ResultErrorKind, error_result, ok_result
from agent.schema import ArgumentError, ArgumentErrors, ValidatedArguments, validate_arguments
from agent.session import LoopOutcome, Phase, RunResult, Session, SessionError
from agent.tool import (ApprovalDecision, ApprovalPolicy, IdempotencyStore, Tool, ToolContext, ToolFailure, ToolKind,
                        ToolOutcome, ToolRegistry, default_policy, execute_tool)
from agent.trace import EventType, PrivacyMode, TraceRecorder, read_trace, verify_trace

__all__ = [
    "Action",
    "AgentError",
    "AgentLimits",
    "ApprovalDecision",
    "ApprovalPolicy",
    "ArgumentError",
    "ArgumentErrors",
    "ArtifactRef",
    "ArtifactStore",
    "CancelToken",
    "ChatModelEngine",
    "Codec",
    "CommitLedger",
    "EngineError",
    "EntryKind",
    "EventType",
    "FinalText",
    "IdempotencyStore",
    "LedgerEntry",
    "LedgerError",
    "LimitBreach",
    "LimitKind",
    "LoopOutcome",
    "MalformedReason",
    "MalformedToolCall",
    "ModelTurn",
    "Phase",
    "PrivacyMode",
    "ResultErrorKind",
    "RunResult",
    "RunUsage",
    "Session",
    "SessionError",
    "Tool",
    "ToolCall",
    "ToolCalls",
    "ToolContext",
    "ToolDefinitionError",
    "ToolFailure",
    "ToolKind",
    "ToolOutcome",
    "ToolRegistry",
    "ToolSpec",
    "TraceRecorder",
    "TurnEngine",
    "ValidatedArguments",
    "codec_for",
    "default_policy",
    "error_result",
    "execute_tool",
    "ok_result",
    "read_trace",
    "validate_arguments",
    "verify_trace",
]
