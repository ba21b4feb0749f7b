"""Grounding: where each value the model wrote came from, or that it came from nowhere but the model's memory.

    committed ledger entries ─► Sources (a token index and a number index, one per entry, built as entries commit)
      system / user message  ─► text source (spans)
      ok tool result         ─► one source per string or number in its value (JSON path, spans)
    argument leaf (path, value, its subschemas) ─► ground_value ─► ValueGrounding(path, source | parts)
    final answer text ─► find_claims (numbers, quoted strings, names) ─► ground_text ─► ClaimGrounding per claim

A pure function of the ledger: it reads what the model was given (the system prompt, user messages, committed ok
tool results) and never changes what the model said. Tool definitions are not sources (an example in a description
would ground anything), nor are the model's own turns, nor our ok:false results (they quote the model's values).

The matching rule (docs/grounding.md):
- **Whole tokens.** Text is split into tokens: runs of letters, runs of digits. A token is compared after Unicode
  compatibility normalisation, accent folding and case folding, so ``Zürich`` matches ``zurich`` but ``MAD`` never
  matches inside ``Madrid`` and ``BUC`` never inside ``Bucharest``. Whitespace and punctuation between tokens do
  not count: ``Asia/Tokyo`` matches ``Asia Tokyo``.
- **Numbers as decimals.** ``0.744``, ``.744`` and ``0.7440`` are one number; ``1,000`` is ``1000``; a sign counts
  (``-3`` is not ``3``); digits inside an identifier (``q4``, ``Qwen2.5``) are not numbers. A source also holds
  what it writes in another notation (`agent.readings`): ``4%`` is 0.04 too, ``1.267 billion`` 1267000000,
  ``twelve`` 12, ``May 12, 2022`` the text ``2022-05-12``.
- **A string value** is grounded where its whole token sequence occurs in one source; otherwise it is *composed*,
  grounded only when it holds claims and each claim is (``round((0.744 - 0.612) / 0.612 * 100, 2)``).
- **Fixed by the schema**: a value an ``enum`` or ``const`` fixes, a boolean, null, a string with no token.
- **Claims** in free text: numbers (not list markers), quoted strings (as one claim), and names (a word with a
  capital letter that does not start a sentence, or any all-capitals word of two letters or more).
"""

from __future__ import annotations

import enum
import itertools
import json
import re
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from agent.argument_errors import render_path
from agent.readings import date_readings, number_readings

__all__ = [
    "GROUNDED_KEY",
    "INPUT_SOURCES",
    "Claim",
    "ClaimGrounding",
    "Requirement",
    "Source",
    "SourceKind",
    "Sources",
    "ValueGrounding",
    "find_claims",
    "ground_claim",
    "ground_text",
    "ground_value",
    "iter_leaves",
    "normalize_token",
    "requirement",
]

GROUNDED_KEY: Final = "x-grounded"
"""The JSON Schema annotation that declares a parameter's value must be grounded (`requirement` reads it)."""


class SourceKind(enum.StrEnum):
    """Where a value came from."""

    USER = "user"
    """A span of a user message."""
    SYSTEM = "system"
    """A span of the system prompt."""
    TOOL_RESULT = "tool_result"
    """A value (or a span of a string) at a JSON path of a committed ok tool result."""
    SCHEMA = "schema"
    """Fixed by the schema: an enum or const member, a boolean, null, or a string with no letters or digits."""
    COMPOSED = "composed"
    """A string not found whole, made of claims that are each grounded (see ``ValueGrounding.parts``)."""
    NONE = "none"
    """Found nowhere the model was given: its own memory (ungrounded)."""


