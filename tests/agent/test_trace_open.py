"""How `TraceRecorder` opens its file: created exclusively (O_EXCL), so no code path overwrites an existing trace;
only ``truncate=True`` replaces one. `check_new_trace` applies the same rule up front."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from agent.trace import EventType, TraceMisuseError, TraceRecorder, TraceWriteError, check_new_trace

PREVIOUS = b"".join(json.dumps({"seq": i, "previous": True}).encode() + b"\n" for i in range(24))


def test_a_new_file_is_created_with_o_excl(tmp_path, monkeypatch):
    flags_seen = []
    real_open = os.open

    def spying_open(path, flags, *args):
        flags_seen.append(flags)
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", spying_open)
    with TraceRecorder(tmp_path / "t.jsonl") as tr:
        tr.emit(EventType.RUN_STARTED)
    assert flags_seen and flags_seen[0] & os.O_EXCL and flags_seen[0] & os.O_CREAT
    assert not any(f & os.O_TRUNC for f in flags_seen)


def test_an_existing_trace_is_left_byte_for_byte_unless_truncate(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(PREVIOUS)
    mtime = path.stat().st_mtime_ns
    with pytest.raises(TraceMisuseError, match="already holds"):
        TraceRecorder(path)
    assert path.read_bytes() == PREVIOUS and path.stat().st_mtime_ns == mtime
    with TraceRecorder(path, truncate=True, run_id="run-new") as tr:
        tr.emit(EventType.RUN_STARTED)
    assert [json.loads(line)["run_id"] for line in path.read_text().splitlines()] == ["run-new"]


def test_an_existing_empty_file_or_a_device_is_appended_to(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.touch()
    with TraceRecorder(empty) as tr:
        tr.emit(EventType.RUN_STARTED)
    assert len(empty.read_text().splitlines()) == 1
    with TraceRecorder(os.devnull) as tr:
        tr.emit(EventType.RUN_STARTED)


def test_a_file_that_appears_after_the_check_is_still_not_overwritten(tmp_path):
    path = tmp_path / "t.jsonl"
    check_new_trace(path)  # nothing there yet
    path.write_bytes(PREVIOUS)  # another process wins the race
    with pytest.raises(TraceMisuseError):
        TraceRecorder(path)
    assert path.read_bytes() == PREVIOUS


def test_recorders_racing_for_one_path_never_overwrite_a_line(tmp_path):
    path = tmp_path / "t.jsonl"
    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def open_one(i: int) -> None:
        barrier.wait()
        try:
            tr = TraceRecorder(path, run_id=f"run-{i}")
        except TraceMisuseError:
            outcomes.append("refused")
            return
        tr.emit(EventType.RUN_STARTED)
        tr.close()
        outcomes.append("opened")

    threads = [threading.Thread(target=open_one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # exactly one created the file; a loser that opened it while still empty appended (O_APPEND): no line lost
    lines = path.read_text().splitlines()
    assert outcomes.count("opened") >= 1 and len(lines) == outcomes.count("opened")
    assert len({json.loads(line)["run_id"] for line in lines}) == len(lines)


def test_check_new_trace(tmp_path):
    check_new_trace(tmp_path / "absent.jsonl")
    (tmp_path / "empty.jsonl").touch()
    check_new_trace(tmp_path / "empty.jsonl")
    check_new_trace(os.devnull)
    full = tmp_path / "full.jsonl"
    full.write_bytes(PREVIOUS)
    with pytest.raises(TraceMisuseError, match="already holds"):
        check_new_trace(full)
    check_new_trace(full, replace=True)
    with pytest.raises(TraceMisuseError, match="is a directory"):
        check_new_trace(tmp_path)
    assert full.read_bytes() == PREVIOUS


def test_a_directory_is_a_write_error_not_an_overwrite(tmp_path):
    with pytest.raises(TraceWriteError):
        TraceRecorder(tmp_path)
    assert Path(tmp_path).is_dir()
