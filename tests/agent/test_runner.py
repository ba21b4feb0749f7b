"""`ember run`'s wiring without a model: input checks, the live view of events and streamed text."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.inputs import InputError
from agent.protocol.qwen import QwenCodec
from agent.runner import (_check_tool_choice, _EchoingRecorder, _StreamingEngine, check_run_inputs, load_tools,
                          summarize_event, view_event)
from agent.session import Session
from agent.testkit import ScriptedEngine
from agent.tool import ToolRegistry


def test_builtin_tools_are_the_three_documented_ones(tmp_path: Path) -> None:
    assert [t.name for t in load_tools("builtin", sandbox_root=tmp_path)] == ["read_file", "calculator",
                                                                               "write_artifact"]


def test_a_tool_choice_plan_is_checked_against_the_registry_before_anything_loads(tmp_path: Path) -> None:
    registry = ToolRegistry(load_tools("builtin", sandbox_root=tmp_path))
    _check_tool_choice(("read_file", "calculator", "none"), registry)
    with pytest.raises(InputError, match=r"^--tool-choice: 'nosuch' names no tool; .*read_file, calculator"):
        _check_tool_choice(("read_file", "nosuch"), registry)
    with pytest.raises(InputError, match="the plan is empty"):
        _check_tool_choice((), registry)


def test_an_existing_trace_is_never_overwritten_without_force(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("{}\n")
    with pytest.raises(InputError, match="--trace .*refusing to overwrite"):
        check_run_inputs(trace_path=trace, sandbox=tmp_path, artifact_root=None, force=False)
    check_run_inputs(trace_path=trace, sandbox=tmp_path, artifact_root=None, force=True)
    with pytest.raises(InputError, match="--sandbox"):
        check_run_inputs(trace_path=tmp_path / "new.jsonl", sandbox=trace, artifact_root=None, force=False)


def test_the_views_round_durations_and_keep_the_record_as_it_is() -> None:
    event = {"seq": 3, "event_type": "tool_execution_finished", "t_ms": 1.23456789,
             "data": {"tool": "calculator", "ok": True, "duration_ms": 0.0421234, "detail": ""}}
    assert view_event(event)["t_ms"] == 1.235 and view_event(event)["data"]["duration_ms"] == 0.042
    assert event["data"]["duration_ms"] == 0.0421234
    assert summarize_event(event) == '[  3] tool_execution_finished    tool="calculator" ok=true duration_ms=0.042 detail=""'


def test_a_run_echoes_every_trace_event_and_streams_the_model_text(tmp_path: Path) -> None:
    codec = QwenCodec()
    events, text = [], []
    engine = _StreamingEngine(ScriptedEngine(["DONE 1%"], codec), text.append)  # type: ignore[arg-type]
    with _EchoingRecorder(tmp_path / "t.jsonl", sink=events.append) as trace:
        result = Session(engine, ToolRegistry(), trace=trace).run("go")  # type: ignore[arg-type]
    assert result.final_text == "DONE 1%" and "".join(text) == "DONE 1%"
    assert [e["seq"] for e in events] == list(range(len(events))) and events[-1]["event_type"] == "run_completed"
    assert len((tmp_path / "t.jsonl").read_text().splitlines()) == len(events)
