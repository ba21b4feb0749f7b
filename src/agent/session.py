"""The agent session: one explicit state machine over a committed conversation.

Owns: the run loop (`Session.run`) and the order in which engine, ledger and trace change; its typed exits
(`RunResult`, `LoopOutcome`, `Phase`) are in `agent.run_result`, the trace events it writes in `agent.run_trace`.
Refuses: model syntax (codecs parse turns into FinalText | ToolCalls | MalformedToolCall), argument validation
rules (`agent.schema`), tool execution mechanics (`agent.tool`), and recursion into an "agent prompt": one loop
owns every transition.

    ┌──► boundary: cancel? steps? wall? ───────────────────────────────────────► cancelled | limit
    │    model turn (engine, speculative) ── cancelled / cut at max_tokens ──► rollback ─► cancelled | limit
    │    parse (codec) ── cancel? ──────────────────────────────────────────► rollback ─► cancelled
    │      only calls already answered? ─► rollback, the next turn answers (repeats_refused) ──────────┐
    │    commit assistant turn ─── FinalText (its claims grounded) ─────────────────────► completed
    │      MalformedToolCall ─► reject ─► reinject ok:false ─────────────────────────────────┐
    │      ToolCalls: for each call, in order:                                               │
    │        boundary: cancel? tool calls? wall? ───────────────────────────────► cancelled | limit
    │        validate (unknown tool / invalid / ungrounded arguments ⇒ reject) ── cancel? ─► cancelled
    │        approve (policy; denied ⇒ reject) ── cancel? ──────────────────────► cancelled
    │        execute (timeout, cancel token, idempotency) ── cancel? ─► tool_result_uncommitted ─► cancelled
    │        reinject (result bounded to max_result_bytes) ─► commit tool result                │
    └────────────────────────────────────────────────────────────────────────────────────────┘

Commit semantics. A model turn is speculative until it completes and parses: a cancel before its commit rolls
the engine's KV back to the last committed boundary and commits nothing. A tool's effect is real once it runs: a
cancel after execution keeps the effect visible in the trace (``tool_execution_finished``, ``artifact_written``),
emits ``tool_result_uncommitted`` and commits no tool message, so the committed messages stay a valid prefix.
Every commit goes through `CommitLedger.commit`, which moves engine, ledger and trace together.

Several calls in one turn (``parallel_calls``, the default) are each validated, approved and counted against
``max_tool_calls`` behind their own boundary, in call order. Consecutive data calls then run concurrently (they
are read-only and retry-safe); an action runs alone, after every call before it, through approval and its
idempotency key; every result is reinjected in call order. (The Rust original executed one call per step and
only counted the rest; ``parallel_calls=False`` keeps that contract.)

Repeats (`agent.repeats`, the rule ``ember serve`` keeps too): a call written twice in one turn stands once. A turn
made only of calls the conversation already answered is rolled back unrun (``repeats_refused``) and the next turn
is decoded under ``none``, the last result carrying a note: a model that repeats a call has the result it asked
for. When it cannot answer yet (a final pattern's slot has no value, or a declared tool still lacks one), the next
turn is decoded under ``auto`` with the repeated tools not offered while another tool can be called: a greedy
model given the same prompt repeats the same calls. In a turn that also makes new calls, a repeat replays its
earlier outcome with a note instead of running again; the new results may open a way on (a grounded tool now
callable), so the next turn stays free.

Grounding (`agent.grounding`, `agent.grounding_policy`): each turn's values are traced with their sources, as of
the turn's start; a value a tool or parameter declares grounded is held by the turn's grammar where its candidates
are enumerable (a dynamic enum) and refused by validation otherwise; a final pattern's slots
(``{{number@calculator}}``) take only values their source holds, and while one has none the answer cannot be
written. While a declared tool has no candidate for a required value, the turn after a tool result reads a note
naming what it lacks (`grounding_policy.blocked_note`).

Rejected calls (malformed, unknown tool, invalid arguments, denied by policy) never reach a tool: they are traced
as ``tool_call_rejected`` and reinjected as ok:false results, so the model may repair them within the same limits.
"""

from __future__ import annotations

import dataclasses
import functools
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from agent import results
from agent.artifact import ArtifactStore
from agent.cancel import CancelToken
from agent.engine import MODEL_FAILURES, ModelTurn, TurnEngine
from agent.errors import AgentError
from agent.grounding import Sources, ground_text
from agent.grounding_policy import (SLOT_RE, blocked_note, final_pattern_for_turn, ground_arguments, has_slots,
                                    narrowed_parameters, slot_sources, ungrounded_errors)
from agent.ledger import CommitLedger, EntryKind
from agent.limits import AgentLimits, RunUsage
from agent.protocol._pattern import escape
from agent.protocol.base import Action, FinalText, MalformedToolCall, ToolCall, ToolCalls, ToolChoice, ToolSpec
from agent.repeats import (CallKey, call_key, distinct_calls, ends_with_result, only_repeats, repeat_note,
                           with_repeat_note)
