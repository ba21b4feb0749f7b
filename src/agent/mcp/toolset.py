"""`connect`: the configured servers started, listed and offered as `Tool`s; `McpToolset` owns them until closed.

    connect("servers.json") ─► load_config ─► McpConnection.open (all servers at once) ─► list_tools (every page)
                            ─► build_tools (per server: names, contracts, schema checks) ─► McpToolset
    McpToolset ─► tools / registry() ─► Session(...)             skipped: the tools left out, with why
               ─► refresh(registry) between turns ─► a new registry when a server's list changed, else None
               ─► close() ─► every server stopped

Start-up is all or nothing: a server that fails to start, exits, hangs or answers malformed JSON-RPC stops the
others again and raises `McpServerError` naming it. Servers start concurrently (a Node server takes about a second).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agent.mcp.config import McpServerConfig, load_config, merge_configs
from agent.mcp.connection import DEFAULT_STARTUP_TIMEOUT_S, McpConnection
from agent.mcp.errors import McpConfigError, McpServerError
from agent.mcp.tools import SkippedTool, build_tools, tools_sha256
from agent.tool import Tool, ToolRegistry, ToolServer

__all__ = ["McpToolset", "ServersSource", "connect"]

ServersSource = str | os.PathLike[str] | Mapping[str, Any]
"""A configuration file, a parsed ``{"mcpServers": {...}}`` object, or a mapping of name to `McpServerConfig`."""


def connect(servers: ServersSource | Sequence[ServersSource], *, constrained: bool = True, strict: bool = False,
            approve: Sequence[str] = (), log_dir: str | os.PathLike[str] | None = None, log_prefix: str = "",
            startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S) -> McpToolset:
    """Start every configured server, list its tools and turn each into a `Tool` named ``<server>.<tool>``.

    Args:
        servers: one configuration or several (server names must be unique across them).
        constrained: decode each call's arguments under its tool's ``inputSchema`` (default).
        strict: a tool whose schema the compiler refuses fails the start (default: it is left out, see
            `McpToolset.skipped`).
        approve: tool-name patterns (``fs.write_file``, ``memory.*``) the user pre-approves: they never ask.
        log_dir: directory of the servers' stderr logs (``<log_prefix><server>.stderr.log``); None: temporary
            files, deleted on close.
        log_prefix: prefix of the log file names (``ember run`` uses the trace's stem).
        startup_timeout_s: seconds each server gets for ``initialize`` and each ``tools/list`` page.

    Raises:
        McpConfigError: a configuration is unusable (names the file and the server).
        McpServerError: a server failed to start or to list its tools (the others are stopped again).
        McpSchemaError: ``strict`` and a schema was refused.
    """
    configs = _configs(servers)
    directory = Path(log_dir) if log_dir is not None else None

    def open_one(config: McpServerConfig) -> McpConnection:
        log = directory / f"{log_prefix}{config.name}.stderr.log" if directory is not None else None
        return McpConnection.open(config, stderr_log=log, startup_timeout_s=startup_timeout_s)

    connections: list[McpConnection] = []
    errors: list[BaseException] = []
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(configs))), thread_name_prefix="ember-mcp-start") as pool:
        for future in [pool.submit(open_one, config) for config in configs.values()]:
            try:
                connections.append(future.result())
            except BaseException as error:  # noqa: BLE001 - re-raised below, after the others are closed
                errors.append(error)
    toolset = McpToolset(connections, constrained=constrained, strict=strict, approve=approve)
    if errors:
        toolset.close()
        raise errors[0]
    try:
        toolset._load()
    except BaseException:
        toolset.close()
        raise
    return toolset


def _configs(servers: ServersSource | Sequence[ServersSource]) -> dict[str, McpServerConfig]:
    sources = [servers] if isinstance(servers, (str, os.PathLike, Mapping)) else list(servers)
    loaded = []
    for source in sources:
        if isinstance(source, Mapping) and source and all(isinstance(v, McpServerConfig) for v in source.values()):
            loaded.append(dict(source))
        elif isinstance(source, (str, os.PathLike, Mapping)):
            loaded.append(load_config(source))
        else:
            raise McpConfigError("<servers>", f"expected a configuration file, a {{\"mcpServers\": ...}} object or "
                                              f"name -> McpServerConfig, not {type(source).__name__}")
    return merge_configs(loaded)


class McpToolset:
    """The tools of connected MCP servers, in configuration order. Iterating gives the `Tool`s; use as a context
    manager (or call `close`) so the servers stop."""

    def __init__(self, connections: Sequence[McpConnection], *, constrained: bool = True, strict: bool = False,
                 approve: Sequence[str] = ()) -> None:
        """Use `connect`."""
        self._connections = list(connections)
        self._constrained = constrained
        self._strict = strict
        self._approve = tuple(approve)
        self._tools: dict[str, list[Tool]] = {}
        self._skipped: dict[str, list[SkippedTool]] = {}
        self._servers: dict[str, ToolServer] = {}

    def _load(self) -> None:
        for connection in self._connections:
            self._read(connection)

    def _read(self, connection: McpConnection) -> None:
        """List one server's tools and build them (the other servers' names stay taken)."""
        listed = connection.list_tools()
        identity = connection.identity
        assert identity is not None
        server = ToolServer(name=connection.name, implementation=identity.implementation, version=identity.version,
                            protocol_version=identity.protocol_version, tools_sha256=tools_sha256(listed),
                            transport=connection.config.transport)
        taken = [t.name for name, tools in self._tools.items() if name != connection.name for t in tools]
        tools, skipped = build_tools(connection, listed, server, constrained=self._constrained, strict=self._strict,
                                     approve=self._approve, taken=taken)
        self._tools[connection.name] = tools
        self._skipped[connection.name] = skipped
        self._servers[connection.name] = server

    # -- what it offers --------------------------------------------------------------------------------------

    @property
    def tools(self) -> tuple[Tool, ...]:
        """Every offered tool, server by server in configuration order, each server's in its listing order."""
        return tuple(t for c in self._connections for t in self._tools.get(c.name, ()))

    @property
    def skipped(self) -> tuple[SkippedTool, ...]:
        """The tools left out (a schema the compiler refused), with the reason."""
        return tuple(s for c in self._connections for s in self._skipped.get(c.name, ()))

    @property
    def servers(self) -> tuple[ToolServer, ...]:
        """Each connected server's identity (name, reported version, protocol, tool-list hash)."""
        return tuple(self._servers[c.name] for c in self._connections if c.name in self._servers)

    def registry(self) -> ToolRegistry:
        """A `ToolRegistry` of `tools`."""
        return ToolRegistry(self.tools)

    def connection(self, server: str) -> McpConnection:
        """The live connection of a configured server.

        Raises:
            KeyError: no server of that name.
        """
        for connection in self._connections:
            if connection.name == server:
                return connection
        raise KeyError(server)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools)

    def __len__(self) -> int:
        return len(self.tools)

    # -- changes between turns -----------------------------------------------------------------------------------

    @property
    def changed(self) -> tuple[str, ...]:
        """Servers that announced a changed tool list (``notifications/tools/list_changed``) not yet re-read."""
        return tuple(c.name for c in self._connections if c.tools_changed)

    def refresh(self, registry: ToolRegistry) -> ToolRegistry | None:
        """Between turns: re-read every server that announced a changed tool list and return ``registry`` with
        those servers' tools replaced in place (other tools, MCP or not, kept as they are); None when nothing
        changed. Never call it while a turn is running; `agent.session.Session` calls it before each model turn
        when given as its ``tool_updates``. A server that fails while being re-read keeps its old tools (their
        calls then fail as ``server_failed``)."""
        changed = [c for c in self._connections if c.tools_changed]
        renewed: set[str] = set()
        for connection in changed:
            try:
                self._read(connection)
            except McpServerError:
                continue
            renewed.add(connection.name)
        if not renewed:
            return None
        tools: list[Tool] = []
        placed: set[str] = set()
        for tool in registry:
            server = tool.server.name if tool.server is not None else None
            if server not in renewed:
                tools.append(tool)
            elif server not in placed:
                tools += self._tools[server]
                placed.add(server)
        for server in renewed - placed:
            tools += self._tools[server]
        return ToolRegistry(tools)

    # -- life --------------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop every server (bounded; idempotent)."""
        with ThreadPoolExecutor(max_workers=max(1, min(8, len(self._connections))),
                                thread_name_prefix="ember-mcp-close") as pool:
            for future in [pool.submit(c.close) for c in self._connections]:
                with contextlib.suppress(Exception):
                    future.result()

    def __enter__(self) -> McpToolset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"McpToolset(servers={[c.name for c in self._connections]}, tools={len(self.tools)})"
