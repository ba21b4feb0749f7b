"""JSON Schema keywords compiled by rewriting them into the keywords the compiler already has, exact or refused.

The walk (`walk.SchemaWalk.flatten`) calls these and flattens what they return as further allOf members:

    not S                 ──negate──►  a schema equivalent to ¬S (negation pushed down to keywords), or refused
    oneOf overlapping     ──exclusive_branches──►  anyOf of (branch_i ∧ ¬branch_j for the j that may overlap i)
    if / then / else      ──conjuncts──►  anyOf[ allOf[if, then], allOf[¬if, else] ]
    dependencies, dependentRequired, dependentSchemas  ──conjuncts──►  anyOf[ {name absent}, {name present ∧ …} ]

Soundness is the rule (what the pattern accepts is valid): a negation is built only from keywords whose
complement is itself expressible exactly; anything else raises `UnsupportedSchemaError` naming the keyword.
The negation introduces internal keywords (``NOT_PATTERN``, ``NOT_STRINGS``, ``NOT_INTEGER``, ``SOME_MEMBER``,
see `vocabulary`) that only the compiler reads; a user schema containing them only gets a smaller language, never a
larger one.
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any, Callable, Protocol

from constrained.dialect.json_lexemes import STRING_FORMATS
from constrained.errors import ConstrainedError, InvalidSchemaError, UnsupportedSchemaError
from constrained.frontends.json_schema.flat_nodes import forbids_name
from constrained.frontends.json_schema.vocabulary import (
    FORMAT_ALIASES,
    INTERNAL_KEYWORDS,
    KNOWN_UNENFORCED_FORMATS,
    CONTAINS_FROM,
    NOT_INTEGER,
    NOT_MULTIPLE,
    NOT_PATTERN,
    NOT_STRINGS,
    SOME_MEMBER,
    TYPES,
)

__all__ = ["Refs", "negate", "exclusive_branches", "conjuncts"]


class Refs(Protocol):
    """The local ``$ref`` targets a rewrite reads (given by the walk)."""

    def __call__(self, ref: Any) -> Any:
        """The node a local ``$ref`` names (refused if it names none)."""

    def negation(self, ref: Any) -> dict:
        """A schema ``{"$ref": ...}`` naming the negation of that node, built by `negate` when the walk first
        follows it: how a negation that reaches its own target again (a recursive schema) refers to itself."""

# -- not ------------------------------------------------------------------------------------------------------------

_IGNORED_IN_NOT = frozenset(
    {
        "title", "description", "examples", "example", "default", "$schema", "$id", "id", "$comment", "$anchor",
        "$dynamicAnchor", "$recursiveAnchor", "$vocabulary", "deprecated", "readOnly", "writeOnly",
        "contentMediaType", "contentEncoding", "contentSchema", "markdownDescription", "enumDescriptions",
        "markdownEnumDescriptions", "deprecationMessage", "errorMessage", "defaultSnippets", "discriminator",
        "externalDocs", "xml", "$defs", "definitions",
    }
)
_MAX_LITERAL_CHOICES = 256
"""Most alternatives the complement of array literals of one length may take (positions ** literals)."""
_REF_INLINE_DEPTH = 16
"""A ``$ref`` met this deep in one negation, or met again inside its own target's negation, becomes a reference to
its target's negation (`Refs.negation`) instead of being negated in place."""
_MAX_NEGATION_DEPTH = 32
"""Most nested subschemas one negation descends into (without ``$ref``s, only a document that deep gets there)."""


def _others(*types: str) -> dict | bool:
    rest = [t for t in TYPES if t not in types]
    return {"type": rest} if rest else False


def _any(parts: list) -> Any:
    parts = [p for p in parts if p is not False]
    if any(p is True or p == {} for p in parts):
        return True
    if not parts:
        return False
    return parts[0] if len(parts) == 1 else {"anyOf": parts}


def _all(parts: list) -> Any:
    parts = [p for p in parts if p is not True and p != {}]
    if any(p is False for p in parts):
        return False
    if not parts:
        return True
    return parts[0] if len(parts) == 1 else {"allOf": parts}