INPUT_SOURCES: Final = frozenset({SourceKind.USER.value, SourceKind.SYSTEM.value, SourceKind.TOOL_RESULT.value})
"""The source names a grounding declaration may give besides a tool's name (``user``, ``system``,
``tool_result``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Source:
    """One place a value was found."""

    kind: SourceKind
    ledger_index: int | None = None
    """The committed ledger entry (message) it was found in."""
    call_id: str | None = None
    """For a tool result: the call whose result holds it."""
    tool: str | None = None
    """For a tool result: the tool that returned it."""
    path: str | None = None
    """For a tool result: the JSON path in the tool's result value (``""`` is the value itself)."""
    span: tuple[int, int] | None = None
    """Character offsets of the match in the message text (user, system) or in the string at ``path``; None for
    a number that is a JSON number."""
    tainted: bool = False
    """For a tool result: the call that returned it was made on values that were not themselves grounded (a
    calculator run on a number the model made up). It is where the value was found, but it satisfies no
    declaration, and `agent.trace_grounding` does not count it for an answer's claim."""

    @property
    def grounded(self) -> bool:
        return self.kind is not SourceKind.NONE

    def to_record(self) -> dict[str, Any]:
        """The trace form: only the fields that are set."""
        record: dict[str, Any] = {"kind": self.kind.value}
        for name in ("ledger_index", "call_id", "tool", "path"):
            value = getattr(self, name)
            if value is not None:
                record[name] = value
        if self.span is not None:
            record["span"] = list(self.span)
        if self.tainted:
            record["tainted"] = True
        return record

    def describe(self) -> str:
        """A short phrase for reports: ``user message 1 [12:18]``, ``calculator result (call-3) at value``."""
        if self.kind is SourceKind.TOOL_RESULT:
            where = f" at {self.path}" if self.path else ""
            return f"{self.tool} result ({self.call_id}){where}"
        if self.kind in (SourceKind.USER, SourceKind.SYSTEM):
            span = f" [{self.span[0]}:{self.span[1]}]" if self.span else ""
            return f"{self.kind.value} message {self.ledger_index}{span}"
        return {SourceKind.SCHEMA: "fixed by the schema", SourceKind.COMPOSED: "composed of grounded parts",
                SourceKind.NONE: "ungrounded (not in the conversation or any tool result)"}[self.kind]


NOWHERE: Final = Source(kind=SourceKind.NONE)
_BY_SCHEMA: Final = Source(kind=SourceKind.SCHEMA)


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimGrounding:
    """One claim in free text (a final answer, or a string argument that was not found whole) and its source."""

    text: str
    """The claim as written."""
    kind: str
    """``number``, ``quoted`` or ``name``."""
    span: tuple[int, int]
    """Character offsets in the text the claim was read from."""
    source: Source

    def to_record(self, text: Any = None) -> dict[str, Any]:
        """The trace form; ``text`` replaces the claim's text (a privacy mode's payload)."""
        return {"text": self.text if text is None else text, "kind": self.kind, "span": list(self.span),
                "source": self.source.to_record()}


@dataclass(frozen=True, kw_only=True, slots=True)
class ValueGrounding:
    """An argument leaf, by path, and where its value came from."""

    path: str
    """Dotted/indexed path in the arguments (``items[0].qty``; ``""`` the arguments object itself)."""
    source: Source
    parts: tuple[ClaimGrounding, ...] = ()
    """For a composed or ungrounded string: its claims, each with its source."""
    required: Requirement | None = None
    """What a declaration requires of this value (`requirement`); None when nothing is required."""

    @property
    def grounded(self) -> bool:
        return self.source.grounded

    @property
    def taints(self) -> bool:
        """A call made with this value returns a tainted result (`Source.tainted`): the value is ungrounded, or it was
        found only in a tainted result itself (`agent.trace_grounding` reads the same rule from the trace)."""
        return not self.grounded or self.source.tainted or any(p.source.tainted for p in self.parts)

    @property
    def satisfied(self) -> bool:
        """The value meets its declaration (always true when nothing is required of it)."""
        if self.required is None or self.source.kind is SourceKind.SCHEMA:
            return True
        if self.source.kind is SourceKind.COMPOSED:
            return not self.required.whole and all(self.required.admits(p.source) for p in self.parts)
        return self.required.admits(self.source)

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {"path": self.path, "source": self.source.to_record()}
        if self.parts:
            record["parts"] = [{"kind": p.kind, "span": list(p.span), "source": p.source.to_record()}
                               for p in self.parts]
        if self.required is not None:
            record["required"] = self.required.to_record()
            record["satisfied"] = self.satisfied
        return record


