"""JSON Schema → regex pattern (the dialect of ``constrained.regex``) or pushdown rules, one keyword set, exact or
refused: the front end's entry points.

Owns the translation of a JSON Schema into a full-match pattern whose language is a subset of the
schema's valid JSON texts, written in one whitespace policy. Refuses, with `UnsupportedSchemaError`
(path + keyword), every keyword it cannot enforce, and every unknown keyword (fail closed): an
unenforced constraint is a lie about the output. docs/schema-coverage.md is the keyword table.

    schema (dict | bool | JSON text)
        │ check_schema_depth (`depth`), then `compiler.SchemaCompiler.compile`
        ▼
    flatten (`walk`): $ref / allOf / anyOf / oneOf / nullable, and the keywords `rewrites` turns into allOf members
        │            (allOf and siblings are MERGED structurally by `flat_nodes.merge`, never concatenated)
        ▼
    compile_flat (`compiler`): enum/const (finite, filtered by a real validator) or one branch per JSON type
        │  string (units, formats from constrained/grammars/formats/*.regex, ECMA `pattern` via regex.py: `strings`)
        │  integer / number (exact digit-range regexes: `numbers`)   object / array (recurse, depth-bounded)
        ▼
    pattern string (Python-`re`-compatible: explicit classes, no \\d; except the ``(?@...)`` automata embedded
    for string intersections and patternProperties keys, computed with fsm.intersection / fsm.difference)

Rules that are ours, not outlines-core's: numeric bounds are exact; every keyword of a node is
honoured or refused; allOf is an intersection. Limits (documented in docs/schema-coverage.md):
integers/numbers have at most 15 integer digits unless a bound needs more, numbers at most 15
fraction digits and a 2-digit exponent; containers nest at most `max_depth` deep; open-ended values
(``true``, ``{}``, extra properties) nest at most `any_value_depth` containers; a recursive ``$ref``
is unrolled at most 3 times along one path.
"""

from __future__ import annotations

import collections
import json
import re
from typing import Any, Literal

from constrained.errors import GrammarTooLargeError, InvalidSchemaError
from constrained.frontends.json_schema.compiler import SchemaCompiler
from constrained.frontends.json_schema.depth import check_schema_depth, recursion_room
from constrained.frontends.json_schema.keys import key_others, key_regions
from constrained.frontends.json_schema.numbers import number_language
from constrained.frontends.json_schema.policy import MAX_PATTERN_CHARS, Whitespace
from constrained.frontends.json_schema.strings import excluded_keys_automaton, string_body_excluding, string_language

__all__ = ["schema_to_pattern", "schema_to_rules", "open_at_root", "hoist_whitespace", "clear_caches"]


def clear_caches() -> None:
    """Forget the compiler's memos of computed languages (key complements, string intersections, numbers), so that
    nothing carries over from one schema to the next (cold-compile benchmarks; `grammar.clear_memory_cache`)."""
    for memo in (string_body_excluding, excluded_keys_automaton, string_language, key_regions, key_others,
                 number_language):
        memo.cache_clear()


