"""The model worker: one loaded model, one engine per slot, a bounded queue of jobs, each a speculative turn rolled
back.

Owns the order in which requests reach the model and everything that happens to one while it runs: the bounded
queue (full: `ApiError` 429 with ``Retry-After``), which free slot takes the next job (the one whose KV shares the
longest prefix with its prompt), the per-request deadline and the client's disconnect (both trip the turn's cancel;
a cancelled turn stops at the next token), the prompt-length check before any evaluation, the shared prefix (disk
prefix cache; with several slots, a holder sequence of the batch evaluated once and shared into each slot), the turn
itself (`ChatModelEngine.run_turn` with the request's tools, choice and pattern), the content deltas a stream may
show (`ProseGuard`: no call markup), and the parsed answer. Refuses to let requests see each other: after every
job, whatever happened, its engine rolls the turn back (its slot's sequence only). Never executes a tool.

    submit(request) ─► queue (bounded) ─► one thread per engine: _run(job, free engine)
        prompt ids ─► context check ─► shared prefix ─► engine.run_turn(on_text=deltas, cancel=job)
        ─► parse (codec) ─► Done(Answer) | Failed(ApiError) | Gone      ─► engine.rollback() (always)
    events reach the job's asyncio queue through its loop (call_soon_threadsafe)

With one engine the model is a `LlamaModel` and turns run one at a time; with several (``--parallel N``) each
engine's model is a slot of one `constrained.BatchedModel`, and the turns of all running jobs are decoded together,
one ``llama_batch`` per step: a job that finishes frees its slot for the next one in the queue.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import queue
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agent.engine import ChatModelEngine, ContextWindowError, prompt_tools
from agent.protocol.base import (Codec, FinalText, MalformedToolCall, MessageFormatError, ProtocolError, ToolCall,
                                 ToolCalls, ToolChoice)
from agent.protocol.streaming import CallScanner, ProseGuard, ScannedCall
from agent.serve.errors import ApiError
from agent.serve.prefix_cache import PrefixCache, common_prefix_length
from agent.repeats import call_key, with_repeat_note
from agent.serve.request import ChatRequest
from constrained import BatchDecodeError, Slot

__all__ = ["Answer", "CallDelta", "Delta", "Done", "Failed", "Gone", "Job", "ModelWorker", "ToolCallOut"]

log = logging.getLogger("ember.serve")


@dataclass(frozen=True, kw_only=True)
class ToolCallOut:
    """One call as the client receives it (a request to call, never executed here)."""

    id: str
    name: str
    arguments: str
    """The arguments object as a JSON string (OpenAI's wire form)."""


@dataclass(frozen=True, kw_only=True)
class Answer:
    """What a finished turn answers."""

    content: str | None
    """The prose or JSON answer; None for a turn that is only calls."""
    tool_calls: tuple[ToolCallOut, ...] = ()
    finish_reason: str = "stop"
    """``stop``, ``length`` or ``tool_calls``."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    """Prompt tokens whose KV was reused (in process or from the disk prefix cache)."""
    seconds: float = 0.0


@dataclass(frozen=True)
class Delta:
    """Content text a stream may show now."""

    content: str


@dataclass(frozen=True, kw_only=True)
class CallDelta:
    """Part of a call a stream may show now: its ``id`` and ``name`` once (first), then ``arguments`` fragments."""

    index: int
    id: str | None
    name: str | None
    arguments: str


@dataclass(frozen=True)
class Done:
    answer: Answer


@dataclass(frozen=True)
class Failed:
    error: ApiError


@dataclass(frozen=True)
class Gone:
    """The client disconnected; the turn was cancelled and rolled back."""


Event = Delta | CallDelta | Done | Failed | Gone


@dataclass(eq=False)
class Job:
    """One request in the queue; also the turn's cancel signal (``is_set()``, ``reason``)."""

    request: ChatRequest
    loop: asyncio.AbstractEventLoop
    deadline: float
    """``time.monotonic()`` past which the turn is cancelled and answered 504."""
    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    disconnected: threading.Event = field(default_factory=threading.Event)
    stop_hit: bool = False
    """A stop sequence appeared: the turn ends there (finish_reason ``stop``)."""

    def cancel(self) -> None:
        """The client is gone: stop generating at the next token."""
        self.disconnected.set()

    def is_set(self) -> bool:
        return self.disconnected.is_set() or self.stop_hit or time.monotonic() > self.deadline

    @property
    def reason(self) -> str:
        """Why the turn stops (`constrained.decoding.CancelSignal`): "" while it runs on."""
        if self.disconnected.is_set():
            return "the client disconnected"
        if self.stop_hit:
            return "a stop sequence appeared"
        return "the request's deadline passed" if time.monotonic() > self.deadline else ""

    def emit(self, event: Event) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:  # the event loop is closed: the server is shutting down
            pass


class ModelWorker:
    """Owns the engines (one per slot); runs one job per engine at a time, each on its own thread."""

    def __init__(self, engine: ChatModelEngine | Sequence[ChatModelEngine], *, model_ids: tuple[str, ...],
                 max_queue: int = 16, timeout_s: float = 600.0, prefix_cache: PrefixCache | None = None,
                 refuse_repeated_calls: bool = True) -> None:
        if max_queue < 1:
            raise ValueError(f"max_queue must be >= 1, got {max_queue}")
        engines = (engine,) if isinstance(engine, ChatModelEngine) else tuple(engine)
        if not engines:
            raise ValueError("a worker needs at least one engine")
        self.engines = engines
        """One engine per slot: a `LlamaModel`'s, or each slot of one `constrained.BatchedModel`."""
        self.model_ids = model_ids
        """Names the served model answers to; the first is its id in ``/v1/models``."""
        self.max_queue = max_queue
        """Jobs that may wait while the slots run; one more is refused with 429."""
        self.timeout_s = timeout_s
        """Per-request deadline, from submission (queue wait included)."""
        self.prefix_cache = prefix_cache
        self.refuse_repeated_calls = refuse_repeated_calls
        """Under ``auto``, a call that repeats one the conversation has answered is not returned (see
        docs/serve.md, "Repeated calls")."""
        self.completed = 0
        """Jobs finished (answered, failed or cancelled)."""
        self.cancelled = 0
        """Jobs whose client disconnected (their turn stopped and was rolled back)."""
        self.last: Event | None = None
        """The last job's final event (for tests and the benchmark)."""
        self._queue: queue.Queue[Job | None] = queue.Queue(maxsize=max_queue)
        self._free = list(engines)
        self._running = 0
        self._state = threading.Condition()
        self._mean_s = 1.0
        self._threads = [threading.Thread(target=self._loop, name=f"ember-model-worker-{i}", daemon=True)
                         for i in range(len(engines))]
        for thread in self._threads:
            thread.start()

    @property
    def engine(self) -> ChatModelEngine:
        """The first engine (the only one without ``--parallel``)."""
        return self.engines[0]

    @property
    def parallel(self) -> int:
        """Jobs that run at once (slots)."""
        return len(self.engines)

    # -- the client side ---------------------------------------------------------------------------------------

    def submit(self, request: ChatRequest, loop: asyncio.AbstractEventLoop) -> Job:
        """Queue a request.

        Raises:
            ApiError: 429 when the queue is full, with ``Retry-After`` estimated from recent jobs.
        """
        job = Job(request=request, loop=loop, deadline=time.monotonic() + self.timeout_s)
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            wait = max(1, math.ceil(self._mean_s * (self._queue.qsize() + 1) / self.parallel))
            raise ApiError(429, f"the request queue is full ({self.max_queue} waiting); retry in about {wait} s",
                           code="queue_full", headers={"Retry-After": str(wait)}) from None
        return job

    @property
    def busy(self) -> bool:
        """A job is running on the model now."""
        return self._running > 0

    @property
    def running(self) -> int:
        """Jobs running now (at most `parallel`)."""
        return self._running

    @property
    def waiting(self) -> int:
        """Jobs in the queue, not yet started."""
        return self._queue.qsize()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no job runs or waits; False on timeout."""
        with self._state:
            return self._state.wait_for(lambda: not self._running and self._queue.empty(), timeout)

    def close(self, *, unload: bool = False) -> None:
        """Stop the threads after the jobs already queued; with ``unload``, free the model too."""
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join(timeout=30)
        if unload:
            model = self.engine.model
            (model.batch if isinstance(model, Slot) else model).close()

    # -- the model side ----------------------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            engine = self._take_engine(job)
            started = time.monotonic()
            event: Event = Failed(ApiError(500, "internal error: the job did not finish", code="internal_error"))
            try:
                event = self._run(job, engine)
            finally:
                engine.rollback()
                with self._state:
                    self._free.append(engine)
                    self._running -= 1
                    self._mean_s = 0.8 * self._mean_s + 0.2 * (time.monotonic() - started)
                    self.completed += 1
                    if isinstance(event, Gone):
                        self.cancelled += 1
                    self.last = event
                    self._state.notify_all()
            job.emit(event)

    def _take_engine(self, job: Job) -> ChatModelEngine:
        """A free engine (one always is: one thread per engine), the one whose KV shares the longest prefix with the
        job's prompt (a conversation's next turn goes back to the slot that holds its history)."""
        with self._state:
            self._running += 1
            if len(self._free) == 1:
                return self._free.pop()
            free = list(self._free)
        try:
            request = job.request
            prompt = free[0].prompt_tokens(request.messages, prompt_tools(list(request.tools), request.tool_choice))
        except Exception:  # refused later, with its own error, by the engine that runs it
            prompt = []
        with self._state:
            best = max(self._free, key=lambda e: common_prefix_length(e.model.tokens, prompt))
            self._free.remove(best)
            return best

    def _run(self, job: Job, engine: ChatModelEngine) -> Event:
        if job.disconnected.is_set():
            return Gone()
        try:
            if job.is_set():
                raise _deadline(self.timeout_s)
            return Done(self._answer(job, engine))
        except ApiError as error:
            return Failed(error)
        except _ClientGone:
            return Gone()
        except Exception as error:  # a bug: answer 500, keep serving
            log.exception("request failed")
            return Failed(ApiError(500, f"internal error: {type(error).__name__}: {error}", code="internal_error"))

    def _answer(self, job: Job, engine: ChatModelEngine) -> Answer:
        request = job.request
        answered = request.answered_calls if self.refuse_repeated_calls and request.tool_choice == "auto" \
            else frozenset()
        answer, stream, spent = self._turn(job, engine, request.messages, request.tool_choice, answered)
        if stream.dropped and not answer.tool_calls and not stream.showed_content:
            # Every call the model wrote repeats one the conversation has answered: it would loop on it (a small
            # model does, measured). The turn is written again under "none", the last result carrying a note
            # (seen by the model only), as an answer from the results it has. (Had the client seen prose before
            # those calls, that prose is the answer.)
            engine.rollback()
            answer, stream, _ = self._turn(job, engine, with_repeat_note(request.messages), "none", frozenset())
            answer = replace(answer, completion_tokens=answer.completion_tokens + spent)
        stream.finish(answer)
        return answer

    def _turn(self, job: Job, engine: ChatModelEngine, messages: Sequence[dict[str, Any]], tool_choice: ToolChoice,
              answered: frozenset[tuple[str, str]]) -> tuple[Answer, _TurnStream, int]:
        """One decoded turn of ``messages`` under ``tool_choice``, parsed; its stream (not finished) and its token
        count."""
        request = job.request
        model = engine.model
        tools = list(request.tools)
        shown = prompt_tools(tools, tool_choice)
        try:
            prompt = engine.prompt_tokens(messages, shown)
        except (MessageFormatError, ProtocolError) as error:
            index = getattr(error, "index", None)
            raise ApiError(400, str(error), param="messages" if index is None else f"messages[{index}]",
                           code="invalid_messages") from None
        room = model.n_ctx - len(prompt)
        max_tokens = request.max_tokens if request.max_tokens is not None else room
        if max_tokens > room or room < 1:
            raise _context_error(ContextWindowError(len(prompt), max_tokens, model.n_ctx), request)
        # A slot's engine shares the prefix itself (evaluated once for the batch, kept in this cache); one sequence's
        # prefix is restored here before the turn and saved after it.
        cache = None if isinstance(model, Slot) else self.prefix_cache
        lone = cache is not None
        prefix_len = engine.shared_prefix_length(messages, shown, prompt) if lone else 0
        if cache is not None:
            cache.restore(model, prompt, prefix_len)
        reused_before = common_prefix_length(model.tokens, prompt)
        calls_possible = request.calls_possible and tool_choice != "none"
        stream = _TurnStream(job, engine.codec if calls_possible else None, answered)
        engine.sampling = request.sampling
        try:
            turn = engine.run_turn(messages, tools=tools, tool_choice=tool_choice,
                                   max_tokens=max_tokens, cancel=job, on_text=stream.feed,
                                   final_pattern=request.final_pattern, parallel_calls=request.parallel_calls)
        except ContextWindowError as error:
            raise _context_error(error, request) from None
        except Exception as error:
            from constrained.errors import BudgetTooSmallError

            if isinstance(error, BudgetTooSmallError):
                raise ApiError(400, f"max_tokens={error.budget} cannot fit the shortest answer the constraints "
                               f"allow ({error.needed} tokens); raise max_tokens", param="max_tokens",
                               code="max_tokens_too_small") from None
            if isinstance(error, BatchDecodeError):
                log.error("request failed: %s", error)
                raise ApiError(500, f"the model failed to evaluate this request: {error}",
                               code="decode_failed") from None
            raise
        if cache is not None and reused_before < prefix_len:
            cache.save(model, prompt, prefix_len)
        if turn.finish_reason == "cancelled" and not job.stop_hit:
            if job.disconnected.is_set():
                raise _ClientGone()
            raise _deadline(self.timeout_s)
        answer = self._parse(engine, request, calls_possible, turn.text, stream)
        finish = answer.finish_reason if answer.tool_calls else ("length" if turn.finish_reason == "length"
                                                                  else "stop")
        answer = replace(answer, finish_reason=finish, prompt_tokens=turn.n_prompt_tokens,
                         completion_tokens=turn.n_output_tokens, cached_tokens=turn.n_reused_tokens,
                         seconds=turn.seconds)
        return answer, stream, turn.n_output_tokens

    def _parse(self, engine: ChatModelEngine, request: ChatRequest, calls_possible: bool, text: str,
               stream: _TurnStream) -> Answer:
        """The finished turn as an answer: calls (less repeats of answered ones), prose, or the JSON document."""
        if stream.stop_at is not None:
            return Answer(content=text[: stream.stop_at])
        if not calls_possible:
            return Answer(content=text)
        action = engine.codec.parse(text)
        offered = {t.name for t in request.tools}
        if isinstance(action, ToolCalls) and all(c.name in offered for c in action.calls):
            written = stream.scanned(text)
            stream.dropped.update(i for i, c in enumerate(action.calls) if stream.repeats(c.name, c.arguments))
            kept = [(i, c) for i, c in enumerate(action.calls) if i not in stream.dropped]
            calls = tuple(ToolCallOut(id=stream.call_id(out), name=c.name, arguments=_arguments_text(c, written, i))
                          for out, (i, c) in enumerate(kept))
            return Answer(content=action.text or None, tool_calls=calls,
                          finish_reason="tool_calls" if calls else "stop")
        if isinstance(action, FinalText):
            return Answer(content=action.text)
        if request.final_pattern is not None:  # a JSON answer: under auto its "{" first looked like a bare call
            return Answer(content=text)
        detail = action.detail if isinstance(action, MalformedToolCall) else "a call to a tool that is not offered"
        raise ApiError(500, f"the model's turn did not parse although it was constrained: {detail}",
                       code="malformed_turn")


class _TurnStream:
    """Turns the growing turn text into stream events: content deltas (no call markup, nothing past a stop
    sequence), then each call's id and name once and its arguments as the model writes them."""

    def __init__(self, job: Job, codec: Codec | None, answered: frozenset[tuple[str, str]] = frozenset()) -> None:
        self._job = job
        self._guard = ProseGuard(codec) if codec is not None else None
        self._scanner = CallScanner(codec) if codec is not None else None
        self._answered = answered
        self._answered_names = {name for name, _ in answered}
        self.dropped: set[int] = set()
        """Calls (by their place in the turn) that repeat an answered call: never shown."""
        self._stops = job.request.stop
        self._hold = max((len(s) for s in self._stops), default=1) - 1
        self._text = ""
        self._safe = ""
        """The content that may be shown so far."""
        self._sent = 0
        self._ids: list[str] = []
        self._shown: list[str | None] = []
        """Per call: the arguments text streamed so far; None before its id and name were sent."""
        self.stop_at: int | None = None
        """Where a stop sequence begins in the turn text, once one appeared."""
        self._streaming = job.request.stream
        self._emit: Callable[[Event], None] = job.emit if self._streaming else (lambda event: None)

    def feed(self, piece: str) -> None:
        if self.stop_at is not None:
            return
        self._text += piece
        if self._guard is not None:
            safe = self._guard.safe_prefix(self._text)
        elif self._stops:
            found = [at for at in (self._text.find(s) for s in self._stops) if at != -1]
            if found:
                self.stop_at = min(found)
                self._job.stop_hit = True
                safe = self._text[: self.stop_at]
            else:
                safe = self._text[: len(self._text) - self._hold]
        else:
            safe = self._text
        self._safe = safe
        self._show_content()
        if self._streaming and self._scanner is not None:
            shown = 0
            for index, call in enumerate(self._scanner.feed(self._text)):
                if index in self.dropped:
                    continue
                if call.name is None or (call.name in self._answered_names and not call.complete):
                    break  # a call that may repeat an answered one is shown once it is known not to
                if call.complete and call.name in self._answered_names and self._repeats_text(call):
                    self.dropped.add(index)
                    continue
                self._send_call(shown, call.name, call.arguments)
                shown += 1

    def _show_content(self) -> None:
        if len(self._safe) > self._sent:
            self._emit(Delta(self._safe[self._sent:]))
            self._sent = len(self._safe)

    @property
    def showed_content(self) -> bool:
        """The client has seen content of this turn (so it cannot be written again)."""
        return self._streaming and self._sent > 0

    def repeats(self, name: str, arguments: dict[str, Any]) -> bool:
        """The call repeats one whose result the conversation already holds."""
        return name in self._answered_names and call_key(name, arguments) in self._answered

    def _repeats_text(self, call: ScannedCall) -> bool:
        try:
            return self.repeats(call.name or "", json.loads(call.arguments))
        except ValueError:
            return False

    def scanned(self, text: str) -> list[ScannedCall]:
        """The calls of the finished turn as the model wrote them."""
        return [] if self._scanner is None else self._scanner.feed(text)

    def call_id(self, index: int) -> str:
        """The id of the turn's call number ``index`` (minted once, when it is first streamed or answered)."""
        while len(self._ids) <= index:
            self._ids.append(f"call_{secrets.token_hex(12)}")
            self._shown.append(None)
        return self._ids[index]

    def _send_call(self, index: int, name: str, arguments: str) -> None:
        call_id = self.call_id(index)
        shown = self._shown[index]
        if shown is None:
            self._emit(CallDelta(index=index, id=call_id, name=name, arguments=""))
            shown = ""
        if not arguments.startswith(shown):
            log.error("call %d: arguments %r do not extend the streamed %r", index, arguments, shown)
        elif len(arguments) > len(shown):
            self._emit(CallDelta(index=index, id=None, name=None, arguments=arguments[len(shown):]))
            shown = arguments
        self._shown[index] = shown

    def finish(self, answer: Answer) -> None:
        """Send what the stream has not shown yet: held-back content, calls or arguments not yet streamed."""
        content = answer.content or ""
        if not content.startswith(self._text[: self._sent]):
            log.error("streamed content %r is not a prefix of the answer %r", self._text[: self._sent], content)
        if len(content) > self._sent:
            self._emit(Delta(content[self._sent:]))
            self._sent = len(content)
        for index, call in enumerate(answer.tool_calls):
            self._send_call(index, call.name, call.arguments)