_MATCHES: Final = ("whole", "claims")


@dataclass(frozen=True, slots=True)
class Requirement:
    """What a grounding declaration requires of a value."""

    sources: frozenset[str]
    """Where it may come from: ``user``, ``system``, ``tool_result`` or a tool's name."""
    whole: bool = True
    """A string must be found whole in one source (so its candidates are enumerable: a dynamic enum); False: it
    may be composed of claims that are each grounded (free text, an arithmetic expression)."""

    def admits(self, source: Source) -> bool:
        if source.kind in (SourceKind.SCHEMA, SourceKind.COMPOSED):
            return True
        return source.grounded and not source.tainted and (
            source.kind.value in self.sources or (source.tool is not None and source.tool in self.sources))

    @property
    def tools(self) -> list[str]:
        """The tools it names as sources, sorted."""
        return sorted(self.sources - INPUT_SOURCES)

    def to_record(self) -> dict[str, Any]:
        return {"sources": sorted(self.sources), "match": "whole" if self.whole else "claims"}


# -- tokens and numbers -------------------------------------------------------------------------------------------

_WORD_RE: Final = re.compile(r"[^\W\d_]+|\d+")
_NUMBER_RE: Final = re.compile(
    r"(?:(?<![\w.,])|(?<=\dT))(?P<sign>[-+\u2212])?(?P<body>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)"
    r"(?:[eE][-+]?\d+)?(?!\w|\.\d)")
"""A number as written in text, in a source and in a claim alike: not glued to a word (``q4``, ``Q8_0``), a sign only
where no word precedes it (``2026-12`` is two numbers), thousands separated by commas, a leading-dot decimal; an ISO
time after its date's ``T`` (``2026-12-07T23:32`` holds 23)."""
_DIGIT_RE: Final = re.compile(r"\d")
_LIST_MARKER_RE: Final = re.compile(r"(?m)^[ \t]*\d{1,3}[.)](?=\s)")


def normalize_token(token: str) -> str:
    """Compatibility-normalised, accent-folded, case-folded, a run of digits without its leading zeros: the form
    tokens are compared in."""
    if token.isascii():
        return (token.lstrip("0") or "0") if token.isdigit() else token.lower()
    decomposed = unicodedata.normalize("NFKD", token)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()


def _tokens(text: str) -> list[tuple[str, int, int]]:
    if text.isascii():  # the common case, folded at once: lowering ASCII keeps every offset
        return [(t.lstrip("0") or "0" if t[0] == "0" else t, m.start(), m.end())
                for m in _WORD_RE.finditer(text.lower()) for t in (m.group(),)]
    return [(normalize_token(m.group()), m.start(), m.end()) for m in _WORD_RE.finditer(text)]


def _decimal(text: str) -> Decimal | None:
    try:
        value = Decimal(text.replace(",", "").replace("\u2212", "-"))
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def _plain(number: Decimal) -> str:
    """A decimal written plainly, as JSON would (``1.267E+9`` → ``1267000000``, ``0.0400`` → ``0.04``)."""
    text = format(number.normalize(), "f")
    return text if "." not in text else text.rstrip("0").rstrip(".")


