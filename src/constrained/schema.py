"""JSON Schema → regex pattern (the dialect of ``constrained.regex``), one keyword set, exact or refused.

Owns the translation of a JSON Schema into a full-match pattern whose language is a subset of the
schema's valid JSON texts, written in one whitespace policy. Refuses, with `UnsupportedSchemaError`
(path + keyword), every keyword it cannot enforce, and every unknown keyword (fail closed): an
unenforced constraint is a lie about the output. docs/schema-coverage.md is the keyword table.

    schema (dict | bool | JSON text)
        │ _Compiler.compile(node)
        ▼
    _flatten: $ref / allOf / anyOf / oneOf / nullable  ──►  disjunction of flat nodes
        │            (allOf and siblings are MERGED structurally by _merge, never concatenated)
        ▼
    _compile_flat: enum/const (finite, filtered by a real validator) or one branch per JSON type
        │  string (units, formats from constrained/grammars/formats/*.regex, ECMA `pattern` via regex.py)
        │  integer / number (exact digit-range regexes)   object / array (recurse, depth-bounded)
        ▼
    pattern string (Python-`re`-compatible: explicit classes, no \\d; except the ``(?@...)`` automata embedded
    for string intersections and patternProperties keys, computed with fsm.intersection / fsm.difference)

Rules that are ours, not outlines-core's: numeric bounds are exact; every keyword of a node is
honoured or refused; allOf is an intersection. Limits (documented in docs/schema-coverage.md):
integers/numbers have at most 15 integer digits unless a bound needs more, numbers at most 15
fraction digits and a 2-digit exponent; containers nest at most `max_depth` deep; open-ended values
(``true``, ``{}``, extra properties) nest at most `any_value_depth` containers; a recursive ``$ref``
is unrolled at most `_MAX_REF_UNROLL` times along one path. The number-range and string-set helpers
live here because they exist only to serve this translation.
"""

from __future__ import annotations

import collections
import functools
import itertools
import json
import math
import pathlib
import re
import urllib.parse
import warnings
from collections.abc import Iterable
from fractions import Fraction
from typing import Any, Literal

from . import schema_keywords as _kw
from .errors import GrammarTooLargeError, InvalidSchemaError, UnknownKeywordWarning, UnsupportedSchemaError
from .schema_depth import MAX_SCHEMA_DEPTH, check_schema_depth, recursion_room, too_deep

__all__ = [
    "schema_to_pattern",
    "schema_to_rules",
    "PatternApproximates",
    "open_at_root",
    "ANNOTATION_KEYWORDS",
    "SUPPORTED_KEYWORDS",
    "UNSUPPORTED_KEYWORDS",
    "STRING_FORMATS",
    "INTEGER_DIGITS",
    "IMPLICIT_EXTRA_DEPTH",
    "MAX_PATTERN_CHARS",
    "MAX_SCHEMA_DEPTH",
    "FRACTION_DIGITS",
]

Whitespace = Literal["compact", "spaced", "flexible"]
"""``compact``: no insignificant whitespace; ``spaced``: json.dumps's default separators (``", "`` and ``": "``,
nothing else), the layout chat templates' ``tojson`` writes; ``flexible``: a bounded blank in every slot."""

# -- policy constants -------------------------------------------------------------------------------

INTEGER_DIGITS = 15
"""Most digits in the integer part of a number the pattern accepts on a side with no explicit bound."""
FRACTION_DIGITS = 15
"""Most digits after the decimal point."""
EXPONENT_DIGITS = 2
"""Most exponent digits (unbounded numbers only): keeps every value finite as an IEEE double."""
FLEXIBLE_WS = r"(?:[ ]|\n[ ]{0,20})?"
"""One insignificant-whitespace slot in the flexible policy: nothing, one space, or one newline plus at
most 20 spaces (json.dumps separators and indent output). Bounded, so a model cannot loop on blanks."""
IMPLICIT_EXTRA_DEPTH = 1
"""Most containers the value of an extra property may nest when ``additionalProperties`` is absent
(they appear on nearly every object, so they are kept shallow; an explicit ``true`` gets any_value_depth)."""
_MAX_REF_UNROLL = 3
"""How many times one ``$ref`` may be entered along a single path (recursion unrolling)."""
_RULE_REF = "$ember:rule"
"""Rule mode: the flat node that stands for a recursive ``$ref``'s target, compiled as a call of its rule."""
_MAX_ALTERNATIVES = 256
"""Most flat alternatives a node may expand into (anyOf × allOf products)."""
MAX_PATTERN_CHARS = 2_000_000
"""Largest pattern produced; beyond it GrammarTooLargeError("regex_length")."""
_MAX_ENUM_ALTERNATIVES = 4096
"""Most distinct alternatives one alternation may list (a huge enum); beyond it GrammarTooLargeError."""

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
        "minLength", "maxLength", "pattern", "format",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
        "$ref", "allOf", "anyOf", "oneOf", "patternProperties", "propertyNames",
        "not", "if", "then", "else", "dependencies", "dependentRequired", "dependentSchemas",
    }
)
"""Keywords the compiler reads (``not``, ``if``/``then``/``else`` and the dependency keywords are rewritten into
allOf members by `schema_keywords.conjuncts`). Some are accepted only in some forms (see the coverage doc):
``uniqueItems`` (false, or maxItems ≤ 1), ``multipleOf`` (integer divisors; on numbers also 1/m decimals)."""

UNSUPPORTED_KEYWORDS = frozenset(
    {
        "contains", "minContains", "maxContains", "unevaluatedProperties",
        "unevaluatedItems", "$dynamicRef", "$recursiveRef",
    }
)
"""Known JSON Schema keywords that a regular pattern cannot (or does not yet) enforce. Next to an
``enum``/``const`` they are enforced anyway, by filtering the finite candidate set with a validator."""

_TYPES = ("null", "boolean", "object", "array", "number", "string")
_ALL_TYPE_NAMES = frozenset(_TYPES) | {"integer"}

# -- format table -----------------------------------------------------------------------------------

_FORMAT_DIR = pathlib.Path(__file__).resolve().parent / "grammars" / "formats"
"""The format patterns: package data of ``constrained`` (shipped in the wheel; see grammars/README.md)."""
STRING_FORMATS = ("date", "time", "date-time", "uuid", "email", "ipv4", "uri", "uri-reference", "hostname", "byte")
"""String formats enforced, each from constrained/grammars/formats/<name>.regex (the decoded string's pattern)."""
_INTEGER_FORMATS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_NOOP_FORMATS = frozenset({"float", "double", "password"})
"""OpenAPI hints with no constraint on a JSON value beyond its type."""


@functools.cache
def _format_body(name: str) -> str:
    """The pattern of a string format, loaded once from its declarative source file."""
    text = (_FORMAT_DIR / f"{name}.regex").read_text(encoding="utf-8")
    return "".join(line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))


# -- regex building blocks --------------------------------------------------------------------------

UNIT = r'(?:[^"\\\x00-\x1f]|\\["\\bfnrt]|\\u00[01][0-9a-f])'
"""One JSON-encoded character of a string body as json.dumps(ensure_ascii=False) writes it."""
STRING = f'"{UNIT}*"'
_INT_ANY = rf"(?:0|-?[1-9][0-9]{{0,{INTEGER_DIGITS - 1}}})"
_NUMBER_ANY = (
    rf"-?(?:0|[1-9][0-9]{{0,{INTEGER_DIGITS - 1}}})(?:\.[0-9]{{1,{FRACTION_DIGITS}}})?"
    rf"(?:[eE][+\-]?[0-9]{{1,{EXPONENT_DIGITS}}})?"
)
_SCALARS = f"(?:null|true|false|{_NUMBER_ANY}|{STRING})"
_SPECIAL = set("\\.^$*+?()[]{}|-/\"")
_SHORT_ESCAPES = {"\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t"}

Pattern = str | None
"""A pattern, or None for the empty language (an unsatisfiable sub-schema)."""


def _is_annotation(key: str, value: Any) -> bool:
    """Whether a schema keyword constrains nothing here (`ANNOTATION_KEYWORDS`, ``x-*``, a draft-04 string ``id``)."""
    return key in ANNOTATION_KEYWORDS or key.startswith("x-") or (key == "id" and isinstance(value, str))


def _lit(text: str) -> str:
    """Escape literal text into the dialect (metacharacters backslashed, controls as \\xHH)."""
    if _SURROGATE.search(text):
        raise UnsupportedSchemaError("#", "enum", "lone surrogate in a literal string")
    return text.translate(_LITERAL_ESCAPES)


_LITERAL_ESCAPES = {**{ord(ch): "\\" + ch for ch in _SPECIAL},
                    **{code: f"\\x{code:02x}" for code in [*range(0x20), 0x7F]}}
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _class_char(ch: str) -> str:
    return "\\" + ch if ch in "\\]^-[" else (f"\\x{ord(ch):02x}" if ord(ch) < 0x20 else ch)


def _alt(parts: list[Pattern]) -> Pattern:
    seen = dict.fromkeys(parts)  # ordered dedup, linear in len(parts)
    seen.pop(None, None)
    if not seen:
        return None
    if len(seen) > _MAX_ENUM_ALTERNATIVES:
        raise GrammarTooLargeError("alternatives", _MAX_ENUM_ALTERNATIVES, f"{len(seen)} distinct alternatives")
    return next(iter(seen)) if len(seen) == 1 else "(?:" + "|".join(seen) + ")"  # type: ignore[arg-type]


def _cat(*parts: Pattern) -> Pattern:
    return None if any(p is None for p in parts) else "".join(parts)  # type: ignore[arg-type]


def _rep(p: str, lo: int, hi: int | None) -> str:
    if hi == 0 or p == "":
        return ""
    g = f"(?:{p})"
    if hi is None:
        return g + ("*" if lo == 0 else "+" if lo == 1 else f"{{{lo},}}")
    if lo == hi:
        return g if lo == 1 else f"{g}{{{lo}}}"
    return g + ("?" if (lo, hi) == (0, 1) else f"{{{lo},{hi}}}")


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _value_key(value: Any) -> str:
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


