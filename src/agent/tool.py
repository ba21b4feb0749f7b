"""Tools: their definitions, the registry a session offers, approval, idempotency and bounded execution.

    Tool.from_function / from_pydantic / from_openai ─► Tool ─► ToolRegistry ─► specs() ─► codec (render, grammar)

    ValidatedArguments ─► execute_tool ─► approval? ─► idempotency replay? ─► watchdog ─► ToolOutcome
                            (TypeError for                                    │  worker thread runs
                             anything else)                                   │  tool.function(args, ctx)
                                                                              ├─ done    → ok | execution_failed
                                                                              │            | result_not_serializable
                                                                              ├─ timeout → worker detached
                                                                              └─ cancel  → worker detached

Owns:
- **Definitions.** A `Tool` is a name (``^[A-Za-z_][A-Za-z0-9_.-]{0,63}$``, dots for namespaces such as
  ``crm.search_customer``), a description, a Draft 2020-12 parameters schema (checked at definition) and a
  function that receives `ValidatedArguments` and a `ToolContext`, never raw model text. Its `ToolKind` says
  what it does to the world: ``data`` reads (retry-safe), ``action`` writes (keyed, approved), ``orchestration``
  runs another session (its run id is linked through `ToolContext.link_run`).
- **Approval.** `default_policy` allows data, orchestration and run-local actions and denies actions marked
  ``external=True`` (effects outside the run). A policy that raises or answers anything but an
  `ApprovalDecision` denies (fail closed).
- **Idempotency.** With an `IdempotencyStore`, an action runs at most once per key: the tool's
  ``idempotency_key`` argument when its schema declares one, else the sha256 of its canonical arguments. Any
  outcome of a call that *started* is recorded (a timed-out charge may still have happened) and replayed with
  ``replayed=True``; a call that never started (denied, cancelled first) is not.
- **Bounded execution.** The function runs in a daemon worker thread under a watchdog. Idle workers are parked and
  reused (starting a thread costs milliseconds on a busy machine, waking a parked one microseconds), so
  thread-local state may outlive a call; the caller's contextvars are copied into every call. The watchdog
  blocks on the worker's completion and wakes the moment it finishes; it looks at ``ctx.cancel`` every
  ``_POLL_S``. On timeout or cancel the worker is *detached*, not preempted (Python cannot stop a thread
  safely): its late result is discarded, its ``ctx.cancel`` reads as set so cooperative code can stop, later
  writes through ``ctx.artifacts`` are refused, and the thread is reused only after the tool returns.
  Exceptions are contained: every ``BaseException`` a tool raises, ``SystemExit`` and ``KeyboardInterrupt``
  included, becomes ``execution_failed`` with its type and message (in a worker thread they could not stop the
  process anyway; a real Ctrl-C reaches the waiting thread, where it propagates after the worker is detached).
  A tool can fail with a clean model-facing message by raising `ToolFailure`.
  Results must be JSON (no NaN/Infinity); they are copied through JSON so the outcome cannot change later.

Refuses (raises): raw arguments (`TypeError`), arguments validated for another tool or schema
(`ArgumentsMismatchError`), bad definitions (`ToolDefinitionError`), duplicate names (`DuplicateToolError`).
"""

from __future__ import annotations

import contextvars
import copy
import dataclasses
import enum
import functools
import hashlib
import inspect
import json
import math
import os
import re
import threading
import _thread
import time
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Final, Protocol, runtime_checkable

import pydantic
import pydantic_core
from pydantic.fields import FieldInfo

from agent.errors import ArgumentsMismatchError, DuplicateToolError, ToolDefinitionError
from agent.protocol.base import ToolSpec
from agent.results import ResultErrorKind, error_result, ok_result
from agent.schema import (CompiledParameters, ValidatedArguments, canonical_json, check_parameters_schema,
                          compile_parameters, render_path)

if TYPE_CHECKING:
    from agent.artifact import ArtifactRef, ArtifactStore

