"""Bounded execution: one validated call run under approval, idempotency and a watchdog, as a `ToolOutcome`.

    ValidatedArguments ─► execute_tool ─► approval? ─► idempotency replay? ─► watchdog ─► ToolOutcome
                            (TypeError for                                    │  worker thread runs
                             anything else)                                   │  tool.function(args, ctx)
                                                                              ├─ done    → ok | execution_failed
                                                                              │            | result_not_serializable
                                                                              ├─ timeout → worker detached
                                                                              └─ cancel  → worker detached
                                                            (orchestration: its nested run is told to stop and
                                                             waited for, since it shares the parent's engine)

The function runs in a daemon worker thread under a watchdog. Idle workers are parked and reused (starting a
thread costs milliseconds on a busy machine, waking a parked one microseconds), so thread-local state may outlive
a call; the caller's contextvars are copied into every call. The watchdog blocks on the worker's completion and
wakes the moment it finishes; it looks at ``ctx.cancel`` every ``_POLL_S``. On timeout or cancel the worker is
*detached*, not preempted (Python cannot stop a thread safely): its late result is discarded, its ``ctx.cancel``
reads as set so cooperative code can stop, later writes through ``ctx.artifacts`` are refused, and the thread is
reused only after the tool returns. Exceptions are contained: every ``BaseException`` a tool raises,
``SystemExit`` and ``KeyboardInterrupt`` included, becomes ``execution_failed`` with its type and message (in a
worker thread they could not stop the process anyway; a real Ctrl-C reaches the waiting thread, where it
propagates after the worker is detached). A tool can fail with a clean model-facing message by raising
`ToolFailure`. Results must be JSON (no NaN/Infinity); they are copied through JSON so the outcome cannot change
later.

Refuses (raises): raw arguments (`TypeError`), arguments validated for another tool or schema
(`ArgumentsMismatchError`).
"""

from __future__ import annotations

import contextvars
import functools
import json
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from agent.errors import ArgumentsMismatchError
from agent.json_depth import MAX_JSON_DEPTH, shown_path, too_deep
from agent.results import ResultErrorKind
from agent.schema import ValidatedArguments
from agent.tool.approval import ApprovalPolicy, check_approval
from agent.tool import definition
from agent.tool.definition import Tool, ToolContext, ToolFailure, ToolKind
from agent.tool.idempotency import IdempotencyStore
from agent.tool.outcome import ToolOutcome
from constrained import CancelSignal

if TYPE_CHECKING:
    from agent.artifact import ArtifactRef, ArtifactStore

__all__ = ["execute_tool"]

_POLL_S: Final = 0.01
"""How often the watchdog looks at ``ctx.cancel`` (it only has ``is_set()``). Completion is not polled: the
waiter blocks on the job's done lock and wakes the moment the worker releases it."""
_MAX_IDLE_WORKERS: Final = 8
"""Parked worker threads kept for reuse; more finish when their call does."""
_MAX_DETAIL_CHARS: Final = 2000
_RESULT_ENCODER: Final = json.JSONEncoder(allow_nan=False)
"""``json.dumps(value, allow_nan=False)`` without building an encoder per call (encoders keep no call state)."""


