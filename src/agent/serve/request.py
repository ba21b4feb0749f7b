"""An OpenAI chat-completions request body → a checked `ChatRequest`, or an `ApiError` naming the field.

Owns every check that needs no model: the shapes of ``messages`` (OpenAI's roles, text content parts, assistant
``tool_calls`` with JSON-string arguments, ``tool`` messages answering an earlier call by ``tool_call_id``),
``tools`` (each parameter schema compiled by the engine's schema compiler, so an unenforceable keyword is a 400
naming it and its path), ``tool_choice`` against the offered tools, ``response_format`` (``text``,
``json_object``, ``json_schema``: its schema compiled the same way), sampling and limits. Refuses, never ignores, a
field that would change the answer and that the server cannot honour (``n > 1``, ``logprobs``, ``logit_bias``,
penalties, unknown fields): a silently dropped field is an unconstrained answer that looks constrained.

    body ─► _messages (OpenAI → codec messages) · _tools (ToolSpec, constrained) · _tool_choice · _format
         ─► ChatRequest (frozen; what the worker runs)
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from agent.protocol.base import ToolChoice, ToolSpec
from agent.repeats import CallKey, call_key
from agent.serve.errors import ApiError
from constrained import SamplingParams

__all__ = ["ChatRequest", "parse_chat_request"]

_ROLES = ("system", "developer", "user", "assistant", "tool")
_IGNORED = frozenset({"user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier"})
"""Fields that change nothing about the answer (bookkeeping for OpenAI's own platform): accepted, unused."""
_KNOWN = frozenset({"model", "messages", "tools", "tool_choice", "parallel_tool_calls", "response_format",
                    "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed", "stop", "stream",
                    "stream_options", "n", "logprobs", "top_logprobs", "logit_bias", "frequency_penalty",
                    "presence_penalty", "modalities"}) | _IGNORED
_MAX_STOPS = 4


@dataclass(frozen=True, kw_only=True)
class ChatRequest:
    """One checked chat-completions request, in the agent layer's terms."""

    model: str
    """The ``model`` the client named (one of the served model's ids)."""
    messages: tuple[dict[str, Any], ...]
    """Codec-format messages: content strings, ``tool_calls`` with dict arguments, tool results named."""
    tools: tuple[ToolSpec, ...] = ()
    """The offered tools, every one constrained by its parameter schema."""
    tool_choice: ToolChoice = "none"
    """``auto``, ``required``, ``none`` or a tool name (default: ``auto`` with tools, ``none`` without)."""
    parallel_calls: bool = True
    """Several calls in one turn (OpenAI's ``parallel_tool_calls``, default true)."""
    response_format: str = "text"
    """``text``, ``json_object`` or ``json_schema``."""
    schema: dict[str, Any] | None = None
    """The JSON Schema an answer must satisfy (``json_object``: any object); None for ``text``."""
    final_pattern: str | None = None
    """``schema`` compiled to the engine's pattern dialect: what a text answer must match."""
    max_tokens: int | None = None
    """Most tokens to generate; None: whatever the context window leaves."""
    sampling: SamplingParams = field(default_factory=SamplingParams)
    """Temperature, top-p and seed (greedy when the request gives no temperature)."""
    stop: tuple[str, ...] = ()
    """Stop sequences (text answers without tools only)."""
    stream: bool = False
    include_usage: bool = False
    """``stream_options.include_usage``: a last chunk with ``usage`` and no choices."""

    @property
    def calls_possible(self) -> bool:
        """Whether the turn may hold tool calls."""
        return bool(self.tools) and self.tool_choice != "none"

    @property
    def answered_calls(self) -> frozenset[CallKey]:
        """The calls whose results the conversation already holds: ``(name, canonical arguments JSON)`` of every
        assistant call that a later ``tool`` message follows."""
        answered: set[tuple[str, str]] = set()
        pending: list[tuple[str, str]] = []
        for message in self.messages:
            if message["role"] == "assistant":
                pending += [call_key(c["function"]["name"], c["function"]["arguments"])
                            for c in message.get("tool_calls") or ()]
            elif message["role"] == "tool":
                answered.update(pending)
                pending = []
        return frozenset(answered)


def parse_chat_request(body: Any, *, model_ids: Sequence[str]) -> ChatRequest:
    """Check a request body and translate it.

    Args:
        body: the decoded JSON body.
        model_ids: the names the served model answers to (the first is its canonical id).

    Raises:
        ApiError: 400 for a field that is malformed or cannot be honoured (named in ``param``), 404 for a model
            the server does not serve.
    """
    if not isinstance(body, Mapping):
        raise _bad("the request body must be a JSON object", None)
    unknown = sorted(set(body) - _KNOWN)
    if unknown:
        raise _bad(f"unknown parameter {unknown[0]!r} (this server refuses fields it would otherwise ignore)",
                   unknown[0], code="unknown_parameter")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("'model' is required: a model id from GET /v1/models", "model")
    if model not in model_ids:
        raise ApiError(404, f"model {model!r} is not served here; this server serves {model_ids[0]!r}",
                       param="model", code="model_not_found")
    _refuse_unsupported(body)
    tools = _tools(body.get("tools"))
    tool_choice = _tool_choice(body.get("tool_choice"), tools)
    parallel = body.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise _bad("'parallel_tool_calls' must be a boolean", "parallel_tool_calls")
    response_format, schema, pattern = _format(body.get("response_format"))
    stop = _stop(body.get("stop"))
    if stop and (response_format != "text" or (tools and tool_choice != "none")):
        raise _bad("'stop' applies to text answers only: with tools or a JSON response_format a stop sequence "
                   "would cut a document the grammar guarantees complete", "stop", code="unsupported_value")
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise _bad("'stream' must be a boolean", "stream")
    options = body.get("stream_options")
    if options is not None and (not isinstance(options, Mapping) or set(options) - {"include_usage"}):
        raise _bad("'stream_options' supports only {\"include_usage\": bool}", "stream_options")
    include_usage = bool((options or {}).get("include_usage", False))
    return ChatRequest(model=model, messages=_messages(body.get("messages")), tools=tools, tool_choice=tool_choice,
                       parallel_calls=parallel, response_format=response_format, schema=schema, final_pattern=pattern,
                       max_tokens=_max_tokens(body), sampling=_sampling(body), stop=stop, stream=bool(stream),
                       include_usage=include_usage)


def _bad(message: str, param: str | None, *, code: str | None = "invalid_value") -> ApiError:
    return ApiError(400, message, param=param, code=code)


def _refuse_unsupported(body: Mapping[str, Any]) -> None:
    """Fields that would change the answer but cannot be honoured: 400 unless at their no-op value."""
    n = body.get("n")
    if n is not None and n != 1:
        raise _bad(f"n={n!r}: this server returns one choice per request (n=1); send n requests instead", "n",
                   code="unsupported_value")
    for name in ("logprobs", "top_logprobs"):
        if body.get(name) not in (None, False, 0):
            raise _bad(f"'{name}' is not supported", name, code="unsupported_value")
    if body.get("logit_bias"):
        raise _bad("'logit_bias' is not supported (the grammar owns the mask)", "logit_bias",
                   code="unsupported_value")
    for name in ("frequency_penalty", "presence_penalty"):
        if body.get(name) not in (None, 0, 0.0):
            raise _bad(f"'{name}' is not supported", name, code="unsupported_value")
    modalities = body.get("modalities")
    if modalities not in (None, ["text"]):
        raise _bad("only the text modality is supported", "modalities", code="unsupported_value")


# -- messages ------------------------------------------------------------------------------------------------------


def _text(content: Any, where: str, *, allow_none: bool = False) -> str:
    """A message's content as one string: a string, or a list of text parts (joined by newlines)."""
    if content is None and allow_none:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            if not isinstance(part, Mapping) or part.get("type") not in ("text", "refusal"):
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise _bad(f"{where}[{i}]: content part of type {kind!r} is not supported (text only)",
                           f"{where}[{i}]")
            value = part.get("text", part.get("refusal"))
            if not isinstance(value, str):
                raise _bad(f"{where}[{i}]: a text part needs a string 'text'", f"{where}[{i}]")
            texts.append(value)
        return "\n".join(texts)
    raise _bad(f"{where} must be a string or a list of text parts", where)


def _messages(messages: Any) -> tuple[dict[str, Any], ...]:
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty list", "messages")
    out: list[dict[str, Any]] = []
    call_names: dict[str, str] = {}
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, Mapping) or message.get("role") not in _ROLES:
            role = message.get("role") if isinstance(message, Mapping) else None
            raise _bad(f"{where}: role {role!r} is not one of {', '.join(_ROLES)}", f"{where}.role")
        role = message["role"]
        if role in ("system", "developer", "user"):
            out.append({"role": "user" if role == "user" else "system",
                        "content": _text(message.get("content"), f"{where}.content")})
        elif role == "assistant":
            out.append(_assistant(message, where, call_names))
        else:
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or call_id not in call_names:
                raise _bad(f"{where}: 'tool_call_id' {call_id!r} answers no tool call of an earlier assistant "
                           "message", f"{where}.tool_call_id")
            out.append({"role": "tool", "name": call_names[call_id],
                        "content": _text(message.get("content"), f"{where}.content")})
    return tuple(out)


