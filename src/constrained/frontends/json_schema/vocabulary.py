"""The vocabulary of the JSON Schema front end: which keywords it reads, ignores or refuses, the internal keywords
its rewrites introduce, the JSON types, and the ``format`` names it knows.

Pure data, plus `is_annotation` (whether a keyword constrains nothing) and `internal_validators` (the internal
keywords as `jsonschema` validator functions, for the enum filter). Every other module of the front end reads its
tables here; docs/schema-coverage.md is the keyword table in prose.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "ANNOTATION_KEYWORDS",
    "SUPPORTED_KEYWORDS",
    "UNSUPPORTED_KEYWORDS",
    "TYPES",
    "ALL_TYPE_NAMES",
    "RULE_REF",
    "is_annotation",
    "NOT_PATTERN",
    "ALL_PATTERNS",
    "NOT_STRINGS",
    "NOT_INTEGER",
    "SOME_MEMBER",
    "NOT_MULTIPLE",
    "ALL_CONTAINS",
    "CONTAINS_FROM",
    "INTERNAL_KEYWORDS",
    "REWRITTEN_KEYWORDS",
    "internal_validators",
    "INTEGER_FORMATS",
    "NOOP_FORMATS",
    "FORMAT_ALIASES",
    "ANNOTATION_FORMATS",
    "KNOWN_UNENFORCED_FORMATS",
]

# -- keywords --------------------------------------------------------------------------------------------------------

ANNOTATION_KEYWORDS = frozenset(
    {
        "title", "description", "examples", "example", "default", "$schema", "$id", "$comment",
        "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$vocabulary", "deprecated", "readOnly",
        "writeOnly", "contentMediaType", "contentEncoding", "contentSchema", "markdownDescription",
        "enumDescriptions", "markdownEnumDescriptions", "deprecationMessage", "errorMessage",
        "defaultSnippets", "discriminator", "externalDocs", "xml", "$defs", "definitions",
    }
)
"""Keywords that never constrain an instance here: ignored explicitly (so are ``x-*`` vendor
extensions, and ``id`` when it is a string: the draft-04 identifier). ``$defs``/``definitions`` are
reached only through ``$ref``."""

SUPPORTED_KEYWORDS = frozenset(
    {
        "type", "enum", "const", "nullable",
        "properties", "required", "additionalProperties", "minProperties", "maxProperties",
        "items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems",
        "contains", "minContains", "maxContains",
        "minLength", "maxLength", "pattern", "format",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
        "$ref", "allOf", "anyOf", "oneOf", "patternProperties", "propertyNames",
        "not", "if", "then", "else", "dependencies", "dependentRequired", "dependentSchemas",
    }
)
"""Keywords the compiler reads (``not``, ``if``/``then``/``else`` and the dependency keywords are rewritten into
allOf members by `rewrites.conjuncts`). Some are accepted only in some forms (see the coverage doc):
``uniqueItems`` (false, maxItems ≤ 1, or a small finite item language in rule mode), ``maxContains`` (where
``contains`` can be negated), ``multipleOf`` (integer divisors; on numbers also 1/m decimals)."""

UNSUPPORTED_KEYWORDS = frozenset(
    {
        "unevaluatedProperties",
        "unevaluatedItems", "$dynamicRef", "$recursiveRef",
    }
)
"""Known JSON Schema keywords that a regular pattern cannot (or does not yet) enforce. Next to an
``enum``/``const`` they are enforced anyway, by filtering the finite candidate set with a validator."""

TYPES = ("null", "boolean", "object", "array", "number", "string")
"""The JSON types (``integer`` is a kind of ``number``)."""
ALL_TYPE_NAMES = frozenset(TYPES) | {"integer"}
"""The names ``type`` may list."""


def is_annotation(key: str, value: Any) -> bool:
    """Whether a schema keyword constrains nothing here (`ANNOTATION_KEYWORDS`, ``x-*``, a draft-04 string ``id``)."""
    return key in ANNOTATION_KEYWORDS or key.startswith("x-") or (key == "id" and isinstance(value, str))


# -- internal keywords -----------------------------------------------------------------------------------------------

RULE_REF = "$ember:rule"
"""Rule mode: the flat node that stands for a recursive ``$ref``'s target, compiled as a call of its rule."""
NOT_PATTERN = "$ember:notPattern"
"""Internal: a list of ECMA patterns a string must match under neither engine's meaning."""
NOT_STRINGS = "$ember:notStrings"
"""Internal: a list of strings a string value must not equal."""
NOT_INTEGER = "$ember:notInteger"
"""Internal: the number must not be integer-valued (what ``not: {type: integer}`` leaves of numbers)."""
NOT_MULTIPLE = "$ember:notMultiple"
"""Internal: a list of divisors the number must be a multiple of none of (what ``not: {multipleOf: m}`` leaves)."""
ALL_CONTAINS = "$ember:allContains"
"""Internal: a list of further schemas some element each must satisfy besides ``contains`` (allOf members whose
``contains`` differ)."""
CONTAINS_FROM = "$ember:containsFrom"
"""Internal: the first position a ``contains`` witness may stand at (what ``not: {items: S}`` after a prefix of n
leaves: some element from position n on fails S)."""
ALL_PATTERNS = "$ember:allPatterns"
"""Internal: a list of further ECMA patterns a string must match besides ``pattern`` (allOf members whose patterns
differ: the string languages are intersected)."""
SOME_MEMBER = "$ember:someMember"
"""Internal: a list of [K, V] pairs (schemas): for each, an object must have a member whose key is valid under K
and whose value is valid under V (what ``not`` leaves of additionalProperties, patternProperties, propertyNames and
object literals)."""
INTERNAL_KEYWORDS = frozenset({NOT_PATTERN, NOT_STRINGS, NOT_INTEGER, NOT_MULTIPLE, ALL_PATTERNS, ALL_CONTAINS,
                               CONTAINS_FROM, SOME_MEMBER})