__all__ = [
    "IDEMPOTENCY_KEY_FIELD",
    "TOOL_NAME_RE",
    "ApprovalDecision",
    "ApprovalPolicy",
    "CancelSignal",
    "IdempotencyStore",
    "Tool",
    "ToolContext",
    "ToolFailure",
    "ToolFunction",
    "ToolKind",
    "ToolOutcome",
    "ToolRegistry",
    "check_approval",
    "default_policy",
    "execute_tool",
]

TOOL_NAME_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}\Z")
IDEMPOTENCY_KEY_FIELD: Final = "idempotency_key"
_POLL_S: Final = 0.01
"""How often the watchdog looks at ``ctx.cancel`` (it only has ``is_set()``). Completion is not polled: the
waiter blocks on the job's done lock and wakes the moment the worker releases it."""
_MAX_IDLE_WORKERS: Final = 8
"""Parked worker threads kept for reuse; more finish when their call does."""
_MAX_DETAIL_CHARS: Final = 2000
_RESULT_ENCODER: Final = json.JSONEncoder(allow_nan=False)
"""``json.dumps(value, allow_nan=False)`` without building an encoder per call (encoders keep no call state)."""


class ToolKind(enum.StrEnum):
    """What a tool does to the world; decides retry, approval and idempotency handling."""

    DATA = "data"
    """Reads: search, fetch, compute. Retry-safe; its risk is the untrusted text it brings into context."""
    ACTION = "action"
    """Writes: send, create, charge. Not retry-safe without a key; approval applies."""
    ORCHESTRATION = "orchestration"
    """Runs another model session (agent-as-a-tool); links the nested run id."""


