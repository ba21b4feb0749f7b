"""The HTTP surface: Starlette routes over one `ModelWorker`, served by uvicorn.

Owns routing, the bearer-key check, request-body decoding, the 429/400/401/404 answers in OpenAI's error shape, and
the delivery of a job's events: one JSON object, or a server-sent event stream ending in ``data: [DONE]``. Watches
the connection while a job waits or runs: a client that disconnects cancels its turn (the worker rolls the KV
back). Refuses to start a stream before the turn has produced something: a refusal found by the worker (context
window, budget) is still a plain 400, never a 200 stream that breaks.

    GET  /v1/models                 the served model
    POST /v1/chat/completions       parse_chat_request ─► worker.submit ─► _JobResponse (JSON or SSE)
    GET  /health                    liveness (no key needed)

Why Starlette + uvicorn: Starlette is the small ASGI toolkit FastAPI itself is built on (routing, requests,
responses; no validation layer we would have to fight to return OpenAI's error shape), uvicorn is the reference
ASGI server; both are widely used, actively released, pure Python (uvicorn without extras runs on h11).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import socket
import threading
import time
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from agent.serve.errors import ApiError
from agent.serve.request import ChatRequest, parse_chat_request
from agent.serve.response import Completion, sse
from agent.serve.worker import CallDelta, Delta, Done, Event, Failed, Gone, Job, ModelWorker

__all__ = ["BackgroundServer", "create_app"]

_MAX_BODY_BYTES = 8 * 1024 * 1024


def create_app(worker: ModelWorker, *, api_key: str | None = None) -> Starlette:
    """The ASGI app serving ``worker``'s model; with ``api_key``, every ``/v1`` request needs
    ``Authorization: Bearer <api_key>``."""

    def check_key(request: Request) -> None:
        if api_key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
            raise ApiError(401, "missing or wrong API key: send 'Authorization: Bearer <key>' (the key the server "
                           "was started with, --api-key)", code="invalid_api_key")

    async def models(request: Request) -> Response:
        check_key(request)
        return JSONResponse({"object": "list", "data": [_model_card(worker)]})

    async def model(request: Request) -> Response:
        check_key(request)
        if request.path_params["model_id"] not in worker.model_ids:
            raise ApiError(404, f"model {request.path_params['model_id']!r} is not served here",
                           param="model", code="model_not_found")
        return JSONResponse(_model_card(worker))

    async def chat_completions(request: Request) -> Response:
        check_key(request)
        raw = await request.body()
        if len(raw) > _MAX_BODY_BYTES:
            raise ApiError(413, f"request body over {_MAX_BODY_BYTES} bytes", code="request_too_large")
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ApiError(400, f"the request body is not JSON: {error}", code="invalid_json") from None
        chat = parse_chat_request(body, model_ids=worker.model_ids)
        job = worker.submit(chat, asyncio.get_running_loop())
        return _JobResponse(job, chat)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "busy": worker.busy, "running": worker.running,
                             "parallel": worker.parallel, "waiting": worker.waiting})

    async def api_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, ApiError)
        return _error_response(error)

    async def http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        return _error_response(ApiError(error.status_code, f"{request.method} {request.url.path}: {error.detail}",
                                        code="not_found" if error.status_code == 404 else None))

    routes = [Route("/v1/models", models, methods=["GET"]),
              Route("/v1/models/{model_id:path}", model, methods=["GET"]),
              Route("/v1/chat/completions", chat_completions, methods=["POST"]),
              Route("/health", health, methods=["GET"])]
    return Starlette(routes=routes, exception_handlers={ApiError: api_error, HTTPException: http_error})


def _model_card(worker: ModelWorker) -> dict[str, Any]:
    return {"id": worker.model_ids[0], "object": "model", "created": int(time.time()), "owned_by": "ember"}


def _error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


class _JobResponse(Response):
    """Delivers one job: waits for its first event, then answers with JSON, an error, or an event stream; the
    connection is watched throughout and a disconnect cancels the job."""

    def __init__(self, job: Job, request: ChatRequest) -> None:
        super().__init__()
        self.job = job
        self.chat = request

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watcher = asyncio.create_task(self._watch(receive))
        try:
            await self._deliver(send)
        finally:
            watcher.cancel()
            self.job.cancel()  # no-op for a finished job; stops one whose client went away

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.job.cancel()
                return

    async def _next(self) -> Event:
        return await self.job.events.get()

    async def _deliver(self, send: Send) -> None:
        completion = Completion(model=self.chat.model, include_usage=self.chat.include_usage)
        event = await self._next()
        if isinstance(event, Gone):
            return
        if isinstance(event, Failed):
            await _send_json(send, event.error.status, event.error.body(), event.error.headers)
            return
        if not self.chat.stream:
            while isinstance(event, (Delta, CallDelta)):
                event = await self._next()
            if isinstance(event, Done):
                await _send_json(send, 200, completion.whole(event.answer))
            elif isinstance(event, Failed):
                await _send_json(send, event.error.status, event.error.body(), event.error.headers)
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
                                (b"x-accel-buffering", b"no")]})
        await _body(send, sse(completion.first_chunk()))
        while True:
            if isinstance(event, Delta):
                await _body(send, sse(completion.content_chunk(event.content)))
            elif isinstance(event, CallDelta):
                await _body(send, sse(completion.call_chunk(event)))
            elif isinstance(event, Done):
                for chunk in completion.final_chunks(event.answer):
                    await _body(send, sse(chunk))
                await _body(send, sse("[DONE]"))
                break
            elif isinstance(event, Failed):  # after the stream began (deadline): an error event, no [DONE]
                await _body(send, sse(event.error.body()))
                break
            else:
                break
            event = await self._next()
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _body(send: Send, data: bytes) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": True})


async def _send_json(send: Send, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
    data = json.dumps(body, ensure_ascii=False).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data, "more_body": False})


class BackgroundServer:
    """uvicorn serving an app on a loopback port in a daemon thread: for tests, the docs examples and the
    benchmark (``ember serve`` runs uvicorn in the foreground instead)."""

    def __init__(self, app: Starlette, *, host: str = "127.0.0.1", port: int = 0) -> None:
        import uvicorn

        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.host, self.port = self._socket.getsockname()[:2]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._socket]},
                                        name="ember-serve", daemon=True)

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT/v1``, what an OpenAI client's ``base_url`` takes."""
        return f"http://{self.host}:{self.port}/v1"

    def start(self, timeout: float = 30.0) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the server did not start on {self.host}:{self.port}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=30)
        with contextlib.suppress(OSError):
            self._socket.close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
