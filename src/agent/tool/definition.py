"""Tool definitions: what a tool is, what a running tool receives, and how it fails a call.

    Tool(name, description, parameters, function, kind, ...)    checked and compiled once, at definition
    Tool.from_function(fn)   typed Python function ─► arguments schema (pydantic) + a ``function(args, ctx)`` adapter
    Tool.from_pydantic(model, fn) · Tool.from_openai(definition, fn)

Owns: `Tool` (a name ``^[A-Za-z_][A-Za-z0-9_.-]{0,63}$``, dots for namespaces such as ``crm.search_customer``, a
description, a Draft 2020-12 parameters schema checked at definition, and a function that receives
`ValidatedArguments` and a `ToolContext`, never raw model text), `ToolKind` (``data`` reads, retry-safe;
``action`` writes, keyed and approved; ``orchestration`` runs another session, its run id linked through
`ToolContext.link_run`), `ToolServer` (the out-of-process server a tool runs on, e.g. an MCP server: what the
trace pins), `ToolContext` and `ToolFailure` (a tool's clean, model-facing way to fail a call).

Refuses (raises `ToolDefinitionError`): bad names, non-callable or async functions, bad timeouts, parameters
that are not an object schema, signatures the model could not call. Running a tool is `agent.tool.execution`;
offering tools to a session is `agent.tool.registry`.
"""

from __future__ import annotations

import copy
import enum
import inspect
import json
import math
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Final

import pydantic
import pydantic_core
from pydantic.fields import FieldInfo

from agent.cancel import CancelToken
from agent.errors import ToolDefinitionError
from agent.grounding import GROUNDED_KEY, Requirement, requirement
from agent.protocol.base import ToolSpec
from agent.results import ResultErrorKind
from agent.schema import (CompiledParameters, ValidatedArguments, check_parameters_schema, close_for_grammar,
                          compile_parameters, enforcement_refusal, render_path)
from constrained import CancelSignal

if TYPE_CHECKING:
    from agent.artifact import ArtifactStore

__all__ = ["TOOL_NAME_RE", "CancelSignal", "Tool", "ToolContext", "ToolFailure", "ToolFunction", "ToolKind",
           "ToolServer", "grounded"]

TOOL_NAME_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}\Z")


class ToolKind(enum.StrEnum):
    """What a tool does to the world; decides retry, approval and idempotency handling."""

    DATA = "data"
    """Reads: search, fetch, compute. Retry-safe; its risk is the untrusted text it brings into context."""
    ACTION = "action"
    """Writes: send, create, charge. Not retry-safe without a key; approval applies."""
    ORCHESTRATION = "orchestration"
    """Runs another model session (agent-as-a-tool); links the nested run id."""


@dataclass(frozen=True, kw_only=True)
class ToolServer:
    """The server a tool runs on when it is not a function in this process (`agent.mcp`): what pins it.

    Shared by every tool of one server connection; a server whose tool list changed gets a new one."""

    name: str
    """The name the user configured for the server (the namespace of its tools: ``fs`` in ``fs.write_file``)."""
    implementation: str
    """The name the server reports for itself (MCP ``serverInfo.name``)."""
    version: str
    """The version the server reports (MCP ``serverInfo.version``)."""
    protocol_version: str
    """The protocol revision negotiated with it (e.g. MCP ``2025-11-25``)."""
    tools_sha256: str
    """Hex sha256 of the canonical JSON of the tool list the server returned (before any tool was left out)."""
    transport: str = "stdio"
    """How the server is reached: ``stdio`` (a child process) or ``http`` (Streamable HTTP)."""

    def record(self) -> dict[str, Any]:
        """The server as JSON, for the trace's provenance event."""
        return {"name": self.name, "implementation": self.implementation, "version": self.version,
                "protocol_version": self.protocol_version, "tools_sha256": self.tools_sha256,
                "transport": self.transport}


@dataclass(kw_only=True)
class ToolContext:
    """What a running tool may use besides its arguments. One per call."""

    run_id: str
    """The run the call belongs to."""
    call_id: str
    """This call's id within the run (the trace's step)."""
    artifacts: ArtifactStore | None = None
    """Where the tool may publish bytes (``ctx.artifacts.write(name, data)``); None when the run has no store.
    Inside a running tool this is a recording proxy of the run's store (same ``write``/``read``/``verify``/
    ``refs``), so `execute_tool` can report what the call published."""
    cancel: CancelSignal = field(default_factory=CancelToken)
    """Set when the run is cancelled, or when this call was detached (timed out); cooperative tools check
    ``ctx.cancel.is_set()`` (``ctx.cancel.reason`` says why)."""
    linked_runs: list[str] = field(default_factory=list)
    """Nested run ids linked by an orchestration tool, in order."""

    def link_run(self, run_id: str) -> None:
        """Record that this call ran another session, so the trace links ``run_id`` to this call."""
        if not isinstance(run_id, str) or not run_id:
            raise ValueError(f"run_id must be a non-empty string, got {run_id!r}")
        self.linked_runs.append(run_id)


