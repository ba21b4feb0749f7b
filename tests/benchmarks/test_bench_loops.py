"""benchmarks/bench_loops.py: a traced run is classified as looped exactly when it ended at a limit or ran the same
call twice, repeat requests are counted however the session answered them, and the BFCL sample is numeric-ordered."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_loops import bfcl_category, bfcl_sample, call_as_answer, classify, summarize  # noqa: E402


def _ev(event_type: str, **data: Any) -> dict[str, Any]:
    return {"event_type": event_type, "data": data}


def _call(call_id: str, sha: str, *, replayed: bool = False, tool: str = "calculator") -> list[dict[str, Any]]:
    return [_ev("tool_call_validated", call_id=call_id, tool=tool, arguments_sha256=sha),
            _ev("tool_execution_finished", call_id=call_id, tool=tool, replayed=replayed)]


def test_a_completed_run_without_repeats_did_not_loop() -> None:
    events = [*_call("call-1", "a"), _ev("run_completed", outcome="completed", steps=2, tool_calls=1,
                                          final_text="73.5")]
    got = classify(events)
    assert (got["looped"], got["repeat_requests"], got["executions"], got["final_text"]) == (False, 0, 1, "73.5")


def test_a_limit_ending_is_a_loop() -> None:
    events = [*_call("call-1", "a"), *_call("call-2", "b"),
              _ev("run_terminated", outcome="limit", limit="tool_calls", steps=8, tool_calls=16)]
    got = classify(events)
    assert got["looped"] and got["limit"] == "tool_calls" and not got["executed_twice"]


def test_the_same_call_run_twice_is_a_loop_but_a_replay_is_not() -> None:
    ran_twice = [*_call("call-1", "a"), *_call("call-2", "a"), _ev("run_completed", outcome="completed")]
    got = classify(ran_twice)
    assert got["executed_twice"] and got["looped"] and got["repeat_requests"] == 1 and got["executions"] == 2
    replayed = [*_call("call-1", "a"), *_call("call-2", "a", replayed=True), _ev("run_completed", outcome="completed")]
    got = classify(replayed)
    assert not got["looped"] and got["replays"] == 1 and got["repeat_requests"] == 1 and got["executions"] == 1


def test_refused_and_dropped_repeats_are_repeat_requests_not_loops() -> None:
    events = [_ev("assistant_action_parsed", action="tool_calls", duplicates_dropped=3), *_call("call-1", "a"),
              _ev("repeats_refused", calls=[{"call_id": "call-2", "tool": "calculator", "answered_by": "call-1"}]),
              _ev("run_completed", outcome="completed", final_text="73.5")]
    got = classify(events)
    assert (got["looped"], got["refused"], got["duplicates_dropped"], got["repeat_requests"]) == (False, 1, 3, 4)


def test_summary_leaves_skipped_cases_out_of_the_rate() -> None:
    records = [{"outcome": "completed", "looped": False, "tool_calls": 1},
               {"outcome": "limit", "limit": "tool_calls", "looped": True, "tool_calls": 16},
               {"outcome": "skipped", "looped": None}]
    s = summarize(records)
    assert (s["runs"], s["skipped"], s["looped"], s["loop_rate"], s["limits"]) == (2, 1, 1, 0.5, {"tool_calls": 1})
    assert s["tool_calls"] == 8.5


def test_bfcl_sample_takes_the_first_ids_per_category_in_numeric_order() -> None:
    ids = ["simple_python_10", "simple_python_2", "simple_python_1", "parallel_multiple_3", "parallel_12",
           "parallel_4", "multiple_0", "irrelevance_7"]
    assert [bfcl_category(i) for i in ids[:4]] == ["simple", "simple", "simple", "parallel_multiple"]
    sample = [c["id"] for c in bfcl_sample([{"id": i} for i in ids], 2)]
    assert sample == ["simple_python_1", "simple_python_2", "multiple_0", "parallel_4", "parallel_12",
                      "parallel_multiple_3", "irrelevance_7"]


def test_an_answer_that_writes_the_call_again_is_told_apart() -> None:
    assert call_as_answer('```{"name": "search_flights", "arguments":  {"from": "MAD"}}\n```')
    assert not call_as_answer("The flight from Madrid to Berlin is EM 123.")
    assert not call_as_answer(None)
