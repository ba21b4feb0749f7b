"""The four reference servers for real: 38 tools offered under their servers' names, annotations read as the spec
defines them, calls through a session (a scripted model speaking Qwen2.5), results as the model receives them.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from agent.mcp import connect
from agent.results import ResultErrorKind
from agent.session import LoopOutcome, Session
from agent.testkit import ScriptedEngine
from agent.tool import TOOL_NAME_RE, ToolKind, pre_approved
from agent.trace import EventType, TraceRecorder, verify_trace
from tests.agent.mcp.servers import CODEC, call, events, final, no_hang, npm_server, reference_servers

EXPECTED = {
    "time": ["get_current_time", "convert_time"],
    "memory": ["create_entities", "create_relations", "add_observations", "delete_entities", "delete_observations",
               "delete_relations", "read_graph", "search_nodes", "open_nodes"],
    "everything": ["echo", "get-annotated-message", "get-env", "get-resource-links", "get-resource-reference",
                   "get-structured-content", "get-sum", "get-tiny-image", "gzip-file-as-resource",
                   "toggle-simulated-logging", "toggle-subscriber-updates", "trigger-long-running-operation",
                   "simulate-research-query"],
    "fs": ["read_file", "read_text_file", "read_media_file", "read_multiple_files", "write_file", "edit_file",
           "create_directory", "list_directory", "list_directory_with_sizes", "directory_tree", "move_file",
           "search_files", "get_file_info", "list_allowed_directories"],
}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory):
    """The four servers, connected once for the module (each test's effects stay in its own paths)."""
    tmp = tmp_path_factory.mktemp("reference")
    toolset = no_hang(lambda: connect(reference_servers(tmp), log_dir=tmp, log_prefix="ref."), what="connect")
    toolset.tmp = tmp  # type: ignore[attr-defined]
    yield toolset
    no_hang(toolset.close, what="close")


def run_session(tmp: Path, tools, turns: list[str], **kw):
    tmp.mkdir(parents=True, exist_ok=True)
    engine = ScriptedEngine(turns, CODEC)
    with TraceRecorder(tmp / "trace.jsonl") as trace:
        result = no_hang(lambda: Session(engine, tools, trace=trace, **kw).run("go"), what="the run")
    assert verify_trace(tmp / "trace.jsonl").ok
    return result, tmp / "trace.jsonl"


def test_the_four_reference_servers_offer_38_tools_each_named_by_its_server(reference) -> None:
    names = [t.name for t in reference.tools]
    assert names == [f"{server}.{tool}" for server, tools in EXPECTED.items() for tool in tools]
    assert len(names) == 38 and not reference.skipped
    assert all(TOOL_NAME_RE.match(name) for name in names)
    assert all(t.constrained for t in reference.tools)
    servers = {s.name: s for s in reference.servers}
    assert servers["time"].implementation == "mcp-time" and servers["fs"].implementation == "secure-filesystem-server"
    assert {s.protocol_version for s in servers.values()} == {"2025-11-25"}
    assert all(len(s.tools_sha256) == 64 for s in servers.values())


def test_annotations_decide_kind_approval_and_idempotency_as_the_spec_reads_them(reference) -> None:
    tools = {t.name: t for t in reference.tools}
    # readOnlyHint true: data, whatever else is declared (fs's readers leave destructiveHint absent)
    for name in ("time.get_current_time", "fs.read_text_file", "memory.read_graph", "everything.echo"):
        assert tools[name].kind is ToolKind.DATA and not tools[name].requires_approval
    # destructive (true, or absent on a non-read-only tool) -> approval; idempotentHint -> retry may rerun
    assert (tools["fs.write_file"].kind, tools["fs.write_file"].requires_approval, tools["fs.write_file"].idempotent) \
        == (ToolKind.ACTION, True, True)
    assert (tools["fs.move_file"].requires_approval, tools["fs.move_file"].idempotent) == (True, False)
    # destructiveHint false: an action, in order and keyed, but no approval
    assert (tools["memory.create_entities"].kind, tools["memory.create_entities"].requires_approval) \
        == (ToolKind.ACTION, False)
    assert (tools["fs.create_directory"].requires_approval, tools["fs.create_directory"].idempotent) == (False, True)
    assert all(t.server is not None and t.server.name == t.name.split(".")[0] for t in tools.values())


def test_the_time_server_answers_with_structured_content_checked_against_its_output_schema(reference,
                                                                                           tmp_path: Path) -> None:
    result, trace = run_session(tmp_path, reference.registry(),
                                [call("time.get_current_time", timezone="Asia/Tokyo"), final("done")])
    assert result.outcome is LoopOutcome.COMPLETED
    [finished] = events(trace, EventType.TOOL_EXECUTION_FINISHED)
    assert finished["ok"] and finished["server"] == "time"
    value = finished["result"]["result"]
    assert value["timezone"] == "Asia/Tokyo" and value["datetime"].endswith("+09:00")
    [provenance] = events(trace, EventType.PROVENANCE)
    pinned = {s["name"]: s for s in provenance["tool_servers"]}
    assert list(pinned) == ["time", "memory", "everything", "fs"]
    assert pinned["time"] == {"name": "time", "implementation": "mcp-time", "version": "2026.10.19",
                              "protocol_version": "2025-11-25", "tools_sha256": reference.servers[0].tools_sha256,
                              "transport": "stdio"}


def test_fs_write_file_is_refused_without_approval_and_runs_once_with_its_key_when_approved(reference,
                                                                                           tmp_path: Path) -> None:
    target = reference.tmp / "allowed" / "note.txt"
    write = call("fs.write_file", path=str(target), content="hello")
    refused, trace = run_session(tmp_path / "refused", reference.registry(), [write, final("could not")])
    [rejected] = events(trace, EventType.TOOL_CALL_REJECTED)
    assert rejected["kind"] == ResultErrorKind.DENIED_BY_POLICY and "requires approval" in rejected["detail"]
    assert not events(trace, EventType.TOOL_EXECUTION_STARTED) and not target.exists()

    # approved: it runs; the same call in the session's next run replays under its key, never reaching the server
    engine = ScriptedEngine([write, final("written"), write, final("written again")], CODEC)
    session = Session(engine, reference.registry(), approval=pre_approved(["fs.write_file"]))
    keys, replayed = [], []
    for n in (1, 2):
        session.trace = TraceRecorder(tmp_path / f"run{n}.jsonl")  # one recorder per run
        with session.trace:
            assert no_hang(lambda: session.run("write it"), what="the run").outcome is LoopOutcome.COMPLETED
        assert verify_trace(tmp_path / f"run{n}.jsonl").ok
        [started] = events(tmp_path / f"run{n}.jsonl", EventType.TOOL_EXECUTION_STARTED)
        [finished] = events(tmp_path / f"run{n}.jsonl", EventType.TOOL_EXECUTION_FINISHED)
        assert started["kind"] == "action" and started["server"] == "fs" and finished["ok"]
        keys.append(started["idempotency_key"])
        replayed.append(finished["replayed"])
        if n == 1:
            assert target.read_text() == "hello"
            target.write_text("changed since")  # a second write would put "hello" back
    assert keys[0] == keys[1] and keys[0].startswith("args:")
    assert replayed == [False, True] and target.read_text() == "changed since"


def test_reading_outside_the_allowed_directories_is_the_servers_ok_false(reference, tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("not for the model")
    result, trace = run_session(tmp_path, reference.registry(),
                                [call("fs.read_text_file", path=str(outside)), final("denied")])
    [finished] = events(trace, EventType.TOOL_EXECUTION_FINISHED)
    assert not finished["ok"] and finished["error_kind"] == ResultErrorKind.EXECUTION_FAILED
    assert "outside allowed directories" in finished["detail"] and "not for the model" not in json.dumps(finished)
    assert finished["server"] == "fs"


def test_content_blocks_reach_the_model_as_text_and_binary_as_a_description(reference, tmp_path: Path) -> None:
    result, trace = run_session(tmp_path, reference.registry(), [
        call("everything.echo", message="hi"), call("everything.get-tiny-image"),
        call("everything.get-structured-content", location="Chicago"), final("ok")])
    echo, image, structured = (f["result"]["result"] for f in events(trace, EventType.TOOL_EXECUTION_FINISHED))
    assert echo == "Echo: hi"
    blocks = [b for b in image if isinstance(b, dict)]
    assert blocks and blocks[0]["type"] == "image" and blocks[0]["bytes"] > 0 and "data" not in blocks[0]
    assert isinstance(structured, dict) and structured  # validated against the tool's outputSchema


def test_a_streamable_http_server_offers_its_tools_like_a_stdio_one(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (tmp_path / "http.log").open("wb")
    server = subprocess.Popen([npm_server("mcp-server-everything"), "streamableHttp"], stdout=log, stderr=log,
                              env={**os.environ, "PORT": str(port)}, start_new_session=True)
    try:
        def connected():
            for _ in range(200):  # until it listens
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    import time
                    time.sleep(0.05)
            return connect({"mcpServers": {"web": {"type": "http", "url": f"http://127.0.0.1:{port}/mcp"}}})

        with no_hang(connected, what="connect over HTTP") as toolset:
            assert len(toolset.tools) == 13 and toolset.servers[0].transport == "http"
            result, trace = run_session(tmp_path, toolset.registry(), [call("web.get-sum", a=2, b=3), final("5")])
            [finished] = events(trace, EventType.TOOL_EXECUTION_FINISHED)
            assert finished["ok"] and "5" in json.dumps(finished["result"]) and finished["server"] == "web"
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
