"""Shared rendering plumbing: the segment builder and strict accessors over OpenAI-format messages.

Owns the one rule of segment trust (template literals are trusted; every value that came from a caller, a user, a
tool or the model is untrusted) and the checks that turn "the template would have printed ``None`` or raised" into
a `MessageFormatError`. Refuses to guess a message's shape.

    template literal ──► builder.trusted(...)  ─┐
    message value    ──► builder.untrusted(...) ┴─► merged [Segment] (adjacent same-trust pieces joined)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agent.protocol.base import MessageFormatError, Segment, TemplateVariableError, ToolSpec

__all__ = ["SegmentBuilder", "call_function", "check_template_vars", "content_text", "role_of", "tojson",
           "tool_definitions"]


class SegmentBuilder:
    """Accumulates trusted/untrusted pieces in order; empty pieces vanish, neighbours of equal trust merge."""

    def __init__(self) -> None:
        self._texts: list[str] = []
        self._trust: list[bool] = []

    def trusted(self, text: str) -> None:
        self._add(text, True)

    def untrusted(self, text: str) -> None:
        self._add(text, False)

    def _add(self, text: str, trusted: bool) -> None:
        if not text:
            return
        if self._trust and self._trust[-1] == trusted:
            self._texts[-1] += text
        else:
            self._texts.append(text)
            self._trust.append(trusted)

    def segments(self) -> list[Segment]:
        return [Segment(text=t, trusted=k) for t, k in zip(self._texts, self._trust, strict=True)]


def tojson(value: Any, *, indent: int | None = None) -> str:
    """transformers' ``tojson`` filter: ``json.dumps(ensure_ascii=False)``, key order kept, optional indent."""
    return json.dumps(value, ensure_ascii=False, indent=indent)


def tool_definitions(tools: Sequence[ToolSpec | Mapping[str, Any]]) -> list[Any]:
    """The OpenAI ``{"type": "function", "function": {...}}`` dicts the templates iterate over."""
    return [t.to_openai() if isinstance(t, ToolSpec) else dict(t) for t in tools]


def role_of(messages: Sequence[Mapping[str, Any]], index: int, allowed: Sequence[str]) -> str:
    message = messages[index]
    if not isinstance(message, Mapping):
        raise MessageFormatError(index, f"expected a mapping, got {type(message).__name__}")
    role = message.get("role")
    if role not in allowed:
        raise MessageFormatError(index, f"role {role!r} is not one of {', '.join(allowed)}")
    return role


def content_text(message: Mapping[str, Any], index: int) -> str:
    """The message's content where a template concatenates it: it must be a string."""
    content = message.get("content")
    if not isinstance(content, str):
        raise MessageFormatError(index, f"content must be a string here, got {type(content).__name__}")
    return content


def call_function(call: Any, index: int, *, unwrap_optional: bool) -> tuple[str, Any]:
    """``(name, arguments)`` of one entry of ``tool_calls``.

    Args:
        unwrap_optional: Qwen's template accepts both ``{"function": {...}}`` and a flat ``{"name", "arguments"}``;
            Llama's requires ``function``.
    """
    if not isinstance(call, Mapping):
        raise MessageFormatError(index, f"tool_calls entries must be mappings, got {type(call).__name__}")
    if "function" in call:
        call = call["function"]
    elif not unwrap_optional:
        raise MessageFormatError(index, "tool_calls entry has no 'function'")
    if not isinstance(call, Mapping) or not isinstance(call.get("name"), str) or "arguments" not in call:
        raise MessageFormatError(index, "a tool call needs a string 'name' and 'arguments' (a dict or JSON string)")
    return call["name"], call["arguments"]


def check_template_vars(template_vars: Mapping[str, Any], accepted: Sequence[str]) -> None:
    unknown = sorted(set(template_vars) - set(accepted))
    if unknown:
        raise TemplateVariableError(unknown, accepted)
