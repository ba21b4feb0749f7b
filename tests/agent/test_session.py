"""The session state machine, driven by a scripted engine that speaks real Qwen2.5 syntax.

Everything but the model is real: the Qwen codec renders and parses, tools run through `execute_tool`, the trace
is written to disk and verified, artifacts are published to a store. Model text is derived from the codec's own
rendering of an assistant action (see `model_text`), so no tool syntax is spelled out here.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agent.artifact import ArtifactStore
from agent.cancel import CancelToken
from agent.engine import ModelTurn
from agent.ledger import EntryKind
from agent.limits import AgentLimits, LimitKind
from agent.protocol import FinalText, QwenCodec, ToolCall, ToolCalls
from agent.session import LoopOutcome, RunResult, Session, SessionError
from agent import testkit
from agent.testkit import ManualClock, ScriptedEngine, ScriptedTurn
from agent.tool import ApprovalDecision, Tool, ToolContext, ToolKind, ToolRegistry
from agent.trace import EventType, TraceRecorder, TraceWriteError, read_trace, verify_trace

CODEC = QwenCodec()
SYSTEM = "You are a careful assistant."


def model_text(action: FinalText | ToolCalls) -> str:
    return testkit.model_text(CODEC, action)


def call(name: str, /, **arguments: Any) -> str:
    return testkit.call_text(CODEC, name, **arguments)


def calls(*pairs: tuple[str, dict[str, Any]]) -> str:
    return model_text(ToolCalls(calls=tuple(ToolCall(name=n, arguments=a, raw="") for n, a in pairs)))


def final(text: str) -> str:
    return testkit.final_text(CODEC, text)


def test_model_text_round_trips_through_the_codec_parser() -> None:
    action = CODEC.parse(call("add", a=1, b=2))
    assert isinstance(action, ToolCalls) and action.calls[0].name == "add"
    assert action.calls[0].arguments == {"a": 1, "b": 2}
    assert CODEC.parse(final("hi")) == FinalText(text="hi")


# -- the kit: real tools, trace and artifact store under tmp_path -----------------------------------------------


@dataclass
class Kit:
    tmp: Path
    executed: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    on_execute: Callable[[str], None] | None = None
    release: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.trace_path = self.tmp / "trace.jsonl"
        self.artifact_root = self.tmp / "artifacts"
        self.store = ArtifactStore(self.artifact_root)

    def _ran(self, tool: str, /, **args: Any) -> None:
        self.executed.append((tool, args))
        if self.on_execute is not None:
            self.on_execute(tool)

    def tools(self) -> list[Tool]:
        def add(a: float, b: float) -> float:
            """Add two numbers."""
            self._ran("add", a=a, b=b)
            return a + b

        def record(note: str, idempotency_key: str) -> str:
            """Record a note (an action, keyed)."""
            self._ran("record", note=note, idempotency_key=idempotency_key)
            return f"recorded {note}"

        def save(name: str, content: str, ctx: ToolContext) -> str:
            """Publish an artifact."""
            self._ran("write_artifact", name=name)
            assert ctx.artifacts is not None
            return ctx.artifacts.write(name, content.encode()).id

        def send_email(to: str) -> str:
            """Send an email (an external action)."""
            self._ran("send_email", to=to)
            return "sent"

        def long_text(n: int) -> str:
            """Return n characters."""
            self._ran("long_text", n=n)
            return "é" * n

        def block() -> str:
            """Block until released."""
            self._ran("block")
            self.release.wait(5)
            return "late"

        return [Tool.from_function(add), Tool.from_function(record, kind=ToolKind.ACTION),
                Tool.from_function(save, name="write_artifact", kind=ToolKind.ACTION),
                Tool.from_function(send_email, kind=ToolKind.ACTION, external=True),
                Tool.from_function(long_text), Tool.from_function(block, timeout_s=0.05)]

    def session(self, turns: list[Any], *, trace: TraceRecorder | None = None, traced: bool = True, **kw: Any
                ) -> tuple[Session, ScriptedEngine]:
        engine = ScriptedEngine(turns, CODEC)
        kw.setdefault("system_prompt", SYSTEM)
        recorder = trace if trace is not None else TraceRecorder(self.trace_path) if traced else None
        return Session(engine, ToolRegistry(self.tools()), trace=recorder, artifacts=self.store, **kw), engine

    def events(self) -> list[Any]:
        read = read_trace(self.trace_path)
        assert read.torn_tail is None and not read.problems
        return list(read.events)

    def types(self) -> list[str]:
        return [str(e.event_type) for e in self.events()]

    def of(self, event_type: EventType) -> list[dict[str, Any]]:
        return [e.data for e in self.events() if e.event_type == event_type]

    def verify(self) -> None:
        report = verify_trace(self.trace_path, artifact_root=self.artifact_root)
        assert report.ok and not report.narration, (report.problems, report.narration)


@pytest.fixture
def kit(tmp_path: Path) -> Kit:
    k = Kit(tmp_path)
    yield k
    k.release.set()


class TrippingTrace(TraceRecorder):
    """A real recorder that trips a cancel token right after writing a given event: cancels land exactly at the
    phase boundary that follows that event."""

    def __init__(self, path: Path, *, trip_on: EventType, token: CancelToken, nth: int = 1) -> None:
        super().__init__(path)
        self.trip_on, self.token, self.remaining = trip_on, token, nth

    def emit(self, event_type: Any, **kw: Any) -> Any:
        event = super().emit(event_type, **kw)
        if EventType(event_type) is self.trip_on:
            self.remaining -= 1
            if self.remaining == 0:
                self.token.cancel(f"tripped after {event_type}")
        return event


def kinds(result: RunResult) -> list[str]:
    return [e.kind.value for e in result.ledger]


def reinjected(result: RunResult, index: int = -1) -> dict[str, Any]:
    """The JSON content of a committed tool message."""
    tool_messages = [m for m in result.messages if m["role"] == "tool"]
    return json.loads(tool_messages[index]["content"])


def assert_kv_at_committed_boundary(engine: ScriptedEngine) -> None:
    assert not engine.has_pending_turn
    assert engine.kv_tokens == engine.committed_tokens


# -- transitions ------------------------------------------------------------------------------------------------


def test_final_text_commits_system_user_final_and_completes(kit: Kit) -> None:
    session, engine = kit.session([final("Hello there.")])
    result = session.run("hi")
    assert result.outcome is LoopOutcome.COMPLETED and result.limit is None
    assert result.final_text == "Hello there."
    assert kinds(result) == ["system", "user", "assistant_final"]
    assert [m["role"] for m in result.messages] == ["system", "user", "assistant"]
    assert (result.steps, result.tool_calls) == (1, 0)
    assert kit.types() == ["run_started", "provenance", "message_committed", "message_committed",
                           "model_call_started", "model_call_finished", "assistant_action_parsed",
                           "message_committed", "run_completed"]
    assert_kv_at_committed_boundary(engine)
    kit.verify()


def test_tool_call_is_validated_executed_reinjected_and_the_model_continues(kit: Kit) -> None:
    session, engine = kit.session([call("add", a=2, b=3), final("The sum is 5.")])
    result = session.run("add 2 and 3")
    assert result.outcome is LoopOutcome.COMPLETED and result.final_text == "The sum is 5."
    assert kit.executed == [("add", {"a": 2, "b": 3})]
    assert kinds(result) == ["system", "user", "assistant_tool_call", "tool_result", "assistant_final"]
    assert reinjected(result) == {"ok": True, "result": 5}
    # the second turn was generated against the committed tool result
    assert engine.calls[1].messages[-1]["role"] == "tool"
    assert engine.calls[1].prompt.startswith(engine.calls[0].prompt[: engine.calls[0].prompt.rindex(SYSTEM)])
    assert kit.types() == ["run_started", "provenance", "message_committed", "message_committed",
                           "model_call_started", "model_call_finished", "assistant_action_parsed",
                           "message_committed", "tool_call_validated", "tool_execution_started",
                           "tool_execution_finished", "tool_result_committed",
                           "model_call_started", "model_call_finished", "assistant_action_parsed",
                           "message_committed", "run_completed"]
    (finished,) = kit.of(EventType.TOOL_EXECUTION_FINISHED)
    assert finished["ok"] is True and finished["call_id"] == "call-1" and finished["artifact_ids"] == []
    (committed,) = kit.of(EventType.TOOL_RESULT_COMMITTED)
    assert committed["call_id"] == "call-1" and committed["ok"] is True and committed["truncated"] is False
    assert result.ledger[3].call_ids == ("call-1",) and result.ledger[2].call_ids == ("call-1",)
    kit.verify()


def test_every_commit_moves_engine_ledger_and_trace_together(kit: Kit) -> None:
    session, engine = kit.session([call("add", a=1, b=1), final("2")])
    result = session.run("go")
    traced = [e for e in kit.events() if e.event_type in (EventType.MESSAGE_COMMITTED,
                                                          EventType.TOOL_RESULT_COMMITTED)]
    assert len(engine.commits) == len(result.ledger) == len(traced) == 5
    assert [t.data["ledger_index"] for t in traced] == [0, 1, 2, 3, 4]
    assert [t.data["kv_tokens"] for t in traced] == [e.kv_tokens for e in result.ledger]


def test_several_calls_in_one_turn_each_run_and_count_and_their_results_come_back_in_call_order(kit: Kit) -> None:
    """``add`` is a data tool: the two calls run concurrently, so which starts first is not fixed; the ledger and the
    reinjected results keep the order the model wrote them in."""
    session, _ = kit.session([calls(("add", {"a": 1, "b": 2}), ("add", {"a": 10, "b": 20})), final("3 and 30")])
    result = session.run("two sums")
    assert result.outcome is LoopOutcome.COMPLETED
    assert sorted(kit.executed, key=lambda c: c[1]["a"]) == [("add", {"a": 1, "b": 2}), ("add", {"a": 10, "b": 20})]
    assert result.tool_calls == 2
    assert kinds(result) == ["system", "user", "assistant_tool_call", "tool_result", "tool_result",
                             "assistant_final"]
    assert [reinjected(result, i)["result"] for i in (0, 1)] == [3, 30]
    assert result.ledger[2].call_ids == ("call-1", "call-2")
    kit.verify()


def test_tool_choice_applies_to_the_first_call_turn_then_relaxes_to_auto(kit: Kit) -> None:
    session, engine = kit.session([call("add", a=1, b=1), final("2")], tool_choice="required")
    assert session.run("go").outcome is LoopOutcome.COMPLETED
    assert [c.tool_choice for c in engine.calls] == ["required", "auto"]
    assert all(c.max_tokens == AgentLimits().max_output_tokens for c in engine.calls)


def test_a_tool_choice_plan_fixes_each_turns_choice_and_never_relaxes(kit: Kit) -> None:
    session, engine = kit.session([call("add", a=1, b=1), call("add", a=2, b=2), final("4")],
                                  tool_choice=("add", "add", "none"), final_pattern="[0-9]+")
    assert session.run("go").outcome is LoopOutcome.COMPLETED
    assert [c.tool_choice for c in engine.calls] == ["add", "add", "none"]
    assert [c.final_pattern for c in engine.calls] == ["[0-9]+"] * 3


def test_a_call_in_a_planned_none_turn_is_rejected_and_never_executed(kit: Kit) -> None:
    session, _ = kit.session([call("add", a=1, b=1), final("done")], tool_choice=("none",))
    result = session.run("go")
    assert result.outcome is LoopOutcome.COMPLETED
    assert kit.executed == [] and reinjected(result)["kind"] == "unknown_tool"


def test_a_plan_naming_an_unregistered_tool_or_empty_is_refused(kit: Kit) -> None:
    with pytest.raises(SessionError):
        kit.session([final("x")], tool_choice=("add", "nope"))
    with pytest.raises(SessionError):
        kit.session([final("x")], tool_choice=())


def test_run_without_a_system_prompt_starts_with_the_user(kit: Kit) -> None:
    session, _ = kit.session([final("ok")], system_prompt=None)
    assert kinds(session.run("hi")) == ["user", "assistant_final"]


# -- rejections: malformed, unknown, invalid, denied --------------------------------------------------------------


def test_malformed_call_is_rejected_reinjected_and_repaired(kit: Kit) -> None:
    broken = call("add", a=1, b=2).replace('"b": 2}', '"b": 2,}')
    session, engine = kit.session([broken, call("add", a=1, b=2), final("3")])
    result = session.run("add")
    assert result.outcome is LoopOutcome.COMPLETED and result.final_text == "3"
    assert kit.executed == [("add", {"a": 1, "b": 2})]
    assert kinds(result) == ["system", "user", "assistant_malformed_call", "tool_rejection", "assistant_tool_call",
                             "tool_result", "assistant_final"]
    rejection = reinjected(result, 0)
    assert rejection["ok"] is False and rejection["kind"] == "malformed_call" and "invalid_json" in rejection["detail"]
    (rejected,) = kit.of(EventType.TOOL_CALL_REJECTED)
    assert rejected["kind"] == "malformed_call" and rejected["tool"] is None
    parsed = kit.of(EventType.ASSISTANT_ACTION_PARSED)
    assert [p["action"] for p in parsed] == ["malformed_tool_call", "tool_calls", "final_text"]
    assert parsed[0]["reason"] == "invalid_json"
    # the repair turn saw the rejection
    assert json.loads(engine.calls[1].messages[-1]["content"])["kind"] == "malformed_call"
    kit.verify()


def test_unclosed_call_is_malformed_never_final_text(kit: Kit) -> None:
    unclosed = call("add", a=1, b=2)
    unclosed = unclosed[: unclosed.rindex("}") + 1]
    session, _ = kit.session([unclosed, final("gave up")])
    result = session.run("add")
    assert kinds(result)[2:4] == ["assistant_malformed_call", "tool_rejection"]
    assert kit.executed == []


def test_invalid_arguments_are_rejected_with_every_error_then_repaired(kit: Kit) -> None:
    session, _ = kit.session([call("add", a="one", precision=3), call("add", a=1, b=2), final("3")])
    result = session.run("add")
    assert result.outcome is LoopOutcome.COMPLETED
    assert kit.executed == [("add", {"a": 1, "b": 2})]
    rejection = reinjected(result, 0)
    assert rejection["kind"] == "invalid_arguments"
    assert {e["path"] for e in rejection["errors"]} >= {"a", "b", "precision"}
    (rejected,) = kit.of(EventType.TOOL_CALL_REJECTED)
    assert rejected["kind"] == "invalid_arguments" and len(rejected["errors"]) >= 3
    assert result.tool_calls == 2  # rejected calls count against max_tool_calls
    kit.verify()


def test_unknown_tool_fails_closed_and_is_never_executed(kit: Kit) -> None:
    session, _ = kit.session([call("rm_rf", path="/"), final("sorry")])
    result = session.run("delete everything")
    assert result.outcome is LoopOutcome.COMPLETED
    assert kit.executed == []
    assert reinjected(result)["kind"] == "unknown_tool"
    assert EventType.TOOL_EXECUTION_STARTED not in kit.types()
    assert kinds(result)[2:4] == ["assistant_tool_call", "tool_rejection"]
    kit.verify()


def test_tool_choice_none_rejects_any_call_even_of_a_known_tool(kit: Kit) -> None:
    session, _ = kit.session([call("add", a=1, b=2), final("no tools")], tool_choice="none")
    result = session.run("add")
    assert kit.executed == [] and reinjected(result)["kind"] == "unknown_tool"


def test_external_action_is_denied_by_the_default_policy_and_never_executed(kit: Kit) -> None:
    session, _ = kit.session([call("send_email", to="a@b.c"), final("could not send")])
    result = session.run("email")
    assert result.outcome is LoopOutcome.COMPLETED and kit.executed == []
    assert reinjected(result)["kind"] == "denied_by_policy"
    (rejected,) = kit.of(EventType.TOOL_CALL_REJECTED)
    assert rejected["kind"] == "denied_by_policy"
    assert [e.phase for e in kit.events() if e.event_type == EventType.TOOL_CALL_REJECTED] == ["approve"]
    kit.verify()


@pytest.mark.parametrize("policy", [
    lambda tool, args: ApprovalDecision(allowed=False, reason="nope"),
    lambda tool, args: 1 / 0,
    lambda tool, args: True,
], ids=["denies", "raises", "answers-nonsense"])
def test_a_denying_or_broken_policy_never_lets_the_call_run(kit: Kit, policy: Any) -> None:
    session, _ = kit.session([call("add", a=1, b=2), final("denied")], approval=policy)
    result = session.run("add")
    assert kit.executed == [] and reinjected(result)["kind"] == "denied_by_policy"


def test_policy_sees_validated_arguments(kit: Kit) -> None:
    seen: list[Any] = []

    def policy(tool: Tool, args: Any) -> ApprovalDecision:
        seen.append((tool.name, dict(args.values)))
        return ApprovalDecision(allowed=True, reason="ok")

    session, _ = kit.session([call("add", a=1, b=2), final("3")], approval=policy)
    session.run("add")
    assert seen == [("add", {"a": 1, "b": 2})]


def test_idempotent_retry_runs_the_action_once_and_replays_the_first_outcome(kit: Kit) -> None:
    retry = ("record", {"note": "hello", "idempotency_key": "k1"})
    session, _ = kit.session([calls(retry), calls(retry, ("add", {"a": 1, "b": 2})), final("recorded")])
    result = session.run("record it")
    assert result.outcome is LoopOutcome.COMPLETED
    assert [name for name, _ in kit.executed] == ["record", "add"]
    assert reinjected(result, 0) == {"ok": True, "result": "recorded hello"}
    repeat = reinjected(result, 1)  # within one run the repeat says so: the model already has this result
    assert repeat.pop("note").startswith("identical to call-1") and repeat == reinjected(result, 0)
    assert [f["replayed"] for f in kit.of(EventType.TOOL_EXECUTION_FINISHED)] == [False, True, False]
    kit.verify()


def test_idempotency_store_outlives_one_run_of_the_session(kit: Kit) -> None:
    retry = call("record", note="hello", idempotency_key="k1")
    session, _ = kit.session([retry, final("done"), retry, final("done again")], traced=False)
    session.run("first")
    session.run("second")
    assert [name for name, _ in kit.executed] == ["record"]


def test_artifacts_are_traced_once_even_when_a_write_is_replayed(kit: Kit) -> None:
    save = call("write_artifact", name="report.md", content="# hi")
    session, _ = kit.session([save, save, final("I wrote report.md")])
    result = session.run("write it")
    assert result.outcome is LoopOutcome.COMPLETED
    assert [name for name, _ in kit.executed] == ["write_artifact"]
    (written,) = kit.of(EventType.ARTIFACT_WRITTEN)
    assert written["call_id"] == "call-1" and (kit.artifact_root / written["artifact_id"]).read_bytes() == b"# hi"
    kit.verify()  # the final answer claims a write, and the trace proves it


def test_a_claimed_write_without_execution_is_flagged_by_the_narration_check(kit: Kit) -> None:
    session, _ = kit.session([final("I wrote the file report.md for you.")])
    assert session.run("write it").outcome is LoopOutcome.COMPLETED
    report = verify_trace(kit.trace_path)
    assert report.ok and len(report.narration) == 1 and "claims an artifact" in report.narration[0]


def test_tool_failure_and_timeout_are_results_not_crashes(kit: Kit) -> None:
    session, _ = kit.session([call("block"), final("it timed out")])
    result = session.run("block")
    assert result.outcome is LoopOutcome.COMPLETED
    assert reinjected(result)["kind"] == "timeout"
    assert result.ledger[3].kind is EntryKind.TOOL_RESULT and result.ledger[3].ok is False


# -- limits -----------------------------------------------------------------------------------------------------


def test_step_limit_ends_the_run_before_another_model_turn(kit: Kit) -> None:
    session, engine = kit.session([call("add", a=n, b=1) for n in range(5)], limits=AgentLimits(max_model_steps=3))
    result = session.run("loop")
    assert result.outcome is LoopOutcome.LIMIT and result.limit is LimitKind.MODEL_STEPS
    assert result.steps == 3 and len(engine.calls) == 3 and len(kit.executed) == 3
    assert kinds(result)[-1] == "tool_result"
    (terminated,) = kit.of(EventType.RUN_TERMINATED)
    assert terminated["limit"] == "model_steps" and terminated["limit_value"] == 3
    assert kit.types()[-1] == "run_terminated"
    kit.verify()


def test_a_repair_loop_is_bounded_by_the_same_step_limit(kit: Kit) -> None:
    broken = call("add", a=1, b=2).replace('"b": 2}', '"b": 2,}')
    session, _ = kit.session([broken] * 4, limits=AgentLimits(max_model_steps=4))
    result = session.run("add")
    assert result.limit is LimitKind.MODEL_STEPS and kit.executed == []


def test_tool_call_limit_stops_before_the_call_that_would_exceed_it(kit: Kit) -> None:
    three = calls(("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2}), ("add", {"a": 3, "b": 3}))
    session, _ = kit.session([three, final("never")], limits=AgentLimits(max_tool_calls=2))
    result = session.run("three sums")
    assert result.outcome is LoopOutcome.LIMIT and result.limit is LimitKind.TOOL_CALLS
    assert sorted(args["a"] for _, args in kit.executed) == [1, 2]  # data calls: run together, in any order
    assert result.tool_calls == 2
    assert kinds(result) == ["system", "user", "assistant_tool_call", "tool_result", "tool_result"]
    (terminated,) = kit.of(EventType.RUN_TERMINATED)
    assert terminated["limit"] == "tool_calls" and "call-3" in terminated["detail"]
    kit.verify()


def test_wall_time_is_checked_before_the_next_model_turn(kit: Kit) -> None:
    clock = ManualClock()

    def slow_turn(messages: list[dict[str, Any]]) -> str:
        clock.advance(11)
        return call("add", a=1, b=1)

    session, engine = kit.session([slow_turn, final("late")], limits=AgentLimits(max_wall_s=10), clock=clock)
    result = session.run("slow")
    assert result.outcome is LoopOutcome.LIMIT and result.limit is LimitKind.WALL_TIME
    assert len(engine.calls) == 1
    (terminated,) = kit.of(EventType.RUN_TERMINATED)
    assert terminated["limit"] == "wall_time" and terminated["observed"] == 11
    kit.verify()


def test_wall_time_is_checked_before_each_tool_call(kit: Kit) -> None:
    clock = ManualClock()
    kit.on_execute = lambda name: clock.advance(6)
    two = calls(("record", {"note": "a", "idempotency_key": "a"}),  # actions: one at a time, in order
                ("record", {"note": "b", "idempotency_key": "b"}))
    session, _ = kit.session([two, final("never")], limits=AgentLimits(max_wall_s=5), clock=clock)
    result = session.run("two")
    assert result.limit is LimitKind.WALL_TIME and len(kit.executed) == 1


def test_tool_timeout_is_capped_by_the_wall_time_left(kit: Kit) -> None:
    clock = ManualClock()

    def turn(messages: list[dict[str, Any]]) -> str:
        clock.advance(95)
        return call("add", a=1, b=1)

    session, _ = kit.session([turn, final("x")], clock=clock, limits=AgentLimits(max_wall_s=100, tool_timeout_s=60))
    assert session.run("go").outcome is LoopOutcome.COMPLETED
    (started,) = kit.of(EventType.TOOL_EXECUTION_STARTED)
    assert started["timeout_s"] == 5


def test_turn_cut_at_max_output_tokens_ends_the_run_and_commits_nothing(kit: Kit) -> None:
    long_answer = final("word " * 50)
    session, engine = kit.session([long_answer], limits=AgentLimits(max_output_tokens=20))
    result = session.run("talk")
    assert result.outcome is LoopOutcome.LIMIT and result.limit is LimitKind.OUTPUT_TOKENS
    assert kinds(result) == ["system", "user"]
    assert engine.calls[0].max_tokens == 20
    assert_kv_at_committed_boundary(engine)
    assert engine.committed_tokens == len(engine.calls[0].prompt)
    finished = kit.of(EventType.MODEL_CALL_FINISHED)[0]
    assert finished["finish_reason"] == "length" and finished["n_output_tokens"] == 20
    assert kit.of(EventType.RUN_TERMINATED)[0]["limit"] == "output_tokens"
    kit.verify()


def test_oversized_result_is_truncated_to_max_result_bytes_and_marked(kit: Kit) -> None:
    session, _ = kit.session([call("long_text", n=5000), final("long")], limits=AgentLimits(max_result_bytes=300))
    result = session.run("long")
    assert result.outcome is LoopOutcome.COMPLETED
    tool_message = [m for m in result.messages if m["role"] == "tool"][0]
    assert len(tool_message["content"].encode()) <= 300
    content = json.loads(tool_message["content"])
    assert content["truncated"] is True and content["original_bytes"] > 300
    assert result.ledger[3].truncated is True
    assert kit.of(EventType.TOOL_RESULT_COMMITTED)[0]["truncated"] is True
    kit.verify()


def test_the_trace_holds_the_bounded_result_with_the_full_results_size_and_digest(kit: Kit) -> None:
    import hashlib

    session, _ = kit.session([call("long_text", n=5000), final("long")], limits=AgentLimits(max_result_bytes=300))
    result = session.run("long")
    assert result.outcome is LoopOutcome.COMPLETED
    finished = kit.of(EventType.TOOL_EXECUTION_FINISHED)[0]
    full = json.dumps({"ok": True, "result": "é" * 5000}, ensure_ascii=False, separators=(",", ":")).encode()
    assert finished["result_truncated"] is True and finished["result"]["truncated"] is True
    assert len(json.dumps(finished["result"], ensure_ascii=False, separators=(",", ":")).encode()) <= 300
    assert finished["result_bytes"] == len(full) and finished["result_sha256"] == hashlib.sha256(full).hexdigest()
    kit.verify()


def test_a_small_result_is_traced_whole_with_its_size_and_digest(kit: Kit) -> None:
    session, _ = kit.session([call("add", a=1, b=2), final("3")])
    session.run("add")
    finished = kit.of(EventType.TOOL_EXECUTION_FINISHED)[0]
    assert finished["result"] == {"ok": True, "result": 3.0} and finished["result_truncated"] is False
    assert finished["result_bytes"] == len(b'{"ok":true,"result":3.0}')


def test_an_event_the_recorder_refuses_fails_the_run_with_a_terminal_event(kit: Kit) -> None:
    from agent.trace import MAX_LINE_BYTES

    session, engine = kit.session([final("x")])
    result = session.run("u" * (MAX_LINE_BYTES + 1))  # run_started would be an over-long line
    assert result.outcome is LoopOutcome.FAILED and result.phase == "trace"
    assert "trace refused an event" in result.detail
    assert kit.types() == ["run_failed"]
    assert_kv_at_committed_boundary(engine)


# -- cancellation at every phase ----------------------------------------------------------------------------------


def test_cancel_before_the_run_ends_it_at_the_first_boundary(kit: Kit) -> None:
    token = CancelToken()
    token.cancel("user quit")
    session, engine = kit.session([final("never")])
    result = session.run("hi", cancel=token)
    assert result.outcome is LoopOutcome.CANCELLED and result.phase == "model"
    assert engine.calls == [] and kinds(result) == ["system", "user"]
    assert kit.of(EventType.RUN_CANCELLED)[0]["reason"] == "user quit"
    kit.verify()


def test_cancel_during_generation_rolls_back_the_kv_and_commits_no_assistant_turn(kit: Kit) -> None:
    token = CancelToken()
    session, engine = kit.session([call("add", a=1, b=1), ScriptedTurn(text=final("half of this"), trip=token)])
    result = session.run("go", cancel=token)
    assert result.outcome is LoopOutcome.CANCELLED and result.phase == "model"
    assert kinds(result) == ["system", "user", "assistant_tool_call", "tool_result"]
    committed_before = engine.commits[-1]
    prompt_len = len(engine.calls[-1].prompt)
    assert engine.rollbacks[-1][0] > engine.rollbacks[-1][1] == prompt_len
    assert_kv_at_committed_boundary(engine)
    assert engine.committed_tokens == prompt_len and len(engine.commits) == 4
    assert committed_before <= prompt_len  # the prompt renders committed messages only
    finished = kit.of(EventType.MODEL_CALL_FINISHED)[-1]
    assert finished["finish_reason"] == "cancelled"
    assert kit.types()[-2:] == ["model_call_finished", "run_cancelled"]
    kit.verify()


def test_cancel_after_parse_discards_the_complete_turn(kit: Kit) -> None:
    token = CancelToken()
    trace = TrippingTrace(kit.trace_path, trip_on=EventType.ASSISTANT_ACTION_PARSED, token=token)
    session, engine = kit.session([call("add", a=1, b=1)], trace=trace)
    result = session.run("go", cancel=token)
    assert result.outcome is LoopOutcome.CANCELLED and result.phase == "parse"
    assert kinds(result) == ["system", "user"] and kit.executed == []
    assert_kv_at_committed_boundary(engine)
    assert engine.committed_tokens == len(engine.calls[0].prompt)
    assert kit.types()[-2:] == ["assistant_action_parsed", "run_cancelled"]
    kit.verify()


def test_cancel_during_validation_keeps_the_committed_call_and_executes_nothing(kit: Kit) -> None:
    token = CancelToken()
    trace = TrippingTrace(kit.trace_path, trip_on=EventType.TOOL_CALL_VALIDATED, token=token)
    session, engine = kit.session([call("add", a=1, b=1)], trace=trace)
    result = session.run("go", cancel=token)
    assert result.outcome is LoopOutcome.CANCELLED and result.phase == "validate"
    assert kinds(result) == ["system", "user", "assistant_tool_call"] and kit.executed == []
    assert_kv_at_committed_boundary(engine)
    assert engine.committed_tokens == len(engine.calls[0].prompt) + len(call("add", a=1, b=1))
    assert EventType.TOOL_EXECUTION_STARTED not in kit.types()
    kit.verify()


def test_cancel_during_approval_executes_nothing(kit: Kit) -> None:
    token = CancelToken()

    def policy(tool: Tool, args: Any) -> ApprovalDecision:
        token.cancel("operator said stop")
        return ApprovalDecision(allowed=True, reason="ok")

    session, _ = kit.session([call("add", a=1, b=1)], approval=policy)
    result = session.run("go", cancel=token)
    assert result.outcome is LoopOutcome.CANCELLED and result.phase == "approve"
    assert kit.executed == [] and kinds(result)[-1] == "assistant_tool_call"


def test_cancel_during_execution_leaves_the_effect_visible_and_commits_no_result(kit: Kit) -> None:
    token = CancelToken()
    kit.on_execute = lambda name: token.cancel("stop mid-write")
    session, engine = kit.session([call("write_artifact", name="a.md", content="effect")])
    result = session.run("write", cancel=token)
    assert result.outcome is LoopOutcome.CANCELLED and result.phase == "execute"
    assert kinds(result) == ["system", "user", "assistant_tool_call"]
    assert not any(m["role"] == "tool" for m in result.messages)
    assert kit.executed == [("write_artifact", {"name": "a.md"})]
    (uncommitted,) = kit.of(EventType.TOOL_RESULT_UNCOMMITTED)
    assert uncommitted["call_id"] == "call-1" and uncommitted["executed"] is True
    types = kit.types()
    assert types.index("tool_execution_finished") < types.index("tool_result_uncommitted") < types.index(
        "run_cancelled")
    assert "tool_result_committed" not in types
    assert_kv_at_committed_boundary(engine)
    kit.verify()


def test_cancel_after_execution_before_commit_keeps_the_effect_and_drops_the_result(kit: Kit) -> None:
    token = CancelToken()
    trace = TrippingTrace(kit.trace_path, trip_on=EventType.TOOL_EXECUTION_FINISHED, token=token)
    session, engine = kit.session([call("write_artifact", name="b.md", content="real bytes")], trace=trace)
    result = session.run("write", cancel=token)
    assert result.outcome is LoopOutcome.CANCELLED and result.phase == "execute"
    assert kinds(result) == ["system", "user", "assistant_tool_call"]
    (finished,) = kit.of(EventType.TOOL_EXECUTION_FINISHED)
    assert finished["ok"] is True and len(finished["artifact_ids"]) == 1
    (written,) = kit.of(EventType.ARTIFACT_WRITTEN)
    assert (kit.artifact_root / written["artifact_id"]).read_bytes() == b"real bytes"
    (uncommitted,) = kit.of(EventType.TOOL_RESULT_UNCOMMITTED)
    assert uncommitted["artifact_ids"] == finished["artifact_ids"] and uncommitted["ok"] is True
    assert result.messages[-1]["role"] == "assistant" and "tool_calls" in result.messages[-1]
    assert_kv_at_committed_boundary(engine)
    kit.verify()


def test_cancel_between_two_calls_of_one_turn_keeps_the_first_result_only(kit: Kit) -> None:
    token = CancelToken()
    trace = TrippingTrace(kit.trace_path, trip_on=EventType.TOOL_RESULT_COMMITTED, token=token)
    two = calls(("record", {"note": "a", "idempotency_key": "a"}),  # actions: one at a time, in order
                ("record", {"note": "b", "idempotency_key": "b"}))
    session, _ = kit.session([two], trace=trace)
    result = session.run("two", cancel=token)
    assert result.outcome is LoopOutcome.CANCELLED
    assert kinds(result) == ["system", "user", "assistant_tool_call", "tool_result"]
    assert len(kit.executed) == 1


def test_cancel_after_concurrent_data_calls_commits_only_the_results_before_it(kit: Kit) -> None:
    token = CancelToken()
    trace = TrippingTrace(kit.trace_path, trip_on=EventType.TOOL_RESULT_COMMITTED, token=token)
    two = calls(("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2}))  # data: both ran before the cancel
    session, _ = kit.session([two], trace=trace)
    result = session.run("two", cancel=token)
    assert result.outcome is LoopOutcome.CANCELLED and len(kit.executed) == 2
    assert kinds(result) == ["system", "user", "assistant_tool_call", "tool_result"]
    (uncommitted,) = kit.of(EventType.TOOL_RESULT_UNCOMMITTED)
    assert uncommitted["call_id"] == "call-2" and uncommitted["effect_visible"] is True


def test_cancel_from_another_thread_is_seen_at_the_next_boundary(kit: Kit) -> None:
    token = CancelToken()
    started = threading.Event()

    def turn(messages: list[dict[str, Any]]) -> str:
        t = threading.Thread(target=token.cancel, args=("other thread",))
        t.start()
        t.join()
        started.set()
        return final("done")

    session, _ = kit.session([turn])
    result = session.run("go", cancel=token)
    assert started.is_set() and result.outcome is LoopOutcome.CANCELLED
    assert kinds(result) == ["system", "user"]


# -- failures -------------------------------------------------------------------------------------------------


def test_engine_failure_ends_the_run_failed_with_the_error(kit: Kit) -> None:
    session, engine = kit.session([ScriptedTurn(text="", error=RuntimeError("llama_decode returned -1"))])
    result = session.run("go")
    assert result.outcome is LoopOutcome.FAILED and "llama_decode returned -1" in result.detail
    assert kit.of(EventType.RUN_FAILED)[0]["error"] == result.detail
    assert kinds(result) == ["system", "user"]
    assert_kv_at_committed_boundary(engine)
    kit.verify()


def test_running_out_of_script_is_a_failed_run_not_a_hang(kit: Kit) -> None:
    session, _ = kit.session([call("add", a=1, b=1)])
    result = session.run("go")
    assert result.outcome is LoopOutcome.FAILED and "no turn 2" in result.detail


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_trace_write_failure_fails_the_run_cleanly() -> None:
    kit_engine = ScriptedEngine([final("x")], CODEC)
    session = Session(kit_engine, ToolRegistry([]), trace=TraceRecorder("/dev/full"))
    result = session.run("hi")
    assert result.outcome is LoopOutcome.FAILED and result.phase == "trace"
    assert "trace write failed" in result.detail


def test_trace_write_failure_mid_run_rolls_back_and_fails(kit: Kit) -> None:
    class BreaksAt(TraceRecorder):
        def emit(self, event_type: Any, **kw: Any) -> Any:
            if EventType(event_type) is EventType.MODEL_CALL_FINISHED:
                raise TraceWriteError("disk full", path=str(self.path), errno_code=28, seq=self.next_seq)
            return super().emit(event_type, **kw)

    session, engine = kit.session([final("x")], trace=BreaksAt(kit.trace_path))
    result = session.run("hi")
    assert result.outcome is LoopOutcome.FAILED and "disk full" in result.detail
    assert kinds(result) == ["system", "user"]
    assert_kv_at_committed_boundary(engine)


def test_a_trace_recorder_cannot_record_two_runs(kit: Kit) -> None:
    session, _ = kit.session([final("a"), final("b")])
    session.run("one")
    with pytest.raises(SessionError):
        session.run("two")


# -- the trace as the record ---------------------------------------------------------------------------------------


def test_provenance_pins_codec_tools_limits_and_engine(kit: Kit) -> None:
    session, _ = kit.session([final("x")], limits=AgentLimits(max_model_steps=3))
    session.run("hi")
    (prov,) = kit.of(EventType.PROVENANCE)
    assert prov["codec_id"] == "qwen2.5-tool-call-v1"
    assert prov["tool_schema_sha256"] == session.tools.snapshot_sha256
    assert prov["limits"]["max_model_steps"] == 3
    assert prov["engine"]["engine"] == "ScriptedEngine"
    assert [t["name"] for t in prov["config"]["tools"]] == list(session.tools.names)


def test_payloads_follow_the_recorders_privacy_mode(kit: Kit) -> None:
    trace = TraceRecorder(kit.trace_path, privacy="hashed")
    session, _ = kit.session([call("add", a=1, b=2), final("secret answer")], trace=trace)
    session.run("secret question")
    text = kit.trace_path.read_text()
    assert "secret question" not in text and "secret answer" not in text
    assert kit.of(EventType.RUN_COMPLETED)[0]["final_text"]["privacy"] == "hashed"


def test_untraced_session_runs_the_same_state_machine(kit: Kit) -> None:
    engine = ScriptedEngine([call("add", a=1, b=2), final("3")], CODEC)
    session = Session(engine, ToolRegistry(kit.tools()))
    result = session.run("add")
    assert result.outcome is LoopOutcome.COMPLETED and result.run_id.startswith("run-")
    assert kinds(result) == ["user", "assistant_tool_call", "tool_result", "assistant_final"]


def test_model_turn_fields_reach_the_trace(kit: Kit) -> None:
    session, engine = kit.session([final("ok")])
    session.run("hi")
    started = kit.of(EventType.MODEL_CALL_STARTED)[0]
    finished = kit.of(EventType.MODEL_CALL_FINISHED)[0]
    assert started["prompt"] == engine.calls[0].prompt and started["max_tokens"] == 256
    assert finished["n_prompt_tokens"] == len(engine.calls[0].prompt)
    assert finished["n_output_tokens"] == len("ok") and finished["output"] == "ok"
    assert finished["constrained"] is True  # the kit's tools are Tool.from_function: constrained by default


def test_scripted_turn_type_is_a_model_turn() -> None:
    engine = ScriptedEngine(["hi"], CODEC)
    turn = engine.run_turn([{"role": "user", "content": "x"}], tools=(), tool_choice="auto", max_tokens=5)
    assert isinstance(turn, ModelTurn) and turn.text == "hi" and turn.finish_reason == "stop_token"


def test_tool_choice_naming_an_unregistered_tool_is_refused_up_front(kit: Kit) -> None:
    with pytest.raises(SessionError, match="names no registered tool"):
        kit.session([final("x")], tool_choice="rm_rf", traced=False)


def test_rejection_trace_keeps_the_validation_error_kinds(kit: Kit) -> None:
    session, _ = kit.session([call("add", a="one"), final("x")])
    session.run("add")
    (rejected,) = kit.of(EventType.TOOL_CALL_REJECTED)
    by_path = {e["path"]: e["kind"] for e in rejected["errors"]}
    assert by_path == {"a": "wrong_type", "b": "missing_required"}


def test_registering_tools_prepares_every_grammar_the_choices_will_need(kit: Kit) -> None:
    _, engine = kit.session([final("x")], tool_choice="required", final_pattern="[0-9]+")
    assert engine.prepared == [(tuple(t.name for t in kit.tools()), ("required", "auto", "none"), "[0-9]+")]
    _, planned = kit.session([final("x")], tool_choice=("add", "none"))
    assert planned.prepared[0][1] == ("add", "none")


class _VandalEngine(ScriptedEngine):
    """Records what each turn was given, then scribbles over it (messages and nested tool-call arguments)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.given: list[str] = []

    def run_turn(self, messages: Any, **kwargs: Any) -> ModelTurn:
        self.given.append(json.dumps(messages, sort_keys=True))
        turn = super().run_turn(messages, **kwargs)
        for message in messages:
            for tool_call in message.get("tool_calls") or ():
                tool_call["function"]["arguments"]["a"] = "vandalised"
            message["content"] = "vandalised"
        messages.append({"role": "user", "content": "injected"})
        return turn


