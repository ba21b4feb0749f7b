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
from constrained import escape_literal

__all__ = ["ChoiceMode", "envelope_alternatives", "escape", "free_text", "resolve_choice", "special"]

escape = escape_literal
"""The dialect pattern matching exactly a text (also valid inside a character class): the engine's one escaper."""


def special(name: str) -> str:
    """A special-token terminal; the engine compiles it to that token's id only."""
    if ")" in name or not name:
        raise ValueError(f"special token name {name!r} cannot be written as (?&NAME)")
    return f"(?&{name})"


def free_text(avoid: Sequence[str], *, first_not: str = "", nonempty: bool = False) -> str:
    """Any text in which none of the ``avoid`` words occurs (so the parser can never see a trigger in it).

    Built as the automaton that tracks the longest suffix of the text that is a prefix of a word (Aho–Corasick,
    a word's completion is dead), then written back as a pattern by state elimination, so the result stays plain
    dialect (and Python ``re``) syntax that tests can sample from.

    Args:
        avoid: the trigger words (non-empty); they may share or repeat characters (``` ```json ```).
        first_not: characters the first non-whitespace character may not be (the bare-call trigger ``{``).
        nonempty: the text must hold a non-whitespace character (an empty answer is no answer).
    """
    if not avoid or any(not w for w in avoid):
        raise ValueError(f"avoid words must be non-empty: {avoid!r}")
    states, start = _avoiding_automaton(tuple(avoid), first_not, nonempty)
    blank = set(range(start, len(states))) if nonempty else set()  # states reached by blanks only
    return _eliminate(states, start, rejecting=blank)


_Edge = tuple[bool, frozenset[str]]  # (negated, chars): a character class


def _avoiding_automaton(avoid: tuple[str, ...], first_not: str,
                        nonempty: bool) -> tuple[list[dict[Any, int]], int]:
    """States as ``{char: target, None: default target}`` (a target of -1 is dead), and the start state: the
    word-prefix states, then, when the text's start matters, a twin of each one reachable by blanks alone (the
    text so far is blank), numbered from the start state on."""
    prefixes = sorted({w[:i] for w in avoid for i in range(len(w))}, key=lambda p: (len(p), p))
    index = {p: i for i, p in enumerate(prefixes)}  # "" is state 0; whole words are not states (dead)
    lead_matters = bool(first_not) or nonempty
    alphabet = sorted({ch for w in avoid for ch in w} | (set(DIALECT_WS) | set(first_not) if lead_matters else set()))

    def step(prefix: str, ch: str) -> int:
        text = prefix + ch
        if any(text.endswith(w) for w in avoid):
            return -1
        for cut in range(len(text) + 1):  # the longest suffix that is still a prefix of some word
            if text[cut:] in index:
                return index[text[cut:]]
        raise AssertionError("the empty suffix is always a prefix")

    states = [{None: 0, **{ch: step(p, ch) for ch in alphabet}} for p in prefixes]
    if not lead_matters:
        return states, 0
    leads: dict[int, int] = {}  # word-prefix state -> its twin while the text is only blanks so far
    todo = [0]
    while todo:
        q = todo.pop()
        leads[q] = len(states) + len(leads)
        todo += [t for ch in DIALECT_WS if (t := states[q][ch]) >= 0 and t not in leads and t not in todo]
    lead_rows = []
    for q in leads:  # in creation order, matching the numbering above
        row = dict(states[q])
        row.update({ch: leads[t] if (t := states[q][ch]) >= 0 else -1 for ch in DIALECT_WS})
        row.update({ch: -1 for ch in first_not})
        lead_rows.append(row)
    return [*states, *lead_rows], leads[0]


def _class(edge: _Edge) -> str:
    negated, chars = edge
    body = "".join(escape(ch) for ch in sorted(chars))
    if negated:
        return f"[^{body}]"
    return body if len(chars) == 1 else f"[{body}]"