@runtime_checkable
class CancelSignal(Protocol):
    """Anything with ``is_set()``: `agent.cancel.CancelToken`, `threading.Event`."""

    def is_set(self) -> bool: ...


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
    cancel: CancelSignal = field(default_factory=threading.Event)
    """Set when the run is cancelled, or when this call was detached (timed out); cooperative tools check it."""
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
        if kind not in (ResultErrorKind.EXECUTION_FAILED, ResultErrorKind.INVALID_ARGUMENTS):
            raise ValueError(f"a tool can fail as execution_failed or invalid_arguments, not {kind}")
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
        if self.timeout_s is not None and not (isinstance(self.timeout_s, (int, float))
                                               and math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ToolDefinitionError(name, f"timeout_s must be a positive number or None, got {self.timeout_s!r}")
        check_parameters_schema(name, self.parameters)
        parameters = json.loads(json.dumps(self.parameters))
        compiled = compile_parameters(name, parameters)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "parameters", parameters)
        object.__setattr__(self, "constrained", bool(self.constrained))
        object.__setattr__(self, "external", bool(self.external))
        object.__setattr__(self, "schema_sha256", compiled.schema_sha256)
        object.__setattr__(self, "compiled_parameters", compiled)

    def spec(self) -> ToolSpec:
        """The codec's view: name, description, parameters (a copy) and whether decoding is constrained."""
        return ToolSpec(name=self.name, description=self.description, parameters=copy.deepcopy(self.parameters),
                        constrained=self.constrained)

    def snapshot(self) -> dict[str, Any]:
        """Everything that defines the tool's contract, as JSON (for the provenance record)."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters,
                "kind": self.kind.value, "constrained": self.constrained, "external": self.external,
                "timeout_s": self.timeout_s}

    def execute(self, args: ValidatedArguments, ctx: ToolContext, *, timeout_s: float | None = None,
                idempotency: IdempotencyStore | None = None,
                approval: ApprovalPolicy | None = None) -> ToolOutcome:
        """`execute_tool` on this tool."""
        return execute_tool(self, args, ctx, timeout_s=timeout_s, idempotency=idempotency, approval=approval)

    # -- constructors ---------------------------------------------------------------------------------------

    @classmethod
    def from_function(cls, fn: Callable[..., Any], *, name: str | None = None, description: str | None = None,
                      kind: ToolKind = ToolKind.DATA, constrained: bool = True, timeout_s: float | None = None,
                      external: bool = False) -> Tool:
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
                   external=external)

    @classmethod
    def from_pydantic(cls, model: type[pydantic.BaseModel], fn: Callable[..., Any], *, name: str | None = None,
                      description: str | None = None, kind: ToolKind = ToolKind.DATA, constrained: bool = True,
                      timeout_s: float | None = None, external: bool = False) -> Tool:
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
                   constrained=constrained, timeout_s=timeout_s, external=external)

    @classmethod
    def from_openai(cls, definition: Mapping[str, Any], fn: ToolFunction, *, kind: ToolKind = ToolKind.DATA,
                    constrained: bool = False, timeout_s: float | None = None, external: bool = False) -> Tool:
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
                   function=fn, kind=kind, constrained=constrained, timeout_s=timeout_s, external=external)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -- from_function / from_pydantic helpers ------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------------------
# ToolRegistry
# ---------------------------------------------------------------------------------------------------------

class ToolRegistry:
    """The tools offered to one session, in render order. Immutable; names are unique."""

    __slots__ = ("_tools", "_by_name", "_snapshot_sha256")

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        """Raises:
            DuplicateToolError: two tools share a name.
            TypeError: an element is not a `Tool`.
        """
        items = tuple(tools)
        by_name: dict[str, Tool] = {}
        for tool in items:
            if not isinstance(tool, Tool):
                raise TypeError(f"ToolRegistry holds Tool objects, got {type(tool).__name__}")
            if tool.name in by_name:
                raise DuplicateToolError(tool.name)
            by_name[tool.name] = tool
        object.__setattr__(self, "_tools", items)
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_snapshot_sha256", _sha256(canonical_json([t.snapshot() for t in items])))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("ToolRegistry is immutable; build a new one")

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or None (the session answers ``unknown_tool``)."""
        return self._by_name.get(name)

    def specs(self) -> list[ToolSpec]:
        """Every tool's `ToolSpec`, in registry order."""
        return [t.spec() for t in self._tools]

    @property
    def names(self) -> tuple[str, ...]:
        """Tool names in registry order."""
        return tuple(t.name for t in self._tools)

    def snapshot(self) -> list[dict[str, Any]]:
        """`Tool.snapshot` of every tool, in order."""
        return [t.snapshot() for t in self._tools]

    @property
    def snapshot_sha256(self) -> str:
        """Hex sha256 of the canonical JSON of `snapshot`: pins the exact tool contract a run was offered."""
        return self._snapshot_sha256

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __repr__(self) -> str:
        return f"ToolRegistry({list(self.names)})"


# ---------------------------------------------------------------------------------------------------------
# approval
# ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class ApprovalDecision:
    """Whether a validated call may run, and why (the reason is traced, and reinjected on denial)."""

    allowed: bool
    reason: str


class ApprovalPolicy(Protocol):
    """Decides, per validated call, whether it may execute. Called before any effect."""

    def __call__(self, tool: Tool, args: ValidatedArguments) -> ApprovalDecision: ...


def default_policy(tool: Tool, args: ValidatedArguments) -> ApprovalDecision:
    """Allow data, orchestration and run-local action tools; deny actions with effects outside the run."""
    if tool.kind is ToolKind.ACTION and tool.external:
        return ApprovalDecision(allowed=False, reason=f"tool {tool.name!r} has effects outside this run and the "
                                                      f"default policy does not approve external actions")
    return ApprovalDecision(allowed=True, reason=f"{tool.kind.value} tool allowed by the default policy")


def check_approval(policy: ApprovalPolicy, tool: Tool, args: ValidatedArguments) -> ApprovalDecision:
    """Ask ``policy``; a policy that raises or answers something else denies (fail closed)."""
    try:
        decision = policy(tool, args)
    except Exception as exc:
        return ApprovalDecision(allowed=False, reason=f"approval policy failed: {type(exc).__name__}: {exc}")
    if not isinstance(decision, ApprovalDecision):
        return ApprovalDecision(allowed=False, reason=f"approval policy returned {type(decision).__name__}, "
                                                      f"not an ApprovalDecision")
    return decision


