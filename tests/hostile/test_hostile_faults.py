"""Faults: hostile tools, cancellation racing every phase, unwritable traces and kill -9 mid-run.

Every run ends with a typed outcome, the trace of a finished run verifies, an unwritable trace is a clear terminal
failure with its prefix intact, and a SIGKILL leaves a readable trace prefix and no partial artifact.
"""

from __future__ import annotations

import hashlib
import os
import random
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.artifact import TEMP_PREFIX, ArtifactStore
from agent.cancel import CancelToken
from agent.limits import AgentLimits
from agent.protocol import QwenCodec
from agent.results import ResultErrorKind
from agent.schema import validate_arguments
from agent.session import LoopOutcome, Session
from agent.testkit import ScriptedEngine
from agent.tool import Tool, ToolContext, ToolRegistry, execute_tool
from agent.trace import TraceRecorder, TraceWriteError, read_trace, verify_trace
from .hostile_kit import HERE, SRC, budget
from .make_corpus import call, final, scripted_run

CODEC = QwenCodec()


# -- hostile tools -----------------------------------------------------------------------------------------------


class ItemsBomb(dict):  # type: ignore[type-arg]
    def items(self) -> Any:
        raise RuntimeError("items bomb")


class ReprBomb:
    def __repr__(self) -> str:
        raise RuntimeError("repr bomb")


class StrBombError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str bomb")


def _spawn_threads() -> str:
    for _ in range(5):
        threading.Thread(target=time.sleep, args=(0.2,), daemon=True).start()
    return "spawned"


BEHAVIOURS: dict[str, tuple[Any, ResultErrorKind | None]] = {
    "raises": (lambda: 1 / 0, ResultErrorKind.EXECUTION_FAILED),
    "raises_systemexit": (lambda: sys.exit(3), ResultErrorKind.EXECUTION_FAILED),
    "raises_keyboardinterrupt": (lambda: (_ for _ in ()).throw(KeyboardInterrupt()), ResultErrorKind.EXECUTION_FAILED),
    "raises_unprintable": (lambda: (_ for _ in ()).throw(StrBombError()), ResultErrorKind.EXECUTION_FAILED),
    "raises_huge_message": (lambda: (_ for _ in ()).throw(ValueError("m" * (5 << 20))), ResultErrorKind.EXECUTION_FAILED),
    "hangs": (lambda: threading.Event().wait(30), ResultErrorKind.TIMEOUT),
    "returns_set": (lambda: {1, 2}, ResultErrorKind.RESULT_NOT_SERIALIZABLE),
    "returns_nan": (lambda: float("nan"), ResultErrorKind.RESULT_NOT_SERIALIZABLE),
    "returns_bytes": (lambda: b"\xff", ResultErrorKind.RESULT_NOT_SERIALIZABLE),
    "returns_object": (lambda: ReprBomb(), ResultErrorKind.RESULT_NOT_SERIALIZABLE),
    "returns_cycle": (lambda: (lambda cycle: (cycle.append(cycle), cycle)[1])([]), ResultErrorKind.RESULT_NOT_SERIALIZABLE),
    "returns_deep": (lambda: (lambda: [x := [], [(x := [x]) for _ in range(100_000)]][1][-1])(),
                     ResultErrorKind.RESULT_NOT_SERIALIZABLE),
    "returns_items_bomb": (lambda: ItemsBomb(a=1), ResultErrorKind.RESULT_NOT_SERIALIZABLE),
    "returns_huge": (lambda: "é" * (20 << 20), None),
    "returns_surrogate": (lambda: "\ud800", None),
    "spawns_threads": (_spawn_threads, None),
}


def _tool(name: str, behaviour: Any, timeout_s: float | None = 0.5) -> Tool:
    return Tool(name=name, description="hostile", function=lambda args, ctx: behaviour(), timeout_s=timeout_s)


def _run_one(name: str) -> Any:
    behaviour, expected = BEHAVIOURS[name]
    # Only a tool that is meant to hang gets the short watchdog; the others must finish on their own, however
    # loaded the machine (building a 100k-deep list can take seconds on a busy CI runner).
    tool = _tool("t", behaviour, timeout_s=0.5 if expected is ResultErrorKind.TIMEOUT else None)
    args = validate_arguments("t", tool.parameters, {})
    ctx = ToolContext(run_id="r", call_id="c", artifacts=None, cancel=CancelToken(), linked_runs=[])
    return execute_tool(tool, args, ctx, timeout_s=5 if expected is ResultErrorKind.TIMEOUT else 300)


