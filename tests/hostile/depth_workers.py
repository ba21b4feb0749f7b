"""The depth matrix's worker (see ``hostile_kit.Guarded``): build one deep input inside the guarded process, run it
through one front end or validator, and return a plain summary of how it ended.

    ("schema_object", 300) ─► depth_case ─► {"outcome": "compiled", "accepts": True, "rejects_cut": True}
                                        └─► {"outcome": "refused", "type": "UnsupportedSchemaError", "message": ...}

Inputs are built here, not pickled across the pipe: a 10,000-level document is cheap to build and would need a
raised recursion limit to pickle. A documented refusal comes back as ``"refused"`` (for the constrained front ends
a `ConstrainedError`, for the agent a ``ToolDefinitionError``) or as the typed result the agent gives (an
``ok:false`` result, `ArgumentErrors`, `MalformedToolCall`); anything else raised escapes to the worker loop and
the test reports it as a crash (a `RecursionError` included).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hostile_workers import _byte_vocabulary


def _schema_object(depth: int) -> tuple[Any, bytes]:
    schema: Any = {"type": "integer"}
    doc = "7"
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
        doc = '{"a":' + doc + "}"
    return schema, doc.encode()


def _schema_array(depth: int) -> tuple[Any, bytes]:
    schema: Any = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema, "minItems": 1}
    return schema, b"[" * depth + b"7" + b"]" * depth


def _schema_ref_chain(depth: int) -> tuple[Any, bytes]:
    """``depth`` definitions, each an object whose member refers to the next: a chain of $ref, one level each."""
    defs: dict[str, Any] = {f"d{i}": {"type": "object", "properties": {"a": {"$ref": f"#/$defs/d{i + 1}"}},
                                      "required": ["a"]} for i in range(depth)}
    defs[f"d{depth}"] = {"type": "integer"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}, b'{"a":' * depth + b"7" + b"}" * depth


def _schema_text(depth: int) -> tuple[Any, bytes]:
    """Nested arrays as JSON text (the text front end: scanned before it is parsed)."""
    return ('{"type":"array","minItems":1,"items":' * depth + '{"type":"integer"}' + "}" * depth,
            b"[" * depth + b"7" + b"]" * depth)


def _gbnf_groups(depth: int) -> tuple[str, bytes]:
    return "root ::= " + "(" * depth + '"a"' + ")" * depth, b"a"


def _gbnf_rule_chain(depth: int) -> tuple[str, bytes]:
    """Rules calling the next inside brackets: the stack is ``depth`` calls deep at the innermost byte."""
    lines = ['root ::= "(" r1 ")"'] + [f'r{i} ::= "(" r{i + 1} ")"' for i in range(1, depth)] + [f'r{depth} ::= "a"']
    return "\n".join(lines), b"(" * depth + b"a" + b")" * depth


def _gbnf_left_chain(depth: int) -> tuple[str, bytes]:
    """Rules calling the next first (no left recursion: the chain ends): the left-recursion check walks it."""
    lines = ['root ::= r1 "x"'] + [f'r{i} ::= r{i + 1} "x"' for i in range(1, depth)] + [f'r{depth} ::= "a"']
    return "\n".join(lines), b"a" + b"x" * depth


_GRAMMARS = {"schema_object": _schema_object, "schema_array": _schema_array, "schema_ref_chain": _schema_ref_chain,
             "schema_text": _schema_text, "gbnf_groups": _gbnf_groups, "gbnf_rule_chain": _gbnf_rule_chain,
             "gbnf_left_chain": _gbnf_left_chain}


def _shown(message: str) -> str:
    """A message's head and tail (a pointer 1,024 levels deep is 7 kB of ``/properties/a``)."""
    return message if len(message) <= 600 else f"{message[:300]} … {message[-300:]}"


