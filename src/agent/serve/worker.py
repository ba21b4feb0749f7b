"""The model worker: one loaded model, one thread, a bounded queue of jobs, each a speculative turn rolled back.

Owns the order in which requests reach the model and everything that happens to one while it runs: the bounded
queue (full: `ApiError` 429 with ``Retry-After``), the per-request deadline and the client's disconnect (both trip
the turn's cancel; a cancelled turn stops at the next token), the prompt-length check before any evaluation, the
disk prefix cache, the turn itself (`ChatModelEngine.run_turn` with the request's tools, choice and pattern), the
content deltas a stream may show (`ProseGuard`: no call markup), and the parsed answer. Refuses to let requests see
each other: after every job, whatever happened, the engine rolls the turn back. Never executes a tool.

    submit(request) ─► queue (bounded) ─► thread: _run(job)
        prompt ids ─► context check ─► prefix cache restore ─► engine.run_turn(on_text=deltas, cancel=job)
        ─► parse (codec) ─► Done(Answer) | Failed(ApiError) | Gone      ─► engine.rollback() (always)
    events reach the job's asyncio queue through its loop (call_soon_threadsafe)
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
    """Owns the engine; runs one job at a time on its own thread."""

    def __init__(self, engine: ChatModelEngine, *, model_ids: tuple[str, ...], max_queue: int = 16,
                 timeout_s: float = 600.0, prefix_cache: PrefixCache | None = None,
                 refuse_repeated_calls: bool = True) -> None:
        if max_queue < 1:
            raise ValueError(f"max_queue must be >= 1, got {max_queue}")
        self.engine = engine
        self.model_ids = model_ids
        """Names the served model answers to; the first is its id in ``/v1/models``."""
        self.max_queue = max_queue
        """Jobs that may wait while one runs; one more is refused with 429."""
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
        self._busy = threading.Event()
        self._idle = threading.Condition()
        self._mean_s = 1.0
        self._thread = threading.Thread(target=self._loop, name="ember-model-worker", daemon=True)
        self._thread.start()

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
            wait = max(1, math.ceil(self._mean_s * (self._queue.qsize() + 1)))
            raise ApiError(429, f"the request queue is full ({self.max_queue} waiting); retry in about {wait} s",
                           code="queue_full", headers={"Retry-After": str(wait)}) from None
        return job

    @property
    def busy(self) -> bool:
        """A job is running on the model now."""
        return self._busy.is_set()

    @property
    def waiting(self) -> int:
        """Jobs in the queue, not yet started."""
        return self._queue.qsize()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no job runs or waits; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: not self.busy and self._queue.empty(), timeout)

    def close(self) -> None:
        """Stop the thread after the jobs already queued."""
        self._queue.put(None)
        self._thread.join(timeout=30)

    # -- the model side ----------------------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            self._busy.set()
            started = time.monotonic()
            try:
                event = self._run(job)
            finally:
                self.engine.rollback()
                self._mean_s = 0.8 * self._mean_s + 0.2 * (time.monotonic() - started)
                self.completed += 1
                with self._idle:
                    self._busy.clear()
                    self._idle.notify_all()
            if isinstance(event, Gone):
                self.cancelled += 1
            self.last = event
            job.emit(event)

    def _run(self, job: Job) -> Event:
        if job.disconnected.is_set():
            return Gone()
        try:
            if job.is_set():
                raise _deadline(self.timeout_s)
            return Done(self._answer(job))
        except ApiError as error:
            return Failed(error)
        except _ClientGone:
            return Gone()
        except Exception as error:  # a bug: answer 500, keep serving
            log.exception("request failed")
            return Failed(ApiError(500, f"internal error: {type(error).__name__}: {error}", code="internal_error"))

    def _answer(self, job: Job) -> Answer:
        request = job.request
        answered = request.answered_calls if self.refuse_repeated_calls and request.tool_choice == "auto" \
            else frozenset()
        answer, stream, spent = self._turn(job, request.messages, request.tool_choice, answered)
        if stream.dropped and not answer.tool_calls and not stream.showed_content:
            # Every call the model wrote repeats one the conversation has answered: it would loop on it (a small
            # model does, measured). The turn is written again under "none", the last result carrying a note
            # (seen by the model only), as an answer from the results it has. (Had the client seen prose before
            # those calls, that prose is the answer.)
            self.engine.rollback()
            answer, stream, _ = self._turn(job, with_repeat_note(request.messages), "none", frozenset())
            answer = replace(answer, completion_tokens=answer.completion_tokens + spent)
        stream.finish(answer)
        return answer

    def _turn(self, job: Job, messages: Sequence[dict[str, Any]], tool_choice: ToolChoice,
              answered: frozenset[tuple[str, str]]) -> tuple[Answer, _TurnStream, int]:
        """One decoded turn of ``messages`` under ``tool_choice``, parsed; its stream (not finished) and its token
        count."""
        request, engine = job.request, self.engine
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
        prefix_len = self._prefix_len(request, shown, prompt)
        if self.prefix_cache is not None:
            self.prefix_cache.restore(model, prompt, prefix_len)
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
            raise
        if self.prefix_cache is not None and reused_before < prefix_len:
            self.prefix_cache.save(model, prompt, prefix_len)
        if turn.finish_reason == "cancelled" and not job.stop_hit:
            if job.disconnected.is_set():
                raise _ClientGone()
            raise _deadline(self.timeout_s)
        answer = self._parse(request, calls_possible, turn.text, stream)
        finish = answer.finish_reason if answer.tool_calls else ("length" if turn.finish_reason == "length"
                                                                  else "stop")
        answer = replace(answer, finish_reason=finish, prompt_tokens=turn.n_prompt_tokens,
                         completion_tokens=turn.n_output_tokens, cached_tokens=turn.n_reused_tokens,
                         seconds=turn.seconds)
        return answer, stream, turn.n_output_tokens

    def _prefix_len(self, request: ChatRequest, shown: list[Any], prompt: list[int]) -> int:
        """Prompt tokens shared by every request with these leading system messages and tools."""
        if self.prefix_cache is None:
            return 0
        lead = []
        for message in request.messages:
            if message["role"] != "system":
                break
            lead.append(message)
        try:
            probe = self.engine.prompt_tokens([*lead, {"role": "user", "content": ""}], shown)
        except ProtocolError:
            return 0
        return common_prefix_length(probe, prompt)

    def _parse(self, request: ChatRequest, calls_possible: bool, text: str, stream: _TurnStream) -> Answer:
        """The finished turn as an answer: calls (less repeats of answered ones), prose, or the JSON document."""
        if stream.stop_at is not None:
            return Answer(content=text[: stream.stop_at])
        if not calls_possible:
            return Answer(content=text)
        action = self.engine.codec.parse(text)
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