def _assistant(message: Mapping[str, Any], where: str, call_names: dict[str, str]) -> dict[str, Any]:
    content = _text(message.get("content"), f"{where}.content", allow_none=True)
    calls = message.get("tool_calls")
    if not calls:
        return {"role": "assistant", "content": content}
    if not isinstance(calls, list):
        raise _bad(f"{where}.tool_calls must be a list", f"{where}.tool_calls")
    converted = []
    for j, call in enumerate(calls):
        at = f"{where}.tool_calls[{j}]"
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise _bad(f"{at}: a call needs 'function' with a string 'name'", at)
        arguments = fn.get("arguments", "{}")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except json.JSONDecodeError as error:
                raise _bad(f"{at}.function.arguments is not JSON: {error.msg} at char {error.pos}",
                           f"{at}.function.arguments") from None
        if not isinstance(arguments, dict):
            raise _bad(f"{at}.function.arguments must encode a JSON object", f"{at}.function.arguments")
        if isinstance(call.get("id"), str):
            call_names[call["id"]] = fn["name"]
        converted.append({"type": "function", "function": {"name": fn["name"], "arguments": arguments}})
    return {"role": "assistant", "content": content, "tool_calls": converted}


# -- tools ---------------------------------------------------------------------------------------------------------


def _tools(tools: Any) -> tuple[ToolSpec, ...]:
    if tools is None:
        return ()
    if not isinstance(tools, list):
        raise _bad("'tools' must be a list", "tools")
    specs: list[ToolSpec] = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, Mapping) or tool.get("type", "function") != "function":
            raise _bad(f"{where}: only {{\"type\": \"function\"}} tools are supported", f"{where}.type")
        fn = tool.get("function")
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise _bad(f"{where}.function needs a non-empty string 'name'", f"{where}.function.name")
        if any(spec.name == fn["name"] for spec in specs):
            raise _bad(f"{where}: tool name {fn['name']!r} is offered twice", f"{where}.function.name")
        parameters = fn.get("parameters") or {"type": "object", "properties": {}}
        description = fn.get("description") or ""
        if not isinstance(description, str):
            raise _bad(f"{where}.function.description must be a string", f"{where}.function.description")
        _compile(parameters, f"{where}.function.parameters", closed=True)
        specs.append(ToolSpec(name=fn["name"], description=description, parameters=dict(parameters),
                              constrained=True))
    _check_names(specs)
    return tuple(specs)


