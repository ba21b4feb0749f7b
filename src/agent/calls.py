"""`ember call`: one model turn per case, parsed into an action, nothing executed.

A case is ``{"id", "messages", "tools"}``; tools come in OpenAI ``{"type": "function", "function": {...}}``
or bare ``{"name", "description", "parameters"}`` form. The model loads once for a whole batch; after each
turn the engine rolls the speculative turn back, so cases never see each other.

    cases ─► ChatModelEngine.run_turn(tools, tool_choice) ─► codec.parse ─► one JSON record per case
                                                                   └─► grounding policy (`ground_record`)

With no tool result yet, the request's messages are the only sources, and the grounding policy
(`agent.grounding_policy.judge_call`) reads each call against them: a call written twice stands once; a call whose
required values are all the model's own, or mostly so for a tool the request does not name, is withheld (listed
under ``withheld``, not returned as a call; when none is left the turn is a ``final_text``, its text the model's
words before the calls, often empty); an optional argument whose values are all the model's own is dropped so the
tool's default applies (listed per call under ``dropped``). Every returned call carries each value's source.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from agent.chat import load_chat_model
from agent.engine import ChatModelEngine
from agent.inputs import InputError, check_json_schema, read_json_file, read_jsonl_file
from agent.grounding import Sources
from agent.grounding_policy import judge_call
from agent.protocol.base import Action, FinalText, MalformedToolCall, ToolCalls, ToolChoice, ToolSpec
from agent.repeats import call_key, distinct_calls

__all__ = ["action_record", "call_cases", "cases_from_args", "ground_record", "tool_spec"]


def tool_spec(definition: Mapping[str, Any], *, constrained: bool) -> ToolSpec:
    """A ToolSpec from an OpenAI-format or bare tool definition."""
    fn = definition["function"] if definition.get("type") == "function" else definition
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
        raise ValueError(f"tool definition without a name: {json.dumps(definition)[:200]}")
    return ToolSpec(name=fn["name"], description=fn.get("description", ""),
                    parameters=fn.get("parameters") or {"type": "object", "properties": {}},
                    constrained=constrained)


def cases_from_args(*, tools_file: str | None, prompt: str | None, cases_file: str | None,
                    tool_choice: str = "auto", extra_tools: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """The cases to run: every line of ``cases_file``, or one case from ``prompt`` and ``tools_file``;
    ``extra_tools`` (``--mcp`` servers' tools, bare definitions) are offered in every case after its own.

    Every case is checked here, before a model loads: the shapes (``messages`` a non-empty list of
    ``{"role", ...}`` objects, ``tools`` a list of named tool definitions with valid JSON Schema parameters) and the
    tool choice against the case's tools.

    Raises:
        InputError: one line naming the flag, the file and (for ``--cases``) the line number.
    """
    if cases_file:
        if prompt is not None or tools_file:
            raise InputError("--cases: give either --cases FILE.jsonl or --prompt (with --tools), not both")
        what = f"--cases {cases_file}"
        cases = []
        for line_no, case in read_jsonl_file(cases_file, what):
            where = f"{what} line {line_no}"
            if not isinstance(case, dict):
                raise InputError(f"{where}: a case is a JSON object {{\"id\", \"messages\", \"tools\"}}, "
                                 f"not {_kind(case)}")
            if "messages" not in case:
                raise InputError(f"{where}: the case has no \"messages\"")
            if extra_tools:
                case = {**case, "tools": [*case.get("tools", []), *extra_tools]}
            _check_messages(case["messages"], where)
            _check_tools(case.get("tools", []), f"{where}: \"tools\"")
            choice = case.get("tool_choice", tool_choice)
            _check_choice(choice, case.get("tools", []),
                          where if "tool_choice" in case else f"--tool-choice {choice} ({where})")
            cases.append(case)
        if not cases:
            raise InputError(f"{what}: no cases (the file has no non-blank line)")
        return cases
    if prompt is None:
        raise InputError("--prompt: give --prompt (with --tools) or --cases FILE.jsonl")
    tools: Any = []
    if tools_file:
        what = f"--tools {tools_file}"
        tools = read_json_file(tools_file, what)
        _check_tools(tools, what)
    if extra_tools:
        tools = [*tools, *extra_tools]
        _check_tools(tools, f"--tools {tools_file} with --mcp" if tools_file else "--mcp")
    _check_choice(tool_choice, tools, "--tool-choice")
    return [{"id": "1", "messages": [{"role": "user", "content": prompt}], "tools": tools}]


_ROLES = ("system", "user", "assistant", "tool", "ipython")
"""The chat roles a codec renders (OpenAI's four; `ipython` is Llama 3's name for tool results)."""


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _check_messages(messages: Any, where: str) -> None:
    if not isinstance(messages, list) or not messages:
        raise InputError(f"{where}: \"messages\" must be a non-empty list of chat messages, not {_kind(messages)}"
                         if not isinstance(messages, list) else f"{where}: \"messages\" is empty")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise InputError(f"{where}: messages[{i}] must be an object with a \"role\" string")
        if message["role"] not in _ROLES:
            raise InputError(f"{where}: messages[{i}] has role {message['role']!r}; expected one of "
                             f"{', '.join(_ROLES)}")


def _tool_name(definition: Any) -> str | None:
    fn = definition.get("function") if definition.get("type") == "function" else definition
    return fn.get("name") if isinstance(fn, dict) and isinstance(fn.get("name"), str) and fn["name"] else None


def _check_tools(tools: Any, what: str) -> None:
    if not isinstance(tools, list):
        raise InputError(f"{what}: must be a JSON array of tool definitions, not {_kind(tools)}")
    seen: set[str] = set()
    for i, definition in enumerate(tools):
        if not isinstance(definition, dict):
            raise InputError(f"{what}: tool {i} must be an object, not {_kind(definition)}")
        name = _tool_name(definition)
        if name is None:
            raise InputError(f"{what}: tool {i} has no name (expected {{\"name\", \"description\", \"parameters\"}} "
                             "or {\"type\": \"function\", \"function\": {\"name\", ...}})")
        if name in seen:
            raise InputError(f"{what}: tool name {name!r} is given twice")
        seen.add(name)
        fn = definition["function"] if definition.get("type") == "function" else definition
        parameters = fn.get("parameters")
        if parameters is not None:
            check_json_schema(parameters, f"{what}: tool {name!r} parameters")


def _check_choice(choice: Any, tools: Any, where: str) -> None:
    names = [_tool_name(t) for t in tools] if isinstance(tools, list) else []
    if not isinstance(choice, str) or not choice:
        raise InputError(f"{where}: tool_choice must be a string, not {_kind(choice)}")
    if choice in ("auto", "none"):
        return
    if choice == "required":
        if not names:
            raise InputError(f"{where}: tool_choice 'required' needs at least one tool")
        return
    if choice not in names:
        offered = ", ".join(repr(n) for n in names) or "no tools"
        raise InputError(f"{where}: tool_choice {choice!r} names no offered tool "
                         f"(use auto, required, none or one of: {offered})")


def ground_record(record: dict[str, Any], case: Mapping[str, Any],
                  tool_choice: ToolChoice = "auto") -> dict[str, Any]:
    """``record`` (an `action_record`) under the one-turn grounding policy (see the module docstring): calls
    written twice stand once, calls made mostly of ungrounded required values move to ``withheld`` (only under
    ``auto``: a required or named call is the caller's demand), ungrounded optional arguments are dropped, and each
    call gets ``sources`` (its argument leaves' grounding records)."""
    if record["action"] != "tool_calls":
        return {**record, "withheld": []}
    sources = Sources()
    for index, message in enumerate(case["messages"]):
        sources.add_entry(index, str(message.get("role")), message)
    specs = (tool_spec(t, constrained=True) for t in case.get("tools", []))
    parameters = {spec.name: spec.parameters for spec in specs}
    kept: list[dict[str, Any]] = []
    withheld: list[dict[str, Any]] = []
    distinct, _ = distinct_calls(record["calls"], lambda c: call_key(c["name"], c["arguments"]))
    for call in distinct:
        verdict = judge_call(call["name"], call["arguments"], parameters.get(call["name"]) or {}, sources)
        sourced = {"sources": [g.to_record() for g in verdict.grounding]}
        if verdict.withheld and case.get("tool_choice", tool_choice) == "auto":
            withheld.append({**call, **sourced})
        else:
            kept.append({"name": call["name"], "arguments": verdict.arguments, "dropped": list(verdict.dropped),
                         **sourced})
    out = {**record, "calls": kept, "withheld": withheld}
    if not kept:
        out["action"] = "final_text"
    return out


def action_record(case_id: Any, action: Action, *, raw: str, tokens: int, seconds: float) -> dict[str, Any]:
    """The documented per-case output: ``{"id","action","text","calls","raw","tokens","seconds"}`` (``seconds``
    rounded to the millisecond)."""
    record: dict[str, Any] = {"id": case_id, "action": "", "text": "", "calls": [], "raw": raw,
                              "tokens": tokens, "seconds": round(seconds, 3)}
    match action:
        case FinalText(text=text):
            record.update(action="final_text", text=text)
        case ToolCalls(calls=calls, text=text):
            record.update(action="tool_calls", text=text,
                          calls=[{"name": c.name, "arguments": c.arguments} for c in calls])
        case MalformedToolCall(reason=reason, detail=detail, text=text):
            record.update(action="malformed", text=text, reason=str(reason), detail=detail)
    return record


def call_cases(model: str, cases: Sequence[Mapping[str, Any]], *, tool_choice: ToolChoice = "auto",
               constrained: bool = True, max_tokens: int = 256, n_threads: int | None = None,
               n_ctx: int = 4096, progress: Callable[[str], None] | None = None,
               parallel_calls: bool = True, grounding: bool = True) -> Iterator[dict[str, Any]]:
    """Run one turn per case on one loaded model and yield its record; nothing is executed. A turn may hold
    several calls (``parallel_calls``), as OpenAI's API allows by default. ``grounding``: the one-turn policy
    (`ground_record`); off, the calls are returned as the model wrote them."""
    chat = load_chat_model(model, n_ctx=n_ctx, n_threads=n_threads, progress=progress)
    engine = ChatModelEngine(chat.model, chat.codec)
    for case in cases:
        specs = [tool_spec(t, constrained=constrained) for t in case.get("tools", [])]
        started = time.perf_counter()
        turn = engine.run_turn(case["messages"], tools=specs, tool_choice=case.get("tool_choice", tool_choice),
                               max_tokens=max_tokens, parallel_calls=parallel_calls)
        engine.rollback()
        record = action_record(case.get("id"), chat.codec.parse(turn.text), raw=turn.text,
                               tokens=turn.n_output_tokens, seconds=time.perf_counter() - started)
        yield ground_record(record, case, tool_choice) if grounding else record
