"""`ember run`: one traced tool-calling session on a real model, with live output.

Wires the pieces the library keeps apart — model store, engine, codec, tool registry, trace recorder,
artifact store, session — and streams what happens: the model's text as it is generated and one line per
trace event (or the events themselves as JSON lines with ``--json``).

    prompt ─► Session(ChatModelEngine(model, codec), ToolRegistry(tools), trace, artifacts).run ─► RunResult
                     │ model text ──► stdout                 │ every event ──► one summary line
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agent.artifact import ArtifactStore
from agent.builtins import builtin_tools
from agent.chat import load_chat_model
from agent.engine import ChatModelEngine
from agent.limits import AgentLimits
from agent.protocol.base import ToolChoice
from agent.session import RunResult, Session
from agent.tool import Tool, ToolRegistry
from agent.trace import PrivacyMode, TraceRecorder

__all__ = ["load_tools", "run_session", "summarize_event"]


def load_tools(spec: str, *, sandbox_root: Path) -> list[Tool]:
    """``builtin`` → read_file / calculator / write_artifact; ``module:attr`` → a list of Tools (or a callable
    returning one)."""
    if spec == "builtin":
        return builtin_tools(sandbox_root)
    module_name, sep, attr = spec.partition(":")
    if not sep:
        raise SystemExit(f"--tools must be 'builtin' or 'module:attr', got {spec!r}")
    value = getattr(importlib.import_module(module_name), attr)
    tools = value() if callable(value) and not isinstance(value, Tool) else value
    if isinstance(tools, Tool):
        tools = [tools]
    if not all(isinstance(t, Tool) for t in tools):
        raise SystemExit(f"{spec} must be a list of agent.tool.Tool objects")
    return list(tools)


def summarize_event(event: dict[str, Any]) -> str:
    """One human line for a trace event: seq, type, and the fields a reader looks for first."""
    data = event.get("data") or {}
    keys = ("tool", "ok", "kind", "action", "finish_reason", "n_output_tokens", "duration_ms", "artifact_id",
            "limit", "detail", "role")
    shown = " ".join(f"{k}={json.dumps(data[k], ensure_ascii=False)}" for k in keys if k in data)
    return f"[{event['seq']:>3}] {event['event_type']:<26} {shown}".rstrip()


class _EchoingRecorder(TraceRecorder):
    """A trace recorder that also hands every appended event to a sink (the CLI's live view)."""

    def __init__(self, *args: Any, sink: Callable[[dict[str, Any]], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sink = sink

    def emit(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        event = super().emit(*args, **kwargs)
        self._sink(event)
        return event


class _StreamingEngine:
    """Passes the model's text to a sink as it is generated; otherwise the wrapped engine, unchanged."""

    def __init__(self, engine: ChatModelEngine, on_text: Callable[[str], None]) -> None:
        self._engine = engine
        self._on_text = on_text
        self.codec = engine.codec

    def run_turn(self, messages: Sequence[dict[str, Any]], **kwargs: Any) -> Any:
        kwargs.setdefault("on_text", self._on_text)
        return self._engine.run_turn(messages, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


def run_session(*, model: str, tools: str | Sequence[Tool], prompt: str, trace_path: Path,
                artifact_root: Path | None = None, sandbox_root: Path | None = None,
                privacy: str = "full", json_output: bool = False, system_prompt: str | None = None,
                limits: AgentLimits | None = None, tool_choice: ToolChoice | Sequence[ToolChoice] = "auto",
                final_pattern: str | None = None,
                n_threads: int | None = None, progress: Callable[[str], None] | None = None,
                echo: bool = True) -> RunResult:
    """Run one session and return its typed result; the trace at ``trace_path`` is the record of it."""
    sandbox = (sandbox_root or Path.cwd()).resolve()
    artifacts = ArtifactStore(artifact_root or trace_path.parent / "artifacts")
    registry = ToolRegistry(load_tools(tools, sandbox_root=sandbox) if isinstance(tools, str) else tools)
    chat = load_chat_model(model, n_threads=n_threads, progress=progress)

    mid_line = False  # streamed model text not yet ended by a newline

    def show_event(event: dict[str, Any]) -> None:
        nonlocal mid_line
        if echo:
            line = json.dumps(event, ensure_ascii=False) if json_output else summarize_event(event)
            print(("\n" if mid_line else "") + line, flush=True)
            mid_line = False

    def show_text(piece: str) -> None:
        nonlocal mid_line
        if echo and not json_output and piece:
            sys.stdout.write(piece)
            sys.stdout.flush()
            mid_line = not piece.endswith("\n")

    engine = _StreamingEngine(ChatModelEngine(chat.model, chat.codec), show_text)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    with _EchoingRecorder(trace_path, privacy=PrivacyMode(privacy), truncate=True, sink=show_event) as trace:
        session = Session(engine, registry, limits=limits or AgentLimits(), trace=trace, artifacts=artifacts,
                          system_prompt=system_prompt, tool_choice=tool_choice, final_pattern=final_pattern)
        result = session.run(prompt)
    if echo and not json_output:
        print(("\n" if mid_line else "") + f"outcome: {result.outcome}"
              + (f" ({result.limit})" if result.limit else "") + (f" — {result.detail}" if result.detail else ""))
    return result