@pytest.mark.parametrize("name", sorted(BEHAVIOURS))
def test_a_hostile_tool_yields_a_typed_outcome(name: str) -> None:
    outcome = _run_one(name)
    expected = BEHAVIOURS[name][1]
    assert outcome.ok is (expected is None), outcome
    assert outcome.error_kind == expected
    assert len(outcome.detail) <= 2000


def test_a_result_whose_serialization_raises_is_result_not_serializable() -> None:
    outcome = _run_one("returns_items_bomb")
    assert outcome.error_kind is ResultErrorKind.RESULT_NOT_SERIALIZABLE


@pytest.mark.parametrize("name", ["raises", "hangs", "returns_set", "returns_surrogate", "spawns_threads",
                                  "raises_huge_message",
                                  "returns_huge"])
def test_a_session_survives_a_hostile_tool_and_its_trace_verifies(tmp_path: Path, name: str) -> None:
    engine = ScriptedEngine([call("t"), final("done")], CODEC)
    with TraceRecorder(tmp_path / "t.jsonl") as rec:
        result = Session(engine, ToolRegistry([_tool("t", BEHAVIOURS[name][0])]), trace=rec).run("go")
    assert result.outcome is LoopOutcome.COMPLETED
    content = result.messages[-2]["content"]
    assert len(content.encode()) <= AgentLimits().max_result_bytes  # bounded reinjection
    assert verify_trace(tmp_path / "t.jsonl").ok


# -- cancellation racing every phase -----------------------------------------------------------------------------


def _racing_run(tmp: Path, delay_s: float, turns: list[Any]) -> None:
    token = CancelToken()
    timer = threading.Timer(delay_s, token.cancel, args=("raced",))
    timer.start()
    try:
        result = scripted_run(tmp / "t.jsonl", tmp / "a", turns, cancel=token, slow_s=0.002)
    finally:
        timer.cancel()
    assert result.outcome in (LoopOutcome.CANCELLED, LoopOutcome.COMPLETED), result
    if result.outcome is LoopOutcome.CANCELLED:
        assert token.is_set()
    report = verify_trace(tmp / "t.jsonl", artifact_root=tmp / "a")
    assert report.ok, report.problems
    # the committed conversation alternates validly: every tool message answers a committed call
    roles = [m["role"] for m in result.messages]
    assert roles[:2] == ["system", "user"]
    for entry in result.ledger:
        assert entry.message is result.messages[entry.index] or entry.message == result.messages[entry.index]


RACE_TURNS = [call("add", a=1, b=2), call("write_artifact", name="r.md", content="x" * 5000),
              call("note", text="n"), final("Done: the sum is 3.")]


@budget(ci=40)
@given(delay_ms=st.floats(0, 30), seed=st.integers(0, 3))
def test_a_cancel_from_another_thread_at_any_moment_ends_typed_and_the_trace_verifies(
        tmp_path_factory: pytest.TempPathFactory, delay_ms: float, seed: int) -> None:
    _racing_run(tmp_path_factory.mktemp("race"), delay_ms / 1000, RACE_TURNS[seed:] if seed < 3 else RACE_TURNS)


@pytest.mark.slow
@budget(ci=40, fuzz=1000)
@given(delay_ms=st.floats(0, 60), seed=st.integers(0, 3))
def test_a_cancel_from_another_thread_at_any_moment_ends_typed_fuzz(
        tmp_path_factory: pytest.TempPathFactory, delay_ms: float, seed: int) -> None:
    _racing_run(tmp_path_factory.mktemp("race"), delay_ms / 1000, RACE_TURNS[seed:] if seed < 3 else RACE_TURNS)


# -- unwritable traces -------------------------------------------------------------------------------------------