def test_each_turn_gets_fresh_copies_of_the_committed_messages(tmp_path: Path) -> None:
    kit = Kit(tmp_path)
    engine = _VandalEngine([call("add", a=1, b=2), call("add", a=3, b=4), final("done")], CODEC)
    session = Session(engine, ToolRegistry(kit.tools()), system_prompt=SYSTEM)
    result = session.run("add twice")
    assert result.outcome is LoopOutcome.COMPLETED and [args for _, args in kit.executed] == [
        {"a": 1, "b": 2}, {"a": 3, "b": 4}]
    assert not any("vandalised" in given or "injected" in given for given in engine.given)
    assert not any("vandalised" in json.dumps(m) or "injected" in json.dumps(m) for m in result.messages)
    assert [json.loads(given) for given in engine.given] == [result.messages[:n] for n in (2, 4, 6)]


# -- several calls in one turn ------------------------------------------------------------------------------------


def _meeting_tools(order: list[str]) -> list[Tool]:
    """Two data tools that each wait for the other (they finish only if they run at the same time) and an action."""
    meet = threading.Barrier(2, timeout=5)

    def weather(city: str) -> str:
        """Weather in a city."""
        meet.wait()
        order.append(f"weather:{city}")
        return f"sunny in {city}"

    def book(city: str) -> str:
        """Book a trip (an action)."""
        order.append(f"book:{city}")
        return f"booked {city}"

    return [Tool.from_function(weather), Tool.from_function(book, kind=ToolKind.ACTION)]


