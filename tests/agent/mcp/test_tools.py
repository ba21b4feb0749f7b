"""MCP tool ↔ `Tool`, without a server: names, the annotation table, results as the model receives them."""

from __future__ import annotations

import itertools

import mcp_types as types
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.mcp import tool_contract, tool_name
from agent.mcp.tools import _validator, render_content, render_result
from agent.protocol import Llama3Codec, QwenCodec
from agent.protocol.base import ToolSpec
from agent.tool import TOOL_NAME_RE, ToolFailure, ToolKind

HINTS = (None, True, False)


@pytest.mark.parametrize("read_only, destructive, idempotent", list(itertools.product(HINTS, HINTS, HINTS)))
def test_annotations_map_to_kind_approval_and_idempotency_with_the_specs_defaults(read_only, destructive,
                                                                                   idempotent) -> None:
    hints = {k: v for k, v in [("readOnlyHint", read_only), ("destructiveHint", destructive),
                               ("idempotentHint", idempotent)] if v is not None}
    contract = tool_contract(hints)
    if read_only is True:
        assert (contract.kind, contract.requires_approval) == (ToolKind.DATA, False)
    else:  # readOnlyHint absent counts as false
        assert contract.kind is ToolKind.ACTION
        assert contract.requires_approval is (destructive is not False)  # absent counts as true
        assert contract.idempotent is (idempotent is True)  # absent counts as false


def test_no_annotations_at_all_is_the_most_careful_reading() -> None:
    contract = tool_contract(None)
    assert (contract.kind, contract.requires_approval, contract.idempotent) == (ToolKind.ACTION, True, False)


@given(server=st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,31}", fullmatch=True),
       remotes=st.lists(st.text(min_size=1, max_size=140), min_size=1, max_size=8))
def test_every_tool_name_becomes_a_valid_unique_namespaced_name(server: str, remotes: list[str]) -> None:
    taken: list[str] = []
    for remote in remotes:
        name = tool_name(server, remote, taken)
        assert TOOL_NAME_RE.match(name) and name.startswith(server + ".") and name not in taken
        taken.append(name)


def test_plain_names_are_kept_and_two_servers_never_collide() -> None:
    assert tool_name("time", "get_current_time") == "time.get_current_time"
    assert tool_name("everything", "get-tiny-image") == "everything.get-tiny-image"
    assert tool_name("a", "x") != tool_name("b", "x")
    assert tool_name("s", "a/b") == "s.a_b" and tool_name("s", "a b", ["s.a_b"]) != "s.a_b"


def test_dotted_names_go_through_both_codecs_tool_call_grammars() -> None:
    specs = [ToolSpec(name="fs.write_file", description="", constrained=True,
                      parameters={"type": "object", "properties": {"path": {"type": "string"}}}),
             ToolSpec(name="everything.get-sum", description="", constrained=True,
                      parameters={"type": "object", "properties": {"a": {"type": "number"}}})]
    for codec in (QwenCodec(), Llama3Codec()):
        pattern = codec.tool_call_grammar(specs, "required")
        assert r"fs\.write_file" in pattern and r"everything\.get\-sum" in pattern


def result(**fields) -> types.CallToolResult:
    return types.CallToolResult.model_validate(fields)


def test_is_error_is_an_ok_false_with_the_servers_text() -> None:
    with pytest.raises(ToolFailure) as failure:
        render_result(result(content=[{"type": "text", "text": "Access denied"}], isError=True), server="fs",
                      tool="read_file")
    assert failure.value.detail == "Access denied"


def test_structured_content_is_checked_against_the_output_schema_and_names_the_path() -> None:
    output = _validator({"type": "object", "properties": {"items": {"type": "array", "items": {"type": "integer"}}}})
    ok = result(content=[], structuredContent={"items": [1, 2]})
    assert render_result(ok, server="s", tool="t", output=output) == {"items": [1, 2]}
    with pytest.raises(ToolFailure) as failure:
        render_result(result(content=[], structuredContent={"items": [1, "2"]}), server="s", tool="t", output=output)
    assert "structuredContent.items[1]" in failure.value.detail and "MCP server 's', tool 't'" in failure.value.detail
    with pytest.raises(ToolFailure, match="no structuredContent"):
        render_result(result(content=[{"type": "text", "text": "{}"}]), server="s", tool="t", output=output)


def test_content_blocks_become_text_and_binary_is_described_never_inlined() -> None:
    assert render_content([types.TextContent(text="one")]) == "one"
    blocks = render_content([
        types.TextContent(text="see:"), types.ImageContent(data="aGVsbG8=", mime_type="image/png"),
        types.ResourceLink(uri="file:///a.txt", name="a.txt", mime_type="text/plain"),
        types.EmbeddedResource(resource=types.TextResourceContents(uri="file:///b.txt", text="bee")),
        types.EmbeddedResource(resource=types.BlobResourceContents(uri="file:///c.bin", blob="AAAA")),
    ])
    assert blocks[0] == "see:"
    assert blocks[1] == {"type": "image", "mimeType": "image/png", "bytes": 5,
                         "note": "binary content is not shown to the model"}
    assert blocks[2] == {"type": "resource_link", "uri": "file:///a.txt", "name": "a.txt", "mimeType": "text/plain"}
    assert blocks[3] == {"type": "resource", "uri": "file:///b.txt", "text": "bee"}
    assert blocks[4]["bytes"] == 3 and "blob" not in blocks[4]
