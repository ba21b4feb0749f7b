"""Tools from MCP servers, on the official ``mcp`` SDK: each server's tools become `agent.tool.Tool`s.

    {"mcpServers": {...}} ─► config ─► connection (one event-loop thread per server owns the SDK session)
                                     ─► tools (names, annotations → kind / approval / idempotency, schemas, results)
                                     ─► toolset: connect(...) → McpToolset ─► ToolRegistry ─► Session

    with agent.mcp.connect("servers.json") as mcp_tools:
        session = Session(engine, mcp_tools.registry(), tool_updates=mcp_tools.refresh, ...)

One job per module:

- `agent.mcp.config`: `load_config`, `McpServerConfig` (the desktop clients' ``mcpServers`` format, checked)
- `agent.mcp.connection`: `McpConnection` (start, ``initialize``, ``tools/list`` pages, ``tools/call`` with
  cancellation, typed failures, clean shutdown)
- `agent.mcp.tools`: `tool_name`, `tool_contract`, `build_tools`, `render_result` (MCP tool ↔ `Tool`)
- `agent.mcp.toolset`: `connect`, `McpToolset` (every configured server, started together, re-read on change)
- `agent.mcp.errors`: `McpError`, `McpConfigError`, `McpServerError` (`McpFailure`), `McpSchemaError`

Execution stays the session's: a call runs through approval, the idempotency store and the watchdog like any tool;
a timeout or cancel cancels the request (the server gets ``notifications/cancelled``). Supported: tools (list with
pagination, call, ``list_changed``), stdio and Streamable HTTP. Not supported: resources, prompts, completion,
sampling, elicitation, roots (see docs/mcp.md).
"""

from agent.mcp.config import McpServerConfig, load_config
from agent.mcp.connection import McpConnection, ServerIdentity
from agent.mcp.errors import McpConfigError, McpError, McpFailure, McpSchemaError, McpServerError
from agent.mcp.tools import IDEMPOTENCY_META_KEY, SkippedTool, ToolContract, tool_contract, tool_name
from agent.mcp.toolset import McpToolset, connect

__all__ = [
    "IDEMPOTENCY_META_KEY",
    "McpConfigError",
    "McpConnection",
    "McpError",
    "McpFailure",
    "McpSchemaError",
    "McpServerConfig",
    "McpServerError",
    "McpToolset",
    "ServerIdentity",
    "SkippedTool",
    "ToolContract",
    "connect",
    "load_config",
    "tool_contract",
    "tool_name",
]