def _typed(t: str, **keywords: Any) -> dict:
    return {"type": t, **keywords}


def _numeric_enum_complement(values: list) -> list:
    """Numbers equal to none of ``values``: the open intervals between them (jsonschema compares exactly)."""
    if not values:
        return [{"type": "number"}]
    ordered = sorted(set(values), key=Fraction)
    parts = [{"type": "number", "exclusiveMaximum": ordered[0]}]
    for a, b in zip(ordered, ordered[1:]):
        parts.append({"type": "number", "exclusiveMinimum": a, "exclusiveMaximum": b})
    parts.append({"type": "number", "exclusiveMinimum": ordered[-1]})
    return parts


def _not_object_literals(literals: list[dict], where: str, again: Callable[[Any, str], Any]) -> Any:
    """Objects equal to none of ``literals``: for each, one missing a key, with a key outside it, or with a key
    whose value differs."""
    differs = []
    for literal in literals:
        if not literal:
            differs.append({"minProperties": 1})
            continue
        ways: list = [{"properties": {name: False}} for name in literal]
        ways.append({SOME_MEMBER: [[{"type": "string", NOT_STRINGS: list(literal)}, True]]})
        for name, v in literal.items():
            other = again({"const": v}, f"{where}/{name}")
            if other is not False:
                ways.append({"required": [name], "properties": {name: other}})
        differs.append(_any(ways))
    return _all([{"type": "object"}, *differs])


def _array_literals_complement(literals: list[list], where: str) -> Any:
    """Arrays equal to none of ``literals``: another length, or, of a literal's length, for each literal of that
    length a position differing from it (each choice of positions one alternative)."""
    if not literals:
        return {"type": "array"}
    lengths = sorted({len(v) for v in literals})
    parts: list = [{"type": "array", "maxItems": lengths[0] - 1}] if lengths[0] else []
    for a, b in zip(lengths, lengths[1:]):
        if b > a + 1:
            parts.append({"type": "array", "minItems": a + 1, "maxItems": b - 1})
    parts.append({"type": "array", "minItems": lengths[-1] + 1})
    for n in lengths:
        same = [v for v in literals if len(v) == n]
        if n == 0:
            continue
        if n ** len(same) > _MAX_LITERAL_CHOICES:
            raise UnsupportedSchemaError(where, "not", f"the complement of {len(same)} array literals of length {n} "
                                         f"(a position differing from each: {n}**{len(same)} alternatives)")
        for choice in itertools.product(range(n), repeat=len(same)):  # the position where each literal differs
            differ: dict[int, list] = {}
            for literal, i in zip(same, choice):
                differ.setdefault(i, []).append(literal[i])
            parts.append({"type": "array", "minItems": n, "maxItems": n,
                          "prefixItems": [{"not": {"enum": differ[i]}} if i in differ else True for i in range(n)]})
    return _any(parts)


def _negate_array_keyword(s: dict, key: str, value: Any, where: str, again: Callable[[Any, str], Any]) -> Any:
    """Arrays failing one array keyword of ``s``: ¬items (past the prefix) is a contains of ¬items there,
    ¬prefixItems some position present and failing its schema, ¬contains every element ¬C."""
    tuple_form = key == "items" and isinstance(value, list)
    if key == "prefixItems" or tuple_form:
        if not isinstance(value, list):
            raise InvalidSchemaError(where, f"{key} must be an array")
        return _any([{"type": "array", "minItems": i + 1,
                      "prefixItems": [True] * i + [bad]} for i, sub in enumerate(value)
                     if (bad := again(sub, f"{where}/{i}")) is not False])
    if value is True or value == {}:
        return False
    if key == "contains":
        return {"type": "array", "items": again(value, where)}
    before = s.get("prefixItems", s.get("items") if key == "additionalItems" else None)
    if key == "additionalItems" and not isinstance(s.get("items"), list):
        return False  # without tuple-form items, additionalItems constrains nothing
    n = len(before) if isinstance(before, list) else 0
    bad = again(value, where)
    if bad is False:
        return False
    return {"type": "array", "contains": bad, CONTAINS_FROM: n} if n else {"type": "array", "contains": bad}


