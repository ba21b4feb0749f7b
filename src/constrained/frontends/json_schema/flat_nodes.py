"""Flat nodes: a schema node's own keywords (no ``$ref`` or combinator left) in canonical form, and their algebra.

`normalize` checks one node's keyword values and rewrites them (draft-04 forms, integer formats, ``const``) into
the form `merge` intersects (allOf, structurally: never a concatenation); `provably_disjoint` is what oneOf needs
to know whether two branches may overlap. Also the JSON-value helpers both use: `value_key` (JSON Schema equality)
and `json_text`.
"""

from __future__ import annotations

import json
import math
import warnings
from fractions import Fraction
from typing import Any, Callable

from constrained.dialect.json_lexemes import STRING_FORMATS
from constrained.errors import ConstrainedError, InvalidSchemaError, UnknownKeywordWarning, UnsupportedSchemaError
from constrained.frontends.json_schema.vocabulary import (
    ALL_PATTERNS,
    ALL_TYPE_NAMES,
    ANNOTATION_FORMATS,
    FORMAT_ALIASES,
    INTEGER_FORMATS,
    KNOWN_UNENFORCED_FORMATS,
    NOOP_FORMATS,
    ALL_CONTAINS,
    CONTAINS_FROM,
    NOT_INTEGER,
    NOT_MULTIPLE,
    NOT_PATTERN,
    NOT_STRINGS,
    RULE_REF,
    SOME_MEMBER,
    TYPES,
)

__all__ = [
    "json_text",
    "value_key",
    "pointer_token",
    "normalize",
    "canonical_types",
    "json_type",
    "type_set",
    "provably_disjoint",
    "forbids_name",
    "conj",
    "merge",
]

def json_text(value: Any) -> str:
    """A JSON value as text, as json.dumps(ensure_ascii=False) writes it."""
    return json.dumps(value, ensure_ascii=False)


def value_key(value: Any) -> str:
    """Equality key that tells booleans from numbers (JSON Schema equality) and 1 from 1.0."""
    def norm(v: Any) -> Any:
        if isinstance(v, bool):
            return ["b", v]
        if isinstance(v, (int, float)):
            return ["n", str(Fraction(v))] if math.isfinite(v) else ["n", repr(v)]
        if isinstance(v, dict):
            return ["o", sorted((k, norm(x)) for k, x in v.items())]
        if isinstance(v, list):
            return ["a", [norm(x) for x in v]]
        return ["s", v] if isinstance(v, str) else ["z", None]
    return json.dumps(norm(value))


def pointer_token(name: str) -> str:
    """A name as one JSON-pointer token (``~`` and ``/`` escaped)."""
    return name.replace("~", "~0").replace("/", "~1")


