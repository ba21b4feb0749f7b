"""ProseGuard: a streamed prefix of a turn is always a prefix of the parsed turn's content, and never call markup."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.protocol import FinalText, Llama3Codec, QwenCodec, ToolCalls
from agent.protocol.streaming import ProseGuard, call_triggers

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

