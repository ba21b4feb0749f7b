"""Grounding, declared and enforced: which argument values must be grounded, and how each turn holds them.

    Tool(grounded=...) · "x-grounded" in a parameter's schema ─► declared leaves
    arguments + Sources ─► ground_arguments ─► ValueGrounding per leaf (traced; unmet declarations refuse the call)
    parameters + Sources ─► narrowed_parameters ─► a dynamic enum per declared leaf, built per turn and masked
    final pattern with {{number@SOURCE}} slots + Sources ─► final_pattern_for_turn ─► plain pattern, slots expanded

Enforcement has two layers. Where the values a declared leaf may take are enumerable at the start of a turn (the
numbers the admitted sources hold; for a string matched whole, each text whole and every run of up to six
tokens of the admitted texts, kept only where the leaf's own schema accepts them), the turn's grammar admits only
those: the model cannot write anything else. A string matched by its claims (free text, an arithmetic expression)
is held by the grammar in its numbers: every run of digits must be a number the sources hold, written as there.
A leaf with no candidate at all makes its tool uncallable this turn (under ``auto`` the grammar leaves it out; a
named or required choice keeps it and lets validation speak). Everywhere else (a leaf under ``anyOf`` or ``$ref``,
too many candidates, the names and quotes of composed text) validation refuses an ungrounded value with an ok:false
result naming the path, which the model repairs within the run's limits.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

import jsonschema

from agent.argument_errors import ArgumentError, ValidationErrorKind, render_path
from agent.grounding import (GROUNDED_KEY, Requirement, SourceKind, Sources, ValueGrounding, ground_value,
                             iter_leaves, requirement)

__all__ = ["MAX_CANDIDATES", "MAX_CANDIDATE_CHARS", "SLOT_RE", "UNGROUNDED_REASON", "CallVerdict",
           "blocked_note", "final_pattern_for_turn", "ground_arguments", "has_slots", "judge_call", "names_tool",
           "narrowed_parameters", "slot_sources", "ungrounded_errors"]

MAX_CANDIDATES: Final = 2048
"""Most values a dynamic enum holds; past it the leaf is held by validation alone (a grammar that lists every
phrase of a long document costs more than it saves). 2,048 phrases (a request of about 2,000 characters) compile
into a tool-call grammar in tens of milliseconds."""
MAX_CANDIDATE_CHARS: Final = 65_536
"""Most characters a string leaf's candidates may hold together: the enum's automaton grows with them."""
MAX_PHRASES_READ: Final = 20_000
"""Most phrases of the sources read to find a string's candidates (a 1 MiB tool result holds over a million): past
it, validation alone holds the leaf."""
UNGROUNDED_REASON: Final = ("not found in the conversation or any tool result: ask the user or call a lookup tool "
                            "that returns it")
SLOT_RE: Final = re.compile(r"\{\{(number|text)@([A-Za-z0-9_.,-]+?)(:last)?\}\}")
"""A final-pattern slot: ``{{number@calculator}}`` admits a number a calculator result holds, written as it was
there; ``{{text@user,tool_result}}`` a phrase of those sources. Sources: ``user``, ``system``, ``tool_result`` or a
tool name, comma-separated; ``:last`` takes a named tool's latest result only (``{{number@calculator:last}}``: the
number the calculator returned last, not one it returned before the model recomputed)."""


# -- the schema along a path --------------------------------------------------------------------------------------

def _resolve(schema: Any, root: Mapping[str, Any], depth: int = 0) -> list[Mapping[str, Any]]:
    """``schema`` and every schema it brings in at the same place (local ``$ref``, ``allOf``/``anyOf``/``oneOf``
    members), flattened; booleans and unresolvable references are dropped."""
    if not isinstance(schema, Mapping) or depth > 32:
        return []
    out = [schema]
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        target: Any = root
        for part in ref[1:].split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, Mapping) else None
        out += _resolve(target, root, depth + 1)
    for key in ("allOf", "anyOf", "oneOf"):
        members = schema.get(key)
        if isinstance(members, list):
            for member in members:
                out += _resolve(member, root, depth + 1)
    return out


def _children(schemas: Sequence[Mapping[str, Any]], step: str | int,
              root: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    out: list[Mapping[str, Any]] = []
    for schema in schemas:
        candidates: list[Any] = []
        if isinstance(step, str):
            properties = schema.get("properties")
            if isinstance(properties, Mapping) and step in properties:
                candidates.append(properties[step])
            else:
                patterns = schema.get("patternProperties")
                matched = ([s for p, s in patterns.items() if re.search(p, step)]
                           if isinstance(patterns, Mapping) else [])
                candidates += matched or [schema.get("additionalProperties")]
        else:
            prefix = schema.get("prefixItems")
            if isinstance(prefix, list) and step < len(prefix):
                candidates.append(prefix[step])
            else:
                candidates.append(schema.get("items"))
        for candidate in candidates:
            out += _resolve(candidate, root)
    return out


def _fixes(schemas: Sequence[Mapping[str, Any]], value: Any) -> bool:
    """Some schema at this place lists the value in an ``enum`` or as its ``const`` (the schema grounds it)."""
    for schema in schemas:
        if "const" in schema and _same(schema["const"], value):
            return True
        if isinstance(schema.get("enum"), list) and any(_same(member, value) for member in schema["enum"]):
            return True
    return False


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b or (not isinstance(a, bool) and not isinstance(b, bool)
                                              and isinstance(a, (int, float)) and isinstance(b, (int, float))
                                              and a == b)


def _declared(schemas: Sequence[Mapping[str, Any]]) -> Requirement | None:
    """The declaration at this place (several, e.g. under ``allOf``: their sources joined, whole if any says so)."""
    found: Requirement | None = None
    for schema in schemas:
        if GROUNDED_KEY in schema:
            declared = requirement(schema[GROUNDED_KEY])
            if declared is not None:
                found = declared if found is None else Requirement(found.sources | declared.sources,
                                                                   whole=found.whole or declared.whole)
    return found


# -- arguments ----------------------------------------------------------------------------------------------------

def ground_arguments(arguments: Any, parameters: Mapping[str, Any], sources: Sources, *,
                     tool_requirement: Requirement | None = None) -> tuple[ValueGrounding, ...]:
    """Every leaf of a call's validated arguments with its source, in document order. A leaf's requirement is the
    nearest ``x-grounded`` on its path, else ``tool_requirement`` (a tool's ``grounded``) for a value its schema
    does not fix."""
    out: list[ValueGrounding] = []
    for parts, value in iter_leaves(arguments):
        schemas: list[Mapping[str, Any]] = _resolve(parameters, parameters)
        required = _declared(schemas)
        for step in parts:
            schemas = _children(schemas, step, parameters)
            required = _declared(schemas) or required
        fixed = _fixes(schemas, value)
        out.append(ground_value(render_path(parts), value, sources, fixed=fixed,
                                required=required if required is not None else tool_requirement))
    return tuple(out)


def ungrounded_errors(groundings: Sequence[ValueGrounding]) -> tuple[ArgumentError, ...]:
    """One error per leaf whose declaration is not met, naming the path, what was not found, and where to get it."""
    errors = []
    for g in groundings:
        if g.satisfied:
            continue
        assert g.required is not None
        missing = [p.text for p in g.parts if not g.required.admits(p.source)] if g.parts else []
        what = f" ({', '.join(repr(m) for m in missing[:5])})" if missing and not g.required.whole else ""
        where = ", ".join(sorted(g.required.sources))
        accepted = "" if where == "system, tool_result, user" else f" (accepted sources: {where})"
        errors.append(ArgumentError(path=g.path, kind=ValidationErrorKind.UNGROUNDED,
                                    reason=f"value{what} {UNGROUNDED_REASON}{accepted}"))
    return tuple(errors)


# -- the turn's grammar: dynamic enums ----------------------------------------------------------------------------

def narrowed_parameters(parameters: Mapping[str, Any], sources: Sources, *,
                        tool_requirement: Requirement | None = None,
                        missing: list[str] | None = None) -> dict[str, Any] | bool | None:
    """The parameters schema this turn's grammar enforces: each leaf declared grounded whole (an ``x-grounded``
    string, number or integer schema reached through ``properties``, ``items`` or ``prefixItems``; every number
    under a tool's ``grounded``, and its strings where it says ``"match": "whole"``) replaced by the enum of its
    candidates. None: nothing to narrow (the grammar enforces ``parameters`` as declared). False: some required
    declared leaf has no candidate (the tool cannot be called with grounded values yet; their paths, each with the
    tools its declaration names, are appended to ``missing``)."""
    changed = False

    def narrow(schema: Any, inherited: Requirement | None, where: tuple[str | int, ...] = ()) -> Any:
        nonlocal changed
        if not isinstance(schema, Mapping):
            return schema
        declared = requirement(schema[GROUNDED_KEY]) if GROUNDED_KEY in schema else None
        required = declared if declared is not None else inherited
        kind = schema.get("type")
        if required is not None and kind in ("string", "number", "integer") and not _has_any(schema):
            if "enum" in schema or "const" in schema:
                return schema
            if kind == "string" and not required.whole:
                numbers = _number_forms(sources, required.sources)
                if numbers is None:
                    return schema
                changed = True
                return {"allOf": [schema, {"pattern": _grounded_numbers_pattern(numbers)}]}
            candidates = _candidates(schema, kind, sources, required.sources)
            if candidates is None:
                return schema
            changed = True
            return {"enum": candidates} if candidates else False
        out = dict(schema)
        if isinstance(schema.get("properties"), Mapping):
            props = {name: narrow(sub, required, (*where, name)) for name, sub in schema["properties"].items()}
            needed = set(schema.get("required") or ())
            empty = [_lacking((*where, name), schema["properties"][name], required)
                     for name, sub in props.items() if sub is False and name in needed]
            if empty:
                raise _Uncallable(empty)
            out["properties"] = {name: sub for name, sub in props.items() if sub is not False}
        if isinstance(schema.get("items"), Mapping):
            out["items"] = narrow(schema["items"], required, (*where, 0))
            if out["items"] is False and schema.get("minItems", 0):
                raise _Uncallable([_lacking((*where, 0), schema["items"], required)])
        if isinstance(schema.get("prefixItems"), list):
            out["prefixItems"] = [narrow(sub, required, (*where, i)) for i, sub in enumerate(schema["prefixItems"])]
            if False in out["prefixItems"]:
                at = out["prefixItems"].index(False)
                raise _Uncallable([_lacking((*where, at), schema["prefixItems"][at], required)])
        return out

    try:
        narrowed = narrow(parameters, tool_requirement)
    except _Uncallable as blocked:
        if missing is not None:
            missing.extend(blocked.paths)
        return False
    return narrowed if changed else None


def _lacking(where: tuple[str | int, ...], schema: Mapping[str, Any], inherited: Requirement | None) -> str:
    """A blocked leaf's path, with the tools its declaration names as its sources (``date (which
    calendar.resolve_date returns)``), so the model reads which call gets the value."""
    declared = requirement(schema[GROUNDED_KEY]) if GROUNDED_KEY in schema else inherited
    tools = declared.tools if declared is not None else []
    return f"{render_path(where)} (which {' or '.join(tools)} returns)" if tools else render_path(where)


class _Uncallable(Exception):
    def __init__(self, paths: list[str]) -> None:
        super().__init__(paths)
        self.paths = paths


def blocked_note(tool: str, paths: Sequence[str]) -> str:
    """What the model reads when ``tool`` cannot be called yet: which values it lacks and where they come from."""
    return (f"{tool} cannot be called yet: no message or tool result holds a value for {', '.join(paths)}. Get it "
            "first: ask the user, or call a tool that returns it.")


def _has_any(schema: Mapping[str, Any]) -> bool:
    return any(key in schema for key in ("$ref", "anyOf", "oneOf", "allOf", "not", "if"))


def _candidates(schema: Mapping[str, Any], kind: str, sources: Sources,
                allowed: frozenset[str]) -> list[Any] | None:
    """The values of the admitted sources this leaf's own schema accepts; None when there are too many."""
    check = jsonschema.Draft202012Validator(
        {k: v for k, v in schema.items() if k != GROUNDED_KEY},
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    values: list[Any] = []
    if kind == "string":
        pattern = re.compile(schema["pattern"]) if isinstance(schema.get("pattern"), str) else None
        chars = 0
        for read, phrase in enumerate(sources.phrases(allowed)):
            if read >= MAX_PHRASES_READ:
                return None
            if (pattern is None or pattern.search(phrase)) and check.is_valid(phrase):
                values.append(phrase)
                chars += len(phrase)
                if len(values) > MAX_CANDIDATES or chars > MAX_CANDIDATE_CHARS:
                    return None
    else:
        for number in sources.numbers(allowed):
            value = _as_json_number(number, integer=kind == "integer")
            if value is not None and check.is_valid(value):
                values.append(value)
    return values if len(values) <= MAX_CANDIDATES else None


def _number_forms(sources: Sources, allowed: frozenset[str]) -> list[str] | None:
    """Every way the admitted sources write a number, signs dropped (in text a sign is its own character); None
    when there are too many to list."""
    forms = sorted({form.lstrip("+-\u2212") for written in sources.numbers(allowed).values() for form in written})
    return forms if len(forms) <= MAX_CANDIDATES else None


_NUMBER_END: Final = "(?:[^0-9.eE]|[.eE][^0-9+-]|[eE][+-][^0-9])"
"""What may follow a number in text without extending it into another one: not a digit, nor a decimal point or an
exponent (``1e-100``, ``0.5.3``) that a digit would continue."""
_BEFORE_NUMBER: Final = "(?:[^0-9]*[^0-9.,+\u2212-]|[^0-9]*[A-Za-z_.,][+\u2212-])"
"""A run of text a number may follow as it stands: it ends in neither a decimal point (``.100`` is another number)
nor a sign that would be read as the number's own (`` -100``), unless a word or mark before the sign makes it an
operator (``x-100``), as `agent.grounding` reads numbers."""


def _grounded_numbers_pattern(forms: Sequence[str]) -> str:
    """An ECMA pattern of the strings whose every number, as `agent.grounding` reads numbers in text (its sign,
    decimals and exponent), is one of ``forms``, written as there; with no form, no digit at all."""
    if not forms:
        return "^[^0-9]*$"
    numbers = "(?:" + "|".join(form.replace(".", "\\.").replace("+", "\\+") for form in forms) + ")"
    between = (f"(?:[+\u2212-]|[^0-9.,eE+\u2212-]|{_NUMBER_END}[^0-9]*[^0-9.,+\u2212-]"
               f"|{_NUMBER_END}[^0-9]*[A-Za-z_.,][+\u2212-])")
    after = f"(?:\\.|{_NUMBER_END}[^0-9]*)"
    return f"^(?:[^0-9]*|{_BEFORE_NUMBER}?{numbers}(?:{between}{numbers})*{after}?)$"


def _as_json_number(number: Decimal, *, integer: bool) -> int | float | None:
    if number == number.to_integral_value():
        return int(number)
    if integer:
        return None
    value = float(number)
    return value if Decimal(repr(value)) == number else None


# -- the final answer's slots -------------------------------------------------------------------------------------

def has_slots(pattern: str | None) -> bool:
    return pattern is not None and SLOT_RE.search(pattern) is not None


def final_pattern_for_turn(pattern: str, sources: Sources, escape: Callable[[str], str]) -> tuple[str, bool]:
    """``pattern`` with each slot replaced by the alternation of its candidates, each ``escape``d into the pattern
    dialect, and whether every slot had one. A slot with none becomes the empty language (``[^\\s\\S]``): the
    answer cannot be written until a source holds a value, so under ``auto`` the turn can only call a tool."""
    answerable = True

    def expand(m: re.Match[str]) -> str:
        nonlocal answerable
        allowed = frozenset(s for s in m.group(2).split(",") if s)
        if m.group(3):  # the latest call of each named tool
            allowed = frozenset(call for call in map(sources.latest_call, allowed) if call is not None)
        if m.group(1) == "number":
            forms = sorted({form for written in sources.numbers(allowed).values() for form in written})
        else:
            forms = sorted(itertools.islice(sources.phrases(allowed), MAX_CANDIDATES))
        if not forms:
            answerable = False
            return "[^\\s\\S]"
        return "(?:" + "|".join(escape(form) for form in forms) + ")"

    return SLOT_RE.sub(expand, pattern), answerable


def slot_sources(pattern: str) -> list[tuple[str, frozenset[str]]]:
    """The slots of a final pattern: (``number`` | ``text``, admitted sources)."""
    return [(m.group(1), frozenset(s for s in m.group(2).split(",") if s)) for m in SLOT_RE.finditer(pattern)]


# -- one turn with no tool results yet (`ember call`) -------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class CallVerdict:
    """What the one-turn policy makes of a call (`judge_call`)."""

    arguments: dict[str, Any]
    """The arguments to return: the model's, less the optional ones whose values are all ungrounded."""
    dropped: tuple[str, ...]
    """Optional top-level arguments left out (their values were the model's guesses; the tool's default applies)."""
    withheld: bool
    """The call is the model's invention, not the request's (see `judge_call`)."""
    grounding: tuple[ValueGrounding, ...]


def judge_call(tool: str, arguments: Mapping[str, Any], parameters: Mapping[str, Any],
               sources: Sources) -> CallVerdict:
    """The one-turn grounding policy (``ember call``), over the required free values of a call (strings and numbers
    its schema does not fix): a call none of them grounded is withheld, as the model's invention rather than the
    request's; so is one at most half of them grounded, unless the user's words name the tool (`names_tool`): the
    model then filled the rest from its own knowledge for a tool the request asked for. An optional argument whose
    free values are all ungrounded is dropped, so the tool's default applies. A call with no required free value
    is never withheld."""
    grounding = ground_arguments(arguments, parameters, sources)
    required = set(parameters.get("required") or ())
    by_argument: dict[str, list[bool]] = {}
    for g in grounding:
        if g.source.kind is not SourceKind.SCHEMA:
            by_argument.setdefault(_top_level(g.path, arguments), []).append(g.grounded)
    required_free = [grounded for name, values in by_argument.items() if name in required for grounded in values]
    withheld = bool(required_free) and sum(required_free) * 2 <= len(required_free) and (
        not any(required_free) or not names_tool(tool, sources))
    dropped = tuple(name for name, values in by_argument.items() if name not in required and not any(values))
    kept = {name: value for name, value in arguments.items() if name not in dropped}
    return CallVerdict(arguments=kept, dropped=dropped, withheld=withheld, grounding=grounding)


_GENERIC_NAME_WORDS: Final = frozenset(
    "get set find search list show give tell calculate compute retrieve fetch check create make update info "
    "information data details detail value values number current new for the and with from by".split())
"""Words of tool names that say what a tool does in general, not what it is about (``get_``, ``calculate_``)."""


def names_tool(tool: str, sources: Sources) -> bool:
    """Whether a word of the user's messages is a content word of ``tool``'s name: the name split at dots,
    underscores and case changes, words of three letters or more, less `_GENERIC_NAME_WORDS`; a plural or an -ed /
    -ing ending folded on both sides (``stocks`` names ``get_stock_info``, ``visited`` names ``get_visit_stats``)."""
    words = {_fold(w) for w in re.findall(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])", tool)
             if len(w) >= 3 and w.lower() not in _GENERIC_NAME_WORDS}
    return any(_fold(token) in words for text in sources.texts if text.source.kind is SourceKind.USER
               for token, _, _ in text.tokens)


def _fold(word: str) -> str:
    word = word.lower()
    for ending, replacement in (("ies", "y"), ("es", ""), ("s", ""), ("ed", ""), ("ing", "")):
        if word.endswith(ending) and len(word) - len(ending) >= 4:
            return word[: -len(ending)] + replacement
    return word


def _top_level(path: str, arguments: Mapping[str, Any]) -> str:
    """The top-level argument a leaf path belongs to (``items[0].qty`` → ``items``)."""
    for name in sorted(arguments, key=len, reverse=True):
        rendered = render_path((name,))
        if path == rendered or path.startswith((rendered + ".", rendered + "[")):
            return name
    return path