class _RecordingArtifacts:
    """Forwards to the run's store, records what this call published, refuses writes once detached."""

    def __init__(self, store: ArtifactStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._refs: list[ArtifactRef] = []
        self._closed = False

    def write(self, name: str, data: bytes) -> ArtifactRef:
        with self._lock:
            if self._closed:
                raise RuntimeError("this tool call was detached (timed out or cancelled); its writes are refused")
            ref = self._store.write(name, data)
            self._refs.append(ref)
            return ref

    def close(self) -> tuple[ArtifactRef, ...]:
        with self._lock:
            self._closed = True
            return tuple(self._refs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class _Worker:
    """One reusable daemon thread: runs one job at a time, parks itself in the pool (or ends), then releases the
    job's ``done`` lock, so the waiter's next call finds it parked instead of starting a thread.

    Handoff. The worker sleeps in ``os.read`` on its own pipe; `give` wakes it with a one-byte ``os.write``. Both
    calls release the GIL around the system call, so the woken worker can take the GIL at once instead of waking
    only to wait for it while the caller is still on its way to block (a `threading.Lock`/`Condition` handoff
    costs two extra context switches per call). Each job brings its own ``done`` lock, held by the waiter and
    released by the worker: a per-job lock means the late completion of a detached job can never be mistaken for
    the completion of the worker's next one. Releasing ``done`` is the worker's last step before it blocks again.
    """

    __slots__ = ("_pool", "_wake_r", "_wake_w", "_job", "_thread")

    def __init__(self, pool: _WorkerPool) -> None:
        self._pool = pool
        self._wake_r, self._wake_w = os.pipe()
        self._job: tuple[Callable[[], None], str, Any] | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True, name="ember-tool-idle")

    def give(self, job: Callable[[], None], name: str, done: Any) -> None:
        self._job = (job, name, done)
        if self._thread.ident is None:
            try:
                self._thread.start()
            except BaseException:  # e.g. "can't start new thread": the job never runs, the caller sees why
                self._pool.retire(self)
                raise
        os.write(self._wake_w, b"\0")

    def close(self) -> None:
        """Close the wake pipe (the thread has ended, never started, or does not exist after a fork)."""
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def _loop(self) -> None:
        me = threading.current_thread()
        pool, wake = self._pool, self._wake_r
        try:
            while os.read(wake, 1):
                job, name, done = self._job  # type: ignore[misc]
                self._job = None
                me.name = name
                parked = False
                try:
                    job()  # the job contains every exception itself
                except BaseException:  # pragma: no cover - defensive: a worker never dies without releasing done
                    pass
                finally:
                    me.name = "ember-tool-idle"
                    try:
                        parked = pool.park(self)
                    finally:
                        done.release()
                if not parked:
                    return
        finally:
            pool.retire(self)


class _WorkerPool:
    """Parked tool worker threads. A detached worker (timed out, cancelled) rejoins only once its call ends."""

    def __init__(self, max_idle: int) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._live: set[_Worker] = set()
        self._max_idle = max_idle

    def submit(self, job: Callable[[], None], name: str, done: Any) -> None:
        """Run ``job`` on a parked worker (or a new one); the held lock ``done`` is released once it returned."""
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            worker = _Worker(self)
            with self._lock:
                self._live.add(worker)
        worker.give(job, name, done)

    def park(self, worker: _Worker) -> bool:
        with self._lock:
            if len(self._idle) >= self._max_idle:
                return False
            self._idle.append(worker)
            return True

    def retire(self, worker: _Worker) -> None:
        """A worker's thread ends: forget it and close its pipe."""
        with self._lock:
            self._live.discard(worker)
        worker.close()

    def forget(self) -> None:
        """After fork: the parked and running threads do not exist in the child; close the pipes it inherited."""
        for worker in self._live:
            worker.close()
        self._lock = threading.Lock()
        self._idle = []
        self._live = set()


_POOL = _WorkerPool(_MAX_IDLE_WORKERS)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_POOL.forget)


class _CallCancel:
    """The run's cancel signal, also set once this call is detached (a flag: it is only ever set, and reading
    or writing one attribute is atomic)."""

    __slots__ = ("_outer", "_detached")

    def __init__(self, outer: CancelSignal) -> None:
        self._outer = outer
        self._detached = False

    def is_set(self) -> bool:
        return self._detached or self._outer.is_set()

    @property
    def reason(self) -> str:
        """The run's cancel reason, or why this call was detached."""
        if self._outer.is_set():
            return self._outer.reason
        return "this call was detached (timed out or cancelled)" if self._detached else ""

    def detach(self) -> None:
        self._detached = True


def _describe(exc: BaseException) -> str:
    try:
        message = str(exc)
    except Exception:
        message = "<unprintable>"
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text if len(text) <= _MAX_DETAIL_CHARS else text[:_MAX_DETAIL_CHARS - 1] + "…"


