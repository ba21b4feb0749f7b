"""Properties of constrained.schema: JSON Schema → pattern is sound (every match validates), complete on
the corpus's valid instances (modulo documented limits), exact on numeric ranges, and refuses what it
cannot enforce with a typed error naming the path and keyword."""

from __future__ import annotations

import collections
import functools
import itertools
import json
import math
import pathlib
import random
import re
from fractions import Fraction

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from constrained.errors import GrammarTooLargeError, InvalidSchemaError, UnknownKeywordWarning, UnsupportedSchemaError
from constrained import fsm
from constrained.frontends.json_schema import policy, strings
from constrained.fsm import compile_dfa
from constrained.schema import schema_to_pattern

CORPUS = sorted(pathlib.Path("/work/shared/corpus/maskbench-dev").glob("*.json"))
FAST_PATTERN_CHARS = 20_000
RE_PATTERN_CHARS = 150_000
"""The full sweep skips matching against patterns this large: Python `re` needs minutes for them."""
"""Fast tests only use corpus schemas whose pattern is this small (Python `re` compiles large ones slowly)."""


def _has_pattern_support() -> bool:
    try:
        from constrained.regex import json_string_body_pattern  # noqa: F401
    except ImportError:
        return False
    return True


needs_pattern = pytest.mark.skipif(not _has_pattern_support(), reason="constrained.regex.json_string_body_pattern missing")


# -- validation oracle ------------------------------------------------------------------------------


def _nullable_type(validator, types, instance, schema):
    if instance is None and schema.get("nullable") is True:
        return
    yield from jsonschema._keywords.type(validator, types, instance, schema)


def oracle(schema):
    """jsonschema (the schema's own draft, 2020-12 by default) plus OpenAPI `nullable`, formats asserted."""
    base = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls = jsonschema.validators.extend(base, {"type": _nullable_type})
    return cls(schema, format_checker=base.FORMAT_CHECKER)


@functools.cache
def compiled(text: str, whitespace: str = "compact", **kw) -> re.Pattern:
    return re.compile(schema_to_pattern(json.loads(text), whitespace=whitespace, **kw))


def fullmatcher(pattern: str):
    """``fullmatch`` for a schema pattern: Python `re`, or the DFA when the pattern embeds an automaton (``(?@``,
    not `re` syntax)."""
    if "(?@" not in pattern:
        return re.compile(pattern).fullmatch
    dfa = compile_dfa(pattern)
    return lambda text: dfa.accepts(text.encode("utf-8"))


def dfa_sample(dfa, rng: random.Random, soft_limit: int = 2000) -> str:
    """A random accepted string: a random walk that stops at accepting states by chance, and past ``soft_limit``
    bytes follows a shortest path to acceptance."""
    table, out, state = dfa.transitions, bytearray(), 0
    while True:
        live = np.flatnonzero(table[state] >= 0)
        if dfa.accepting[state] and (not live.size or len(out) > soft_limit or rng.random() < 0.25):
            return out.decode("utf-8")
        if len(out) > soft_limit:
            live = [b for b in live if dfa.distance[table[state, b]] == dfa.distance[state] - 1]
        byte = int(rng.choice(list(live)))
        out.append(byte)
        state = int(table[state, byte])


def matcher(schema, whitespace="compact", **kw) -> re.Pattern:
    return compiled(json.dumps(schema), whitespace, **kw)


def compact(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# -- hand-written schemas: soundness ----------------------------------------------------------------

HAND_WRITTEN = {
    "scalars": {"type": ["string", "integer", "boolean", "null"]},
    "string_bounds": {"type": "string", "minLength": 2, "maxLength": 5},
    "int_range": {"type": "integer", "minimum": -37, "maximum": 1205},
    "int_exclusive": {"type": "integer", "exclusiveMinimum": -3, "exclusiveMaximum": 40},
    "int_one_sided": {"type": "integer", "minimum": 17},
    "number_range": {"type": "number", "minimum": -2, "exclusiveMaximum": 3},
    "number_exclusive": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
    "number_free": {"type": "number"},
    "enum_any": {"enum": ["a", 1, 2.5, None, True, [1, {"k": "v"}], {"x": [None]}, "quote\"back\\slash\n"]},
    "const_object": {"const": {"b": 1, "a": [True, "é"]}},
    "object": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}, "maxItems": 3},
            "nick": {"type": ["string", "null"]},
        },
        "required": ["age"],
        "additionalProperties": False,
    },
    "object_all_optional_open": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}, "c": {"type": "null"}},
    },
    "object_extra_schema": {
        "type": "object",
        "properties": {"id": {"type": "integer"}},
        "required": ["id"],
        "additionalProperties": {"type": "string", "maxLength": 2},
    },
    "tuple": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False, "minItems": 1},
    "tuple_draft7": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "array",
        "items": [{"type": "boolean"}],
        "additionalItems": {"type": "null"},
        "maxItems": 3,
    },
    "array_bounds": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 2, "maxItems": 4},
    "anyof": {"anyOf": [{"type": "string", "maxLength": 1}, {"type": "integer", "maximum": 0}]},
    "oneof_disjoint": {
        "oneOf": [
            {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind"]},
            {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "string"}}, "required": ["kind"]},
        ]
    },
    "allof_merge": {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}, "required": ["a"]},
            {"properties": {"a": {"maximum": 10}, "b": {"type": "string"}}, "required": ["b"], "additionalProperties": False},
        ]
    },
    "refs_recursive": {
        "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}, "required": ["v"], "additionalProperties": False}},
        "$ref": "#/$defs/node",
    },
    "nullable_openapi": {"type": "string", "nullable": True, "maxLength": 3},
    "any": {},
    "formats": {
        "type": "object",
        "properties": {f: {"type": "string", "format": f} for f in ("date", "time", "date-time", "uuid", "email", "ipv4", "uri")},
        "additionalProperties": False,
    },
    "enum_filtered_by_siblings": {"type": "string", "enum": ["a", "bb", 3, "ccc"], "maxLength": 2},
    "int_formats": {"type": "integer", "format": "int32"},
}


