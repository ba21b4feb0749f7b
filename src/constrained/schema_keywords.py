"""JSON Schema keywords that schema.py compiles by rewriting them into the keywords it already has, exact or refused.

Owns the rewrites and the few string/number languages they need; schema.py calls them from small hooks
(`_Compiler.flatten`, `compile_string`, `compile_integer`, `compile_number`, `compile_object`, `_merge`).

    not S                 ──negate──►  a schema equivalent to ¬S (negation pushed down to keywords), or refused
    oneOf overlapping     ──exclusive_branches──►  anyOf of (branch_i ∧ ¬branch_j for the j that may overlap i)
    if / then / else      ──conjuncts──►  anyOf[ allOf[if, then], allOf[¬if, else] ]
    dependencies, dependentRequired, dependentSchemas  ──conjuncts──►  anyOf[ {name absent}, {name present ∧ …} ]
    numbers: non-integer bounds, multipleOf  ──number_pattern──►  exact decimal ranges (Fraction thresholds)
    minProperties / maxProperties  ──counted_members──►  members with a counted number present

Soundness is the rule (what the pattern accepts is valid): a negation is built only from keywords whose
complement is itself expressible exactly; anything else raises `UnsupportedSchemaError` naming the keyword.
The negation introduces three internal keywords (``NOT_PATTERN``, ``NOT_STRINGS``, ``NOT_INTEGER``) that
only the compiler reads; a user schema containing them only gets a smaller language, never a larger one.

Numbers are judged the way `jsonschema` judges them: a text with a fraction is parsed to the nearest double
and compared exactly with the bound (also a double, or an int). A decimal threshold halfway between the
bound and its neighbouring double is exclusive on the safe side, so rounding can never cross a bound.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction
from typing import Any, Callable

from .errors import ConstrainedError, InvalidSchemaError, UnsupportedSchemaError

__all__ = [
    "NOT_PATTERN",
    "ALL_PATTERNS",
    "NOT_STRINGS",
    "NOT_INTEGER",
    "INTERNAL_KEYWORDS",
    "REWRITTEN_KEYWORDS",
    "FORMAT_ALIASES",
    "ANNOTATION_FORMATS",
    "KNOWN_UNENFORCED_FORMATS",
    "negate",
    "exclusive_branches",
    "conjuncts",
    "decimal_between",
    "number_pattern",
    "number_language",
    "integer_multiple_pattern",
    "counted_members",
]

NOT_PATTERN = "$ember:notPattern"
"""Internal: a list of ECMA patterns a string must match under neither engine's meaning."""
NOT_STRINGS = "$ember:notStrings"
"""Internal: a list of strings a string value must not equal."""
NOT_INTEGER = "$ember:notInteger"
"""Internal: the number must not be integer-valued (what ``not: {type: integer}`` leaves of numbers)."""
ALL_PATTERNS = "$ember:allPatterns"
"""Internal: a list of further ECMA patterns a string must match besides ``pattern`` (allOf members whose patterns
differ: the string languages are intersected)."""
INTERNAL_KEYWORDS = frozenset({NOT_PATTERN, NOT_STRINGS, NOT_INTEGER, ALL_PATTERNS})
"""Read by the compiler; `_merge` unites the list-valued ones."""

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

    return {NOT_STRINGS: not_strings, NOT_PATTERN: not_pattern, NOT_INTEGER: not_integer, ALL_PATTERNS: all_patterns}


REWRITTEN_KEYWORDS = frozenset({"not", "if", "then", "else", "dependencies", "dependentRequired", "dependentSchemas"})
"""Keywords `conjuncts` turns into extra allOf members."""

# -- formats ----------------------------------------------------------------------------------------

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


# -- not --------------------------------------------------------------------------------------------

