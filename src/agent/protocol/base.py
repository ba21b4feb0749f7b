"""The protocol boundary: what every model-family codec provides, and the actions it parses turns into.

The session and the engine depend only on these names; a codec implements `Codec` and returns these actions.

    model bytes ─► Codec.parse ─► Action = FinalText | ToolCalls | MalformedToolCall

    messages + tools ─► Codec.render_segments ─► [Segment(text, trusted)] ─► tokenizer
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.errors import AgentError

__all__ = [
    "Action",
    "Codec",
    "FinalText",
    "MalformedReason",
    "MalformedToolCall",
    "MessageFormatError",
    "ProtocolError",
    "Segment",
    "TemplateVariableError",
    "ToolCall",
    "ToolCalls",
    "ToolChoice",
    "ToolChoiceError",
    "ToolNameError",
    "ToolSpec",
    "UnknownCodecError",
]


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
    constraint: dict[str, Any] | bool | None = None
    """For one turn, the schema the grammar enforces instead of ``parameters`` (which is still what the prompt
    renders): narrower, e.g. grounded values as a dynamic enum (`agent.grounding_policy`). False: the tool cannot be
    called this turn. None: ``parameters``."""

    @property
    def grammar_parameters(self) -> dict[str, Any]:
        """The schema the tool-call grammar enforces for a constrained tool (``constraint``, else ``parameters``)."""
        return self.constraint if isinstance(self.constraint, dict) else self.parameters

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
    """Why an attempted call could not be understood (docs/codecs.md has one line per reason)."""

    UNCLOSED_TAG = "unclosed_tag"
    """An opening envelope (``<tool_call>``) with no matching close before the turn ended or the next opening."""
    UNOPENED_TAG = "unopened_tag"
    """A closing envelope (``</tool_call>``) with no opening before it."""
    INVALID_JSON = "invalid_json"
    """The call body is not exactly one strict JSON value (syntax error, NaN, duplicate key, extra data)."""
    NOT_AN_OBJECT = "not_an_object"
    """The call body is JSON but not an object."""
    MISSING_NAME = "missing_name"
    """The call object has no ``"name"``."""
    BAD_NAME = "bad_name"
    """``"name"`` is not a non-empty string without quotes, backslashes, control characters or edge whitespace."""
    ARGUMENTS_NOT_OBJECT = "arguments_not_object"
    """The arguments value is not a JSON object (a JSON-encoded string counts as not an object)."""
    WRONG_ARGUMENTS_KEY = "wrong_arguments_key"
    """The arguments sit under the other family's key (``parameters`` for Qwen, ``arguments`` for Llama)."""
    MISSING_ARGUMENTS = "missing_arguments"
    """The call object has a name but no arguments key at all."""
    UNEXPECTED_KEYS = "unexpected_keys"
    """The call object has keys besides the name and the family's arguments key."""
    TRAILING_TEXT = "trailing_text"
    """Non-whitespace text after (or between) calls."""
    EMPTY_CALL = "empty_call"
    """The envelope is present but holds nothing but whitespace."""


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


# -- misuse errors -----------------------------------------------------------------------------------------------


class ProtocolError(AgentError):
    """Base of every error the protocol package raises (misuse or bad input to our API, never model output)."""


class UnknownCodecError(ProtocolError, ValueError):
    """``codec_for`` got a family, model name or chat template it has no codec for."""

    def __init__(self, family_or_model: str, known: Sequence[str], detail: str = "") -> None:
        self.family_or_model = family_or_model
        """What was asked for (a name, or a description of the model object)."""
        self.known = tuple(known)
        """The family and model names that would work."""
        self.detail = detail
        msg = f"no codec for {family_or_model!r}" + (f": {detail}" if detail else "")
        super().__init__(f"{msg}; known: {', '.join(self.known)}")