def schema_to_pattern(
    schema: dict | bool | str,
    *,
    whitespace: Whitespace = "compact",
    max_depth: int = 12,
    any_value_depth: int = 2,
    unknown_keywords: Literal["warn", "error", "annotation"] = "warn",
    exact: bool = False,
) -> str:
    """Compile a JSON Schema into a full-match pattern for its (bounded) valid JSON texts.

    Args:
        schema: the schema, as a dict, a boolean schema, or JSON text.
        whitespace: "compact" (no insignificant whitespace), "spaced" (exactly json.dumps's default separators
            ``", "`` and ``": "``) or "flexible" (json.dumps separators and indentation: each whitespace slot is
            nothing, one space, or a newline and ≤ 20 spaces).
        max_depth: most nested containers (objects/arrays) in an accepted document, root included.
            Deeper containers are never generated: an optional member that needs them is omitted, a
            required one makes its alternative unsatisfiable.
        any_value_depth: most containers an open-ended value (``true``, ``{}``, untyped items, an
            explicit ``additionalProperties: true``) may nest. Extra properties allowed only because
            ``additionalProperties`` is absent nest at most min(IMPLICIT_EXTRA_DEPTH, any_value_depth).
        unknown_keywords: a key that is no JSON Schema keyword is an annotation per the spec: "warn" ignores
            it with an `UnknownKeywordWarning` naming key and path; "error" raises UnsupportedSchemaError. A
            ``format`` the engine does not know is a constraint it cannot enforce: refused under both, unless
            "annotation" (JSON Schema's own reading, where an unknown format validates anything) lets it, like an
            unknown key, constrain nothing, with a warning.
        exact: where one pattern can only approximate the schema — a recursive ``$ref`` (unrolled
            3 times, deeper documents cut), an open-ended value (its depth bounded as above),
            containers deeper than ``max_depth`` (cut) — False approximates (every accepted document still validates)
            and True raises `PatternApproximates` (`schema_to_rules` compiles the schema exactly).

    Returns:
        The pattern (constrained.regex dialect; also valid Python ``re`` unless it embeds an automaton ``(?@``).

    Raises:
        UnsupportedSchemaError: a keyword (or keyword value) that cannot be enforced exactly; a schema nested deeper
            than `MAX_SCHEMA_DEPTH` (`depth`).
        InvalidSchemaError: malformed schema, dangling $ref, or a schema no document satisfies.
        GrammarTooLargeError: the pattern would exceed MAX_PATTERN_CHARS.
    """
    if max_depth < 1:
        raise ValueError("max_depth must be >= 1")
    with recursion_room():  # a schema MAX_SCHEMA_DEPTH deep takes more frames than Python's default limit
        schema = _checked_arguments(schema, whitespace, any_value_depth, unknown_keywords)
        compiler = SchemaCompiler(schema, whitespace, max_depth, any_value_depth, unknown_keywords)
        compiler.exact = exact
        pattern = compiler.compile(schema, "#", 0, ())
    if pattern is None:
        raise InvalidSchemaError("#", "no JSON document satisfies this schema within the compiler's limits")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise GrammarTooLargeError("regex_length", MAX_PATTERN_CHARS, f"pattern has {len(pattern)} characters")
    return pattern


def schema_to_rules(
    schema: dict | bool | str,
    *,
    whitespace: Whitespace = "compact",
    unknown_keywords: Literal["warn", "error", "annotation"] = "warn",
    fine: bool = False,
    property_order: Literal["schema", "any"] = "schema",
) -> tuple[dict[str, str], str]:
    """Compile a JSON Schema into the rules of a pushdown grammar (`constrained.grammar.compile_rules`).

    The same keywords, whitespace and refusals as `schema_to_pattern`, without its size walls: a nested value whose
    body is big, and every recursive one, becomes a rule called where it occurs (``(?&=NAME)``), so a shared
    ``$ref`` is compiled once, recursion is exact at any depth, and containers nest without a depth limit
    (``true``, ``{}`` and extra properties' values are any JSON value); a string whose length may vary by more
    than 2048 characters counts them in rules of 256 (`SchemaCompiler.counted_end`). ``fine``: every nested value is
    a rule, optional members are chained rules and counting starts past 256 characters, for a schema whose default
    rules are too big for one automaton each (masks then cross more rule boundaries). ``property_order="any"``: an
    object's members in any order, each listed one at most once (`SchemaCompiler.any_order_object`), except where
    ``minProperties``/``maxProperties`` count them (schema order there). Returns (rules, start rule name). A schema
    nested deeper than `MAX_SCHEMA_DEPTH` (``$ref`` hops included) is an `UnsupportedSchemaError`.
    """
    if property_order not in ("schema", "any"):
        raise ValueError(f"property_order must be 'schema' or 'any', not {property_order!r}")
    with recursion_room():  # a schema MAX_SCHEMA_DEPTH deep takes more frames than Python's default limit
        schema = _checked_arguments(schema, whitespace, 0, unknown_keywords)
        compiler = SchemaCompiler(schema, whitespace, _UNBOUNDED_DEPTH, 0, unknown_keywords)
        compiler.rules = {}
        compiler.fine = fine
        compiler.any_order = property_order == "any"
        root = compiler.compile(schema, "#", 0, ())
    if root is None:
        raise InvalidSchemaError("#", "no JSON document satisfies this schema within the compiler's limits")
    return hoist_whitespace(compiler.share_lexemes({"root": root, **compiler.rules}), "root", compiler.ws), "root"