def normalize(flat: dict, path: str, unknown_keywords: str) -> dict:
    """Rewrite one node's own keywords to the canonical flat form used by `merge` (``unknown_keywords``: the
    compile's policy, for an unknown ``format``)."""
    out = dict(flat)
    if "type" in out:
        types = out["type"] if isinstance(out["type"], list) else [out["type"]]
        if not types or any(not isinstance(t, str) or t not in ALL_TYPE_NAMES for t in types):
            raise InvalidSchemaError(path, f"bad type {out['type']!r}")
        out["type"] = canonical_types(set(types))
    if "const" in out:
        const = out.pop("const")
        if "enum" in out:
            out["enum"] = [v for v in out["enum"] if value_key(v) == value_key(const)]
        else:
            out["enum"] = [const]
    if "enum" in out and not isinstance(out["enum"], list):
        raise InvalidSchemaError(path, "enum must be an array")
    if "enum" in out:
        stack = list(out["enum"])
        while stack:  # every enum/const value must be a JSON value (no bytes, sets, NaN, arbitrary objects)
            v = stack.pop()
            if isinstance(v, dict):
                if not all(isinstance(k, str) for k in v):
                    raise InvalidSchemaError(path, "enum/const object keys must be strings")
                stack.extend(v.values())
            elif isinstance(v, list):
                stack.extend(v)
            elif isinstance(v, float) and not math.isfinite(v):
                raise InvalidSchemaError(path, "enum/const value is not finite JSON")
            elif not (v is None or isinstance(v, (str, bool, int, float))):
                raise InvalidSchemaError(path, f"enum/const value of type {type(v).__name__} is not JSON")
    for key, strict in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(out.get(key), bool):  # draft-04 boolean form
            flag = out.pop(key)
            if flag and strict in out:
                out[key] = out.pop(strict)
    if isinstance(out.get("items"), list):  # draft-04..2019-09 tuple form
        out["prefixItems"] = out.pop("items")
        if "additionalItems" in out:
            out["items"] = out.pop("additionalItems")
    out.pop("additionalItems", None)
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
        if key in out and (isinstance(out[key], bool) or not isinstance(out[key], (int, float))
                           or (isinstance(out[key], float) and not math.isfinite(out[key]))):
            raise InvalidSchemaError(path, f"{key} must be a finite number")
    fmt = out.get("format")
    if "format" in out and not isinstance(fmt, str):
        raise InvalidSchemaError(path, "format must be a string")
    if "properties" in out and not isinstance(out["properties"], dict):
        raise InvalidSchemaError(path, "properties must be an object of schemas")
    if "required" in out and (not isinstance(out["required"], list)
                              or not all(isinstance(name, str) for name in out["required"])):
        raise InvalidSchemaError(path, "required must be an array of names")
    if "prefixItems" in out and not isinstance(out["prefixItems"], list):
        raise InvalidSchemaError(path, "prefixItems must be an array of schemas")
    if fmt in INTEGER_FORMATS:
        lo, hi = INTEGER_FORMATS[out.pop("format")]
        out["minimum"] = lo if "minimum" not in out else max(out["minimum"], lo)
        out["maximum"] = hi if "maximum" not in out else min(out["maximum"], hi)
    elif fmt in NOOP_FORMATS or fmt in ANNOTATION_FORMATS:
        out.pop("format")
    elif fmt in FORMAT_ALIASES:
        out["format"] = FORMAT_ALIASES[fmt]
    elif fmt is not None and fmt not in STRING_FORMATS:
        if fmt in KNOWN_UNENFORCED_FORMATS or unknown_keywords != "annotation":
            raise UnsupportedSchemaError(path, "format", f"format {fmt!r} is not enforced (a format is a "
                                         "constraint: unknown_keywords='annotation' lets an unknown one constrain "
                                         "nothing)")
        warnings.warn(f"ignoring format {fmt!r} at {path}: not a known format, so an annotation that constrains "
                      f"nothing (unknown_keywords='annotation')", UnknownKeywordWarning, stacklevel=2)
        out.pop("format")
    if out.get("patternProperties") == {}:
        out.pop("patternProperties")
    elif "patternProperties" in out and (not isinstance(out["patternProperties"], dict)
                                         or not all(isinstance(k, str) for k in out["patternProperties"])):
        raise InvalidSchemaError(path, "patternProperties must be an object of schemas")
    for key in ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"):
        if key in out and (isinstance(out[key], bool) or not isinstance(out[key], (int, float))
                           or (isinstance(out[key], float) and not math.isfinite(out[key]))
                           or out[key] < 0 or int(out[key]) != out[key]):
            raise InvalidSchemaError(path, f"{key} must be a non-negative integer")
        if key in out:
            out[key] = int(out[key])
    return out


def canonical_types(types: set[str]) -> list[str]:
    """A type set in canonical order, ``integer`` dropped where ``number`` covers it."""
    if "number" in types:
        types = types - {"integer"}
    return [t for t in ("null", "boolean", "object", "array", "integer", "number", "string") if t in types]