@pytest.mark.parametrize("whitespace", ["compact", "spaced", "flexible"])
@pytest.mark.parametrize("name", sorted(HAND_WRITTEN))
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_match_of_a_hand_written_schema_is_a_valid_instance(name, whitespace, data):
    schema = HAND_WRITTEN[name]
    text = data.draw(st.from_regex(matcher(schema, whitespace), fullmatch=True))
    instance = json.loads(text)
    errors = [e.message for e in oracle(schema).iter_errors(instance)]
    assert not errors, (text, errors)


@pytest.mark.parametrize("name", sorted(HAND_WRITTEN))
def test_hand_written_patterns_use_no_shorthand_classes(name):
    pattern = schema_to_pattern(HAND_WRITTEN[name], whitespace="flexible")
    escapes = re.findall(r"\\(.)", pattern, flags=re.S)  # each escape consumes the character after "\\"
    assert not set(escapes) & set("dwsDWS"), pattern


# -- integer and number ranges: exactness -----------------------------------------------------------

bounds = st.one_of(st.integers(-10**4, 10**4), st.integers(-10**20, 10**20), st.just(0))


@settings(max_examples=150, deadline=None)
@given(lo=st.none() | bounds, hi=st.none() | bounds, lo_excl=st.booleans(), hi_excl=st.booleans())
def test_an_integer_matches_iff_it_lies_within_the_bounds(lo, hi, lo_excl, hi_excl):
    schema: dict = {"type": "integer"}
    if lo is not None:
        schema["exclusiveMinimum" if lo_excl else "minimum"] = lo
    if hi is not None:
        schema["exclusiveMaximum" if hi_excl else "maximum"] = hi
    low = None if lo is None else lo + 1 if lo_excl else lo
    high = None if hi is None else hi - 1 if hi_excl else hi
    if low is not None and high is not None and low > high:
        with pytest.raises(InvalidSchemaError):
            schema_to_pattern(schema)
        return
    pattern = re.compile(schema_to_pattern(schema))
    probes = set(range(-30, 31))
    for b in (lo, hi):
        if b is not None:
            probes |= set(range(b - 30, b + 31)) | {b * 10, b // 10, -b}
    for n in probes:
        cap = 10 ** max([15] + [len(str(abs(b))) for b in (low, high) if b is not None])
        inside = (low is None or n >= low) and (high is None or n <= high) and abs(n) < cap
        assert bool(pattern.fullmatch(str(n))) == inside, (schema, n)
    assert not pattern.fullmatch("-0") and not pattern.fullmatch("007")


@settings(max_examples=100, deadline=None)
@given(lo=st.none() | st.integers(-200, 200), hi=st.none() | st.integers(-200, 200), lo_excl=st.booleans(), hi_excl=st.booleans())
def test_a_decimal_matches_iff_it_lies_within_integer_bounds(lo, hi, lo_excl, hi_excl):
    assume(lo is not None or hi is not None)
    schema: dict = {"type": "number"}
    if lo is not None:
        schema["exclusiveMinimum" if lo_excl else "minimum"] = lo
    if hi is not None:
        schema["exclusiveMaximum" if hi_excl else "maximum"] = hi
    try:
        pattern = re.compile(schema_to_pattern(schema))
    except InvalidSchemaError:
        assert lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_excl or hi_excl)))
        return
    probes = []
    for centre in {0, lo or 0, hi or 0}:
        for whole in range(centre - 3, centre + 4):
            for frac in ("", ".0", ".5", ".001", ".999", ".25"):
                probes.append(f"{whole}{frac}" if whole >= 0 else f"-{-whole}{frac}")
                if whole == 0 and frac:
                    probes.append(f"-0{frac}")
    for text in probes:
        v = Fraction(text)
        inside = (lo is None or (v > lo if lo_excl else v >= lo)) and (hi is None or (v < hi if hi_excl else v <= hi))
        if text.startswith("-0") and v == 0:
            inside = False  # "-0" / "-0.0" are never generated under bounds (documented)
        assert bool(pattern.fullmatch(text)) == inside, (schema, text)


def _decimals_around(bound: float, digits: int = 15) -> set[str]:
    """Plain decimal texts (at most ``digits`` fraction digits, as the number grammar allows) just below, at and
    just above ``bound`` at every precision, plus the neighbouring doubles' shortest reprs where they fit."""
    exact, texts = Fraction(bound), set()
    for d in range(digits + 1):
        q = 10**d
        centre = exact.numerator * q // exact.denominator
        for k in range(centre - 2, centre + 3):
            whole, frac = divmod(abs(k), q)
            texts.add(("-" if k < 0 else "") + str(whole) + (f".{frac:0{d}d}" if d else ""))
    for near in (math.nextafter(bound, -math.inf), bound, math.nextafter(bound, math.inf)):
        text = repr(near)
        if "e" not in text and len(text.partition(".")[2]) <= digits:
            texts.add(text)
    return {t for t in texts if not (t.startswith("-0") and Fraction(t) == 0)}  # "-0…" is never generated


@pytest.mark.parametrize("bound", [0.5, -2.75, 0.1, 3.14159, -0.001, 12345.678, 1e-7, 2**40 + 0.5])
@pytest.mark.parametrize("keyword", ["minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"])
def test_non_integer_number_bounds_are_exact(keyword, bound):
    """A decimal text matches iff jsonschema (which parses it to the nearest double) says it is within the bound:
    texts whose double rounds onto the bound, e.g. 12345.678000000001, are judged as jsonschema judges them."""
    schema = {"type": "number", keyword: bound}
    match, validator = fullmatcher(schema_to_pattern(schema)), oracle(schema)
    verdicts = collections.Counter()
    for text in sorted(_decimals_around(bound)):
        valid = validator.is_valid(json.loads(text))
        assert bool(match(text)) == valid, (schema, text, valid)
        verdicts[valid] += 1
    assert verdicts[True] > 5 and verdicts[False] > 5, verdicts


