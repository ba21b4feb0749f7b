"""AgentLimits: documented defaults, named checks at named boundaries, breaches as values."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.cancel import CancelToken
from agent.limits import AgentLimits, LimitBreach, LimitKind, RunUsage


def test_defaults_are_the_documented_ones() -> None:
    limits = AgentLimits()
    assert (limits.max_model_steps, limits.max_tool_calls, limits.max_wall_s, limits.tool_timeout_s,
            limits.max_output_tokens, limits.max_result_bytes) == (8, 16, 600, 60, 256, 32768)


def test_limits_are_frozen_and_keyword_only() -> None:
    limits = AgentLimits()
    with pytest.raises(dataclasses.FrozenInstanceError):
        limits.max_model_steps = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        AgentLimits(3)  # type: ignore[misc]


@pytest.mark.parametrize("field", ["max_model_steps", "max_tool_calls", "max_wall_s", "tool_timeout_s",
                                   "max_output_tokens", "max_result_bytes"])
@pytest.mark.parametrize("bad", [0, -1, True, "8"])
def test_non_positive_or_non_numeric_limits_are_refused(field: str, bad: object) -> None:
    with pytest.raises(ValueError, match=field):
        AgentLimits(**{field: bad})


@pytest.mark.parametrize("field", ["max_output_tokens", "max_result_bytes"])
def test_budgets_the_engine_needs_cannot_be_removed(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        AgentLimits(**{field: None})


def test_none_removes_a_bound() -> None:
    limits = AgentLimits(max_model_steps=None, max_tool_calls=None, max_wall_s=None)
    huge = RunUsage(steps=10**6, tool_calls=10**6, elapsed_s=1e9)
    assert limits.check_before_model_turn(huge) is None
    assert limits.check_before_tool_call(huge) is None


@given(steps=st.integers(0, 50), max_steps=st.integers(1, 50))
def test_model_turn_check_breaches_exactly_when_steps_are_used_up(steps: int, max_steps: int) -> None:
    breach = AgentLimits(max_model_steps=max_steps).check_before_model_turn(RunUsage(steps=steps))
    if steps >= max_steps:
        assert breach == LimitBreach(kind=LimitKind.MODEL_STEPS, limit=max_steps, observed=steps)
    else:
        assert breach is None


@given(calls=st.integers(0, 50), max_calls=st.integers(1, 50))
def test_tool_call_check_breaches_exactly_when_calls_are_used_up(calls: int, max_calls: int) -> None:
    breach = AgentLimits(max_tool_calls=max_calls).check_before_tool_call(RunUsage(tool_calls=calls))
    assert (breach is not None) == (calls >= max_calls)
    if breach is not None:
        assert breach.kind is LimitKind.TOOL_CALLS


@given(elapsed=st.floats(0, 1000, allow_nan=False), wall=st.floats(0.001, 1000, allow_nan=False))
def test_wall_time_is_checked_at_both_boundaries(elapsed: float, wall: float) -> None:
    limits = AgentLimits(max_wall_s=wall)
    usage = RunUsage(elapsed_s=elapsed)
    for breach in (limits.check_before_model_turn(usage), limits.check_before_tool_call(usage)):
        assert (breach is not None) == (elapsed >= wall)
        if breach is not None:
            assert breach.kind is LimitKind.WALL_TIME and breach.observed == elapsed


def test_steps_are_reported_before_wall_time_when_both_are_exhausted() -> None:
    breach = AgentLimits(max_model_steps=1, max_wall_s=1).check_before_model_turn(RunUsage(steps=1, elapsed_s=5))
    assert breach is not None and breach.kind is LimitKind.MODEL_STEPS


@pytest.mark.parametrize(("n", "reason", "breached"), [
    (10, "stop_token", False), (10, "eos", False), (10, "grammar_complete", False), (10, "cancelled", False),
    (256, "length", True), (3, "length", True), (257, "stop_token", True)])
def test_turn_output_check_breaches_when_the_turn_was_cut(n: int, reason: str, breached: bool) -> None:
    breach = AgentLimits().check_turn_output(n, reason)
    assert (breach is not None) == breached
    if breach:
        assert breach.kind is LimitKind.OUTPUT_TOKENS and breach.limit == 256


def test_tool_timeout_is_the_smallest_of_run_tool_and_wall_left() -> None:
    limits = AgentLimits(tool_timeout_s=60, max_wall_s=100)
    assert limits.tool_timeout(None, RunUsage(elapsed_s=0)) == 60
    assert limits.tool_timeout(5, RunUsage(elapsed_s=0)) == 5
    assert limits.tool_timeout(120, RunUsage(elapsed_s=0)) == 60
    assert limits.tool_timeout(None, RunUsage(elapsed_s=90)) == 10
    assert AgentLimits(tool_timeout_s=None, max_wall_s=None).tool_timeout(None, RunUsage()) is None


def test_breach_describes_itself() -> None:
    text = LimitBreach(kind=LimitKind.TOOL_CALLS, limit=16, observed=16).describe()
    assert "tool_calls" in text and "16" in text


def test_cancel_token_keeps_the_first_reason_and_is_visible_across_threads() -> None:
    import threading

    token = CancelToken()
    assert not token.is_set() and token.reason == ""
    t = threading.Thread(target=token.cancel, args=("first",))
    t.start()
    t.join()
    token.cancel("second")
    assert token.is_set() and token.reason == "first"
    assert token.wait(0) is True


def test_result_budget_must_leave_room_for_the_truncation_marker() -> None:
    from agent.limits import MIN_RESULT_BYTES
    from agent.results import result_content

    with pytest.raises(ValueError, match="max_result_bytes"):
        AgentLimits(max_result_bytes=MIN_RESULT_BYTES - 1)
    worst = {"ok": False, "kind": "result_not_serializable", "detail": "x" * 10_000, "errors": []}
    text, truncated = result_content(worst, max_bytes=AgentLimits(max_result_bytes=MIN_RESULT_BYTES).max_result_bytes)
    assert truncated and len(text.encode()) <= MIN_RESULT_BYTES