_TYPES = ("null", "boolean", "object", "array", "number", "string")
_IGNORED_IN_NOT = frozenset(
    {
        "title", "description", "examples", "example", "default", "$schema", "$id", "id", "$comment", "$anchor",
        "$dynamicAnchor", "$recursiveAnchor", "$vocabulary", "deprecated", "readOnly", "writeOnly",
        "contentMediaType", "contentEncoding", "contentSchema", "markdownDescription", "enumDescriptions",
        "markdownEnumDescriptions", "deprecationMessage", "errorMessage", "defaultSnippets", "discriminator",
        "externalDocs", "xml", "$defs", "definitions",
    }
)
_MAX_NEGATION_DEPTH = 16
"""Most nested negations / references one `negate` call follows (a recursive $ref under `not` is refused)."""


def _others(*types: str) -> dict | bool:
    rest = [t for t in _TYPES if t not in types]
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


def negate(schema: Any, path: str, resolve: Callable[[str], Any], depth: int = 0) -> Any:
    """`_negate`, with a malformed keyword value anywhere under the negation (``"maxProperties": ""``) refused as
    `InvalidSchemaError` naming the negated node, as the compiler refuses it everywhere else."""
    if depth:
        return _negate(schema, path, resolve, depth)
    try:
        return _negate(schema, path, resolve, 0)
    except ConstrainedError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError, ArithmeticError) as exc:
        raise InvalidSchemaError(path, f"a keyword under the negation has a malformed value "
                                       f"({type(exc).__name__}: {exc})") from None


def _negate(schema: Any, path: str, resolve: Callable[[str], Any], depth: int = 0) -> Any:
    """A schema whose valid instances are exactly those `schema` rejects (or refused with the keyword at fault).

    ¬(k1 ∧ k2 ∧ …) = ¬k1 ∨ ¬k2 ∨ …, each keyword negated on its own. A keyword that does not apply to a type
    accepts every value of it, so its negation has values of the types it applies to only (¬maximum: numbers
    above it; ¬required: objects missing a name).
    """
    if depth > _MAX_NEGATION_DEPTH:
        raise UnsupportedSchemaError(path, "not", "negation nests too deep (a recursive $ref under not?)")
    if schema is True or schema == {}:
        return False
    if schema is False:
        return True
    if not isinstance(schema, dict):
        raise InvalidSchemaError(path, "a schema must be an object or a boolean")
    s = dict(schema)
    parts: list = []
    again = lambda sub, where: negate(sub, where, resolve, depth + 1)  # noqa: E731
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
            for v in values:
                if isinstance(v, (dict, list)) and v not in ({}, []):
                    raise UnsupportedSchemaError(where, "not", "the complement of an object or array literal")
            if None not in values:
                parts.append({"type": "null"})
            booleans = [b for b in (True, False) if not any(v is b for v in values)]
            if booleans:
                parts.append({"type": "boolean", "enum": booleans})
            numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
            parts.extend(_numeric_enum_complement(numbers))
            strings = [v for v in values if isinstance(v, str)]
            parts.append({"type": "string", NOT_STRINGS: strings} if strings else {"type": "string"})
            parts.append({"type": "object", "minProperties": 1} if any(v == {} and isinstance(v, dict) for v in values)
                         else {"type": "object"})
            parts.append({"type": "array", "minItems": 1} if any(v == [] and isinstance(v, list) for v in values)
                         else {"type": "array"})
        elif key == "minLength":
            if value > 0:
                parts.append(_typed("string", maxLength=value - 1))
        elif key == "maxLength":
            parts.append(_typed("string", minLength=value + 1))
        elif key == "pattern":
            parts.append(_typed("string", **{NOT_PATTERN: [value]}))
        elif key == "format":
            from .schema import _INTEGER_FORMATS, _NOOP_FORMATS  # noqa: PLC0415 (cycle)

            from .schema import STRING_FORMATS  # noqa: PLC0415 (cycle)

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
            raise UnsupportedSchemaError(where, "not", "the complement of multipleOf")
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
                bad = again(sub, f"{where}/{name}")
                if bad is not False:
                    parts.append({"type": "object", "required": [name], "properties": {name: bad}})
        elif key in ("additionalProperties", "items", "additionalItems", "propertyNames", "contains",
                     "unevaluatedProperties", "unevaluatedItems"):
            if value is True or value == {} or (key == "items" and "prefixItems" not in s and value == []):
                continue
            raise UnsupportedSchemaError(where, "not", f"the complement of {key} (some member violates it)")
        elif key == "patternProperties":
            if all(v is True or v == {} for v in value.values()):
                continue
            raise UnsupportedSchemaError(where, "not", "the complement of patternProperties")
        elif key == "prefixItems":
            raise UnsupportedSchemaError(where, "not", "the complement of prefixItems")
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
            parts.append(again(resolve(value), where))
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


