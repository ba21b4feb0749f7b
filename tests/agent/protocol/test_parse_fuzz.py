"""Parsers are total and strict; grammars and parsers agree (every string a grammar admits parses to offered calls)."""

from __future__ import annotations

import functools
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.protocol import (FinalText, Llama3Codec, MalformedToolCall, QwenCodec, ToolCalls, ToolSpec)

CODECS = {"qwen": QwenCodec(), "qwen_text_tags": QwenCodec(special_tags=False, family="chatml"),
          "llama": Llama3Codec(), "llama_no_tag": Llama3Codec(python_tag=False)}
ACTIONS = (FinalText, ToolCalls, MalformedToolCall)
WS = " \t\n\r\f\v"

WEATHER = ToolSpec(name="weather.current", description="Weather now", constrained=True, parameters={
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"type": "string", "enum": ["c", "f"]},
                   "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city"],
    "additionalProperties": False,
})
ECHO = ToolSpec(name="echo", description="Echo anything")
NOTE = ToolSpec(name="notes-add_v2", constrained=True, parameters={
    "type": "object", "properties": {"text": {"type": "string", "maxLength": 8}}, "required": ["text"],
    "additionalProperties": False})
TOOLS = [WEATHER, ECHO, NOTE]


def _is_call_attempt(codec_key: str, text: str) -> bool:
    if "```json" in text:
        return True
    if codec_key.startswith("qwen"):
        return "<tool_call>" in text or "</tool_call>" in text
    return "<|python_tag|>" in text or text.lstrip(WS).startswith("{")


def _canonical(codec_key: str, name: str, args: dict) -> str:
    body = json.dumps({"name": name, ("arguments" if codec_key.startswith("qwen") else "parameters"): args},
                      ensure_ascii=False)
    if codec_key.startswith("qwen"):
        return f"<tool_call>\n{body}\n</tool_call>"
    return f"<|python_tag|>{body}" if codec_key == "llama" else body


# -- totality ----------------------------------------------------------------------------------------------------

_fragments = st.sampled_from(["<tool_call>", "</tool_call>", "<|python_tag|>", "{", "}", '"name"', '"arguments"',
                              '"parameters"', ":", ",", ";", "\n", " ", '"', "[", "]", "<|im_end|>", "<|eot_id|>",
                              "null", "1", "\\", "\ud800", "NaN", "```json", "```", "`"])
_noise = st.lists(st.text(max_size=6) | _fragments, max_size=30).map("".join)


@pytest.mark.parametrize("codec_key", CODECS)
@settings(max_examples=150, deadline=None)
@given(text=_noise)
def test_parse_is_total_on_random_text(codec_key, text):
    action = CODECS[codec_key].parse(text)
    assert isinstance(action, ACTIONS)
    if _is_call_attempt(codec_key, text):
        assert not isinstance(action, FinalText), "a call attempt was silently turned into prose"


_args = st.dictionaries(st.text(max_size=5), st.none() | st.integers() | st.text(max_size=5), max_size=3)


@st.composite
def _mutated(draw, codec_key):
    text = "".join(_canonical(codec_key, draw(st.sampled_from(["echo", "a.b"])), draw(_args))
                   for _ in range(draw(st.integers(1, 2))))
    text = draw(st.text(max_size=5)) + text
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["delete", "insert", "replace", "truncate"]))
        if op == "delete":
            text = text[:i] + text[i + 1:]
        elif op == "insert":
            text = text[:i] + draw(_fragments | st.text(max_size=2)) + text[i:]
        elif op == "replace":
            text = text[:i] + draw(st.characters()) + text[i + 1:]
        else:
            text = text[:i]
    return text


@pytest.mark.parametrize("codec_key", CODECS)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_parse_is_total_on_mutated_calls_and_never_turns_an_attempt_into_prose(codec_key, data):
    text = data.draw(_mutated(codec_key))
    action = CODECS[codec_key].parse(text)
    assert isinstance(action, ACTIONS)
    if _is_call_attempt(codec_key, text):
        assert not isinstance(action, FinalText)
    if isinstance(action, MalformedToolCall):
        assert action.detail and action.text == text