class MessageFormatError(ProtocolError, ValueError):
    """A message list the official template cannot render (or renders only by accident, e.g. ``None`` content)."""

    def __init__(self, index: int | None, reason: str) -> None:
        self.index = index
        """Index of the offending message in the caller's list, or None when the list as a whole is wrong."""
        self.reason = reason
        where = "messages" if index is None else f"messages[{index}]"
        super().__init__(f"{where}: {reason}")


class TemplateVariableError(ProtocolError, TypeError):
    """``render(..., **template_vars)`` got variables this codec's template does not read."""

    def __init__(self, names: Sequence[str], accepted: Sequence[str]) -> None:
        self.names = tuple(names)
        """The unknown variable names."""
        self.accepted = tuple(accepted)
        """The variables this codec's template reads."""
        super().__init__(f"unknown template variable(s) {', '.join(self.names)}; "
                         f"accepted: {', '.join(self.accepted) or '(none)'}")


class ToolChoiceError(ProtocolError, ValueError):
    """A ``tool_choice`` that cannot be satisfied with the offered tools (unknown name, ``required`` with none)."""

    def __init__(self, tool_choice: str, offered: Sequence[str], reason: str) -> None:
        self.tool_choice = tool_choice
        self.offered = tuple(offered)
        """Names of the offered tools."""
        self.reason = reason
        super().__init__(f"tool_choice {tool_choice!r}: {reason} (offered: {', '.join(self.offered) or 'none'})")


class ToolNameError(ProtocolError, ValueError):
    """A tool name the envelope cannot carry verbatim (templates splice names into JSON unescaped)."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"tool name {name!r}: {reason}")


class Codec(ABC):
    """Render/parse for one model family. Model-family syntax lives here and nowhere else."""

    id: str
    """Stable id written into traces, e.g. ``"qwen2.5-tool-call-v1"``."""
    stop_token_names: tuple[str, ...]
    """Special tokens that end an assistant turn (e.g. ``("<|im_end|>",)``)."""
    family: str
    """The family whose official template this codec reproduces, e.g. ``"qwen2.5"``, ``"llama3.2"``."""
    note: str = ""
    """Caveat for this model (e.g. "plain ChatML model: no tool tokens, no tool training"); empty when none."""

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

    def assistant_message(self, action: Action) -> dict[str, Any]:
        """The OpenAI-format assistant message to commit for a parsed turn: prose as content, calls as
        ``tool_calls`` with dict arguments. How it renders (tags, roles, dropped prose) is the template's business,
        so every family shares this; a malformed turn commits its text as prose."""
        if isinstance(action, ToolCalls):
            return {"role": "assistant", "content": action.text,
                    "tool_calls": [{"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                                   for c in action.calls]}
        return {"role": "assistant", "content": action.text}

    def tool_result_message(self, call: ToolCall, content: str) -> dict[str, Any]:
        """The OpenAI-format tool message carrying ``content`` (a JSON string) back to the model; the family's
        template decides the role it renders under (Qwen: ``<tool_response>`` in a user turn; Llama: ``ipython``)."""
        return {"role": "tool", "content": content, "name": call.name}

    @abstractmethod
    def tool_call_grammar(self, tools: Sequence[ToolSpec], tool_choice: ToolChoice = "auto", *,
                          parallel_calls: bool = False, final_pattern: str | None = None,
                          rules: dict[str, str] | None = None) -> str:
        """A pattern in the engine's regex dialect (special tokens as ``(?&NAME)``) for a whole assistant turn.

        ``parallel_calls`` lets one turn carry several calls where the family's format allows it; off by default,
        so a turn holds at most one call and the model sees each result before it writes the next call (small
        models otherwise chain calls whose arguments depend on results they have not seen yet).
        ``final_pattern`` replaces the free text of the turn: a final answer must match it (it must not start
        with ``{``, which starts a call attempt). ``rules`` (a dict to fill): the tools' arguments become rules of
        a pushdown grammar that the returned pattern calls (``(?&=NAME)``), for tool sets one DFA cannot hold."""