def json_type(value: Any) -> str:
    """The JSON type of a value (an integer-valued float is an ``integer``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "number"
    names: dict[type, str] = {str: "string", list: "array", dict: "object"}
    return names.get(type(value), "unknown")


def type_set(flat: dict) -> set[str]:
    """The types a flat node allows, ``integer`` included where ``number`` is."""
    types = set(flat.get("type", TYPES))
    return types | {"integer"} if "number" in types else types


def provably_disjoint(f: dict, g: dict, resolve: Callable[[str], Any] | None = None, depth: int = 0) -> bool:
    """True when no JSON value can satisfy both flat nodes: type sets, enums, or, for objects only, a name one
    requires whose value schemas in the two are provably disjoint (the other forbids it: false; ``resolve``
    follows a value's ``$ref``, a few levels down)."""
    if "enum" in f and "enum" in g:
        if not {value_key(v) for v in f["enum"]} & {value_key(v) for v in g["enum"]}:
            return True
    common = type_set(f) & type_set(g)
    if not common:
        return True
    if common == {"object"}:
        for one, other in ((f, g), (g, f)):
            for name in _names(one, "required"):
                if _values_disjoint(_member_schema(one, name), _member_schema(other, name), resolve, depth):
                    return True
    return False


def _names(flat: dict, key: str) -> list:
    names = flat.get(key, [])
    return [n for n in names if isinstance(n, str)] if isinstance(names, (list, dict)) else []


def _member_schema(flat: dict, name: str) -> Any:
    """The schema a member ``name`` meets: its ``properties`` entry, else ``additionalProperties`` where no
    patternProperties may apply (None: not read here)."""
    props = flat.get("properties", {})
    if not isinstance(props, dict):
        return None
    if name in props:
        return props[name]
    if forbids_name(flat, name):
        return False
    return None if "patternProperties" in flat else flat.get("additionalProperties", True)


def forbids_name(flat: dict, name: str) -> bool:
    """Whether the node surely rejects an object with member ``name``: properties[name] is false, or
    additionalProperties is false and neither properties nor a patternProperties key could take the name."""
    props = flat.get("properties", {})
    if not isinstance(props, dict):
        return False
    if name in props:
        return props[name] is False
    if flat.get("additionalProperties") is not False:
        return False
    patterns = flat.get("patternProperties", {})
    return isinstance(patterns, dict) and all(isinstance(p, str) and _surely_misses(p, name) for p in patterns)


def _surely_misses(pattern: str, name: str) -> bool:
    """A pattern with no regex syntax (a literal) that the name does not contain; False when unsure."""
    return not any(c in pattern for c in "\\^$.|?*+()[]{}") and pattern not in name


def _values_disjoint(a: Any, b: Any, resolve: Callable[[str], Any] | None, depth: int) -> bool:
    """Two value schemas (of a listed name) no value satisfies both of, judged on their own type/const/enum, then
    (``resolve`` given) as objects: each a superset of what it allows (a ``$ref``'s target, combinators left out)."""
    a, b = _target(a, resolve, depth), _target(b, resolve, depth)
    if a is False or b is False:
        return True
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    ea, eb, ta, tb = _literals(a), _literals(b), _types(a), _types(b)
    if ta is not None and tb is not None and not ta & tb:
        return True
    for literals, types, others in ((ea, tb, eb), (eb, ta, ea)):
        if literals is not None:
            keep = {value_key(v) for v in literals if types is None or json_type(v) in types}
            if not (keep if others is None else keep & {value_key(v) for v in others}):
                return True
    if resolve is None or depth >= _MAX_DISJOINT_DEPTH or ea is not None or eb is not None:
        return False
    view = {"type": canonical_types(ta)} if ta is not None else {}
    other = {"type": canonical_types(tb)} if tb is not None else {}
    for flat, schema in ((view, a), (other, b)):
        flat.update((k, schema[k]) for k in ("properties", "required", "additionalProperties", "patternProperties")
                    if k in schema)
    return provably_disjoint(view, other, resolve, depth + 1)


_MAX_DISJOINT_DEPTH = 4
"""Most levels of nested values `provably_disjoint` looks into."""


def _target(schema: Any, resolve: Callable[[str], Any] | None, depth: int) -> Any:
    """A schema, or the target of its ``$ref`` (a superset: the siblings only narrow it), followed a few times."""
    for _ in range(_MAX_DISJOINT_DEPTH):
        if resolve is None or not isinstance(schema, dict) or not isinstance(schema.get("$ref"), str):
            return schema
        try:
            schema = resolve(schema["$ref"])
        except ConstrainedError:
            return None
    return None


def _parts(schema: dict) -> list[dict]:
    """A schema and its allOf members (one level): each narrows what the schema allows."""
    members = schema.get("allOf")
    return [schema, *(m for m in members if isinstance(m, dict))] if isinstance(members, list) else [schema]


def _literals(schema: dict) -> list | None:
    """A superset of the values a schema allows, where its ``const``/``enum`` (or its allOf members') bound them:
    those every part allows (a part's const alone when it has both), less the strings a literal ``pattern``
    surely misses. None: any."""
    parts, out = _parts(schema), None
    for part in parts:
        if "const" in part:
            allowed = [part["const"]]
        elif isinstance(part.get("enum"), list):
            allowed = part["enum"]
        else:
            continue
        keep = {value_key(v) for v in allowed}
        out = allowed if out is None else [v for v in out if value_key(v) in keep]
    if out is None:
        return None
    patterns = [p for part in parts if isinstance(p := part.get("pattern"), str)]
    return [v for v in out if not (isinstance(v, str) and any(_surely_misses(p, v) for p in patterns))]


def _types(schema: dict) -> set[str] | None:
    """The types a schema allows (through its allOf members), None: any (or unreadable)."""
    out: set[str] | None = None
    for part in _parts(schema):
        names = part.get("type")
        names = [names] if isinstance(names, str) else names
        if names is None:
            continue
        if not isinstance(names, list) or not all(isinstance(n, str) and n in ALL_TYPE_NAMES for n in names):
            return None  # malformed: the compile refuses it where it reads the node
        out = type_set({"type": names}) if out is None else out & type_set({"type": names})
    return out


def conj(a: Any, b: Any) -> Any:
    """Both schemas (an allOf of two, or the one that says it all)."""
    if a is True or a == {}:
        return b
    if b is True or b == {}:
        return a
    if a is False or b is False:
        return False
    return a if a == b else {"allOf": [a, b]}


def _merge_keyed(a: dict, b: dict, path: str) -> dict:
    """properties / patternProperties / additionalProperties of two allOf members, one of them with patterns, as
    one node's. Exact where no additionalProperties meets the other's keys (a key's schemas then do not depend on
    which patterns it matches): both open (every listed name and pattern of either, schemas conj'ed), or one side
    whose names and patterns are all the other's, which alone has additionalProperties. Refused otherwise."""
    pa, pb = a.get("properties", {}), b.get("properties", {})
    qa, qb = a.get("patternProperties", {}), b.get("patternProperties", {})
    xa, xb = a.get("additionalProperties", True), b.get("additionalProperties", True)
    if not all(isinstance(x, dict) for x in (pa, pb, qa, qb)):
        raise InvalidSchemaError(path, "properties and patternProperties must be objects")
    open_a, open_b = xa is True or xa == {}, xb is True or xb == {}
    if not ((open_a and open_b) or (open_b and set(pb) <= set(pa) and set(qb) <= set(qa))
            or (open_a and set(pa) <= set(pb) and set(qa) <= set(qb))):
        raise UnsupportedSchemaError(path, "patternProperties", "allOf members with patternProperties and "
                                     "additionalProperties that meets the other member's keys cannot be merged")
    out: dict = {}
    props = {name: conj(pa.get(name, True), pb.get(name, True)) for name in [*pa, *(n for n in pb if n not in pa)]}
    patterns = {p: conj(qa.get(p, True), qb.get(p, True)) for p in [*qa, *(q for q in qb if q not in qa)]}
    if props:
        out["properties"] = props
    if patterns:
        out["patternProperties"] = patterns
    if not (open_a and open_b):
        out["additionalProperties"] = xb if open_a else xa
    return out


def merge(a: dict, b: dict, path: str) -> dict | None:
    """Structural intersection of two flat nodes (allOf); None when provably unsatisfiable."""
    assert not ((RULE_REF in a and b) or (RULE_REF in b and a)), "inline_calls expands a call that meets siblings"
    keywords = ("properties", "additionalProperties", "patternProperties")
    keyed = None
    if (("patternProperties" in a or "patternProperties" in b) and any(k in a for k in keywords)
            and any(k in b for k in keywords) and any(value_key(a.get(k)) != value_key(b.get(k)) for k in keywords)):
        keyed = _merge_keyed(a, b, path)
    out = dict(a)
    for key, bv in b.items():
        if key not in out:
            out[key] = bv
            continue
        av = out[key]
        if key == "type":
            common = type_set({"type": av}) & type_set({"type": bv})
            if not common:
                return None
            out[key] = canonical_types(common)
        elif key in ("minLength", "minItems", "minProperties", "minimum", "exclusiveMinimum"):
            out[key] = max(av, bv)
        elif key in ("maxLength", "maxItems", "maxProperties", "maximum", "exclusiveMaximum"):
            out[key] = min(av, bv)
        elif key == "required":
            out[key] = list(dict.fromkeys(list(av) + list(bv)))
        elif key == "enum":
            keep = {value_key(v) for v in bv}
            out[key] = [v for v in av if value_key(v) in keep]
        elif key == "uniqueItems":
            out[key] = bool(av) or bool(bv)
        elif key in (NOT_PATTERN, NOT_STRINGS, ALL_PATTERNS, NOT_MULTIPLE, ALL_CONTAINS, SOME_MEMBER):
            out[key] = list(av) + [v for v in bv if v not in av]
        elif key == "pattern" and isinstance(av, str) and isinstance(bv, str) and av != bv:
            more = list(out.get(ALL_PATTERNS, ()))
            out[ALL_PATTERNS] = more + ([bv] if bv not in more else [])
        elif key == "contains" and not any(k in a or k in b for k in ("minContains", "maxContains", CONTAINS_FROM)):
            more = list(out.get(ALL_CONTAINS, ()))
            out[ALL_CONTAINS] = more + ([bv] if bv not in more and bv != av else [])
        elif key == NOT_INTEGER:
            out[key] = bool(av) or bool(bv)
        elif key == "propertyNames":
            out[key] = conj(av, bv)
        elif key in ("properties", "additionalProperties", "patternProperties", "items", "prefixItems"):
            continue  # merged below, together
        elif value_key(av) != value_key(bv):
            raise UnsupportedSchemaError(path, key, "allOf members disagree and cannot be intersected")
    if keyed is not None:
        out.update(keyed)
    elif any(k in a or k in b for k in ("properties", "additionalProperties")):
        pa, pb = a.get("properties", {}), b.get("properties", {})
        xa, xb = a.get("additionalProperties", True), b.get("additionalProperties", True)
        props = {name: conj(pa.get(name, xa), pb.get(name, xb)) for name in list(pa) + [n for n in pb if n not in pa]}
        if props:
            out["properties"] = props
        if "additionalProperties" in a or "additionalProperties" in b:
            out["additionalProperties"] = conj(xa, xb)
    if any(k in a or k in b for k in ("items", "prefixItems")):
        qa, qb = a.get("prefixItems", []), b.get("prefixItems", [])
        ia, ib = a.get("items", True), b.get("items", True)
        n = max(len(qa), len(qb))
        prefix = [conj(qa[i] if i < len(qa) else ia, qb[i] if i < len(qb) else ib) for i in range(n)]
        if prefix:
            out["prefixItems"] = prefix
        out["items"] = conj(ia, ib)
    return out
