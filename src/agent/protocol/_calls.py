"""Strict decoding of one call object: the JSON both families put inside their envelope.

Owns the rules every codec shares once the envelope has been cut out: strict JSON (no NaN/Infinity, no extra data,
no repeated key in the call object itself; inside arguments a repeated key keeps its last value, as ``json.loads``
does and as the "any object" grammar allows), exactly ``{"name": <string>, <args_key>: <object>}``, and the precise
`MalformedReason` for every way that can fail. Refuses leniency: a span that looks like a call is a call attempt,
and an attempt that does not decode is a `MalformedToolCall`, never prose and never a guess.

    envelope body ─► strict_json ─► call_from_object ─► ToolCall | MalformedToolCall
"""

from __future__ import annotations

import json
from typing import Any

from agent.json_depth import MAX_JSON_DEPTH, shown_path, text_depth, too_deep
from agent.protocol.base import MalformedReason, MalformedToolCall, ToolCall, ToolCalls

__all__ = ["FENCE_CLOSE", "FENCE_OPEN", "JSON_WS", "DIALECT_WS", "JsonFailure", "call_from_object", "decode_value",
           "fenced_calls", "is_carriable_name", "malformed"]

JSON_WS = " \t\n\r"
"""Whitespace JSON itself allows between tokens."""
DIALECT_WS = " \t\n\r\f\v"
"""The regex dialect's ``\\s``: what codecs skip around envelopes, so grammar and parser agree on "blank"."""
FENCE_OPEN, FENCE_CLOSE = "```json", "```"
"""A Markdown JSON block: the call shape small models write most when a tool fits (see docs/codecs.md). Under a
tool-calling turn ``FENCE_OPEN`` is a trigger like the family's tag: it always starts a call attempt."""


class JsonFailure(Exception):
    """Internal: a strict-JSON failure with a human detail (converted to INVALID_JSON by the caller)."""


class _Duplicated(dict):  # type: ignore[type-arg]
    """A decoded object whose text repeated a key (the last value won, as in ``json.loads``)."""

    duplicates: tuple[str, ...] = ()


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    seen: set[str] = set()
    marked = _Duplicated(out)
    marked.duplicates = tuple(k for k, _ in pairs if k in seen or seen.add(k))
    return marked


def _constant(name: str) -> Any:
    raise JsonFailure(f"{name} is not JSON")


_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_constant)


def decode_value(text: str, start: int = 0) -> tuple[Any, int]:
    """Decode one strict JSON value beginning exactly at ``start``; return it and the index just past it.

    Raises:
        JsonFailure: with a detail naming the position, for any syntax error or non-standard JSON; naming the depth
            for a value nested deeper than `MAX_JSON_DEPTH` (what the session copies and traces must stay far from
            Python's recursion limit).
    """
    try:
        value, end = _DECODER.raw_decode(text, start)
    except JsonFailure:
        raise
    except json.JSONDecodeError as exc:
        raise JsonFailure(f"{exc.msg} at char {exc.pos - start}") from None
    except RecursionError:
        depth, at = text_depth(text, start)
        raise JsonFailure(f"nested {depth:,} levels deep (at char {at - start:,}), deeper than the "
                          f"{MAX_JSON_DEPTH} levels a call may nest") from None  # fmt: skip
    except ValueError as exc:  # e.g. int longer than sys.get_int_max_str_digits()
        raise JsonFailure(str(exc)) from None
    path = too_deep(value, MAX_JSON_DEPTH)
    if path is not None:
        raise JsonFailure(f"nested deeper than the {MAX_JSON_DEPTH} levels a call may nest (at "
                          f"{shown_path(path)})")  # fmt: skip
    return value, end


def is_carriable_name(name: str) -> bool:
    """True iff the name survives being spliced into a JSON string unescaped, as both official templates do."""
    if not name or name != name.strip(DIALECT_WS):
        return False
    return not any(ch in '"\\' or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name)


def malformed(reason: MalformedReason, detail: str, raw: str, text: str) -> MalformedToolCall:
    return MalformedToolCall(reason=reason, detail=detail, raw=raw, text=text)