# ---------------------------------------------------------------------------------------------------------
# outcomes and idempotency
# ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class ToolOutcome:
    """What one execution attempt produced. A value, never an exception."""

    ok: bool
    value: Any = None
    """The tool's JSON result (a private copy) when ``ok``; None otherwise."""
    error_kind: ResultErrorKind | None = None
    """Why it failed; None when ``ok``."""
    detail: str = ""
    """Model-facing explanation of a failure."""
    duration_ms: float = 0.0
    """Wall time from start to outcome (for a replay: the original call's)."""
    artifacts: tuple[ArtifactRef, ...] = ()
    """Artifacts the call published through ``ctx.artifacts`` (also on failure: effects are real)."""
    replayed: bool = False
    """True when the idempotency store returned an earlier outcome instead of running again."""
    linked_runs: tuple[str, ...] = ()
    """Nested run ids the call linked (orchestration tools)."""
    started: bool = False
    """Whether the function began running, i.e. whether effects may exist."""

    def to_result(self) -> dict[str, Any]:
        """The ok / ok:false result the model receives (`agent.results`)."""
        if self.ok:
            return ok_result(self.value)
        return error_result(self.error_kind or ResultErrorKind.EXECUTION_FAILED, self.detail)


def _held_lock() -> Any:
    """A C-level lock created held: released once, by whoever finishes what others wait for."""
    lock = _thread.allocate_lock()
    lock.acquire()
    return lock


@dataclass
class _Entry:
    args_sha256: str
    outcome: ToolOutcome | None = None
    settled: Any = field(default_factory=_held_lock)
    """Held until the claim is settled (a C-level lock: cheaper than an Event on every action call); waiters
    pass through it with ``with``."""


