"""Resource bounds: every limit in docs/limits.md is enforced and reported (as a value, a typed error or a problem)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.limits import AgentLimits, LimitKind
from agent.protocol import FinalText, QwenCodec, ToolCall, ToolCalls
from agent.results import result_content
from agent.schema import ArgumentErrors, validate_arguments
from agent.session import LoopOutcome, Session
from agent.testkit import ManualClock, ScriptedEngine, model_text
from agent.tool import Tool, ToolRegistry
from agent.trace import MAX_LINE_BYTES, TraceMisuseError, TraceRecorder, read_trace
from constrained.errors import GrammarTooLargeError
from constrained.fsm import compile_dfa

from .hostile_kit import HERE

CODEC = QwenCodec()


def _call(name: str, **arguments: object) -> str:
    return model_text(CODEC, ToolCalls(calls=(ToolCall(name=name, arguments=arguments, raw=""),)))


def _session(turns: list[str], limits: AgentLimits, **kw: object) -> Session:
    def echo(n: int) -> str:
        """Return n characters."""
        return "é" * n

    return Session(ScriptedEngine(turns, CODEC), ToolRegistry([Tool.from_function(echo)]), limits=limits, **kw)


def test_max_model_steps_ends_the_run_with_a_limit() -> None:
    result = _session([_call("echo", n=1)] * 5, AgentLimits(max_model_steps=2)).run("go")
    assert (result.outcome, result.limit, result.steps) == (LoopOutcome.LIMIT, LimitKind.MODEL_STEPS, 2)


def test_max_tool_calls_ends_the_run_with_a_limit() -> None:
    result = _session([_call("echo", n=1)] * 5, AgentLimits(max_tool_calls=2)).run("go")
    assert (result.outcome, result.limit, result.tool_calls) == (LoopOutcome.LIMIT, LimitKind.TOOL_CALLS, 2)


def test_max_wall_s_ends_the_run_with_a_limit() -> None:
    clock = ManualClock()

    def turn(_: object) -> str:
        clock.advance(11)
        return _call("echo", n=1)

    result = _session([turn] * 5, AgentLimits(max_wall_s=20), clock=clock).run("go")  # type: ignore[list-item]
    assert (result.outcome, result.limit) == (LoopOutcome.LIMIT, LimitKind.WALL_TIME)


def test_max_output_tokens_cuts_the_turn_and_commits_nothing() -> None:
    result = _session([model_text(CODEC, FinalText(text="x" * 500))], AgentLimits(max_output_tokens=50)).run("go")
    assert (result.outcome, result.limit) == (LoopOutcome.LIMIT, LimitKind.OUTPUT_TOKENS)
    assert [m["role"] for m in result.messages] == ["user"]


def test_max_result_bytes_truncates_reinjected_results_validly() -> None:
    result = _session([_call("echo", n=100_000), "done"], AgentLimits(max_result_bytes=1000)).run("go")
    content = result.messages[2]["content"]
    assert len(content.encode()) <= 1000 and json.loads(content)["truncated"] is True
    assert result.ledger[2].truncated


def test_tool_timeout_is_reported_as_a_timeout_result() -> None:
    import threading

    def stall() -> str:
        """Never returns in time."""
        threading.Event().wait(5)
        return "late"

    session = Session(ScriptedEngine([_call("stall"), "done"], CODEC), ToolRegistry([Tool.from_function(stall)]),
                      limits=AgentLimits(tool_timeout_s=0.05))
    assert '"kind":"timeout"' in session.run("go").messages[2]["content"]


@pytest.mark.parametrize("limits", [{"max_model_steps": 0}, {"max_result_bytes": 10}, {"max_output_tokens": -1},
                                    {"max_wall_s": True}])
def test_misconfigured_limits_are_refused(limits: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        AgentLimits(**limits)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["max_model_steps", "max_tool_calls", "max_wall_s", "tool_timeout_s",
                                  "max_output_tokens", "max_result_bytes"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")], ids=repr)
def test_a_non_finite_limit_is_refused(name: str, value: float) -> None:
    with pytest.raises(ValueError):
        AgentLimits(**{name: value})  # type: ignore[arg-type]


def test_the_compile_budget_refuses_pathological_patterns() -> None:
    for pattern in ("(a|aa){1000}", "(x{1000}){1000}", "a{99999999}"):
        with pytest.raises(GrammarTooLargeError) as info:
            compile_dfa(pattern)
        assert info.value.what in ("nfa_states", "subset_work", "dfa_states")


def test_argument_bounds_are_argument_errors() -> None:
    schema = {"type": "object", "additionalProperties": True}
    for raw in ({"a": "x" * (2 << 20)}, {"a": list(range(200_000))}, {"a": [[[[[[1]]]]]]}):
        assert isinstance(validate_arguments("t", schema, raw, max_depth=4), ArgumentErrors)


def test_trace_line_length_is_bounded_on_write_and_read(tmp_path: Path) -> None:
    with TraceRecorder(tmp_path / "t.jsonl") as rec:
        with pytest.raises(TraceMisuseError):
            rec.emit("run_started", data={"x": "y" * (MAX_LINE_BYTES + 1)})
    huge = b"{" + b" " * (MAX_LINE_BYTES + 5) + b"}\n"
    assert any("MAX_LINE_BYTES" in p for p in read_trace(huge).problems)


def test_result_content_is_bounded_for_any_budget() -> None:
    for budget in (256, 300, 1000, 5000):
        text, truncated = result_content({"ok": True, "result": "€" * 10_000}, max_bytes=budget)
        assert len(text.encode()) <= budget and truncated and json.loads(text)


def test_limits_doc_lists_every_limit() -> None:
    doc = (HERE.parents[1] / "docs" / "limits.md").read_text()
    for name in ("max_model_steps", "max_tool_calls", "max_wall_s", "tool_timeout_s", "max_output_tokens",
                 "max_result_bytes", "MAX_NFA_STATES", "MAX_SUBSET_WORK", "max_states", "MAX_PRODUCT_STATES",
                 "MAX_PATTERN_CHARS", "MAX_LINE_BYTES", "MAX_STRING_BYTES", "MAX_NODES", "MAX_TEXT_BYTES", "max_depth",
                 "MAX_NAME_CHARS", "n_ctx", "MAX_SCHEMA_DEPTH", "MAX_NESTING", "_HOIST_DEPTH", "MAX_JSON_DEPTH",
                 "MAX_CANDIDATES"):
        assert f"`{name}" in doc, name