def _json_number(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return _decimal(repr(value)) if isinstance(value, float) else Decimal(value)


# -- sources ------------------------------------------------------------------------------------------------------

@dataclass(slots=True)
class _Text:
    """One searchable string: a message, or a string (or object key) inside a tool result."""

    source: Source
    raw: str
    tokens: list[tuple[str, int, int]]


@dataclass
class Sources:
    """Everything the model was given, indexed for lookups: feed it committed entries (`add_entry`) in order.

    Lookups prefer the user's words, then the system prompt, then the most recent tool result."""

    texts: list[_Text] = field(default_factory=list)
    _by_token: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    _numbers: dict[Decimal, list[tuple[int, Source]]] = field(default_factory=dict)
    _number_surface: dict[Decimal, list[str]] = field(default_factory=dict)
    _order: int = 0
    _fed: int = 0
    _tainted: set[str] = field(default_factory=set)

    # -- building ---------------------------------------------------------------------------------------------

    def extend(self, entries: Sequence[Any]) -> Sources:
        """Index the ledger entries (`agent.ledger.LedgerEntry`, in commit order) past those already indexed."""
        for entry in entries[self._fed:]:
            self.add_entry(entry.index, str(entry.kind), entry.message, ok=entry.ok,
                           call_id=entry.call_ids[0] if entry.call_ids else None, tool=entry.tool)
        self._fed = max(self._fed, len(entries))
        return self

    def add_entry(self, index: int, kind: str, message: Mapping[str, Any], *, ok: bool | None = None,
                  call_id: str | None = None, tool: str | None = None) -> None:
        """Index one committed ledger entry (``kind`` an `agent.ledger.EntryKind` value); entries that are no
        source (assistant turns, rejections, failed results) are skipped."""
        content = message.get("content")
        if kind in ("system", "user") and isinstance(content, str):
            self._add_text(Source(kind=SourceKind(kind), ledger_index=index), content)
        elif kind == "tool_result" and ok and isinstance(content, str):
            self.add_tool_result(index, content, call_id=call_id, tool=tool)

    def taint(self, call_id: str) -> None:
        """Mark the result of ``call_id`` (indexed later) as coming from a call on ungrounded values (`Source`)."""
        self._tainted.add(call_id)

    def add_tool_result(self, index: int, content: str, *, call_id: str | None, tool: str | None) -> None:
        """Index the value of a reinjected ok result (``{"ok": true, "result": V}``, possibly the truncation
        wrapper whose ``result`` is a prefix string): every string, key and number in V, by JSON path."""
        try:
            parsed = json.loads(content)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict) or parsed.get("ok") is not True or "result" not in parsed:
            return
        tainted = call_id in self._tainted
        stack: list[tuple[Any, tuple[str | int, ...]]] = [(parsed["result"], ())]
        while stack:
            value, parts = stack.pop()
            where = Source(kind=SourceKind.TOOL_RESULT, ledger_index=index, call_id=call_id, tool=tool,
                           path=render_path(parts), tainted=tainted)
            if isinstance(value, str):
                self._add_text(where, value)
            elif isinstance(value, dict):
                for key, item in value.items():
                    self._add_text(replace(where, path=render_path((*parts, key))), str(key))
                    stack.append((item, (*parts, key)))
            elif isinstance(value, list):
                stack.extend((item, (*parts, i)) for i, item in enumerate(value))
            else:
                number = _json_number(value)
                if number is not None:
                    self._add_number(number, where, json.dumps(value))

    def _add_text(self, source: Source, text: str, *, read: bool = True) -> None:
        """Index a text: its tokens, its numbers, and (``read``) what it writes in other notations (`agent.readings`:
        ``4%`` is also 0.04, ``May 12, 2022`` also ``2022-05-12``), each reading at the span it came from."""
        position = len(self.texts)
        tokens = _tokens(text)
        self.texts.append(_Text(source=source, raw=text, tokens=tokens))
        for i, (token, _, _) in enumerate(tokens):
            self._by_token.setdefault(token, []).append((position, i))
        digits = _DIGIT_RE.search(text) is not None
        if read:
            for number, start, end in number_readings(text, digits=digits):
                self._add_number(number, _with_span(source, start, end), _plain(number))
            for date, start, end in (date_readings(text) if digits else ()):
                self._add_text(_with_span(source, start, end), date, read=False)
        for m in (_NUMBER_RE.finditer(text) if digits else ()):
            number = _decimal(m.group())
            if number is not None:
                self._add_number(number, _with_span(source, m.start(), m.end()), m.group())

    def _add_number(self, number: Decimal, source: Source, surface: str) -> None:
        self._order += 1
        self._numbers.setdefault(number, []).append((self._order, source))
        forms = self._number_surface.setdefault(number, [])
        if surface not in forms:
            forms.append(surface)

    # -- lookups ----------------------------------------------------------------------------------------------

    def find_number(self, number: Decimal, allowed: frozenset[str] | None = None) -> Source:
        """Where ``number`` occurs (as a JSON number or in text), by preference; `NOWHERE` if it does not."""
        found = [source for _, source in self._numbers.get(number, ()) if _admits(allowed, source)]
        return min(found, key=_preference, default=NOWHERE) if found else NOWHERE

    def find_tokens(self, tokens: Sequence[str], allowed: frozenset[str] | None = None) -> Source:
        """Where the whole token sequence occurs contiguously in one text, by preference; `NOWHERE` if nowhere."""
        if not tokens:
            return NOWHERE
        best: Source | None = None
        for position, start in self._by_token.get(tokens[0], ()):
            text = self.texts[position]
            if not _admits(allowed, text.source) or start + len(tokens) > len(text.tokens):
                continue
            if all(text.tokens[start + k][0] == tokens[k] for k in range(1, len(tokens))):
                found = _with_span(text.source, text.tokens[start][1], text.tokens[start + len(tokens) - 1][2])
                if best is None or _preference(found) < _preference(best):
                    best = found
        return best if best is not None else NOWHERE

    def latest_call(self, tool: str) -> str | None:
        """The call id of ``tool``'s most recently committed result, if any."""
        places = itertools.chain((t.source for t in self.texts),
                                 (source for found in self._numbers.values() for _, source in found))
        latest = max((s for s in places if s.tool == tool), key=lambda s: s.ledger_index or 0, default=None)
        return latest.call_id if latest is not None else None

    def numbers(self, allowed: frozenset[str] | None = None) -> dict[Decimal, list[str]]:
        """Every number the admitted sources hold, with the ways it was written there (for dynamic enums)."""
        return {number: self._number_surface[number] for number, places in self._numbers.items()
                if any(_admits(allowed, source) for _, source in places)}

    def phrases(self, allowed: frozenset[str] | None = None, *, max_tokens: int = 6,
                max_chars: int = 200) -> Iterator[str]:
        """Every string the admitted sources hold that a value could copy, each once, lazily: each text whole (a
        tool-result string, a short message), and every run of up to ``max_tokens`` tokens of every text as written
        there (for dynamic enums: a caller bounds how many it reads)."""
        seen: set[str] = set()
        for text in self.texts:
            if not _admits(allowed, text.source):
                continue
            whole = text.raw.strip()
            if whole and len(whole) <= max_chars and whole not in seen:
                seen.add(whole)
                yield whole
            for i in range(len(text.tokens)):
                for j in range(i, min(i + max_tokens, len(text.tokens))):
                    phrase = text.raw[text.tokens[i][1]:text.tokens[j][2]]
                    if len(phrase) <= max_chars and phrase not in seen:
                        seen.add(phrase)
                        yield phrase