def _pointer_token(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


# -- integer and decimal ranges ---------------------------------------------------------------------


def _same_length_range(a: str, b: str) -> str:
    """Digit strings of len(a) == len(b) between a and b inclusive."""
    if a == b:
        return a
    if a[0] == b[0]:
        return a[0] + _same_length_range(a[1:], b[1:])
    n = len(a) - 1
    if a[1:] == "0" * n and b[1:] == "9" * n:
        return f"[{a[0]}-{b[0]}]" + (f"[0-9]{{{n}}}" if n > 1 else "[0-9]" if n else "")
    parts = [a[0] + _same_length_range(a[1:], "9" * n)]
    lo, hi = int(a[0]) + 1, int(b[0]) - 1
    if lo <= hi:
        cls = str(lo) if lo == hi else f"[{lo}-{hi}]"
        parts.append(cls + (f"[0-9]{{{n}}}" if n > 1 else "[0-9]" if n else ""))
    parts.append(b[0] + _same_length_range("0" * n, b[1:]))
    return "(?:" + "|".join(parts) + ")"


def _natural_range(lo: int, hi: int) -> Pattern:
    """Decimal naturals (no leading zeros) n with lo <= n <= hi, 0 <= lo."""
    if lo > hi:
        return None
    parts: list[str] = []
    full_from: int | None = None  # run of lengths whose whole [10^(L-1), 10^L - 1] is covered
    for length in range(len(str(lo)), len(str(hi)) + 1):
        first = 0 if length == 1 else 10 ** (length - 1)
        a, b = max(lo, first), min(hi, 10**length - 1)
        if length > 1 and a == first and b == 10**length - 1:
            full_from = length if full_from is None else full_from
            continue
        if full_from is not None:
            parts.append(_full_lengths(full_from, length - 1))
            full_from = None
        parts.append(_same_length_range(str(a), str(b)))
    if full_from is not None:
        parts.append(_full_lengths(full_from, len(str(hi))))
    return _alt(parts)


def _full_lengths(l1: int, l2: int) -> str:
    return f"[1-9][0-9]{{{l1 - 1}}}" if l1 == l2 else f"[1-9][0-9]{{{l1 - 1},{l2 - 1}}}"


def _integer_range(lo: int | None, hi: int | None) -> Pattern:
    """Integers lo <= n <= hi (None: up to the digit cap on that side). Never "-0"."""
    if lo is None and hi is None:
        return _INT_ANY
    digits = max(INTEGER_DIGITS, len(str(abs(lo if hi is None else hi))))  # type: ignore[arg-type]
    lo = -(10**digits - 1) if lo is None else lo
    hi = 10**digits - 1 if hi is None else hi
    parts = []
    if lo < 0:
        parts.append(_cat("-", _natural_range(max(1, -hi), -lo)))
    if hi >= 0:
        parts.append(_natural_range(max(lo, 0), hi))
    return _alt(parts)


def _nonzero_fraction(max_len: int) -> Pattern:
    """Fraction digit strings of length 1..max_len that are not all zeros."""
    if max_len <= 0:
        return None
    return _alt(["0" * j + "[1-9]" + (f"[0-9]{{0,{max_len - 1 - j}}}" if max_len - 1 - j else "") for j in range(max_len)])


def _nonneg_decimal(a: int, a_incl: bool, b: int | None, b_incl: bool) -> Pattern:
    """Unsigned decimals x (no exponent) with a <(=) x <(=) b, integer bounds, b None = digit cap.

    Exclusive bounds keep a value and its bound at most 15 significant digits apart so the parsed
    double can never round onto the bound itself.
    """
    cap = 10**INTEGER_DIGITS - 1
    zero_frac = rf"(?:\.0{{1,{FRACTION_DIGITS}}})?"
    whole_hi = cap if b is None else (b if b_incl else b - 1)
    parts: list[Pattern] = [_cat(_natural_range(a if a_incl else a + 1, whole_hi), zero_frac)]
    m_lo, m_hi = a, cap if b is None else b - 1
    if m_lo <= m_hi:
        def frac_at(m: int) -> int:
            return FRACTION_DIGITS if m == 0 else min(FRACTION_DIGITS, 15 - len(str(m)))
        inner_lo, inner_hi = m_lo, m_hi
        if not a_incl:
            parts.append(_cat(str(m_lo), r"\.", _nonzero_fraction(frac_at(m_lo))))
            inner_lo = m_lo + 1
        if b is not None and not b_incl and m_hi >= inner_lo:
            parts.append(_cat(str(m_hi), r"\.", _nonzero_fraction(frac_at(m_hi))))
            inner_hi = m_hi - 1
        parts.append(_cat(_natural_range(inner_lo, inner_hi), r"\.", _nonzero_fraction(FRACTION_DIGITS)))
    return _alt(parts)


def _decimal_range(lo: tuple[int, bool] | None, hi: tuple[int, bool] | None) -> Pattern:
    """Numbers between integer-valued bounds (value, inclusive), plain decimal notation."""
    parts: list[Pattern] = []
    if hi is None or hi[0] > 0 or (hi[0] == 0 and hi[1]):
        a, a_incl = (lo if lo is not None and lo[0] >= 0 else (0, True))
        parts.append(_nonneg_decimal(a, a_incl, None if hi is None else hi[0], True if hi is None else hi[1]))
    if lo is None or lo[0] < 0:
        a, a_incl = ((-hi[0], hi[1]) if hi is not None and hi[0] < 0 else (0, False))
        neg = _nonneg_decimal(a, a_incl, None if lo is None else -lo[0], True if lo is None else lo[1])
        parts.append(_cat("-", neg))
    return _alt(parts)


# -- string sets ------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _unit_encodings(ch: str) -> tuple[str, ...]:
    """Every UNIT spelling that decodes to ch (the canonical one first)."""
    if ch == '"':
        return (r'\\"',)
    if ch == "\\":
        return (r"\\\\",)
    if ord(ch) < 0x20:
        spelled = (rf"\\u00{ord(ch):02x}",)
        return ((rf"\\{_SHORT_ESCAPES[ch]}",) if ch in _SHORT_ESCAPES else ()) + spelled
    return (_lit(ch),)


@functools.lru_cache(maxsize=4096)
def _unit_excluding(chars: frozenset[str]) -> str:
    """One UNIT that does not decode to any of ``chars``."""
    plain = "".join(sorted(_class_char(c) for c in chars if c not in '"\\' and ord(c) >= 0x20))
    parts = [f'[^"\\\\\\x00-\\x1f{plain}]']
    specials = [c for c in chars if c in '"\\' or ord(c) < 0x20]
    if not specials:
        parts.append(r'\\["\\bfnrt]|\\u00[01][0-9a-f]')
    else:
        for code in list(range(0x20)) + [ord('"'), ord("\\")]:
            if chr(code) not in chars:
                parts.extend(_unit_encodings(chr(code)))
    return "(?:" + "|".join(parts) + ")"


@functools.lru_cache(maxsize=4096)
def _unit_alternatives(ch: str) -> str:
    """A pattern of every UNIT spelling of ``ch``."""
    return _alt(list(_unit_encodings(ch))) or ""


@functools.lru_cache(maxsize=256)
def _string_body_excluding(names: tuple[str, ...]) -> str:
    """String bodies (any UNIT sequence) that do not decode to one of `names`: the trie's prefixes that are not
    names, or a path down the trie that leaves it by one unit and then goes on freely. The free tail is written
    once, not under every trie node (a third shorter pattern, the same minimal DFA). Cached: a third of the calls
    of a compile repeat a name set (an object met again through `$ref` or another branch)."""
    trie = _names_trie(names)
    if all(ch in _ASCII_PLAIN for name in names for ch in name):
        return _ascii_names_complement(trie)
    return _names_complement(trie)


def _names_trie(names: Iterable[str]) -> dict:
    """The names as a character trie: a node maps each next character to its child, and ``""`` marks a name's end."""
    trie: dict = {}
    for name in names:
        node = trie
        for ch in name:
            node = node.setdefault(ch, {})
        node[""] = True
    return trie


def _names_complement(trie: dict) -> str:
    """`_string_body_excluding` for any names: a whole UNIT (every spelling of a character) under each node."""
    def walk(node: dict) -> tuple[Pattern, str]:  # (prefixes that are not names, prefixes that have left)
        chars = [c for c in node if c]
        inside: list[Pattern] = [] if "" in node else [""]
        left = [_unit_excluding(frozenset(chars))]
        for ch in chars:
            unit = _unit_alternatives(ch)
            child_inside, child_left = walk(node[ch])
            if child_inside is not None:
                inside.append(unit + child_inside)
            left.append(unit + child_left)
        return _alt(inside), _alt(left) or ""  # _alt refuses more than _MAX_ENUM_ALTERNATIVES

    inside, left = walk(trie)
    return _alt([inside, left + UNIT + "*"]) or ""


_ASCII_PLAIN = frozenset(map(chr, range(0x20, 0x80))) - {'"', "\\"}
"""The characters a string body spells one way, as themselves, in one byte."""
_LEAVES_ANY_ASCII_NAME = r'(?:[^\x00-\x7f]|\\["\\bfnrt]|\\u00[01][0-9a-f])'
"""A UNIT that decodes to no `_ASCII_PLAIN` character: a non-ASCII one or an escape."""


def _ascii_names_complement(trie: dict) -> str:
    """`_string_body_excluding` for names of `_ASCII_PLAIN` characters (nearly every key): a prefix of the trie
    that is no name; or a path down it, then an ASCII character that leaves it or (at any node) a unit that no
    name has, then anything. Each node carries one byte class instead of a whole UNIT: half the pattern, and of
    the native compiler's time on it, for the same language."""
    def walk(node: dict) -> tuple[str | None, str, str]:  # (prefixes that are no name, ASCII exits, all prefixes)
        chars = [c for c in node if c]
        inside: list[str] = [] if "" in node else [""]
        left, prefixes = [_ascii_plain_except("".join(sorted(chars)))], [""]
        for ch in chars:
            child_inside, child_left, child_prefixes = walk(node[ch])
            unit = _lit(ch)
            if child_inside is not None:
                inside.append(unit + child_inside)
            left.append(unit + child_left)
            prefixes.append(unit + child_prefixes)
        return (_one_of(inside) if inside else None), _one_of(left), _one_of(prefixes)

    inside, left, prefixes = walk(trie)
    return _alt([inside, f"(?:{left}|{prefixes}{_LEAVES_ANY_ASCII_NAME}){UNIT}*"]) or ""


@functools.lru_cache(maxsize=4096)
def _ascii_plain_except(chars: str) -> str:
    """A class of the `_ASCII_PLAIN` characters but ``chars``, as ranges (a positive class: generators that sample
    a negated class from all of Unicode, such as hypothesis' ``from_regex``, would almost never hit ASCII)."""
    _, regex = _dfa_ops()
    ranges = regex.normalize_ranges([(ord(c), ord(c)) for c in _ASCII_PLAIN.difference(chars)])
    return regex.class_text(ranges) if ranges else "[^\\x00-\\U0010ffff]"  # every character goes on: none leaves


def _one_of(distinct: list[str]) -> str:
    """Alternatives known to be distinct (a trie node's branches start with distinct characters): `_alt` without
    its dedup, for the many small nodes of a key trie."""
    return distinct[0] if len(distinct) == 1 else "(?:" + "|".join(distinct) + ")"


# -- computed string languages (intersections and complements, embedded as automata) ---------------

@functools.lru_cache(maxsize=64)
def _excluded_keys_automaton(names: tuple[str, ...]) -> str:
    """`_string_body_excluding` as an embedded automaton, from a DFA difference: the same language, for the finer
    rules, where a hundred names make the pattern's NFA too big (a unit class under every trie node) while the
    DFA has about one state per trie node."""
    if not names:
        return UNIT + "*"
    fsm, regex = _dfa_ops()
    spelled = "|".join("".join(_unit_alternatives(ch) for ch in name) for name in names)
    universe, names_dfa = fsm.compile_dfa(UNIT + "*"), fsm.compile_dfa(spelled)
    dfa = fsm.difference(universe, names_dfa, max_states=fsm.MAX_DFA_STATES)  # it goes into a rule: a rule's budget
    assert dfa is not None, "finitely many names never exhaust the string bodies"
    return regex.automaton_text(fsm.automaton(dfa))


_MAX_KEY_GROUPS = 6
"""Most patternProperties with distinct schemas one object may have (their overlaps split keys 2^n ways)."""


def _dfa_ops() -> Any:
    from . import fsm, regex

    return fsm, regex


def _longest(dfa: Any) -> int | None:
    """Most symbols in an accepted string (None: unbounded); the DFA is trimmed, so every cycle is live."""
    rows = [sorted({t for t in row if t >= 0}) for row in dfa.class_table.tolist()]
    indegree = [0] * len(rows)
    for row in rows:
        for t in row:
            indegree[t] += 1
    order = [s for s in range(len(rows)) if indegree[s] == 0]
    for s in order:
        for t in rows[s]:
            indegree[t] -= 1
            if indegree[t] == 0:
                order.append(t)
    if len(order) < len(rows):
        return None
    longest = [0] * len(rows)
    for s in reversed(order):
        longest[s] = max((longest[t] + 1 for t in rows[s]), default=0)
    return longest[0]


@functools.lru_cache(maxsize=256)
def _string_language(bodies: tuple[str, ...], lo: int, hi: int | None) -> str | None:
    """A string-body pattern for the intersection of body patterns and a length range (JSON characters); None
    when it is empty. One body whose strings already satisfy the lengths comes back as it is."""
    fsm, regex = _dfa_ops()
    try:
        dfa = fsm.compile_dfa(bodies[0])
    except fsm.EmptyLanguageError:
        return None
    for body in bodies[1:]:
        dfa = fsm.intersection(dfa, fsm.compile_dfa(body))
        if dfa is None:
            return None
    longest = _longest(dfa) if hi is not None else None
    if hi is not None and longest is not None and longest <= hi:  # a character is at least one byte
        hi = None
    if lo and -(-int(dfa.distance[0]) // 6) >= lo:  # and at most six (\u00xx)
        lo = 0
    if lo or hi is not None:
        dfa = fsm.intersection(dfa, fsm.compile_dfa(_rep(UNIT, lo, hi)))
    elif len(bodies) == 1:
        return bodies[0]
    return None if dfa is None else regex.automaton_text(fsm.automaton(dfa))


def _key_literal(name: str) -> str:
    return _lit(_json_text(name)[1:-1])


@functools.lru_cache(maxsize=256)
def _key_regions(groups: tuple[str, ...], wide: tuple[str, ...], names: tuple[str, ...]
                 ) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The keys matching exactly the groups of each non-empty subset of ``groups`` (body patterns) and no listed
    name: (key body pattern, group indices), empty regions left out. A key must match its groups under both
    engines' meanings (``groups``) and the others under neither (``wide``, see `regex.json_string_body_pattern`)."""
    fsm, regex = _dfa_ops()
    dfas = [fsm.compile_dfa(g) for g in groups]
    out = []
    for size in range(1, len(groups) + 1):
        for subset in itertools.combinations(range(len(groups)), size):
            dfa = dfas[subset[0]]
            for i in subset[1:]:
                dfa = fsm.intersection(dfa, dfas[i])
                if dfa is None:
                    break
            excluded = [wide[i] for i in range(len(groups)) if i not in subset] + [_key_literal(n) for n in names]
            if dfa is not None and excluded:
                dfa = fsm.difference(dfa, fsm.compile_dfa("(?:" + "|".join(excluded) + ")"))
            if dfa is not None:
                out.append((regex.automaton_text(fsm.automaton(dfa)), subset))
    return tuple(out)


@functools.lru_cache(maxsize=256)
def _key_others(wide: tuple[str, ...], names: tuple[str, ...]) -> str | None:
    """Canonical key bodies matching no group (``wide`` bodies) and no listed name (None: there are none)."""
    fsm, regex = _dfa_ops()
    universe = fsm.compile_dfa(regex.json_char_pattern(regex.ANY_SCALAR)[0] + "*")
    excluded = list(wide) + [_key_literal(n) for n in names]
    dfa = fsm.difference(universe, fsm.compile_dfa("(?:" + "|".join(excluded) + ")"))
    return None if dfa is None else regex.automaton_text(fsm.automaton(dfa))


def clear_caches() -> None:
    """Forget the compiler's memos of computed languages (key complements, string intersections, numbers), so that
    nothing carries over from one schema to the next (cold-compile benchmarks; `grammar.clear_memory_cache`)."""
    for memo in (_string_body_excluding, _excluded_keys_automaton, _string_language, _key_regions, _key_others,
                 _kw.number_language):
        memo.cache_clear()


class _KeyPatterns:
    """One object's patternProperties: key patterns (JSON Schema search semantics) over canonical key bodies."""

    def __init__(self, patterns: dict, path: str) -> None:
        fsm, regex = _dfa_ops()
        self.schemas = patterns
        self.bodies: dict[str, str] = {}
        self.wide: dict[str, str] = {}
        """What a key matching a pattern under either engine's meaning may look like (for exclusions)."""
        for pattern in patterns:
            try:
                self.bodies[pattern] = regex.json_string_body_pattern(pattern)
                self.wide[pattern] = regex.json_string_body_pattern(pattern, wide=True)
            except UnsupportedSchemaError as err:
                raise UnsupportedSchemaError(path, "patternProperties", f"{pattern!r}: {err.detail}") from None
        self.dfas = {}
        for pattern, body in self.wide.items():
            try:
                self.dfas[pattern] = fsm.compile_dfa(body)
            except fsm.EmptyLanguageError:
                continue  # no key matches it
        by_schema: dict[str, list[str]] = {}
        for pattern, sub in patterns.items():
            if pattern not in self.dfas:
                continue
            by_schema.setdefault(json.dumps(sub, sort_keys=True, default=repr), []).append(pattern)
        self.groups = list(by_schema.values())
        """Patterns with identical schemas, together (a key matching several of them needs that schema once)."""
        if len(self.groups) > _MAX_KEY_GROUPS:
            raise UnsupportedSchemaError(path, "patternProperties",
                                         f"more than {_MAX_KEY_GROUPS} patterns with distinct schemas")
        self.group_bodies = tuple("(?:" + "|".join(self.bodies[p] for p in g) + ")" for g in self.groups)
        self.group_wide = tuple("(?:" + "|".join(self.wide[p] for p in g) + ")" for g in self.groups)

    def matching(self, name: str) -> list[str]:
        """The patterns a listed name may match (either engine), one per group (their schemas all apply to it)."""
        key = _json_text(name)[1:-1].encode("utf-8")
        return [next(p for p in g if self.dfas[p].accepts(key)) for g in self.groups
                if any(self.dfas[p].accepts(key) for p in g)]

    def regions(self, names: list[str]) -> list[tuple[str, list[str]]]:
        """(key body pattern, one pattern per group that applies) for the keys not listed that match a pattern."""
        regions = _key_regions(self.group_bodies, self.group_wide, tuple(names))
        return [(keys, [self.groups[i][0] for i in subset]) for keys, subset in regions]

    def others(self, names: list[str]) -> str | None:
        """Key body pattern of the keys additionalProperties governs (None: no such key)."""
        return _key_others(self.group_wide, tuple(names))


# -- the compiler -----------------------------------------------------------------------------------


class _Compiler:
    """One compilation: the root (for $ref), the whitespace policy, the depth limits."""

    def __init__(self, root: Any, whitespace: Whitespace, max_depth: int, any_value_depth: int,
                 unknown_keywords: str = "warn") -> None:
        self.root = root
        self.unknown_keywords = unknown_keywords
        self.ws = FLEXIBLE_WS if whitespace == "flexible" else ""
        self.sep = ", " if whitespace == "spaced" else f"{self.ws},{self.ws}"
        self.colon = ": " if whitespace == "spaced" else f"{self.ws}:{self.ws}"
        self.max_depth = max_depth
        self.any_value_depth = any_value_depth
        self._validator: Any = None
        self._any_cache: dict[int, str] = {}
        self._cache: dict[tuple, tuple[Any, Pattern]] = {}
        self._verdicts: dict[tuple[int, str], bool] = {}
        self._cached_chars = 0
        self.rules: dict[str, str] | None = None
        """Rule mode (`schema_to_rules`): nested values become rules of a pushdown grammar; None for one pattern."""
        self.exact = False
        """Raise `PatternApproximates` where one pattern would only approximate (the caller then compiles rules)."""
        self._rule_names: dict[int, str] = {}
        self._rule_results: dict[int, Pattern] = {}
        self._in_progress: set[int] = set()
        self._recursive: set[int] = set()
        self._kept: list[Any] = []
        self._lexemes: dict[str, str] = {}
        """Rule mode: each constrained string value's pattern → the name of the call standing for it (see
        `share_lexemes`)."""
        self._lexeme_extra: dict[str, int] = {}
        """Lexeme call name → how much longer the text gets with the lexeme inline."""
        self.fine = False
        """Rule mode, ``schema_to_rules(fine=True)``: every nested value a rule, counting past `_CHUNK_CHARS`,
        optional members chained (`subsequence_rules`), extra keys as an automaton."""
        self.any_order = False
        """Rule mode, ``schema_to_rules(property_order="any")``: members in any order (`any_order_object`)."""
        self.level = 0
        """Values and subschemas entered along the path being compiled (`compile` and `flatten` calls open),
        ``$ref`` hops included: refused past `MAX_SCHEMA_DEPTH` (`enter`; the document's own depth was checked
        before, a ``$ref`` chain adds levels)."""

    # -- entry: a schema node at a position ----------------------------------------------------------

    def compile(self, node: Any, path: str, depth: int, trail: tuple[str, ...]) -> Pattern:
        """Pattern of `node` at container depth `depth` (containers already open around it), one `level` deeper."""
        self.enter(path, trail)
        try:
            return self.compile_level(node, path, depth, trail)
        finally:
            self.level -= 1

    def enter(self, path: str, trail: tuple[str, ...]) -> None:
        """One level deeper (`compile` into a nested value, `flatten` into a subschema), refused past the limit. A
        value's own `flatten` is one level below its `compile`: a document of MAX_SCHEMA_DEPTH containers reaches
        MAX_SCHEMA_DEPTH + 1."""
        if self.level > MAX_SCHEMA_DEPTH:
            through_ref = any(target != "|" for target in trail) or "/$defs/" in path or "/definitions/" in path
            raise too_deep(path, "levels (values and subschemas entered along this path, $ref hops included)",
                           "$ref" if through_ref else None)  # fmt: skip
        self.level += 1

    def compile_level(self, node: Any, path: str, depth: int, trail: tuple[str, ...]) -> Pattern:
        """`compile` of one node, its level counted."""
        if node is True or node == {}:
            return self.any_value(depth, self.any_value_depth, path)
        if self.rules is not None and depth > 0:
            return self.compile_rule(node, path, trail)
        key = (id(node), depth, trail)
        if key not in self._cache:  # the node is kept alive in the entry, so its id stays unique
            flats = self.flatten(node, path, trail)
            pattern = self.choice([self.compile_flat(flat, fpath, depth, ftrail, node)
                                   for flat, fpath, ftrail in flats])
            self._cache[key] = (node, pattern)
            self._cached_chars += len(pattern or "")
            if self._cached_chars > 4 * MAX_PATTERN_CHARS:
                raise GrammarTooLargeError("regex_length", MAX_PATTERN_CHARS, f"while compiling {path}")
        return self._cache[key][1]

    def compile_rule(self, node: Any, path: str, trail: tuple[str, ...]) -> Pattern:
        """Rule mode: a nested value compiled once per schema node; a call of its rule when the node is recursive
        or its body big, else the body inline (small values keep masks inside one rule)."""
        node, path = self.referent(node, path)
        key = id(node)
        if key in self._rule_results:
            return self._rule_results[key]
        name = self._rule_names.setdefault(key, f"v{len(self._rule_names)}")
        if key in self._in_progress:
            self._recursive.add(key)
            return _call(name)
        self._in_progress.add(key)
        self._kept.append(node)  # ids stay unique while the compilation runs
        try:
            flats = self.flatten(node, path, trail)
            body = self.choice([self.compile_flat(flat, fpath, 1, ftrail, node) for flat, fpath, ftrail in flats])
        finally:
            self._in_progress.discard(key)
        assert self.rules is not None
        if body is None:
            if key in self._recursive:
                raise InvalidSchemaError(path, "a recursive schema with no finite instance")
            result: Pattern = None
        elif key in self._recursive or self.inline_length(body) > (0 if self.fine else _RULE_MIN_CHARS):
            self.rules[name] = body
            result = _call(name)
        else:
            result = body
        self._rule_results[key] = result
        return result

    def choice(self, alternatives: list[Pattern]) -> Pattern:
        """The alternation of a node's flat alternatives. Rule mode splits a wide one (an envelope over hundreds of
        tools) into rules of `_CHOICE_CHUNK` alternatives, sorted so that alternatives sharing a prefix share a
        rule: one rule calling a different rule from each alternative is a DFA with a column per call, and its
        compile time and size grew with calls x states (276 tools: 10.6k states x 298 columns, a tenth of the
        cold compile). After a few bytes one chunk is left, so a mask walks one configuration again."""
        if self.rules is None or len(alternatives) <= _CHOICE_CHUNK:
            return _alt(alternatives)
        distinct = [p for p in dict.fromkeys(alternatives) if p is not None]
        if len(distinct) <= _CHOICE_CHUNK:
            return _alt(distinct)
        ordered = sorted(distinct)
        calls = []
        for start in range(0, len(ordered), _CHOICE_CHUNK):
            name = f"choice{len(self.rules)}"
            self.rules[name] = _alt(ordered[start:start + _CHOICE_CHUNK])
            calls.append(_call(name))
        return _alt(calls)

    def referent(self, node: Any, path: str) -> tuple[Any, str]:
        """The node (and its path) a bare ``$ref`` (beside annotations only) stands for, through chains of them:
        one rule per schema node however many references reach it, so recursion through different references is
        found at once instead of being unrolled (and cut) along the way."""
        seen: set[int] = set()
        while (isinstance(node, dict) and isinstance(node.get("$ref"), str) and id(node) not in seen
               and all(k == "$ref" or _is_annotation(k, v) for k, v in node.items())):  # fmt: skip
            seen.add(id(node))
            target = self.local_ref(node["$ref"], path)
            node, path = self.pointer(target, path), target
        return node, path

    def any_value(self, depth: int, budget: int, path: str) -> str:
        """Any JSON value nesting at most min(budget, max_depth - depth) containers (rule mode: any JSON value at
        all, through a recursive rule)."""
        if self.rules is not None:
            if "any" not in self.rules:
                self.rules["any"] = ""  # reserved while its body is built
                inner = _call("any")
                pair = f"{STRING}{self.colon}{inner}"
                arr = self.container(r"\[", r"\]", f"{inner}(?:{self.sep}{inner})*", True)
                obj = self.container(r"\{", r"\}", f"{pair}(?:{self.sep}{pair})*", True)
                self.rules["any"] = f"(?:{_SCALARS[3:-1]}|{arr}|{obj})"
            return _call("any")
        if self.exact:
            raise PatternApproximates(path, "true", "an open-ended value: one pattern can only bound its depth")
        levels = max(0, min(budget, self.max_depth - depth))
        if levels not in self._any_cache:
            if levels == 0:
                self._any_cache[0] = _SCALARS
            else:
                inner = self.any_value(self.max_depth - levels + 1, levels - 1, path)
                pair = f"{STRING}{self.colon}{inner}"
                arr = rf"\[{self.ws}(?:{inner}(?:{self.sep}{inner})*{self.ws})?\]"
                obj = rf"\{{{self.ws}(?:{pair}(?:{self.sep}{pair})*{self.ws})?\}}"
                self._any_cache[levels] = f"(?:{_SCALARS[3:-1]}|{arr}|{obj})"
        return self._any_cache[levels]

    # -- combinators → disjunction of flat nodes -----------------------------------------------------

    def flatten(self, node: Any, path: str, trail: tuple[str, ...]) -> list[tuple[dict, str, tuple[str, ...]]]:
        """Eliminate $ref/allOf/anyOf/oneOf/nullable at this level: a list of merged flat nodes. One level deeper
        (`level`): every subschema the walk enters comes through here."""
        self.enter(path, trail)
        try:
            return self.flatten_level(node, path, trail)
        finally:
            self.level -= 1

    def flatten_level(self, node: Any, path: str, trail: tuple[str, ...]) -> list[tuple[dict, str, tuple[str, ...]]]:
        """`flatten` of one node, its level counted."""
        if node is True:
            return [({}, path, trail)]
        if node is False:
            return []
        if not isinstance(node, dict):
            raise InvalidSchemaError(path, f"a schema must be an object or a boolean, not {type(node).__name__}")
        has_enum = "enum" in node or "const" in node
        base: dict = {}
        for key, value in node.items():
            if _is_annotation(key, value):
                continue
            if key in ("$ref", "allOf", "anyOf", "oneOf", "nullable"):
                continue
            if key in _kw.REWRITTEN_KEYWORDS and not has_enum:
                continue  # becomes allOf members below (schema_keywords.conjuncts)
            if key in SUPPORTED_KEYWORDS or key in _kw.INTERNAL_KEYWORDS or (has_enum and key in UNSUPPORTED_KEYWORDS):
                base[key] = value
            elif key in UNSUPPORTED_KEYWORDS:
                raise UnsupportedSchemaError(path, key, "a regular pattern cannot enforce it")
            elif self.unknown_keywords == "error":
                raise UnsupportedSchemaError(path, key, "unknown keyword (refused: unknown_keywords='error')")
            else:
                warnings.warn(f"ignoring {key!r} at {path}: not a JSON Schema keyword, so an annotation that "
                              f"constrains nothing (pass unknown_keywords='error' to refuse it)",
                              UnknownKeywordWarning, stacklevel=2)
        conjuncts: list[list[tuple[dict, str, tuple[str, ...]]]] = [[(self.normalize(base, path), path, trail)]]
        if "$ref" in node:
            conjuncts.append(self.follow(node["$ref"], path, trail))
        if "allOf" in node:
            for i, member in enumerate(self.schema_list(node, "allOf", path)):
                conjuncts.append(self.flatten(member, f"{path}/allOf/{i}", trail))
        for key in ("anyOf", "oneOf"):
            if key in node:
                branches = [self.flatten(m, f"{path}/{key}/{i}", trail) for i, m in enumerate(self.schema_list(node, key, path))]
                if key == "oneOf":
                    overlapping = self.overlapping(branches)
                    if any(overlapping):  # exactly one: each branch minus the branches it may overlap
                        members = self.schema_list(node, key, path)
                        resolve = functools.partial(self.resolve_for_negation, path=path)
                        exclusive = _kw.exclusive_branches(members, overlapping, path, resolve)
                        branches = [self.flatten(m, f"{path}/{key}/{i}", trail) for i, m in enumerate(exclusive)]
                conjuncts.append([flat for branch in branches for flat in branch])
        if not has_enum:
            resolve = functools.partial(self.resolve_for_negation, path=path)
            for sub, sub_path in _kw.conjuncts(node, path, resolve):
                conjuncts.append(self.flatten(sub, sub_path, trail))
        if self.rules is not None:
            conjuncts = self.inline_calls(conjuncts)
        out: list[tuple[dict, str, tuple[str, ...]]] = []
        for combo in itertools.product(*conjuncts):
            merged: dict | None = {}
            for flat, _, _ in combo:
                merged = _merge(merged, flat, path) if merged is not None else None
            if merged is not None:
                real = [c for c in combo if c[0]]
                where = real[0][1] if len(real) == 1 else path
                out.append((merged, where, max((c[2] for c in combo), key=len)))
            if len(out) > (_MAX_ALTERNATIVES if self.rules is None else _MAX_RULE_ALTERNATIVES):
                if self.rules is None:  # one pattern's wall: rule mode compiles each alternative on its own
                    raise GrammarTooLargeError("alternatives", _MAX_ALTERNATIVES, f"anyOf at {path}")
                raise UnsupportedSchemaError(path, "anyOf", f"expands into more than {_MAX_RULE_ALTERNATIVES} "
                                             f"alternatives")  # fmt: skip
        if node.get("nullable") is True:
            out.append(({"type": ["null"]}, path, trail))
        return out

    def inline_calls(self, conjuncts: list[list[tuple[dict, str, tuple[str, ...]]]]
                     ) -> list[list[tuple[dict, str, tuple[str, ...]]]]:
        """A recursive reference that meets sibling keywords cannot stay a rule call (a call is not intersected):
        it is expanded here, one more level each time round, and refused where recursion would go on."""
        if sum(any(flat for flat, _, _ in conjunct) for conjunct in conjuncts) < 2:
            return conjuncts
        out = []
        for conjunct in conjuncts:
            while any(_RULE_REF in flat for flat, _, _ in conjunct):
                expanded = []
                for flat, fpath, ftrail in conjunct:
                    target = flat.get(_RULE_REF)
                    if target is None:
                        expanded.append((flat, fpath, ftrail))
                    elif ftrail.count(target) >= _MAX_REF_UNROLL:
                        raise UnsupportedSchemaError(fpath, "$ref", f"{target} recurses under sibling keywords")
                    else:
                        expanded.extend(self.flatten(self.pointer(target, fpath), target, ftrail + (target,)))
                conjunct = expanded
            out.append(conjunct)
        return out

    def schema_list(self, node: dict, key: str, path: str) -> list:
        value = node[key]
        if not isinstance(value, list) or not value:
            raise InvalidSchemaError(f"{path}/{key}", f"{key} must be a non-empty array of schemas")
        return value

    def follow(self, ref: Any, path: str, trail: tuple[str, ...]) -> list[tuple[dict, str, tuple[str, ...]]]:
        """Resolve a local $ref and flatten its target. Recursion: in rule mode a call of the target's rule (a
        `_RULE_REF` flat); one pattern unrolls it a bounded number of times."""
        if not isinstance(ref, str):
            raise InvalidSchemaError(path, "$ref must be a string")
        target_path = self.local_ref(ref, path)
        since_container = trail[len(trail) - list(reversed(trail)).index("|"):] if "|" in trail else trail
        if target_path in since_container:
            raise UnsupportedSchemaError(path, "$ref", f"{ref} refers to itself without nesting a container")
        if self.rules is not None and target_path in trail:  # recursion: a call of the target's rule
            return [({_RULE_REF: target_path}, path, trail)]
        if trail.count(target_path) >= _MAX_REF_UNROLL:
            if self.exact:
                raise PatternApproximates(path, "$ref", f"{ref} is recursive: one pattern can only unroll it")
            return []  # recursion unrolled far enough: this branch is cut
        return self.flatten(self.pointer(target_path, path), target_path, trail + (target_path,))

    def local_ref(self, ref: str, path: str) -> str:
        base = self.root.get("$id") or self.root.get("id") if isinstance(self.root, dict) else None
        if isinstance(base, str) and base and ref.startswith(base.split("#")[0]) and "#" in ref:
            ref = ref[ref.index("#"):]
        if ref == "#" or ref.startswith("#/"):
            return urllib.parse.unquote(ref)
        raise UnsupportedSchemaError(path, "$ref", f"only local JSON-pointer references are supported, not {ref!r}")

    def pointer(self, target: str, path: str) -> Any:
        node = self.root
        for token in target[2:].split("/") if target != "#" else []:
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                raise InvalidSchemaError(path, f"$ref {target} does not resolve")
        return node

    def overlapping(self, branches: list[list[tuple[dict, str, tuple[str, ...]]]]) -> list[set[int]]:
        """For each oneOf branch, the other branches it is not provably disjoint from (exclusivity must be
        enforced against them: `schema_keywords.exclusive_branches`)."""
        out: list[set[int]] = [set() for _ in branches]
        for (i, bi), (j, bj) in itertools.combinations(enumerate(branches), 2):
            if not all(_provably_disjoint(f, g) for f, _, _ in bi for g, _, _ in bj):
                out[i].add(j)
                out[j].add(i)
        return out

    def resolve_for_negation(self, ref: Any, path: str) -> Any:
        """The target of a local $ref met under ``not`` (or a negated oneOf branch)."""
        if not isinstance(ref, str):
            raise InvalidSchemaError(path, "$ref must be a string")
        return self.pointer(self.local_ref(ref, path), path)

    def normalize(self, flat: dict, path: str) -> dict:
        """Rewrite one node's own keywords to the canonical flat form used by _merge."""
        out = dict(flat)
        if "type" in out:
            types = out["type"] if isinstance(out["type"], list) else [out["type"]]
            if not types or any(t not in _ALL_TYPE_NAMES for t in types):
                raise InvalidSchemaError(path, f"bad type {out['type']!r}")
            out["type"] = _canonical_types(set(types))
        if "const" in out:
            const = out.pop("const")
            if "enum" in out:
                out["enum"] = [v for v in out["enum"] if _value_key(v) == _value_key(const)]
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
        if fmt is not None and not isinstance(fmt, str):
            raise InvalidSchemaError(path, "format must be a string")
        if fmt in _INTEGER_FORMATS:
            lo, hi = _INTEGER_FORMATS[out.pop("format")]
            out["minimum"] = lo if "minimum" not in out else max(out["minimum"], lo)
            out["maximum"] = hi if "maximum" not in out else min(out["maximum"], hi)
        elif fmt in _NOOP_FORMATS or fmt in _kw.ANNOTATION_FORMATS:
            out.pop("format")
        elif fmt in _kw.FORMAT_ALIASES:
            out["format"] = _kw.FORMAT_ALIASES[fmt]
        elif fmt is not None and fmt not in STRING_FORMATS:
            if fmt in _kw.KNOWN_UNENFORCED_FORMATS or self.unknown_keywords != "annotation":
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

    # -- one flat node -------------------------------------------------------------------------------

    def compile_flat(self, flat: dict, path: str, depth: int, trail: tuple[str, ...], original: Any) -> Pattern:
        if _RULE_REF in flat:
            return self.compile_rule(self.pointer(flat[_RULE_REF], path), flat[_RULE_REF], trail)
        if "enum" in flat:
            return self.compile_enum(flat, path, depth, original)
        types = flat.get("type", list(_TYPES))
        parts = []
        for t in types:
            if t == "null":
                parts.append("null")
            elif t == "boolean":
                parts.append("(?:true|false)")
            elif t == "string":
                parts.append(self.string_value(flat, path, depth))
            elif t == "integer":
                parts.append(self.compile_integer(flat, path))
            elif t == "number":
                parts.append(self.compile_number(flat, path))
            elif t == "object":
                parts.append(self.compile_object(flat, path, depth + 1, trail + ("|",)))
            elif t == "array":
                parts.append(self.compile_array(flat, path, depth + 1, trail + ("|",)))
        return _alt(parts)

    def compile_enum(self, flat: dict, path: str, depth: int, original: Any) -> Pattern:
        """A finite set: keep the candidates the whole node accepts, then spell each one."""
        fmt = flat.get("format")
        simple = set(flat) <= {"enum", "type", "format"}
        validator = None
        choices: dict[str, str] = {}
        for value in flat["enum"]:
            if simple:
                if "type" in flat and _json_type(value) not in _type_set(flat):
                    continue
            else:
                verdict_key = (id(original), _value_key(value))
                if verdict_key not in self._verdicts:
                    validator = validator or self.validator().evolve(schema=original)
                    try:
                        self._verdicts[verdict_key] = validator.is_valid(value)
                    except Exception as exc:  # a malformed sibling keyword (e.g. "not": null) breaks jsonschema
                        raise InvalidSchemaError(path, f"cannot evaluate the enum/const candidates against this "
                                                       f"schema: {type(exc).__name__}: {exc}") from None
                if not self._verdicts[verdict_key]:
                    continue
            if "format" in flat and isinstance(value, str) and not re.fullmatch(_format_body(fmt), value):
                continue
            choices.setdefault(_value_key(value), self.literal(value, path))
        return _alt(list(choices.values()))

    def validator(self) -> Any:
        if self._validator is None:
            import jsonschema

            cls = jsonschema.validators.validator_for(self.root, default=jsonschema.Draft202012Validator)
            cls = jsonschema.validators.extend(cls, _kw.internal_validators())  # enum candidates meet them too
            self._validator = cls(self.root, format_checker=cls.FORMAT_CHECKER)
        return self._validator

    def literal(self, value: Any, path: str) -> str:
        """One JSON value spelled in the whitespace policy (keys in the value's own order)."""
        if isinstance(value, dict):
            if not value:
                return rf"\{{{self.ws}\}}"
            pairs = [f"{_lit(_json_text(k))}{self.colon}{self.literal(v, path)}" for k, v in value.items()]
            return rf"\{{{self.ws}" + self.sep.join(pairs) + rf"{self.ws}\}}"
        if isinstance(value, list):
            if not value:
                return rf"\[{self.ws}\]"
            return rf"\[{self.ws}" + self.sep.join(self.literal(v, path) for v in value) + rf"{self.ws}\]"
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidSchemaError(path, "enum/const value is not finite JSON")
        try:
            return _lit(_json_text(value))
        except UnsupportedSchemaError as err:
            raise UnsupportedSchemaError(path, "enum", err.detail) from None

    def string_value(self, flat: dict, path: str, depth: int) -> Pattern:
        """A string value. In rule mode, a constrained one inside a container stands as a call of its lexeme, until
        `share_lexemes` decides whether it stays one."""
        lexeme = self.compile_string(flat, path)
        if self.rules is None or depth == 0 or lexeme is None or not _SHAPED.intersection(flat):
            return lexeme  # a string with lengths at most: the string-body shortcut serves it wherever it is
        name = self._lexemes.get(lexeme)
        if name is None:
            name = self._lexemes[lexeme] = f"s{len(self._lexemes)}"
            self._lexeme_extra[name] = len(lexeme) - len(_call(name))
        return _call(name)

    def inline_length(self, body: str) -> int:
        """The length ``body`` has with its lexeme calls inline, as if they had never been calls (what decides
        whether a value is big)."""
        extra = self._lexeme_extra
        return len(body) + sum(extra[name] for name in _LEXEME_CALL.findall(body)) if extra else len(body)

    def share_lexemes(self, rules: dict[str, str]) -> dict[str, str]:
        """Rule mode's last step: a wide string lexeme that occurs more than once in the rules becomes one rule they
        all call, so its states (and their masks, a full trie walk each for a URL's) exist once instead of once per
        occurrence; every other goes back inline, where no call costs anything."""
        for lexeme, name in self._lexemes.items():
            call = _call(name)
            if sum(body.count(call) for body in rules.values()) > 1 and _wide(lexeme):
                rules[name] = lexeme
            else:
                rules = {rule: body.replace(call, f"(?:{lexeme})") for rule, body in rules.items()}
        return rules

    def compile_string(self, flat: dict, path: str) -> Pattern:
        lo, hi = flat.get("minLength", 0), flat.get("maxLength")
        if hi is not None and lo > hi:
            return None
        bodies: list[tuple[str, str]] = []
        if "pattern" in flat:
            if not isinstance(flat["pattern"], str):
                raise InvalidSchemaError(path, "pattern must be a string")
            try:
                from . import regex as _regex

                bodies.append(("pattern", _regex.json_string_body_pattern(flat["pattern"])))
            except ImportError:
                raise UnsupportedSchemaError(path, "pattern", "ECMA pattern translation is unavailable") from None
            except UnsupportedSchemaError as err:
                raise UnsupportedSchemaError(path, "pattern", err.detail) from None
        for more in flat.get(_kw.ALL_PATTERNS) or ():
            if not isinstance(more, str):
                raise InvalidSchemaError(path, "pattern must be a string")
            try:
                from . import regex as _regex

                bodies.append(("pattern", _regex.json_string_body_pattern(more)))
            except UnsupportedSchemaError as err:
                raise UnsupportedSchemaError(path, "pattern", err.detail) from None
        if "format" in flat:
            bodies.append(("format", _format_body(flat["format"])))
        if flat.get(_kw.NOT_PATTERN):
            body = _kw.not_pattern_body(flat[_kw.NOT_PATTERN], path)
            if body is None:
                return None
            bodies.append(("not", body))
        if flat.get(_kw.NOT_STRINGS):
            bodies.append(("not", _string_body_excluding(tuple(dict.fromkeys(flat[_kw.NOT_STRINGS])))))
        if len(bodies) == 1 and lo == 0 and hi is None:
            return f'"{bodies[0][1]}"'
        if bodies:
            try:
                body = _string_language(tuple(b for _, b in bodies), lo, hi)
            except GrammarTooLargeError as err:
                keys = " and ".join(k for k, _ in bodies)
                lengths = lo or hi is not None
                keys += " with minLength/maxLength" if lengths else ""
                detail = f"{path}: {keys}" + (f": {err.detail}" if err.detail else "")
                if lengths:
                    detail += " (the automaton that checks it also counts the characters: smaller bounds fit)"
                raise GrammarTooLargeError(err.what, err.limit, detail) from None
            return None if body is None else f'"{body}"'
        if self.rules is not None and hi is not None and hi - lo > (_CHUNK_CHARS if self.fine else _COUNTED_CHARS):
            return '"' + _rep(UNIT, lo, lo) + self.counted_end(hi - lo)
        return '"' + _rep(UNIT, lo, hi) + '"'

    def counted_end(self, most: int) -> str:
        """Rule mode: a call of rules taking 0 to ``most`` characters and the closing quote, for counts one
        automaton cannot hold (a DFA counts with states per character: maxLength 32767 is ~2.2M NFA states). A chunk
        of `_CHUNK_CHARS` characters is one rule; ``string.end<N>`` is fewer characters than a chunk and the quote,
        or a chunk then ``string.end<N - chunk>``: one parse per length, and the stack stays flat (the rest is a
        tail call, `pushdown.PushdownGrammar._pushes`). The quote is inside the rules, so a rule ends only at a
        chunk's end or after the quote (a rule that could end after any character would make every token an exit of
        the mask walk)."""
        assert self.rules is not None
        chunks, rest = divmod(most, _CHUNK_CHARS)
        chunk, tail, name = f"string.chunk{_CHUNK_CHARS}", f"string.end{_CHUNK_CHARS - 1}", f"string.end{rest}"
        self.rules.setdefault(chunk, _rep(UNIT, _CHUNK_CHARS, _CHUNK_CHARS))
        self.rules.setdefault(tail, _rep(UNIT, 0, _CHUNK_CHARS - 1) + '"')
        self.rules.setdefault(name, _rep(UNIT, 0, rest) + '"')
        for i in range(1, chunks + 1):
            shorter, name = name, f"string.end{i * _CHUNK_CHARS + rest}"
            self.rules.setdefault(name, f"{_call(tail)}|{_call(chunk)}{_call(shorter)}")
        return _call(name)

    def integer_bounds(self, flat: dict, path: str) -> tuple[int | None, int | None]:
        lo = hi = None
        if "minimum" in flat:
            lo = math.ceil(Fraction(flat["minimum"]))
        if "exclusiveMinimum" in flat:
            v = math.floor(Fraction(flat["exclusiveMinimum"])) + 1
            lo = v if lo is None else max(lo, v)
        if "maximum" in flat:
            hi = math.floor(Fraction(flat["maximum"]))
        if "exclusiveMaximum" in flat:
            v = math.ceil(Fraction(flat["exclusiveMaximum"])) - 1
            hi = v if hi is None else min(hi, v)
        return lo, hi

    def compile_integer(self, flat: dict, path: str) -> Pattern:
        if flat.get(_kw.NOT_INTEGER):
            return None
        if "multipleOf" in flat and Fraction(flat["multipleOf"]).denominator == 1 or (
                "multipleOf" in flat and _kw._step_fractions(Fraction(flat["multipleOf"]), flat["multipleOf"])):
            return _kw.number_pattern(flat, path, True, INTEGER_DIGITS, FRACTION_DIGITS, _integer_range)
        if "multipleOf" in flat:
            step = Fraction(flat["multipleOf"])
            if step <= 0:
                raise InvalidSchemaError(path, "multipleOf must be positive")
            trivial = step == 1 or (isinstance(flat["multipleOf"], float) and step.numerator == 1
                                    and step.denominator & (step.denominator - 1) == 0)
            if not trivial:
                raise UnsupportedSchemaError(path, "multipleOf", "only divisors of 1 (trivially satisfied) are enforced")
        lo, hi = self.integer_bounds(flat, path)
        if lo is not None and hi is not None and lo > hi:
            return None
        return _integer_range(lo, hi)

    def compile_number(self, flat: dict, path: str) -> Pattern:
        bound_keys = [k for k in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum") if k in flat]
        if ("multipleOf" in flat or flat.get(_kw.NOT_INTEGER)
                or any(Fraction(flat[k]).denominator != 1 for k in bound_keys)):
            return _kw.number_pattern(flat, path, False, INTEGER_DIGITS, FRACTION_DIGITS, _integer_range)
        if not bound_keys:
            return _NUMBER_ANY
        for key in bound_keys:
            value = Fraction(flat[key])
            if value.denominator != 1:
                raise UnsupportedSchemaError(path, key, "only integer-valued bounds are enforced on numbers")
            if abs(value) >= 10**INTEGER_DIGITS:
                raise UnsupportedSchemaError(path, key, f"number bounds must have at most {INTEGER_DIGITS} digits")
        lo = _tighter([(int(flat[k]), k == "minimum") for k in ("minimum", "exclusiveMinimum") if k in flat], lower=True)
        hi = _tighter([(int(flat[k]), k == "maximum") for k in ("maximum", "exclusiveMaximum") if k in flat], lower=False)
        return _decimal_range(lo, hi)

    def too_deep(self, depth: int, path: str) -> bool:
        """Whether a container at ``depth`` is past ``max_depth`` (its branch is cut; exact mode raises)."""
        if depth > self.max_depth and self.exact:
            raise PatternApproximates(path, "type", f"containers nest deeper than max_depth={self.max_depth}")
        return depth > self.max_depth

    def compile_object(self, flat: dict, path: str, depth: int, trail: tuple[str, ...]) -> Pattern:
        if self.too_deep(depth, path):
            return None
        props = flat.get("properties", {})
        required = flat.get("required", [])
        if not isinstance(props, dict):
            raise InvalidSchemaError(f"{path}/properties", "properties must be an object")
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise InvalidSchemaError(f"{path}/required", "required must be an array of strings")
        required = list(dict.fromkeys(required))
        extra = flat.get("additionalProperties", True)
        members: list[tuple[str, str, bool]] = []
        names = list(props) + [r for r in required if r not in props]
        key_patterns = _KeyPatterns(flat.get("patternProperties", {}), path) if "patternProperties" in flat else None
        key_filter = self.key_filter(flat, path, trail) if "propertyNames" in flat else None
        for name in names:
            sub_path = f"{path}/properties/{_pointer_token(name)}" if name in props else f"{path}/additionalProperties"
            sub = props[name] if name in props else extra
            if key_patterns is not None:
                matched = key_patterns.matching(name)
                if matched:
                    sub = props[name] if name in props else True
                    for pattern in matched:
                        sub = _conj(sub, key_patterns.schemas[pattern])
                    if name not in props:
                        sub_path = f"{path}/patternProperties/{_pointer_token(matched[0])}"
            value = self.compile(sub, sub_path, depth, trail)
            if key_filter is not None and not key_filter.allows(name):
                value = None  # propertyNames rejects this name
            if value is None:
                if name in required:
                    return None
                continue
            try:
                key = _lit(_json_text(name))
            except UnsupportedSchemaError as err:
                raise UnsupportedSchemaError(sub_path, "properties", err.detail) from None
            members.append((f"{key}{self.colon}{value}", name, name in required))
        extra_pattern = None
        extras: list[Pattern] = []
        if key_patterns is not None:
            for keys, schemas in key_patterns.regions(names):
                sub: Any = True
                for pattern in schemas:
                    sub = _conj(sub, key_patterns.schemas[pattern])
                value = self.compile(sub, f"{path}/patternProperties/{_pointer_token(schemas[0])}", depth, trail)
                quoted: Pattern = f'"{keys}"' if key_filter is None else key_filter.keys(f'"{keys}"')
                if value is not None and quoted is not None:
                    extras.append(f'{quoted}{self.colon}{value}')
        if extra is not False:
            if "additionalProperties" in flat:
                value = self.compile(extra, f"{path}/additionalProperties", depth, trail)
            else:  # implicit extras are frequent and rarely wanted: shallower open-ended values
                budget = min(IMPLICIT_EXTRA_DEPTH, self.any_value_depth)
                value = self.any_value(depth, budget, f"{path}/additionalProperties")
            if value is not None:
                keys = (key_patterns.others(names) if key_patterns is not None else
                        _excluded_keys_automaton(tuple(names)) if self.fine else _string_body_excluding(tuple(names)))
                quoted = None if keys is None else f'"{keys}"' if key_filter is None else key_filter.keys(f'"{keys}"')
                if quoted is not None:
                    extras.append(f'{quoted}{self.colon}{value}')
        extra_pattern = _alt(extras)
        min_p, max_p = flat.get("minProperties", 0), flat.get("maxProperties")
        n_required = sum(1 for m in members if m[2])
        if max_p is not None and n_required > max_p:
            return None
        if min_p > n_required or (max_p is not None and (extra_pattern is not None or len(members) > max_p)):
            body, can_be_empty = _kw.counted_members(members, extra_pattern, self.sep, min_p, max_p,
                                                     self.members_body, path)
            return self.container(r"\{", r"\}", body, can_be_empty)
        if self.any_order and members and len(members) + (extra_pattern is not None) > 1:
            return self.any_order_object(members, extra_pattern)
        body, can_be_empty = self.members_body(members, extra_pattern)
        return self.container(r"\{", r"\}", body, can_be_empty)

    def any_order_object(self, members: list[tuple[str, str, bool]], extra: str | None) -> str:
        """An object whose members come in any order, each listed one at most once, the required ones all in, as a
        call of its own rule (its markers must be its own: `constrained.pushdown`'s guarded calls)::

            { ( C | M ( S M )* C )     M = ws "key" ws : ws value      S = ws ,      C = ws }

        The whitespace before a key leads its member's rule, not the separator's: a separator then ends at its
        comma, and a mask walks every member below that one exit in one pass (a separator of its own whitespace
        would end in as many states as the whitespace has, each walked on its own). A listed member ``k`` is
        called ``once=k``; C needs the required members; S has room while a listed member is out (always, with
        extra keys). With required members, ``bound`` chains give the budget its completion: the required members
        in schema order, then the brace, each piece under its member's marker."""
        assert self.rules is not None
        name = f"object{len(self.rules)}"
        n = len(members)
        listed = ",".join(map(str, range(n)))
        lead, separator_body = (self.ws, f"{self.ws},") if self.sep == f"{self.ws},{self.ws}" else ("", self.sep)
        for shared, body in (("obj.s", separator_body), ("obj.c", rf"{self.ws}\}}")):
            self.rules.setdefault(shared, body)
        alternatives = []
        for k, (pattern, _, _) in enumerate(members):
            self.rules[f"{name}.m{k}"] = lead + pattern
            alternatives.append(_call(f"{name}.m{k}", f"once={k}"))
        if extra is not None:
            self.rules[f"{name}.x"] = lead + extra
            alternatives.append(_call(f"{name}.x"))
        required = [k for k, (_, _, is_required) in enumerate(members) if is_required]
        close = _call("obj.c", f"needs={','.join(map(str, required))}" if required else "")
        if required:
            first, *rest = required
            owed = "".join(_call("obj.s", f"once={k}") + _call(f"{name}.m{k}", f"once={k}") for k in rest)
            self.rules[f"{name}.b0"] = _call(f"{name}.m{first}", f"once={first}") + owed + _call("obj.c")
            self.rules[f"{name}.b"] = _call("obj.s", f"once={first}") + self.rules[f"{name}.b0"]
        close_empty = close + ("|" + _call(f"{name}.b0", "bound") if required else "")
        close_after = close + ("|" + _call(f"{name}.b", "bound") if required else "")
        separator = _call("obj.s", "" if extra is not None else f"room={listed}")
        member = f"(?:{'|'.join(alternatives)})"
        self.rules[name] = rf"\{{(?:{close_empty}|{member}(?:{separator}{member})*(?:{close_after}))"
        return _call(name)

    def key_filter(self, flat: dict, path: str, trail: tuple[str, ...]) -> _kw.KeyFilter:
        """``propertyNames``: the string language its schema allows (quoted), to filter keys with."""
        where = f"{path}/propertyNames"
        flats = self.flatten({"allOf": [flat["propertyNames"], {"type": "string"}]}, where, trail)
        return _kw.KeyFilter(_alt([self.compile_flat(f, fpath, 0, ftrail, flat["propertyNames"])
                                   for f, fpath, ftrail in flats]))

    def container(self, open_: str, close: str, body: Pattern, can_be_empty: bool) -> Pattern:
        if body is None:
            return f"{open_}{self.ws}{close}" if can_be_empty else None
        if can_be_empty:  # the whitespace right before the body, where `_hoist_whitespace` looks for it
            return f"{open_}(?:{self.ws}{close}|{self.ws}{body}{self.ws}{close})"
        return f"{open_}{self.ws}{body}{self.ws}{close}"

    def members_body(self, members: list[tuple[str, str, bool]], extra: str | None) -> tuple[Pattern, bool]:
        """Comma-joined members in schema order: required always, optional ones optional, extras last."""
        sep = self.sep
        extras_tail = f"(?:{sep}{extra})*" if extra else ""
        first_required = next((i for i, m in enumerate(members) if m[2]), None)
        if first_required is not None:
            head = "".join(f"(?:{p}{sep})?" for p, _, _ in members[:first_required]) + members[first_required][0]
            tail = "".join(f"{sep}{p}" if req else f"(?:{sep}{p})?" for p, _, req in members[first_required + 1:])
            return head + tail + extras_tail, False
        parts = [p for p, _, _ in members]
        listed = (self.subsequence_rules(parts) if self.fine else _subsequences(parts, sep)) if members else None
        first = _alt([listed, extra])
        return (None if first is None else first + extras_tail), True

    def subsequence_rules(self, parts: list[str]) -> str:
        """`_subsequences` as rules over blocks of `_MEMBER_BLOCK` members, linear in size (``fine`` rule mode: one
        pattern copies each member O(log n) times, too many NFA states for an object of a hundred optional
        members): ``N_k`` is a subsequence starting in block k then ``T_{k+1}``, or ``N_{k+1}``; ``T_k`` is one of
        block k behind a separator, optionally, then ``T_{k+1}``. Within a block one automaton holds the choice of
        the next member, so a mask between members has one configuration per block left, not one per member."""
        assert self.rules is not None
        prefix = f"members{len(self.rules)}"
        blocks = [_subsequences(parts[i:i + _MEMBER_BLOCK], self.sep) for i in range(0, len(parts), _MEMBER_BLOCK)]
        rest = ""  # T_{k+1}: nothing after the last block
        for k in range(len(blocks) - 1, -1, -1):
            skip = f"|{_call(f'{prefix}.n{k + 1}')}" if k < len(blocks) - 1 else ""
            self.rules[f"{prefix}.n{k}"] = f"(?:{blocks[k]}){rest}{skip}"
            self.rules[f"{prefix}.t{k}"] = f"(?:{self.sep}(?:{blocks[k]}))?{rest}"
            rest = _call(f"{prefix}.t{k}")
        return _call(f"{prefix}.n0")

    def compile_array(self, flat: dict, path: str, depth: int, trail: tuple[str, ...]) -> Pattern:
        if self.too_deep(depth, path):
            return None
        prefix = flat.get("prefixItems", [])
        if not isinstance(prefix, list):
            raise InvalidSchemaError(f"{path}/prefixItems", "prefixItems must be an array")
        lo, hi = flat.get("minItems", 0), flat.get("maxItems")
        if flat.get("uniqueItems") is True and (hi is None or hi > 1):
            raise UnsupportedSchemaError(path, "uniqueItems", "uniqueness of items cannot be enforced")
        slots: list[str] = []
        for i, sub in enumerate(prefix):
            p = self.compile(sub, f"{path}/prefixItems/{i}", depth, trail)
            if p is None:
                hi = i if hi is None else min(hi, i)
                break
            slots.append(p)
        rest = self.compile(flat.get("items", True), f"{path}/items", depth, trail)
        if rest is None:
            hi = len(slots) if hi is None else min(hi, len(slots))
        if hi is not None and lo > hi:
            return None
        if hi == 0:
            return self.container(r"\[", r"\]", None, True)
        sep = self.sep

        def seq(i: int) -> Pattern:
            """Elements i.. (each but the first behind a separator), i elements already placed."""
            lead = sep if i else ""
            if i >= len(slots):
                need, room = max(0, max(lo, 1) - i), None if hi is None else hi - i
                if rest is None or room == 0:
                    return "" if need == 0 else None
                if i == 0:
                    return rest + _rep(sep + rest, max(0, need - 1), None if room is None else room - 1)
                return _rep(sep + rest, need, room)
            if hi is not None and i >= hi:
                return ""
            element = _cat(lead + slots[i], seq(i + 1))
            return element if i < max(lo, 1) else (None if element is None else f"(?:{element})?")
        return self.container(r"\[", r"\]", seq(0), lo == 0)


def _subsequences(parts: list[str], sep: str) -> str:
    """Non-empty, order-preserving subsequences of `parts` joined by `sep`.

    Splitting parts = L + R: N(L ∪ R) = N(L) T(R) | N(R), where T(R) = each of R optional behind a
    separator (linear). The split points are chosen by dynamic programming on pattern length, so a
    member is copied O(log n) times rather than O(n) (the naive "first present member" form).
    """
    n = len(parts)
    opt = [f"(?:{sep}{p})?" for p in parts]
    if n > 64:  # DP is cubic; balanced halves are within a small factor
        def build_halves(i: int, j: int) -> str:
            if j - i == 1:
                return parts[i]
            k = (i + j) // 2
            return f"(?:{build_halves(i, k)}{''.join(opt[k:j])}|{build_halves(k, j)})"
        return build_halves(0, n)
    weight = [0] * (n + 1)
    for i, p in enumerate(opt):
        weight[i + 1] = weight[i] + len(p)
    cost: dict[tuple[int, int], tuple[int, int]] = {}
    for span in range(1, n + 1):
        for i in range(0, n - span + 1):
            j = i + span
            if span == 1:
                cost[i, j] = (len(parts[i]), -1)
                continue
            cost[i, j] = min(
                (cost[i, k][0] + (weight[j] - weight[k]) + cost[k, j][0] + 6, k) for k in range(i + 1, j)
            )

    def build(i: int, j: int) -> str:
        k = cost[i, j][1]
        if k < 0:
            return parts[i]
        return f"(?:{build(i, k)}{''.join(opt[k:j])}|{build(k, j)})"
    return build(0, n)


def _tighter(bounds: list[tuple[int, bool]], *, lower: bool) -> tuple[int, bool] | None:
    if not bounds:
        return None
    # lower bound: larger value wins; on a tie the exclusive one (inclusive=False) wins
    return max(bounds, key=lambda b: (b[0], not b[1])) if lower else min(bounds, key=lambda b: (b[0], b[1]))


def _canonical_types(types: set[str]) -> list[str]:
    if "number" in types:
        types = types - {"integer"}
    return [t for t in ("null", "boolean", "object", "array", "integer", "number", "string") if t in types]


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), "unknown")


def _type_set(flat: dict) -> set[str]:
    types = set(flat.get("type", _TYPES))
    return types | {"integer"} if "number" in types else types


def _provably_disjoint(f: dict, g: dict) -> bool:
    """True when no JSON value can satisfy both flat nodes (type sets, enums, or a const discriminator)."""
    if "enum" in f and "enum" in g:
        if not {_value_key(v) for v in f["enum"]} & {_value_key(v) for v in g["enum"]}:
            return True
    common = _type_set(f) & _type_set(g)
    if not common:
        return True
    if common == {"object"}:
        for name in set(f.get("required", [])) & set(g.get("required", [])):
            vf, vg = _choices(f.get("properties", {}).get(name)), _choices(g.get("properties", {}).get(name))
            if vf is not None and vg is not None and not vf & vg:
                return True
    return False


def _choices(sub: Any) -> set[str] | None:
    if not isinstance(sub, dict):
        return None
    if "const" in sub:
        return {_value_key(sub["const"])}
    if isinstance(sub.get("enum"), list):
        return {_value_key(v) for v in sub["enum"]}
    return None


def _conj(a: Any, b: Any) -> Any:
    if a is True or a == {}:
        return b
    if b is True or b == {}:
        return a
    if a is False or b is False:
        return False
    return a if a == b else {"allOf": [a, b]}


def _merge(a: dict, b: dict, path: str) -> dict | None:
    """Structural intersection of two flat nodes (allOf); None when provably unsatisfiable."""
    assert not ((_RULE_REF in a and b) or (_RULE_REF in b and a)), "inline_calls expands a call that meets siblings"
    keywords = ("properties", "additionalProperties", "patternProperties")
    if (("patternProperties" in a or "patternProperties" in b) and any(k in a for k in keywords)
            and any(k in b for k in keywords) and any(_value_key(a.get(k)) != _value_key(b.get(k)) for k in keywords)):
        raise UnsupportedSchemaError(path, "patternProperties", "allOf members with patternProperties and other "
                                     "property keywords cannot be merged")
    out = dict(a)
    for key, bv in b.items():
        if key not in out:
            out[key] = bv
            continue
        av = out[key]
        if key == "type":
            common = _type_set({"type": av}) & _type_set({"type": bv})
            if not common:
                return None
            out[key] = _canonical_types(common)
        elif key in ("minLength", "minItems", "minProperties", "minimum", "exclusiveMinimum"):
            out[key] = max(av, bv)
        elif key in ("maxLength", "maxItems", "maxProperties", "maximum", "exclusiveMaximum"):
            out[key] = min(av, bv)
        elif key == "required":
            out[key] = list(dict.fromkeys(list(av) + list(bv)))
        elif key == "enum":
            keep = {_value_key(v) for v in bv}
            out[key] = [v for v in av if _value_key(v) in keep]
        elif key == "uniqueItems":
            out[key] = bool(av) or bool(bv)
        elif key in (_kw.NOT_PATTERN, _kw.NOT_STRINGS, _kw.ALL_PATTERNS):
            out[key] = list(av) + [v for v in bv if v not in av]
        elif key == "pattern" and isinstance(av, str) and isinstance(bv, str) and av != bv:
            more = list(out.get(_kw.ALL_PATTERNS, ()))
            out[_kw.ALL_PATTERNS] = more + ([bv] if bv not in more else [])
        elif key == _kw.NOT_INTEGER:
            out[key] = bool(av) or bool(bv)
        elif key == "propertyNames":
            out[key] = _conj(av, bv)
        elif key in ("properties", "additionalProperties", "items", "prefixItems"):
            continue  # merged below, together
        elif _value_key(av) != _value_key(bv):
            raise UnsupportedSchemaError(path, key, "allOf members disagree and cannot be intersected")
    if any(k in a or k in b for k in ("properties", "additionalProperties")):
        pa, pb = a.get("properties", {}), b.get("properties", {})
        xa, xb = a.get("additionalProperties", True), b.get("additionalProperties", True)
        props = {name: _conj(pa.get(name, xa), pb.get(name, xb)) for name in list(pa) + [n for n in pb if n not in pa]}
        if props:
            out["properties"] = props
        if "additionalProperties" in a or "additionalProperties" in b:
            out["additionalProperties"] = _conj(xa, xb)
    if any(k in a or k in b for k in ("items", "prefixItems")):
        qa, qb = a.get("prefixItems", []), b.get("prefixItems", [])
        ia, ib = a.get("items", True), b.get("items", True)
        n = max(len(qa), len(qb))
        prefix = [_conj(qa[i] if i < len(qa) else ia, qb[i] if i < len(qb) else ib) for i in range(n)]
        if prefix:
            out["prefixItems"] = prefix
        out["items"] = _conj(ia, ib)
    return out


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
            ``_MAX_REF_UNROLL`` times, deeper documents cut), an open-ended value (its depth bounded as above),
            containers deeper than ``max_depth`` (cut) — False approximates (every accepted document still validates)
            and True raises `PatternApproximates` (`schema_to_rules` compiles the schema exactly).

    Returns:
        The pattern (constrained.regex dialect; also valid Python ``re`` unless it embeds an automaton ``(?@``).

    Raises:
        UnsupportedSchemaError: a keyword (or keyword value) that cannot be enforced exactly; a schema nested deeper
            than `MAX_SCHEMA_DEPTH` (`constrained.schema_depth`).
        InvalidSchemaError: malformed schema, dangling $ref, or a schema no document satisfies.
        GrammarTooLargeError: the pattern would exceed MAX_PATTERN_CHARS.
    """
    if max_depth < 1:
        raise ValueError("max_depth must be >= 1")
    with recursion_room():  # a schema MAX_SCHEMA_DEPTH deep takes more frames than Python's default limit
        schema = _checked_arguments(schema, whitespace, any_value_depth, unknown_keywords)
        compiler = _Compiler(schema, whitespace, max_depth, any_value_depth, unknown_keywords)
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
    than 2048 characters counts them in rules of 256 (`_Compiler.counted_end`). ``fine``: every nested value is
    a rule, optional members are chained rules and counting starts past 256 characters, for a schema whose default
    rules are too big for one automaton each (masks then cross more rule boundaries). ``property_order="any"``: an
    object's members in any order, each listed one at most once (`_Compiler.any_order_object`), except where
    ``minProperties``/``maxProperties`` count them (schema order there). Returns (rules, start rule name). A schema
    nested deeper than `MAX_SCHEMA_DEPTH` (``$ref`` hops included) is an `UnsupportedSchemaError`.
    """
    if property_order not in ("schema", "any"):
        raise ValueError(f"property_order must be 'schema' or 'any', not {property_order!r}")
    with recursion_room():  # a schema MAX_SCHEMA_DEPTH deep takes more frames than Python's default limit
        schema = _checked_arguments(schema, whitespace, 0, unknown_keywords)
        compiler = _Compiler(schema, whitespace, _UNBOUNDED_DEPTH, 0, unknown_keywords)
        compiler.rules = {}
        compiler.fine = fine
        compiler.any_order = property_order == "any"
        root = compiler.compile(schema, "#", 0, ())
    if root is None:
        raise InvalidSchemaError("#", "no JSON document satisfies this schema within the compiler's limits")
    return _hoist_whitespace(compiler.share_lexemes({"root": root, **compiler.rules}), "root", compiler.ws), "root"


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


class PatternApproximates(UnsupportedSchemaError):
    """One pattern could only approximate the schema (``schema_to_pattern(exact=True)``): a recursive ``$ref``, an
    open-ended value, containers deeper than ``max_depth``."""


_MAX_RULE_ALTERNATIVES = 4_096
"""Rule mode's most flat alternatives per node (each compiles on its own; nested values are rules)."""
_CHOICE_CHUNK = 32
"""Rule mode: alternatives per rule of a wider alternation (`_Compiler.choice`); 16-64 measured alike at 276 tools."""
_RULE_MIN_CHARS = 1_000
"""Rule mode: a nested value whose body is longer than this becomes a rule of its own (shorter ones stay inline)."""
_COUNTED_CHARS = 2_048
"""Rule mode: a string whose length may vary by more than this many characters counts them in rules
(`_Compiler.counted_end`); ``UNIT{0,2048}`` alone is over half the NFA budget."""
_CHUNK_CHARS = 256
"""The characters one counting rule takes at a time (its automaton: ~1,300 states; 256 rules cover 65,536)."""
_MEMBER_BLOCK = 16
"""Finer rule mode: optional members per block of `_Compiler.subsequence_rules`."""
_WIDE_BYTES = 64
"""Rule mode: a string lexeme with a state where this many bytes go on is wide (see `_wide`)."""
_LEXEME_CALL = re.compile(r"\(\?&=(s\d+)\)")
_SHAPED = frozenset({"pattern", "format", _kw.NOT_PATTERN, _kw.NOT_STRINGS, _kw.ALL_PATTERNS})
"""The string keywords that give a lexeme its own automaton (worth sharing when it is wide)."""


def _wide(lexeme: str) -> bool:
    """Whether a string lexeme has a state where many bytes go on (a URL's, ``\\w+``): the states whose masks walk
    most of the token trie, worth sharing; a narrow one (a date) walks little and is cheaper inline."""
    from . import fsm  # noqa: PLC0415 (cycle)

    dfa = fsm.compile_dfa(lexeme)
    return bool(((dfa.transitions[:, :256] >= 0).sum(axis=1) >= _WIDE_BYTES).any())


_UNBOUNDED_DEPTH = 1 << 30
"""Rule mode's container depth limit: none (a document's depth is its token budget's business)."""


_CALLED = re.compile(r"\(\?&=([^)|]+)")
"""The name of the rule each call in a rule body calls (`_call`), guarded or not."""


def _hoist_whitespace(rules: dict[str, str], start: str, ws: str) -> dict[str, str]:
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


def _call(name: str, guard: str = "") -> str:
    """A call of rule ``name``, with a `constrained.pushdown` guard (``once=K``, ``needs=K,...``, ``room=K,...``,
    ``bound``) or none."""
    return f"(?&={name}|{guard})" if guard else f"(?&={name})"


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
