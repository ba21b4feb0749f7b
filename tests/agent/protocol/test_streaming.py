"""ProseGuard: a streamed prefix of a turn is always a prefix of the parsed turn's content, and never call markup.
CallScanner: the calls scanned from any prefix of a turn grow into exactly the codec's parsed calls."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.protocol import FinalText, Llama3Codec, QwenCodec, ToolCalls
from agent.protocol.streaming import CallScanner, ProseGuard, ScannedCall, call_triggers

QWEN_TURNS = [
    "The answer is 4.",
    "  Hello there\n\n",
    'Let me check.\n<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>',
    'Sure:\n```json\n{"name": "f", "arguments": {}}\n```',
    '\n{"name": "f", "arguments": {"x": "<tool_call>"}}',
    '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\n<tool_call>\n{"name": "g", "arguments": {}}\n</tool_call>',
    "Use a < b and `code` with ``` fences that are not json",
]
LLAMA_TURNS = ["It is sunny.", 'Calling.<|python_tag|>{"name": "f", "parameters": {}}', '{"name": "f", "parameters": {}}']


def _content(codec, text: str) -> str:
    action = codec.parse(text)
    assert isinstance(action, FinalText | ToolCalls), action
    return action.text


@pytest.mark.parametrize(("codec", "turns"), [(QwenCodec(), QWEN_TURNS), (QwenCodec(special_tags=False), QWEN_TURNS),
                                              (Llama3Codec(), LLAMA_TURNS)], ids=["qwen", "chatml", "llama3"])
def test_every_streamed_prefix_starts_the_parsed_content_and_holds_no_trigger(codec, turns):
    guard = ProseGuard(codec)
    for turn in turns:
        content = _content(codec, turn)
        sent = ""
        for end in range(len(turn) + 1):
            safe = guard.safe_prefix(turn[:end])
            assert safe.startswith(sent), "a streamed prefix never shrinks"
            assert content.startswith(safe), (turn, end, safe)
            assert not any(word in safe for word in call_triggers(codec))
            sent = safe


@given(prose=st.text(alphabet="ab <>{}`json_tol\n ", max_size=30))
def test_streamed_prose_before_a_call_is_a_prefix_of_the_content(prose):
    codec = QwenCodec()
    turn = prose + '\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    action = codec.parse(turn)
    guard = ProseGuard(codec)
    content = action.text if isinstance(action, FinalText | ToolCalls) else None
    for end in range(len(turn) + 1):
        safe = guard.safe_prefix(turn[:end])
        if content is not None:
            assert content.startswith(safe)
        assert "<tool_call>" not in safe and "```json" not in safe



# -- CallScanner ---------------------------------------------------------------------------------------------------

TRICKY = 'ab"\\{}[],: é\n'
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=TRICKY, max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet=TRICKY, max_size=4), inner,
                                                                 max_size=3),
    max_leaves=6)
ARGUMENTS = st.dictionaries(st.text(alphabet=TRICKY, max_size=6), JSON_VALUES, max_size=3)
NAMES = st.sampled_from(["get_weather", "f", "ns.tool_2"])


def _qwen_shapes(calls, separators):
    objects = [json.dumps({"name": name, "arguments": args}, ensure_ascii=False, separators=separators)
               for name, args in calls]
    return [
        "".join(f"<tool_call>\n{obj}\n</tool_call>\n" for obj in objects),
        "Let me look that up {first}.\n" + "".join(f"<tool_call>\n{obj}\n</tool_call>" for obj in objects),
        "```json\n" + "\n".join(objects) + "\n```",
        "```json\n[" + ", ".join(objects) + "]\n```",
        "\n".join(objects),
    ]


def _scan_in_pieces(codec, text, cuts):
    scanner = CallScanner(codec)
    seen: list = []
    for end in [*sorted(set(cuts)), len(text)]:
        now = scanner.feed(text[:end])
        assert len(now) >= len(seen), "a scanned call never disappears"
        for before, after in zip(seen, now, strict=False):
            assert after.arguments.startswith(before.arguments), "streamed arguments only ever grow"
            assert before.name is None or after.name == before.name, "a name, once read, stays"
        seen = now
    return seen


@given(calls=st.lists(st.tuples(NAMES, ARGUMENTS), min_size=1, max_size=3),
       separators=st.sampled_from([(", ", ": "), (",", ":")]),
       fractions=st.lists(st.floats(0, 1), max_size=6))
def test_scanned_calls_are_the_parsed_calls_in_the_models_own_bytes(calls, separators, fractions):
    codec = QwenCodec()
    for turn in _qwen_shapes(calls, separators):
        action = codec.parse(turn)
        assert isinstance(action, ToolCalls), (turn, action)
        scanned = _scan_in_pieces(codec, turn, [int(f * len(turn)) for f in fractions])
        assert [(s.name, json.loads(s.arguments), s.complete) for s in scanned] == [
            (c.name, c.arguments, True) for c in action.calls]
        assert all(s.arguments in turn for s in scanned)


def test_llama_calls_scan_under_their_parameters_key():
    codec = Llama3Codec()
    turn = '<|python_tag|>{"name": "f", "parameters": {"x": [1, {"y": "}"}]}}; {"name": "g", "parameters": {}}'
    action = codec.parse(turn)
    assert isinstance(action, ToolCalls)
    assert [(s.name, s.arguments) for s in CallScanner(codec).feed(turn)] == [
        ("f", '{"x": [1, {"y": "}"}]}'), ("g", "{}")]


@pytest.mark.parametrize("turn", ["The answer is {4}.", 'Use "name": {"arguments": 1} in prose', ""])
def test_prose_holds_no_calls(turn):
    assert CallScanner(QwenCodec()).feed(turn) == []


def test_a_partial_call_shows_its_name_only_once_the_string_is_complete():
    codec, turn = QwenCodec(), '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Ro'
    scanner = CallScanner(codec)
    assert scanner.feed(turn[:24]) == [ScannedCall(name=None, arguments="", complete=False)]
    assert scanner.feed(turn) == [ScannedCall(name="get_weather", arguments='{"city": "Ro', complete=False)]