def exclusive_branches(branches: list, overlapping: list[set[int]], path: str, resolve: Callable[[str], Any]) -> list:
    """oneOf as a union: branch i, minus every branch j that may overlap it (``overlapping[i]``)."""
    out = []
    for i, branch in enumerate(branches):
        others = [negate(branches[j], f"{path}/oneOf/{j}", resolve) for j in sorted(overlapping[i])]
        out.append(_all([branch, *others]))
    return out


def conjuncts(node: dict, path: str, resolve: Callable[[str], Any]) -> list[tuple[Any, str]]:
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


# -- numbers ----------------------------------------------------------------------------------------

Bound = tuple[Fraction, bool]
"""(value, inclusive)."""


def _frac_set(lo: Bound | None, hi: Bound | None, k: int) -> tuple[bool, str | None]:
    """Digit strings s of length 0..k with lo <(=) 0.s <(=) hi: (whether the empty one is in, pattern of the
    non-empty ones or None). Bounds are in [0, 1]; None: no bound on that side."""
    def ok(v: Fraction) -> bool:
        return ((lo is None or v > lo[0] or (v == lo[0] and lo[1]))
                and (hi is None or v < hi[0] or (v == hi[0] and hi[1])))
    empty = ok(Fraction(0))
    if k == 0:
        return empty, None
    if lo is None and hi is None:
        return empty, f"[0-9]{{1,{k}}}" if k > 1 else "[0-9]"
    alts = []
    dl = -1 if lo is None else min(9, math.floor(lo[0] * 10))
    dh = 10 if hi is None else min(9, math.floor(hi[0] * 10))
    free_lo, free_hi = dl + 1, dh - 1
    if free_lo <= free_hi:
        cls = str(free_lo) if free_lo == free_hi else f"[{free_lo}-{free_hi}]"
        alts.append(cls + (f"[0-9]{{0,{k - 1}}}" if k > 1 else ""))
    for d in sorted({x for x in (dl, dh) if 0 <= x <= 9}):
        sub_lo = None if lo is None or lo[0] * 10 - d < 0 else (lo[0] * 10 - d, lo[1])
        sub_hi = None if hi is None or hi[0] * 10 - d >= 1 else (hi[0] * 10 - d, hi[1])
        if sub_lo is not None and sub_lo[0] >= 1:
            continue
        if sub_hi is not None and sub_hi[0] < 0:
            continue
        e, rest = _frac_set(sub_lo, sub_hi, k - 1)
        if e and rest:
            alts.append(f"{d}(?:{rest})?")
        elif e:
            alts.append(str(d))
        elif rest:
            alts.append(f"{d}(?:{rest})")
    if not alts:
        return empty, None
    return empty, alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


