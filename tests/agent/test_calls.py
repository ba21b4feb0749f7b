"""`ember call` without a model: case checking, tool specs and the per-case record."""

from __future__ import annotations

import json

import pytest

from agent.calls import action_record, cases_from_args, tool_spec
from agent.inputs import InputError
from agent.protocol.base import FinalText, MalformedReason, MalformedToolCall, ToolCall, ToolCalls

ADD = {"name": "add", "description": "Add.", "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}


@pytest.mark.parametrize("definition", [ADD, {"type": "function", "function": ADD}])
def test_a_tool_spec_reads_the_bare_and_the_openai_form_alike(definition) -> None:
    spec = tool_spec(definition, constrained=True)
    assert (spec.name, spec.description, spec.parameters, spec.constrained) == \
        ("add", "Add.", ADD["parameters"], True)


def test_a_tool_without_parameters_gets_the_empty_object_schema() -> None:
    assert tool_spec({"name": "ping"}, constrained=False).parameters == {"type": "object", "properties": {}}


def _cases(tmp_path, *lines) -> str:
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_every_case_of_a_file_is_read_with_its_tool_choice(tmp_path) -> None:
    good = {"id": 1, "messages": [{"role": "user", "content": "2+2?"}], "tools": [ADD], "tool_choice": "add"}
    cases = cases_from_args(tools_file=None, prompt=None, cases_file=_cases(tmp_path, good, {**good, "id": 2}))
    assert [c["id"] for c in cases] == [1, 2] and cases[0]["tool_choice"] == "add"


@pytest.mark.parametrize("bad, message", [
    ({"id": 1}, 'line 2: the case has no "messages"'),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [ADD, ADD]}, "given twice"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [ADD], "tool_choice": "mul"},
     "tool_choice 'mul' names no offered tool"),
    ({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"}, "needs at least one tool"),
])
def test_a_bad_case_is_one_line_naming_the_file_and_its_line(tmp_path, bad, message) -> None:
    good = {"messages": [{"role": "user", "content": "x"}]}
    path = _cases(tmp_path, good, bad)
    with pytest.raises(InputError, match=message) as caught:
        cases_from_args(tools_file=None, prompt=None, cases_file=path)
    assert str(caught.value).startswith(f"--cases {path} line 2") and "\n" not in str(caught.value)


def test_cases_and_a_prompt_together_are_refused() -> None:
    with pytest.raises(InputError, match="not both"):
        cases_from_args(tools_file=None, prompt="hi", cases_file="cases.jsonl")


def test_the_record_of_each_action_kind_has_the_documented_keys() -> None:
    keys = {"id", "action", "text", "calls", "raw", "tokens", "seconds"}
    final = action_record("a", FinalText(text="4"), raw="4", tokens=1, seconds=0.12345)
    assert set(final) == keys and final["action"] == "final_text" and final["seconds"] == 0.123
    call = action_record("b", ToolCalls(calls=(ToolCall(name="add", arguments={"a": 1}, raw="r"),), text="t"),
                         raw="r", tokens=9, seconds=0)
    assert call["action"] == "tool_calls" and call["calls"] == [{"name": "add", "arguments": {"a": 1}}]
    bad = action_record("c", MalformedToolCall(reason=MalformedReason.INVALID_JSON, detail="d", raw="x", text="x"),
                        raw="x", tokens=2, seconds=0)
    assert bad["action"] == "malformed" and bad["reason"] == "invalid_json" and set(bad) == keys | {"reason", "detail"}