from agent.results import ResultErrorKind
from agent.run_result import Ending, LoopOutcome, Phase, RunResult
from agent.run_trace import RunTrace, tool_step
from agent.schema import ArgumentError, ArgumentErrors, ValidatedArguments, ValidationErrorKind, validate_arguments
from agent.tool import (ApprovalPolicy, IdempotencyStore, Tool, ToolContext, ToolKind, ToolOutcome, ToolRegistry,
                        check_approval, default_policy, execute_tool)
from agent.trace import TraceError, TraceMisuseError, TraceRecorder, TraceWriteError
from constrained import CancelSignal, FinishReason

__all__ = ["LoopOutcome", "Phase", "RunResult", "Session", "SessionError", "ToolChoicePlanError", "tool_choice_plan"]


class SessionError(AgentError):
    """Misuse of a `Session` (e.g. reusing a trace recorder that already holds a run)."""


class ToolChoicePlanError(SessionError, ValueError):
    """A tool choice (or per-turn plan) that names no registered tool, or a plan with no entry."""

    def __init__(self, choice: str | None, tools: Sequence[str]) -> None:
        self.choice = choice
        """The offending entry; None when the plan is empty."""
        self.tools = tuple(tools)
        """The registered tool names, the choices that would work besides auto / required / none."""
        super().__init__("tool_choice plan is empty; give at least one choice" if choice is None else
                         f"tool_choice {choice!r} names no registered tool; use 'auto', 'required', 'none' or "
                         f"one of {list(self.tools)}")


def tool_choice_plan(tool_choice: ToolChoice | Sequence[ToolChoice], tools: ToolRegistry) -> tuple[ToolChoice, ...]:
    """The per-turn plan a tool choice stands for (a single choice is a plan of one), checked against ``tools``.

    Raises:
        ToolChoicePlanError: the plan is empty, or an entry is not auto / required / none / a registered tool.
    """
    plan = (tool_choice,) if isinstance(tool_choice, str) else tuple(tool_choice)
    if not plan:
        raise ToolChoicePlanError(None, tools.names)
    for choice in plan:
        if choice not in ("auto", "required", "none") and choice not in tools:
            raise ToolChoicePlanError(choice, tools.names)
    return plan


@dataclass(frozen=True, kw_only=True)
class _Accepted:
    tool: Tool
    args: ValidatedArguments


@dataclass(frozen=True, kw_only=True)
class _Rejected:
    kind: ResultErrorKind
    detail: str
    result: dict[str, Any]
    errors: tuple[ArgumentError, ...] = ()


@dataclass(frozen=True, slots=True)
class _Executed:
    """A call's outcome and its result text, bounded once for both the trace and the reinjection."""

    outcome: ToolOutcome
    content: str
    truncated: bool


@dataclass(kw_only=True)
class _Run:
    """Mutable state of one run; only the loop and its step functions touch it."""

    run_id: str
    cancel: CancelSignal
    ledger: CommitLedger
    trace: RunTrace
    started_at: float
    tool_choice: ToolChoice
    steps: int = 0
    tool_calls: int = 0
    n_call_ids: int = 0
    model_step: str = ""
    call_ids: list[str] = field(default_factory=list)
    executed: dict[tuple[str, str], tuple[str, ToolOutcome]] = field(default_factory=dict)
    """(tool, arguments sha256) → (call id, outcome) of every call this run started: a repeat replays it."""
    answered: dict[CallKey, str] = field(default_factory=dict)
    """Every call the conversation holds a result for (run, replayed or rejected) → the call id that answered it."""
    ungrounded: dict[CallKey, tuple[str, int]] = field(default_factory=dict)
    """Calls refused for ungrounded values → (call id, how many texts the sources held then): such a call is
    answered until a new source arrives (a lookup's result may ground it)."""
    answer_now: bool = False
    """The last turn only repeated answered calls and was refused: the next is decoded under ``none``, the last tool
    result carrying `agent.repeats.REPEAT_NOTE` (`agent.repeats`)."""
    resting: frozenset[str] = frozenset()
    """After a refused repeat that cannot be answered yet: the tools it repeated, which the next turn's grammar does
    not offer (`Session._refuse_repeats`)."""
    answerable: bool = True
    """This turn's final answer can be written (every slot of the final pattern has a value)."""
    sources: Sources = field(default_factory=Sources)
    """What the model was given, indexed for grounding as of the current turn's start (`agent.grounding`)."""
    blocked: dict[str, list[str]] = field(default_factory=dict)
    """This turn's tools that cannot be called yet → the declared grounded parameters no source holds a value for."""

    @property
    def can_answer(self) -> bool:
        """The answer can be written now and no declared tool is still blocked: a refused repeat is then answered
        (``none``); otherwise the next turn may still call a tool (``auto``)."""
        return self.answerable and not self.blocked


