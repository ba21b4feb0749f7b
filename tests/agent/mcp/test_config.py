"""The ``mcpServers`` configuration: what is read, and every bad file or entry refused with the file and the server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.mcp import McpConfigError, load_config
from agent.mcp.config import merge_configs


def servers(**entries: Any) -> dict[str, Any]:
    return {"mcpServers": entries}


def test_a_desktop_client_file_is_read_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(json.dumps({"globalShortcut": "Ctrl+Space", "mcpServers": {
        "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
               "env": {"NODE_ENV": "production"}},
        "docs": {"type": "http", "url": "https://example.com/mcp", "headers": {"Authorization": "Bearer x"}},
        "old": {"command": "old-server", "disabled": True}}}))
    config = load_config(path)
    assert list(config) == ["fs", "docs"]  # disabled servers are left out, file order kept
    fs, docs = config["fs"], config["docs"]
    assert (fs.command, fs.args, dict(fs.env), fs.transport) == (
        "npx", ("-y", "@modelcontextprotocol/server-filesystem", "/tmp"), {"NODE_ENV": "production"}, "stdio")
    assert (docs.url, dict(docs.headers), docs.transport) == ("https://example.com/mcp",
                                                              {"Authorization": "Bearer x"}, "http")
    assert fs.source == str(path)


def test_user_policy_keys_are_read() -> None:
    config = load_config(servers(fs={"command": "x", "autoApprove": ["write_file"], "alwaysAllow": ["move_file"],
                                     "timeout": 30, "annotations": {"edit_file": {"destructiveHint": False}}}))
    fs = config["fs"]
    assert fs.auto_approve == ("write_file", "move_file") and fs.timeout_s == 30.0
    assert fs.annotations == {"edit_file": {"destructiveHint": False}}


BAD: dict[str, tuple[Any, str]] = {
    "not an object": ([], "expected a JSON object"),
    "no mcpServers": ({"servers": {}}, 'no "mcpServers" object'),
    "mcpServers not an object": ({"mcpServers": []}, '"mcpServers" must be an object'),
    "entry not an object": (servers(fs="npx"), "server 'fs': the entry must be an object"),
    "unknown key": (servers(fs={"command": "x", "arg": []}), "server 'fs': unknown key 'arg'"),
    "neither": (servers(fs={"args": []}), 'give either "command"'),
    "both": (servers(fs={"command": "x", "url": "http://a"}), "not both"),
    "empty command": (servers(fs={"command": " "}), '"command" must be a non-empty string'),
    "args not strings": (servers(fs={"command": "x", "args": ["-p", 8080]}), '"args" must be a list of strings'),
    "env not strings": (servers(fs={"command": "x", "env": {"PORT": 8080}}), '"env" must be an object of string'),
    "sse": (servers(fs={"type": "sse", "url": "http://a/sse"}), "SSE transport is not supported"),
    "type mismatch": (servers(fs={"type": "stdio", "url": "http://a"}), "needs \"command\""),
    "bad url": (servers(fs={"url": "ftp://a"}), '"url" must be an http:// or https:// URL'),
    "headers on stdio": (servers(fs={"command": "x", "headers": {}}), '"headers" is for an HTTP server'),
    "bad timeout": (servers(fs={"command": "x", "timeout": 0}), '"timeout" must be a positive number'),
    "bad hint": (servers(fs={"command": "x", "annotations": {"t": {"readonly": True}}}), "unknown hint 'readonly'"),
    "hint not bool": (servers(fs={"command": "x", "annotations": {"t": {"readOnlyHint": "yes"}}}),
                      "readOnlyHint must be true or false"),
    "dotted name": (servers(**{"my.fs": {"command": "x"}}), "server name 'my.fs' cannot namespace tools"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_configuration_is_refused_naming_what_and_where(case: str) -> None:
    document, words = BAD[case]
    with pytest.raises(McpConfigError) as error:
        load_config(document)
    assert words in str(error.value) and str(error.value).startswith("<mapping>:")
    assert "\n" not in str(error.value)


def test_a_bad_file_is_refused_naming_it(tmp_path: Path) -> None:
    for content, words in [(None, "no such file"), (b"{bad", "not JSON (line 1, column 2"),
                           (b"\xff\xfe", "not UTF-8")]:
        path = tmp_path / "servers.json"
        path.unlink(missing_ok=True)
        if content is not None:
            path.write_bytes(content)
        with pytest.raises(McpConfigError) as error:
            load_config(path)
        assert str(error.value).startswith(f"{path}: ") and words in str(error.value)


def test_two_files_cannot_configure_the_same_server(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for path in (a, b):
        path.write_text(json.dumps(servers(fs={"command": "x"})))
    with pytest.raises(McpConfigError) as error:
        merge_configs([load_config(a), load_config(b)])
    assert str(error.value) == (f"{b}: server 'fs': is also configured in {a}; server names are tool namespaces "
                                "and must be unique")