def _with_span(source: Source, start: int, end: int) -> Source:
    return replace(source, span=(start, end))


_KIND_RANK: Final = {SourceKind.USER: 0, SourceKind.SYSTEM: 1, SourceKind.TOOL_RESULT: 2}


def _preference(source: Source) -> tuple[bool, int, int]:
    """Untainted first; then user words, the system prompt, the most recent tool result."""
    return source.tainted, _KIND_RANK.get(source.kind, 3), -(source.ledger_index or 0)


def _admits(allowed: frozenset[str] | None, source: Source) -> bool:
    """Whether ``source`` is one ``allowed`` names (by kind ``user``..., by tool, or by call id) and, when something
    is named, not tainted; None admits every source."""
    if allowed is None:
        return True
    return not source.tainted and (source.kind.value in allowed or (source.tool is not None and source.tool in allowed)
                                   or (source.call_id is not None and source.call_id in allowed))


# -- claims -------------------------------------------------------------------------------------------------------

_QUOTED_RE: Final = re.compile(r'"([^"\n]{1,200})"|\u201c([^\u201d\n]{1,200})\u201d|\u00ab([^\u00bb\n]{1,200})\u00bb'
                               r"|`([^`\n]{1,200})`|(?<![\w'])'([^'\n]{1,200})'(?![\w'])")