def test_data_calls_of_one_turn_run_concurrently_and_actions_in_order(kit: Kit) -> None:
    """Consecutive data calls run together; an action runs alone, after the calls before it (a read written after
    a write still sees the write)."""
    order: list[str] = []
    turn = calls(("weather", {"city": "Oslo"}), ("weather", {"city": "Rome"}), ("book", {"city": "Oslo"}),
                 ("book", {"city": "Rome"}))
    engine = ScriptedEngine([turn, final("done")], CODEC)
    session = Session(engine, ToolRegistry(_meeting_tools(order)), trace=TraceRecorder(kit.trace_path),
                      limits=AgentLimits(max_output_tokens=1024))
    result = session.run("plan")
    assert result.outcome is LoopOutcome.COMPLETED  # the weather calls met: neither waited for the other to end
    assert [o for o in order if o.startswith("book")] == ["book:Oslo", "book:Rome"]
    assert [json.loads(m["content"])["result"] for m in result.messages if m["role"] == "tool"] == [
        "sunny in Oslo", "sunny in Rome", "booked Oslo", "booked Rome"]  # reinjected in call order
    assert engine.calls[0].parallel_calls
    kit.verify()


def test_one_call_per_step_rejects_the_turns_further_calls_unexecuted(kit: Kit) -> None:
    two = calls(("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2}))
    session, engine = kit.session([two, final("2")], parallel_calls=False)
    result = session.run("two")
    assert result.outcome is LoopOutcome.COMPLETED and kit.executed == [("add", {"a": 1, "b": 1})]
    assert reinjected(result, 1)["kind"] == "limit_exceeded" and not engine.calls[0].parallel_calls
    kit.verify()


def test_a_turn_of_only_answered_calls_is_rolled_back_and_the_next_turn_answers_from_the_results(kit: Kit) -> None:
    same = call("add", a=17.5, b=4.2)
    session, engine = kit.session([same, same, final("21.7")])
    result = session.run("add them")
    assert result.outcome is LoopOutcome.COMPLETED and result.final_text == "21.7" and len(kit.executed) == 1
    assert result.tool_calls == 1 and len([m for m in result.messages if m["role"] == "tool"]) == 1
    assert [c.tool_choice for c in engine.calls] == ["auto", "auto", "none"]
    assert "You already have the result of this call" in engine.calls[2].prompt  # seen by the model, traced
    (refused,) = kit.of(EventType.REPEATS_REFUSED)
    assert refused["calls"] == [{"call_id": "call-2", "tool": "add", "answered_by": "call-1"}]
    kit.verify()


def test_a_repeat_beside_a_new_call_replays_its_result_and_the_next_turn_stays_free(kit: Kit) -> None:
    """The new call's result may open a way on (a grounded tool callable now): the next turn is not forced to answer;
    a turn of repeats alone would be refused."""
    same = ("add", {"a": 17.5, "b": 4.2})
    session, engine = kit.session([calls(same), calls(same, ("add", {"a": 1, "b": 2})), final("21.7")])
    result = session.run("add them")
    assert result.outcome is LoopOutcome.COMPLETED and len(kit.executed) == 2
    assert reinjected(result, 1)["note"].startswith("identical to call-1")
    assert [c.tool_choice for c in engine.calls] == ["auto", "auto", "auto"]
    assert [f["replayed"] for f in kit.of(EventType.TOOL_EXECUTION_FINISHED)] == [False, True, False]
    kit.verify()


def test_a_call_written_twice_in_one_turn_runs_once_and_is_committed_once(kit: Kit) -> None:
    same = ("add", {"a": 17.5, "b": 4.2})
    session, _ = kit.session([calls(same, same, same), final("21.7")])
    result = session.run("add them")
    assert result.outcome is LoopOutcome.COMPLETED and len(kit.executed) == 1 and result.tool_calls == 1
    assert len(result.messages[2]["tool_calls"]) == 1  # the committed turn holds the call once
    (parsed,) = [e for e in kit.of(EventType.ASSISTANT_ACTION_PARSED) if e["action"] == "tool_calls"]
    assert parsed["duplicates_dropped"] == 2 and [c["call_id"] for c in parsed["calls"]] == ["call-1"]
    kit.verify()


@pytest.mark.parametrize("text", ["", "  \n"])
def test_an_empty_final_answer_is_not_completed(kit: Kit, text: str) -> None:
    session, _ = kit.session([final(text)])
    result = session.run("say something")
    assert result.outcome is LoopOutcome.FAILED and "empty" in result.detail and result.final_text is None


def test_a_turn_that_must_answer_is_shown_no_tool_definitions(kit: Kit) -> None:
    session, engine = kit.session([call("add", a=1, b=2), call("add", a=1, b=2), final("3")])
    session.run("add")
    shown = ["<tools>" in c.prompt for c in engine.calls]
    assert [c.tool_choice for c in engine.calls] == ["auto", "auto", "none"] and shown == [True, True, False]
    assert "<tool_call>" in engine.calls[2].prompt  # the history keeps its calls and results