class IdempotencyStore:
    """At-most-once execution of action tools, per key, for the lifetime of this object (in memory).

    Concurrent calls with the same key wait for the first and then replay it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], _Entry] = {}

    @staticmethod
    def key_for(tool: Tool, args: ValidatedArguments) -> str:
        """``key:<idempotency_key>`` when the tool's schema declares that argument and it was given, else
        ``args:<sha256 of the canonical arguments>``."""
        declared = isinstance(tool.parameters.get("properties"), Mapping) and \
            IDEMPOTENCY_KEY_FIELD in tool.parameters["properties"]
        if declared and IDEMPOTENCY_KEY_FIELD in args:
            return "key:" + canonical_json(args.to_dict()[IDEMPOTENCY_KEY_FIELD])
        return "args:" + args.sha256

    def __len__(self) -> int:
        with self._lock:
            return sum(1 for e in self._entries.values() if e.outcome is not None)

    def _claim(self, tool: Tool, args: ValidatedArguments) -> tuple[str, Any]:
        """("run", key) to execute; ("replay", outcome); or ("conflict", detail) for a reused key."""
        key = (tool.name, self.key_for(tool, args))
        while True:
            with self._lock:
                entry = self._entries.get(key)
                if entry is None:
                    self._entries[key] = _Entry(args_sha256=args.sha256)
                    return "run", key
            with entry.settled:  # blocks until `_settle` releases it
                pass
            with self._lock:
                if self._entries.get(key) is not entry:
                    continue  # the first attempt never started; claim again
            assert entry.outcome is not None
            if entry.args_sha256 != args.sha256:
                return "conflict", (f"idempotency key {key[1][4:]} was already used with different arguments; "
                                    f"the earlier call is not repeated")
            return "replay", dataclasses.replace(entry.outcome, replayed=True)

    def _settle(self, key: tuple[str, str], outcome: ToolOutcome | None) -> None:
        """Record the outcome of a started call, or release the claim of a call that never started."""
        with self._lock:
            entry = self._entries[key]
            if outcome is None:
                del self._entries[key]
            else:
                entry.outcome = outcome
        entry.settled.release()


# ---------------------------------------------------------------------------------------------------------
# execution
# ---------------------------------------------------------------------------------------------------------

class _RecordingArtifacts:
    """Forwards to the run's store, records what this call published, refuses writes once detached."""

    def __init__(self, store: ArtifactStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._refs: list[ArtifactRef] = []
        self._closed = False

    def write(self, name: str, data: bytes) -> ArtifactRef:
        with self._lock:
            if self._closed:
                raise RuntimeError("this tool call was detached (timed out or cancelled); its writes are refused")
            ref = self._store.write(name, data)
            self._refs.append(ref)
            return ref

    def close(self) -> tuple[ArtifactRef, ...]:
        with self._lock:
            self._closed = True
            return tuple(self._refs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class _Worker:
    """One reusable daemon thread: runs one job at a time, parks itself in the pool (or ends), then releases the
    job's ``done`` lock, so the waiter's next call finds it parked instead of starting a thread.

    Handoff. The worker sleeps in ``os.read`` on its own pipe; `give` wakes it with a one-byte ``os.write``. Both
    calls release the GIL around the system call, so the woken worker can take the GIL at once instead of waking
    only to wait for it while the caller is still on its way to block (a `threading.Lock`/`Condition` handoff
    costs two extra context switches per call). Each job brings its own ``done`` lock, held by the waiter and
    released by the worker: a per-job lock means the late completion of a detached job can never be mistaken for
    the completion of the worker's next one. Releasing ``done`` is the worker's last step before it blocks again.
    """

    __slots__ = ("_pool", "_wake_r", "_wake_w", "_job", "_thread")

    def __init__(self, pool: _WorkerPool) -> None:
        self._pool = pool
        self._wake_r, self._wake_w = os.pipe()
        self._job: tuple[Callable[[], None], str, Any] | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True, name="ember-tool-idle")

    def give(self, job: Callable[[], None], name: str, done: Any) -> None:
        self._job = (job, name, done)
        if self._thread.ident is None:
            try:
                self._thread.start()
            except BaseException:  # e.g. "can't start new thread": the job never runs, the caller sees why
                self._pool.retire(self)
                raise
        os.write(self._wake_w, b"\0")

    def close(self) -> None:
        """Close the wake pipe (the thread has ended, never started, or does not exist after a fork)."""
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def _loop(self) -> None:
        me = threading.current_thread()
        pool, wake = self._pool, self._wake_r
        try:
            while os.read(wake, 1):
                job, name, done = self._job  # type: ignore[misc]
                self._job = None
                me.name = name
                parked = False
                try:
                    job()  # the job contains every exception itself
                except BaseException:  # pragma: no cover - defensive: a worker never dies without releasing done
                    pass
                finally:
                    me.name = "ember-tool-idle"
                    try:
                        parked = pool.park(self)
                    finally:
                        done.release()
                if not parked:
                    return
        finally:
            pool.retire(self)


class _WorkerPool:
    """Parked tool worker threads. A detached worker (timed out, cancelled) rejoins only once its call ends."""

    def __init__(self, max_idle: int) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._live: set[_Worker] = set()
        self._max_idle = max_idle

    def submit(self, job: Callable[[], None], name: str, done: Any) -> None:
        """Run ``job`` on a parked worker (or a new one); the held lock ``done`` is released once it returned."""
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            worker = _Worker(self)
            with self._lock:
                self._live.add(worker)
        worker.give(job, name, done)

    def park(self, worker: _Worker) -> bool:
        with self._lock:
            if len(self._idle) >= self._max_idle:
                return False
            self._idle.append(worker)
            return True

    def retire(self, worker: _Worker) -> None:
        """A worker's thread ends: forget it and close its pipe."""
        with self._lock:
            self._live.discard(worker)
        worker.close()

    def forget(self) -> None:
        """After fork: the parked and running threads do not exist in the child; close the pipes it inherited."""
        for worker in self._live:
            worker.close()
        self._lock = threading.Lock()
        self._idle = []
        self._live = set()


_POOL = _WorkerPool(_MAX_IDLE_WORKERS)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_POOL.forget)


