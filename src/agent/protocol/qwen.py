"""Qwen2.5 codec (id ``qwen2.5-tool-call-v1``): ChatML with ``<tool_call>`` JSON envelopes.

Owns everything Qwen-shaped: the prompt exactly as the official Qwen2.5 template renders it (tools as JSON lines in
the system turn inside ``<tools></tools>``, the template's default system prompt when none is given, calls as
``<tool_call>\\n{"name": …, "arguments": …}\\n</tool_call>``, results as ``<tool_response>`` blocks in a user turn
with consecutive results merged), the parser of assistant turns, and the lazy tool-call grammar. Refuses: message
lists the template cannot render (`MessageFormatError`), and any leniency in parsing (every attempted call that does
not decode is a `MalformedToolCall` with a precise reason).

    messages + tools ─► render_segments ─► [Segment] ─► tokenizer (untrusted pieces: special parsing off)
    model text ─► parse ─► FinalText | ToolCalls | MalformedToolCall
    tools + tool_choice ─► tool_call_grammar ─► FREE (?&<tool_call>)\\n{envelope}\\n(?&</tool_call>) …

The same codec serves plain-ChatML models (SmolLM2): ``special_tags=False`` writes the tags as literal text in the
grammar, because such vocabularies have no ``<tool_call>`` token.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.protocol._calls import (DIALECT_WS, FENCE_CLOSE, FENCE_OPEN, JSON_WS, JsonFailure, call_from_object,
                                   decode_value, fenced_calls, malformed)
from agent.protocol._pattern import ChoiceMode, envelope_alternatives, escape, free_text, resolve_choice, special
from agent.protocol._render import (SegmentBuilder, call_function, check_template_vars, content_text, role_of,
                                    tojson, tool_definitions)
from agent.protocol.base import (Action, Codec, FinalText, MalformedReason, MalformedToolCall, MessageFormatError,
                                 Segment, ToolCall, ToolCalls, ToolChoice, ToolSpec)

__all__ = ["QWEN_DEFAULT_SYSTEM", "QwenCodec"]

QWEN_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
"""The system prompt the official template inserts when the conversation has none."""

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
TRIGGERS = (_OPEN, _CLOSE, FENCE_OPEN)
"""What free text may never spell: each starts a call attempt (see `QwenCodec.parse`)."""
_TOOLS_HEAD = ("\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
_TOOLS_TAIL = ("\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
               "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
               "<args-json-object>}\n</tool_call><|im_end|>\n")
_ROLES = ("system", "user", "assistant", "tool")


class QwenCodec(Codec):
    """Render/parse/constrain Qwen2.5-style ChatML tool calling."""

    id = "qwen2.5-tool-call-v1"
    stop_token_names = ("<|im_end|>", "<|endoftext|>")

    def __init__(self, *, family: str = "qwen2.5", special_tags: bool = True, note: str = "",
                 default_system: str | None = QWEN_DEFAULT_SYSTEM) -> None:
        """
        Args:
            family: label for traces (``"qwen2.5"``, or ``"chatml"`` for a plain ChatML model given this codec).
            special_tags: ``<tool_call>``/``</tool_call>`` are special tokens of the vocabulary (true for Qwen2.5);
                false writes them as literal text in the grammar.
            note: caveat shown to users (see `Codec.note`).
            default_system: the system text rendered when the conversation has no system message — Qwen2.5's
                own by default; a plain ChatML model passes its template's (SmolLM2's names SmolLM), or ``None``
                for a template that inserts none (then no system turn is rendered unless tools need one).
        """
        self.family = family
        self.special_tags = special_tags
        self.note = note
        self.default_system = default_system

    def __repr__(self) -> str:
        return f"QwenCodec(family={self.family!r}, special_tags={self.special_tags})"

    # -- render --------------------------------------------------------------------------------------------------

    def render_segments(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[ToolSpec] | None = None,
                        add_generation_prompt: bool = True, **template_vars: Any) -> list[Segment]:
        """The prompt exactly as the official Qwen2.5 template renders it, split by trust.

        Raises:
            MessageFormatError: empty list, unknown role, or a value the template would concatenate that is not a
                string (where the template would raise or print ``None``).
            TemplateVariableError: any template variable (this template reads none).
        """
        check_template_vars(template_vars, ())
        msgs = list(messages)
        if not msgs:
            raise MessageFormatError(None, "the template needs at least one message")
        for i in range(len(msgs)):
            role_of(msgs, i, _ROLES)
        out = SegmentBuilder()
        defs = tool_definitions(tools or ())
        has_system = msgs[0]["role"] == "system"
        if has_system or defs or self.default_system is not None:
            out.trusted("<|im_start|>system\n")
            if has_system:
                out.untrusted(content_text(msgs[0], 0))
            elif self.default_system is not None:
                out.trusted(self.default_system)
            if defs:
                out.trusted(_TOOLS_HEAD)
                for tool in defs:
                    out.trusted("\n")
                    out.untrusted(tojson(tool))
                out.trusted(_TOOLS_TAIL)
            else:
                out.trusted("<|im_end|>\n")
        for i, msg in enumerate(msgs):
            role, calls = msg["role"], msg.get("tool_calls")
            if role == "user" or (role == "system" and i > 0) or (role == "assistant" and not calls):
                out.trusted(f"<|im_start|>{role}\n")
                out.untrusted(content_text(msg, i))
                out.trusted("<|im_end|>\n")
            elif role == "assistant":
                self._render_calls(out, msg, i)
            elif role == "tool":
                if i == 0 or msgs[i - 1]["role"] != "tool":
                    out.trusted("<|im_start|>user")
                out.trusted("\n<tool_response>\n")
                out.untrusted(content_text(msg, i))
                out.trusted("\n</tool_response>")
                if i == len(msgs) - 1 or msgs[i + 1]["role"] != "tool":
                    out.trusted("<|im_end|>\n")
        if add_generation_prompt:
            out.trusted("<|im_start|>assistant\n")
        return out.segments()

    @staticmethod
    def _render_calls(out: SegmentBuilder, msg: Mapping[str, Any], index: int) -> None:
        calls = msg["tool_calls"]
        if not isinstance(calls, Sequence) or isinstance(calls, str):
            raise MessageFormatError(index, "tool_calls must be a list")
        content = msg.get("content")
        out.trusted("<|im_start|>assistant")
        if content:
            if not isinstance(content, str):
                raise MessageFormatError(index, f"content must be a string, got {type(content).__name__}")
            out.trusted("\n")
            out.untrusted(content)
        for call in calls:
            name, arguments = call_function(call, index, unwrap_optional=True)
            out.trusted('\n<tool_call>\n{"name": "')
            out.untrusted(name)
            out.trusted('", "arguments": ')
            out.untrusted(tojson(arguments))
            out.trusted("}\n</tool_call>")
        out.trusted("<|im_end|>\n")

    # -- parse ---------------------------------------------------------------------------------------------------

    def parse(self, text: str) -> Action:
        """Total: prose with no trigger is FinalText; tags or ``FENCE_OPEN`` blocks with good JSON are ToolCalls;
        anything else is malformed.

        Three shapes are call attempts: the ``<tool_call>`` tag, a Markdown ````` ```json ````` block (what
        Qwen2.5-Coder writes under ``auto``), and a turn whose first non-blank character is ``{`` (a bare call,
        also written without tags). A JSON-looking turn is never silently taken as prose."""
        turn = _without_stop(text, self.stop_token_names)
        first_open, first_close, fence = turn.find(_OPEN), turn.find(_CLOSE), turn.find(FENCE_OPEN)
        if first_close != -1 and all(at == -1 or first_close < at for at in (first_open, fence)):
            return malformed(MalformedReason.UNOPENED_TAG,
                             f"'{_CLOSE}' at char {first_close} has no '{_OPEN}' before it",
                             turn[: first_close + len(_CLOSE)], text)
        start = len(turn) - len(turn.lstrip(DIALECT_WS))
        if turn.startswith("{", start):
            return _bare_calls(turn, start, text)
        if fence != -1 and (first_open == -1 or fence < first_open):
            return fenced_calls(turn, fence, args_key="arguments", wrong_key="parameters",
                                prose=_prose(turn[:fence]), text=text)
        if first_open == -1:
            return FinalText(text=turn)
        prose = turn[:first_open]
        calls: list[ToolCall] = []
        pos = first_open
        while True:
            body_start = pos + len(_OPEN)
            close, reopen = turn.find(_CLOSE, body_start), turn.find(_OPEN, body_start)
            if close == -1 or reopen != -1 and reopen < close:
                until = "the end of the turn" if close == -1 else f"the next '{_OPEN}' at char {reopen}"
                return malformed(MalformedReason.UNCLOSED_TAG, f"'{_OPEN}' at char {pos} is not closed before {until}",
                                 turn[pos: len(turn) if close == -1 else reopen], text)
            end = close + len(_CLOSE)
            call = _decode_call(turn[body_start:close], turn[pos:end], text)
            if isinstance(call, MalformedToolCall):
                return call
            calls.append(call)
            rest = turn[end:].lstrip(DIALECT_WS)
            if not rest:
                return ToolCalls(calls=tuple(calls), text=_prose(prose))
            if not rest.startswith(_OPEN):
                return malformed(MalformedReason.TRAILING_TEXT,
                                 f"text after the call ending at char {end}: {rest[:40]!r}", turn[end:], text)
            pos = len(turn) - len(rest)

    # -- grammar -------------------------------------------------------------------------------------------------

    def tool_call_grammar(self, tools: Sequence[ToolSpec], tool_choice: ToolChoice = "auto", *,
                          parallel_calls: bool = False, final_pattern: str | None = None,
                          rules: dict[str, str] | None = None) -> str:
        """The whole assistant turn: free text that cannot spell a trigger, then (per ``tool_choice``) calls.

        Calls are ``<tool_call>\\n{"name": "<offered>", "arguments": <args>}\\n</tool_call>``; with
        ``parallel_calls`` several, separated by ``\\n``. Nothing may follow the last one (the engine's EOS,
        ``<|im_end|>``, ends the turn). A text answer is never empty. Under ``auto`` the other two shapes the
        model writes (see `parse`) are held to the same envelope from their first character on: a ``` ```json ```
        block (its opening is a trigger that free text cannot spell, so a fenced JSON block is always a
        constrained call, never an answer) and a bare call (free text cannot start with ``{``).

        ``required`` is ``auto`` without the answer: the turn starts with a call in any of the three shapes. Held
        to the tag alone, the default model does not stop after its calls: with several calls allowed it went on
        writing ``<tool_call>`` blocks on all 160 BFCL dev cases that need a call (247 of 256 tokens on average:
        the budget ended the turns), while in the shape it picks itself (a ``` ```json ``` block on 158) it
        closes the block after its calls, as under ``auto`` (docs/codecs.md). A named tool stays one tag call.
        """
        mode, callable_tools = resolve_choice(tools, tool_choice)
        answer = f"(?:{final_pattern})" if final_pattern else free_text(TRIGGERS, first_not="{", nonempty=True)
        if mode is ChoiceMode.NONE:
            return answer
        tag = special if self.special_tags else escape
        envelope = envelope_alternatives(callable_tools, args_key="arguments", rules=rules)
        call = f"{tag(_OPEN)}\\n{envelope}\\n{tag(_CLOSE)}"
        if mode is ChoiceMode.NAMED:
            return call
        calls = _several(call, parallel_calls)
        fenced = f"{escape(FENCE_OPEN)}\\n{_several(envelope, parallel_calls)}\\n{escape(FENCE_CLOSE)}"
        bare = _several(envelope, parallel_calls)
        shapes = f"{calls}|{fenced}|{bare}"  # every call shape `parse` reads, from the turn's first character
        if mode is ChoiceMode.REQUIRED:
            return f"(?:{shapes})"
        if final_pattern:
            return f"(?:{answer}|{shapes})"
        return f"(?:{answer}|{free_text(TRIGGERS, first_not='{')}(?:{calls}|{fenced})|{bare})"


def _several(one: str, parallel_calls: bool) -> str:
    """``one``, or with ``parallel_calls`` one or more of it separated by newlines."""
    return f"{one}(?:\\n{one})*" if parallel_calls else one


def _prose(text: str) -> str:
    """The prose before the first call, without the one newline that separates it from the call."""
    return text[:-1] if text.endswith("\n") else text


def _without_stop(text: str, stops: Sequence[str]) -> str:
    for stop in stops:
        if text.endswith(stop):
            return text[: -len(stop)]
    return text


def _bare_calls(turn: str, start: int, text: str) -> ToolCalls | MalformedToolCall:
    """Call objects written without tags from ``start`` to the end of the turn, separated by blanks."""
    calls: list[ToolCall] = []
    pos = start
    while pos < len(turn):
        end = _object_end(turn, pos)
        call = _decode_call(turn[pos:end], turn[pos:end], text)
        if isinstance(call, MalformedToolCall):
            return call
        calls.append(call)
        pos = len(turn) - len(turn[end:].lstrip(DIALECT_WS))
        if pos < len(turn) and not turn.startswith("{", pos):
            return malformed(MalformedReason.TRAILING_TEXT, f"text after the call ending at char {end}: "
                             f"{turn[pos:pos + 40]!r}", turn[end:], text)
    return ToolCalls(calls=tuple(calls), text="")


def _object_end(turn: str, start: int) -> int:
    """Where the JSON value at ``start`` ends, or the end of the turn when it does not decode (the whole rest is
    then the malformed call's body)."""
    try:
        return decode_value(turn, start)[1]
    except JsonFailure:
        return len(turn)


def _decode_call(body: str, raw: str, text: str) -> ToolCall | MalformedToolCall:
    if not body.strip(DIALECT_WS):
        return malformed(MalformedReason.EMPTY_CALL, f"'{_OPEN}' envelope holds no call", raw, text)
    start = len(body) - len(body.lstrip(JSON_WS))
    try:
        obj, end = decode_value(body, start)
    except JsonFailure as exc:
        return malformed(MalformedReason.INVALID_JSON, f"call body is not valid JSON: {exc}", raw, text)
    if body[end:].strip(JSON_WS):
        return malformed(MalformedReason.INVALID_JSON,
                         f"extra data after the JSON value inside '{_OPEN}': {body[end:end + 40]!r}", raw, text)
    return call_from_object(obj, args_key="arguments", wrong_key="parameters", raw=raw, text=text)
