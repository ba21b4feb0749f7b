"""MCP tools as `Tool`s: names, kinds from annotations, checked input schemas, and results for the model.

    tools/list entry ─► tool_name(server, name)       ``time.get_current_time`` (valid in every codec's grammar)
                    ─► tool_contract(annotations)      kind · requires_approval · idempotent  (the table below)
                    ─► schema_refusal(inputSchema)     the compiler refuses it? the tool is left out, with why
                    ─► Tool(function=call over the connection, server=ToolServer(...))
    tools/call result ─► render_result ─► isError ─► ok:false (the server's text)
                                      ─► structuredContent checked against outputSchema ─► ok:false naming the path
                                      ─► the structured value, else the content blocks as text for the model

Annotations are read as the MCP spec defines them (every one is a hint, with the spec's defaults for absent ones):

    readOnlyHint true                 data: may run concurrently with other data calls, retry-safe
    otherwise                         action: one at a time, in call order, with an idempotency key
      destructiveHint not false       approval required (absent counts as true), unless the user pre-approved it
      idempotentHint true             a retry after a timeout may run it again under the same key
      idempotentHint not true         no retry: its first outcome is replayed
    openWorldHint                     recorded in the tool-list hash; decides nothing

A user's ``annotations`` for a tool (`agent.mcp.config`) replace the server's hints before the table is read.

An action's idempotency key (`agent.tool.IdempotencyStore.key_for`) travels to the server in the request's
``_meta`` as ``ember/idempotency-key``, so a server that honours keys can deduplicate a retry.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import mcp_types as types

from agent.argument_errors import render_path
from agent.errors import ToolDefinitionError
from agent.mcp.errors import McpSchemaError, McpServerError
from agent.results import ResultErrorKind
from agent.schema import ValidatedArguments, canonical_json, enforcement_refusal
from agent.tool import TOOL_NAME_RE, IdempotencyStore, Tool, ToolContext, ToolFailure, ToolKind, ToolServer

if TYPE_CHECKING:
    from agent.mcp.connection import McpConnection

__all__ = ["IDEMPOTENCY_META_KEY", "SkippedTool", "ToolContract", "build_tools", "render_result", "schema_refusal",
           "tool_contract", "tool_name", "tools_sha256"]

IDEMPOTENCY_META_KEY: Final = "ember/idempotency-key"
"""The ``_meta`` key of a ``tools/call`` request that carries an action's idempotency key."""
_NAME_CHARS: Final = re.compile(r"[^A-Za-z0-9_.-]")
_MAX_NAME: Final = 64


@dataclass(frozen=True, kw_only=True)
class ToolContract:
    """What a tool's annotations decide about its execution."""

    kind: ToolKind
    """``data`` (read-only) or ``action``."""
    requires_approval: bool
    """An action its server does not declare non-destructive."""
    idempotent: bool
    """An action its server declares idempotent."""


@dataclass(frozen=True, kw_only=True)
class SkippedTool:
    """A tool a server listed that is not offered, and why."""

    server: str
    """The server's configured name."""
    tool: str
    """The tool's name as the server lists it."""
    reason: str
    """Why it was left out (the compiler's or the definition's refusal, naming the keyword when there is one)."""
    keyword: str | None = None
    """The JSON Schema keyword refused, when the compiler named one."""


def tool_contract(annotations: Mapping[str, Any] | None) -> ToolContract:
    """Kind, approval and idempotency from MCP annotation hints (camelCase keys), read with the spec's defaults."""
    hints = annotations or {}
    if hints.get("readOnlyHint") is True:
        return ToolContract(kind=ToolKind.DATA, requires_approval=False, idempotent=False)
    return ToolContract(kind=ToolKind.ACTION, requires_approval=hints.get("destructiveHint") is not False,
                        idempotent=hints.get("idempotentHint") is True)