@pytest.mark.parametrize("codec_key", CODECS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_canonical_calls_round_trip_through_parse(codec_key, data):
    calls = data.draw(st.lists(st.tuples(st.sampled_from(["echo", "weather.current"]), _args), min_size=1,
                               max_size=1 if codec_key.startswith("llama") else 3))
    sep = "\n" if codec_key.startswith("qwen") else "; "
    text = sep.join(_canonical(codec_key, n, a) for n, a in calls)
    if codec_key == "llama" and len(calls) > 1:
        text = "<|python_tag|>" + text.replace("<|python_tag|>", "")
    action = CODECS[codec_key].parse(text)
    assert isinstance(action, ToolCalls), action
    assert [(c.name, c.arguments) for c in action.calls] == calls


# -- grammar ↔ parser ------------------------------------------------------------------------------------------------

def python_regex(pattern: str) -> re.Pattern[str]:
    """The dialect pattern as a Python regex: each (?&NAME) terminal becomes the token's literal text."""
    return re.compile(re.sub(r"(?<!\\)\(\?&([^)]*)\)", lambda m: re.escape(m.group(1)), pattern))


CONSTRAINED = [WEATHER, NOTE]


@functools.lru_cache(maxsize=None)
def _sampler(codec_key: str, tool_names: tuple[str, ...], tool_choice: str) -> st.SearchStrategy[str]:
    tools = [t for t in TOOLS if t.name in tool_names]
    return st.from_regex(python_regex(CODECS[codec_key].tool_call_grammar(tools, tool_choice)), fullmatch=True)


def _check_admitted(codec_key: str, text: str, tools: list[ToolSpec], tool_choice: str) -> None:
    action = CODECS[codec_key].parse(text)
    assert not isinstance(action, MalformedToolCall), (text, action)
    if tool_choice == "none":
        assert isinstance(action, FinalText)
    elif tool_choice != "auto":
        assert isinstance(action, ToolCalls)
    if isinstance(action, ToolCalls):
        offered = {t.name for t in tools} if tool_choice in ("auto", "required") else {tool_choice}
        assert {c.name for c in action.calls} <= offered
        if codec_key.startswith("llama"):
            assert len(action.calls) == 1
        for c in action.calls:
            if c.name == "weather.current":
                assert set(c.arguments) <= {"city", "unit", "days"} and isinstance(c.arguments["city"], str)
                assert c.arguments.get("unit", "c") in ("c", "f") and 1 <= c.arguments.get("days", 1) <= 7
            if c.name == "notes-add_v2":
                assert list(c.arguments) == ["text"] and len(c.arguments["text"]) <= 8


@pytest.mark.parametrize("codec_key", CODECS)
@pytest.mark.parametrize("tool_choice", ["auto", "required", "none", "weather.current", "notes-add_v2"])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_every_string_the_grammar_admits_parses_to_offered_calls(codec_key, tool_choice, data):
    text = data.draw(_sampler(codec_key, tuple(t.name for t in CONSTRAINED), tool_choice))
    _check_admitted(codec_key, text, CONSTRAINED, tool_choice)


@pytest.mark.parametrize("codec_key", CODECS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_an_unconstrained_tool_admits_any_json_object_that_parses(codec_key, data):
    text = data.draw(_sampler(codec_key, ("echo", "weather.current"), "echo"))
    _check_admitted(codec_key, text, [ECHO, WEATHER], "echo")


@pytest.mark.slow
@pytest.mark.parametrize("codec_key", CODECS)
@pytest.mark.parametrize("tool_choice", ["auto", "required"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_grammar_and_parser_agree_on_mixed_tools_at_length(codec_key, tool_choice, data):
    text = data.draw(_sampler(codec_key, tuple(t.name for t in TOOLS), tool_choice))
    _check_admitted(codec_key, text, TOOLS, tool_choice)


@pytest.mark.parametrize("codec_key", CODECS)
@settings(max_examples=150, deadline=None)
@given(text=_noise)
def test_the_none_grammar_admits_exactly_the_texts_that_parse_as_prose(codec_key, text):
    codec = CODECS[codec_key]
    admitted = python_regex(codec.tool_call_grammar(TOOLS, "none")).fullmatch(text) is not None
    answered = isinstance(codec.parse(text), FinalText) and bool(text.strip(WS))  # an empty answer is no answer
    assert admitted == answered


# -- free text: exactly the texts that spell no trigger --------------------------------------------------------------

_word = st.text(alphabet="ab`<{ ", min_size=1, max_size=4)


@settings(max_examples=200, deadline=None)
@given(words=st.lists(_word, min_size=1, max_size=3), first_not=st.sampled_from(["", "{"]), nonempty=st.booleans(),
       texts=st.lists(st.text(alphabet="ab`<{ \n", max_size=10), min_size=1, max_size=20))
def test_free_text_admits_exactly_the_texts_without_a_trigger(words, first_not, nonempty, texts):
    from agent.protocol._pattern import free_text

    rx = re.compile(free_text(words, first_not=first_not, nonempty=nonempty))
    for text in texts + ["".join(words), "x" + words[0] + "y"]:
        body = text.lstrip(WS)
        want = (not any(w in text for w in words) and not (first_not and body.startswith(first_not))
                and not (nonempty and not body))
        assert (rx.fullmatch(text) is not None) == want, (words, text)
