"""Servers that fail, for real: each failure ends in a typed, traced outcome naming the server, the trace verifies,
and nothing hangs (`no_hang` fails a step that is still running minutes after every limit under test).

A real process every time: the reference servers where they can show it (killed mid-call, a call that outlives its
timeout), ``faulty_server.py`` for what no well-kept server does (garbage on stdout, a broken output schema).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from agent.cancel import CancelToken
from agent.limits import AgentLimits
from agent.mcp import IDEMPOTENCY_META_KEY, McpFailure, McpSchemaError, McpServerError, connect
from agent.results import ResultErrorKind
from agent.session import LoopOutcome, Session
from agent.testkit import ScriptedEngine
from agent.tool import pre_approved
from agent.trace import EventType, TraceRecorder, verify_trace
from tests.agent.mcp.servers import (CODEC, call, child_pids, events, faulty_server, final, no_hang, npm_server,
                                     time_server)


class WatchedTrace(TraceRecorder):
    """A recorder that sets an event once a given event type was written (what another thread waits for)."""

    def __init__(self, path: Path, *, on: EventType) -> None:
        super().__init__(path)
        self.on, self.seen = on, threading.Event()

    def emit(self, event_type: Any, **kw: Any) -> Any:
        event = super().emit(event_type, **kw)
        if EventType(event_type) is self.on:
            self.seen.set()
        return event


def run(tmp: Path, tools, turns: list[str], *, trace: TraceRecorder | None = None, cancel: CancelToken | None = None,
        **kw: Any):
    recorder = trace or TraceRecorder(tmp / "trace.jsonl")
    with recorder:
        session = Session(ScriptedEngine(turns, CODEC), tools, trace=recorder, **kw)
        result = no_hang(lambda: session.run("go", cancel=cancel), what="the run")
    report = verify_trace(recorder.path)
    assert report.ok, report.problems
    return result, Path(recorder.path)


def log_records(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "faulty.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_for(predicate, what: str) -> None:
    """Poll an observable state (under the hang guard)."""
    import time

    def poll() -> None:
        while not predicate():
            time.sleep(0.02)

    no_hang(poll, what=f"waiting for {what}")


# -- during a call -----------------------------------------------------------------------------------------------

def test_a_reference_server_killed_mid_call_fails_the_call_as_server_failed(tmp_path: Path) -> None:
    config = {"mcpServers": {"everything": {"command": npm_server("mcp-server-everything")}}}
    with no_hang(lambda: connect(config), what="connect") as toolset:
        [pid] = child_pids("mcp-server-everything")
        trace = WatchedTrace(tmp_path / "trace.jsonl", on=EventType.TOOL_EXECUTION_STARTED)
        threading.Thread(target=lambda: trace.seen.wait(60) and os.kill(pid, signal.SIGKILL), daemon=True).start()
        result, path = run(tmp_path, toolset.registry(), [
            call("everything.trigger-long-running-operation", duration=300, steps=300), final("it failed")],
            trace=trace)
        [finished] = events(path, EventType.TOOL_EXECUTION_FINISHED)
        assert finished["error_kind"] == ResultErrorKind.SERVER_FAILED and finished["server"] == "everything"
        assert "MCP server 'everything' closed the connection" in finished["detail"]
        assert result.outcome is LoopOutcome.COMPLETED  # the model was told and answered
        with pytest.raises(McpServerError) as later:  # the connection stays failed, fast
            no_hang(lambda: toolset.connection("everything").call_tool("echo", {"message": "x"}))
        assert later.value.failure is McpFailure.EXITED


def test_a_server_that_kills_itself_mid_action_fails_it_typed(tmp_path: Path) -> None:
    with no_hang(lambda: connect(faulty_server(tmp_path))) as toolset:
        result, path = run(tmp_path, toolset.registry(), [call("faulty.crash"), final("it crashed")])
    [finished] = events(path, EventType.TOOL_EXECUTION_FINISHED)
    assert finished["error_kind"] == ResultErrorKind.SERVER_FAILED and "'faulty'" in finished["detail"]


def test_a_call_past_its_timeout_times_out_and_the_server_is_sent_cancellation(tmp_path: Path) -> None:
    with no_hang(lambda: connect(faulty_server(tmp_path))) as toolset:
        result, path = run(tmp_path, toolset.registry(), [call("faulty.sleep", seconds=600), final("too slow")],
                           limits=AgentLimits(tool_timeout_s=1))
        [finished] = events(path, EventType.TOOL_EXECUTION_FINISHED)
        assert finished["error_kind"] == ResultErrorKind.TIMEOUT and finished["server"] == "faulty"
        [request] = [r["id"] for r in log_records(tmp_path) if r.get("call") == "sleep"]
        wait_for(lambda: any(r.get("cancelled") == request for r in log_records(tmp_path)),
                 "notifications/cancelled to reach the server")


def test_a_reference_server_that_outlives_the_timeout_times_out(tmp_path: Path) -> None:
    config = {"mcpServers": {"everything": {"command": npm_server("mcp-server-everything")}}}
    with no_hang(lambda: connect(config)) as toolset:
        result, path = run(tmp_path, toolset.registry(), [
            call("everything.trigger-long-running-operation", duration=600, steps=2), final("too slow")],
            limits=AgentLimits(tool_timeout_s=1))
        [finished] = events(path, EventType.TOOL_EXECUTION_FINISHED)
        assert finished["error_kind"] == ResultErrorKind.TIMEOUT
        # the server took the cancellation and still answers
        echo = no_hang(lambda: toolset.connection("everything").call_tool("echo", {"message": "still here"}))
        assert "still here" in echo.content[0].text


def test_garbage_on_stdout_fails_the_call_and_the_connection_as_malformed(tmp_path: Path) -> None:
    with no_hang(lambda: connect(faulty_server(tmp_path))) as toolset:
        result, path = run(tmp_path, toolset.registry(), [call("faulty.garbage"), call("faulty.sleep", seconds=0),
                                                          final("broken")])
    first, second = events(path, EventType.TOOL_EXECUTION_FINISHED)
    assert first["error_kind"] == second["error_kind"] == ResultErrorKind.SERVER_FAILED
    assert "MCP server 'faulty' sent malformed JSON-RPC" in first["detail"]
    assert "'this is not JSON-RPC'" in first["detail"] and second["detail"] == first["detail"]


def test_cancelling_while_an_action_runs_leaves_its_effect_visible_and_its_result_uncommitted(tmp_path: Path
                                                                                            ) -> None:
    notes = tmp_path / "notes.txt"
    cancel = CancelToken()
    threading.Thread(target=lambda: (wait_for(notes.exists, "the write"), cancel.cancel("user stop")),
                     daemon=True).start()
    with no_hang(lambda: connect(faulty_server(tmp_path))) as toolset:
        result, path = run(tmp_path, toolset.registry(), [call("faulty.slow_write", text="hello", seconds=600)],
                           cancel=cancel)
        [request] = [r["id"] for r in log_records(tmp_path) if r.get("call") == "slow_write"]
        wait_for(lambda: any(r.get("cancelled") == request for r in log_records(tmp_path)), "the cancellation")
    assert result.outcome is LoopOutcome.CANCELLED and notes.read_text() == "hello\n"
    [uncommitted] = events(path, EventType.TOOL_RESULT_UNCOMMITTED)
    assert uncommitted["executed"] and uncommitted["effect_visible"] and uncommitted["server"] == "faulty"
    assert not events(path, EventType.TOOL_RESULT_COMMITTED)  # no fictional result in the conversation
    assert not [m for m in result.messages if m["role"] == "tool"]


def test_structured_content_that_breaks_its_output_schema_is_ok_false_naming_the_path(tmp_path: Path) -> None:
    with no_hang(lambda: connect(faulty_server(tmp_path))) as toolset:
        result, path = run(tmp_path, toolset.registry(), [call("faulty.mismatch"), final("bad answer")])
    [finished] = events(path, EventType.TOOL_EXECUTION_FINISHED)
    assert not finished["ok"] and finished["error_kind"] == ResultErrorKind.EXECUTION_FAILED
    assert "structuredContent.n" in finished["detail"] and "'faulty'" in finished["detail"]


def test_an_actions_idempotency_key_reaches_the_server_in_meta(tmp_path: Path) -> None:
    with no_hang(lambda: connect(faulty_server(tmp_path))) as toolset:
        result, path = run(tmp_path, toolset.registry(), [call("faulty.write_note", text="n"), final("noted")],
                           approval=pre_approved(["faulty.write_note"]))
    [started] = events(path, EventType.TOOL_EXECUTION_STARTED)
    [received] = [r for r in log_records(tmp_path) if r.get("call") == "write_note"]
    assert received["meta"] == {IDEMPOTENCY_META_KEY: started["idempotency_key"]}


@pytest.mark.parametrize("idempotent", [True, False])
def test_after_a_timeout_only_an_idempotent_action_runs_again_under_the_same_key(tmp_path: Path,
                                                                                idempotent: bool) -> None:
    # the user's annotations override the server's idempotentHint (false) for one of the two runs
    config = faulty_server(tmp_path, annotations={"slow_write": {"idempotentHint": True}} if idempotent else {})
    write = call("faulty.slow_write", text="once?", seconds=600)
    with no_hang(lambda: connect(config)) as toolset:
        session = Session(ScriptedEngine([write, final("slow"), write, final("slow again")], CODEC),
                          toolset.registry(), limits=AgentLimits(tool_timeout_s=1))
        results = [no_hang(lambda: session.run("write")) for _ in range(2)]
    assert all(r.outcome is LoopOutcome.COMPLETED for r in results)
    writes = [r for r in log_records(tmp_path) if r.get("call") == "slow_write"]
    assert len(writes) == (2 if idempotent else 1)
    told = [json.loads(m["content"]) for m in results[0].messages if m["role"] == "tool"]
    assert "its effect may already have happened" in told[0]["detail"]  # the model is not told it did not write
    assert len({json.dumps(r["meta"]) for r in writes}) == 1  # one key, reused by the retry


def test_a_changed_tool_list_is_re_read_between_turns(tmp_path: Path) -> None:
    with no_hang(lambda: connect(faulty_server(tmp_path))) as toolset:
        before = toolset.servers[0]
        result, path = run(tmp_path, toolset.registry(), [call("faulty.grow"), call("faulty.extra"), final("grown")],
                           tool_updates=toolset.refresh)
        after = toolset.servers[0]
    assert result.outcome is LoopOutcome.COMPLETED
    [changed] = events(path, EventType.TOOLS_CHANGED)
    assert changed["adopted"] and "faulty.extra" in [t["name"] for t in changed["tools"]]
    assert changed["tool_servers"][0]["tools_sha256"] == after.tools_sha256 != before.tools_sha256
    assert [f["ok"] for f in events(path, EventType.TOOL_EXECUTION_FINISHED)] == [True, True]


# -- at start-up -------------------------------------------------------------------------------------------------

def test_a_schema_the_compiler_refuses_leaves_the_tool_out_naming_server_tool_and_keyword(tmp_path: Path) -> None:
    with no_hang(lambda: connect(faulty_server(tmp_path))) as toolset:
        [skipped] = toolset.skipped
        assert "faulty.remote_ref" not in [t.name for t in toolset.tools]
    assert (skipped.server, skipped.tool, skipped.keyword) == ("faulty", "remote_ref", "$ref")
    assert "MCP server 'faulty', tool 'remote_ref'" in skipped.reason
    with pytest.raises(McpSchemaError) as refused:
        no_hang(lambda: connect(faulty_server(tmp_path), strict=True))
    assert refused.value.keyword == "$ref" and not child_pids(str(Path("faulty_server.py")))


START_FAULTS = {
    "no_such_command": ({"command": "/nonexistent/mcp-server"}, McpFailure.FAILED_TO_START, "no such command"),
    "exits": ({"command": "sh", "args": ["-c", "echo bad config >&2; exit 3"]}, McpFailure.EXITED, "bad config"),
    "hangs": ({"command": "sh", "args": ["-c", "exec sleep 600"]}, McpFailure.TIMED_OUT, "initialize"),
    "garbage": ({"command": "sh", "args": ["-c", f"echo hello; exec {time_server()}"]}, McpFailure.MALFORMED,
                "'hello'"),
}


@pytest.mark.parametrize("fault", START_FAULTS)
def test_a_server_that_cannot_start_fails_the_start_naming_it_and_stops_the_others(tmp_path: Path,
                                                                                   fault: str) -> None:
    entry, failure, words = START_FAULTS[fault]
    servers = {"mcpServers": {"time": {"command": time_server()}, "broken": entry}}
    with pytest.raises(McpServerError) as error:
        no_hang(lambda: connect(servers, startup_timeout_s=2, log_dir=tmp_path))
    assert error.value.server == "broken" and error.value.failure is failure
    assert str(error.value).startswith("MCP server 'broken'") and words in str(error.value)
    assert not child_pids(time_server())  # the server that did start was stopped again


def test_server_stderr_goes_to_its_log_file_not_to_the_model(tmp_path: Path) -> None:
    with no_hang(lambda: connect(faulty_server(tmp_path), log_dir=tmp_path, log_prefix="run.")) as toolset:
        result, path = run(tmp_path, toolset.registry(), [call("faulty.sleep", seconds=0), final("ok")])
    assert "stdin closed; exiting" in (tmp_path / "run.faulty.stderr.log").read_text()
    assert "stdin closed" not in path.read_text()


def test_every_step_of_a_server_that_hangs_on_list_is_bounded(tmp_path: Path) -> None:
    # a process that answers initialize and then nothing: the time server behind a pipe that stops after one line
    relay = (f"import sys,subprocess,time;p=subprocess.Popen([{time_server()!r}],stdin=subprocess.PIPE,"
             "stdout=subprocess.PIPE);l=sys.stdin.readline();p.stdin.write(l.encode());p.stdin.flush();"
             "sys.stdout.write(p.stdout.readline().decode());sys.stdout.flush();time.sleep(600)")
    with pytest.raises(McpServerError) as error:
        no_hang(lambda: connect({"mcpServers": {"mute": {"command": sys.executable, "args": ["-c", relay]}}},
                                startup_timeout_s=2))
    assert error.value.failure is McpFailure.TIMED_OUT and "tools/list" in str(error.value)
