"""Every distinct BFCL dev function offered at once, all constrained: the Qwen ``auto`` turn grammar with parallel
calls (one DFA cannot hold it) compiles as a pushdown grammar, and what it generates parses through the codec into
calls that validate."""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path

import jsonschema
import pytest

from agent.calls import tool_spec
from agent.engine import tool_call_grammar
from agent.protocol.base import ToolCall, ToolCalls
from agent.protocol.qwen import QwenCodec
from constrained.pushdown import PushdownGrammar

CASES = Path(__file__).resolve().parents[3].parent / "shared" / "corpus" / "bfcl-dev" / "cases.jsonl"


def _functions() -> list[dict]:
    if not CASES.exists():
        pytest.skip(f"BFCL dev corpus not at {CASES}")
    seen: dict[str, dict] = {}
    for line in CASES.read_text().splitlines():
        for tool in json.loads(line)["tools"]:
            seen.setdefault(tool["function"]["name"], tool)
    return list(seen.values())


@pytest.mark.parametrize("seed", range(3))
def test_all_bfcl_functions_at_once_give_valid_calls(qwen_vocab, seed):
    functions = _functions()
    assert len(functions) > 200
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BFCL schemas carry annotations the compiler warns about
        specs = [tool_spec(t, constrained=True) for t in functions]
        codec = QwenCodec()
        grammar = tool_call_grammar(codec, specs, "auto", qwen_vocab, parallel_calls=True)
    assert isinstance(grammar, PushdownGrammar)  # the turn spells the envelope three times: one DFA cannot
    rng = random.Random(seed)
    matcher = grammar.matcher(max_tokens=200)
    assert matcher.advance(qwen_vocab.special_ids_by_name["<tool_call>"])  # prose is possible; we want a call
    pieces = [b"<tool_call>"]
    while not matcher.is_terminated():
        allowed = [t for t in matcher.allowed_token_ids().tolist() if t not in qwen_vocab.eos_token_ids]
        if not allowed:
            break
        token = rng.choice(allowed)
        assert matcher.advance(token)
        pieces.append(qwen_vocab.tokens[token])
    assert matcher.is_accepting()
    text = b"".join(pieces).decode("utf-8")
    action = codec.parse(text)
    calls = action.calls if isinstance(action, ToolCalls) else (action,)
    assert calls and all(isinstance(call, ToolCall) for call in calls), (text, action)
    for call in calls:
        schema = next(t["function"]["parameters"] for t in functions if t["function"]["name"] == call.name)
        jsonschema.validate(call.arguments, schema)