def test_non_integer_bounds_on_both_sides_and_next_to_integer_bounds_are_exact():
    for schema in (
        {"type": "number", "exclusiveMinimum": -0.5, "maximum": 0.25},
        {"type": "number", "minimum": 0.1, "exclusiveMaximum": 0.3},
        {"type": "number", "minimum": -3, "exclusiveMaximum": 2.5},
        {"type": "integer", "minimum": 0.5, "maximum": 7.5},
    ):
        match, validator = fullmatcher(schema_to_pattern(schema)), oracle(schema)
        bounds = [v for k, v in schema.items() if k != "type"]
        texts = set().union(*(_decimals_around(float(b), 6) for b in bounds)) | {str(n) for n in range(-5, 10)}
        if schema["type"] == "integer":
            texts = {t for t in texts if "." not in t}  # integer texts only (1.0 is never generated)
        for text in sorted(texts):
            assert bool(match(text)) == validator.is_valid(json.loads(text)), (schema, text)
        assert not match("1e0")  # no exponent under bounds
    with pytest.raises(InvalidSchemaError):
        schema_to_pattern({"type": "number", "minimum": 0.5, "maximum": 0.25})


# -- objects ----------------------------------------------------------------------------------------


def test_optional_properties_appear_in_schema_order_with_correct_commas():
    props = {k: {"type": "integer"} for k in "abcd"}
    schema = {"type": "object", "properties": props, "required": ["c"], "additionalProperties": False}
    p = matcher(schema)
    for r in range(5):
        for subset in itertools.combinations("abcd", r):
            text = compact({k: 1 for k in subset})
            assert bool(p.fullmatch(text)) == ("c" in subset), text
    assert not p.fullmatch('{"c":1,"a":1}')  # out of schema order
    assert not p.fullmatch('{"c":1,}') and not p.fullmatch('{,"c":1}')


def test_all_optional_properties_accept_every_ordered_subset():
    schema = {"type": "object", "properties": {k: {"const": k} for k in "pqrstu"}, "additionalProperties": False}
    p = matcher(schema)
    for r in range(7):
        for subset in itertools.combinations("pqrstu", r):
            assert p.fullmatch(compact({k: k for k in subset}))
    assert not p.fullmatch('{"q":"q","p":"p"}')


def test_extra_properties_follow_listed_ones_and_never_reuse_a_listed_name():
    p = matcher({"type": "object", "properties": {"a": {"type": "integer"}, "ab": {"type": "string"}}})
    assert p.fullmatch('{"a":1,"x":[1,"k"]}') and p.fullmatch('{"x":{"k":null},"y":2}')
    assert not p.fullmatch('{"x":[[1]]}')  # implicit extras nest at most one container (documented)
    assert p.fullmatch('{"zz":true}') and p.fullmatch('{"abc":1,"a\\n":2}')
    assert not p.fullmatch('{"a":1,"a":2}') and not p.fullmatch('{"ab":"s","ab":"t"}')
    assert not p.fullmatch('{"x":1,"a":1}')  # extras come after listed properties
    closed = matcher({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False})
    assert not closed.fullmatch('{"a":1,"b":2}')


# -- arrays, enums, combinators, refs ---------------------------------------------------------------


def test_array_length_bounds_are_exact():
    p = matcher({"type": "array", "items": {"type": "null"}, "minItems": 2, "maxItems": 4})
    for n in range(7):
        assert bool(p.fullmatch(compact([None] * n))) == (2 <= n <= 4)


def test_enum_and_const_accept_json_dumps_in_both_policies():
    values = [{"a": [1, 2], "b": None}, [], {}, "ü\u0001", -0.5, 10**20, False]
    schema = {"enum": values}
    for v in values:
        assert matcher(schema).fullmatch(compact(v))
        assert matcher(schema, "flexible").fullmatch(json.dumps(v, ensure_ascii=False))
        assert matcher(schema, "flexible").fullmatch(json.dumps(v, ensure_ascii=False, indent=2))
    assert not matcher(schema).fullmatch("0")
    assert not matcher({"enum": [1]}).fullmatch("true")
    assert matcher({"enum": [True]}).fullmatch("true") and not matcher({"enum": [True]}).fullmatch("1")


def test_all_of_is_an_intersection_not_a_concatenation():
    p = matcher(HAND_WRITTEN["allof_merge"])
    assert p.fullmatch('{"a":3,"b":"x"}')
    assert not p.fullmatch('{"a":11,"b":"x"}') and not p.fullmatch('{"a":3}') and not p.fullmatch('{"a":3,"b":"x","c":1}')
    assert not p.fullmatch('{"a":3}{"b":"x"}')
    with pytest.raises(InvalidSchemaError):
        schema_to_pattern({"allOf": [{"type": "string"}, {"type": "integer"}]})
    with pytest.raises(UnsupportedSchemaError) as err:
        schema_to_pattern({"allOf": [{"type": "string", "format": "date"}, {"format": "uuid"}]})
    assert err.value.keyword == "format"


@settings(max_examples=150, deadline=None)
@given(first=st.sampled_from(["a", "^a", "b$", "^[ab]+$", "ab", "[0-9]"]),
       second=st.sampled_from(["b", "^b", "a$", "^a*b*$", "ba", "^[a-z]*$"]),
       text=st.text(alphabet="ab1", max_size=6))
def test_two_patterns_in_all_of_are_both_enforced(first, second, text):
    """allOf members with different patterns: the string languages are intersected, exactly."""
    schema = {"allOf": [{"type": "string", "pattern": first}, {"pattern": second}]}
    both = re.search(first, text) is not None and re.search(second, text) is not None
    try:
        accepts = fullmatcher(schema_to_pattern(schema))
    except InvalidSchemaError:  # the two languages do not meet (e.g. "^a" and "^b")
        assert not both
        return
    assert bool(accepts(json.dumps(text))) == both