ToolFunction = Callable[[ValidatedArguments, ToolContext], Any]
"""The one calling convention every tool runs under."""


class ToolFailure(Exception):
    """Raised by a tool to fail the call with a clean, model-facing ``detail`` (no exception type prefix)."""

    def __init__(self, detail: str, *, kind: ResultErrorKind = ResultErrorKind.EXECUTION_FAILED) -> None:
        if kind not in (ResultErrorKind.EXECUTION_FAILED, ResultErrorKind.INVALID_ARGUMENTS,
                        ResultErrorKind.SERVER_FAILED):
            raise ValueError(f"a tool can fail as execution_failed, invalid_arguments or server_failed (the server "
                             f"that runs it failed), not {kind}")
        super().__init__(detail)
        self.detail = detail
        self.kind = kind


# ---------------------------------------------------------------------------------------------------------
# Tool
# ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, eq=False)
class Tool:
    """A named capability the model may request. Compared by identity."""

    name: str
    """Unique in a registry; ``^[A-Za-z_][A-Za-z0-9_.-]{0,63}$``, dots for namespaces (``crm.search_customer``)."""
    description: str = ""
    """What the tool does and what its arguments mean: the model's only guide. Formats belong here."""
    parameters: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}, "additionalProperties": False})
    """JSON Schema (Draft 2020-12) of the arguments object, as rendered to the model. Copied at construction;
    treat as read-only. Validation closes unspecified objects (see `agent.schema.close_schema`)."""
    function: ToolFunction
    """Runs the call: ``function(args: ValidatedArguments, ctx: ToolContext) -> JSON value``."""
    kind: ToolKind = ToolKind.DATA
    constrained: bool = False
    """If true, decoding forces the call's arguments to follow ``parameters`` exactly."""
    timeout_s: float | None = None
    """Per-tool timeout; the tighter of this and the run's timeout applies. None: the run's only."""
    external: bool = False
    """An action whose effects leave the run (email, payment, remote API). Denied by `default_policy`."""
    requires_approval: bool = False
    """The call runs only when an approval policy explicitly allows it: `default_policy` denies it (an MCP action
    its server does not declare non-destructive, unless the user pre-approved it)."""
    idempotent: bool = False
    """Repeating the call with the same arguments has no further effect (MCP ``idempotentHint``). An action's
    call that timed out or was cancelled may then run again under the same idempotency key; otherwise its first
    outcome is replayed and it never runs twice (`agent.tool.idempotency`)."""
    server: ToolServer | None = None
    """The out-of-process server that runs the call (an MCP server); None for a function in this process."""
    grounded: bool | str | tuple[str, ...] | dict[str, Any] = False
    """Every value of a call that its schema does not fix must be grounded (`agent.grounding`): True, in the user's
    or system's words or a tool result; a source name or a tuple of them (``"user"``, ``"system"``,
    ``"tool_result"`` or a tool's name) for those only; a string by its claims (numbers, quoted strings, names),
    unless ``{"sources": ..., "match": "whole"}`` says whole. A parameter can require it alone with
    ``"x-grounded"`` in its schema. Validation refuses an ungrounded value; where a parameter's grounded values are
    enumerable, decoding admits only those."""
    schema_sha256: str = field(init=False, repr=False)
    """Hex sha256 of the canonical parameters JSON; `ValidatedArguments` must carry the same."""
    compiled_parameters: CompiledParameters = field(init=False, repr=False)
    """``parameters`` checked and compiled once, here: what `validate_arguments` should be given for this tool."""

    def __post_init__(self) -> None:
        name = self.name
        if not isinstance(name, str) or TOOL_NAME_RE.match(name) is None:
            raise ToolDefinitionError(str(name), "name must match ^[A-Za-z_][A-Za-z0-9_.-]{0,63}$ "
                                                 "(letters, digits, '_', '.', '-'; dots for namespaces)")
        if not isinstance(self.description, str):
            raise ToolDefinitionError(name, "description must be a string")
        try:
            kind = ToolKind(self.kind)
        except ValueError:
            raise ToolDefinitionError(name, f"kind must be one of {[k.value for k in ToolKind]}, "
                                            f"got {self.kind!r}") from None
        if not callable(self.function):
            raise ToolDefinitionError(name, "function must be callable as function(args, ctx)")
        if inspect.iscoroutinefunction(self.function):
            raise ToolDefinitionError(name, "async functions are not supported: the watchdog runs synchronous "
                                            "work in a worker thread")
        if self.server is not None and not isinstance(self.server, ToolServer):
            raise ToolDefinitionError(name, f"server must be a ToolServer or None, got {type(self.server).__name__}")
        if self.timeout_s is not None and not (isinstance(self.timeout_s, (int, float))
                                               and math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ToolDefinitionError(name, f"timeout_s must be a positive number or None, got {self.timeout_s!r}")
        check_parameters_schema(name, self.parameters)
        where = "grounded"
        try:
            requirement(self.grounded)
            for where, declaration in _grounded_declarations(self.parameters):
                requirement(declaration)
        except ValueError as exc:
            raise ToolDefinitionError(name, f"{where}: {exc}") from None
        parameters = json.loads(json.dumps(self.parameters))
        compiled = compile_parameters(name, parameters)
        refusal = enforcement_refusal(close_for_grammar(parameters), whitespace="spaced") if self.constrained else None
        if refusal is not None:
            raise ToolDefinitionError(name, f"constrained, but the grammar cannot enforce its parameters: {refusal}")
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "parameters", parameters)
        object.__setattr__(self, "constrained", bool(self.constrained))
        object.__setattr__(self, "external", bool(self.external))
        object.__setattr__(self, "requires_approval", bool(self.requires_approval))
        object.__setattr__(self, "idempotent", bool(self.idempotent))
        if isinstance(self.grounded, list):
            object.__setattr__(self, "grounded", tuple(self.grounded))
        object.__setattr__(self, "schema_sha256", compiled.schema_sha256)
        object.__setattr__(self, "compiled_parameters", compiled)

    @property
    def grounding_requirement(self) -> Requirement | None:
        """What ``grounded`` requires of every value of a call that its schema does not fix (strings by their
        claims, unless it says ``"match": "whole"``); None when the tool requires nothing (a parameter may still
        declare ``x-grounded``)."""
        return requirement(self.grounded, match="claims")

    @property
    def declares_grounding(self) -> bool:
        """The tool, or some parameter of it, requires grounded values."""
        return self.grounding_requirement is not None or any(
            requirement(d) is not None for _, d in _grounded_declarations(self.parameters))

    def spec(self) -> ToolSpec:
        """The codec's view: name, description, parameters (a copy, ``x-grounded`` included: the prompt tells the
        model where a value must come from) and whether decoding is constrained."""
        return ToolSpec(name=self.name, description=self.description, parameters=copy.deepcopy(self.parameters),
                        constrained=self.constrained)

    def execute(self, args: ValidatedArguments, ctx: ToolContext, **options: Any) -> Any:
        """`agent.tool.execute_tool` on this tool (``timeout_s``, ``idempotency``, ``approval`` as there); returns
        its `ToolOutcome`. Execution lives in `agent.tool.execution`, which registers itself here on import, so
        definition and execution do not import each other."""
        if not _EXECUTORS:
            raise RuntimeError("agent.tool.execution is not loaded: import agent.tool")
        return _EXECUTORS[0](self, args, ctx, **options)

    def snapshot(self) -> dict[str, Any]:
        """Everything that defines the tool's contract, as JSON (for the provenance record). ``requires_approval``,
        ``idempotent``, ``server`` (its name) and ``grounded`` appear only when set, so an in-process tool's snapshot, and the
        registry hash over it, read as before they existed."""
        record = {"name": self.name, "description": self.description, "parameters": self.parameters,
                  "kind": self.kind.value, "constrained": self.constrained, "external": self.external,
                  "timeout_s": self.timeout_s}
        if self.requires_approval:
            record["requires_approval"] = True
        if self.idempotent:
            record["idempotent"] = True
        if self.server is not None:
            record["server"] = self.server.name
        if self.grounded:
            record["grounded"] = self.grounded if isinstance(self.grounded, (bool, str)) else list(self.grounded)
        return record

    # -- constructors ---------------------------------------------------------------------------------------

    @classmethod
    def from_function(cls, fn: Callable[..., Any], *, name: str | None = None, description: str | None = None,
                      kind: ToolKind = ToolKind.DATA, constrained: bool = True, timeout_s: float | None = None,
                      external: bool = False, grounded: bool | str | tuple[str, ...] = False) -> Tool:
        """A tool from a typed Python function; the schema comes from its annotations.

        Constrained by default: decoding forces the call's arguments to follow the derived schema, as ``ember
        call`` does (``constrained=False`` leaves the arguments to the model and to validation alone).

        Each parameter needs an annotation pydantic can describe (``int``, ``float``, ``str``, ``bool``,
        ``list[X]``, ``dict[str, X]``, ``Literal[...]``, ``X | None``, pydantic models,
        ``Annotated[X, Field(description=..., ge=...)]``…). Parameters without defaults are required; the
        arguments object rejects unknown keys. A parameter annotated `ToolContext` receives the context and is
        not part of the schema. The docstring's first paragraph becomes the description and its Google-style
        ``Args:`` lines the parameter descriptions (an ``Annotated`` ``Field`` description wins). Pydantic models
        among the arguments arrive as model instances; the return value is converted by pydantic's JSON rules
        (models, dataclasses, tuples, dates become JSON).

        Raises:
            ToolDefinitionError: ``*args``/``**kwargs``, positional-only or unannotated parameters, or a type
                that has no JSON Schema.
        """
        tool_name = name if name is not None else getattr(fn, "__name__", "")
        if inspect.iscoroutinefunction(fn):
            raise ToolDefinitionError(tool_name, "async functions are not supported: the watchdog runs synchronous "
                                                 "work in a worker thread")
        summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
        try:
            signature = inspect.signature(fn)
            hints = typing.get_type_hints(fn, include_extras=True)
        except (TypeError, ValueError, NameError) as exc:
            raise ToolDefinitionError(tool_name, f"cannot read the function's signature: {exc}") from None
        fields: dict[str, Any] = {}
        names: list[tuple[str, str]] = []
        ctx_param: str | None = None
        for i, (pname, param) in enumerate(signature.parameters.items()):
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
                raise ToolDefinitionError(tool_name, f"parameter {pname!r}: *args, **kwargs and positional-only "
                                                     f"parameters cannot be named by the model")
            if pname not in hints:
                raise ToolDefinitionError(tool_name, f"parameter {pname!r} has no type annotation")
            annotation = hints[pname]
            if annotation is ToolContext:
                ctx_param = pname
                continue
            info = pydantic.Field(default=param.default if param.default is not param.empty else ...,
                                  alias=pname)
            if arg_docs.get(pname) and not _annotated_description(annotation):
                info = pydantic.Field(default=info.default, alias=pname, description=arg_docs[pname])
            internal = f"p{i}"
            fields[internal] = (annotation, info)
            names.append((pname, internal))
        model = _arguments_model(tool_name, fields)
        parameters = _tidy_schema(tool_name, model)

        def run(args: ValidatedArguments, ctx: ToolContext) -> Any:
            parsed = _parse_with(model, args)
            kwargs = {pname: getattr(parsed, internal) for pname, internal in names}
            if ctx_param is not None:
                kwargs[ctx_param] = ctx
            return _jsonable(fn(**kwargs))

        return cls(name=tool_name, description=description if description is not None else summary,
                   parameters=parameters, function=run, kind=kind, constrained=constrained, timeout_s=timeout_s,
                   external=external, grounded=grounded)

    @classmethod
    def from_pydantic(cls, model: type[pydantic.BaseModel], fn: Callable[..., Any], *, name: str | None = None,
                      description: str | None = None, kind: ToolKind = ToolKind.DATA, constrained: bool = True,
                      timeout_s: float | None = None, external: bool = False,
                      grounded: bool | str | tuple[str, ...] = False) -> Tool:
        """A tool whose arguments are one pydantic model: ``fn(model_instance)`` or ``fn(model_instance, ctx)``.

        The name defaults to ``fn.__name__``; the description to the first paragraph of ``fn``'s docstring, else
        the model's. Constrained by default, like `from_function`.

        Raises:
            ToolDefinitionError: ``model`` is not a pydantic model or ``fn`` takes neither one nor two arguments.
        """
        tool_name = name if name is not None else getattr(fn, "__name__", "")
        if not (isinstance(model, type) and issubclass(model, pydantic.BaseModel)):
            raise ToolDefinitionError(tool_name, f"from_pydantic needs a pydantic BaseModel class, got {model!r}")
        try:
            n_params = len(inspect.signature(fn).parameters)
        except (TypeError, ValueError) as exc:
            raise ToolDefinitionError(tool_name, f"cannot read the function's signature: {exc}") from None
        if n_params not in (1, 2):
            raise ToolDefinitionError(tool_name, f"fn must take (model) or (model, ctx), it takes {n_params}")
        if description is None:
            description = _parse_docstring(inspect.getdoc(fn) or "")[0] or _parse_docstring(model.__doc__ or "")[0]
        parameters = _tidy_schema(tool_name, model)

        def run(args: ValidatedArguments, ctx: ToolContext) -> Any:
            parsed = _parse_with(model, args)
            return _jsonable(fn(parsed, ctx) if n_params == 2 else fn(parsed))

        return cls(name=tool_name, description=description, parameters=parameters, function=run, kind=kind,
                   constrained=constrained, timeout_s=timeout_s, external=external, grounded=grounded)

    @classmethod
    def from_openai(cls, definition: Mapping[str, Any], fn: ToolFunction, *, kind: ToolKind = ToolKind.DATA,
                    constrained: bool = False, timeout_s: float | None = None, external: bool = False,
                    grounded: bool | str | tuple[str, ...] = False) -> Tool:
        """A tool from an OpenAI definition, ``{"type": "function", "function": {...}}`` or the bare
        ``{"name", "description", "parameters"}``; ``fn(args: ValidatedArguments, ctx)`` runs it.

        Raises:
            ToolDefinitionError: not a function definition, unknown keys, or an invalid parameters schema.
        """
        raw_name = str(definition.get("name") or definition.get("function", {}).get("name", "?")) \
            if isinstance(definition, Mapping) else "?"
        if not isinstance(definition, Mapping):
            raise ToolDefinitionError(raw_name, "an OpenAI tool definition must be a JSON object")
        body: Any = definition
        if "function" in definition or "type" in definition:
            if definition.get("type") != "function" or not isinstance(definition.get("function"), Mapping):
                raise ToolDefinitionError(raw_name, 'expected {"type": "function", "function": {...}}')
            if set(definition) - {"type", "function"}:
                raise ToolDefinitionError(raw_name, f"unknown keys {sorted(set(definition) - {'type', 'function'})}")
            body = definition["function"]
        unknown = set(body) - {"name", "description", "parameters", "strict"}
        if unknown:
            raise ToolDefinitionError(raw_name, f"unknown keys in the function definition: {sorted(unknown)}")
        if "name" not in body:
            raise ToolDefinitionError(raw_name, "the function definition has no name")
        parameters = body.get("parameters", {"type": "object", "properties": {}})
        return cls(name=body["name"], description=body.get("description", ""), parameters=parameters,
                   function=fn, kind=kind, constrained=constrained, timeout_s=timeout_s, external=external,
                   grounded=grounded)