_SENTENCE_END: Final = frozenset(".!?\n")
_NOT_NAMES: Final = frozenset({"AM", "PM", "OK"})
"""All-capitals words that name nothing (``8:05 AM``)."""
_LEAD_MARKS: Final = frozenset(" \t\r#*->•([{\"'`\u201c\u00ab|")


@dataclass(frozen=True, kw_only=True, slots=True)
class Claim:
    """Something free text states that can be looked up: a number, a quoted string or a name."""

    text: str
    kind: str
    """``number``, ``quoted`` or ``name``."""
    span: tuple[int, int]
    tokens: tuple[str, ...] = ()
    """A quoted string's or a name's tokens, as compared."""
    number: Decimal | None = None
    """A number's value."""


def _sentence_initial(text: str, start: int) -> bool:
    i = start - 1
    while i >= 0 and text[i] in _LEAD_MARKS:
        i -= 1
    return i < 0 or text[i] in _SENTENCE_END or text[i] == ":"


def find_claims(text: str) -> list[Claim]:
    """The claims in free text, in order: quoted strings (whole), then outside them numbers (list markers are not
    claims) and names (see the module docstring)."""
    claims: list[Claim] = []
    taken: list[tuple[int, int]] = []
    for m in _QUOTED_RE.finditer(text):
        group = next(g for g in range(1, 6) if m.group(g) is not None)
        inner = m.group(group)
        tokens = tuple(t for t, _, _ in _tokens(inner))
        if tokens:
            claims.append(Claim(text=inner, kind="quoted", span=(m.start(group), m.end(group)), tokens=tokens))
            taken.append((m.start(), m.end()))

    def free(start: int) -> bool:
        return not any(a <= start < b for a, b in taken)

    markers = {m.start() + len(m.group()) - len(m.group().lstrip()) for m in _LIST_MARKER_RE.finditer(text)}
    for m in _NUMBER_RE.finditer(text):
        number = _decimal(m.group())
        if number is not None and free(m.start()) and m.start() not in markers:
            claims.append(Claim(text=m.group(), kind="number", span=(m.start(), m.end()), number=number))
    for m in _WORD_RE.finditer(text):
        word = m.group()
        if word.isdigit() or not free(m.start()) or not any(ch.isupper() for ch in word):
            continue
        all_caps = len(word) >= 2 and word.isupper() and word not in _NOT_NAMES
        if all_caps or not _sentence_initial(text, m.start()):
            claims.append(Claim(text=word, kind="name", span=(m.start(), m.end()), tokens=(normalize_token(word),)))
    claims.sort(key=lambda c: c.span)
    return claims


def ground_claim(claim: Claim, sources: Sources, allowed: frozenset[str] | None = None) -> ClaimGrounding:
    source = (sources.find_number(claim.number, allowed) if claim.number is not None
              else sources.find_tokens(claim.tokens, allowed))
    return ClaimGrounding(text=claim.text, kind=claim.kind, span=claim.span, source=source)


def ground_text(text: str, sources: Sources, allowed: frozenset[str] | None = None) -> tuple[ClaimGrounding, ...]:
    """Every claim of ``text`` with its source (the final answer's grounding)."""
    return tuple(ground_claim(claim, sources, allowed) for claim in find_claims(text))


# -- argument values ----------------------------------------------------------------------------------------------

