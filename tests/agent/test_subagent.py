"""Agent as a tool: a child Session behind one tool call, its trace linked and verified, its run stopped with the
parent's. The session state machine is the thing under test, so the model is the scripted engine (one script,
parent and child turns in the order they run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.cancel import CancelToken
from agent.limits import AgentLimits
from agent.protocol import QwenCodec
from agent.run_result import LoopOutcome
from agent.session import Session
from agent.subagent import SubAgent, agent_tool
from agent.testkit import ScriptedEngine, call_text, final_text
from agent.tool import Tool, ToolKind, ToolRegistry
from agent.trace import EventType, TraceRecorder, read_trace, verify_trace

CODEC = QwenCodec()
AIRPORTS = {"Helsinki": "HEL", "Seville": "SVQ"}


def call(name: str, /, **arguments: Any) -> str:
    return call_text(CODEC, name, **arguments)


def final(text: str) -> str:
    return final_text(CODEC, text)


def desk(engine: ScriptedEngine, trace_dir: Path, *, lookup=None) -> Tool:
    def airports_lookup(city: str) -> str:
        """The IATA code of a city's airport."""
        return AIRPORTS[city]

    tools = ToolRegistry([Tool.from_function(lookup or airports_lookup, name="airports.lookup")])
    return agent_tool("travel_desk", "Answers travel questions: airport codes.",
                      SubAgent(engine=engine, tools=tools, system_prompt="You are a travel desk.",
                               limits=AgentLimits(max_model_steps=4), trace_dir=trace_dir))


def parent(engine: ScriptedEngine, tool: Tool, trace: Path) -> Session:
    return Session(engine, ToolRegistry([tool]), trace=TraceRecorder(trace), system_prompt="You plan trips.")


def test_the_child_answers_the_parents_call_and_both_traces_verify(tmp_path: Path) -> None:
    engine = ScriptedEngine([call("travel_desk", request="Airport code of Seville?"),  # parent
                             call("airports.lookup", city="Seville"), final("SVQ"),    # child
                             final("Fly to SVQ.")], CODEC)                              # parent
    result = parent(engine, desk(engine, tmp_path / "desk"), tmp_path / "trace.jsonl").run("Where do I fly?")
    assert (result.outcome, result.final_text) == (LoopOutcome.COMPLETED, "Fly to SVQ.")
    tool_message = next(m for m in result.messages if m["role"] == "tool")
    assert '"answer": "SVQ"' in tool_message["content"] or '"answer":"SVQ"' in tool_message["content"]
    [finished] = [e for e in read_trace(tmp_path / "trace.jsonl").events
                  if e.event_type == EventType.TOOL_EXECUTION_FINISHED]
    [child_path] = (tmp_path / "desk").iterdir()
    child = read_trace(child_path)
    assert finished.data["linked_runs"] == [child.events[0].run_id]
    assert child.events[-1].event_type == EventType.RUN_COMPLETED
    assert verify_trace(tmp_path / "trace.jsonl").ok and verify_trace(child_path).ok
    assert desk(engine, tmp_path).kind is ToolKind.ORCHESTRATION


def test_a_child_that_does_not_complete_fails_the_call_with_its_run_linked(tmp_path: Path) -> None:
    engine = ScriptedEngine([call("travel_desk", request="Code of Atlantis?"),
                             *[call("airports.lookup", city="Atlantis")] * 4,
                             final("I could not find it.")], CODEC)
    result = parent(engine, desk(engine, tmp_path / "desk"), tmp_path / "trace.jsonl").run("Where?")
    assert result.outcome is LoopOutcome.COMPLETED
    tool_message = next(m for m in result.messages if m["role"] == "tool")
    assert "travel_desk agent ended limit" in tool_message["content"]
    [finished] = [e for e in read_trace(tmp_path / "trace.jsonl").events
                  if e.event_type == EventType.TOOL_EXECUTION_FINISHED]
    assert len(finished.data["linked_runs"]) == 1


def test_cancelling_the_parent_stops_the_child_and_keeps_the_effect_it_had(tmp_path: Path) -> None:
    token = CancelToken()
    effects: list[str] = []

    def airports_lookup(city: str) -> str:
        """The IATA code of a city's airport."""
        effects.append(city)
        token.cancel("user pressed stop while the travel desk was working")
        return AIRPORTS[city]

    engine = ScriptedEngine([call("travel_desk", request="Code of Helsinki?"),
                             call("airports.lookup", city="Helsinki"), final("HEL"), final("never reached")],
                            CODEC)
    session = parent(engine, desk(engine, tmp_path / "desk", lookup=airports_lookup), tmp_path / "trace.jsonl")
    result = session.run("Where?", cancel=token)
    assert result.outcome is LoopOutcome.CANCELLED
    assert effects == ["Helsinki"]
    [child_path] = (tmp_path / "desk").iterdir()
    child = [e.event_type for e in read_trace(child_path).events]
    assert child[-1] == EventType.RUN_CANCELLED, "the child ended before the parent returned"
    assert EventType.TOOL_RESULT_UNCOMMITTED in child  # the lookup ran: its effect is real, its result uncommitted
    events = read_trace(tmp_path / "trace.jsonl").events
    kinds = [e.event_type for e in events]
    assert EventType.TOOL_RESULT_UNCOMMITTED in kinds and kinds[-1] == EventType.RUN_CANCELLED
    [finished] = [e for e in events if e.event_type == EventType.TOOL_EXECUTION_FINISHED]
    assert finished.data["linked_runs"] == [read_trace(child_path).events[0].run_id]
    assert len(engine.calls) == 2, "after the cancel neither the child nor the parent took another turn"
    assert verify_trace(tmp_path / "trace.jsonl").ok and verify_trace(child_path).ok




def test_verifying_the_parent_verifies_the_nested_trace(tmp_path: Path) -> None:
    engine = ScriptedEngine([call("travel_desk", request="Airport code of Seville?"),
                             call("airports.lookup", city="Seville"), final("SVQ"), final("Fly to SVQ.")], CODEC)
    parent(engine, desk(engine, tmp_path / "desk"), tmp_path / "trace.jsonl").run("Where do I fly?")
    assert verify_trace(tmp_path / "trace.jsonl").problems == ()
    [child] = (tmp_path / "desk").iterdir()
    lines = child.read_bytes().splitlines(keepends=True)
    child.write_bytes(b"".join(lines[:-1]))  # the nested run loses its terminal event
    problems = verify_trace(tmp_path / "trace.jsonl").problems
    assert problems and all(p.startswith("nested run run-") for p in problems), problems
    child.unlink()
    report = verify_trace(tmp_path / "trace.jsonl")
    assert report.ok and any("no trace of it found" in w for w in report.warnings)


def test_a_nested_trace_is_found_by_its_run_id_when_it_moved(tmp_path: Path) -> None:
    engine = ScriptedEngine([call("travel_desk", request="Airport code of Seville?"),
                             call("airports.lookup", city="Seville"), final("SVQ"), final("Fly to SVQ.")], CODEC)
    (tmp_path / "run").mkdir()
    parent(engine, desk(engine, tmp_path / "elsewhere"), tmp_path / "run" / "trace.jsonl").run("Where do I fly?")
    [child] = (tmp_path / "elsewhere").iterdir()
    child.rename(tmp_path / "run" / "kept-desk-trace.jsonl")  # copied beside the parent under another name
    report = verify_trace(tmp_path / "run" / "trace.jsonl")
    assert report.ok and not any("no trace of it found" in w for w in report.warnings), report.warnings