def _nonneg_between(lo: Bound, hi: Bound, int_cap: int, frac_digits: int) -> str | None:
    """Plain decimals v >= 0 (no sign, no exponent, no leading zeros) with lo <(=) v <(=) hi."""
    from .schema import _alt, _natural_range  # noqa: PLC0415 (cycle)

    a, b = math.floor(lo[0]), math.floor(hi[0])
    b = min(b, int_cap)
    parts: list[str | None] = []

    def with_fraction(i: int, flo: Bound | None, fhi: Bound | None) -> str | None:
        empty, rest = _frac_set(flo, fhi, frac_digits)
        tail = None if rest is None else rf"\.{rest}"
        if empty and tail:
            return f"{i}(?:{tail})?"
        return str(i) if empty else (f"{i}{tail}" if tail else None)

    if a > b:
        return None
    if a == b:
        parts.append(with_fraction(a, (lo[0] - a, lo[1]), (hi[0] - a, hi[1]) if hi[0] - a < 1 else None))
    else:
        parts.append(with_fraction(a, (lo[0] - a, lo[1]), None))
        middle = _natural_range(a + 1, b - 1)
        if middle is not None:
            parts.append(f"{middle}" + (rf"(?:\.[0-9]{{1,{frac_digits}}})?" if frac_digits else ""))
        if hi[0] - b < 1:
            parts.append(with_fraction(b, None, (hi[0] - b, hi[1])))
        else:
            parts.append(with_fraction(b, None, None))
    return _alt(parts)


def decimal_between(lo: Bound | None, hi: Bound | None, *, int_digits: int, frac_digits: int) -> str | None:
    """Plain decimal texts (no exponent, never ``-0``) whose exact value lies between exact rational bounds."""
    from .schema import _alt  # noqa: PLC0415 (cycle)

    cap = Fraction(10**int_digits)
    parts: list[str | None] = []
    # v >= 0
    nlo: Bound = (Fraction(0), True) if lo is None or lo[0] < 0 else lo
    nhi: Bound = (cap, False) if hi is None or hi[0] >= cap else hi
    if nlo[0] < nhi[0] or (nlo[0] == nhi[0] and nlo[1] and nhi[1]):
        parts.append(_nonneg_between(nlo, nhi, 10**int_digits - 1, frac_digits))
    # v < 0: magnitudes u = -v in (max(0, -hi), -lo)
    if lo is None or lo[0] < 0:
        ulo: Bound = (Fraction(0), False) if hi is None or hi[0] >= 0 else (-hi[0], hi[1])
        uhi: Bound = (cap, False) if lo is None or -lo[0] >= cap else (-lo[0], lo[1])
        if ulo[0] < uhi[0] or (ulo[0] == uhi[0] and ulo[1] and uhi[1]):
            mag = _nonneg_between(ulo, uhi, 10**int_digits - 1, frac_digits)
            if mag is not None:
                parts.append("-" + mag)  # one alternative, or a group: no top-level '|'

    return _alt(parts)


def _threshold(value: Any, key: str, path: str) -> Bound:
    """The exact decimal threshold (exclusive) that keeps a text's parsed double on the valid side of a bound."""
    if isinstance(value, int) and abs(value) > 2**53:
        raise UnsupportedSchemaError(path, key, "an integer bound beyond 2**53 next to non-integer bounds")
    b = float(value)
    prev, nxt = math.nextafter(b, -math.inf), math.nextafter(b, math.inf)
    down, up = (Fraction(prev) + Fraction(b)) / 2, (Fraction(b) + Fraction(nxt)) / 2
    return {"minimum": (down, False), "exclusiveMinimum": (up, False),
            "maximum": (up, False), "exclusiveMaximum": (down, False)}[key]


def _dfa_and(pattern: str, other: str) -> str | None:
    """The language of both patterns, embedded as an automaton (None: empty)."""
    from . import fsm, regex  # noqa: PLC0415 (cycle)

    try:
        a, b = fsm.compile_dfa(pattern), fsm.compile_dfa(other)
    except fsm.EmptyLanguageError:
        return None
    both = fsm.intersection(a, b)
    return None if both is None else regex.automaton_text(fsm.automaton(both))