OVERLAPPING_ONE_OF = {
    # schema, instances valid under exactly one branch (accepted), instances valid under two or none (rejected)
    "integer_or_number": (
        {"oneOf": [{"type": "integer"}, {"type": "number"}]},
        [1.5, -0.25, 2.75],
        [1, 0, -3, 1.0, "x", None],
    ),
    "strings": (
        {"oneOf": [{"type": "string", "maxLength": 3}, {"type": "string", "pattern": "^a"}]},
        ["b", "", "abcd", "bc"],
        ["ab", "a", "bcde", 1],
    ),
    "objects": (
        {
            "oneOf": [
                {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]},
            ]
        },
        [{"a": 1}, {"b": 2}, {"a": 1, "b": "y"}],
        [{"a": 1, "b": 2}, {}, {"a": "x"}],
    ),
}


@pytest.mark.parametrize("name", sorted(OVERLAPPING_ONE_OF))
def test_overlapping_one_of_is_exactly_one(name):
    schema, one, not_one = OVERLAPPING_ONE_OF[name]
    match, validator = fullmatcher(schema_to_pattern(schema)), oracle(schema)
    for instance in one:
        assert validator.is_valid(instance) and match(compact(instance)), instance
    for instance in not_one:
        assert not validator.is_valid(instance) and not match(compact(instance)), instance
    if name == "integer_or_number":  # integer-valued texts of any spelling match both branches
        assert not match("2e0") and not match("-0.0") and not match("1.50e1")
    dfa, rng = compile_dfa(schema_to_pattern(schema)), random.Random(name)
    for _ in range(30):
        text = dfa_sample(dfa, rng)
        assert validator.is_valid(json.loads(text)), text


def test_overlapping_one_of_is_exactly_one_and_disjoint_one_of_is_exact():
    nested = fullmatcher(schema_to_pattern({"oneOf": [{"type": "array", "items": {"type": "integer"}},
                                                      {"type": "array"}]}))  # ¬items: some element not an integer
    assert nested('[1,"a"]') and nested('["a"]')
    assert not nested("[]") and not nested("[1,2]")
    closed = fullmatcher(schema_to_pattern(
        {"oneOf": [{"type": "object", "properties": {"a": {}}, "additionalProperties": False}, {"type": "object"}]}))
    assert closed('{"b":1}') and closed('{"a":1,"b":1}')
    assert not closed('{"a":1}') and not closed("{}")
    p = matcher(HAND_WRITTEN["oneof_disjoint"])
    assert p.fullmatch('{"kind":"a","x":1}') and p.fullmatch('{"kind":"b","y":"s"}')
    assert not p.fullmatch('{"kind":"c"}') and not p.fullmatch('{"kind":"a","x":"s"}')


def test_recursive_refs_unroll_to_a_bounded_depth():
    p = matcher(HAND_WRITTEN["refs_recursive"])
    assert p.fullmatch('{"v":1,"kids":[{"v":2,"kids":[{"v":3}]}]}')
    deep = {"v": 0}
    for i in range(10):
        deep = {"v": i, "kids": [deep]}
    assert not p.fullmatch(compact(deep))
    with pytest.raises(UnsupportedSchemaError):
        schema_to_pattern({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})
    with pytest.raises(InvalidSchemaError):
        schema_to_pattern({"$ref": "#/$defs/missing"})
    with pytest.raises(UnsupportedSchemaError):
        schema_to_pattern({"$ref": "other.json#/x"})


def test_nullable_adds_null():
    assert matcher({"type": "integer", "nullable": True}).fullmatch("null")
    assert matcher({"type": ["integer", "null"]}).fullmatch("null")
    assert not matcher({"type": "integer"}).fullmatch("null")


# -- refusals and annotations -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "keyword, where, schema",
    [
        ("uniqueItems", "", {"type": "array", "uniqueItems": True}),
        ("patternProperties", "", {"type": "object", "patternProperties": {"^(?=a)": {}}}),
        ("not", "/not/multipleOf", {"type": "number", "not": {"multipleOf": 0.3}}),
        ("maxProperties", "", {"type": "object", "maxProperties": 600, "not": {"propertyNames": {"maxLength": 3}}}),
        ("not", "/not/format", {"type": "string", "not": {"format": "date"}}),
        ("contains", "", {"type": "array", "allOf": [{"contains": {"type": "integer"}, "maxContains": 1},
                                                    {"contains": {"type": "string"}}]}),
        ("minProperties", "", {"type": "object", "properties": {f"p{i}": {} for i in range(100)}, "minProperties": 60}),
        ("unevaluatedProperties", "", {"unevaluatedProperties": False}),
        ("multipleOf", "", {"type": "number", "multipleOf": 0.3}),
        ("multipleOf", "", {"type": "number", "multipleOf": 2.5}),
        ("multipleOf", "", {"type": "integer", "multipleOf": 1.5}),
        ("multipleOf", "", {"type": "integer", "multipleOf": 200_000}),
        ("format", "", {"type": "string", "format": "ipv6"}),
        ("format", "", {"type": "string", "format": "regex"}),
    ],
)
def test_unenforceable_keywords_raise_with_path_and_keyword(keyword, where, schema):
    wrapped = {"type": "object", "properties": {"tags": schema}, "required": ["tags"]}
    with pytest.raises(UnsupportedSchemaError) as err:
        schema_to_pattern(wrapped)
    assert err.value.keyword == keyword
    assert err.value.path == "#/properties/tags" + where


