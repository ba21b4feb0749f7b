"""``ember run --mcp`` / ``ember call --mcp``: every input error is one line naming the flag and the file, exit 2,
before a model loads; with good files the servers' tools are what the model is offered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent import cli
from agent.models import DEFAULT_MODEL
from tests.agent.mcp.servers import no_hang, time_server


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a model fails the test: every error below must come first."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the input error was found")

    monkeypatch.setattr("agent.runner.load_chat_model", refuse)
    monkeypatch.setattr("agent.calls.load_chat_model", refuse)


def write(path: Path, value: object) -> str:
    path.write_text(value if isinstance(value, str) else json.dumps(value), encoding="utf-8")
    return str(path)


def bad_inputs(tmp: Path) -> dict[str, tuple[list[str], str]]:
    """argv after the subcommand's own arguments (several --mcp where the case needs two files), and the words the
    one line must hold."""
    good = write(tmp / "good.json", {"mcpServers": {"time": {"command": time_server()}}})
    return {
        "missing file": (["--mcp", str(tmp / "absent.json")], f"--mcp {tmp / 'absent.json'}: no such file"),
        "not JSON": (["--mcp", write(tmp / "bad.json", "{oops")], f"--mcp {tmp / 'bad.json'}: not JSON (line 1"),
        "bad entry": (["--mcp", write(tmp / "entry.json", {"mcpServers": {"fs": {"command": "npx", "arg": []}}})],
                      f"--mcp {tmp / 'entry.json'}: server 'fs': unknown key 'arg'"),
        "no mcpServers": (["--mcp", write(tmp / "servers.json", {"servers": {}})], 'no "mcpServers" object'),
        "does not start": (["--mcp", write(tmp / "nocmd.json", {"mcpServers": {"x": {"command": "/no/such/srv"}}})],
                           f"--mcp {tmp / 'nocmd.json'}: MCP server 'x' failed to start: no such command"),
        "same server twice": (["--mcp", good, "--mcp", write(tmp / "again.json", {"mcpServers": {"time": {
            "command": time_server()}}})], "server 'time': is also configured in"),
    }


@pytest.mark.parametrize("command", ["run", "call"])
@pytest.mark.parametrize("case", ["missing file", "not JSON", "bad entry", "no mcpServers", "does not start",
                                  "same server twice"])
def test_a_bad_mcp_input_is_one_line_naming_the_flag_and_file_exit_2_before_a_model_loads(
        command: str, case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_model: None) -> None:
    argv, words = bad_inputs(tmp_path)[case]
    base = ["run", "hi", "--trace", str(tmp_path / "t.jsonl")] if command == "run" else ["call", "--prompt", "hi"]
    status = no_hang(lambda: cli.main([*base, *argv]), what=f"ember {command}")
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"ember {command}: error: ") and words in err


@pytest.mark.model
def test_ember_call_offers_the_servers_tools_and_calls_nothing(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    servers = write(tmp_path / "servers.json", {"mcpServers": {"time": {"command": time_server()}}})
    status = no_hang(lambda: cli.main(["call", "--mcp", servers, "--prompt", "What time is it in Tokyo?",
                                       "--model", DEFAULT_MODEL, "--tool-choice", "required", "--json",
                                       "--threads", "2"]), what="ember call")
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert status == 0 and record["action"] == "tool_calls"
    assert record["calls"][0]["name"] in ("time.get_current_time", "time.convert_time")
