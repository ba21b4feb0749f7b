"""parse_chat_request: OpenAI bodies become codec messages and constrained tools, or a 400 naming the field."""

from __future__ import annotations

import json

import pytest

from agent.serve.errors import ApiError
from agent.repeats import call_key
from agent.serve.request import parse_chat_request

IDS = ("m",)
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def parse(**body):
    return parse_chat_request({"model": "m", "messages": [{"role": "user", "content": "hi"}], **body}, model_ids=IDS)


def refusal(**body) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse(**body)
    return caught.value


def test_a_tool_round_trip_becomes_codec_messages_with_dict_arguments_and_named_results():
    request = parse(tools=[TOOL], messages=[
        {"role": "developer", "content": [{"type": "text", "text": "be brief"}]},
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "12 C"}])
    assert request.messages == (
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "name": "get_weather", "content": "12 C"})
    assert request.tool_choice == "auto" and request.calls_possible
    assert all(tool.constrained for tool in request.tools)


def test_defaults_are_greedy_one_choice_no_tools_text():
    request = parse()
    assert (request.tool_choice, request.response_format, request.sampling.temperature, request.stream) == (
        "none", "text", 0.0, False)


def test_a_json_schema_format_carries_its_pattern():
    request = parse(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"n": {"type": "integer"}}}}})
    assert request.response_format == "json_schema" and request.final_pattern


def test_a_recursive_json_schema_carries_its_rules():
    tree = {"type": "object", "properties": {"name": {"type": "string"}, "kids": {"type": "array", "items": {
        "$ref": "#"}}}, "required": ["name"], "additionalProperties": False}
    request = parse(response_format={"type": "json_schema", "json_schema": {"name": "tree", "schema": tree}})
    from constrained.rules import RulePattern

    assert isinstance(request.final_pattern, RulePattern)
    rules = request.final_pattern.rules
    assert any(f"(?&={name})" in body for name, body in rules.items())  # a rule that calls itself: recursion


@pytest.mark.parametrize(("body", "param", "code"), [
    ({"n": 3}, "n", "unsupported_value"),
    ({"logit_bias": {"1": 5}}, "logit_bias", "unsupported_value"),
    ({"guided_json": {}}, "guided_json", "unknown_parameter"),
    ({"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice",
     "unknown_tool"),
    ({"tool_choice": "required"}, "tool_choice", "invalid_value"),
    ({"stop": ["x"], "tools": [TOOL]}, "stop", "unsupported_value"),
    ({"max_tokens": 0}, "max_tokens", "invalid_value"),
    ({"temperature": 3}, "temperature", "invalid_value"),
    ({"messages": [{"role": "tool", "tool_call_id": "zz", "content": "x"}]}, "messages[0].tool_call_id",
     "invalid_value"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "messages[0].content[0]", "invalid_value"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"type": "string", "format": "ipv6"}}}}}},
     "response_format.json_schema.schema", "unsupported_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objekt"}}}},
     "response_format.json_schema.schema", "invalid_schema"),
])
def test_what_cannot_be_honoured_is_a_400_naming_the_field(body, param, code):
    error = refusal(**body)
    assert (error.status, error.param, error.code) == (400, param, code)
    assert set(error.body()["error"]) == {"message", "type", "param", "code"}


def test_an_unsupported_keyword_is_named_with_its_path():
    error = refusal(tools=[{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}}}])
    assert error.param == "tools[0].function.parameters"
    assert "'uniqueItems' at #/properties/tags" in error.message


def test_another_model_name_is_a_404():
    with pytest.raises(ApiError) as caught:
        parse_chat_request({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}, model_ids=IDS)
    assert (caught.value.status, caught.value.code) == (404, "model_not_found")


def test_answered_calls_are_those_a_tool_message_follows_whatever_their_spacing_or_key_order():
    call = {"type": "function", "function": {"name": "f", "arguments": '{"b": 1, "a": [2]}'}}
    later = {"type": "function", "function": {"name": "g", "arguments": "{}"}}
    request = parse_chat_request({"model": "m", "messages": [
        {"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [{"id": "1", **call}]},
        {"role": "tool", "tool_call_id": "1", "content": "r"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "2", **later}]}]}, model_ids=IDS)
    assert request.answered_calls == {call_key("f", {"a": [2], "b": 1})}
    assert call_key("f", {"a": [2], "b": 1}) == call_key("f", json.loads('{"b":1,"a":[2]}'))
    assert call_key("f", {"a": 1}) != call_key("f", {"a": 1.5})


def test_a_job_is_a_cancel_signal_that_says_why():
    import asyncio
    import time

    from agent.serve.worker import Job
    from constrained.decoding import CancelSignal

    job = Job(request=parse(), loop=asyncio.new_event_loop(), deadline=time.monotonic() + 60)
    assert isinstance(job, CancelSignal) and (job.is_set(), job.reason) == (False, "")
    job.cancel()
    assert job.is_set() and job.reason == "the client disconnected"
    job.loop.close()


def test_answers_keep_the_schema_property_order():
    schema = {"type": "object", "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "integer"}},
              "required": ["zeta", "alpha"], "additionalProperties": False}
    pattern = parse(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}).final_pattern
    assert pattern.index("zeta") < pattern.index("alpha")  # not alphabetical: what the client's schema says