class _CallCancel:
    """The run's cancel signal, also set once this call is detached (a flag: it is only ever set, and reading
    or writing one attribute is atomic)."""

    __slots__ = ("_outer", "_detached")

    def __init__(self, outer: CancelSignal) -> None:
        self._outer = outer
        self._detached = False

    def is_set(self) -> bool:
        return self._detached or self._outer.is_set()

    def detach(self) -> None:
        self._detached = True


def _describe(exc: BaseException) -> str:
    try:
        message = str(exc)
    except Exception:
        message = "<unprintable>"
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text if len(text) <= _MAX_DETAIL_CHARS else text[:_MAX_DETAIL_CHARS - 1] + "…"


def _effective_timeout(run_timeout: float | None, tool_timeout: float | None) -> float | None:
    if run_timeout is not None and not (isinstance(run_timeout, (int, float)) and run_timeout > 0):
        raise ValueError(f"timeout_s must be a positive number or None, got {run_timeout!r}")
    bounds = [t for t in (run_timeout, tool_timeout) if t is not None]
    return min(bounds) if bounds else None


def execute_tool(tool: Tool, args: ValidatedArguments, ctx: ToolContext, *, timeout_s: float | None,
                 idempotency: IdempotencyStore | None = None,
                 approval: ApprovalPolicy | None = None) -> ToolOutcome:
    """Run one validated call under approval, idempotency and a watchdog. Never raises for tool faults.

    Args:
        tool: The tool to run.
        args: Arguments `agent.schema.validate_arguments` produced for this tool's exact schema.
        ctx: The call's context (its ``cancel`` is watched while the tool runs).
        timeout_s: The run's per-call timeout (the tighter of it and ``tool.timeout_s`` applies); None: only
            the tool's own, if any.
        idempotency: Store that makes action tools run at most once per key.
        approval: Policy consulted first; a denial returns ``denied_by_policy`` without running anything.

    Raises:
        TypeError: ``args`` is not `ValidatedArguments` (raw model output never reaches a tool), or ``tool`` /
            ``ctx`` have the wrong type.
        ArgumentsMismatchError: ``args`` were validated for another tool or another schema.
    """
    if not isinstance(tool, Tool):
        raise TypeError(f"execute_tool needs a Tool, got {type(tool).__name__}")
    if not isinstance(args, ValidatedArguments):
        raise TypeError(f"execute_tool accepts only ValidatedArguments (from agent.schema.validate_arguments), "
                        f"got {type(args).__name__}; raw model output is never executable input")
    if args.tool_name != tool.name:
        raise ArgumentsMismatchError(tool.name, args.tool_name, "they were validated for a different tool")
    if args.schema_sha256 != tool.schema_sha256:
        raise ArgumentsMismatchError(tool.name, args.tool_name, "they were validated against a different schema")
    if not isinstance(ctx, ToolContext):
        raise TypeError(f"execute_tool needs a ToolContext, got {type(ctx).__name__}")
    limit = _effective_timeout(timeout_s, tool.timeout_s)

    if approval is not None:
        decision = check_approval(approval, tool, args)
        if not decision.allowed:
            return ToolOutcome(ok=False, error_kind=ResultErrorKind.DENIED_BY_POLICY, detail=decision.reason)
    if ctx.cancel.is_set():
        return ToolOutcome(ok=False, error_kind=ResultErrorKind.CANCELLED, detail="the run was cancelled before "
                                                                                 "the tool started")
    claim_key = None
    if idempotency is not None and tool.kind is ToolKind.ACTION:
        verdict, payload = idempotency._claim(tool, args)
        if verdict == "replay":
            return payload
        if verdict == "conflict":
            return ToolOutcome(ok=False, error_kind=ResultErrorKind.INVALID_ARGUMENTS, detail=payload)
        claim_key = payload
    outcome: ToolOutcome | None = None
    try:
        outcome = _run_watched(tool, args, ctx, limit)
    finally:
        if claim_key is not None:
            # interrupted while waiting (KeyboardInterrupt in this thread): the worker did start
            settled = outcome or ToolOutcome(ok=False, error_kind=ResultErrorKind.CANCELLED, started=True,
                                             detail="interrupted while the tool was running")
            idempotency._settle(claim_key, settled)  # type: ignore[union-attr]
    return outcome


