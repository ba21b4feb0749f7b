"""What raises in `agent.mcp`: a configuration that cannot be used, a server that cannot serve, a schema the engine
refuses. All under `McpError` (an `AgentError`, so the CLI prints one line and exits 2).

    McpError(AgentError)
    ├── McpConfigError(source, server, detail)            ValueError  a bad ``mcpServers`` file or entry
    ├── McpServerError(server, failure, detail)                       a server failed: start, exit, hang, bad JSON
    └── McpSchemaError(server, tool, keyword, detail)     ValueError  a tool's inputSchema the compiler refuses

A server failing *during a call* never raises to the session: the tool fails the call as a
``server_failed`` result naming the server (`agent.mcp.tools`). These raise at start-up, where there is no call.
"""

from __future__ import annotations

import enum

from agent.errors import AgentError

__all__ = ["McpConfigError", "McpError", "McpFailure", "McpSchemaError", "McpServerError"]


class McpFailure(enum.StrEnum):
    """How a server failed."""

    FAILED_TO_START = "failed_to_start"
    """The process could not be spawned (no such command) or the endpoint could not be reached."""
    EXITED = "exited"
    """The connection closed under a request: the process exited (or closed its stdout), the HTTP session ended."""
    TIMED_OUT = "timed_out"
    """No answer to ``initialize`` or ``tools/list`` within the start-up timeout."""
    MALFORMED = "malformed"
    """The server wrote something that is not JSON-RPC (or a result that does not fit the protocol)."""
    ERROR_RESPONSE = "error_response"
    """The server answered a request with a JSON-RPC error (unknown tool, invalid params, internal error)."""
    CLOSED = "closed"
    """The connection was closed on our side (`McpToolset.close`) before or during the request."""


class McpError(AgentError):
    """Base of everything `agent.mcp` raises."""


class McpConfigError(McpError, ValueError):
    """An ``mcpServers`` configuration that cannot be used: not JSON, not an object, a bad server entry."""

    def __init__(self, source: str, detail: str, *, server: str | None = None) -> None:
        where = f"{source}: server {server!r}" if server is not None else source
        super().__init__(f"{where}: {detail}")
        self.source = source
        """The file the configuration came from (or ``<mapping>`` for one given in Python)."""
        self.server = server
        """The server entry at fault; None when the fault is the file's shape."""
        self.detail = detail
        """What is wrong and what would work."""


class McpServerError(McpError):
    """A server that could not be started or stopped answering: names the server and says how it failed."""

    def __init__(self, server: str, failure: McpFailure, detail: str, *, stderr_tail: str = "") -> None:
        message = f"MCP server {server!r} {_VERBS[failure]}: {detail}"
        if stderr_tail:
            message += f" (its stderr ends: {stderr_tail})"
        super().__init__(message)
        self.server = server
        """The server's configured name."""
        self.failure = failure
        """How it failed."""
        self.detail = detail
        """What was observed."""
        self.stderr_tail = stderr_tail
        """The last line(s) the server wrote to stderr, when there were any (start-up failures)."""


_VERBS = {McpFailure.FAILED_TO_START: "failed to start", McpFailure.EXITED: "closed the connection",
          McpFailure.TIMED_OUT: "did not answer in time", McpFailure.MALFORMED: "sent malformed JSON-RPC",
          McpFailure.ERROR_RESPONSE: "answered with an error", McpFailure.CLOSED: "was closed"}


class McpSchemaError(McpError, ValueError):
    """A tool's ``inputSchema`` the engine cannot enforce (or that is not a valid object schema); the tool is left
    out with this as its reason, or, with ``strict=True``, the start fails with it."""

    def __init__(self, server: str, tool: str, detail: str, *, keyword: str | None = None) -> None:
        super().__init__(f"MCP server {server!r}, tool {tool!r}: inputSchema refused"
                         + (f" (keyword {keyword!r})" if keyword else "") + f": {detail}")
        self.server = server
        """The server's configured name."""
        self.tool = tool
        """The tool's name as the server lists it."""
        self.keyword = keyword
        """The JSON Schema keyword the compiler refused, when it named one."""
        self.detail = detail
        """The compiler's (or the validator's) reason."""