def tool_name(server: str, remote: str, taken: Iterable[str] = ()) -> str:
    """``<server>.<tool>``, made valid for every codec's grammar (`agent.tool.TOOL_NAME_RE`): characters outside
    ``[A-Za-z0-9_.-]`` become ``_``; a name over 64 characters, or one already ``taken``, is cut and suffixed
    with a hash of the original, so two tools can never share a name."""
    name = f"{server}.{_NAME_CHARS.sub('_', remote)}"
    taken = set(taken)
    if len(name) <= _MAX_NAME and name not in taken and TOOL_NAME_RE.match(name):
        return name
    digest = hashlib.sha256(remote.encode("utf-8")).hexdigest()
    for n in range(8, 65):
        candidate = f"{name[:_MAX_NAME - n - 1]}-{digest[:n]}"
        if candidate not in taken:
            return candidate
    raise AssertionError("a sha256 prefix cannot collide 57 times")


def tools_sha256(listed: Sequence[types.Tool]) -> str:
    """Hex sha256 of the canonical JSON of a server's tool list as it sent it (names, descriptions, schemas,
    annotations): the provenance pin of what the server offered."""
    return hashlib.sha256(canonical_json([t.model_dump(by_alias=True, exclude_none=True, mode="json")
                                          for t in listed]).encode("utf-8")).hexdigest()


def schema_refusal(server: str, tool: str, schema: Any) -> McpSchemaError | None:
    """Why the engine could not constrain arguments to ``schema`` (None: it can): the check every enforced schema
    gets (`agent.schema.enforcement_refusal`), named for the server and the tool."""
    error = enforcement_refusal(schema)
    if error is None:
        return None
    return McpSchemaError(server, tool, " ".join(str(error).split()), keyword=getattr(error, "keyword", None))


def build_tools(connection: McpConnection, listed: Sequence[types.Tool], server: ToolServer, *,
                constrained: bool = True, strict: bool = False, approve: Sequence[str] = (),
                taken: Iterable[str] = ()) -> tuple[list[Tool], list[SkippedTool]]:
    """The `Tool` of every listed tool the engine can constrain, and the ones left out (with why).

    Args:
        connection: where calls go.
        listed: the server's ``tools/list``, in order.
        server: the server's identity, shared by its tools.
        constrained: decode arguments under each tool's schema (the default, as for `Tool.from_function`).
        strict: a refused schema raises instead of leaving the tool out.
        approve: name patterns (`fnmatch`, over namespaced names) the user pre-approved.
        taken: names already in use (other servers' tools).

    Raises:
        McpSchemaError: ``strict`` and a tool's schema was refused.
    """
    config = connection.config
    names = set(taken)
    tools: list[Tool] = []
    skipped: list[SkippedTool] = []
    for entry in listed:
        name = tool_name(server.name, entry.name, names)
        hints = entry.annotations.model_dump(by_alias=True, exclude_none=True) if entry.annotations else {}
        hints.update(config.annotations.get(entry.name, {}))
        contract = tool_contract(hints)
        approved = any(fnmatch.fnmatchcase(name, p) for p in approve) or \
            any(p == "*" or p == entry.name for p in config.auto_approve)
        refusal = schema_refusal(server.name, entry.name, entry.input_schema) if constrained else None
        call = _Call(connection, entry)
        try:
            if refusal is not None:
                raise refusal
            tool = Tool(name=name, description=entry.description or entry.title or "",
                        parameters=entry.input_schema, function=call,
                        kind=contract.kind, constrained=constrained, timeout_s=config.timeout_s,
                        requires_approval=contract.requires_approval and not approved,
                        idempotent=contract.idempotent, server=server)
        except McpSchemaError as error:
            if strict:
                raise
            skipped.append(SkippedTool(server=server.name, tool=entry.name, reason=str(error), keyword=error.keyword))
            continue
        except ToolDefinitionError as error:
            if strict:
                raise McpSchemaError(server.name, entry.name, error.detail) from None
            skipped.append(SkippedTool(server=server.name, tool=entry.name,
                                       reason=f"MCP server {server.name!r}, tool {entry.name!r}: {error.detail}"))
            continue
        call.tool = tool
        names.add(name)
        tools.append(tool)
    return tools, skipped