def open_at_root(schema: Any) -> bool:
    """Whether one pattern surely cannot be exact for ``schema`` (so `schema_to_pattern(exact=True)` need not be
    tried): it is any value, or its root is an object open to extra properties with no keyword that could close or
    combine it. A cheap look at the root only; False means "try"."""
    if schema is True or schema == {}:
        return True
    if not isinstance(schema, dict) or "additionalProperties" in schema or "properties" not in schema:
        return False
    kind = schema.get("type", "object")
    closing = ("$ref", "allOf", "anyOf", "oneOf", "not", "if", "enum", "const", "patternProperties",
               "propertyNames", "maxProperties", "unevaluatedProperties", "dependencies", "dependentSchemas")  # fmt: skip
    return kind == "object" and not any(key in schema for key in closing)


_UNBOUNDED_DEPTH = 1 << 30
"""Rule mode's container depth limit: none (a document's depth is its token budget's business)."""
_CALLED = re.compile(r"\(\?&=([^)|]+)")
"""The name of the rule each call in a rule body calls (`constrained.rules.call`), guarded or not."""


def hoist_whitespace(rules: dict[str, str], start: str, ws: str) -> dict[str, str]:
    """Rule mode's whitespace before a value, moved into the value's rule where every call of that rule has it:
    ``ws (?&=X)`` becomes ``(?&=X)``, and X's body ``ws (?:body)``. The language is the same. The caller then calls
    X at one state, not at each of the whitespace's 22, so a mask after ``":`` walks into X once, below one exit,
    instead of 22 times (a closure and a walk each: the slowest cold masks of an any-order object). The bodies are
    concatenations of whole patterns, so whitespace text right before a call is always a whitespace slot."""
    if not ws:
        return rules
    text = "\n".join(rules.values())
    calls = collections.Counter(_CALLED.findall(text))
    in_slots = collections.Counter(re.findall(re.escape(ws) + r"\(\?&=([^)|]+)\)", text))
    hoisted = {name for name, count in in_slots.items()  # every call of it in a slot, unguarded
               if calls[name] == count and name != start and name in rules and not rules[name].startswith(ws)}
    if not hoisted:
        return rules
    slots = re.compile(re.escape(ws) + r"(?=\(\?&=(?:" + "|".join(map(re.escape, sorted(hoisted))) + r")\))")
    bodies = {name: slots.sub("", body) for name, body in rules.items()}
    return {name: f"{ws}(?:{body})" if name in hoisted else body for name, body in bodies.items()}


def _checked_arguments(schema: Any, whitespace: str, any_value_depth: int, unknown_keywords: str) -> dict | bool:
    """The schema as a dict or bool, after the checks both entry points share."""
    if any_value_depth < 0:
        raise ValueError("any_value_depth must be >= 0")
    if whitespace not in ("compact", "spaced", "flexible"):
        raise ValueError(f"whitespace must be 'compact', 'spaced' or 'flexible', not {whitespace!r}")
    check_schema_depth(schema)  # before any recursive walk, json.loads included
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as err:
            raise InvalidSchemaError("#", f"not JSON text: {err}") from None
    if not isinstance(schema, (dict, bool)):
        raise InvalidSchemaError("#", f"a schema must be an object or a boolean, not {type(schema).__name__}")
    if unknown_keywords not in ("warn", "error", "annotation"):
        raise ValueError(f"unknown_keywords must be 'warn', 'error' or 'annotation', not {unknown_keywords!r}")
    return schema