def _non_integer_texts(int_digits: int) -> str:
    """Plain decimals with a non-zero fraction and at most 15 significant digits (so the double is no integer)."""
    alts = [r"0\.[0-9]{0,14}[1-9]"]
    for n in range(1, min(int_digits, 14) + 1):
        alts.append(rf"[1-9][0-9]{{{n - 1}}}\.[0-9]{{0,{14 - n}}}[1-9]")
    return r"-?(?:" + "|".join(alts) + ")"


def _step_fractions(step: Fraction, raw: Any) -> tuple[str, bool] | None:
    """For a float divisor that is 1/m in decimal (0.01, 0.1, 0.05): the fraction spellings whose double is an
    exact multiple under both exact decimal and jsonschema's float arithmetic; None: not of that form."""
    if not isinstance(raw, float):
        return None
    m = round(1 / step)
    if m < 1 or Fraction(repr(raw)) != Fraction(1, m) or abs(step * m - 1) >= Fraction(1, 2**54):
        return None
    fracs = [r"\.0"]  # x.0 is the integer x
    if m % 2 == 0:
        fracs.append(r"\.50?")
    if m % 4 == 0:
        fracs.append(r"\.(?:25|75)")
    return "(?:" + "|".join(fracs) + ")?", True


def integer_multiple_pattern(range_pattern: str, n: int, path: str) -> str | None:
    """Integer texts of ``range_pattern`` whose value is a multiple of n (an automaton tracking the remainder)."""
    import numpy as np  # noqa: PLC0415

    from . import fsm, regex  # noqa: PLC0415 (cycle)

    if n == 1:
        return range_pattern
    if n > 100_000:
        raise UnsupportedSchemaError(path, "multipleOf", "a divisor over 100000")
    states = n + 2  # 0 start, 1 after '-', 2 + r: remainder r
    table = np.full((states, 256), fsm.DEAD, dtype=np.int32)
    table[0, ord("-")] = 1
    for src in (0, 1):
        for d in range(10):
            table[src, ord("0") + d] = 2 + d % n
    for r in range(n):
        for d in range(10):
            table[2 + r, ord("0") + d] = 2 + (r * 10 + d) % n
    accepting = np.zeros(states, dtype=bool)
    accepting[2] = True
    remainder = fsm.DFA.from_table(table, accepting=accepting, distance=np.zeros(states, dtype=np.int32),
                                   special_names=())
    try:
        base = fsm.compile_dfa(range_pattern)
    except fsm.EmptyLanguageError:
        return None
    both = fsm.intersection(base, remainder)
    return None if both is None else regex.automaton_text(fsm.automaton(both))


_NUMBER_KEYWORDS = ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "multipleOf", NOT_INTEGER)


def number_pattern(flat: dict, path: str, integer: bool, int_digits: int, frac_digits: int,
                   integer_range: Callable[[int | None, int | None], str | None]) -> str | None:
    """Numbers (or integers) under the node's bounds, multipleOf and NOT_INTEGER, exact. Remembered by those
    keywords (`number_language`): one pattern inlines a number definition at every reference (a schema of 109
    percentages spent 100 ms on three distinct ones). An error is raised afresh with this node's path."""
    key = tuple((k, type(flat[k]), flat[k]) for k in _NUMBER_KEYWORDS if k in flat)
    if all(type(v) in (int, float, bool) for _, _, v in key):
        try:
            return number_language(key, integer, int_digits, frac_digits, integer_range)
        except ConstrainedError:
            pass  # not remembered: computed again below, to raise at this path
    return _number_pattern(flat, path, integer, int_digits, frac_digits, integer_range)


@functools.lru_cache(maxsize=256)
def number_language(key: tuple, integer: bool, int_digits: int, frac_digits: int,
                    integer_range: Callable[[int | None, int | None], str | None]) -> str | None:
    """`number_pattern` of the numeric keywords in ``key`` ((keyword, type, value) triples)."""
    return _number_pattern({k: v for k, _, v in key}, "#", integer, int_digits, frac_digits, integer_range)