def ground_value(path: str, value: Any, sources: Sources, *, fixed: bool = False,
                 required: Requirement | None = None) -> ValueGrounding:
    """Where one argument leaf came from (see the module docstring for the rule). ``fixed``: the leaf's schema
    fixes its value (enum/const). ``required``: a declaration (`requirement`): its sources are searched first; a
    value found only elsewhere is recorded where it was found, and does not satisfy it."""
    if fixed or value is None or isinstance(value, bool):
        return ValueGrounding(path=path, source=_BY_SCHEMA, required=required)
    if not isinstance(value, (str, int, float)):
        raise TypeError(f"a leaf is a JSON scalar, not {type(value).__name__}")
    if required is not None:
        held = _ground_scalar(path, value, sources, required.sources)
        if held.grounded:
            return ValueGrounding(path=path, source=held.source, parts=held.parts, required=required)
    found = _ground_scalar(path, value, sources, None)
    return ValueGrounding(path=path, source=found.source, parts=found.parts, required=required)


def _ground_scalar(path: str, value: str | float, sources: Sources, allowed: frozenset[str] | None) -> ValueGrounding:
    number = _json_number(value)
    if number is not None:
        return ValueGrounding(path=path, source=sources.find_number(number, allowed))
    assert isinstance(value, str)
    tokens = [t for t, _, _ in _tokens(value)]
    if not tokens:
        return ValueGrounding(path=path, source=_BY_SCHEMA)
    whole = sources.find_tokens(tokens, allowed)
    if whole.grounded:
        return ValueGrounding(path=path, source=whole)
    number = _decimal(value.strip()) if _NUMBER_RE.fullmatch(value.strip()) else None
    if number is not None:
        found = sources.find_number(number, allowed)
        if found.grounded:
            return ValueGrounding(path=path, source=found)
    parts = ground_text(value, sources, allowed)
    composed = bool(parts) and all(p.source.grounded for p in parts)
    return ValueGrounding(path=path, source=Source(kind=SourceKind.COMPOSED) if composed else NOWHERE, parts=parts)


def requirement(declaration: Any, *, match: str = "whole") -> Requirement | None:
    """What a declaration requires (``x-grounded`` in a schema, or a tool's ``grounded``):

    - ``true``: the user's or system's words or any tool result; a name or a list of names: those sources
      (``user``, ``system``, ``tool_result`` or a tool's name); ``false`` or None: nothing (None);
    - an object ``{"sources": <one of the above>, "match": "whole" | "claims"}`` also says how a string is matched
      (``match`` defaults to the caller's: ``whole`` for a parameter, ``claims`` for a whole tool).

    Raises:
        ValueError: any other declaration (named in the message).
    """
    if isinstance(declaration, Mapping):
        unknown = sorted(set(declaration) - {"sources", "match"})
        match = declaration.get("match", match)
        if unknown or match not in _MATCHES:
            raise ValueError(f"{GROUNDED_KEY} as an object takes 'sources' and 'match' ('whole' or 'claims'), not "
                             f"{dict(declaration)!r}")
        declaration = declaration.get("sources", True)
        if declaration is None or declaration is False:
            raise ValueError(f"{GROUNDED_KEY}: 'sources' must name at least one source, not {declaration!r}")
    if declaration is None or declaration is False:
        return None
    if declaration is True:
        return Requirement(INPUT_SOURCES, whole=match == "whole")
    names = [declaration] if isinstance(declaration, str) else declaration
    if (not isinstance(names, (list, tuple)) or not names
            or not all(isinstance(n, str) and n for n in names)):
        raise ValueError(f"{GROUNDED_KEY} must be true, a source name or a non-empty list of them (user, system, "
                         f"tool_result or a tool name), or {{\"sources\", \"match\"}}, not {declaration!r}")
    return Requirement(frozenset(names), whole=match == "whole")


def iter_leaves(value: Any, parts: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    """Every scalar of a JSON value with its path parts, depth first in document order."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, parts)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, Mapping):
            stack.extend(reversed([(v, (*where, k)) for k, v in item.items()]))
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed([(v, (*where, i)) for i, v in enumerate(item)]))
        else:
            yield where, item