def _effective_timeout(run_timeout: float | None, tool_timeout: float | None) -> float | None:
    if run_timeout is not None and not (isinstance(run_timeout, (int, float)) and run_timeout > 0):
        raise ValueError(f"timeout_s must be a positive number or None, got {run_timeout!r}")
    bounds = [t for t in (run_timeout, tool_timeout) if t is not None]
    return min(bounds) if bounds else None


def execute_tool(tool: Tool, args: ValidatedArguments, ctx: ToolContext, *, timeout_s: float | None,
                 idempotency: IdempotencyStore | None = None,
                 approval: ApprovalPolicy | None = None) -> ToolOutcome:
    """Run one validated call under approval, idempotency and a watchdog. Never raises for tool faults.

    Args:
        tool: The tool to run.
        args: Arguments `agent.schema.validate_arguments` produced for this tool's exact schema.
        ctx: The call's context (its ``cancel`` is watched while the tool runs).
        timeout_s: The run's per-call timeout (the tighter of it and ``tool.timeout_s`` applies); None: only
            the tool's own, if any.
        idempotency: Store that makes action tools run at most once per key.
        approval: Policy consulted first; a denial returns ``denied_by_policy`` without running anything.

    Raises:
        TypeError: ``args`` is not `ValidatedArguments` (raw model output never reaches a tool), or ``tool`` /
            ``ctx`` have the wrong type.
        ArgumentsMismatchError: ``args`` were validated for another tool or another schema.
    """
    if not isinstance(tool, Tool):
        raise TypeError(f"execute_tool needs a Tool, got {type(tool).__name__}")
    if not isinstance(args, ValidatedArguments):
        raise TypeError(f"execute_tool accepts only ValidatedArguments (from agent.schema.validate_arguments), "
                        f"got {type(args).__name__}; raw model output is never executable input")
    if args.tool_name != tool.name:
        raise ArgumentsMismatchError(tool.name, args.tool_name, "they were validated for a different tool")
    if args.schema_sha256 != tool.schema_sha256:
        raise ArgumentsMismatchError(tool.name, args.tool_name, "they were validated against a different schema")
    if not isinstance(ctx, ToolContext):
        raise TypeError(f"execute_tool needs a ToolContext, got {type(ctx).__name__}")
    limit = _effective_timeout(timeout_s, tool.timeout_s)

    if approval is not None:
        decision = check_approval(approval, tool, args)
        if not decision.allowed:
            return ToolOutcome(ok=False, error_kind=ResultErrorKind.DENIED_BY_POLICY, detail=decision.reason)
    if ctx.cancel.is_set():
        return ToolOutcome(ok=False, error_kind=ResultErrorKind.CANCELLED, detail="the run was cancelled before "
                                                                                 "the tool started")
    claim_key = None
    if idempotency is not None and tool.kind is ToolKind.ACTION:
        verdict, payload = idempotency._claim(tool, args)
        if verdict == "replay":
            return payload
        if verdict == "conflict":
            return ToolOutcome(ok=False, error_kind=ResultErrorKind.INVALID_ARGUMENTS, detail=payload)
        claim_key = payload
    outcome: ToolOutcome | None = None
    try:
        outcome = _run_watched(tool, args, ctx, limit)
    finally:
        if claim_key is not None:
            # interrupted while waiting (KeyboardInterrupt in this thread): the worker did start
            settled = outcome or ToolOutcome(ok=False, error_kind=ResultErrorKind.CANCELLED, started=True,
                                             detail="interrupted while the tool was running")
            idempotency._settle(claim_key, settled)  # type: ignore[union-attr]
    return outcome