def _nest(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def depth_case(payload: tuple[str, int, bool]) -> dict[str, Any]:
    """``(front end, depth, whole)`` → how it ended: ``compiled`` (with ``accepts``: the grammar takes a valid
    instance through the matcher, byte by byte, and ``rejects_cut``: not the instance short of its last byte),
    ``refused`` (a documented error), or ``result`` (the agent's typed outcome). Without ``whole``, an instance over
    10,000 bytes (a 10,000-call stack: seconds of matcher steps) is walked for its first 2,000 bytes only
    (``accepts`` is then whether the matcher is still live there)."""
    front_end, depth, whole = payload
    if front_end in _GRAMMARS:
        return _grammar_case(front_end, depth, whole)
    return {"regex_groups": _regex_case, "agent_arguments": _arguments_case, "agent_parameters": _parameters_case,
            "agent_model_turn": _model_turn_case, "tool_result": _tool_result_case}[front_end](depth)


def _grammar_case(front_end: str, depth: int, whole: bool) -> dict[str, Any]:
    import constrained
    from constrained.errors import ConstrainedError

    source, doc = _GRAMMARS[front_end](depth)
    vocab = _byte_vocabulary()
    try:
        if front_end.startswith("gbnf"):
            grammar = constrained.compile_gbnf(source, vocab)
        else:
            grammar = constrained.compile_json_schema(source, vocab)
    except ConstrainedError as exc:
        return {"outcome": "refused", "type": type(exc).__name__, "message": _shown(str(exc))}
    if len(doc) > 10_000 and not whole:
        matcher = grammar.matcher()
        live = all(matcher.advance(byte) for byte in doc[:2_000]) and matcher.allowed_token_ids().size > 0
        return {"outcome": "compiled", "accepts": live, "rejects_cut": True, "prefix_only": True}
    if len(doc) > 10_000:  # the whole-document check, not 20,000 matcher steps
        return {"outcome": "compiled", "accepts": grammar.accepts(doc), "rejects_cut": not grammar.accepts(doc[:-1])}
    matcher = grammar.matcher()
    accepts = all(matcher.advance(byte) for byte in doc) and matcher.is_accepting()
    cut = grammar.matcher()
    rejects_cut = not (all(cut.advance(byte) for byte in doc[:-1]) and cut.is_accepting())
    return {"outcome": "compiled", "accepts": accepts, "rejects_cut": rejects_cut}


def _regex_case(depth: int) -> dict[str, Any]:
    import constrained
    from constrained.errors import ConstrainedError

    try:
        grammar = constrained.compile_regex("(" * depth + "a" + ")" * depth, _byte_vocabulary())
    except ConstrainedError as exc:
        return {"outcome": "refused", "type": type(exc).__name__, "message": _shown(str(exc))}
    return {"outcome": "compiled", "accepts": grammar.accepts(b"a"), "rejects_cut": not grammar.accepts(b"")}


def _arguments_case(depth: int) -> dict[str, Any]:
    """The validator on a ``depth``-deep arguments document, as text (what a model wrote) and as a parsed value."""
    from agent.schema import ArgumentErrors, validate_arguments

    schema = {"type": "object", "additionalProperties": True}
    out = []
    for raw in ('{"a":' * depth + "1" + "}" * depth, _nest(depth)):
        result = validate_arguments("t", schema, raw)
        assert isinstance(result, ArgumentErrors), result
        out.append([(e.kind.value, e.path[:80], e.reason) for e in result.errors])
    return {"outcome": "result", "text": out[0], "value": out[1]}


def _parameters_case(depth: int) -> dict[str, Any]:
    from agent.errors import ToolDefinitionError
    from agent.schema import compile_parameters

    schema, _ = _schema_object(depth)
    try:
        compile_parameters("t", schema)
    except ToolDefinitionError as exc:
        return {"outcome": "refused", "type": type(exc).__name__, "message": _shown(str(exc))}
    return {"outcome": "compiled"}


def _session(turn: str, tool: Any) -> dict[str, Any]:
    """One scripted run: the model's ``turn``, then a final answer; the tool message it got back, and whether the
    trace verifies."""
    from make_corpus import BIG, final

    from agent.limits import AgentLimits
    from agent.protocol import QwenCodec
    from agent.session import Session
    from agent.testkit import ScriptedEngine
    from agent.tool import ToolRegistry
    from agent.trace import TraceRecorder, verify_trace

    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "t.jsonl"
        engine = ScriptedEngine([turn, final("done")], QwenCodec())
        with TraceRecorder(trace) as recorder:
            result = Session(engine, ToolRegistry([tool]), trace=recorder,
                             limits=AgentLimits(max_output_tokens=BIG)).run("go")
        tool_messages = [json.loads(m["content"]) for m in result.messages if m["role"] == "tool"]
        return {"run": result.outcome.value, "tool_messages": tool_messages, "verifies": verify_trace(trace).ok}


def _model_turn_case(depth: int) -> dict[str, Any]:
    """A call whose arguments nest ``depth`` deep, parsed by both codecs, then run through a session."""
    from agent.protocol import Llama3Codec, QwenCodec
    from agent.tool import Tool

    arguments = '{"a":' * depth + "1" + "}" * depth
    parsed = {}
    for codec, turn in ((QwenCodec(), '<tool_call>\n{"name": "t", "arguments": ' + arguments + "}\n</tool_call>"),
                        (Llama3Codec(), '<|python_tag|>{"name": "t", "parameters": ' + arguments + "}")):
        action = codec.parse(turn)
        parsed[type(codec).__name__] = (type(action).__name__, getattr(action, "reason", None) and action.reason.value,
                                        getattr(action, "detail", ""))
    tool = Tool(name="t", description="echo", function=lambda args, ctx: "ok",
                parameters={"type": "object", "additionalProperties": True})
    session = _session('<tool_call>\n{"name": "t", "arguments": ' + arguments + "}\n</tool_call>", tool)
    return {"outcome": "result", "parsed": parsed, **session}


def _tool_result_case(depth: int) -> dict[str, Any]:
    """A tool returning a value nested ``depth`` deep, in a session."""
    from agent.tool import Tool

    tool = Tool(name="t", description="deep", function=lambda args, ctx: _nest(depth))
    return {"outcome": "result", **_session('<tool_call>\n{"name": "t", "arguments": {}}\n</tool_call>', tool)}