def _run_watched(tool: Tool, args: ValidatedArguments, ctx: ToolContext, limit: float | None) -> ToolOutcome:
    recording = _RecordingArtifacts(ctx.artifacts) if ctx.artifacts is not None else None
    call_cancel = _CallCancel(ctx.cancel)
    call_ctx = ToolContext(run_id=ctx.run_id, call_id=ctx.call_id, artifacts=recording,  # type: ignore[arg-type]
                           cancel=call_cancel, linked_runs=[])
    box: list[Any] = [None, None]  # [value, exception]
    done = _held_lock()  # released by the worker once the job returned

    def work() -> None:
        try:
            box[0] = tool.function(args, call_ctx)
        except BaseException as exc:  # contained: see the module docstring
            box[1] = exc

    context = contextvars.copy_context()
    outer_cancel = ctx.cancel
    start = time.perf_counter()
    deadline = None if limit is None else start + limit
    detach_kind: ResultErrorKind | None = None
    finished = False
    try:
        _POOL.submit(functools.partial(context.run, work), f"ember-tool-{tool.name}-{ctx.call_id}", done)
        while True:
            wait = _POLL_S if deadline is None else min(_POLL_S, deadline - time.perf_counter())
            if done.acquire(timeout=max(0.0, wait)):
                finished = True
                break
            if outer_cancel.is_set():
                detach_kind = ResultErrorKind.CANCELLED
                break
            if deadline is not None and time.perf_counter() >= deadline:
                detach_kind = ResultErrorKind.TIMEOUT
                break
    finally:
        if not finished and not done.acquire(blocking=False):
            call_cancel.detach()
        artifacts = recording.close() if recording is not None else ()
        linked = tuple(call_ctx.linked_runs)
        ctx.linked_runs.extend(linked)
    duration_ms = (time.perf_counter() - start) * 1000.0
    common = {"duration_ms": duration_ms, "artifacts": artifacts, "linked_runs": linked, "started": True}
    if detach_kind is ResultErrorKind.TIMEOUT:
        return ToolOutcome(ok=False, error_kind=detach_kind, detail=f"tool {tool.name!r} did not finish within "
                           f"{limit:g} s; the worker was detached and its result will be discarded", **common)
    if detach_kind is ResultErrorKind.CANCELLED:
        return ToolOutcome(ok=False, error_kind=detach_kind, detail="the run was cancelled while the tool was "
                           "running; the worker was detached and its result will be discarded", **common)
    exc = box[1]
    if exc is not None:
        if isinstance(exc, ToolFailure):
            return ToolOutcome(ok=False, error_kind=exc.kind, detail=exc.detail, **common)
        return ToolOutcome(ok=False, error_kind=ResultErrorKind.EXECUTION_FAILED, detail=_describe(exc), **common)
    try:
        value = json.loads(_RESULT_ENCODER.encode(box[0]))
    except Exception as exc:  # TypeError, ValueError, RecursionError, or whatever a hostile __iter__/items raises
        return ToolOutcome(ok=False, error_kind=ResultErrorKind.RESULT_NOT_SERIALIZABLE,
                           detail=f"the tool returned a value that is not JSON: {_describe(exc)}", **common)
    return ToolOutcome(ok=True, value=value, **common)
