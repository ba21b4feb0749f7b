"""The ``mcpServers`` configuration desktop and IDE clients use, read into checked `McpServerConfig` values.

    {"mcpServers": {"fs":   {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                             "env": {"NODE_ENV": "production"}},
                    "docs": {"type": "http", "url": "http://127.0.0.1:3001/mcp"}}}
      ─► load_config(file | mapping) ─► {"fs": McpServerConfig(...), "docs": McpServerConfig(...)}

Owns: the file's shape and every server entry's keys, types and values, checked before anything starts, each
fault an `McpConfigError` naming the file and the server. Top-level keys other than ``mcpServers`` are ignored (a
desktop client's whole settings file works); keys inside a server entry are checked, so a typo is not silently a
server without arguments.

A server entry: ``command`` (+ ``args``, ``env``, ``cwd``) for a stdio server, or ``url`` (+ ``headers``) for
Streamable HTTP; ``type`` (``stdio`` | ``http`` | ``streamable-http``) when given must agree. Also read:
``disabled`` (skip the server), ``autoApprove`` / ``alwaysAllow`` (tool names, or ``*``, the user pre-approves),
``timeout`` (seconds one call may take) and ``annotations`` (per tool, hints that replace the server's: the user's
policy over the server's word). Refuses: ``sse`` (the transport MCP deprecated), ``${VAR}`` expansion (values are
taken literally), server names that cannot be a tool-name namespace.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from agent.mcp.errors import McpConfigError

__all__ = ["ANNOTATION_HINTS", "SERVER_NAME_RE", "McpServerConfig", "load_config", "merge_configs"]

SERVER_NAME_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,31}\Z")
"""A server's configured name: the namespace of its tools (``fs`` in ``fs.write_file``), so no dots."""
ANNOTATION_HINTS: Final = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
"""The MCP tool annotations a user may override per tool (``annotations`` in a server entry)."""

_KEYS: Final = ("type", "command", "args", "env", "cwd", "url", "headers", "disabled", "autoApprove",
                "alwaysAllow", "timeout", "annotations")
_HTTP_TYPES: Final = ("http", "streamable-http", "streamableHttp")