_TWO = {"a": {"type": "integer"}, "b": {"type": "string"}}
ENFORCED_KEYWORDS = {
    # name: (schema, accepted instances, rejected instances); jsonschema agrees on every one of them
    "dependentSchemas": (
        {"type": "object", "properties": _TWO, "dependentSchemas": {"a": {"required": ["b"]}}},
        [{}, {"a": 1, "b": "x"}, {"b": "x"}],
        [{"a": 1}],
    ),
    "dependentRequired": (
        {"type": "object", "properties": _TWO, "dependentRequired": {"b": ["a"]}},
        [{}, {"a": 1, "b": "x"}, {"a": 1}],
        [{"b": "x"}],
    ),
    "dependencies_draft7": (
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {**_TWO, "c": {"type": "integer"}},
            "dependencies": {"a": ["b"], "b": {"properties": {"c": {"maximum": 3}}}},
        },
        [{}, {"a": 1, "b": "x"}, {"b": "x", "c": 3}, {"c": 9}],
        [{"a": 1}, {"b": "x", "c": 4}, {"a": 1, "c": 1}],
    ),
    "if_then_else": (
        {"if": {"type": "integer"}, "then": {"minimum": 0}, "else": {"type": "string"}},
        [0, 1, "x"],
        [-1, None, 1.5, []],
    ),
    "if_then": (
        {"type": "object", "properties": {"k": {"type": "string"}, "n": {"type": "integer"}}, "required": ["k"],
         "if": {"properties": {"k": {"const": "a"}}}, "then": {"required": ["n"]}},
        [{"k": "a", "n": 1}, {"k": "b"}, {"k": "b", "n": 2}],
        [{"k": "a"}, {"n": 1}],
    ),
    "not_type": ({"not": {"type": "null"}}, [1, "a", [], {}, True], [None]),
    "not_enum": ({"type": "string", "not": {"enum": ["a", "b"]}}, ["c", "ab", ""], ["a", "b", 1]),
    "not_minimum": ({"type": "integer", "not": {"minimum": 5}}, [4, -100], [5, 6]),
    "not_integer": ({"type": "number", "not": {"type": "integer"}}, [1.5, -0.25], [1, 0, 1.0]),
    "not_required": ({"type": "object", "properties": _TWO, "not": {"required": ["a"]}}, [{}, {"b": "x"}], [{"a": 1}]),
    "propertyNames": ({"type": "object", "propertyNames": {"maxLength": 3}}, [{}, {"abc": 1}, {"a": 1, "bb": 2}], [{"abcd": 1}]),
    "propertyNames_listed": (
        {"type": "object", "properties": {"long": {"type": "integer"}, "ok": {"type": "integer"}}, "propertyNames": {"maxLength": 3}},
        [{}, {"ok": 1}],
        [{"long": 1}, {"ok": 1, "long": 2}],
    ),
    "propertyNames_pattern": (
        {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}, "additionalProperties": {"type": "integer"}},
        [{}, {"abc": 1}, {"a": 1, "b": 2}],
        [{"aB": 1}, {"a1": 2}, {"": 0}],
    ),
    "minProperties": ({"type": "object", "minProperties": 1}, [{"a": 1}, {"a": 1, "b": 2}], [{}]),
    "min_maxProperties": (
        {"type": "object", "properties": {k: {"type": "integer"} for k in "abc"}, "minProperties": 1, "maxProperties": 2,
         "additionalProperties": False},
        [{"a": 1}, {"c": 3}, {"a": 1, "b": 2}, {"b": 1, "c": 2}],
        [{}, {"a": 1, "b": 2, "c": 3}],
    ),
    "maxProperties_open": (
        {"type": "object", "properties": {"a": {"type": "integer"}}, "maxProperties": 1},
        [{}, {"a": 1}, {"x": 2}],
        [{"a": 1, "x": 2}, {"x": 1, "y": 2}],
    ),
    "multipleOf_integer": ({"type": "integer", "multipleOf": 3}, [0, 3, -6, 9, 300, -999], [1, 4, -1, 301, 1000]),
    "multipleOf_bounded": (
        {"type": "integer", "multipleOf": 5, "minimum": 3, "maximum": 22},
        [5, 10, 15, 20],
        [0, 3, 4, 6, 22, 25, -5],
    ),
    "multipleOf_on_number": ({"type": "number", "multipleOf": 3, "maximum": 100}, [0, 3, 6, 99], [7, 1.5, 102]),
    "multipleOf_half": ({"type": "number", "multipleOf": 0.5}, [0, 1, 1.5, -0.5, 2.5], [0.25, 0.3, 1.75]),
    "multipleOf_hundredth": ({"type": "number", "multipleOf": 0.01}, [1, 0.5, 0.25, 0.75], [0.001, 0.125]),
    "multipleOf_half_on_integer": ({"type": "integer", "multipleOf": 0.5}, [0, 1, -7], [1.5]),
}


@pytest.mark.parametrize("name", sorted(ENFORCED_KEYWORDS))
def test_newly_enforced_keywords_accept_valid_and_reject_invalid_instances(name):
    schema, accepted, rejected = ENFORCED_KEYWORDS[name]
    pattern = schema_to_pattern(schema)
    match, validator = fullmatcher(pattern), oracle(schema)
    for instance in accepted:
        assert validator.is_valid(instance), ("listed as valid", instance)
        assert match(compact(instance)), instance
    for instance in rejected:
        assert not validator.is_valid(instance), ("listed as invalid", instance)
        assert not match(compact(instance)), instance
    dfa, rng = compile_dfa(pattern), random.Random(name)
    for _ in range(30):  # soundness beyond the listed instances: random accepted strings validate
        text = dfa_sample(dfa, rng)
        assert validator.is_valid(json.loads(text)), text


def test_a_negated_if_excludes_an_enum_value():
    # ¬if gives k the internal keyword $ember:notStrings ["a"]; the enum filter must read it (it once did not)
    schema = {"type": "object", "properties": {"k": {"enum": ["a", "b"]}}, "required": ["k"],
              "if": {"properties": {"k": {"const": "a"}}}, "then": {"required": ["n"]}}
    assert not oracle(schema).is_valid({"k": "a"})
    assert not fullmatcher(schema_to_pattern(schema))('{"k":"a"}')