def _check_names(specs: Sequence[ToolSpec]) -> None:
    from agent.protocol._pattern import resolve_choice
    from agent.protocol.base import ToolNameError

    try:
        resolve_choice(list(specs), "auto")
    except ToolNameError as error:
        index = next(i for i, spec in enumerate(specs) if spec.name == error.name)
        raise _bad(str(error), f"tools[{index}].function.name") from None


def _tool_choice(choice: Any, tools: Sequence[ToolSpec]) -> ToolChoice:
    names = [t.name for t in tools]
    if choice is None:
        return "auto" if tools else "none"
    if isinstance(choice, str):
        if choice not in ("auto", "required", "none"):
            raise _bad(f"tool_choice {choice!r} is not 'auto', 'required', 'none' or "
                       "{\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice")
        if choice == "required" and not tools:
            raise _bad("tool_choice 'required' needs at least one tool in 'tools'", "tool_choice")
        return "none" if choice == "auto" and not tools else choice
    fn = choice.get("function") if isinstance(choice, Mapping) and choice.get("type") == "function" else None
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
        raise _bad("tool_choice must be a string or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                   "tool_choice")
    if fn["name"] not in names:
        raise _bad(f"tool_choice names tool {fn['name']!r}, which 'tools' does not offer "
                   f"(offered: {', '.join(names) or 'none'})", "tool_choice", code="unknown_tool")
    return fn["name"]


# -- output format -------------------------------------------------------------------------------------------------


def _format(response_format: Any) -> tuple[str, dict[str, Any] | None, str | None]:
    if response_format is None:
        return "text", None, None
    kind = response_format.get("type") if isinstance(response_format, Mapping) else None
    if kind == "text":
        return "text", None, None
    if kind == "json_object":
        schema: dict[str, Any] = {"type": "object"}
        return "json_object", schema, _compile(schema, "response_format", closed=False)
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, Mapping) or not isinstance(spec.get("schema", {}), Mapping):
            raise _bad("response_format json_schema needs {\"name\", \"schema\": {...}}",
                       "response_format.json_schema")
        schema = dict(spec.get("schema") or {})
        return "json_schema", schema, _compile(schema, "response_format.json_schema.schema", closed=False)
    raise _bad(f"response_format type {kind!r} is not 'text', 'json_object' or 'json_schema'",
               "response_format.type")