# -- from_function / from_pydantic helpers ------------------------------------------------------------------

_EXECUTORS: list[Callable[..., Any]] = []
"""`agent.tool.execution.execute_tool`, once that module is imported (`Tool.execute` calls it)."""


def register_executor(execute: Callable[..., Any]) -> None:
    """Make ``execute`` what `Tool.execute` calls (`agent.tool.execution` registers `execute_tool` on import)."""
    _EXECUTORS[:] = [execute]

_SECTION_RE = re.compile(r"^(\s*)(Args|Arguments|Parameters|Returns|Return|Raises|Yields|Examples?|Notes?)\s*:\s*$")
_ARG_LINE_RE = re.compile(r"^(\s*)\*{0,2}([A-Za-z_][A-Za-z0-9_]*)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The first paragraph (joined) and the Google-style ``Args:`` descriptions of a cleaned docstring."""
    lines = doc.splitlines()
    summary_lines: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION_RE.match(line):
            break
        summary_lines.append(line.strip())
    args: dict[str, str] = {}
    in_args, section_indent, current, arg_indent = False, 0, None, None
    for line in lines:
        section = _SECTION_RE.match(line)
        if section:
            in_args = section.group(2) in ("Args", "Arguments", "Parameters")
            section_indent, current, arg_indent = len(section.group(1)), None, None
            continue
        if not in_args or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent <= section_indent:
            in_args = False
            continue
        m = _ARG_LINE_RE.match(line)
        if m and (arg_indent is None or indent <= arg_indent):
            arg_indent, current = indent, m.group(2)
            args[current] = m.group(3).strip()
        elif current is not None:
            args[current] = (args[current] + " " + line.strip()).strip()
    return " ".join(summary_lines), args


def _annotated_description(annotation: Any) -> bool:
    if typing.get_origin(annotation) is Annotated:
        return any(isinstance(m, FieldInfo) and m.description for m in typing.get_args(annotation)[1:])
    return False


def _arguments_model(tool_name: str, fields: dict[str, Any]) -> type[pydantic.BaseModel]:
    model_name = re.sub(r"\W", "_", tool_name) + "_arguments"
    try:
        return pydantic.create_model(model_name, __config__=pydantic.ConfigDict(extra="forbid",
                                                                                populate_by_name=False),
                                     **fields)
    except Exception as exc:  # pydantic raises several unrelated types for unusable annotations
        raise ToolDefinitionError(tool_name, f"cannot build an arguments model: {exc}") from None


_TITLE_FREE_MAPS: Final = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def _tidy_schema(tool_name: str, model: type[pydantic.BaseModel]) -> dict[str, Any]:
    """Pydantic's JSON Schema without ``title`` noise, with every declared object shape closed."""
    try:
        schema = model.model_json_schema(by_alias=True)
    except Exception as exc:  # PydanticInvalidForJsonSchema, PydanticSchemaGenerationError, ...
        raise ToolDefinitionError(tool_name, f"the arguments have no JSON Schema: {exc}") from None

    def tidy(node: Any) -> Any:
        if isinstance(node, list):
            return [tidy(v) for v in node]
        if not isinstance(node, dict):
            return node
        out = {}
        for key, value in node.items():
            if key == "title":
                continue
            if key in _TITLE_FREE_MAPS and isinstance(value, dict):
                out[key] = {k: tidy(v) for k, v in value.items()}
            elif key in ("default", "enum", "const", "examples", "required"):
                out[key] = value
            else:
                out[key] = tidy(value)
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out

    schema = tidy(schema)
    schema.pop("description", None)
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def _parse_with(model: type[pydantic.BaseModel], args: ValidatedArguments) -> pydantic.BaseModel:
    """Build the model from already-validated arguments; a model-level rule the schema could not express
    (a custom validator) fails the call as ``invalid_arguments``."""
    try:
        return model.model_validate(args.to_dict())
    except pydantic.ValidationError as exc:
        details = "; ".join(f"{render_path([p for p in e['loc'] if isinstance(p, (str, int))]) or '(arguments)'}: "
                            f"{e['msg']}" for e in exc.errors())
        raise ToolFailure(details, kind=ResultErrorKind.INVALID_ARGUMENTS) from None


def _jsonable(value: Any) -> Any:
    """Pydantic's JSON conversion for typed functions (models, nested models, tuples); a value it cannot convert
    is returned as is, so `execute_tool` reports it as ``result_not_serializable``."""
    try:
        return pydantic_core.to_jsonable_python(value)
    except pydantic_core.PydanticSerializationError:
        return value


def _grounded_declarations(schema: Any) -> list[tuple[str, Any]]:
    """Every ``x-grounded`` annotation in a schema, with where it is (``parameters/properties/a``)."""
    found: list[tuple[str, Any]] = []
    stack: list[tuple[Any, str]] = [(schema, "parameters")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, dict):
            if GROUNDED_KEY in node:
                found.append((f"{where}/{GROUNDED_KEY}", node[GROUNDED_KEY]))
            stack.extend((value, f"{where}/{key}") for key, value in node.items() if key != GROUNDED_KEY)
        elif isinstance(node, list):
            stack.extend((value, f"{where}/{i}") for i, value in enumerate(node))
    return found


def grounded(sources: bool | str | tuple[str, ...] = True, *, match: str = "whole", **field: Any) -> FieldInfo:
    """A pydantic ``Field`` whose schema requires a grounded value: ``Annotated[str, grounded()]`` in a
    `Tool.from_function` signature or a pydantic model, ``grounded("tool_result")`` for tool results only,
    ``match="claims"`` for text whose numbers, quotes and names must each be grounded (the ``x-grounded``
    annotation, `agent.grounding`). Other keyword arguments go to ``pydantic.Field``."""
    listed = list(sources) if isinstance(sources, tuple) else sources
    declaration: Any = listed if match == "whole" else {"sources": listed, "match": match}
    try:
        requirement(declaration)
    except ValueError as exc:
        raise ToolDefinitionError("?", str(exc)) from None
    extra = dict(field.pop("json_schema_extra", None) or {})
    return pydantic.Field(json_schema_extra={**extra, GROUNDED_KEY: declaration}, **field)