FORMATS = {
    # format: (accepted, rejected) strings; this jsonschema has no checker for these, so the lists are the RFCs'
    "hostname": (["example.com", "a-b.c0.org", "localhost", "x.y.z.example"], ["-bad.com", "a..b", "exa mple.com", "bad-.com", "a" * 64 + ".com", ""]),
    "host-name": (["example.com"], ["-bad.com"]),
    "uri-reference": (["../a/b?c=1#frag", "https://example.com/x", "", "#top", "a/b"], ["a b", "%zz", "http://exa mple.com"]),
    "byte": (["aGVsbG8=", "", "YWJj", "YQ=="], ["aGVsbG8", "a", "YWJj=", "@@@@", "YQ="]),
    "url": (["https://example.com/x?y=1"], ["not a url", "/relative"]),
    "full-date": (["2024-02-29"], ["2024-13-01", "24-01-01"]),
    "ip-address": (["192.168.0.1"], ["256.1.1.1", "1.2.3"]),
}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_new_formats_and_aliases_are_enforced(fmt):
    accepted, rejected = FORMATS[fmt]
    match = fullmatcher(schema_to_pattern({"type": "string", "format": fmt}))
    for text in accepted:
        assert match(compact(text)), text
    for text in rejected:
        assert not match(compact(text)), text


def test_a_non_standard_format_is_refused_unless_read_as_an_annotation():
    schema = {"type": "string", "format": "path"}
    for strict in ("warn", "error"):  # a format is a constraint: one the engine does not know cannot be enforced
        with pytest.raises(UnsupportedSchemaError, match="format 'path' is not enforced") as err:
            schema_to_pattern(schema, unknown_keywords=strict)
        assert err.value.keyword == "format"
    with pytest.warns(UnknownKeywordWarning, match="path"):  # JSON Schema's own reading: it constrains nothing
        pattern = schema_to_pattern(schema, unknown_keywords="annotation")
    assert fullmatcher(pattern)('"any thing / at all"') and not fullmatcher(pattern)("1")


def test_trivially_true_forms_are_accepted():
    schema_to_pattern({"type": "integer", "multipleOf": 1})
    schema_to_pattern({"type": "array", "uniqueItems": False})
    schema_to_pattern({"type": "array", "uniqueItems": True, "maxItems": 1})
    schema_to_pattern({"type": "object", "properties": {"a": {}}, "required": ["a"], "minProperties": 1})


def test_annotation_keywords_are_ignored():
    annotated = {
        "title": "t", "description": "d", "examples": [1], "default": 1, "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://x/y", "$comment": "c", "deprecated": False, "readOnly": True, "writeOnly": False,
        "contentMediaType": "text/plain", "x-vendor": {"any": 1}, "type": "integer",
    }
    assert schema_to_pattern(annotated) == schema_to_pattern({"type": "integer"})


@needs_pattern
def test_string_pattern_is_delegated_and_sound():
    p = matcher({"type": "string", "pattern": "^[a-c]{2}$"})
    assert p.fullmatch('"ab"') and not p.fullmatch('"abc"')
    with pytest.raises(UnsupportedSchemaError) as err:
        schema_to_pattern({"type": "object", "properties": {"s": {"type": "string", "pattern": "^(?=a)"}}})
    assert (err.value.keyword, err.value.path) == ("pattern", "#/properties/s")


# -- whitespace -------------------------------------------------------------------------------------


def test_flexible_whitespace_is_bounded_and_compact_has_none():
    schema = HAND_WRITTEN["object"]
    value = {"name": "x", "age": 3, "tags": ["x", "y"], "nick": None}
    assert matcher(schema).fullmatch(compact(value))
    assert not matcher(schema).fullmatch(json.dumps(value))
    assert matcher(schema, "flexible").fullmatch(json.dumps(value, ensure_ascii=False))
    assert matcher(schema, "flexible").fullmatch(json.dumps(value, ensure_ascii=False, indent=4))
    assert not matcher(schema, "flexible").fullmatch('{"age":' + " " * 2 + "3}")
    assert not matcher(schema, "flexible").fullmatch('{"age":\n' + " " * 21 + "3}")


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_spaced_is_exactly_json_dumps_default_layout(data):
    """Outside strings, every spaced match has exactly json.dumps's default layout (one space after each ``,``
    and ``:``, no other blank), and json.dumps's output always matches."""
    schema = HAND_WRITTEN["object"]
    text = data.draw(st.from_regex(matcher(schema, "spaced"), fullmatch=True))
    n = iter(range(10**6))
    layout = re.sub(r'"(?:[^"\\]|\\.)*"', lambda _: f'"{next(n)}"', text)  # strings renamed: structure is left
    assert layout == json.dumps(json.loads(layout)), text
    value = {"name": "x", "age": 3, "tags": ["x", "y"], "nick": None}
    assert matcher(schema, "spaced").fullmatch(json.dumps(value, ensure_ascii=False))
    assert not matcher(schema, "spaced").fullmatch(compact(value))


def test_string_length_counts_characters_not_escape_bytes():
    p = matcher({"type": "string", "minLength": 2, "maxLength": 2})
    assert p.fullmatch(compact("\n\"")) and p.fullmatch(compact("ab")) and p.fullmatch(compact("😀é"))
    assert not p.fullmatch(compact("abc"))


# -- the corpus -------------------------------------------------------------------------------------


@functools.cache
def corpus_entry(path: pathlib.Path):
    """(document, compact pattern | None, flexible pattern | None, unsupported keyword | None)."""
    doc = json.loads(path.read_text())
    try:
        return doc, schema_to_pattern(doc["schema"]), schema_to_pattern(doc["schema"], whitespace="flexible"), None
    except UnsupportedSchemaError as err:
        return doc, None, None, err.keyword
    except (InvalidSchemaError, GrammarTooLargeError) as err:
        return doc, None, None, type(err).__name__


def _pattern_order(pattern: str):
    """Sort key guessing a key's place from where its literal first appears in the pattern."""
    def where(k):
        i = pattern.find(json.dumps(k, ensure_ascii=False).replace('"', '\\"'))
        return i if i >= 0 else len(pattern)
    return where


def _resolve(node, root, hops: int = 16):
    """``node`` with local ``$ref``s followed (at most ``hops`` of them); None where a ref leaves the document."""
    while isinstance(node, dict) and isinstance(node.get("$ref"), str) and hops > 0:
        ref, hops = node["$ref"], hops - 1
        if not ref.startswith("#"):
            return None
        node = root
        for part in filter(None, ref[1:].split("/")):
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
    return node if isinstance(node, dict) else None


