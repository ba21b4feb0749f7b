"""The default model with every tool of the four reference servers (38) under ``tool_choice="auto"``: it asks the
time server, constrained, and answers from what the server returned.

The answer's form is one sentence (``final_pattern``: without it this 0.5B model, once it has the result, may write
the call again as a code block for its answer); the time in it is the model's to write, so the check that it quotes
the server's time is a check of the model, not of the pattern."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent.engine import ChatModelEngine
from agent.limits import AgentLimits
from agent.mcp import connect
from agent.models import DEFAULT_MODEL, model_path
from agent.protocol import codec_for
from agent.session import LoopOutcome, Session
from agent.trace import EventType, TraceRecorder, verify_trace
from constrained import LlamaModel
from tests.agent.mcp.servers import events, no_hang, reference_servers

pytestmark = pytest.mark.model


def test_what_time_is_it_in_tokyo_with_all_38_tools_offered(tmp_path: Path) -> None:
    model = LlamaModel.load(model_path(DEFAULT_MODEL), n_ctx=8192, n_threads=2)
    try:
        with no_hang(lambda: connect(reference_servers(tmp_path), log_dir=tmp_path)) as mcp_tools:
            assert len(mcp_tools) == 38
            with TraceRecorder(tmp_path / "trace.jsonl") as trace:
                session = Session(ChatModelEngine(model, codec_for(model)), mcp_tools.registry(), trace=trace,
                                  limits=AgentLimits(max_model_steps=4), tool_updates=mcp_tools.refresh,
                                  final_pattern=r"It is [0-9]{1,2}:[0-9]{2} in Tokyo\.")
                result = session.run("What time is it in Tokyo?")
    finally:
        model.close()
    path = tmp_path / "trace.jsonl"
    assert verify_trace(path).ok
    assert result.outcome is LoopOutcome.COMPLETED, result.detail
    [first, *_] = events(path, EventType.TOOL_CALL_VALIDATED)
    assert (first["tool"], first["arguments"]) == ("time.get_current_time", {"timezone": "Asia/Tokyo"})
    [turn, *_] = events(path, EventType.MODEL_CALL_FINISHED)
    assert turn["constrained"]  # the call was decoded under the tool-call grammar of all 38 tools
    executed = events(path, EventType.TOOL_EXECUTION_FINISHED)[0]
    assert executed["ok"] and executed["server"] == "time"
    [committed, *_] = events(path, EventType.TOOL_RESULT_COMMITTED)
    assert committed["ok"] and "Asia/Tokyo" in committed["content"]  # the result was reinjected
    hour, minute = re.search(r"T(\d\d):(\d\d)", executed["result"]["result"]["datetime"]).groups()
    # The answer quotes the result: its minutes. Not its hour: past midnight the model writes 01:05 as 12:05.
    assert re.search(rf"\b[0-9]{{1,2}}:{minute}\b", result.final_text), (hour, minute, result.final_text)