@dataclass(frozen=True, kw_only=True)
class McpServerConfig:
    """One server entry of an ``mcpServers`` object, checked."""

    name: str
    """The configured name: the namespace of the server's tools."""
    command: str | None = None
    """The executable of a stdio server (looked up on ``PATH``)."""
    args: tuple[str, ...] = ()
    """Its command-line arguments."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables set for it, over the SDK's safe defaults (``HOME``, ``PATH``, ``USER``…)."""
    cwd: str | None = None
    """Its working directory (default: ours)."""
    url: str | None = None
    """The endpoint of a Streamable HTTP server."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """HTTP headers sent with every request (e.g. ``Authorization``)."""
    disabled: bool = False
    """Leave the server out (as desktop clients do)."""
    auto_approve: tuple[str, ...] = ()
    """Tool names (as the server lists them, ``*`` for all) the user pre-approved: they never ask for approval."""
    timeout_s: float | None = None
    """Seconds one call of its tools may take (the tighter of this and the run's per-call timeout applies)."""
    annotations: Mapping[str, Mapping[str, bool]] = field(default_factory=dict)
    """Per tool name, annotation hints that replace what the server declares (``{"write_file":
    {"destructiveHint": false}}``)."""
    source: str = "<mapping>"
    """Where the entry came from (a file path), for error messages."""

    @property
    def transport(self) -> str:
        """``stdio`` (a child process) or ``http`` (Streamable HTTP)."""
        return "stdio" if self.command is not None else "http"


def load_config(source: str | os.PathLike[str] | Mapping[str, Any]) -> dict[str, McpServerConfig]:
    """The servers of one ``{"mcpServers": {...}}`` configuration (a file path or the parsed object), in file
    order, disabled ones left out.

    Raises:
        McpConfigError: the file is missing or not JSON, the object has no ``mcpServers`` object, or an entry is
            bad (the message names the file, the server and the key).
    """
    if isinstance(source, Mapping):
        where, document = "<mapping>", source
    elif not isinstance(source, (str, os.PathLike)):
        raise McpConfigError("<mapping>", f'expected a JSON object {{"mcpServers": {{...}}}} or a file path, not '
                                          f"{_kind(source)}")
    else:
        where = str(source)
        document = _read_json(Path(source), where)
    if not isinstance(document, Mapping):
        raise McpConfigError(where, f'expected a JSON object {{"mcpServers": {{...}}}}, not {_kind(document)}')
    servers = document.get("mcpServers")
    if servers is None:
        raise McpConfigError(where, 'no "mcpServers" object (the format desktop clients use: '
                                    '{"mcpServers": {"NAME": {"command": ..., "args": [...]}}})')
    if not isinstance(servers, Mapping):
        raise McpConfigError(where, f'"mcpServers" must be an object of named servers, not {_kind(servers)}')
    configs: dict[str, McpServerConfig] = {}
    for name, entry in servers.items():
        config = _server(where, name, entry)
        if not config.disabled:
            configs[name] = config
    return configs


def merge_configs(configs: Sequence[Mapping[str, McpServerConfig]]) -> dict[str, McpServerConfig]:
    """Several configurations as one; a server name given twice is refused, naming both sources.

    Raises:
        McpConfigError: two configurations name the same server.
    """
    merged: dict[str, McpServerConfig] = {}
    for config in configs:
        for name, server in config.items():
            if name in merged:
                raise McpConfigError(server.source, f"is also configured in {merged[name].source}; server names "
                                                    f"are tool namespaces and must be unique", server=name)
            merged[name] = server
    return merged


def _read_json(path: Path, where: str) -> Any:
    try:
        text = path.read_bytes().decode("utf-8").removeprefix("\ufeff")
    except FileNotFoundError:
        raise McpConfigError(where, "no such file") from None
    except IsADirectoryError:
        raise McpConfigError(where, "is a directory, not a file") from None
    except OSError as error:
        raise McpConfigError(where, f"cannot be read ({error.strerror or error})") from None
    except UnicodeDecodeError as error:
        raise McpConfigError(where, f"not UTF-8 text ({error.reason} at byte {error.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise McpConfigError(where, f"not JSON (line {error.lineno}, column {error.colno}: {error.msg})") from None
    except RecursionError:
        raise McpConfigError(where, "JSON nested too deeply to read") from None


def _server(where: str, name: Any, entry: Any) -> McpServerConfig:
    if not isinstance(name, str) or SERVER_NAME_RE.match(name) is None:
        raise McpConfigError(where, f"server name {name!r} cannot namespace tools: use letters, digits, '_' and '-' "
                                    f"(at most 32, not starting with a digit or '-'), e.g. 'fs'")

    def bad(detail: str) -> McpConfigError:
        return McpConfigError(where, detail, server=name)

    if not isinstance(entry, Mapping):
        raise bad(f"the entry must be an object with \"command\" or \"url\", not {_kind(entry)}")
    unknown = [key for key in entry if key not in _KEYS]
    if unknown:
        raise bad(f"unknown key {unknown[0]!r} (known: {', '.join(_KEYS)})")
    kind = entry.get("type")
    if kind is not None and kind not in ("stdio", *_HTTP_TYPES):
        detail = ("the SSE transport is not supported (MCP deprecated it); use a Streamable HTTP endpoint"
                  if kind == "sse" else f'"type" must be "stdio" or "http", not {kind!r}')
        raise bad(detail)
    has_command, has_url = "command" in entry, "url" in entry
    if has_command == has_url:
        raise bad('give either "command" (a stdio server) or "url" (Streamable HTTP), not '
                  + ("both" if has_command else "neither"))
    if (kind == "stdio" and not has_command) or (kind in _HTTP_TYPES and not has_url):
        raise bad(f'"type" {kind!r} needs "' + ("command" if kind == "stdio" else "url") + '"')
    command = url = None
    if has_command:
        command = entry["command"]
        if not isinstance(command, str) or not command.strip():
            raise bad('"command" must be a non-empty string (the executable, e.g. "npx")')
        for key in ("url", "headers"):
            if key in entry:
                raise bad(f'"{key}" is for an HTTP server; a stdio server has "command"')
    else:
        url = entry["url"]
        if not isinstance(url, str) or not re.match(r"https?://[^\s/]+", url):
            raise bad(f'"url" must be an http:// or https:// URL, not {url!r}')
        for key in ("args", "env", "cwd"):
            if key in entry:
                raise bad(f'"{key}" is for a stdio server; an HTTP server has "url"')
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise bad('"args" must be a list of strings')
    env = _string_map(entry.get("env", {}), '"env"', bad)
    headers = _string_map(entry.get("headers", {}), '"headers"', bad)
    cwd = entry.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not cwd):
        raise bad('"cwd" must be a directory path')
    disabled = entry.get("disabled", False)
    if not isinstance(disabled, bool):
        raise bad('"disabled" must be true or false')
    approve: list[str] = []
    for key in ("autoApprove", "alwaysAllow"):
        names = entry.get(key, [])
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise bad(f'"{key}" must be a list of tool names')
        approve += names
    timeout = entry.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not math.isfinite(timeout) or timeout <= 0):
        raise bad(f'"timeout" must be a positive number of seconds, not {timeout!r}')
    return McpServerConfig(name=name, command=command, args=tuple(args), env=env, cwd=cwd, url=url,
                           headers=headers, disabled=disabled, auto_approve=tuple(approve),
                           timeout_s=float(timeout) if timeout is not None else None,
                           annotations=_annotations(entry.get("annotations", {}), bad), source=where)


def _string_map(value: Any, what: str, bad: Any) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in value.items()):
        raise bad(f"{what} must be an object of string values")
    return dict(value)


def _annotations(value: Any, bad: Any) -> dict[str, dict[str, bool]]:
    if not isinstance(value, Mapping):
        raise bad('"annotations" must be an object: tool name -> {"readOnlyHint": true, ...}')
    out: dict[str, dict[str, bool]] = {}
    for tool, hints in value.items():
        if not isinstance(hints, Mapping) or not hints:
            raise bad(f'"annotations" of {tool!r} must be a non-empty object of hints')
        for hint, flag in hints.items():
            if hint not in ANNOTATION_HINTS:
                raise bad(f'"annotations" of {tool!r}: unknown hint {hint!r} (known: {", ".join(ANNOTATION_HINTS)})')
            if not isinstance(flag, bool):
                raise bad(f'"annotations" of {tool!r}: {hint} must be true or false')
        out[tool] = dict(hints)
    return out


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)
