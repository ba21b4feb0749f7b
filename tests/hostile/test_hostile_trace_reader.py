"""Hostile traces: truncated and corrupted real traces read as TraceRead with problems and verify as not ok.

Seeds are the real traces in corpus/traces (make_corpus.py). Mutations: truncation at any byte, byte flips,
deleted/duplicated/swapped lines, garbage lines, and structural edits (a field of one event replaced by any JSON
value). `read_trace` never raises except `UnsupportedTraceSchemaError` (documented: a foreign schema major);
`verify_trace` never raises; any damage that changes the record is reported.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.trace import TraceRead, UnsupportedTraceSchemaError, VerifyReport, read_trace, verify_trace
from .hostile_kit import CORPUS, budget

TRACES = {p.stem: p.read_bytes() for p in sorted((CORPUS / "traces").glob("*.jsonl"))}
JSON_VALUES = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-10**400, 10**400),
                                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6)),
                           lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=4), c,
                                                                                        max_size=3)), max_leaves=6)
def check(data: bytes, *, damaged: bool) -> None:
    try:
        read = read_trace(data)
    except UnsupportedTraceSchemaError:
        return  # documented: a line claims a schema major this reader does not understand
    assert isinstance(read, TraceRead)
    report = verify_trace(data)
    assert isinstance(report, VerifyReport) and report.ok == (not report.problems)
    if damaged:
        assert not report.ok or read.problems == () and read.torn_tail is None


def test_the_corpus_traces_verify() -> None:
    assert TRACES, "run tests/hostile/make_corpus.py"
    for name, data in TRACES.items():
        assert verify_trace(data).ok, name


@budget(ci=300)
@given(name=st.sampled_from(sorted(TRACES)), cut=st.integers(0, 10**6))
def test_a_trace_truncated_anywhere_reads_as_a_prefix_with_problems(name: str, cut: int) -> None:
    data = TRACES[name]
    cut %= len(data) + 1
    read = read_trace(data[:cut])
    whole = data[:cut].count(b"\n")
    assert len(read.events) == whole  # every complete line survives, nothing after the cut is invented
    assert (read.torn_tail is None) == (cut == 0 or data[cut - 1:cut] == b"\n")
    if cut < len(data):
        assert not verify_trace(data[:cut]).ok


@st.composite
def corrupted(draw: st.DrawFn) -> bytes:
    data = TRACES[draw(st.sampled_from(sorted(TRACES)))]
    lines = data.split(b"\n")[:-1]
    rng = random.Random(draw(st.integers(0, 2**32)))
    for _ in range(draw(st.integers(1, 5))):
        op = draw(st.sampled_from(["flip", "delete", "dup", "swap", "garbage", "edit", "cut"]))
        if not lines:
            lines.append(b"")
        i = rng.randrange(len(lines))
        if op == "flip" and lines[i]:
            line = bytearray(lines[i])
            line[rng.randrange(len(line))] ^= 1 << rng.randrange(8)
            lines[i] = bytes(line)
        elif op == "delete" and len(lines) > 1:
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "flip":
            continue
        elif op == "garbage":
            lines.insert(i, draw(st.binary(max_size=40)).replace(b"\n", b""))
        elif op == "cut":
            lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
        else:
            try:
                event = json.loads(lines[i])
            except ValueError:
                continue
            target = event if rng.random() < 0.4 or not isinstance(event.get("data"), dict) else event["data"]
            keys = sorted(target) or ["x"]
            target[rng.choice(keys + ["call_id", "artifact_id", "artifact_ids", "seq", "t_ms"])] = draw(JSON_VALUES)
            lines[i] = json.dumps(event).encode()
    return b"\n".join(lines) + (b"\n" if draw(st.booleans()) else b"")


@budget(ci=300)
@given(data=corrupted())
def test_a_corrupted_trace_reads_with_problems_and_never_crashes(data: bytes) -> None:
    check(data, damaged=True)


@budget(ci=100)
@given(data=st.binary(max_size=2000))
def test_random_bytes_read_as_a_trace_with_problems(data: bytes) -> None:
    check(data, damaged=True)


def test_an_oversize_line_is_reported_and_skipped(tmp_path: Path) -> None:
    from agent.trace import MAX_LINE_BYTES

    data = TRACES["completed"]
    first, rest = data.split(b"\n", 1)
    huge = b"x" * (MAX_LINE_BYTES + 10) + b"\n"
    read = read_trace(first + b"\n" + huge + rest)
    assert any("MAX_LINE_BYTES" in p for p in read.problems)
    assert len(read.events) == data.count(b"\n")


def _edited(name: str, edit: Any) -> bytes:
    lines = [json.loads(line) for line in TRACES[name].split(b"\n") if line]
    for event in lines:
        if edit(event):
            break
    return b"".join(json.dumps(e).encode() + b"\n" for e in lines)


def _set(event_type: str, key: str, value: Any, *, in_data: bool = True) -> Any:
    def edit(event: dict[str, Any]) -> bool:
        if event["event_type"] != event_type:
            return False
        (event["data"] if in_data else event)[key] = value
        return True
    return edit


def test_a_huge_integer_timestamp_is_a_problem_not_a_crash() -> None:
    read = read_trace(_edited("completed", _set("run_started", "t_ms", 10**400, in_data=False)))
    assert read.problems


def test_a_non_string_call_id_is_a_problem_not_a_crash() -> None:
    report = verify_trace(_edited("completed", _set("tool_execution_finished", "call_id", ["call-1"])))
    assert not report.ok


def test_non_string_artifact_ids_are_a_problem_not_a_crash() -> None:
    report = verify_trace(_edited("completed", _set("tool_execution_finished", "artifact_ids", [{"id": 1}])))
    assert not report.ok


def test_a_non_string_call_id_on_an_artifact_is_a_problem_not_a_crash() -> None:
    report = verify_trace(_edited("completed", _set("artifact_written", "call_id", {"c": 1})))
    assert not report.ok


@pytest.mark.slow
@budget(ci=300, fuzz=5000)
@given(data=corrupted())
def test_a_corrupted_trace_reads_with_problems_and_never_crashes_fuzz(data: bytes) -> None:
    check(data, damaged=True)


@pytest.mark.slow
@budget(ci=300, fuzz=3000)
@given(name=st.sampled_from(sorted(TRACES)), cut=st.integers(0, 10**6))
def test_a_trace_truncated_anywhere_reads_as_a_prefix_with_problems_fuzz(name: str, cut: int) -> None:
    test_a_trace_truncated_anywhere_reads_as_a_prefix_with_problems.hypothesis.inner_test(name=name, cut=cut)
