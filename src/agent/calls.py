"""`ember call`: one model turn per case, parsed into an action, nothing executed.

A case is ``{"id", "messages", "tools"}``; tools come in OpenAI ``{"type": "function", "function": {...}}``
or bare ``{"name", "description", "parameters"}`` form. The model loads once for a whole batch; after each
turn the engine rolls the speculative turn back, so cases never see each other.

    cases ─► ChatModelEngine.run_turn(tools, tool_choice) ─► codec.parse ─► one JSON record per case
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from agent.chat import load_chat_model
from agent.engine import ChatModelEngine
from agent.protocol.base import Action, FinalText, MalformedToolCall, ToolCalls, ToolChoice, ToolSpec

__all__ = ["action_record", "call_cases", "cases_from_args", "tool_spec"]


def tool_spec(definition: Mapping[str, Any], *, constrained: bool) -> ToolSpec:
    """A ToolSpec from an OpenAI-format or bare tool definition."""
    fn = definition["function"] if definition.get("type") == "function" else definition
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
        raise ValueError(f"tool definition without a name: {json.dumps(definition)[:200]}")
    return ToolSpec(name=fn["name"], description=fn.get("description", ""),
                    parameters=fn.get("parameters") or {"type": "object", "properties": {}},
                    constrained=constrained)


def cases_from_args(*, tools_file: str | None, prompt: str | None, cases_file: str | None) -> list[dict[str, Any]]:
    """The cases to run: every line of ``cases_file``, or one case from ``prompt`` and ``tools_file``."""
    if cases_file:
        lines = Path(cases_file).read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]
    if prompt is None:
        raise SystemExit("ember call: give --prompt (with --tools) or --cases FILE.jsonl")
    tools = json.loads(Path(tools_file).read_text(encoding="utf-8")) if tools_file else []
    return [{"id": "1", "messages": [{"role": "user", "content": prompt}], "tools": tools}]


def action_record(case_id: Any, action: Action, *, raw: str, tokens: int, seconds: float) -> dict[str, Any]:
    """The documented per-case output: ``{"id","action","text","calls","raw","tokens","seconds"}``."""
    record: dict[str, Any] = {"id": case_id, "action": "", "text": "", "calls": [], "raw": raw,
                              "tokens": tokens, "seconds": round(seconds, 4)}
    match action:
        case FinalText(text=text):
            record.update(action="final_text", text=text)
        case ToolCalls(calls=calls, text=text):
            record.update(action="tool_calls", text=text,
                          calls=[{"name": c.name, "arguments": c.arguments} for c in calls])
        case MalformedToolCall(reason=reason, detail=detail, text=text):
            record.update(action="malformed", text=text, reason=str(reason), detail=detail)
    return record


def call_cases(model: str, cases: Sequence[Mapping[str, Any]], *, tool_choice: ToolChoice = "auto",
               constrained: bool = True, max_tokens: int = 256, n_threads: int | None = None,
               progress: Callable[[str], None] | None = None) -> Iterator[dict[str, Any]]:
    """Run one turn per case on one loaded model and yield its record; nothing is executed."""
    chat = load_chat_model(model, n_threads=n_threads, progress=progress)
    engine = ChatModelEngine(chat.model, chat.codec)
    for case in cases:
        specs = [tool_spec(t, constrained=constrained) for t in case.get("tools", [])]
        started = time.perf_counter()
        turn = engine.run_turn(case["messages"], tools=specs, tool_choice=case.get("tool_choice", tool_choice),
                               max_tokens=max_tokens)
        engine.rollback()
        yield action_record(case.get("id"), chat.codec.parse(turn.text), raw=turn.text,
                            tokens=turn.n_output_tokens, seconds=time.perf_counter() - started)