def _eliminate(states: list[dict[Any, int]], start: int, *, rejecting: set[int]) -> str:
    """The pattern of every path from ``start`` to an accepting state (all but ``rejecting``), by eliminating the
    other states."""
    n = len(states)
    final = n
    edges: dict[tuple[int, int], str] = {}
    for s, row in enumerate(states):
        explicit = {ch for ch in row if ch is not None}
        by_target: dict[int, set[str]] = {}
        for ch in explicit:
            if row[ch] >= 0:
                by_target.setdefault(row[ch], set()).add(ch)
        default = row[None]
        for target, chars in by_target.items():
            edge: _Edge = (False, frozenset(chars))
            if target == default:
                edge = (True, frozenset(explicit - chars))
            edges[s, target] = _class(edge)
        if default not in by_target:
            edges[s, default] = _class((True, frozenset(explicit)))
        if s not in rejecting:
            edges[s, final] = ""

    def alt(a: str | None, b: str) -> str:
        if a is None or a == b:
            return b
        if a == "" or b == "":
            return f"(?:{a or b})?"
        return f"(?:{a}|{b})"

    def star(a: str | None) -> str:
        return f"(?:{a})*" if a else ""

    remaining = [s for s in range(n) if s != start]
    while remaining:
        def cost(k: int) -> int:
            ins = sum(1 for (i, j) in edges if j == k and i != k)
            outs = sum(1 for (i, j) in edges if i == k and j != k)
            return ins * outs
        k = min(remaining, key=cost)
        remaining.remove(k)
        loop = star(edges.pop((k, k), None))
        ins = [(i, e) for (i, j), e in edges.items() if j == k]
        outs = [(j, e) for (i, j), e in edges.items() if i == k]
        for i, _ in ins:
            del edges[i, k]
        for j, _ in outs:
            del edges[k, j]
        for i, e_in in ins:
            for j, e_out in outs:
                edges[i, j] = alt(edges.get((i, j)), f"{e_in}{loop}{e_out}")
    return f"{star(edges.get((start, start)))}{edges[start, final]}"


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


def envelope_alternatives(tools: Sequence[ToolSpec], *, args_key: str, rules: dict[str, str] | None = None) -> str:
    """``{"name": "<tool>", "<args_key>": <args>}`` for each tool, spaced exactly as the templates render calls.

    Constrained tools get their schema's pattern, closed as validation closes it (`close_for_grammar`: an unknown
    field is never spelled, since it would be rejected); the others share "any JSON object". Both come from the
    schema compiler (``constrained.schema_pattern``), imported here lazily, spaced as the templates
    render arguments in history (``tojson``: ``", "`` and ``": "``): forced into compact JSON the default model
    wrote ``"location":"https://…"`` where, spaced as it reads its own calls, it writes ``"location": "New York"``.

    With ``rules`` (a dict to fill), each tool's arguments become rules of a pushdown grammar instead
    (``constrained.schema_pattern`` with ``rule_prefix``: a `constrained.RulePattern`) called from an ``envelope``
    rule, and the pattern returned is a call of it: many tools then cost one small rule each, not one DFA holding
    all of them once per place the turn can spell a call (`constrained.compile_grammar`).
    """
    from agent.schema import close_for_grammar
    from constrained import RulePattern, call_rule, schema_pattern

    def arguments(schema: dict, i: int) -> str:
        if rules is None:
            return schema_pattern(schema, whitespace="spaced", exact=False)
        own = schema_pattern(schema, whitespace="spaced", rule_prefix=f"args{i}")
        assert isinstance(own, RulePattern)
        rules.update(own.rules)
        return str(own)

    sep = escape(f'", "{args_key}": ')
    loose = [escape(t.name) for t in tools if not t.constrained]
    alts = [f"{escape(t.name)}{sep}{arguments(close_for_grammar(t.grammar_parameters), i)}"
            for i, t in enumerate(tools) if t.constrained]
    if loose:
        names = loose[0] if len(loose) == 1 else "(?:" + "|".join(loose) + ")"
        alts.append(f"{names}{sep}{arguments({'type': 'object'}, len(tools))}")
    envelope = escape('{"name": "') + "(?:" + "|".join(alts) + ")" + escape("}")
    if rules is None:
        return envelope
    rules["envelope"] = envelope  # one rule, however often the turn pattern spells a call
    return call_rule("envelope")