def _views(node, root, value, validator, depth: int = 0) -> list[dict]:
    """The schema nodes that describe ``value`` at ``node``: the node (its ``$ref`` followed), its ``allOf``
    members, and the ``anyOf``/``oneOf`` branches ``value`` is valid against, in schema order."""
    node = _resolve(node, root)
    if node is None or depth > 16:
        return []
    out = [node]
    for member in node.get("allOf", []) if isinstance(node.get("allOf"), list) else []:
        out += _views(member, root, value, validator, depth + 1)
    for key in ("anyOf", "oneOf"):
        for branch in node.get(key, []) if isinstance(node.get(key), list) else []:
            try:
                fits = validator.evolve(schema=branch).is_valid(value)
            except Exception:  # noqa: BLE001 - a branch jsonschema cannot judge alone: use it anyway
                fits = True
            if fits:
                out += _views(branch, root, value, validator, depth + 1)
    return out


def _reordered(value, pattern: str, schema=None, root=None, validator=None):
    """The value with each object's keys in the schema's own ``properties`` order (following ``$ref``, ``allOf``
    and the ``anyOf``/``oneOf`` branches the value is valid against); keys no schema node lists, and every key
    when ``schema`` is None, are sorted after them by where the key literal first appears in the pattern."""
    if schema is not None and root is None:
        root, validator = schema, oracle(schema)
    views = _views(schema, root, value, validator) if schema is not None else []
    if isinstance(value, dict):
        order: dict[str, int] = {}
        for view in views:
            props = view.get("properties")
            for k in props if isinstance(props, dict) else ():
                order.setdefault(k, len(order))
        where = _pattern_order(pattern)
        keys = sorted(value, key=lambda k: (0, order[k], 0) if k in order else (1, 0, where(k)))

        def child(k):  # every view's schema for the key (an allOf of them), else the first schema for extras
            listed = [v["properties"][k] for v in views if isinstance(v.get("properties"), dict) and k in v["properties"]]
            extra = [v["additionalProperties"] for v in views if isinstance(v.get("additionalProperties"), dict)]
            return {"allOf": listed} if listed else extra[0] if extra else None

        return {k: _reordered(value[k], pattern, child(k), root, validator) for k in keys}
    if isinstance(value, list):
        def item(i):
            for view in views:
                prefix = view.get("prefixItems", view.get("items"))
                if isinstance(prefix, list):
                    if i < len(prefix):
                        return prefix[i]
                    rest = view.get("items") if "prefixItems" in view else view.get("additionalItems")
                    return rest if isinstance(rest, dict) else None
                if isinstance(view.get("items"), dict):
                    return view["items"]
            return None

        return [_reordered(v, pattern, item(i), root, validator) for i, v in enumerate(value)]
    return value


def _depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _matches_with_deeper_open_values(schema, text: str) -> bool:
    saved = policy.IMPLICIT_EXTRA_DEPTH
    policy.IMPLICIT_EXTRA_DEPTH = 4
    try:
        return bool(fullmatcher(schema_to_pattern(schema, any_value_depth=4))(text))
    except GrammarTooLargeError:
        return False
    finally:
        policy.IMPLICIT_EXTRA_DEPTH = saved


def corpus_report(paths) -> dict:
    counts = collections.Counter()
    unsupported = collections.Counter()
    misses = collections.Counter()
    slipped = []
    for path in paths:
        doc, pc, pf, refused = corpus_entry(path)
        if pc is None:
            counts["refused"] += 1
            unsupported[refused] += 1
            continue
        counts["compiled"] += 1
        if "(?@" not in pf and len(pf) > RE_PATTERN_CHARS:
            counts["not_checked_pattern_too_large_for_python_re"] += 1
            continue
        try:
            match_c, match_f = fullmatcher(pc), fullmatcher(pf)
        except GrammarTooLargeError:
            counts["not_checked_dfa_too_large"] += 1
            continue
        for test in doc.get("tests", []):
            data = test["data"]
            hit_c = bool(match_c(compact(data)))
            hit_f = bool(match_f(json.dumps(data, ensure_ascii=False)))
            if test["valid"]:
                counts["valid"] += 1
                if hit_c and hit_f:
                    counts["valid_accepted"] += 1
                elif match_c(compact(_reordered(data, pc, doc["schema"]))) or match_c(compact(_reordered(data, pc))):
                    misses["key order differs from schema order"] += 1  # the same instance, keys permuted
                elif _matches_with_deeper_open_values(doc["schema"], compact(data)):
                    misses["open-ended value nests deeper than any_value_depth"] += 1
                else:
                    misses["unexplained"] += 1
                    slipped.append(("valid rejected", path.name))
            else:
                counts["invalid"] += 1
                if hit_c or hit_f:
                    slipped.append(("invalid accepted", path.name))
                else:
                    counts["invalid_rejected"] += 1
    return {"counts": dict(counts), "unsupported": dict(unsupported.most_common()), "misses": dict(misses), "problems": slipped}


def _fast(paths):
    return [p for p in paths if corpus_entry(p)[1] is None or len(corpus_entry(p)[2]) <= FAST_PATTERN_CHARS]


def test_corpus_subset_accepts_valid_and_rejects_invalid_instances():
    report = corpus_report(_fast(CORPUS[::3]))
    print(json.dumps(report, indent=1))
    assert report["counts"]["compiled"] >= 50
    assert not report["problems"], report["problems"]


@pytest.mark.slow
def test_full_corpus_accepts_valid_and_rejects_invalid_instances():
    report = corpus_report(CORPUS)
    print(json.dumps(report, indent=1))
    assert not [p for p in report["problems"] if p[0] == "invalid accepted"], report["problems"]
    assert report["misses"].get("unexplained", 0) <= 2, report


