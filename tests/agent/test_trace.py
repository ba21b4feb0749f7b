"""The trace recorder, reader and verifier: the JSONL file is the authoritative execution record."""

from __future__ import annotations

import errno
import json
import os
import random
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent import trace as trace_mod
from agent.artifact import ArtifactStore
from agent.trace import (
    MAX_LINE_BYTES,
    TRACE_SCHEMA,
    EventType,
    FsyncPolicy,
    PrivacyMode,
    TraceMisuseError,
    TraceRead,
    TraceRecorder,
    TraceWriteError,
    UnsupportedTraceSchemaError,
    artifact_written_data,
    claims_artifact,
    provenance_data,
    read_trace,
    verify_trace,
)

SRC = Path(__file__).resolve().parents[2] / "src"
SECRET_PROMPT = "the launch code is PLUTO-7731-ORANGE"


def _provenance() -> dict:
    return provenance_data(runtime_version="0.1.0", model_sha256="1d" * 32, tokenizer_sha256="44" * 32,
                           codec_id="qwen2.5-tool-call-v1", tool_schema_sha256="ab" * 32,
                           config={"temperature": 0.0}, limits={"max_model_steps": 8})


def write_run(path: Path, store: ArtifactStore | None, *, final_text: str = "DONE 21.57%",
              write_artifact: bool = True, privacy: PrivacyMode = PrivacyMode.FULL) -> list[dict]:
    """A realistic complete run: read → calculator → write_artifact → final answer."""
    out = []
    with TraceRecorder(path, privacy=privacy) as tr:
        p = tr.payload
        out.append(tr.emit(EventType.RUN_STARTED, data={"user_message": p(SECRET_PROMPT)}))
        out.append(tr.emit(EventType.PROVENANCE, data=_provenance()))
        out.append(tr.emit(EventType.MESSAGE_COMMITTED, phase="commit", data={
            "ledger_index": 0, "kind": "user", "role": "user", "content": p(SECRET_PROMPT + "; reply DONE <n>%")}))
        out.append(tr.emit(EventType.MODEL_CALL_STARTED, step="model-1", phase="generate",
                           data={"n_messages": 2, "prompt": p(SECRET_PROMPT)}))
        out.append(tr.emit(EventType.MODEL_CALL_FINISHED, step="model-1", phase="generate",
                           data={"text": p('<tool_call>{"name":"calculator"}</tool_call>'), "n_prompt_tokens": 120,
                                 "n_output_tokens": 20, "finish_reason": "stop", "duration_ms": 900.0}))
        out.append(tr.emit(EventType.ASSISTANT_ACTION_PARSED, step="model-1", phase="parse",
                           data={"action": "tool_calls", "calls": [{"name": "calculator", "call_id": "call-1"}]}))
        out.append(tr.emit(EventType.TOOL_CALL_VALIDATED, step="tool-1", phase="validate",
                           data={"call_id": "call-1", "tool": "calculator"}))
        out.append(tr.emit(EventType.TOOL_EXECUTION_STARTED, step="tool-1", phase="execute",
                           data={"call_id": "call-1", "tool": "calculator",
                                 "arguments": p({"expression": "round((0.744-0.612)/0.612*100, 2)"})}))
        out.append(tr.emit(EventType.TOOL_EXECUTION_FINISHED, step="tool-1", phase="execute",
                           data={"call_id": "call-1", "tool": "calculator", "ok": True, "duration_ms": 0.2,
                                 "artifact_ids": [], "result": p({"ok": True, "result": 21.57})}))
        out.append(tr.emit(EventType.TOOL_RESULT_COMMITTED, step="tool-1", phase="reinject",
                           data={"call_id": "call-1", "tool": "calculator", "ok": True, "kind": "tool_result",
                                 "ledger_index": 3, "content": p('{"ok":true,"result":21.57}')}))
        if write_artifact:
            assert store is not None
            out.append(tr.emit(EventType.TOOL_EXECUTION_STARTED, step="tool-2", phase="execute",
                               data={"call_id": "call-2", "tool": "write_artifact",
                                     "arguments": p({"name": "best-config.md", "content": "# best"})}))
            ref = store.write("best-config.md", b"# best config\ntuned_q8 = 0.744\n")
            out.append(tr.emit(EventType.TOOL_EXECUTION_FINISHED, step="tool-2", phase="execute",
                               data={"call_id": "call-2", "tool": "write_artifact", "ok": True, "duration_ms": 0.3,
                                     "artifact_ids": [ref.id]}))
            out.append(tr.emit(EventType.ARTIFACT_WRITTEN, step="tool-2", phase="execute",
                               data=artifact_written_data(ref, call_id="call-2", tool="write_artifact")))
            out.append(tr.emit(EventType.TOOL_RESULT_COMMITTED, step="tool-2", phase="reinject",
                               data={"call_id": "call-2", "ok": True, "content": p({"ok": True, "result": ref.id})}))
        out.append(tr.emit(EventType.MESSAGE_COMMITTED, step="model-2", phase="commit",
                           data={"role": "assistant", "content": p(final_text)}))
        out.append(tr.emit(EventType.RUN_COMPLETED, data={"final_text": p(final_text), "outcome": "completed"}))
    return out


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