class Session:
    """Runs tool-calling conversations over a `TurnEngine` with a fixed registry, limits and policy."""

    def __init__(self, engine: TurnEngine, tools: ToolRegistry, *, limits: AgentLimits = AgentLimits(),
                 trace: TraceRecorder | None = None, artifacts: ArtifactStore | None = None,
                 approval: ApprovalPolicy = default_policy, system_prompt: str | None = None,
                 tool_choice: ToolChoice | Sequence[ToolChoice] = "auto", final_pattern: str | None = None,
                 parallel_calls: bool = True, clock: Callable[[], float] = time.monotonic,
                 tool_updates: Callable[[ToolRegistry], ToolRegistry | None] | None = None) -> None:
        """Args:
            engine: the model seam (`ChatModelEngine`, or `testkit.ScriptedEngine` in tests).
            tools: the registry; the only tools that can ever run.
            limits: the run's bounds.
            trace: where events go (one recorder per run); None runs untraced.
            artifacts: handed to tools through `ToolContext.artifacts`.
            approval: decides per validated call; a denial is reinjected, never executed.
            system_prompt: committed before the user message when given.
            tool_choice: for the first tool-calling turn (``auto``, ``required``, ``none`` or a tool name);
                after a tool-call turn it relaxes to ``auto`` (``none`` stays ``none``) so a forced call
                cannot loop until a limit. A sequence is a per-turn plan instead: model turn ``i`` uses
                ``tool_choice[i]`` and the last entry repeats (no relaxing), e.g.
                ``("read_file", "calculator", "none")`` forces which tool each step calls while the model still
                writes the arguments.
            final_pattern: a pattern (engine regex dialect) the final answer text must match; the engine
                enforces it by masking wherever the turn may be text. It must not start with ``{`` (a turn that
                does is a call attempt).
            parallel_calls: a turn may hold several calls; its data calls run concurrently, its actions one at
                a time in call order, and every result is reinjected in call order. False keeps the strict
                contract: one call per step (the turn's grammar holds one; any further call is rejected
                unexecuted with ``limit_exceeded``).
            clock: seconds, monotonic; injectable so wall-time limits are testable without sleeping.
            tool_updates: asked before each model turn, never during one, with the tools offered now; returns a
                new registry when they changed (`agent.mcp.McpToolset.refresh`: a server announced a new tool
                list) or None. The change is traced (``tools_changed``); one whose tool choice names a tool no
                longer offered is traced and not adopted.
        """
        self.engine = engine
        self.tools = tools
        self.limits = limits
        self.trace = trace
        self.artifacts = artifacts
        self.approval = approval
        self.system_prompt = system_prompt
        self.tool_choice = tool_choice if isinstance(tool_choice, str) else tuple(tool_choice)
        self.final_pattern = final_pattern
        self.parallel_calls = parallel_calls
        self.clock = clock
        self.tool_updates = tool_updates
        self.idempotency = IdempotencyStore()
        """Shared by every run of this session: a retried action with the same key returns its first outcome."""
        self._specs = tuple(tools.specs())
        self._grounding_tools = _grounding_tools(tools)
        """Constrained tools that require grounded values: their grammar is narrowed each turn."""
        plan = tool_choice_plan(self.tool_choice, tools)
        # Registering tools compiles their grammars now: an unsupported schema fails here, not mid-run, and the
        # first turn pays no compile. A single choice relaxes to "auto" after a call (see `_commit_turn`).
        relaxed = ("auto",) if isinstance(self.tool_choice, str) and self.tool_choice != "none" else ()
        for kind, names in slot_sources(final_pattern or ""):
            unknown = sorted(n for n in names if n not in ("user", "system", "tool_result") and n not in tools)
            if unknown:
                raise SessionError(f"final_pattern slot {{{{{kind}@{','.join(sorted(names))}}}}} names no source "
                                   f"{unknown}: use user, system, tool_result or a registered tool's name")
        engine.prepare(self._specs, (*plan, *relaxed, *(("none",) if relaxed else ())),
                       SLOT_RE.sub("0", final_pattern) if final_pattern else None, parallel_calls)

    # -- the loop ------------------------------------------------------------------------------------------------

    def run(self, user_message: str, *, cancel: CancelSignal | None = None) -> RunResult:
        """Run one conversation from ``user_message`` to a typed exit. Never raises for model, tool, limit,
        cancel or trace-write outcomes; raises `SessionError` for misuse.

        ``cancel`` is a `CancelToken` (anything with ``is_set()`` and ``reason``); None: a fresh token."""
        if self.trace is not None and self.trace.next_seq > 0:
            raise SessionError(f"trace recorder {self.trace.path} already holds a run; use one recorder per run")
        if cancel is not None and not isinstance(cancel, CancelSignal):
            raise SessionError(f"cancel must have is_set() and reason, like agent.cancel.CancelToken; got "
                               f"{type(cancel).__name__}")
        run = self._start(cancel if cancel is not None else CancelToken())
        try:
            return self._end(run, self._loop(run, user_message))
        except TraceWriteError as e:  # the record is broken: stop, report, never crash
            self.engine.rollback()
            return self._result(run, Ending(outcome=LoopOutcome.FAILED, phase=Phase.TRACE,
                                             detail=f"trace write failed: {e}"))
        except TraceMisuseError as e:  # an event the recorder refused (e.g. over MAX_LINE_BYTES): same, but the
            self.engine.rollback()     # recorder still works, so the trace gets its terminal run_failed
            ending = Ending(outcome=LoopOutcome.FAILED, phase=Phase.TRACE, detail=f"trace refused an event: {e}")
            try:
                self._trace_terminal(run, ending)
            except TraceError:
                pass
            return self._result(run, ending)

    def _loop(self, run: _Run, user_message: str) -> Ending:
        self._begin(run, user_message)
        while True:
            # -- boundary: before a model turn --
            if ending := self._before_model_turn(run):
                return ending
            # -- model turn --
            turn = self._model_turn(run)
            if isinstance(turn, Ending):
                return turn
            # -- parse --
            action = self._parse(run, turn)
            if ending := self._cancel_point(run, Phase.PARSE, discard_turn=True):
                return ending
            if isinstance(action, ToolCalls) and self._repeats_only(run, action):
                self._refuse_repeats(run, action)  # -- rolled back: the next turn answers from the results --
                continue
            # -- commit the assistant turn --
            call_ids = self._commit_turn(run, action)
            if isinstance(action, FinalText):
                if not action.text.strip():
                    return Ending(outcome=LoopOutcome.FAILED, phase=Phase.FINISH, step=run.model_step,
                                   detail="the model's final answer is empty")
                return Ending(outcome=LoopOutcome.COMPLETED, phase=Phase.FINISH, final_text=action.text,
                              step=run.model_step, claims=ground_text(action.text, run.sources))
            if isinstance(action, MalformedToolCall):
                # -- reject + reinject (a malformed call reaches no tool) --
                rejected = self._reject_malformed(run, call_ids[0], action)
                self._reinject(run, call_ids[0], _malformed_as_call(action), rejected)
                continue
            batch: list[tuple[str, ToolCall, _Accepted]] = []  # data calls waiting to run together
            for n, (call_id, call) in enumerate(zip(call_ids, action.calls)):
                # -- boundary: before a tool call --
                if ending := self._before_tool_call(run, call_id, call):
                    return self._execute_batch(run, batch) or ending
                # -- validate --
                if n and not self.parallel_calls:
                    checked: _Accepted | _Rejected = self._one_call_per_step(run, call_id, call)
                else:
                    checked = self._validate(run, call_id, call)
                if ending := self._cancel_point(run, Phase.VALIDATE):
                    return ending
                # -- approve --
                if isinstance(checked, _Accepted):
                    checked = self._approve(run, call_id, checked)
                    if ending := self._cancel_point(run, Phase.APPROVE):
                        return ending
                if isinstance(checked, _Accepted) and checked.tool.kind is ToolKind.DATA:
                    batch.append((call_id, call, checked))  # -- execute + reinject: with the other data calls --
                    continue
                if ending := self._execute_batch(run, batch):
                    return ending
                if isinstance(checked, _Rejected):
                    # -- reinject (rejection) --
                    self._reinject(run, call_id, call, checked)
                    continue
                # -- execute + reinject: an action alone, in call order --
                if ending := self._execute_batch(run, [(call_id, call, checked)]):
                    return ending
            if ending := self._execute_batch(run, batch):
                return ending

    # -- steps ---------------------------------------------------------------------------------------------------

    def _start(self, cancel: CancelSignal) -> _Run:
        trace = RunTrace(self.trace)
        run_id = self.trace.run_id if self.trace is not None else f"run-{uuid.uuid4().hex}"
        ledger = CommitLedger(engine=self.engine, on_commit=trace.committed)
        return _Run(run_id=run_id, cancel=cancel, ledger=ledger, trace=trace, started_at=self.clock(),
                    tool_choice=self._planned_choice(0))

    def _planned_choice(self, turn_index: int) -> ToolChoice:
        """The tool choice of model turn ``turn_index`` (0-based) under a plan; the single choice otherwise."""
        if isinstance(self.tool_choice, str):
            return self.tool_choice
        return self.tool_choice[min(turn_index, len(self.tool_choice) - 1)]

    def _begin(self, run: _Run, user_message: str) -> None:
        run.trace.run_started(user_message, self.system_prompt, self._specs, self.tool_choice)
        run.trace.provenance(self.engine, self.tools, self.limits, self.tool_choice, self.approval)
        if self.system_prompt is not None:
            run.ledger.commit(EntryKind.SYSTEM, {"role": "system", "content": self.system_prompt})
        run.ledger.commit(EntryKind.USER, {"role": "user", "content": user_message})

    def _usage(self, run: _Run) -> RunUsage:
        return RunUsage(steps=run.steps, tool_calls=run.tool_calls, elapsed_s=self.clock() - run.started_at)

    def _cancel_point(self, run: _Run, phase: Phase, *, discard_turn: bool = False) -> Ending | None:
        """A phase boundary: a tripped token ends the run here (discarding the speculative turn if asked)."""
        if not run.cancel.is_set():
            return None
        if discard_turn:
            self.engine.rollback()
        reason = run.cancel.reason or "cancel token tripped"
        return Ending(outcome=LoopOutcome.CANCELLED, phase=phase, detail=f"cancelled during {phase}: {reason}")

    def _before_model_turn(self, run: _Run) -> Ending | None:
        if ending := self._cancel_point(run, Phase.MODEL):
            return ending
        if breach := self.limits.check_before_model_turn(self._usage(run)):
            return Ending(outcome=LoopOutcome.LIMIT, phase=Phase.MODEL, breach=breach, detail=breach.describe())
        self._update_tools(run)
        return None

    def _update_tools(self, run: _Run) -> None:
        """Between turns: offer the changed tool set ``tool_updates`` returns, if any (traced either way)."""
        registry = self.tool_updates(self.tools) if self.tool_updates is not None else None
        if registry is None or registry is self.tools:
            return
        step = f"model-{run.steps + 1}"
        try:
            tool_choice_plan(self.tool_choice, registry)
        except ToolChoicePlanError as error:
            run.trace.tools_changed(step, registry, adopted=False, detail=str(error))
            return
        self.tools, self._specs = registry, tuple(registry.specs())
        self._grounding_tools = _grounding_tools(registry)
        run.trace.tools_changed(step, registry, adopted=True)

    def _before_tool_call(self, run: _Run, call_id: str, call: ToolCall) -> Ending | None:
        if ending := self._cancel_point(run, Phase.VALIDATE):
            return ending
        if breach := self.limits.check_before_tool_call(self._usage(run)):
            return Ending(outcome=LoopOutcome.LIMIT, phase=Phase.VALIDATE, breach=breach, step=tool_step(call_id),
                           detail=f"{breach.describe()}; calls left unexecuted: {list(run.ledger.pending_calls)}")
        run.tool_calls += 1
        return None

    def _model_turn(self, run: _Run) -> ModelTurn | Ending:
        """One speculative turn. Cancelled or cut turns are rolled back here; engine faults end the run."""
        run.steps += 1
        run.model_step = f"model-{run.steps}"
        run.sources.extend(run.ledger.entries)  # the turn's values are grounded in what it was given
        specs, final_pattern, answerable = self._turn_constraints(run)
        run.answerable = answerable
        planned = self._planned_choice(run.steps - 1)
        if not isinstance(self.tool_choice, str):
            run.tool_choice = planned
        messages = run.ledger.messages()
        blocked = " ".join(blocked_note(name, paths) for name, paths in run.blocked.items())
        if run.answer_now:  # its whole last turn repeated answered calls (refused): now it answers, if it can
            run.answer_now = False
            note = repeat_note(() if answerable else self._slot_tools())
            messages = with_repeat_note(messages, f"{note} {blocked}" if blocked else note)
            run.tool_choice = "none" if run.can_answer else "auto"
            specs = tuple(dataclasses.replace(s, constraint=False) if s.name in run.resting else s for s in specs)
        elif blocked and ends_with_result(messages):  # results came in and a declared tool is still blocked
            messages = with_repeat_note(messages, blocked)
        if not answerable and run.tool_choice == "none":
            if planned == "none":
                return Ending(outcome=LoopOutcome.FAILED, phase=Phase.MODEL, step=run.model_step,
                              detail=f"the final answer must take a value from a source ({self.final_pattern!r}) "
                                     "and no such source holds one")
            run.tool_choice = "auto"  # asked to answer, it cannot yet: calling a tool is the only way on
        max_tokens = self.limits.max_output_tokens
        on_prompt = run.trace.on_prompt(run.model_step, len(messages), self._specs, run.tool_choice, max_tokens)
        try:
            turn = self.engine.run_turn(messages, tools=specs, tool_choice=run.tool_choice,
                                        max_tokens=max_tokens, cancel=run.cancel, on_prompt=on_prompt,
                                        parallel_calls=self.parallel_calls,
                                        **({"final_pattern": final_pattern} if final_pattern else {}))
        except MODEL_FAILURES as e:  # the model's faults (context overflow, decode errors) are a failed run; a bug
            self.engine.rollback()  # in our own code is not caught here and surfaces as itself
            return Ending(outcome=LoopOutcome.FAILED, phase=Phase.MODEL, step=run.model_step,
                          detail=f"engine failed: {type(e).__name__}: {e}")
        run.trace.model_call_finished(run.model_step, turn)
        if turn.finish_reason == FinishReason.CANCELLED or run.cancel.is_set():
            self.engine.rollback()
            reason = run.cancel.reason or "generation cancelled"
            return Ending(outcome=LoopOutcome.CANCELLED, phase=Phase.MODEL, step=run.model_step,
                          detail=f"cancelled during model: {reason}; the partial turn was rolled back")
        if breach := self.limits.check_turn_output(turn.n_output_tokens, turn.finish_reason):
            self.engine.rollback()
            return Ending(outcome=LoopOutcome.LIMIT, phase=Phase.MODEL, breach=breach, step=run.model_step,
                           detail=f"{breach.describe()}; the cut turn was not committed")
        return turn

    def _turn_constraints(self, run: _Run) -> tuple[tuple[ToolSpec, ...], str | None, bool]:
        """What this turn's grammar holds: the tools, each declared grounded leaf of a constrained tool narrowed to
        the values the sources hold (`narrowed_parameters`: a dynamic enum per turn), and the final pattern with its
        slots filled; whether a final answer can be written at all (every slot has a value)."""
        specs = self._specs
        run.blocked = {}
        if self._grounding_tools:
            specs = tuple(self._narrowed(spec, run) if spec.name in self._grounding_tools else spec
                          for spec in specs)
        if not has_slots(self.final_pattern):
            return specs, self.final_pattern, True
        pattern, answerable = final_pattern_for_turn(self.final_pattern, run.sources, escape)
        return specs, pattern, answerable

    def _slot_tools(self) -> list[str]:
        """The sources the final pattern's slots take values from (tool names, or ``tool_result``...)."""
        return sorted({name for _, names in slot_sources(self.final_pattern or "") for name in names})

    def _narrowed(self, spec: ToolSpec, run: _Run) -> ToolSpec:
        tool = self.tools.get(spec.name)
        assert tool is not None
        missing: list[str] = []
        narrowed = narrowed_parameters(tool.parameters, run.sources, tool_requirement=tool.grounding_requirement,
                                       missing=missing)
        if missing:
            run.blocked[spec.name] = missing
        return spec if narrowed is None else dataclasses.replace(spec, constraint=narrowed)

    def _parse(self, run: _Run, turn: ModelTurn) -> Action:
        """The codec's reading of the turn; a call written twice in one turn stands once (the copies are counted
        in the trace, never run or committed)."""
        action = self.engine.codec.parse(turn.text)
        duplicates = 0
        if isinstance(action, ToolCalls):
            calls, duplicates = distinct_calls(action.calls, _call_key)
            if duplicates:
                action = dataclasses.replace(action, calls=tuple(calls))
            run.call_ids = [self._next_call_id(run) for _ in action.calls]
        elif isinstance(action, MalformedToolCall):
            run.call_ids = [self._next_call_id(run)]
        else:
            run.call_ids = []
        run.trace.action_parsed(run.model_step, action, run.call_ids, duplicates=duplicates)
        return action

    def _answered(self, run: _Run) -> dict[CallKey, str]:
        """The calls whose result the conversation holds and would hold again: those run or refused, and those
        refused as ungrounded while no new source has arrived since."""
        unchanged = {key: call_id for key, (call_id, texts) in run.ungrounded.items()
                     if texts == len(run.sources.texts)}
        return {**unchanged, **run.answered}

    def _repeats_only(self, run: _Run, action: ToolCalls) -> bool:
        """Under ``auto``, every call of the turn already has its result (`agent.repeats.only_repeats`)."""
        return run.tool_choice == "auto" and only_repeats(map(_call_key, action.calls), self._answered(run))

    def _refuse_repeats(self, run: _Run, action: ToolCalls) -> None:
        """Roll the turn back (nothing is committed or run) and have the next turn answer from the results."""
        self.engine.rollback()
        answered = self._answered(run)
        run.answer_now = True
        run.resting = frozenset()
        if not run.can_answer:  # no answer yet: a greedy model given the same prompt repeats the
            repeated = frozenset(call.name for call in action.calls)  # same calls, so the next turn offers others
            others = {spec.name for spec in self._specs} - repeated - set(run.blocked)
            run.resting = repeated if others else frozenset()
        run.trace.repeats_refused(run.model_step, [(call_id, call.name, answered[_call_key(call)])
                                                   for call_id, call in zip(run.call_ids, action.calls)],
                                  next_tool_choice="none" if run.can_answer else "auto",
                                  resting=sorted(run.resting))

    def _next_call_id(self, run: _Run) -> str:
        run.n_call_ids += 1
        return f"call-{run.n_call_ids}"

    def _commit_turn(self, run: _Run, action: Action) -> list[str]:
        """Commit the parsed assistant turn (the speculative KV becomes committed)."""
        kind = (EntryKind.ASSISTANT_FINAL if isinstance(action, FinalText) else
                EntryKind.ASSISTANT_TOOL_CALL if isinstance(action, ToolCalls) else
                EntryKind.ASSISTANT_MALFORMED_CALL)
        run.ledger.commit(kind, self.engine.codec.assistant_message(action), step=run.model_step,
                          call_ids=run.call_ids)
        if isinstance(action, ToolCalls) and isinstance(self.tool_choice, str) and run.tool_choice != "none":
            run.tool_choice = "auto"
        return list(run.call_ids)

    def _reject_malformed(self, run: _Run, call_id: str, action: MalformedToolCall) -> _Rejected:
        rejected = _rejection(ResultErrorKind.MALFORMED_CALL, f"{action.reason.value}: {action.detail}")
        run.trace.call_rejected(call_id, None, rejected.kind, rejected.detail, rejected.errors, raw=action.raw)
        return rejected

    def _validate(self, run: _Run, call_id: str, call: ToolCall) -> _Accepted | _Rejected:
        """Resolve the tool (fail closed on unknown names or calls the tool choice forbids), then validate."""
        tool = self.tools.get(call.name)
        if tool is None:
            rejected = _rejection(ResultErrorKind.UNKNOWN_TOOL,
                                  f"no tool named {call.name!r}; available: {[t.name for t in self._specs]}")
        elif run.tool_choice == "none":
            rejected = _rejection(ResultErrorKind.UNKNOWN_TOOL, "tool calls are disabled in this session")
        else:
            checked = validate_arguments(tool.name, tool.compiled_parameters, call.arguments)
            if isinstance(checked, ArgumentErrors):
                rejected = _rejection(ResultErrorKind.INVALID_ARGUMENTS, checked.detail, checked.errors)
            else:
                grounding = ground_arguments(checked.values, tool.parameters, run.sources,
                                             tool_requirement=tool.grounding_requirement)
                if any(g.taints for g in grounding):
                    run.sources.taint(call_id)  # its result grounds no declaration: it was made on invented values
                errors = ungrounded_errors(grounding)
                if not errors:
                    run.trace.call_validated(call_id, checked, grounding)
                    return _Accepted(tool=tool, args=checked)
                rejected = _rejection(ResultErrorKind.INVALID_ARGUMENTS, f"{len(errors)} ungrounded argument"
                                      f"{'s' if len(errors) != 1 else ''} for tool {tool.name!r}", errors)
        run.trace.call_rejected(call_id, call.name, rejected.kind, rejected.detail, rejected.errors, raw=call.raw)
        return rejected

    def _approve(self, run: _Run, call_id: str, accepted: _Accepted) -> _Accepted | _Rejected:
        """Ask the policy; a policy that raises or answers nonsense denies (fail closed, `check_approval`)."""
        decision = check_approval(self.approval, accepted.tool, accepted.args)
        if decision.allowed:
            return accepted
        rejected = _rejection(ResultErrorKind.DENIED_BY_POLICY,
                              f"{accepted.tool.name!r} denied by the approval policy: {decision.reason}")
        run.trace.call_rejected(call_id, accepted.tool.name, rejected.kind, rejected.detail, rejected.errors,
                                raw=None)
        return rejected

    def _one_call_per_step(self, run: _Run, call_id: str, call: ToolCall) -> _Rejected:
        """`parallel_calls` off: a call after the turn's first is counted and traced, never executed."""
        rejected = _rejection(ResultErrorKind.LIMIT_EXCEEDED, "one tool call per step: this call was not executed; "
                              "call it again after reading the first call's result")
        run.trace.call_rejected(call_id, call.name, rejected.kind, rejected.detail, rejected.errors, raw=call.raw)
        return rejected

    def _execute_batch(self, run: _Run, batch: list[tuple[str, ToolCall, _Accepted]]) -> Ending | None:
        """Execute the calls (concurrently when there are several: they are data calls), then reinject every
        result in call order; empties ``batch``. A cancel during execution commits none of the results."""
        if not batch:
            return None
        jobs = [(call_id, accepted, self._start_execution(run, call_id, accepted)) for call_id, _, accepted in batch]
        if len(jobs) == 1:
            outcomes = [job() for _, _, job in jobs]
        else:
            with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="ember-data") as pool:
                outcomes = list(pool.map(lambda job: job(), [job for _, _, job in jobs]))
        executed = [self._finish_execution(run, call_id, accepted, outcome)
                    for (call_id, accepted, _), outcome in zip(jobs, outcomes)]
        calls = [call for _, call, _ in batch]
        batch.clear()
        for n, ((call_id, _, _), call, done) in enumerate(zip(jobs, calls, executed)):
            if ending := self._cancel_point(run, Phase.EXECUTE):
                for (left_id, accepted, _), left in zip(jobs[n:], executed[n:]):
                    run.trace.result_uncommitted(left_id, accepted.tool.name, left.outcome, run.cancel)
                return ending
            # -- reinject --
            self._reinject(run, call_id, call, done)
        return None

    def _start_execution(self, run: _Run, call_id: str, accepted: _Accepted) -> Callable[[], ToolOutcome]:
        """Trace the start and return the execution itself. A call identical to one this run already executed
        (same tool, same validated arguments) is not run again: its earlier outcome is replayed (see `_Run`)."""
        tool = accepted.tool
        timeout_s = self.limits.tool_timeout(tool.timeout_s, self._usage(run))
        run.trace.execution_started(call_id, tool, timeout_s, accepted.args)
        earlier = run.executed.get((tool.name, accepted.args.sha256))
        if earlier is not None:
            return lambda: dataclasses.replace(earlier[1], replayed=True)
        ctx = ToolContext(run_id=run.run_id, call_id=call_id, artifacts=self.artifacts, cancel=run.cancel,
                          linked_runs=[])
        return functools.partial(execute_tool, tool, accepted.args, ctx, timeout_s=timeout_s,
                                 idempotency=self.idempotency)

    def _finish_execution(self, run: _Run, call_id: str, accepted: _Accepted, outcome: ToolOutcome) -> _Executed:
        tool, key = accepted.tool, (accepted.tool.name, accepted.args.sha256)
        result = outcome.to_result()
        earlier = run.executed.get(key)
        if outcome.replayed and earlier is not None:
            result["note"] = (f"identical to {earlier[0]}: its result is repeated, the tool was not run again; "
                              "answer from the results you have")
        elif outcome.started:
            run.executed.setdefault(key, (call_id, outcome))
        content, truncated = results.result_content(result, max_bytes=self.limits.max_result_bytes)
        run.trace.execution_finished(call_id, tool.name, outcome, result, content, truncated)
        if not outcome.replayed:
            for ref in outcome.artifacts:
                run.trace.artifact_written(tool_step(call_id), call_id, tool.name, ref)
        return _Executed(outcome, content, truncated)

    def _reinject(self, run: _Run, call_id: str, call: ToolCall, result: _Executed | _Rejected) -> None:
        """Render the bounded result through the codec and commit it as the call's tool message."""
        if isinstance(result, _Rejected):
            kind, ok = EntryKind.TOOL_REJECTION, False
            content, truncated = results.result_content(result.result, max_bytes=self.limits.max_result_bytes)
        else:
            kind, ok, content, truncated = EntryKind.TOOL_RESULT, result.outcome.ok, result.content, result.truncated
        message = self.engine.codec.tool_result_message(call, content)
        run.ledger.commit(kind, message, step=tool_step(call_id), call_ids=(call_id,), tool=call.name or None,
                          ok=ok, truncated=truncated)
        if not call.name:
            return
        if isinstance(result, _Rejected) and any(e.kind is ValidationErrorKind.UNGROUNDED for e in result.errors):
            run.ungrounded[_call_key(call)] = (call_id, len(run.sources.texts))  # grounded later, it may run
        else:
            run.answered.setdefault(_call_key(call), call_id)

    # -- exits ---------------------------------------------------------------------------------------------------

    def _end(self, run: _Run, ending: Ending) -> RunResult:
        self._trace_terminal(run, ending)
        return self._result(run, ending)

    def _trace_terminal(self, run: _Run, ending: Ending) -> None:
        run.trace.terminal(ending, self._usage(run), ledger_entries=len(run.ledger), cancel=run.cancel)

    def _result(self, run: _Run, ending: Ending) -> RunResult:
        return RunResult(outcome=ending.outcome, limit=ending.breach.kind if ending.breach else None,
                         final_text=ending.final_text, claims=ending.claims, messages=run.ledger.messages(),
                         ledger=run.ledger.entries,
                         steps=run.steps, tool_calls=run.tool_calls, run_id=run.run_id, detail=ending.detail,
                         phase=ending.phase)


# -- small pure helpers ------------------------------------------------------------------------------------------


def _rejection(kind: ResultErrorKind, detail: str, errors: tuple[ArgumentError, ...] = ()) -> _Rejected:
    return _Rejected(kind=kind, detail=detail, result=results.error_result(kind, detail, errors), errors=errors)


def _grounding_tools(tools: ToolRegistry) -> frozenset[str]:
    return frozenset(t.name for t in tools if t.constrained and t.declares_grounding)


def _call_key(call: ToolCall) -> CallKey:
    return call_key(call.name, call.arguments)


def _malformed_as_call(action: MalformedToolCall) -> ToolCall:
    """The codec renders a rejection as the answer to *a* call; a malformed one has no usable name."""
    return ToolCall(name="", arguments={}, raw=action.raw)