def _compile(schema: Any, param: str, *, closed: bool) -> str:
    """The schema's pattern (what the engine will constrain with); any refusal is a 400 naming keyword and path."""
    key = json.dumps(schema, ensure_ascii=False)  # key order kept: properties are generated in schema order
    try:
        return _pattern(key, closed)
    except ApiError as error:
        raise ApiError(400, f"{param}: {error.message}", param=param, code=error.code) from None


@lru_cache(maxsize=256)
def _pattern(schema_json: str, closed: bool) -> str:
    import jsonschema

    from agent.schema import close_for_grammar
    from constrained.errors import ConstrainedError, InvalidSchemaError, UnsupportedSchemaError

    schema = json.loads(schema_json)
    if not isinstance(schema, dict):
        raise ApiError(400, "a schema must be a JSON object", code="invalid_schema")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as error:
        where = "/".join(str(p) for p in error.absolute_path)
        raise ApiError(400, f"not a valid JSON Schema at #/{where}: {error.message}", code="invalid_schema") from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # unknown keys are annotations; nothing is left unenforced
            return _pattern_or_rules(close_for_grammar(schema) if closed else schema)
    except UnsupportedSchemaError as error:
        raise ApiError(400, f"{error} (the server refuses what it cannot enforce)",
                       code="unsupported_schema") from None
    except InvalidSchemaError as error:
        raise ApiError(400, str(error), code="invalid_schema") from None
    except ConstrainedError as error:
        raise ApiError(400, str(error), code="unsupported_schema") from None


def _pattern_or_rules(schema: dict[str, Any]) -> str:
    """One pattern when one DFA can hold the schema exactly; else (a recursive $ref, an open-ended value, a schema
    too big) a `RulePattern` calling the schema's rules, which the engine compiles as a pushdown grammar: exact at
    any depth."""
    from constrained import schema_pattern

    return schema_pattern(schema, whitespace="compact")


# -- limits and sampling -------------------------------------------------------------------------------------------


def _max_tokens(body: Mapping[str, Any]) -> int | None:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _bad(f"'{name}' must be an integer >= 1", name)
    return value


def _number(body: Mapping[str, Any], name: str, low: float, high: float, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise _bad(f"'{name}' must be a number in [{low:g}, {high:g}]", name)
    return float(value)


def _sampling(body: Mapping[str, Any]) -> SamplingParams:
    temperature = _number(body, "temperature", 0.0, 2.0, 0.0)
    top_p = _number(body, "top_p", 0.0, 1.0, 1.0)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _bad("'seed' must be an integer", "seed")
    return SamplingParams(temperature=temperature, top_p=top_p if top_p > 0 else 1e-9,
                          seed=None if seed is None else seed % 2**63)


def _stop(stop: Any) -> tuple[str, ...]:
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > _MAX_STOPS:
        raise _bad(f"'stop' must be a non-empty string or a list of at most {_MAX_STOPS}", "stop")
    return tuple(stops)