def _corpus_soundness(paths, examples: int):
    for path in paths:
        doc, pattern, flexible, _ = corpus_entry(path)
        if pattern is None:
            continue
        validator = oracle(doc["schema"])
        for pat in (pattern, flexible):
            if "(?@" in pat:  # not `re` syntax: sample the DFA instead
                try:
                    dfa = compile_dfa(pat)
                except GrammarTooLargeError:
                    continue
                rng = random.Random(path.name)
                for _ in range(examples):
                    text = dfa_sample(dfa, rng)
                    errors = [e.message for e in validator.iter_errors(json.loads(text))]
                    assert not errors, (path.name, text[:300], errors[:3])
                continue

            @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
            @given(text=st.from_regex(re.compile(pat), fullmatch=True))
            def check(text):
                instance = json.loads(text)
                errors = [e.message for e in validator.iter_errors(instance)]
                assert not errors, (path.name, text[:300], errors[:3])

            check()


def test_corpus_subset_samples_validate():
    small = [p for p in CORPUS[::5] if corpus_entry(p)[1] is not None and len(corpus_entry(p)[2]) <= 6_000]
    assert len(small) >= 15
    _corpus_soundness(small, examples=3)


@pytest.mark.slow
def test_full_corpus_samples_validate():
    _corpus_soundness([p for p in CORPUS if corpus_entry(p)[1] is not None and len(corpus_entry(p)[2]) <= 20_000], examples=3)


def test_an_unknown_keyword_is_ignored_loudly_or_refused_on_request():
    schema = {"type": "object", "properties": {"a": {"type": "integer", "_format": "int"}}, "required": ["a"]}
    with pytest.warns(UnknownKeywordWarning, match=r"'_format' at #/properties/a"):
        pattern = schema_to_pattern(schema)
    assert re.fullmatch(pattern, '{"a":1}') and not re.fullmatch(pattern, '{"a":"x"}')
    with pytest.raises(UnsupportedSchemaError) as info:
        schema_to_pattern(schema, unknown_keywords="error")
    assert (info.value.path, info.value.keyword) == ("#/properties/a", "_format")


def test_a_malformed_keyword_beside_an_enum_is_an_invalid_schema_error():
    # found by the hostile suite's fuzzer: jsonschema raised TypeError while filtering the const candidate
    with pytest.raises(InvalidSchemaError):
        schema_to_pattern({"not": None, "type": "null", "required": "a", "const": None})


_KEY_CHARS = st.sampled_from(["a", "b", "é", '"', "\\", "\n", "\x1f", "-", "]", "^"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(st.text(_KEY_CHARS, max_size=5), min_size=1, max_size=6, unique=True),
       others=st.lists(st.text(_KEY_CHARS, max_size=6), max_size=8))
def test_string_body_excluding_is_exactly_the_other_strings(names, others):
    """The key complement used for extra properties: a string's JSON spelling (short escapes, \\u00XX for the
    other controls, the spellings json.dumps picks) is in the language exactly when the string is not a name."""
    dfa = compile_dfa('"' + strings.string_body_excluding(tuple(names)) + '"')
    automaton = compile_dfa('"' + strings.excluded_keys_automaton(tuple(names)) + '"')  # the finer rules'
    for text in names + others:
        spelled = json.dumps(text, ensure_ascii=False).encode("utf-8")
        escaped = ('"' + "".join("\\u000a" if ch == "\n" else json.dumps(ch, ensure_ascii=False)[1:-1] for ch in text)
                   + '"').encode("utf-8")  # another spelling of the same string
        for spelling in (spelled, escaped):
            assert dfa.accepts(spelling) == automaton.accepts(spelling) == (text not in names), (names, text)



_ASCII_KEY_CHARS = st.sampled_from(["a", "b", "-", "]", "^", "[", ".", " ", "\x7f", "~"])
_OTHER_CHARS = st.sampled_from(["a", "b", "-", "é", '"', "\\", "\n", "\x1f"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(st.text(_ASCII_KEY_CHARS, max_size=5), min_size=1, max_size=6, unique=True),
       others=st.lists(st.text(_OTHER_CHARS, max_size=6), max_size=8))
def test_ascii_key_complement_is_the_general_one(names, others):
    """Names of plain ASCII characters (nearly every key) take the smaller complement, one byte class per trie node:
    the same language as the general construction, and exactly the strings that are not names."""
    trie = strings.names_trie(names)
    fast, general = (compile_dfa('"' + build(trie) + '"') for build in (
        strings.ascii_names_complement, strings.names_complement))
    assert fsm.difference(fast, general) is None and fsm.difference(general, fast) is None, names
    assert strings.string_body_excluding(tuple(names)) == strings.ascii_names_complement(trie)
    for text in names + others + [name + tail for name in names for tail in ("é", "\n", "a")]:
        spelled = json.dumps(text, ensure_ascii=False).encode("utf-8")
        assert fast.accepts(spelled) == (text not in names), (names, text)

def test_email_is_bounded_so_a_long_max_length_is_implied_not_counted():
    """The email format holds at most 64 local characters besides dots and 2-4 host labels (at most 383 in all): a
    maxLength of 1024 is implied and dropped (it was ~1.3M product states, refused)."""
    plain = schema_to_pattern({"type": "string", "format": "email"})
    assert schema_to_pattern({"type": "string", "format": "email", "maxLength": 1024}) == plain
    dfa = compile_dfa(plain)
    assert dfa.accepts(b'"' + b"a" * 64 + b'@x.io"') and not dfa.accepts(b'"' + b"a" * 65 + b'@x.io"')
    assert dfa.accepts(b'"a.b.c@w.x.y.io"') and not dfa.accepts(b'"a@v.w.x.y.io"')
    assert not dfa.accepts(b'"a..b@x.io"') and not dfa.accepts(b'"a.@x.io"') and not dfa.accepts(b'".a@x.io"')
    shorter = compile_dfa(schema_to_pattern({"type": "string", "format": "email", "maxLength": 8}))
    assert shorter.accepts(b'"abc@x.io"') and not shorter.accepts(b'"abcd@x.io"')  # a shorter bound still counts
