"""Building blocks of tool-call grammars, written in the engine's regex dialect (docs: CONSTRAINED_API / regex.py).

Owns: literal escaping, special-token terminals ``(?&NAME)``, the "free text that cannot spell a trigger" pattern,
the call-envelope alternation over offered tools (names escaped, arguments from the schema compiler), and the
resolution of ``tool_choice`` against the offered tools. Refuses tool names the envelope cannot carry verbatim and
tool choices no offered tool satisfies (typed errors).

    ToolSpec[] + tool_choice ─► resolve_choice ─► (mode, tools)
    tools ─► envelope_alternatives ─► '\\{"name": "(?:a", "arguments": A|b", "arguments": B)\\}'
    trigger words ─► free_text ─► any text in which no trigger word occurs
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

from agent.protocol._calls import DIALECT_WS, is_carriable_name
from agent.protocol.base import ToolChoice, ToolChoiceError, ToolNameError, ToolSpec

__all__ = ["ChoiceMode", "envelope_alternatives", "escape", "free_text", "resolve_choice", "special"]

_META = set('\\.*+?()[]{}|^$-/"')
_NAMED_CONTROLS = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f", "\v": "\\v"}
_WS_CLASS = "".join(_NAMED_CONTROLS.get(c, c) for c in DIALECT_WS)


def escape(text: str) -> str:
    """The dialect pattern matching exactly ``text`` (also valid inside a character class)."""
    out = []
    for ch in text:
        if ch in _META:
            out.append("\\" + ch)
        elif ch in _NAMED_CONTROLS:
            out.append(_NAMED_CONTROLS[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def special(name: str) -> str:
    """A special-token terminal; the engine compiles it to that token's id only."""
    if ")" in name or not name:
        raise ValueError(f"special token name {name!r} cannot be written as (?&NAME)")
    return f"(?&{name})"


def free_text(avoid: Sequence[str], *, first_not: str = "") -> str:
    """Any text in which none of the ``avoid`` words occurs (so the parser can never see a trigger in it).

    Args:
        avoid: words that all begin with the same character, which appears nowhere else in any of them
            (true of ``<tool_call>``, ``</tool_call>``, ``<|python_tag|>``); none a prefix of another.
        first_not: characters the first non-whitespace character may not be (Llama's bare-JSON trigger ``{``).
    """
    lead = avoid[0][0]
    if any(not w or w[0] != lead or lead in w[1:] for w in avoid):
        raise ValueError(f"avoid words must share a first character that appears nowhere else: {avoid!r}")
    trie: dict[str, Any] = {}
    for word in avoid:
        node = trie
        for ch in word[1:]:
            node = node.setdefault(ch, {})
    if any(_reaches_inner_end(trie, w[1:]) for w in avoid):
        raise ValueError(f"one avoid word is a prefix of another: {avoid!r}")

    def back(node: dict[str, Any]) -> str:  # from `node`, a path back to "nothing matched" without another lead
        alts = [f"[^{escape(lead + ''.join(node))}]"]
        alts += [escape(ch) + back(child) for ch, child in node.items() if child]
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"

    def partial(node: dict[str, Any]) -> str:  # from `node`, a path to any node still short of a whole word
        alts = [escape(ch) + partial(child) for ch, child in node.items() if child]
        return "(?:" + "|".join(alts) + ")?" if alts else ""

    lead_e, p = escape(lead), partial(trie)
    restart = f"{lead_e}(?:{p}{lead_e})*"
    returning, ending = restart + back(trie), restart + p
    body = f"(?:[^{lead_e}]|{returning})*(?:{ending})?"
    if not first_not:
        return body
    return f"[{_WS_CLASS}]*(?:[^{_WS_CLASS}{escape(first_not)}{lead_e}]{body}|{returning}{body}|{ending})?"


def _reaches_inner_end(trie: dict[str, Any], word: str) -> bool:
    node = trie
    for ch in word:
        node = node[ch]
    return bool(node)


class ChoiceMode(enum.StrEnum):
    AUTO = "auto"
    """Free text, optionally followed by calls."""
    REQUIRED = "required"
    """Calls only, any offered tool."""
    NONE = "none"
    """Free text only (no trigger can be produced)."""
    NAMED = "named"
    """One call to one named tool."""


def resolve_choice(tools: Sequence[ToolSpec] | None, tool_choice: ToolChoice) -> tuple[ChoiceMode, list[ToolSpec]]:
    """Check the offered tools and map ``tool_choice`` to a grammar mode and the tools it may call.

    Raises:
        ToolNameError: a name the envelope cannot carry verbatim, or a name offered twice.
        ToolChoiceError: ``required`` with no tools, or a tool name that is not offered.
    """
    offered = list(tools or ())
    seen: set[str] = set()
    for tool in offered:
        if not is_carriable_name(tool.name):
            raise ToolNameError(tool.name, "needs JSON escaping or is empty; templates splice names unescaped")
        if tool.name in seen:
            raise ToolNameError(tool.name, "offered twice")
        seen.add(tool.name)
    names = [t.name for t in offered]
    if tool_choice == "none" or (tool_choice == "auto" and not offered):
        return ChoiceMode.NONE, []
    if tool_choice == "auto":
        return ChoiceMode.AUTO, offered
    if tool_choice == "required":
        if not offered:
            raise ToolChoiceError(tool_choice, names, "a call is required but no tool is offered")
        return ChoiceMode.REQUIRED, offered
    if not isinstance(tool_choice, str) or tool_choice not in seen:
        raise ToolChoiceError(str(tool_choice), names, "not 'auto', 'required', 'none' or an offered tool name")
    return ChoiceMode.NAMED, [t for t in offered if t.name == tool_choice]


def envelope_alternatives(tools: Sequence[ToolSpec], *, args_key: str) -> str:
    """``{"name": "<tool>", "<args_key>": <args>}`` for each tool, spaced exactly as the templates render calls.

    Constrained tools get their schema's pattern; the others share "any JSON object". Both come from the schema
    compiler (``constrained.schema.schema_to_pattern``, compact whitespace), imported here lazily.
    """
    from constrained.schema import schema_to_pattern

    sep = escape(f'", "{args_key}": ')
    loose = [escape(t.name) for t in tools if not t.constrained]
    alts = [f"{escape(t.name)}{sep}{schema_to_pattern(t.parameters, whitespace='compact')}"
            for t in tools if t.constrained]
    if loose:
        names = loose[0] if len(loose) == 1 else "(?:" + "|".join(loose) + ")"
        alts.append(f"{names}{sep}{schema_to_pattern({'type': 'object'}, whitespace='compact')}")
    return escape('{"name": "') + "(?:" + "|".join(alts) + ")" + escape("}")
