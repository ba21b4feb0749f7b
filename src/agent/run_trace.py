"""The session's trace events: one builder per event, so the loop never builds event dicts.

    Session loop ─► RunTrace.<event>(facts) ─► TraceRecorder.emit(EventType, step, phase, data)
                                    payloads ─► TraceRecorder.payload (the recorder's privacy mode)

Owns the data fields of every event the session writes (``docs/trace.md`` lists them) and the step names
(``model-N``, ``tool-N``). Refuses: deciding anything; the session decides, this module records. A no-op when the
session is untraced.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, fields
from typing import Any

from agent import results
from agent.engine import ModelTurn, TurnEngine
from agent.grounding import ValueGrounding
from agent.ledger import EntryKind, LedgerEntry
from agent.limits import AgentLimits, RunUsage
from agent.protocol.base import Action, FinalText, ToolCalls, ToolChoice, ToolSpec
from agent.results import ResultErrorKind
from agent.run_result import Ending, LoopOutcome, Phase
from agent.schema import ArgumentError, ValidatedArguments
from agent.tool import IdempotencyStore, Tool, ToolKind, ToolOutcome, ToolRegistry
from agent.trace import EventType, PrivacyMode, TraceRecorder, artifact_written_data, provenance_data
from constrained import CancelSignal

__all__ = ["RunTrace", "tool_step"]


def tool_step(call_id: str) -> str:
    """The trace step of a tool call: ``call-3`` → ``tool-3``."""
    return "tool-" + call_id.removeprefix("call-")


def _server_records(tools: ToolRegistry) -> list[dict[str, Any]]:
    """Each out-of-process server the tools run on (MCP), once, in tool order: name, reported version, protocol,
    tool-list hash."""
    records: dict[str, dict[str, Any]] = {}
    for tool in tools:
        if tool.server is not None and tool.server.name not in records:
            records[tool.server.name] = tool.server.record()
    return list(records.values())


def _limits_record(limits: AgentLimits) -> dict[str, Any]:
    """``dataclasses.asdict(limits)`` without its recursive copying: every field of `AgentLimits` is a number
    or None (a subclass with other fields still goes through ``asdict``)."""
    if type(limits) is not AgentLimits:
        return asdict(limits)
    return {f.name: getattr(limits, f.name) for f in fields(limits)}


@functools.cache
def _runtime_version() -> str:
    """The installed ember version, read once per process (reading distribution metadata costs a millisecond)."""
    try:
        from importlib.metadata import version

        return version("ember")
    except Exception:
        return "0+unknown"


class RunTrace:
    """The session's event vocabulary: one method per event, so the loop never builds event dicts.

    A no-op when the session is untraced. Payloads (prompts, outputs, tool arguments and results) go through
    `TraceRecorder.payload` so the recorder's privacy mode applies to all of them.
    """

    def __init__(self, recorder: TraceRecorder | None) -> None:
        self._rec = recorder
        self._servers: dict[str, str] = {}
        """call id -> the server that ran it (tools on an MCP server), so every execution event names it."""

    def _emit(self, event: EventType, step: str | None, phase: Phase, data: Mapping[str, Any]) -> None:
        if self._rec is not None:
            self._rec.emit(event, step=step, phase=phase.value, data=data)

    def _payload(self, value: Any) -> Any:
        rec = self._rec
        if rec is None or rec.privacy is PrivacyMode.FULL:  # `TraceRecorder.payload` keeps it as it is too
            return value
        return rec.payload(value)

    def run_started(self, user_message: str, system_prompt: str | None, specs: Any, tool_choice: str) -> None:
        self._emit(EventType.RUN_STARTED, None, Phase.START, {
            "user_message": self._payload(user_message),
            "system_prompt": self._payload(system_prompt) if system_prompt is not None else None,
            "tools": [s.name for s in specs], "tool_choice": tool_choice})

    def provenance(self, engine: TurnEngine, tools: ToolRegistry, limits: AgentLimits, tool_choice: str,
                   approval: Any) -> None:
        if self._rec is None:
            return
        identity = dict(engine.identity())
        data = provenance_data(
            runtime_version=_runtime_version(), model_sha256=identity.pop("model_sha256", None),
            tokenizer_sha256=identity.pop("vocabulary_fingerprint", None), codec_id=engine.codec.id,
            tool_schema_sha256=tools.snapshot_sha256, model_name=identity.pop("model_path", None),
            config={"tool_choice": tool_choice, "approval": getattr(approval, "__name__", type(approval).__name__),
                    "tools": tools.snapshot()},
            limits=_limits_record(limits), engine=identity, tool_servers=_server_records(tools))
        self._emit(EventType.PROVENANCE, None, Phase.START, data)

    def tools_changed(self, step: str, tools: ToolRegistry, *, adopted: bool, detail: str = "") -> None:
        """The offered tools changed between model turns (``adopted``: the next turn offers ``tools``)."""
        self._emit(EventType.TOOLS_CHANGED, step, Phase.MODEL, {
            "adopted": adopted, "detail": detail, "tool_schema_sha256": tools.snapshot_sha256,
            "tools": tools.snapshot(), "tool_servers": _server_records(tools)})

    def on_prompt(self, step: str, n_messages: int, specs: Sequence[ToolSpec], tool_choice: ToolChoice,
                  max_tokens: int) -> Callable[[str], None] | None:
        """The ``on_prompt`` hook for `TurnEngine.run_turn`: ``model_call_started`` with the prompt the engine
        rendered, emitted before it evaluates (None when untraced: nothing to render for)."""
        if self._rec is None:
            return None
        data = {"n_messages": n_messages, "tool_choice": tool_choice, "max_tokens": max_tokens,
                "constrained_tools": [s.name for s in specs if s.constrained]}

        def model_call_started(prompt: str) -> None:
            self._emit(EventType.MODEL_CALL_STARTED, step, Phase.MODEL, {**data, "prompt": self._payload(prompt)})

        return model_call_started

    def model_call_finished(self, step: str, turn: ModelTurn) -> None:
        self._emit(EventType.MODEL_CALL_FINISHED, step, Phase.MODEL, {
            "n_prompt_tokens": turn.n_prompt_tokens, "n_reused_tokens": turn.n_reused_tokens,
            "n_output_tokens": turn.n_output_tokens, "finish_reason": str(turn.finish_reason),
            "constrained": turn.constrained, "duration_ms": round(turn.seconds * 1000, 3),
            "timings": dict(turn.timings) if turn.timings else None, "output": self._payload(turn.text)})

    def action_parsed(self, step: str, action: Action, call_ids: list[str], *, duplicates: int = 0) -> None:
        data: dict[str, Any] = {"text": self._payload(action.text)}
        if isinstance(action, FinalText):
            data["action"] = "final_text"
        elif isinstance(action, ToolCalls):
            data["action"] = "tool_calls"
            data["calls"] = [{"call_id": i, "tool": c.name} for i, c in zip(call_ids, action.calls)]
            if duplicates:
                data["duplicates_dropped"] = duplicates
        else:
            data.update(action="malformed_tool_call", call_id=call_ids[0], reason=action.reason.value,
                        detail=action.detail, raw=self._payload(action.raw))
        self._emit(EventType.ASSISTANT_ACTION_PARSED, step, Phase.PARSE, data)

    def repeats_refused(self, step: str, calls: Sequence[tuple[str, str, str]], *, next_tool_choice: str,
                        resting: Sequence[str]) -> None:
        """A turn made only of calls the conversation already answered was rolled back unrun; ``calls`` are
        (call id, tool, the call that answered it); ``resting`` the tools the next turn does not offer."""
        self._emit(EventType.REPEATS_REFUSED, step, Phase.PARSE, {
            "calls": [{"call_id": i, "tool": t, "answered_by": a} for i, t, a in calls],
            "next_tool_choice": next_tool_choice, "resting": list(resting)})

    def call_validated(self, call_id: str, args: ValidatedArguments,
                       grounding: Sequence[ValueGrounding] = ()) -> None:
        self._emit(EventType.TOOL_CALL_VALIDATED, tool_step(call_id), Phase.VALIDATE, {
            "call_id": call_id, "tool": args.tool_name, "arguments": self._payload(json.loads(args.to_json())),
            "arguments_sha256": args.sha256, "grounding": [g.to_record() for g in grounding]})

    def call_rejected(self, call_id: str, tool: str | None, kind: ResultErrorKind, detail: str,
                      errors: Sequence[ArgumentError], *, raw: str | None) -> None:
        self._emit(EventType.TOOL_CALL_REJECTED, tool_step(call_id),
                   Phase.APPROVE if kind is ResultErrorKind.DENIED_BY_POLICY else Phase.VALIDATE, {
                       "call_id": call_id, "tool": tool, "kind": kind.value, "detail": detail,
                       "errors": [{"path": e.path, "reason": e.reason, "kind": str(e.kind)} for e in errors],
                       "raw": self._payload(raw) if raw is not None else None})

    def execution_started(self, call_id: str, tool: Tool, timeout_s: float | None,
                          args: ValidatedArguments | None = None) -> None:
        data: dict[str, Any] = {"call_id": call_id, "tool": tool.name, "kind": str(tool.kind),
                                "external": tool.external, "timeout_s": timeout_s}
        if tool.server is not None:
            data["server"] = self._servers[call_id] = tool.server.name
        if args is not None and tool.kind is ToolKind.ACTION:
            data["idempotency_key"] = IdempotencyStore.key_for(tool, args)
        self._emit(EventType.TOOL_EXECUTION_STARTED, tool_step(call_id), Phase.EXECUTE, data)

    def execution_finished(self, call_id: str, tool: str, outcome: ToolOutcome, result: dict[str, Any],
                           content: str, truncated: bool) -> None:
        """The result is traced as the model will see it (``content``: bounded to ``max_result_bytes`` by
        `results.result_content`, so a huge result cannot make an over-long trace line), plus the byte length and
        sha256 of the full result JSON."""
        if self._rec is None:
            return
        ids = [ref.id for ref in outcome.artifacts]
        if truncated:
            full_bytes = results.result_json(result).encode("utf-8")
            traced = json.loads(content)
        else:  # content is result's full JSON: tracing result itself writes the same line, without a re-parse
            full_bytes = content.encode("utf-8")
            traced = result
        self._emit(EventType.TOOL_EXECUTION_FINISHED, tool_step(call_id), Phase.EXECUTE, {
            "call_id": call_id, "tool": tool, **self._server_of(call_id), "ok": outcome.ok,
            "duration_ms": outcome.duration_ms,
            "error_kind": str(outcome.error_kind) if outcome.error_kind else None, "detail": outcome.detail,
            "replayed": outcome.replayed, "artifact_ids": [] if outcome.replayed else ids,
            "replayed_artifact_ids": ids if outcome.replayed else [],
            "linked_runs": list(outcome.linked_runs), "result": self._payload(traced),
            "result_truncated": truncated, "result_bytes": len(full_bytes),
            "result_sha256": hashlib.sha256(full_bytes).hexdigest()})

    def artifact_written(self, step: str, call_id: str, tool: str, ref: Any) -> None:
        self._emit(EventType.ARTIFACT_WRITTEN, step, Phase.EXECUTE, artifact_written_data(ref, call_id=call_id,
                                                                                     tool=tool))

    def committed(self, entry: LedgerEntry) -> None:
        """`CommitLedger.on_commit`: every commit is traced the moment it happens."""
        content = entry.message.get("content")
        if entry.kind in (EntryKind.TOOL_RESULT, EntryKind.TOOL_REJECTION):
            self._emit(EventType.TOOL_RESULT_COMMITTED, entry.step, Phase.REINJECT, {
                "call_id": entry.call_ids[0], "tool": entry.tool, "ok": entry.ok, "kind": entry.kind.value,
                "truncated": entry.truncated, "ledger_index": entry.index, "kv_tokens": entry.kv_tokens,
                "content": self._payload(content)})
        else:
            self._emit(EventType.MESSAGE_COMMITTED, entry.step, Phase.COMMIT, {
                "ledger_index": entry.index, "kind": entry.kind.value, "role": entry.message.get("role"),
                "call_ids": list(entry.call_ids), "kv_tokens": entry.kv_tokens,
                "content": self._payload(content) if content is not None else None,
                "tool_calls": self._payload(entry.message["tool_calls"]) if entry.message.get("tool_calls")
                else None})

    def result_uncommitted(self, call_id: str, tool: str, outcome: ToolOutcome, cancel: CancelSignal) -> None:
        self._emit(EventType.TOOL_RESULT_UNCOMMITTED, tool_step(call_id), Phase.REINJECT, {
            "call_id": call_id, "tool": tool, **self._server_of(call_id), "ok": outcome.ok,
            "executed": outcome.started and not outcome.replayed,
            "artifact_ids": [ref.id for ref in outcome.artifacts],
            "reason": cancel.reason or "cancelled before the result was committed",
            "effect_visible": True})

    def _server_of(self, call_id: str) -> dict[str, str]:
        server = self._servers.get(call_id)
        return {"server": server} if server is not None else {}

    def terminal(self, ending: Ending, usage: RunUsage, *, ledger_entries: int, cancel: CancelSignal) -> None:
        data: dict[str, Any] = {"outcome": ending.outcome.value, "steps": usage.steps,
                                "tool_calls": usage.tool_calls, "elapsed_s": round(usage.elapsed_s, 6),
                                "detail": ending.detail, "ledger_entries": ledger_entries}
        if ending.outcome is LoopOutcome.COMPLETED:
            event, data["final_text"] = EventType.RUN_COMPLETED, self._payload(ending.final_text)
            data["grounding"] = [claim.to_record(self._payload(claim.text)) for claim in ending.claims]
        elif ending.outcome is LoopOutcome.CANCELLED:
            event, data["reason"] = EventType.RUN_CANCELLED, cancel.reason
        elif ending.outcome is LoopOutcome.LIMIT:
            assert ending.breach is not None
            event = EventType.RUN_TERMINATED
            data.update(limit=ending.breach.kind.value, limit_value=ending.breach.limit,
                        observed=ending.breach.observed)
        else:
            event, data["error"] = EventType.RUN_FAILED, ending.detail
        self._emit(event, ending.step, ending.phase, data)