def negate(schema: Any, path: str, resolve: Refs, within: list[dict] | None = None) -> Any:
    """`_negate`, with a malformed keyword value anywhere under the negation (``"maxProperties": ""``) refused as
    `InvalidSchemaError` naming the negated node, as the compiler refuses it everywhere else. ``within``: flat nodes
    the instance meets one of (a oneOf branch): a member name they all forbid needs no negated value.

    A negation of a ``$ref`` target (`Refs.negation`) is this with ``schema`` that target: a reference back to it
    inside is a reference to the negation being built. By induction on the depth of a document (a recursion the
    walk compiles passes a container), an instance is in that fixpoint exactly when the target rejects it."""
    try:
        return _negate(schema, path, resolve, 0, within, frozenset({id(schema)}))
    except ConstrainedError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError, ArithmeticError) as exc:
        raise InvalidSchemaError(path, f"a keyword under the negation has a malformed value "
                                       f"({type(exc).__name__}: {exc})") from None


def _negate(schema: Any, path: str, resolve: Refs, depth: int, within: list[dict] | None,
            entered: frozenset[int]) -> Any:
    """A schema whose valid instances are exactly those `schema` rejects (or refused with the keyword at fault).

    ¬(k1 ∧ k2 ∧ …) = ¬k1 ∨ ¬k2 ∨ …, each keyword negated on its own. A keyword that does not apply to a type
    accepts every value of it, so its negation has values of the types it applies to only (¬maximum: numbers
    above it; ¬required: objects missing a name). ``entered``: the ``$ref`` targets (ids) being negated along
    this path, whose negation a reference back to one of them names instead of unrolling it.
    """
    if depth > _MAX_NEGATION_DEPTH:
        raise UnsupportedSchemaError(path, "not", "negation nests too deep")
    if schema is True or schema == {}:
        return False
    if schema is False:
        return True
    if not isinstance(schema, dict):
        raise InvalidSchemaError(path, "a schema must be an object or a boolean")
    s = dict(schema)
    parts: list = []
    again = lambda sub, where: _negate(sub, where, resolve, depth + 1, None, entered)  # noqa: E731
    if s.pop("nullable", None) is True:  # OpenAPI: S ∨ null, so ¬S ∧ ¬null
        return _all([again(s, path), _others("null")])
    for key, value in s.items():
        where = f"{path}/{key}"
        if key in _IGNORED_IN_NOT or key.startswith("x-"):
            continue
        if key == "type":
            types = set(value if isinstance(value, list) else [value])
            if "number" in types:
                parts.append(_others(*types))
            elif "integer" in types:
                parts.append(_others(*(types | {"number"})))
                parts.append({"type": "number", NOT_INTEGER: True})
            else:
                parts.append(_others(*types))
        elif key in ("enum", "const"):
            values = value if key == "enum" else [value]
            if not isinstance(values, list):
                raise InvalidSchemaError(where, "enum must be an array")
            if None not in values:
                parts.append({"type": "null"})
            booleans = [b for b in (True, False) if not any(v is b for v in values)]
            if booleans:
                parts.append({"type": "boolean", "enum": booleans})
            numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
            parts.extend(_numeric_enum_complement(numbers))
            strings = [v for v in values if isinstance(v, str)]
            parts.append({"type": "string", NOT_STRINGS: strings} if strings else {"type": "string"})
            parts.append(_not_object_literals([v for v in values if isinstance(v, dict)], where, again))
            parts.append(_array_literals_complement([v for v in values if isinstance(v, list)], where))
        elif key == "minLength":
            if value > 0:
                parts.append(_typed("string", maxLength=value - 1))
        elif key == "maxLength":
            parts.append(_typed("string", minLength=value + 1))
        elif key == "pattern":
            parts.append(_typed("string", **{NOT_PATTERN: [value]}))
        elif key == "format":
            if value in STRING_FORMATS or value in FORMAT_ALIASES or value in KNOWN_UNENFORCED_FORMATS:
                raise UnsupportedSchemaError(where, "not", f"the complement of format {value!r}")
            continue  # an OpenAPI hint or an unknown format: no value fails it, so its negation adds nothing
        elif key in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
            if isinstance(value, bool):  # draft-04 flags: read with their partner below
                continue
            flip = {"minimum": "exclusiveMaximum", "exclusiveMinimum": "maximum",
                    "maximum": "exclusiveMinimum", "exclusiveMaximum": "minimum"}[key]
            partner = {"minimum": "exclusiveMinimum", "maximum": "exclusiveMaximum"}.get(key)
            if partner and s.get(partner) is True:
                flip = {"minimum": "maximum", "maximum": "minimum"}[key]
            parts.append(_typed("number", **{flip: value}))
        elif key == "multipleOf":
            step = Fraction(value)
            if step <= 0:
                raise InvalidSchemaError(where, "multipleOf must be positive")
            if step.denominator == 1:  # non-integers, and integers off the residue
                parts.append({"type": "number", NOT_INTEGER: True})
                parts.append({"type": "integer", NOT_MULTIPLE: [value]})
            elif step.numerator == 1 and step.denominator & (step.denominator - 1) == 0:
                parts.append({"type": "number", NOT_INTEGER: True, NOT_MULTIPLE: [value]})
            else:
                raise UnsupportedSchemaError(where, "not", f"the complement of multipleOf {value} (jsonschema's "
                                             "float quotient, not the exact value, decides it)")
        elif key == "minItems":
            if value > 0:
                parts.append(_typed("array", maxItems=value - 1))
        elif key == "maxItems":
            parts.append(_typed("array", minItems=value + 1))
        elif key == "minProperties":
            if value > 0:
                parts.append(_typed("object", maxProperties=value - 1))
        elif key == "maxProperties":
            parts.append(_typed("object", minProperties=value + 1))
        elif key == "uniqueItems":
            if value:
                raise UnsupportedSchemaError(where, "not", "the complement of uniqueItems")
        elif key == "required":
            parts.extend({"type": "object", "properties": {name: False}} for name in value)
        elif key == "properties":
            if not isinstance(value, dict):
                raise InvalidSchemaError(where, "properties must be an object")
            for name, sub in value.items():
                if within and all(forbids_name(f, name) for f in within):
                    continue  # {name present ∧ …} meets none of them
                bad = again(sub, f"{where}/{name}")
                if bad is not False:
                    parts.append({"type": "object", "required": [name], "properties": {name: bad}})
        elif key == "additionalProperties":  # some member neither listed nor matched whose value fails it
            bad = again(value, where)
            if bad is not False:
                listed, matched = s.get("properties", {}), s.get("patternProperties", {})
                if not isinstance(listed, dict) or not isinstance(matched, dict):
                    raise InvalidSchemaError(path, "properties and patternProperties must be objects")
                keys: dict = {"type": "string"}
                if listed:
                    keys[NOT_STRINGS] = list(listed)
                if matched:
                    keys[NOT_PATTERN] = list(matched)
                parts.append({"type": "object", SOME_MEMBER: [[keys, bad]]})
        elif key == "patternProperties":  # some member matching a pattern whose value fails its schema
            if not isinstance(value, dict):
                raise InvalidSchemaError(where, "patternProperties must be an object")
            for pattern, sub in value.items():
                bad = again(sub, f"{where}/{pattern}")
                if bad is not False:
                    parts.append({"type": "object", SOME_MEMBER: [[{"type": "string", "pattern": pattern}, bad]]})
        elif key == "propertyNames":  # some key fails it
            bad = _all([{"type": "string"}, again(value, where)])
            if bad is not False:
                parts.append({"type": "object", SOME_MEMBER: [[bad, True]]})
        elif key in ("items", "additionalItems", "prefixItems", "contains"):
            parts.append(_negate_array_keyword(s, key, value, where, again))
        elif key in ("unevaluatedProperties", "unevaluatedItems"):
            if value is True or value == {}:
                continue
            raise UnsupportedSchemaError(where, "not", f"the complement of {key} (some member violates it)")
        elif key == "allOf":
            parts.append(_any([again(m, f"{where}/{i}") for i, m in enumerate(value)]))
        elif key == "anyOf":
            parts.append(_all([again(m, f"{where}/{i}") for i, m in enumerate(value)]))
        elif key == "oneOf":  # none, or at least two
            none = _all([again(m, f"{where}/{i}") for i, m in enumerate(value)])
            pairs = [_all([a, b]) for i, a in enumerate(value) for b in value[i + 1:]]
            parts.append(_any([none, *pairs]))
        elif key == "not":
            parts.append(value)
        elif key == "$ref":
            target = resolve(value)
            if id(target) in entered or depth >= _REF_INLINE_DEPTH:
                parts.append(resolve.negation(value))
            else:
                parts.append(_negate(target, where, resolve, depth + 1, None, entered | {id(target)}))
        elif key == "if":
            then, else_ = s.get("then", True), s.get("else", True)
            parts.append(_any([_all([value, again(then, f"{path}/then")]),
                               _all([again(value, where), again(else_, f"{path}/else")])]))
        elif key in ("then", "else"):
            continue  # read with "if" (alone they mean nothing)
        elif key in ("dependentRequired", "dependencies", "dependentSchemas"):
            for name, need in value.items():
                if isinstance(need, list):
                    parts.extend({"type": "object", "required": [name], "properties": {r: False}} for r in need)
                else:
                    parts.append(_all([{"type": "object", "required": [name]}, again(need, f"{where}/{name}")]))
        elif key in INTERNAL_KEYWORDS or key in ("$dynamicRef", "$recursiveRef", "minContains", "maxContains"):
            raise UnsupportedSchemaError(where, "not", f"the complement of {key}")
        else:
            continue  # not a keyword: an annotation, it constrains nothing
    return _any(parts)


