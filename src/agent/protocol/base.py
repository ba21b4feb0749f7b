"""The protocol boundary: what every model-family codec provides, and the actions it parses turns into.

CONTRACT STUB (lead): the session and the engine depend only on these names. Codec implementers keep
them; add what you need.

    model bytes ─► Codec.parse ─► Action = FinalText | ToolCalls | MalformedToolCall
    messages + tools ─► Codec.render_segments ─► [Segment(text, trusted)] ─► tokenizer
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    """A codec's view of an offered tool: what to render and what to constrain."""

    name: str
    """Tool name, possibly namespaced with dots (``crm.search_customer``)."""
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    """JSON Schema of the arguments object."""
    constrained: bool = False
    """If true, the tool-call grammar forces the arguments to follow ``parameters`` exactly."""

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI ``{"type": "function", "function": {...}}`` form that chat templates render."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}


ToolChoice = Literal["auto", "required", "none"] | str
"""``auto`` (lazy grammar), ``required`` (the turn must be a call), ``none`` (calls masked out), or a tool name."""


@dataclass(frozen=True, kw_only=True)
class Segment:
    """A piece of a rendered prompt. Untrusted text (user content, tool results) is tokenized with special-token
    parsing off, so it can never forge a control token."""

    text: str
    trusted: bool
    """True for template/control text, False for content that came from users, tools or the model."""


@dataclass(frozen=True, kw_only=True)
class FinalText:
    """The turn is a final answer: no call was attempted."""

    text: str


@dataclass(frozen=True, kw_only=True)
class ToolCall:
    """One syntactically recognised call. Not permission: arguments are still raw and unvalidated."""

    name: str
    arguments: dict[str, Any]
    """Parsed JSON object, unvalidated."""
    raw: str
    """The exact span of model text the call was parsed from."""


@dataclass(frozen=True, kw_only=True)
class ToolCalls:
    """The turn requests one or more calls (in order)."""

    calls: tuple[ToolCall, ...]
    text: str = ""
    """Free text the model wrote before the first call (may be empty)."""


class MalformedReason(enum.StrEnum):
    UNCLOSED_TAG = "unclosed_tag"
    INVALID_JSON = "invalid_json"
    NOT_AN_OBJECT = "not_an_object"
    MISSING_NAME = "missing_name"
    BAD_NAME = "bad_name"
    ARGUMENTS_NOT_OBJECT = "arguments_not_object"
    WRONG_ARGUMENTS_KEY = "wrong_arguments_key"
    UNEXPECTED_KEYS = "unexpected_keys"
    TRAILING_TEXT = "trailing_text"
    EMPTY_CALL = "empty_call"


@dataclass(frozen=True, kw_only=True)
class MalformedToolCall:
    """The turn attempted a call that cannot be understood. Never silently turned into prose."""

    reason: MalformedReason
    detail: str
    """Human sentence: what was wrong and where."""
    raw: str
    """The offending span."""
    text: str = ""
    """The whole turn text."""


Action = FinalText | ToolCalls | MalformedToolCall


class Codec(ABC):
    """Render/parse for one model family. Model-family syntax lives here and nowhere else."""

    id: str
    """Stable id written into traces, e.g. ``"qwen2.5-tool-call-v1"``."""
    stop_token_names: tuple[str, ...]
    """Special tokens that end an assistant turn (e.g. ``("<|im_end|>",)``)."""

    @abstractmethod
    def render_segments(self, messages: Sequence[dict[str, Any]], tools: Sequence[ToolSpec] | None = None,
                        add_generation_prompt: bool = True, **template_vars: Any) -> list[Segment]:
        """The prompt as trusted/untrusted segments; ``"".join(s.text)`` is byte-exact to the official template."""

    def render(self, messages: Sequence[dict[str, Any]], tools: Sequence[ToolSpec] | None = None,
               add_generation_prompt: bool = True, **template_vars: Any) -> str:
        return "".join(s.text for s in self.render_segments(messages, tools, add_generation_prompt, **template_vars))

    @abstractmethod
    def parse(self, text: str) -> Action:
        """Total: every input yields exactly one Action; never raises."""

    @abstractmethod
    def assistant_message(self, action: Action) -> dict[str, Any]:
        """The OpenAI-format assistant message to commit for a parsed turn."""

    @abstractmethod
    def tool_result_message(self, call: ToolCall, content: str) -> dict[str, Any]:
        """The OpenAI-format tool message carrying ``content`` (a JSON string) back to the model."""

    @abstractmethod
    def tool_call_grammar(self, tools: Sequence[ToolSpec], tool_choice: ToolChoice = "auto") -> str:
        """A pattern in the engine's regex dialect (special tokens as ``(?&NAME)``) for a whole assistant turn."""