def _number_pattern(flat: dict, path: str, integer: bool, int_digits: int, frac_digits: int,
                    integer_range: Callable[[int | None, int | None], str | None]) -> str | None:
    keys = [k for k in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum") if k in flat]
    step_raw = flat.get("multipleOf")
    step = None if step_raw is None else Fraction(step_raw)
    if step is not None and step <= 0:
        raise InvalidSchemaError(path, "multipleOf must be positive")
    if integer or (step is not None and step.denominator == 1):
        if flat.get(NOT_INTEGER):
            return None
        lo = hi = None
        for k in keys:
            v = Fraction(flat[k])
            cand = {"minimum": math.ceil(v), "exclusiveMinimum": math.floor(v) + 1,
                    "maximum": math.floor(v), "exclusiveMaximum": math.ceil(v) - 1}[k]
            if k in ("minimum", "exclusiveMinimum"):
                lo = cand if lo is None else max(lo, cand)
            else:
                hi = cand if hi is None else min(hi, cand)
        if lo is not None and hi is not None and lo > hi:
            return None
        base = integer_range(lo, hi)
        if base is None or step is None:
            return base
        if step.denominator == 1:
            return integer_multiple_pattern(base, int(step), path)
        fr = _step_fractions(step, step_raw)
        if fr is not None or (isinstance(step_raw, float) and step.numerator == 1
                              and step.denominator & (step.denominator - 1) == 0):
            return base  # every integer is a multiple (exactly and in jsonschema's float division)
        raise UnsupportedSchemaError(path, "multipleOf", f"multipleOf {step_raw} on integers")
    lo_b: Bound | None = None
    hi_b: Bound | None = None
    for k in keys:
        t = _threshold(flat[k], k, path)
        if k in ("minimum", "exclusiveMinimum"):
            lo_b = t if lo_b is None or t[0] > lo_b[0] else lo_b
        else:
            hi_b = t if hi_b is None or t[0] < hi_b[0] else hi_b
    if lo_b is not None and hi_b is not None and lo_b[0] >= hi_b[0]:
        return None
    for b in (lo_b, hi_b):
        if b is not None and abs(b[0]) >= 10**int_digits:
            raise UnsupportedSchemaError(path, keys[0], f"number bounds must have at most {int_digits} digits")
    pattern = decimal_between(lo_b, hi_b, int_digits=int_digits, frac_digits=frac_digits)
    if pattern is None:
        return None
    if step is not None:
        fr = _step_fractions(step, step_raw)
        if fr is None:
            raise UnsupportedSchemaError(path, "multipleOf", f"multipleOf {step_raw} on numbers (only integers, "
                                         "and 0.1, 0.01, 0.05, ... of the form 1/m, are enforced)")
        pattern = _dfa_and(pattern, rf"-?(?:0|[1-9][0-9]*){fr[0]}")
        if pattern is None:
            return None
    if flat.get(NOT_INTEGER):
        pattern = _dfa_and(pattern, _non_integer_texts(int_digits))
    return pattern


# -- minProperties / maxProperties ------------------------------------------------------------------


def counted_members(members: list[tuple[str, str, bool]], extra: str | None, sep: str, lo: int, hi: int | None,
                    members_body: Callable[[list, str | None], tuple[str | None, bool]], path: str,
                    ) -> tuple[str | None, bool]:
    """`members_body` with between lo and hi members present: (body pattern, whether the object may be empty).

    Members keep schema order, required ones always present; the count is tracked while walking them (a state per
    count still open), then extras make up the rest. Refused when the states would copy members too often.
    """
    from .schema import _alt, _rep  # noqa: PLC0415 (cycle)

    n = len(members)
    if (n + 1) * (max(lo, hi or 0) + 1) > 4096:
        raise UnsupportedSchemaError(path, "minProperties", "counting that many properties")
    memo: dict[tuple[int, bool, int, int | None], str | None] = {}

    def tail_free(i: int, started: bool) -> str | None:
        """Members i.. and extras, no count left to enforce; '' means nothing more (None: no way to finish)."""
        if not started:
            body, can_empty = members_body(members[i:], extra)
            if body is None:
                return "" if can_empty else None
            return f"(?:{body})?" if can_empty else body
        text = "".join(f"{sep}{p}" if req else f"(?:{sep}{p})?" for p, _, req in members[i:])
        return text + (f"(?:{sep}{extra})*" if extra else "")

    def go(i: int, started: bool, need: int, room: int | None) -> str | None:
        if room is not None and room < 0:
            return None
        if need <= 0 and room is None:
            return tail_free(i, started)
        key = (i, started, max(need, 0), room)
        if key in memo:
            return memo[key]
        if i == n:
            need = max(need, 0)
            if extra is None:
                out = "" if need == 0 else None
            elif started:
                out = _rep(f"{sep}{extra}", need, room) if room != 0 else ("" if need == 0 else None)
            elif room == 0:
                out = "" if need == 0 else None
            else:
                first = extra + _rep(f"{sep}{extra}", max(need - 1, 0), None if room is None else room - 1)
                out = f"(?:{first})?" if need == 0 else first
        else:
            p, _, req = members[i]
            take = go(i + 1, True, need - 1, None if room is None else room - 1)
            take = None if take is None else (f"{sep}{p}" if started else p) + take
            skip = None if req else go(i + 1, started, need, room)
            if take is not None and skip == "":
                out = f"(?:{take})?"
            else:
                out = _alt([take, skip])
        memo[key] = out
        return out

    body = go(0, False, max(lo, 1), hi)  # the non-empty objects; the empty one is the container's business
    return (body or None), lo == 0


# -- strings and keys -------------------------------------------------------------------------------


def not_pattern_body(patterns: list[str], path: str) -> str | None:
    """String bodies (canonical encoding) that match none of the ECMA patterns under either engine's meaning."""
    from . import fsm, regex  # noqa: PLC0415 (cycle)

    wide = []
    for p in patterns:
        if not isinstance(p, str):
            raise InvalidSchemaError(path, "pattern must be a string")
        try:
            wide.append(regex.json_string_body_pattern(p, wide=True))
        except UnsupportedSchemaError as err:
            raise UnsupportedSchemaError(path, "not", f"pattern {p!r}: {err.detail}") from None
    universe = fsm.compile_dfa(regex.json_char_pattern(regex.ANY_SCALAR)[0] + "*")
    try:
        matched = fsm.compile_dfa("(?:" + "|".join(wide) + ")")
    except fsm.EmptyLanguageError:
        return regex.automaton_text(fsm.automaton(universe))
    rest = fsm.difference(universe, matched)
    return None if rest is None else regex.automaton_text(fsm.automaton(rest))


class KeyFilter:
    """``propertyNames``: the quoted-key language its schema allows (its compiled string pattern, as a DFA)."""

    def __init__(self, names_pattern: str | None) -> None:
        from . import fsm  # noqa: PLC0415 (cycle)

        self.dfa = None
        if names_pattern is not None:
            try:
                self.dfa = fsm.compile_dfa(names_pattern)
            except fsm.EmptyLanguageError:
                self.dfa = None

    def allows(self, name: str) -> bool:
        import json  # noqa: PLC0415

        return self.dfa is not None and self.dfa.accepts(json.dumps(name, ensure_ascii=False).encode("utf-8"))

    def keys(self, quoted: str) -> str | None:
        """The keys of ``quoted`` (a pattern of quoted keys) that the schema allows, as an automaton; None: none."""
        from . import fsm, regex  # noqa: PLC0415 (cycle)

        if self.dfa is None:
            return None
        try:
            both = fsm.intersection(fsm.compile_dfa(quoted), self.dfa)
        except fsm.EmptyLanguageError:
            return None
        return None if both is None else regex.automaton_text(fsm.automaton(both))