class _Call:
    """A tool's function: one ``tools/call`` over the connection, its result rendered (`render_result`)."""

    def __init__(self, connection: McpConnection, entry: types.Tool) -> None:
        self._connection = connection
        self._remote = entry.name
        self._output = _validator(entry.output_schema) if entry.output_schema is not None else None
        self.tool: Tool | None = None
        """The tool this function runs (set once it is built): an action's idempotency key is computed from it."""

    def __call__(self, args: ValidatedArguments, ctx: ToolContext) -> Any:
        meta = None
        if self.tool is not None and self.tool.kind is ToolKind.ACTION:
            meta = {IDEMPOTENCY_META_KEY: IdempotencyStore.key_for(self.tool, args)}
        try:
            result = self._connection.call_tool(self._remote, args.to_dict(), meta=meta, cancel=ctx.cancel)
        except McpServerError as error:
            raise ToolFailure(str(error), kind=ResultErrorKind.SERVER_FAILED) from None
        return render_result(result, server=self._connection.name, tool=self._remote, output=self._output)


def _validator(schema: Mapping[str, Any]) -> Any:
    import jsonschema

    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
        return cls(schema)
    except jsonschema.SchemaError as error:
        return _InvalidSchema(" ".join(error.message.split()))


@dataclass(frozen=True)
class _InvalidSchema:
    reason: str


def render_result(result: types.CallToolResult, *, server: str, tool: str, output: Any = None) -> Any:
    """What the model receives from a ``tools/call`` result: the ``structuredContent`` (checked against the tool's
    ``outputSchema`` validator ``output`` when it has one), else the content blocks (`render_content`).

    Raises:
        ToolFailure: ``isError`` (the server's own text), a ``structuredContent`` that does not match the output
            schema (naming the path), or a declared output schema with no ``structuredContent``.
    """
    if result.is_error:
        text = render_content(result.content)
        raise ToolFailure(text if isinstance(text, str) else json.dumps(text, ensure_ascii=False))
    if output is not None:
        where = f"MCP server {server!r}, tool {tool!r}"
        if isinstance(output, _InvalidSchema):
            raise ToolFailure(f"{where}: its outputSchema is not a valid JSON Schema ({output.reason})")
        if result.structured_content is None:
            raise ToolFailure(f"{where}: declares an outputSchema but returned no structuredContent")
        error = _first_error(output, result.structured_content)
        if error is not None:
            path = render_path(["structuredContent", *error.absolute_path])
            raise ToolFailure(f"{where}: structuredContent does not match its outputSchema at {path}: "
                              f"{' '.join(error.message.split())[:300]}")
    if result.structured_content is not None:
        return result.structured_content
    return render_content(result.content)


def _first_error(validator: Any, value: Any) -> Any:
    import jsonschema

    return jsonschema.exceptions.best_match(validator.iter_errors(value))


def render_content(blocks: Sequence[types.ContentBlock]) -> Any:
    """Content blocks as JSON for the model: one text block is its text; several are a list in which text stays
    text, a resource's text stays text, and binary data (images, audio, blobs) is described, never inlined (base64
    in a prompt is noise a model cannot read and the reinjected-size limit would cut anyway)."""
    if len(blocks) == 1 and isinstance(blocks[0], types.TextContent):
        return blocks[0].text
    return [_block(b) for b in blocks]


def _block(block: types.ContentBlock) -> Any:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, (types.ImageContent, types.AudioContent)):
        return {"type": block.type, "mimeType": block.mime_type, "bytes": _b64_size(block.data),
                "note": "binary content is not shown to the model"}
    if isinstance(block, types.ResourceLink):
        return {"type": "resource_link", "uri": str(block.uri), "name": block.name,
                **({"mimeType": block.mime_type} if block.mime_type else {}),
                **({"description": block.description} if block.description else {})}
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        record: dict[str, Any] = {"type": "resource", "uri": str(resource.uri)}
        if resource.mime_type:
            record["mimeType"] = resource.mime_type
        if isinstance(resource, types.TextResourceContents):
            record["text"] = resource.text
        else:
            record.update(bytes=_b64_size(resource.blob), note="binary content is not shown to the model")
        return record
    return {"type": getattr(block, "type", type(block).__name__), "note": "content of this type is not shown"}


def _b64_size(data: str) -> int:
    return len(data) * 3 // 4 - data.endswith("=") - data.endswith("==")
