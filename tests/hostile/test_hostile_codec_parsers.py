"""Hostile model output: every codec's parser returns exactly one Action for any text, and never more than it saw.

Inputs: text assembled from every control token and envelope string of every family, JSON fragments and noise;
real model turns (rendered by the codec itself) mutated byte-wise and truncated at every length; huge spans (MiBs
of prose, deeply nested arguments, thousands of calls). Properties: ``parse`` returns a FinalText | ToolCalls |
MalformedToolCall and never raises; a ToolCalls only comes from text that holds an envelope, its names are strings
and its arguments dicts, and each call's ``raw`` span is part of the text.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.protocol import FinalText, Llama3Codec, MalformedToolCall, QwenCodec, ToolCall, ToolCalls
from agent.testkit import model_text

from .hostile_kit import budget

CODECS = {"qwen2.5": QwenCodec(), "chatml": QwenCodec(family="chatml", special_tags=False),
          "llama3.1": Llama3Codec(family="llama3.1"), "llama3.2": Llama3Codec(family="llama3.2", date_string="1 Jan 2025"),
          "llama3.0": Llama3Codec(family="llama3.1", python_tag=False)}

CONTROL = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<|im_start|>", "<|im_end|>",
           "<|endoftext|>", "<tools>", "</tools>", "<|python_tag|>", "<|eot_id|>", "<|eom_id|>", "<|begin_of_text|>",
           "<|start_header_id|>", "<|end_header_id|>", "ipython", "assistant", "system", "user", "tool"]
JSONISH = ['{"name": "add", "arguments": {"a": 1}}', '{"name": "add", "parameters": {"a": 1}}', "{", "}", "[", "]",
           '"', ":", ",", "\\", '"name"', '"arguments"', '"parameters"', "null", "NaN", "Infinity", "1e999",
           "9" * 5000, '{"name": "x"', '{"a":1,"a":2}', "\\ud800", "\ud800", "\x00", "\n", " ", "\t", ";", "\u2028"]
FRAGMENTS = st.one_of(st.sampled_from(CONTROL + JSONISH), st.text(max_size=12))
TEXTS = st.lists(FRAGMENTS, max_size=30).map("".join)

ACTIONS = [
    FinalText(text="The answer is 4."),
    ToolCalls(calls=(ToolCall(name="add", arguments={"a": 1, "b": 2}, raw=""),)),
    ToolCalls(calls=(ToolCall(name="crm.search_customer", arguments={"q": "<tool_call>\"}", "n": [1, {"x": None}]},
                              raw=""),)),
    ToolCalls(calls=(ToolCall(name="a", arguments={}, raw=""), ToolCall(name="b", arguments={"k": "é😀"}, raw=""))),
]


def real_turns(family: str) -> list[str]:
    codec = CODECS[family]
    out = []
    for action in ACTIONS:
        if isinstance(codec, Llama3Codec) and isinstance(action, ToolCalls) and len(action.calls) > 1:
            continue
        out.append(model_text(codec, action))
    return out


@contextmanager
def alarm(seconds: int) -> Iterator[None]:
    """Fail (instead of hanging the suite) if the block runs longer than ``seconds``."""
    def on_alarm(*_: Any) -> None:
        raise TimeoutError(f"parse did not return within {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def check_parse(family: str, text: str) -> Any:
    codec = CODECS[family]
    with alarm(60):
        action = codec.parse(text)
    assert isinstance(action, (FinalText, ToolCalls, MalformedToolCall)), type(action)
    if isinstance(action, ToolCalls):
        bare = text.lstrip(" \t\n\r\f\v").startswith("{")  # both families accept a bare JSON call
        tagged = ("<tool_call>" if isinstance(codec, QwenCodec) else "<|python_tag|>") in text
        assert bare or tagged
        assert action.calls
        for c in action.calls:
            assert isinstance(c.name, str) and c.name and isinstance(c.arguments, dict)
            assert c.raw in text
    if isinstance(action, MalformedToolCall):
        assert action.raw in text and action.reason.value
    return action


FAMILIES = st.sampled_from(sorted(CODECS))


@budget(ci=400)
@given(family=FAMILIES, text=TEXTS)
def test_parse_of_assembled_control_text_is_total(family: str, text: str) -> None:
    check_parse(family, text)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, str]:
    family = draw(FAMILIES)
    text = draw(st.sampled_from(real_turns(family)))
    data = bytearray(text.encode("utf-8"))
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "dup", "splice"]))
        i = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            data[i:i] = draw(st.sampled_from(CONTROL + JSONISH)).encode("utf-8", "surrogatepass")
        elif op == "delete" and data:
            del data[i:i + draw(st.integers(1, 10))]
        elif op == "dup":
            data[i:i] = data[i:i + draw(st.integers(1, 40))]
        else:
            data = data[:i]
    return family, data.decode("utf-8", "replace")


@budget(ci=400)
@given(case=mutated())
def test_parse_of_mutated_real_turns_is_total(case: tuple[str, str]) -> None:
    check_parse(*case)


@pytest.mark.parametrize("family", sorted(CODECS))
def test_every_truncation_of_a_real_call_parses_to_an_action(family: str) -> None:
    for text in real_turns(family):
        for n in range(len(text) + 1):
            action = check_parse(family, text[:n])
            cut = text[:n].rstrip(" \t\n\r\f\v")
            if isinstance(action, ToolCalls) and isinstance(CODECS[family], QwenCodec) and \
                    not cut.endswith(("</tool_call>", "}")):
                pytest.fail(f"a cut-off Qwen turn parsed as complete calls: {text[:n]!r}")


HUGE = {
    "prose_4MiB": "word " * (4 << 18),
    "open_tags_100k": "<tool_call>" * 100_000,
    "close_tags_100k": "</tool_call>" * 100_000,
    "python_tags_100k": "<|python_tag|>" * 100_000,
    "deep_arguments": '<tool_call>\n{"name": "a", "arguments": ' + '{"a":' * 100_000 + "1" + "}" * 100_001 + "\n</tool_call>",
    "deep_llama": '{"name": "a", "parameters": ' + "[" * 200_000 + "]" * 200_000 + "}",
    "many_calls": "\n".join(['<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>'] * 5_000),
    "long_string_arg": '<tool_call>\n{"name": "a", "arguments": {"s": "' + "x" * (8 << 20) + '"}}\n</tool_call>',
    "unterminated_string": '<tool_call>\n{"name": "a", "arguments": {"s": "' + "\\" * (1 << 20),
    "huge_int": '{"name": "a", "parameters": {"n": ' + "9" * 100_000 + "}}",
    "semicolons": ";".join(['{"name": "a", "parameters": {}}'] * 5_000),
    "nul_and_surrogates": "\x00\ud800<tool_call>\udfff\x00" * 10_000,
}


@pytest.mark.parametrize("name", sorted(HUGE))
@pytest.mark.parametrize("family", sorted(CODECS))
def test_huge_spans_parse_to_an_action(family: str, name: str) -> None:
    check_parse(family, HUGE[name])


@pytest.mark.slow
@budget(ci=400, fuzz=5000)
@given(family=FAMILIES, text=TEXTS)
def test_parse_of_assembled_control_text_is_total_fuzz(family: str, text: str) -> None:
    check_parse(family, text)


@pytest.mark.slow
@budget(ci=400, fuzz=5000)
@given(case=mutated())
def test_parse_of_mutated_real_turns_is_total_fuzz(case: tuple[str, str]) -> None:
    check_parse(*case)
