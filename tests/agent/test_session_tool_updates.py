"""Tools that change between turns, and tools that run on a server: what the session offers and what it traces.

The scripted engine speaks real Qwen2.5 syntax (as in test_session.py); tools are in-process functions marked with
a `ToolServer` where a test needs one, so no server process is involved here (tests/agent/mcp/ has the real ones).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.protocol import QwenCodec
from agent.session import LoopOutcome, Session
from agent.testkit import ScriptedEngine, call_text, final_text
from agent.tool import Tool, ToolKind, ToolRegistry, ToolServer
from agent.trace import EventType, TraceRecorder, read_trace, verify_trace

CODEC = QwenCodec()
SERVER = ToolServer(name="srv", implementation="demo-server", version="1.2.3", protocol_version="2025-11-25",
                    tools_sha256="ab" * 32)


def call(name: str, /, **arguments: Any) -> str:
    return call_text(CODEC, name, **arguments)


def final(text: str) -> str:
    return final_text(CODEC, text)


def tool(name: str, *, kind: ToolKind = ToolKind.DATA, server: ToolServer | None = SERVER) -> Tool:
    return Tool(name=name, description=f"{name} it", kind=kind, server=server,
                parameters={"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
                function=lambda args, ctx: f"{name}:{args['x']}")


def events(path: Path, kind: EventType) -> list[dict[str, Any]]:
    return [e.data for e in read_trace(path).events if e.event_type == kind]


def test_a_changed_tool_list_is_offered_from_the_next_turn_and_traced(tmp_path: Path) -> None:
    announced: list[bool] = []  # set by srv.a, as a server sends notifications/tools/list_changed mid-call
    announcing = Tool(name="srv.a", server=SERVER, function=lambda args, ctx: announced.append(True) or "a",
                      parameters={"type": "object", "properties": {"x": {"type": "string"}}})
    first = ToolRegistry([announcing])
    second = ToolRegistry([announcing, tool("srv.b")])
    asked: list[tuple[str, ...]] = []

    def updates(current: ToolRegistry) -> ToolRegistry | None:
        asked.append(current.names)
        return second if announced and current is first else None

    engine = ScriptedEngine([call("srv.a", x="1"), call("srv.b", x="2"), final("done")], CODEC)
    with TraceRecorder(tmp_path / "t.jsonl") as trace:
        result = Session(engine, first, trace=trace, tool_updates=updates).run("go")
    assert result.outcome is LoopOutcome.COMPLETED
    assert [s.name for s in engine.calls[0].tools] == ["srv.a"]  # turn 1: the tools at start
    assert [s.name for s in engine.calls[1].tools] == ["srv.a", "srv.b"]  # the next turn: the new list
    assert asked == [("srv.a",), ("srv.a",), ("srv.a", "srv.b")]  # asked before every turn, never during one
    [changed] = events(tmp_path / "t.jsonl", EventType.TOOLS_CHANGED)
    assert changed["adopted"] and changed["tool_schema_sha256"] == second.snapshot_sha256
    assert [t["name"] for t in changed["tools"]] == ["srv.a", "srv.b"]
    assert [e["tool"] for e in events(tmp_path / "t.jsonl", EventType.TOOL_EXECUTION_FINISHED)] == ["srv.a", "srv.b"]
    assert verify_trace(tmp_path / "t.jsonl").ok


def test_a_change_that_drops_the_tool_the_plan_names_is_traced_and_not_adopted(tmp_path: Path) -> None:
    first, without = ToolRegistry([tool("srv.a")]), ToolRegistry([tool("srv.b")])
    engine = ScriptedEngine([call("srv.a", x="1"), final("done")], CODEC)
    with TraceRecorder(tmp_path / "t.jsonl") as trace:
        result = Session(engine, first, trace=trace, tool_choice=("srv.a", "none"),
                         tool_updates=lambda current: without).run("go")
    assert result.outcome is LoopOutcome.COMPLETED and result.tool_calls == 1
    changes = events(tmp_path / "t.jsonl", EventType.TOOLS_CHANGED)
    assert changes and not any(c["adopted"] for c in changes)
    assert "srv.a" in changes[0]["detail"]


def test_provenance_pins_each_server_once_and_execution_events_name_it(tmp_path: Path) -> None:
    local = tool("add", server=None)
    registry = ToolRegistry([tool("srv.a"), tool("srv.w", kind=ToolKind.ACTION), local])
    engine = ScriptedEngine([call("srv.a", x="1"), call("srv.w", x="2"), call("add", x="3"), final("ok")], CODEC)
    with TraceRecorder(tmp_path / "t.jsonl") as trace:
        Session(engine, registry, trace=trace).run("go")
    [provenance] = events(tmp_path / "t.jsonl", EventType.PROVENANCE)
    assert provenance["tool_servers"] == [SERVER.record()]
    assert [t.get("server") for t in provenance["config"]["tools"]] == ["srv", "srv", None]
    started = events(tmp_path / "t.jsonl", EventType.TOOL_EXECUTION_STARTED)
    finished = events(tmp_path / "t.jsonl", EventType.TOOL_EXECUTION_FINISHED)
    assert [e.get("server") for e in started] == [e.get("server") for e in finished] == ["srv", "srv", None]
    assert "idempotency_key" not in started[0] and started[1]["idempotency_key"].startswith("args:")
    assert verify_trace(tmp_path / "t.jsonl").ok