def call_from_object(obj: Any, *, args_key: str, wrong_key: str, raw: str, text: str) -> ToolCall | MalformedToolCall:
    """Check one decoded call object against ``{"name": str, args_key: object}`` and nothing else.

    Args:
        obj: the decoded JSON value.
        args_key: this family's arguments key (``"arguments"`` or ``"parameters"``).
        wrong_key: the other family's key, reported as WRONG_ARGUMENTS_KEY rather than as an unexpected key.
        raw: the model text the object came from (kept on the result).
        text: the whole turn (kept on a MalformedToolCall).
    """
    if isinstance(obj, _Duplicated):
        repeated = ", ".join(map(repr, obj.duplicates))
        return malformed(MalformedReason.INVALID_JSON, f"call object repeats key(s) {repeated}", raw, text)
    if not isinstance(obj, dict):
        return malformed(MalformedReason.NOT_AN_OBJECT, f"call body is a JSON {_json_kind(obj)}, expected an object",
                         raw, text)
    if "name" not in obj:
        return malformed(MalformedReason.MISSING_NAME, f"call object has no \"name\" (keys: {_keys(obj)})", raw, text)
    name = obj["name"]
    if not isinstance(name, str):
        return malformed(MalformedReason.BAD_NAME, f"\"name\" is a JSON {_json_kind(name)}, expected a string",
                         raw, text)
    if not is_carriable_name(name):
        return malformed(MalformedReason.BAD_NAME, f"\"name\" {name!r} is empty or has quotes, backslashes, control "
                         "characters or surrounding whitespace", raw, text)
    if args_key not in obj:
        if wrong_key in obj:
            return malformed(MalformedReason.WRONG_ARGUMENTS_KEY,
                             f"arguments are under {wrong_key!r}; this format uses {args_key!r}", raw, text)
        return malformed(MalformedReason.MISSING_ARGUMENTS, f"call object has no {args_key!r} (keys: {_keys(obj)})",
                         raw, text)
    extra = [k for k in obj if k not in ("name", args_key)]
    if extra:
        return malformed(MalformedReason.UNEXPECTED_KEYS,
                         f"unexpected key(s) {', '.join(repr(k) for k in extra)}; a call has only \"name\" and "
                         f"{args_key!r}", raw, text)
    arguments = obj[args_key]
    if not isinstance(arguments, dict):
        return malformed(MalformedReason.ARGUMENTS_NOT_OBJECT,
                         f"{args_key!r} is a JSON {_json_kind(arguments)}, expected an object", raw, text)
    return ToolCall(name=name, arguments=arguments, raw=raw)


def fenced_calls(turn: str, start: int, *, args_key: str, wrong_key: str, prose: str,
                 text: str) -> ToolCalls | MalformedToolCall:
    """The calls of ``FENCE_OPEN`` blocks, the first one opening at ``start``, to the end of the turn.

    A block holds one or more call objects separated by blanks (what the grammars emit), or one JSON array of
    them; only blanks and further blocks may follow a block. JSON is decoded value by value, so a ``FENCE_CLOSE``
    inside a string argument does not end the block.
    """
    calls: list[ToolCall] = []
    pos = start
    while True:
        at = pos + len(FENCE_OPEN)
        found = len(calls)
        while True:
            at = len(turn) - len(turn[at:].lstrip(DIALECT_WS))
            if turn.startswith(FENCE_CLOSE, at):
                break
            if at == len(turn):
                return malformed(MalformedReason.UNCLOSED_TAG, f"'{FENCE_OPEN}' at char {pos} is not closed "
                                 f"before the end of the turn", turn[pos:], text)
            try:
                value, end = decode_value(turn, at)
            except JsonFailure as exc:
                return malformed(MalformedReason.INVALID_JSON, f"call at char {at} is not valid JSON: {exc}",
                                 turn[at:], text)
            for obj in value if isinstance(value, list) else [value]:
                call = call_from_object(obj, args_key=args_key, wrong_key=wrong_key, raw=turn[at:end], text=text)
                if isinstance(call, MalformedToolCall):
                    return call
                calls.append(call)
            at = end
        if len(calls) == found:
            return malformed(MalformedReason.EMPTY_CALL, f"'{FENCE_OPEN}' block at char {pos} holds no call",
                             turn[pos:at + len(FENCE_CLOSE)], text)
        end = at + len(FENCE_CLOSE)
        rest = turn[end:].lstrip(DIALECT_WS)
        if not rest:
            return ToolCalls(calls=tuple(calls), text=prose)
        if not rest.startswith(FENCE_OPEN):
            return malformed(MalformedReason.TRAILING_TEXT, f"text after the block ending at char {end}: "
                             f"{rest[:40]!r}", turn[end:], text)
        pos = len(turn) - len(rest)


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _keys(obj: dict[str, Any]) -> str:
    return ", ".join(repr(k) for k in obj) or "none"