def test_a_read_only_trace_directory_is_a_clear_error_before_the_run(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        # root ignores directory modes: /proc/self refuses new files for everyone
        target = (ro if not os.access(ro, os.W_OK) else Path("/proc/self")) / "t.jsonl"
        with pytest.raises(TraceWriteError) as info:
            TraceRecorder(target)
        assert info.value.path == str(target) and info.value.errno_code is not None
    finally:
        ro.chmod(0o700)


def test_a_full_device_is_a_clear_terminal_failure() -> None:
    engine = ScriptedEngine([final("hi")], CODEC)
    rec = TraceRecorder("/dev/full")
    result = Session(engine, ToolRegistry([]), trace=rec).run("go")
    assert result.outcome is LoopOutcome.FAILED and result.phase == "trace"
    assert "trace write failed" in result.detail


_FSIZE_CHILD = """
import resource, signal, sys
sys.path[:0] = [{src!r}, {here!r}]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
from make_corpus import busy_turns, scripted_run
from agent.limits import AgentLimits
limit = int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
r = scripted_run(__import__('pathlib').Path(sys.argv[1]), __import__('pathlib').Path(sys.argv[2]), busy_turns(5),
                 limits=AgentLimits(max_model_steps=11, max_tool_calls=10, max_output_tokens=10**6))
print(r.outcome.value, r.phase, r.detail[:200])
"""


@pytest.mark.parametrize("limit", [3_000, 9_000, 40_000])
def test_a_disk_that_fills_mid_run_fails_the_run_and_keeps_the_trace_prefix(tmp_path: Path, limit: int) -> None:
    """RLIMIT_FSIZE makes every write past ``limit`` bytes fail with EFBIG, like a full disk."""
    trace, arts = tmp_path / "t.jsonl", tmp_path / "a"
    proc = subprocess.run([sys.executable, "-c", _FSIZE_CHILD.format(src=str(SRC), here=str(HERE)), str(trace),
                           str(arts), str(limit)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    outcome, phase = proc.stdout.split()[:2]
    assert outcome == "failed" and phase == "trace", proc.stdout
    read = read_trace(trace)
    assert read.torn_tail is None and not read.problems  # a clean prefix: whole lines only
    assert [e.seq for e in read.events] == list(range(len(read.events)))
    _assert_no_partial_artifacts(arts)


# -- kill -9 -------------------------------------------------------------------------------------------------------


def _assert_no_partial_artifacts(root: Path) -> None:
    if not root.exists():
        return
    store = ArtifactStore(root)
    for ref in store.refs():
        assert store.verify(ref)
        assert hashlib.sha256(ref.path.read_bytes()).hexdigest().startswith(ref.id.split("-")[1])
    for entry in root.iterdir():
        assert entry.name.startswith(TEMP_PREFIX) or any(entry.name == r.id for r in store.refs()), entry.name


def _kill_run(tmp: Path, delay_s: float) -> None:
    trace, arts = tmp / "t.jsonl", tmp / "a"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), str(HERE)]))
    proc = subprocess.Popen([sys.executable, str(HERE / "make_corpus.py"), "--run", str(trace), str(arts),
                             "--turns", "30", "--slow-s", "0.001"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not trace.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # kill only once the run has started writing
    time.sleep(delay_s)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    proc.stdout.close()  # type: ignore[union-attr]
    proc.stderr.close()  # type: ignore[union-attr]
    read = read_trace(trace)
    assert not read.problems, read.problems
    assert [e.seq for e in read.events] == list(range(len(read.events)))
    _assert_no_partial_artifacts(arts)
    recorded = {e.data["artifact_id"]: e.data["sha256"] for e in read.events if e.event_type == "artifact_written"}
    for artifact_id, digest in recorded.items():  # every artifact the trace records exists with its bytes
        assert hashlib.sha256((arts / artifact_id).read_bytes()).hexdigest() == digest


@pytest.mark.parametrize("seed", range(4))
def test_kill_9_at_a_random_point_leaves_a_readable_prefix_and_no_partial_artifact(tmp_path: Path, seed: int) -> None:
    _kill_run(tmp_path, random.Random(seed).uniform(0.0, 1.5))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40))
def test_kill_9_at_a_random_point_fuzz(tmp_path: Path, seed: int) -> None:
    _kill_run(tmp_path, random.Random(1000 + seed).uniform(0.0, 3.0))


def test_resource_module_is_available() -> None:
    assert resource.getrlimit(resource.RLIMIT_FSIZE)