# ------------------------------------------------------------------------------------------------- recorder


def test_every_line_carries_the_envelope_and_seq_counts_from_zero(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    emitted = write_run(path, ArtifactStore(tmp_path / "a"))
    rows = [json.loads(line) for line in lines_of(path)]
    assert [r["seq"] for r in rows] == list(range(len(emitted)))
    assert {r["run_id"] for r in rows} == {emitted[0]["run_id"]}
    for row in rows:
        assert list(row) == ["schema", "run_id", "seq", "event_type", "t_ms", "ts_epoch_ms", "step", "phase",
                             "data"]
        assert row["schema"] == TRACE_SCHEMA
    assert rows == emitted
    t = [r["t_ms"] for r in rows]
    assert t == sorted(t)


def test_emit_after_a_terminal_event_is_misuse(tmp_path: Path) -> None:
    tr = TraceRecorder(tmp_path / "t.jsonl")
    tr.emit(EventType.RUN_STARTED)
    tr.emit(EventType.RUN_TERMINATED, data={"limit": "max_model_steps"})
    with pytest.raises(TraceMisuseError) as info:
        tr.emit(EventType.MESSAGE_COMMITTED)
    assert info.value.event_type == EventType.MESSAGE_COMMITTED
    with pytest.raises(TraceMisuseError):
        tr.emit(EventType.RUN_COMPLETED)
    tr.close()
    assert len(lines_of(tmp_path / "t.jsonl")) == 2


def test_emit_after_close_is_misuse(tmp_path: Path) -> None:
    tr = TraceRecorder(tmp_path / "t.jsonl")
    tr.close()
    tr.close()
    with pytest.raises(TraceMisuseError):
        tr.emit(EventType.RUN_STARTED)


def test_recorder_refuses_unknown_event_types_and_non_json_data(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TraceRecorder(path) as tr:
        with pytest.raises(TraceMisuseError):
            tr.emit("made_up_event")
        with pytest.raises(TraceMisuseError):
            tr.emit(EventType.RUN_STARTED, data={"x": object()})
        with pytest.raises(TraceMisuseError):
            tr.emit(EventType.RUN_STARTED, data={"x": float("nan")})
        assert tr.next_seq == 0
        tr.emit(EventType.RUN_STARTED)
    assert [json.loads(line)["seq"] for line in lines_of(path)] == [0]


def test_an_existing_trace_is_never_appended_to_unless_truncated(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TraceRecorder(path) as tr:
        tr.emit(EventType.RUN_STARTED)
    with pytest.raises(TraceMisuseError):
        TraceRecorder(path)
    with TraceRecorder(path, truncate=True, run_id="run-second") as tr:
        tr.emit(EventType.RUN_STARTED)
    assert [json.loads(line)["run_id"] for line in lines_of(path)] == ["run-second"]


def test_token_events_are_dropped_unless_enabled(tmp_path: Path) -> None:
    with TraceRecorder(tmp_path / "off.jsonl") as tr:
        assert tr.emit(EventType.TOKEN, data={"id": 5}) is None
        tr.emit(EventType.RUN_STARTED)
    with TraceRecorder(tmp_path / "on.jsonl", token_events=True) as tr:
        assert tr.emit(EventType.TOKEN, data={"id": 5})["seq"] == 0
    assert [json.loads(x)["event_type"] for x in lines_of(tmp_path / "off.jsonl")] == ["run_started"]
    assert [json.loads(x)["event_type"] for x in lines_of(tmp_path / "on.jsonl")] == ["token"]


def test_concurrent_emits_never_interleave_and_seq_is_file_order(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    big = "x" * 70_000  # larger than a pipe buffer: interleaving would show
    with TraceRecorder(path) as tr:
        def worker(k: int) -> None:
            for i in range(40):
                tr.emit(EventType.MESSAGE_COMMITTED, step=f"w{k}", data={"i": i, "pad": big})
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    read = read_trace(path)
    assert read.problems == () and read.torn_tail is None
    assert [e.seq for e in read.events] == list(range(160))
    for k in range(4):
        assert [e.data["i"] for e in read.events if e.step == f"w{k}"] == list(range(40))


@pytest.fixture
def fsync_calls(monkeypatch) -> list[int]:
    """The file descriptors ``os.fsync`` is called on from now on (the real fsync still runs)."""
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(trace_mod.os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    return calls


@pytest.mark.parametrize(("policy", "expected"), [(FsyncPolicy.NONE, 0), (False, 0), (FsyncPolicy.TERMINAL, 1),
                                                  (FsyncPolicy.EVERY_EVENT, 3), (True, 3)])
def test_fsync_policy_controls_how_often_lines_reach_stable_storage(tmp_path: Path, fsync_calls, policy,
                                                                    expected: int) -> None:
    calls = fsync_calls
    with TraceRecorder(tmp_path / "t.jsonl", fsync=policy) as tr:
        tr.emit(EventType.RUN_STARTED)
        tr.emit(EventType.PROVENANCE)
        tr.emit(EventType.RUN_COMPLETED)
    assert len(calls) == expected  # every-event: one per event; terminal: the terminal event only (close adds none)


@pytest.mark.parametrize(("policy", "expected"), [(FsyncPolicy.NONE, 0), (FsyncPolicy.TERMINAL, 1),
                                                  (FsyncPolicy.EVERY_EVENT, 2)])
def test_closing_an_unterminated_trace_syncs_the_lines_not_yet_synced(tmp_path: Path, fsync_calls, policy,
                                                                       expected: int) -> None:
    calls = fsync_calls
    with TraceRecorder(tmp_path / "t.jsonl", fsync=policy) as tr:
        tr.emit(EventType.RUN_STARTED)
        tr.emit(EventType.PROVENANCE)
    assert len(calls) == expected  # terminal policy: close syncs the interrupted run's lines once


# -------------------------------------------------------------------------------------------------- privacy


def test_hashed_mode_never_writes_the_raw_prompt_or_outputs(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_run(path, ArtifactStore(tmp_path / "a"), privacy=PrivacyMode.HASHED,
              final_text="Summary: " + SECRET_PROMPT)
    raw = path.read_bytes()
    for needle in (SECRET_PROMPT, "PLUTO", "7731", "launch code", "0.744-0.612", "21.5686", "<tool_call>"):
        assert needle.encode() not in raw
    started = next(e for e in read_trace(path).events if e.event_type == EventType.RUN_STARTED)
    assert started.data["user_message"] == {"privacy": "hashed", "len": len(SECRET_PROMPT),
                                            "sha256": trace_mod._sha256_text(SECRET_PROMPT)}


def test_summary_mode_keeps_only_an_excerpt(tmp_path: Path) -> None:
    with TraceRecorder(tmp_path / "t.jsonl", privacy=PrivacyMode.SUMMARY, excerpt_chars=8) as tr:
        value = tr.payload(SECRET_PROMPT)
    assert value["excerpt"] == SECRET_PROMPT[:8]
    assert value["len"] == len(SECRET_PROMPT) and value["truncated"] is True
    assert "PLUTO" not in json.dumps(value)


def test_payload_hashes_json_values_canonically(tmp_path: Path) -> None:
    with TraceRecorder(tmp_path / "t.jsonl", privacy="hashed") as tr:
        a = tr.payload({"b": 1, "a": [1, "é"]})
        b = tr.payload({"a": [1, "é"], "b": 1})
        c = tr.payload({"a": [1, "e"], "b": 1})
    assert a == b != c


def test_full_mode_keeps_payloads_verbatim(tmp_path: Path) -> None:
    with TraceRecorder(tmp_path / "t.jsonl") as tr:
        assert tr.payload({"k": [1, 2]}) == {"k": [1, 2]}
        assert tr.payload(SECRET_PROMPT) == SECRET_PROMPT


# --------------------------------------------------------------------------------------------------- reader


def test_reader_reports_a_torn_final_line_and_keeps_the_prefix(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    emitted = write_run(path, ArtifactStore(tmp_path / "a"))
    data = path.read_bytes()
    cut = data[:len(data) - 25]
    read = read_trace(cut)
    assert read.problems == ()
    assert read.torn_tail is not None and read.torn_tail.startswith('{"schema"')
    assert [e.to_json() for e in read.events] == emitted[:-1]


def test_reader_ignores_unknown_fields_and_keeps_unknown_event_types() -> None:
    line = {"schema": "ember.agent.trace.v1.4", "run_id": "r", "seq": 0, "event_type": "speculative_branch",
            "t_ms": 1, "ts_epoch_ms": 2, "step": None, "phase": None, "data": {"x": 1}, "span_id": "abc"}
    read = read_trace((json.dumps(line) + "\n").encode())
    assert read.problems == ()
    (event,) = read.events
    assert event.event_type == "speculative_branch" and event.schema == "ember.agent.trace.v1.4"
    assert "span_id" not in event.to_json()


@pytest.mark.parametrize("schema", ["ember.agent.trace.v2", "ember.agent.trace.v2.0", "ember.agent.trace.v10"])
def test_reader_rejects_an_unknown_schema_major(schema: str) -> None:
    line = {"schema": schema, "run_id": "r", "seq": 0, "event_type": "run_started", "t_ms": 0,
            "ts_epoch_ms": 0, "step": None, "phase": None, "data": {}}
    with pytest.raises(UnsupportedTraceSchemaError) as info:
        read_trace((json.dumps(line) + "\n").encode())
    assert info.value.schema == schema and info.value.line_no == 1
    report = verify_trace((json.dumps(line) + "\n").encode())
    assert not report.ok and "major" in report.problems[0]


def test_reader_reports_corrupt_middle_lines_without_crashing(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    emitted = write_run(path, ArtifactStore(tmp_path / "a"))
    lines = lines_of(path)
    lines[2] = b'{"schema": "ember.agent.trace.v1", "seq": \n'
    lines[3] = b"\xff\xfe garbage\n"
    lines[4] = b"[1, 2]\n"
    lines[5] = b"\n"
    lines[6] = json.dumps({**emitted[6], "seq": "6"}).encode() + b"\n"
    read = read_trace(b"".join(lines))
    assert len(read.problems) == 5
    assert [p.split(":")[0] for p in read.problems] == ["line 3", "line 4", "line 5", "line 6", "line 7"]
    assert [e.seq for e in read.events] == [0, 1] + list(range(7, len(emitted)))
    assert read.torn_tail is None


def test_reader_reports_an_oversize_line_and_reads_past_it() -> None:
    good = {"schema": TRACE_SCHEMA, "run_id": "r", "seq": 0, "event_type": "run_started", "t_ms": 0,
            "ts_epoch_ms": 0, "step": None, "phase": None, "data": {}}
    huge = b'{"pad":"' + b"x" * MAX_LINE_BYTES + b'"}\n'
    data = json.dumps(good).encode() + b"\n" + huge + json.dumps({**good, "seq": 1}).encode() + b"\n"
    read = read_trace(data)
    assert [e.seq for e in read.events] == [0, 1]
    assert len(read.problems) == 1 and "MAX_LINE_BYTES" in read.problems[0]


def test_recorder_refuses_a_line_over_the_bound(tmp_path: Path) -> None:
    with TraceRecorder(tmp_path / "t.jsonl") as tr:
        with pytest.raises(TraceMisuseError):
            tr.emit(EventType.MESSAGE_COMMITTED, data={"content": "x" * MAX_LINE_BYTES})
    assert (tmp_path / "t.jsonl").read_bytes() == b""


def test_lone_surrogates_round_trip_as_escapes(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TraceRecorder(path) as tr:
        tr.emit(EventType.MESSAGE_COMMITTED, data={"content": "a\ud800b"})
    (event,) = read_trace(path).events
    assert event.data["content"] == "a\ud800b"


def _real_trace_bytes() -> bytes:
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        write_run(Path(d) / "t.jsonl", ArtifactStore(Path(d) / "a"))
        return (Path(d) / "t.jsonl").read_bytes()


REAL_TRACE = _real_trace_bytes()
N_REAL = REAL_TRACE.count(b"\n")


@given(st.integers(min_value=0, max_value=len(REAL_TRACE)))
def test_any_truncation_reads_as_a_clean_prefix(cut: int) -> None:
    read = read_trace(REAL_TRACE[:cut])
    whole = REAL_TRACE[:cut].count(b"\n")
    assert read.problems == ()
    assert [e.seq for e in read.events] == list(range(whole))
    assert (read.torn_tail is None) == (cut == 0 or REAL_TRACE[cut - 1:cut] == b"\n")


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(min_value=0, max_value=len(REAL_TRACE) - 1), st.binary(min_size=0, max_size=3)),
                min_size=1, max_size=4),
       st.integers(min_value=0, max_value=len(REAL_TRACE)))
def test_random_corruption_yields_only_documented_outcomes(edits, cut: int) -> None:
    base = REAL_TRACE[:cut] if cut > len(REAL_TRACE) // 2 else REAL_TRACE
    data = bytearray(base)
    for pos, replacement in edits:
        pos = min(pos, max(len(data) - 1, 0))
        data[pos:pos + 1] = replacement
    try:
        read = read_trace(bytes(data))
    except UnsupportedTraceSchemaError:
        return
    assert isinstance(read, TraceRead)
    assert len(read.events) + len(read.problems) <= bytes(data).count(b"\n")
    assert len(read.events) >= base.count(b"\n") - 2 * len(edits)  # one edit damages at most two lines
    report = verify_trace(bytes(data))
    assert report.ok == (report.problems == ())


# ----------------------------------------------------------------------------------------- write failures


def test_a_full_device_raises_trace_write_error_and_refuses_further_events() -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    tr = TraceRecorder("/dev/full", fsync=FsyncPolicy.EVERY_EVENT)
    with pytest.raises(TraceWriteError) as info:
        tr.emit(EventType.RUN_STARTED)
    assert info.value.errno_code == errno.ENOSPC and info.value.seq == 0
    with pytest.raises(TraceWriteError):
        tr.emit(EventType.RUN_FAILED)
    tr.close()


def test_an_unopenable_location_raises_trace_write_error(tmp_path: Path) -> None:
    with pytest.raises(TraceWriteError):
        TraceRecorder("/dev/full/trace.jsonl")
    with pytest.raises(TraceWriteError):
        TraceRecorder(tmp_path / "missing-dir" / "t.jsonl")


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_a_read_only_directory_raises_trace_write_error(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(TraceWriteError):
            TraceRecorder(ro / "t.jsonl")
    finally:
        ro.chmod(0o700)


def test_a_partial_write_is_taken_back_so_the_prefix_stays_clean(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "t.jsonl"
    tr = TraceRecorder(path)
    tr.emit(EventType.RUN_STARTED)
    tr.emit(EventType.PROVENANCE, data=_provenance())
    real_write = os.write
    state = {"n": 0}

    def failing_write(fd: int, data: bytes) -> int:
        state["n"] += 1
        if state["n"] == 1:
            return real_write(fd, data[:len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(trace_mod.os, "write", failing_write)
    with pytest.raises(TraceWriteError) as info:
        tr.emit(EventType.MESSAGE_COMMITTED, data={"content": "x" * 1000})
    assert info.value.seq == 2
    monkeypatch.setattr(trace_mod.os, "write", real_write)
    with pytest.raises(TraceWriteError):
        tr.emit(EventType.RUN_FAILED, data={"error": "trace_write"})
    tr.close()
    read = read_trace(path)
    assert read.torn_tail is None and read.problems == ()
    assert [e.event_type for e in read.events] == ["run_started", "provenance"]


_RLIMIT_CHILD = textwrap.dedent("""
    import resource, signal, sys
    from agent.trace import TraceRecorder, TraceWriteError, EventType
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4000, 4000))
    tr = TraceRecorder(sys.argv[1])
    n = 0
    try:
        tr.emit(EventType.RUN_STARTED)
        n += 1
        while True:
            tr.emit(EventType.MESSAGE_COMMITTED, data={"content": "y" * 300})
            n += 1
    except TraceWriteError as e:
        print(n, e.errno_code, e.seq)
""")


def test_a_file_size_limit_mid_line_raises_trace_write_error_with_an_intact_prefix(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    proc = subprocess.run([sys.executable, "-c", _RLIMIT_CHILD, str(path)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(SRC)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    n, code, seq = map(int, proc.stdout.split())
    assert code == errno.EFBIG and seq == n and n > 3
    read = read_trace(path)
    assert read.torn_tail is None and read.problems == ()
    assert [e.seq for e in read.events] == list(range(n))


# --------------------------------------------------------------------------------------------- crash (kill -9)


_CRASH_CHILD = textwrap.dedent("""
    import sys
    from agent.artifact import ArtifactStore
    from agent.trace import TraceRecorder, EventType, artifact_written_data
    store = ArtifactStore(sys.argv[2])
    tr = TraceRecorder(sys.argv[1], fsync="none")
    tr.emit(EventType.RUN_STARTED, data={"user_message": "go"})
    print("ready", flush=True)
    i = 0
    while True:
        call = f"call-{i}"
        tr.emit(EventType.TOOL_EXECUTION_STARTED, step=f"tool-{i}", data={"call_id": call, "tool": "write_artifact",
                "arguments": {"content": "z" * 200_000}})
        ref = store.write(f"out-{i}.bin", bytes([i % 251]) * (300_000 + 7919 * i))
        tr.emit(EventType.TOOL_EXECUTION_FINISHED, step=f"tool-{i}", data={"call_id": call, "tool": "write_artifact",
                "ok": True, "artifact_ids": [ref.id]})
        tr.emit(EventType.ARTIFACT_WRITTEN, data=artifact_written_data(ref, call_id=call, tool="write_artifact"))
        i += 1
""")


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_kill_9_mid_run_leaves_a_readable_prefix_and_no_partial_artifact(tmp_path: Path, seed: int) -> None:
    path, root = tmp_path / "t.jsonl", tmp_path / "artifacts"
    proc = subprocess.Popen([sys.executable, "-c", _CRASH_CHILD, str(path), str(root)], stdout=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(SRC)})
    try:
        assert proc.stdout.readline().strip() == b"ready"
        threading.Event().wait(random.Random(seed).uniform(0.0, 0.4))
    finally:
        proc.kill()
        proc.wait()
    read = read_trace(path)
    assert read.problems == ()
    assert [e.seq for e in read.events] == list(range(len(read.events)))
    if read.torn_tail is not None:
        assert read.torn_tail.startswith('{"schema":"ember.agent.trace.v1"')
    store = ArtifactStore(root)
    refs = store.refs()
    assert all(store.verify(ref) for ref in refs)
    names = {p.name for p in root.iterdir()}
    assert names - {r.id for r in refs} <= {n for n in names if n.startswith(".ember-tmp-")}
    assert store.remove_stale_temps() == len(names) - len(refs)
    traced = {e.data["artifact_id"]: e.data["sha256"] for e in read.events if e.event_type == "artifact_written"}
    assert all(store.verify(next(r for r in refs if r.id == aid)) for aid in traced)
    report = verify_trace(path, artifact_root=root)
    assert any("no terminal event" in p for p in report.problems)


# ------------------------------------------------------------------------------------------------- verifier


def test_a_complete_run_verifies(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_run(path, ArtifactStore(tmp_path / "a"), final_text="I wrote best-config.md. DONE 21.57%")
    report = verify_trace(path, artifact_root=tmp_path / "a")
    assert report.ok, report.problems
    assert report.warnings == ()


def test_verify_catches_a_tampered_artifact(tmp_path: Path) -> None:
    path, root = tmp_path / "t.jsonl", tmp_path / "a"
    write_run(path, ArtifactStore(root))
    (artifact,) = root.iterdir()
    content = bytearray(artifact.read_bytes())
    content[3] ^= 0x01
    artifact.write_bytes(bytes(content))
    report = verify_trace(path, artifact_root=root)
    assert not report.ok
    assert any("does not match the trace" in p for p in report.problems)


def test_verify_catches_a_missing_artifact(tmp_path: Path) -> None:
    path, root = tmp_path / "t.jsonl", tmp_path / "a"
    write_run(path, ArtifactStore(root))
    for p in root.iterdir():
        p.unlink()
    assert any("missing" in p for p in verify_trace(path, artifact_root=root).problems)


def test_verify_without_artifact_root_warns_that_disk_was_not_checked(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_run(path, ArtifactStore(tmp_path / "a"))
    report = verify_trace(path)
    assert report.ok and any("not checked on disk" in w for w in report.warnings)


def test_verify_catches_reordered_seq(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_run(path, ArtifactStore(tmp_path / "a"))
    lines = lines_of(path)
    lines[3], lines[4] = lines[4], lines[3]
    path.write_bytes(b"".join(lines))
    report = verify_trace(path, artifact_root=tmp_path / "a")
    assert not report.ok and any("seq 4 where 3 was expected" in p for p in report.problems)


def test_verify_catches_a_gap_in_seq(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_run(path, ArtifactStore(tmp_path / "a"))
    lines = lines_of(path)
    del lines[5]
    path.write_bytes(b"".join(lines))
    assert any("seq 6 where 5 was expected" in p for p in verify_trace(path).problems)


def test_verify_catches_a_missing_terminal_event(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_run(path, ArtifactStore(tmp_path / "a"))
    path.write_bytes(b"".join(lines_of(path)[:-1]))
    report = verify_trace(path, artifact_root=tmp_path / "a")
    assert not report.ok and any("no terminal event" in p for p in report.problems)


def test_verify_catches_a_terminal_event_that_is_not_last(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_run(path, ArtifactStore(tmp_path / "a"))
    rows = [json.loads(x) for x in lines_of(path)]
    rows[-1], rows[-2] = rows[-2], rows[-1]
    for i, row in enumerate(rows):
        row["seq"] = i
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert any("is not the last event" in p for p in verify_trace(path).problems)


def test_verify_catches_two_run_ids_and_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_run(path, ArtifactStore(tmp_path / "a"))
    rows = [json.loads(x) for x in lines_of(path)]
    rows[2]["run_id"] = "run-other"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"schema":')
    problems = verify_trace(path).problems
    assert any("more than one run_id" in p for p in problems)
    assert any("torn final line" in p for p in problems)


def test_run_terminated_must_name_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TraceRecorder(path) as tr:
        tr.emit(EventType.RUN_STARTED)
        tr.emit(EventType.PROVENANCE, data=_provenance())
        tr.emit(EventType.RUN_TERMINATED, data={})
    assert any("does not name its limit" in p for p in verify_trace(path).problems)


def test_an_artifact_without_a_traced_execution_is_a_problem(tmp_path: Path) -> None:
    path, root = tmp_path / "t.jsonl", tmp_path / "a"
    ref = ArtifactStore(root).write("x.md", b"x")
    with TraceRecorder(path) as tr:
        tr.emit(EventType.RUN_STARTED)
        tr.emit(EventType.PROVENANCE, data=_provenance())
        tr.emit(EventType.ARTIFACT_WRITTEN, data=artifact_written_data(ref, call_id="call-9", tool="write_artifact"))
        tr.emit(EventType.RUN_COMPLETED, data={"final_text": "ok"})
    report = verify_trace(path, artifact_root=root)
    assert any("not produced by a traced tool execution" in p for p in report.problems)


def test_an_artifact_the_execution_does_not_list_is_a_problem(tmp_path: Path) -> None:
    path, root = tmp_path / "t.jsonl", tmp_path / "a"
    ref = ArtifactStore(root).write("x.md", b"x")
    with TraceRecorder(path) as tr:
        tr.emit(EventType.RUN_STARTED)
        tr.emit(EventType.PROVENANCE, data=_provenance())
        tr.emit(EventType.TOOL_EXECUTION_STARTED, data={"call_id": "c", "tool": "write_artifact"})
        tr.emit(EventType.ARTIFACT_WRITTEN, data=artifact_written_data(ref, call_id="c", tool="write_artifact"))
        tr.emit(EventType.TOOL_EXECUTION_FINISHED, data={"call_id": "c", "tool": "write_artifact", "ok": True,
                                                         "artifact_ids": []})
        tr.emit(EventType.RUN_COMPLETED, data={"final_text": "ok"})
    report = verify_trace(path, artifact_root=root)
    assert any("is not listed by tool_execution_finished" in p for p in report.problems)


def test_an_execution_that_never_finished_is_a_problem_for_a_completed_run(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TraceRecorder(path) as tr:
        tr.emit(EventType.RUN_STARTED)
        tr.emit(EventType.PROVENANCE, data=_provenance())
        tr.emit(EventType.TOOL_EXECUTION_STARTED, data={"call_id": "c", "tool": "calculator"})
        tr.emit(EventType.RUN_COMPLETED, data={"final_text": "ok"})
    assert any("has no tool_execution_finished" in p for p in verify_trace(path).problems)


def test_a_claimed_write_the_trace_does_not_record_is_a_narration_finding_not_a_fact_problem(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_run(path, None, write_artifact=False,
              final_text="I have written the results to best-config.md. DONE 21.57%")
    report = verify_trace(path)
    assert report.ok and report.problems == ()  # the record itself is consistent
    assert report.narration == ("the final answer claims an artifact was written, but the trace records none "
                                f"(answer from run_completed (seq {report.n_events - 1}))",)
    assert verify_trace(path, narration=False).narration == ()


def test_the_narration_check_is_backed_by_any_recorded_artifact_not_a_builtin_tool_name(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    store = ArtifactStore(tmp_path / "a")
    ref = store.write("notes.md", b"# notes")
    with TraceRecorder(path) as tr:
        tr.emit(EventType.RUN_STARTED)
        tr.emit(EventType.PROVENANCE, data=_provenance())
        tr.emit(EventType.TOOL_EXECUTION_STARTED, data={"call_id": "c", "tool": "crm.save_notes"})
        tr.emit(EventType.ARTIFACT_WRITTEN, data=artifact_written_data(ref, call_id="c", tool="crm.save_notes"))
        tr.emit(EventType.TOOL_EXECUTION_FINISHED, data={"call_id": "c", "tool": "crm.save_notes", "ok": True,
                                                         "artifact_ids": [ref.id]})
        tr.emit(EventType.RUN_COMPLETED, data={"final_text": "I saved the notes file."})
    report = verify_trace(path, artifact_root=tmp_path / "a")
    assert report.ok and report.narration == ()


def test_claim_check_falls_back_to_the_last_assistant_message(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TraceRecorder(path) as tr:
        tr.emit(EventType.RUN_STARTED)
        tr.emit(EventType.PROVENANCE, data=_provenance())
        tr.emit(EventType.MESSAGE_COMMITTED, data={"role": "assistant", "content": "Saved the report file."})
        tr.emit(EventType.RUN_TERMINATED, data={"limit": "max_model_steps"})
    assert any("claims an artifact" in p for p in verify_trace(path).narration)


def test_final_answer_claiming_a_write_that_happened_verifies(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_run(path, ArtifactStore(tmp_path / "a"), final_text="I saved the artifact best-config.md.")
    assert verify_trace(path, artifact_root=tmp_path / "a").ok


def test_final_answer_without_a_claim_and_without_a_write_verifies(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_run(path, None, write_artifact=False, final_text="DONE 21.57%")
    assert verify_trace(path).ok


def test_final_answer_naming_an_unrecorded_artifact_id_is_a_problem(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_run(path, ArtifactStore(tmp_path / "a"), final_text="See 0007-94474f5d7426-best-config.md.")
    assert any("never recorded" in p for p in verify_trace(path, artifact_root=tmp_path / "a").narration)


def test_a_hashed_final_answer_skips_the_claim_check_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_run(path, None, write_artifact=False, privacy=PrivacyMode.HASHED, final_text="I wrote the file a.md")
    report = verify_trace(path)
    assert report.ok and report.narration == ()
    assert any(w.startswith("narration check skipped: the final answer") and "hashed" in w for w in report.warnings)


@pytest.mark.parametrize("text", [
    "I wrote the file best-config.md.",
    "The report has been saved.",
    "Created artifact 0000-94474f5d7426-best-config.md",
    "Results written to summary.csv",
    "I've stored the results in a markdown file.",
    "The file results.json was created successfully.",
])
def test_claims_artifact_recognises_write_claims(text: str) -> None:
    assert claims_artifact(text)


@pytest.mark.parametrize("text", [
    "DONE 21.57%",
    "The baseline score in summary.txt is 0.612.",
    "I did not write any file.",
    "I could not save the report because the tool was denied.",
    "The tuned model is 21.57% better.",
])
def test_claims_artifact_ignores_answers_that_do_not_claim_a_write(text: str) -> None:
    assert not claims_artifact(text)


# -- the line encoder: the assembled fast line is byte-for-byte the full encoding ------------------------------------

_trace_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
              st.text(), st.sampled_from(["\ud800", "a\"b\\c\n", "é\u2028"])),
    lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(st.text(max_size=5), children,
                                                                                 max_size=3)),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(step=st.one_of(st.none(), st.text(max_size=8), st.integers(0, 9)),
       phase=st.one_of(st.none(), st.text(max_size=8)), data=st.dictionaries(st.text(max_size=5), _trace_json,
                                                                               max_size=4),
       run_id=st.one_of(st.text(max_size=12), st.just("run-\ud800")), seq=st.integers(0, 10**6),
       t_ms=st.floats(0, 1e9, allow_nan=False).map(lambda t: round(t, 3)))
def test_the_fast_line_is_exactly_the_full_encoding_or_not_taken(tmp_path: Path, step, phase, data, run_id, seq,
                                                                 t_ms) -> None:
    tr = TraceRecorder(tmp_path / f"t-{random.getrandbits(64)}.jsonl", run_id=run_id)
    try:
        event = {"schema": TRACE_SCHEMA, "run_id": run_id, "seq": seq, "event_type": "message_committed",
                 "t_ms": t_ms, "ts_epoch_ms": 1767225600123, "step": step, "phase": phase, "data": data}
        fast = tr._encode_fast("message_committed", seq, t_ms, 1767225600123, step, phase, data)
        assert fast is None or fast == tr._encode(event)
        if fast is None:
            # only what the fast path leaves alone: a non-string step, or text with lone surrogates
            assert not isinstance(step, (str, type(None))) or "\\ud" in tr._encode(event).decode("utf-8")
    finally:
        tr.close()


@pytest.mark.parametrize("make", [lambda: _nested(5000), lambda: _circular()], ids=["deep", "circular"])
def test_data_that_cannot_be_encoded_is_refused_and_the_recorder_goes_on(tmp_path: Path, make) -> None:
    path = tmp_path / "t.jsonl"
    with TraceRecorder(path) as tr:
        tr.emit(EventType.RUN_STARTED)
        with pytest.raises(TraceMisuseError):
            tr.emit(EventType.MESSAGE_COMMITTED, data={"content": make()})
        tr.emit(EventType.RUN_FAILED, data={"error": "x"})
    assert [e.seq for e in read_trace(path).events] == [0, 1]


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def _circular() -> dict:
    value: dict = {}
    value["self"] = value
    return value


def test_an_artifact_id_that_is_not_a_string_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TraceRecorder(path) as tr:
        tr.emit(EventType.RUN_STARTED)
        tr.emit(EventType.PROVENANCE, data=_provenance())
        tr.emit(EventType.ARTIFACT_WRITTEN, data={"call_id": "c", "tool": "write_artifact", "artifact_id": ["x"]})
        tr.emit(EventType.RUN_COMPLETED, data={"final_text": "saved 0000-4e07408562be-sum.md"})
    report = verify_trace(path)
    assert not report.ok
    assert any("artifact_written without an artifact_id" in p for p in report.problems)
    assert any("names artifact 0000-4e07408562be-sum.md, which the trace never recorded" in p
               for p in report.narration)