"""Read by the compiler; `flat_nodes.merge` unites the list-valued ones."""


def internal_validators() -> dict[str, Any]:
    """jsonschema validator functions for the internal keywords, so an ``enum``/``const`` candidate is filtered by
    everything the compiler enforces (a negated ``if`` leaves ``NOT_STRINGS`` next to an enum; jsonschema alone
    would ignore it and keep a value the schema forbids). Conservative: a string is refused under ``NOT_PATTERN``
    when Python's ``re`` finds a match or cannot read the pattern."""
    import jsonschema  # noqa: PLC0415 (only the enum filter needs it)

    def not_strings(validator: Any, strings: Any, instance: Any, schema: Any) -> Any:
        if isinstance(instance, str) and instance in strings:
            yield jsonschema.ValidationError(f"{instance!r} is excluded")

    def not_pattern(validator: Any, patterns: Any, instance: Any, schema: Any) -> Any:
        if isinstance(instance, str):
            for pattern in patterns:
                try:
                    hit = re.search(pattern, instance) is not None
                except (re.error, TypeError):
                    hit = True
                if hit:
                    yield jsonschema.ValidationError(f"{instance!r} may match the excluded pattern {pattern!r}")

    def all_patterns(validator: Any, patterns: Any, instance: Any, schema: Any) -> Any:
        if isinstance(instance, str):
            for pattern in patterns:
                try:
                    hit = re.search(pattern, instance) is not None
                except (re.error, TypeError):
                    hit = False
                if not hit:
                    yield jsonschema.ValidationError(f"{instance!r} may not match the pattern {pattern!r}")

    def not_integer(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if value and isinstance(instance, (int, float)) and not isinstance(instance, bool):
            if float(instance).is_integer():
                yield jsonschema.ValidationError(f"{instance!r} is integer-valued")

    def some_member(validator: Any, pairs: Any, instance: Any, schema: Any) -> Any:
        if isinstance(instance, dict):
            for keys, values in pairs:
                if not any(validator.evolve(schema=keys).is_valid(k) and validator.evolve(schema=values).is_valid(v)
                           for k, v in instance.items()):
                    yield jsonschema.ValidationError(f"no member of {instance!r} is a witness of {keys!r}: {values!r}")

    def not_multiple(validator: Any, divisors: Any, instance: Any, schema: Any) -> Any:
        if isinstance(instance, (int, float)) and not isinstance(instance, bool):
            for m in divisors:
                if not list(validator.descend(instance, {"multipleOf": m})):
                    yield jsonschema.ValidationError(f"{instance!r} is a multiple of {m!r}")

    def all_contains(validator: Any, schemas: Any, instance: Any, schema: Any) -> Any:
        if isinstance(instance, list):
            for sub in schemas:
                if not any(validator.evolve(schema=sub).is_valid(item) for item in instance):
                    yield jsonschema.ValidationError(f"no element of {instance!r} is valid under {sub!r}")

    def contains_from(validator: Any, start: Any, instance: Any, schema: Any) -> Any:
        if isinstance(instance, list) and "contains" in schema:
            if not any(validator.evolve(schema=schema["contains"]).is_valid(x) for x in instance[start:]):
                yield jsonschema.ValidationError(f"no element of {instance!r} from position {start} on is valid "
                                                 "under contains")

    return {NOT_STRINGS: not_strings, NOT_PATTERN: not_pattern, NOT_INTEGER: not_integer, ALL_PATTERNS: all_patterns,
            SOME_MEMBER: some_member, NOT_MULTIPLE: not_multiple, ALL_CONTAINS: all_contains,
            CONTAINS_FROM: contains_from}


REWRITTEN_KEYWORDS = frozenset({"not", "if", "then", "else", "dependencies", "dependentRequired", "dependentSchemas"})
"""Keywords `rewrites.conjuncts` turns into extra allOf members."""

# -- formats: the names ``format`` may take besides `json_lexemes.STRING_FORMATS` -----------------------------------

INTEGER_FORMATS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
"""OpenAPI integer formats: the range each allows."""
NOOP_FORMATS = frozenset({"float", "double", "password"})
"""OpenAPI hints with no constraint on a JSON value beyond its type."""

FORMAT_ALIASES = {"full-date": "date", "host-name": "hostname", "ip-address": "ipv4", "url": "uri"}
"""Names whose meaning is one of our format files: ``full-date`` (RFC 3339's name for ``date``), draft-03's
``host-name``/``ip-address``, and ``url`` (no standard format; enforcing ``uri`` only narrows the language)."""
ANNOTATION_FORMATS = frozenset({"utc-millisec"})
"""Draft-03 ``utc-millisec``: a number of milliseconds, any number; on strings it does not apply."""
KNOWN_UNENFORCED_FORMATS = frozenset(
    {
        "duration", "idn-email", "idn-hostname", "ipv6", "iri", "iri-reference", "uri-template",
        "json-pointer", "relative-json-pointer", "regex", "color", "style", "phone",
    }
)
"""Standard formats (JSON Schema drafts 3 to 2020-12) not enforced: refused (fail closed). Any format that is
neither standard, nor an alias, nor an OpenAPI hint is an annotation (the spec: unknown formats validate)."""