def _run_watched(tool: Tool, args: ValidatedArguments, ctx: ToolContext, limit: float | None) -> ToolOutcome:
    recording = _RecordingArtifacts(ctx.artifacts) if ctx.artifacts is not None else None
    call_cancel = _CallCancel(ctx.cancel)
    call_ctx = ToolContext(run_id=ctx.run_id, call_id=ctx.call_id, artifacts=recording,  # type: ignore[arg-type]
                           cancel=call_cancel, linked_runs=[])
    box: list[Any] = [None, None]  # [value, exception]
    done = threading.Lock()
    done.acquire()  # held here, released by the worker once the job returned (a plain lock, taken here)

    def work() -> None:
        try:
            box[0] = tool.function(args, call_ctx)
        except BaseException as exc:  # contained: see the module docstring
            box[1] = exc

    context = contextvars.copy_context()
    outer_cancel = ctx.cancel
    start = time.perf_counter()
    deadline = None if limit is None else start + limit
    detach_kind: ResultErrorKind | None = None
    finished = False
    try:
        _POOL.submit(functools.partial(context.run, work), f"ember-tool-{tool.name}-{ctx.call_id}", done)
        while True:
            wait = _POLL_S if deadline is None else min(_POLL_S, deadline - time.perf_counter())
            if done.acquire(timeout=max(0.0, wait)):
                finished = True
                break
            if outer_cancel.is_set():
                detach_kind = ResultErrorKind.CANCELLED
                break
            if deadline is not None and time.perf_counter() >= deadline:
                detach_kind = ResultErrorKind.TIMEOUT
                break
        if detach_kind is not None and tool.kind is ToolKind.ORCHESTRATION:
            # A nested session stops at its next boundary or token once its cancel is set, and it shares the
            # parent's engine: wait for it, so no child runs on after the parent moves on.
            call_cancel.detach()
            done.acquire()
            finished = True
    finally:
        if not finished and not done.acquire(blocking=False):
            call_cancel.detach()
        artifacts = recording.close() if recording is not None else ()
        linked = tuple(call_ctx.linked_runs)
        ctx.linked_runs.extend(linked)
    duration_ms = (time.perf_counter() - start) * 1000.0
    common = {"duration_ms": duration_ms, "artifacts": artifacts, "linked_runs": linked, "started": True}
    after = ("the nested run was stopped and its result is discarded" if finished
             else "the worker was detached and its result will be discarded")
    if detach_kind is ResultErrorKind.TIMEOUT:
        effect = "; as an action, its effect may already have happened" if tool.kind is ToolKind.ACTION else ""
        return ToolOutcome(ok=False, error_kind=detach_kind, detail=f"tool {tool.name!r} did not finish within "
                           f"{limit:g} s; {after}{effect}", **common)
    if detach_kind is ResultErrorKind.CANCELLED:
        return ToolOutcome(ok=False, error_kind=detach_kind, detail="the run was cancelled while the tool was "
                           f"running; {after}", **common)
    exc = box[1]
    if exc is not None:
        if isinstance(exc, ToolFailure):
            return ToolOutcome(ok=False, error_kind=exc.kind, detail=exc.detail, **common)
        return ToolOutcome(ok=False, error_kind=ResultErrorKind.EXECUTION_FAILED, detail=_describe(exc), **common)
    try:
        path = too_deep(box[0], MAX_JSON_DEPTH)  # before the recursive encoder, and what copies the value later
        if path is not None:
            return ToolOutcome(ok=False, error_kind=ResultErrorKind.RESULT_NOT_SERIALIZABLE,
                               detail=f"the tool returned a value nested deeper than the {MAX_JSON_DEPTH} levels a "
                               f"result may nest (at {shown_path(('result', *path))})", **common)  # fmt: skip
        value = json.loads(_RESULT_ENCODER.encode(box[0]))
    except Exception as exc:  # TypeError, ValueError, RecursionError, or whatever a hostile __iter__/items raises
        return ToolOutcome(ok=False, error_kind=ResultErrorKind.RESULT_NOT_SERIALIZABLE,
                           detail=f"the tool returned a value that is not JSON: {_describe(exc)}", **common)
    return ToolOutcome(ok=True, value=value, **common)


definition.register_executor(execute_tool)  # what `Tool.execute` calls (see its docstring)
