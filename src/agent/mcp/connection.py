"""One MCP server connection, used synchronously: a background event loop owns the SDK's `ClientSession`.

    McpConnection.open(config) ─► thread "ember-mcp-NAME": asyncio loop
                                     └─ owner task: transport (stdio child | Streamable HTTP) ─► ClientSession
                                                    ─► initialize ─► waits until close()
    caller thread ─► list_tools() / call_tool(...) ─► run_coroutine_threadsafe(request) ─► blocks on the answer
                        cancel set while waiting ─► the request task is cancelled: the SDK sends
                                                    notifications/cancelled to the server
    close() ─► every request in flight fails (closed) ─► the owner leaves its contexts: stdin closed, the process
               waited for, then terminated (the SDK's bounded shutdown) ─► the loop stops, the thread ends

The `mcp` SDK is async (anyio) and a session's tools run synchronously in worker threads under a watchdog, so each
connection gets one loop thread and every request is a task on it. Failures are typed, never a hang: a spawn that
fails, a server that exits (the SDK fails pending requests with "connection closed"), malformed JSON-RPC on stdout
(the SDK hands the parse error to our message handler, which fails every request in flight; the connection is then
broken for good), no answer to ``initialize`` / ``tools/list`` within the start-up timeout: each is an
`McpServerError` naming the server. A call has no timeout of its own: the session's per-call timeout detaches the
worker and sets its cancel signal, which cancels the request here.

The server's stderr goes to a file (a log beside the trace, or an anonymous temporary file); its last line is
quoted in start-up errors. It never reaches the model. ``notifications/tools/list_changed`` only sets a flag
(`tools_changed`); re-reading the list is the caller's, between turns.

Refuses (by not advertising them): sampling, elicitation and roots requests from the server, which the SDK answers
with an error.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import tempfile
import threading
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final, TypeVar

import logging

import anyio
import httpx2
import mcp_types as types
import pydantic
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from agent.mcp.config import McpServerConfig
from agent.mcp.errors import McpFailure, McpServerError
from constrained import CancelSignal

__all__ = ["DEFAULT_STARTUP_TIMEOUT_S", "McpConnection", "ServerIdentity"]

DEFAULT_STARTUP_TIMEOUT_S: Final = 30.0
"""Seconds a server gets to answer ``initialize`` and each ``tools/list`` page."""
_POLL_S: Final = 0.02
"""How often a waiting caller looks at its cancel signal."""
_CLOSE_WAIT_S: Final = 15.0
"""Longest close() waits for the owner to wind the transport down (the SDK's own shutdown is bounded at ~7 s)."""
_MAX_PAGES: Final = 1000
"""Most ``tools/list`` pages followed: a server whose cursor never ends cannot hang the start."""
_TAIL_BYTES: Final = 4096

_T = TypeVar("_T")
_OPEN: weakref.WeakSet[McpConnection] = weakref.WeakSet()
logging.getLogger("mcp").addHandler(logging.NullHandler())  # the SDK logs a stdout line it cannot parse with its
# traceback; we report it as an McpServerError instead. With a handler here Python's last-resort handler stays
# silent; an application that configures logging still sees the SDK's records.


@dataclass(frozen=True, kw_only=True)
class ServerIdentity:
    """What the server said about itself in the ``initialize`` handshake."""

    implementation: str
    """``serverInfo.name``."""
    version: str
    """``serverInfo.version``."""
    protocol_version: str
    """The protocol revision negotiated."""
    lists_changes: bool
    """Whether it declared ``tools.listChanged`` (it may send ``notifications/tools/list_changed``)."""


class McpConnection:
    """A live connection to one MCP server, with blocking methods safe to call from any thread."""

    def __init__(self, config: McpServerConfig, *, stderr_log: str | os.PathLike[str] | None = None,
                 startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S) -> None:
        """Use `McpConnection.open`, which also starts it."""
        self.config = config
        self.name = config.name
        self.startup_timeout_s = startup_timeout_s
        self.stderr_log = Path(stderr_log) if stderr_log is not None else None
        self.identity: ServerIdentity | None = None
        self._stderr: IO[bytes] | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name=f"ember-mcp-{config.name}", daemon=True)
        self._owner: concurrent.futures.Future[None] | None = None
        self._owner_task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._session: ClientSession | None = None
        self._scopes: set[anyio.CancelScope] = set()
        self._broken: McpServerError | None = None
        self._closed = threading.Event()
        self._changed = threading.Event()

    # -- life ------------------------------------------------------------------------------------------------

    @classmethod
    def open(cls, config: McpServerConfig, *, stderr_log: str | os.PathLike[str] | None = None,
             startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S) -> McpConnection:
        """Start the server (spawn it, or reach its URL) and complete the ``initialize`` handshake.

        Args:
            config: the server's entry.
            stderr_log: file the server's stderr is appended to (a stdio server); None: a temporary file, deleted
                on close, only read to quote the server's last words in a start-up error.
            startup_timeout_s: how long ``initialize`` may take.

        Raises:
            McpServerError: the server failed to start, exited, hung past the timeout or answered malformed
                JSON-RPC (the connection is closed again first).
        """
        connection = cls(config, stderr_log=stderr_log, startup_timeout_s=startup_timeout_s)
        connection._start()
        return connection

    def _start(self) -> None:
        if self.config.transport == "stdio":
            if self.stderr_log is not None:
                self.stderr_log.parent.mkdir(parents=True, exist_ok=True)
                self._stderr = open(self.stderr_log, "a+b")  # noqa: SIM115 - lives as long as the connection
            else:
                self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        self._thread.start()
        _OPEN.add(self)
        ready: concurrent.futures.Future[types.InitializeResult] = concurrent.futures.Future()
        self._owner = asyncio.run_coroutine_threadsafe(self._own(ready), self._loop)
        try:
            result = ready.result(timeout=self.startup_timeout_s + _CLOSE_WAIT_S)
        except concurrent.futures.TimeoutError:
            self.close()
            raise self._error(McpFailure.TIMED_OUT, f"no answer to initialize within {self.startup_timeout_s:g} s",
                              with_stderr=True) from None
        except BaseException as error:
            self.close()
            raise self._startup_error(error) from None
        capabilities = result.capabilities.tools
        self.identity = ServerIdentity(implementation=result.server_info.name, version=result.server_info.version,
                                       protocol_version=result.protocol_version,
                                       lists_changes=bool(capabilities and capabilities.list_changed))

    def close(self) -> None:
        """Fail every request in flight, stop the server (stdin closed, then terminated if it lingers), end the
        thread. Idempotent; bounded."""
        if self._closed.is_set():
            return
        self._closed.set()
        _OPEN.discard(self)
        if self._thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(self._wind_down(), self._loop).result(timeout=_CLOSE_WAIT_S)
            except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError, RuntimeError):
                pass
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=_CLOSE_WAIT_S)
        if self._stderr is not None:
            with contextlib.suppress(OSError):
                self._stderr.close()

    @property
    def is_closed(self) -> bool:
        """Whether `close` was called."""
        return self._closed.is_set()

    def __enter__(self) -> McpConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests --------------------------------------------------------------------------------------------

    @property
    def tools_changed(self) -> bool:
        """The server sent ``notifications/tools/list_changed`` since the last `list_tools`."""
        return self._changed.is_set()

    def list_tools(self) -> list[types.Tool]:
        """Every tool the server lists, following ``nextCursor`` (each page within the start-up timeout).

        Raises:
            McpServerError: the server failed, hung, or its cursors never end.
        """
        self._changed.clear()
        tools: list[types.Tool] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(_MAX_PAGES):
            session = self._live_session()
            params = types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
            page = self._wait(self._submit(lambda: session.list_tools(params=params), "tools/list",
                                           timeout_s=self.startup_timeout_s), None)
            tools += page.tools
            cursor = page.next_cursor
            if cursor is None:
                return tools
            if cursor in seen:
                raise self._error(McpFailure.MALFORMED, f"tools/list repeated the cursor {cursor!r}")
            seen.add(cursor)
        raise self._error(McpFailure.MALFORMED, f"tools/list did not end within {_MAX_PAGES} pages")

    def call_tool(self, name: str, arguments: dict[str, Any], *, meta: dict[str, Any] | None = None,
                  cancel: CancelSignal | None = None) -> types.CallToolResult:
        """``tools/call``, raw: the result as the server sent it (``isError``, content, ``structuredContent``;
        nothing validated against an output schema here).

        Blocks until the server answers, the connection fails, or ``cancel`` is set; then the request is cancelled
        (the SDK sends ``notifications/cancelled``) and `McpServerError` (closed) is raised.

        Raises:
            McpServerError: the server exited, sent malformed JSON-RPC, answered with a JSON-RPC error, or the
                call was cancelled.
        """
        session = self._live_session()
        request = types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=arguments,
                                                                           _meta=meta))
        return self._wait(self._submit(lambda: session.send_request(request, types.CallToolResult),
                                       f"tools/call {name}"), cancel)

    def stderr_tail(self) -> str:
        """The last line the server wrote to stderr (bounded), or empty."""
        if self._stderr is None:
            return ""
        try:
            self._stderr.flush()
            fd = self._stderr.fileno()
            size = os.fstat(fd).st_size
            data = os.pread(fd, min(size, _TAIL_BYTES), max(0, size - _TAIL_BYTES))
        except (OSError, ValueError):
            return ""
        lines = [line.strip() for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
        tail = lines[-1] if lines else ""
        return tail if len(tail) <= 300 else tail[:299] + "…"

    # -- the loop thread -------------------------------------------------------------------------------------

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            leftovers = [t for t in asyncio.all_tasks(self._loop) if not t.done()]
            for task in leftovers:
                task.cancel()
            if leftovers:
                with contextlib.suppress(BaseException):
                    self._loop.run_until_complete(asyncio.wait(leftovers, timeout=_CLOSE_WAIT_S))
            with contextlib.suppress(BaseException):
                self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    def _transport(self) -> contextlib.AbstractAsyncContextManager[Any]:
        config = self.config
        if config.transport == "stdio":
            assert config.command is not None and self._stderr is not None
            params = StdioServerParameters(command=config.command, args=list(config.args), env=dict(config.env),
                                           cwd=config.cwd)
            return stdio_client(params, errlog=self._stderr)  # type: ignore[arg-type]
        assert config.url is not None
        client = httpx2.AsyncClient(headers=dict(config.headers), timeout=httpx2.Timeout(30.0, read=300.0))
        return streamable_http_client(config.url, http_client=client)

    async def _own(self, ready: concurrent.futures.Future[types.InitializeResult]) -> None:
        """The connection's lifetime as one task: the SDK's contexts are entered and left by the same task."""
        self._owner_task = asyncio.current_task()
        self._stop = asyncio.Event()
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport())
                session = ClientSession(read, write, message_handler=self._on_message,
                                        client_info=types.Implementation(name="ember", version=_version()))
                await stack.enter_async_context(session)
                self._session = session
                result = await self._guarded(session.initialize, "initialize", self.startup_timeout_s)
                ready.set_result(result)
                await self._stop.wait()
        except BaseException as error:  # noqa: BLE001 - handed to the waiting caller, never lost
            if not ready.done():
                ready.set_exception(error if isinstance(error, Exception) else
                                    self._error(McpFailure.CLOSED, "cancelled during start-up"))
            if not isinstance(error, Exception):
                raise
        finally:
            self._session = None

    async def _wind_down(self) -> None:
        self._break(self._error(McpFailure.CLOSED, "the connection was closed"))
        if self._stop is not None:
            self._stop.set()
        owner = self._owner_task
        if owner is not None and not owner.done():
            done, _ = await asyncio.wait({owner}, timeout=_CLOSE_WAIT_S - 2)
            if not done:
                owner.cancel()

    async def _on_message(self, message: Any) -> None:
        """The SDK's message handler: transport faults (a stdout line that is not JSON-RPC) and notifications."""
        if isinstance(message, Exception):
            self._break(self._error(McpFailure.MALFORMED, _malformed(message)))
        elif isinstance(message, types.ToolListChangedNotification) or \
                getattr(message, "method", None) == "notifications/tools/list_changed":
            self._changed.set()

    def _break(self, error: McpServerError) -> None:
        """Fail every request in flight with ``error`` and every later one too (runs on the loop)."""
        if self._broken is None:
            self._broken = error
        for scope in list(self._scopes):
            scope.cancel()

    async def _guarded(self, request: Callable[[], Awaitable[_T]], what: str, timeout_s: float | None) -> _T:
        """One request on the loop, its failures as `McpServerError`."""
        if self._broken is not None:
            raise self._broken
        scope = anyio.CancelScope()
        self._scopes.add(scope)
        try:
            with scope:
                with anyio.fail_after(timeout_s) if timeout_s is not None else contextlib.nullcontext():
                    return await request()
            raise self._broken or self._error(McpFailure.CLOSED, f"{what} was abandoned")
        except TimeoutError:
            raise self._error(McpFailure.TIMED_OUT, f"no answer to {what} within {timeout_s:g} s",
                              with_stderr=True) from None
        except MCPError as error:
            if error.code == types.CONNECTION_CLOSED:
                self._break(self._error(McpFailure.EXITED, f"during {what}: the process exited or closed its "
                                                           f"stdout ({error.message})", with_stderr=True))
                raise self._broken from None  # type: ignore[misc]
            raise self._error(McpFailure.ERROR_RESPONSE, f"{what}: {error.message} (JSON-RPC error {error.code})"
                              ) from None
        except pydantic.ValidationError as error:
            raise self._error(McpFailure.MALFORMED, f"{what}: the answer does not fit the protocol: "
                                                    f"{_one_line(error)}") from None
        except RuntimeError as error:  # e.g. "Unsupported protocol version from the server"
            raise self._error(McpFailure.MALFORMED, f"{what}: {_one_line(error)}") from None
        finally:
            self._scopes.discard(scope)

    # -- the caller's side -------------------------------------------------------------------------------------

    def _live_session(self) -> ClientSession:
        if self._broken is not None:
            raise self._broken
        if self._closed.is_set() or self._session is None:
            raise self._error(McpFailure.CLOSED, "the connection is closed")
        return self._session

    def _submit(self, request: Callable[[], Awaitable[_T]], what: str,
                timeout_s: float | None = None) -> concurrent.futures.Future[_T]:
        try:
            return asyncio.run_coroutine_threadsafe(self._guarded(request, what, timeout_s), self._loop)
        except RuntimeError:  # the loop is closed
            raise self._error(McpFailure.CLOSED, "the connection is closed") from None

    def _wait(self, future: concurrent.futures.Future[_T], cancel: CancelSignal | None) -> _T:
        while True:
            try:
                return future.result(timeout=_POLL_S)
            except concurrent.futures.TimeoutError:
                if future.done():
                    raise
                if cancel is not None and cancel.is_set():
                    future.cancel()  # cancels the task on the loop: the SDK sends notifications/cancelled
                    raise self._error(McpFailure.CLOSED, "the call was cancelled; the server was sent "
                                                         "notifications/cancelled") from None
                if not self._thread.is_alive():
                    raise self._error(McpFailure.CLOSED, "the connection's event loop has stopped") from None
            except concurrent.futures.CancelledError:
                raise self._broken or self._error(McpFailure.CLOSED, "the request was cancelled") from None

    def _error(self, failure: McpFailure, detail: str, *, with_stderr: bool = False) -> McpServerError:
        return McpServerError(self.name, failure, detail, stderr_tail=self.stderr_tail() if with_stderr else "")

    def _startup_error(self, error: BaseException) -> McpServerError:
        if isinstance(error, McpServerError):
            return error
        if isinstance(error, FileNotFoundError):
            return self._error(McpFailure.FAILED_TO_START, f"no such command: {self.config.command!r}")
        if isinstance(error, OSError):
            return self._error(McpFailure.FAILED_TO_START, f"{type(error).__name__}: {_one_line(error)}",
                               with_stderr=True)
        if isinstance(error, BaseExceptionGroup):
            first = error.exceptions[0]
            return self._startup_error(first)
        if isinstance(error, httpx2.HTTPError):
            return self._error(McpFailure.FAILED_TO_START, f"{self.config.url}: {type(error).__name__}: "
                                                           f"{_one_line(error)}")
        return self._error(McpFailure.FAILED_TO_START, f"{type(error).__name__}: {_one_line(error)}",
                           with_stderr=True)


def _malformed(error: Exception) -> str:
    """A transport fault as one line: what the server wrote, when it was a line that is not JSON-RPC."""
    if isinstance(error, pydantic.ValidationError):
        first = error.errors()[0] if error.errors() else {}
        value = first.get("input")
        if isinstance(value, str):
            shown = value if len(value) <= 80 else value[:79] + "…"
            return f"a line on its stdout is not a JSON-RPC message: {shown!r}"
    return _one_line(error)


def _one_line(error: object, limit: int = 300) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("ember")
    except Exception:
        return "0+unknown"


@atexit.register
def _close_all() -> None:
    """Servers are child processes: stop the ones still open when the interpreter exits."""
    for connection in list(_OPEN):
        with contextlib.suppress(Exception):
            connection.close()
