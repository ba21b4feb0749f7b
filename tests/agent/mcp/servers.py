"""Helpers of the MCP tests: configurations of real servers, a scripted model that speaks Qwen2.5, a hang guard.

The reference servers are the ones the issue measured: ``mcp-server-time`` (PyPI, pinned in pyproject's dev extras,
so it sits beside the interpreter) and three npm servers pinned in tests/mcp_servers/package-lock.json, installed by
``make test`` (``npm ci``). ``faulty_server.py`` beside them misbehaves on request (see its docstring).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from agent.protocol import QwenCodec
from agent.testkit import call_text, final_text
from agent.trace import EventType, read_trace

ROOT = Path(__file__).resolve().parents[3]
SERVERS = ROOT / "tests" / "mcp_servers"
NODE_BIN = SERVERS / "node_modules" / ".bin"
FAULTY = SERVERS / "faulty_server.py"
CODEC = QwenCodec()
HANG_LIMIT_S = 120.0
"""How long `no_hang` waits before it calls a step hung: far past every limit the tests set, so only a hang hits it."""

_T = TypeVar("_T")


def npm_server(name: str) -> str:
    """The executable of an npm reference server (``make test`` installs them)."""
    path = NODE_BIN / name
    if not path.exists():
        pytest.fail(f"{path} is missing: the MCP reference servers are installed by `make test` "
                    f"(or `npm ci` in {SERVERS})")
    return str(path)


def time_server() -> str:
    """``mcp-server-time``, installed beside this interpreter by the dev extras."""
    path = Path(sys.executable).parent / "mcp-server-time"
    if not path.exists():
        pytest.fail(f"{path} is missing: install the dev extras (`make test` does)")
    return str(path)


def reference_servers(tmp: Path) -> dict[str, Any]:
    """The four reference servers as an ``mcpServers`` configuration; the filesystem server may touch only
    ``tmp/allowed``, the memory server keeps its graph in ``tmp/memory.jsonl``."""
    allowed = tmp / "allowed"
    allowed.mkdir(exist_ok=True)
    return {"mcpServers": {
        "time": {"command": time_server()},
        "memory": {"command": npm_server("mcp-server-memory"), "env": {"MEMORY_FILE_PATH": str(tmp / "memory.jsonl")}},
        "everything": {"command": npm_server("mcp-server-everything")},
        "fs": {"command": npm_server("mcp-server-filesystem"), "args": [str(allowed)]},
    }}  # fmt: skip


def faulty_server(tmp: Path, **entry: Any) -> dict[str, Any]:
    """The misbehaving server as an ``mcpServers`` configuration; it logs to ``tmp/faulty.jsonl`` and appends
    notes to ``tmp/notes.txt``."""
    return {"mcpServers": {"faulty": {
        "command": sys.executable, "args": [str(FAULTY)],
        "env": {"FAULTY_LOG": str(tmp / "faulty.jsonl"), "FAULTY_NOTES": str(tmp / "notes.txt")}, **entry}}}


def no_hang(step: Callable[[], _T], *, what: str = "the step") -> _T:
    """Run ``step`` and return its value; fail the test as hung if it has not finished after `HANG_LIMIT_S`. A guard
    against hangs, not a timing assertion: the limits under test are a few seconds, the guard minutes."""
    box: list[Any] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            box.append(step())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            error.append(exc)

    thread = threading.Thread(target=run, daemon=True, name="no-hang")
    thread.start()
    thread.join(HANG_LIMIT_S)
    if thread.is_alive():
        pytest.fail(f"{what} hung (still running after {HANG_LIMIT_S:g} s)")
    if error:
        raise error[0]
    return box[0]


def call(name: str, /, **arguments: Any) -> str:
    return call_text(CODEC, name, **arguments)


def final(text: str) -> str:
    return final_text(CODEC, text)


def events(path: Path, kind: EventType) -> list[dict[str, Any]]:
    return [e.data for e in read_trace(path).events if e.event_type == kind]


def child_pids(marker: str) -> list[int]:
    """Processes whose parent is this one and whose command line holds ``marker`` (the servers we started)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and marker in cmdline:
            found.append(int(entry.name))
    return found