def _arguments_text(call: ToolCall, written: list[ScannedCall], index: int) -> str:
    """The call's arguments as the model wrote them (what a stream showed), or re-encoded should the scan and the
    codec ever disagree."""
    if index < len(written) and written[index].complete and written[index].name == call.name:
        try:
            if json.loads(written[index].arguments) == call.arguments:
                return written[index].arguments
        except ValueError:
            pass
    log.error("call %d (%s): the scanned arguments disagree with the parsed ones; re-encoding", index, call.name)
    return json.dumps(call.arguments, ensure_ascii=False)


class _ClientGone(Exception):
    """Internal: the turn was cancelled because the client left."""


def _deadline(timeout_s: float) -> ApiError:
    return ApiError(504, f"the request did not finish within the server's deadline of {timeout_s:g} s "
                    "(queue wait included); nothing partial is returned", code="timeout")


def _context_error(error: ContextWindowError, request: ChatRequest) -> ApiError:
    param = "max_tokens" if request.max_tokens is not None and error.n_prompt_tokens < error.n_ctx else "messages"
    return ApiError(400, f"the prompt is {error.n_prompt_tokens} tokens and max_tokens {error.max_tokens}; the "
                    f"context window is {error.n_ctx} tokens (shorten the messages, lower max_tokens, or start the "
                    "server with a larger --n-ctx)", param=param, code="context_length_exceeded")