def exclusive_branches(branches: list, overlapping: list[set[int]], path: str, resolve: Refs,
                       contexts: list[list[dict]] | None = None) -> list:
    """oneOf as a union: branch i, minus every branch j that may overlap it (``overlapping[i]``); ``contexts[i]``:
    branch i's flat nodes, within which a part of ¬branch j that they surely exclude is left out."""
    out = []
    for i, branch in enumerate(branches):
        within = contexts[i] if contexts else None
        others = [negate(branches[j], f"{path}/oneOf/{j}", resolve, within=within) for j in sorted(overlapping[i])]
        out.append(_all([branch, *others]))
    return out


def conjuncts(node: dict, path: str, resolve: Refs) -> list[tuple[Any, str]]:
    """Extra allOf members (schema, path) that express a node's not / if / dependencies keywords."""
    out: list[tuple[Any, str]] = []
    if "not" in node:
        out.append((negate(node["not"], f"{path}/not", resolve), f"{path}/not"))
    if "if" in node:  # (if ∧ then) ∨ (¬if ∧ else); with then or else true, ¬if is needed only where it matters
        cond, then, else_ = node["if"], node.get("then", True), node.get("else", True)
        trivial = lambda x: x is True or x == {}  # noqa: E731
        where = f"{path}/if"
        if trivial(then) and trivial(else_):
            pass
        elif trivial(then):
            out.append((_any([cond, else_]), where))
        elif trivial(else_):
            out.append((_any([negate(cond, where, resolve), then]), where))
        else:
            out.append((_any([_all([cond, then]), _all([negate(cond, where, resolve), else_])]), where))
    for key in ("dependentRequired", "dependencies", "dependentSchemas"):
        if key not in node:
            continue
        if not isinstance(node[key], dict):
            raise InvalidSchemaError(f"{path}/{key}", f"{key} must be an object")
        for name, need in node[key].items():
            absent = {"properties": {name: False}}
            if isinstance(need, list):
                if key == "dependentSchemas" or not all(isinstance(r, str) for r in need):
                    raise InvalidSchemaError(f"{path}/{key}", f"{key}/{name} must be a schema")
                present: Any = {"required": [name, *need]}
            elif key == "dependentRequired":
                raise InvalidSchemaError(f"{path}/{key}", f"{key}/{name} must be an array of names")
            else:
                present = _all([{"required": [name]}, need])
            out.append((_any([absent, present]), f"{path}/{key}/{name}"))
    return out
