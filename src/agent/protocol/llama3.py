"""Llama 3.1/3.2/3.3 codec (id ``llama3-json-tool-call-v1``): JSON tool calls, results under the ``ipython`` role.

Owns everything Llama-3-shaped: the prompt exactly as the official templates render it (3.1 and 3.3 share one
template with a fixed default date and ``builtin_tools``; 3.2's defaults the date to today via ``strftime_now``),
with the template variables ``date_string``, ``tools_in_user_message`` (default true: tools go into the first user
message), ``bos_token`` and ``custom_tools`` overridable per call; the parser (``<|python_tag|>`` then JSON, or bare
JSON at the start of the turn, ``{"name": …, "parameters": …}``, several joined by ``;`` tolerated); and the lazy
tool-call grammar. Refuses what the template cannot render (`MessageFormatError`) and parses strictly.

    messages + tools ─► render_segments ─► [Segment]   (tools in the first user message by default)
    model text ─► parse ─► FinalText | ToolCalls | MalformedToolCall
    tools + tool_choice ─► tool_call_grammar ─► FREE(no leading "{") [(?&<|python_tag|>) CALL] | CALL

Where the official template raises on an assistant message with several tool calls, this codec renders them joined
by ``"; "`` (the form it parses), so a turn it accepted can always be committed; see docs/codecs.md.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent.protocol._calls import (DIALECT_WS, FENCE_CLOSE, FENCE_OPEN, JsonFailure, call_from_object, decode_value,
                                   fenced_calls, malformed)
from agent.protocol._pattern import ChoiceMode, envelope_alternatives, escape, free_text, resolve_choice, special
from agent.protocol._render import (SegmentBuilder, call_function, check_template_vars, content_text, role_of,
                                    tojson, tool_definitions)
from agent.protocol.base import (Action, Codec, FinalText, MalformedReason, MalformedToolCall, MessageFormatError,
                                 Segment, ToolCall, ToolCalls, ToolChoice, ToolSpec)

__all__ = ["LLAMA31_DATE", "Llama3Codec"]

LLAMA31_DATE = "26 Jul 2024"
"""The ``date_string`` the 3.1/3.3 template uses when none is given (3.2 uses today's date)."""

_TAG = "<|python_tag|>"
TRIGGERS = (_TAG, FENCE_OPEN)
"""What free text may never spell: each starts a call attempt (see `Llama3Codec.parse`)."""
_BOS = "<|begin_of_text|>"
_CALL_FORMAT = ('Respond in the format {"name": function name, "parameters": dictionary of argument name and its '
                'value}.Do not use variables.\n\n')
_SYSTEM_TOOLS = ("You have access to the following functions. To call a function, please respond with JSON for a "
                 "function call." + _CALL_FORMAT)
_USER_TOOLS = ("Given the following functions, please respond with a JSON for a function call with its proper "
               "arguments that best answers the given prompt.\n\n" + _CALL_FORMAT)
_ROLES = ("system", "user", "assistant", "tool", "ipython")
_VARIANTS = {"llama3.1": "3.1", "llama3.2": "3.2", "llama3.3": "3.1"}


class Llama3Codec(Codec):
    """Render/parse/constrain Llama 3.x JSON tool calling."""

    id = "llama3-json-tool-call-v1"

    def __init__(self, *, family: str = "llama3.1", python_tag: bool = True, date_string: str | None = None,
                 today: Callable[[], _dt.datetime] = _dt.datetime.now, note: str = "") -> None:
        """
        Args:
            family: ``"llama3.1"``, ``"llama3.2"`` or ``"llama3.3"`` (3.3 ships the 3.1 template).
            python_tag: the vocabulary has ``<|python_tag|>`` and ``<|eom_id|>`` (Llama 3.1+); false (Llama 3.0
                vocabularies, where those ids are reserved) leaves only the bare-JSON call path in the grammar.
            date_string: pin the default ``date_string`` (per-call ``render(date_string=...)`` still wins).
            today: clock for 3.2's ``strftime_now("%d %b %Y")`` default (injectable for tests).
            note: caveat shown to users (see `Codec.note`).
        """
        if family not in _VARIANTS:
            raise ValueError(f"unknown Llama 3 family {family!r}; expected one of {', '.join(_VARIANTS)}")
        self.family = family
        self.python_tag = python_tag
        self.date_string = date_string
        self.today = today
        self.note = note
        self.stop_token_names = ("<|eot_id|>", "<|eom_id|>") if python_tag else ("<|eot_id|>",)
        self._template = _VARIANTS[family]

    def __repr__(self) -> str:
        return f"Llama3Codec(family={self.family!r}, python_tag={self.python_tag})"

    @property
    def template_vars(self) -> tuple[str, ...]:
        """The variables ``render(..., **template_vars)`` accepts for this family."""
        base = ("date_string", "tools_in_user_message", "bos_token", "custom_tools")
        return base + ("builtin_tools",) if self._template == "3.1" else base

    def default_date_string(self) -> str:
        if self.date_string is not None:
            return self.date_string
        return LLAMA31_DATE if self._template == "3.1" else self.today().strftime("%d %b %Y")

    # -- render --------------------------------------------------------------------------------------------------

    def render_segments(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[ToolSpec] | None = None,
                        add_generation_prompt: bool = True, **template_vars: Any) -> list[Segment]:
        """The prompt exactly as the official template renders it (BOS text included), split by trust.

        ``tools=None`` means no tools; an empty list still renders the tool preamble, as the template does.

        Raises:
            MessageFormatError: empty list, unknown role, non-string content, tools in the user message with no
                message to put them in, malformed ``tool_calls``.
            TemplateVariableError: a variable this family's template does not read.
        """
        check_template_vars(template_vars, self.template_vars)
        if "custom_tools" in template_vars:
            tools = template_vars["custom_tools"]
        in_user = bool(template_vars.get("tools_in_user_message", True))
        date = template_vars.get("date_string")
        date = self.default_date_string() if date is None else date
        builtin = template_vars.get("builtin_tools")
        msgs = list(messages)
        if not msgs:
            raise MessageFormatError(None, "the template needs at least one message")
        for i in range(len(msgs)):
            role_of(msgs, i, _ROLES)
        defs = None if tools is None else tool_definitions(tools)
        offset = 0  # index shift into the caller's list, for error messages
        system = ""
        if msgs[0]["role"] == "system":
            system = content_text(msgs[0], 0).strip()
            offset = 1

        out = SegmentBuilder()
        out.trusted(template_vars.get("bos_token", _BOS))
        out.trusted("<|start_header_id|>system<|end_header_id|>\n\n")
        if builtin is not None or defs is not None:
            out.trusted("Environment: ipython\n")
        if builtin is not None:
            out.trusted("Tools: ")
            out.untrusted(", ".join(str(b) for b in builtin if b != "code_interpreter"))
            out.trusted("\n\n")
        out.trusted("Cutting Knowledge Date: December 2023\nToday Date: ")
        out.untrusted(str(date))
        out.trusted("\n\n")
        if defs is not None and not in_user:
            out.trusted(_SYSTEM_TOOLS)
            _render_tools(out, defs)
        out.untrusted(system)
        out.trusted("<|eot_id|>")
        if in_user and defs is not None:
            if offset == len(msgs):
                raise MessageFormatError(None, "Cannot put tools in the first user message when there's no first "
                                         "user message!")
            first = content_text(msgs[offset], offset).strip()
            offset += 1
            out.trusted("<|start_header_id|>user<|end_header_id|>\n\n" + _USER_TOOLS)
            _render_tools(out, defs)
            out.untrusted(first)
            out.trusted("<|eot_id|>")
        for i in range(offset, len(msgs)):
            self._render_message(out, msgs[i], i, builtin)
        if add_generation_prompt:
            out.trusted("<|start_header_id|>assistant<|end_header_id|>\n\n")
        return out.segments()

    def _render_message(self, out: SegmentBuilder, msg: Mapping[str, Any], index: int, builtin: Any) -> None:
        role = msg["role"]
        calls = msg.get("tool_calls")
        if role in ("tool", "ipython"):
            content = msg.get("content")
            if not isinstance(content, (str, list, dict)):
                raise MessageFormatError(index, f"tool content must be a string, list or dict, got "
                                         f"{type(content).__name__}")
            out.trusted("<|start_header_id|>ipython<|end_header_id|>\n\n")
            out.untrusted(tojson(content))  # the template's `is iterable` holds for strings: they are JSON-quoted
            out.trusted("<|eot_id|>")
        elif not calls:  # the template raises on a present-but-empty tool_calls; we render such a turn as text
            out.trusted(f"<|start_header_id|>{role}<|end_header_id|>\n\n")
            out.untrusted(content_text(msg, index).strip())
            out.trusted("<|eot_id|>")
        else:
            if not isinstance(calls, Sequence) or isinstance(calls, str):
                raise MessageFormatError(index, "tool_calls must be a list")
            out.trusted("<|start_header_id|>assistant<|end_header_id|>\n\n")
            for n, call in enumerate(calls):
                if n:
                    out.trusted("; ")
                name, arguments = call_function(call, index, unwrap_optional=False)
                if builtin is not None and name in builtin:
                    _render_builtin_call(out, name, arguments, index)
                else:
                    out.trusted('{"name": "')
                    out.untrusted(name)
                    out.trusted('", "parameters": ')
                    out.untrusted(tojson(arguments))
                    out.trusted("}")
            out.trusted("<|eom_id|>" if builtin is not None else "<|eot_id|>")

    # -- parse ---------------------------------------------------------------------------------------------------

    def parse(self, text: str) -> Action:
        """Total. ``<|python_tag|>`` or a ````` ```json ````` block anywhere, or ``{`` as the first non-blank
        character, starts a call attempt."""
        turn = text
        for stop in ("<|eot_id|>", "<|eom_id|>"):
            if turn.endswith(stop):
                turn = turn[: -len(stop)]
                break
        tag, fence = turn.find(_TAG), turn.find(FENCE_OPEN)
        start = len(turn) - len(turn.lstrip(DIALECT_WS))
        if turn.startswith("{", start):
            return _parse_calls(turn, start, prose="", text=text)
        if fence != -1 and (tag == -1 or fence < tag):
            return fenced_calls(turn, fence, args_key="parameters", wrong_key="arguments", prose=turn[:fence],
                                text=text)
        if tag != -1:
            return _parse_calls(turn, tag + len(_TAG), prose=turn[:tag], text=text)
        return FinalText(text=turn)

    # -- grammar -------------------------------------------------------------------------------------------------

    def tool_call_grammar(self, tools: Sequence[ToolSpec], tool_choice: ToolChoice = "auto", *,
                          parallel_calls: bool = False, final_pattern: str | None = None,
                          rules: dict[str, str] | None = None) -> str:
        """The whole assistant turn; one call per turn whatever ``parallel_calls`` says (the official template
        renders only one).

        auto: free text that neither starts with ``{`` nor spells ``<|python_tag|>`` or ````` ```json `````,
        optionally followed by ``<|python_tag|>`` and a call or by a ````` ```json ````` block holding one; or a
        bare call. required / a tool name: an optional ``<|python_tag|>`` then the call. none: the free text only.
        A text answer is never empty. The turn then ends with an EOG token (``<|eot_id|>``/``<|eom_id|>``).
        """
        mode, callable_tools = resolve_choice(tools, tool_choice)
        answer = f"(?:{final_pattern})" if final_pattern else free_text(TRIGGERS, first_not="{", nonempty=True)
        if mode is ChoiceMode.NONE:
            return answer
        call = envelope_alternatives(callable_tools, args_key="parameters", rules=rules)
        tag = special(_TAG) if self.python_tag else ""
        if mode is not ChoiceMode.AUTO:
            return f"(?:{tag})?{call}" if tag else call
        fenced = f"{escape(FENCE_OPEN)}\\n{call}\\n{escape(FENCE_CLOSE)}"
        after = "|".join([f"{tag}{call}"] * bool(tag) + [fenced])
        if final_pattern:
            return f"(?:{answer}|{call}|{after})"
        return f"(?:{answer}|{free_text(TRIGGERS, first_not='{')}(?:{after})|{call})"


def _render_tools(out: SegmentBuilder, defs: list[Any]) -> None:
    for tool in defs:
        out.untrusted(tojson(tool, indent=4))
        out.trusted("\n\n")


def _render_builtin_call(out: SegmentBuilder, name: str, arguments: Any, index: int) -> None:
    if not isinstance(arguments, Mapping) or not all(isinstance(v, str) for v in arguments.values()):
        raise MessageFormatError(index, "a builtin tool call needs string-valued arguments")
    out.trusted(_TAG)
    out.untrusted(name)
    out.trusted(".call(")
    for n, (key, value) in enumerate(arguments.items()):
        if n:
            out.trusted(", ")
        out.untrusted(str(key))
        out.trusted('="')
        out.untrusted(value)
        out.trusted('"')
    out.trusted(")")


def _parse_calls(turn: str, start: int, *, prose: str, text: str) -> ToolCalls | MalformedToolCall:
    """One or more JSON call objects from ``start``, joined by ``;``; only blanks (or one ``;``) may follow."""
    calls: list[ToolCall] = []
    pos = start
    while True:
        pos = len(turn) - len(turn[pos:].lstrip(DIALECT_WS))
        if pos == len(turn):
            if not calls:
                return malformed(MalformedReason.EMPTY_CALL, f"'{_TAG}' is followed by no call", turn[start:], text)
            return ToolCalls(calls=tuple(calls), text=prose)
        try:
            obj, end = decode_value(turn, pos)
        except JsonFailure as exc:
            return malformed(MalformedReason.INVALID_JSON, f"call at char {pos} is not valid JSON: {exc}",
                             turn[pos:], text)
        call = call_from_object(obj, args_key="parameters", wrong_key="arguments", raw=turn[pos:end], text=text)
        if isinstance(call, MalformedToolCall):
            return call
        calls.append(call)
        rest = turn[end:].lstrip(DIALECT_WS)
        if rest.startswith(";"):
            pos = len(turn) - len(rest) + 1
            if not turn[pos:].strip(DIALECT_WS):
                return ToolCalls(calls=tuple(calls), text=prose)
            continue
        if rest:
            return malformed(MalformedReason.TRAILING_TEXT, f"text after the call ending at char {end}: "
                             f"{rest[:40]!r}", turn[end:], text)
        return ToolCalls(calls=tuple(calls), text=prose)
