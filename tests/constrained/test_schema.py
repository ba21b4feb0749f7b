"""Properties of constrained.schema: JSON Schema → pattern is sound (every match validates), complete on
the corpus's valid instances (modulo documented limits), exact on numeric ranges, and refuses what it
cannot enforce with a typed error naming the path and keyword."""

from __future__ import annotations

import collections
import functools
import itertools
import json
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
from constrained import schema as schema_module
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


def test_non_integer_number_bounds_are_refused():
    with pytest.raises(UnsupportedSchemaError) as err:
        schema_to_pattern({"type": "number", "minimum": 0.5})
    assert err.value.keyword == "minimum" and err.value.path == "#"


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
        schema_to_pattern({"allOf": [{"type": "string", "pattern": "a"}, {"pattern": "b"}]})
    assert err.value.keyword == "pattern"


def test_overlapping_one_of_is_refused_and_disjoint_one_of_is_exact():
    with pytest.raises(UnsupportedSchemaError) as err:
        schema_to_pattern({"oneOf": [{"type": "integer"}, {"type": "number"}]})
    assert (err.value.keyword, err.value.path) == ("oneOf", "#")
    p = matcher(HAND_WRITTEN["oneof_disjoint"])
    assert p.fullmatch('{"kind":"a","x":1}') and not p.fullmatch('{"kind":"c"}')


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
    "keyword, schema",
    [
        ("uniqueItems", {"type": "array", "uniqueItems": True}),
        ("patternProperties", {"type": "object", "patternProperties": {"^(?=a)": {}}}),
        ("dependentSchemas", {"dependentSchemas": {"a": {}}}),
        ("if", {"if": {}, "then": {}}),
        ("not", {"not": {"type": "null"}}),
        ("contains", {"contains": {"type": "null"}}),
        ("propertyNames", {"propertyNames": {"maxLength": 3}}),
        ("minProperties", {"type": "object", "minProperties": 1}),
        ("unevaluatedProperties", {"unevaluatedProperties": False}),
        ("multipleOf", {"type": "integer", "multipleOf": 3}),
        ("multipleOf", {"type": "number", "multipleOf": 0.5}),
        ("format", {"type": "string", "format": "hostname"}),
    ],
)
def test_unenforceable_keywords_raise_with_path_and_keyword(keyword, schema):
    wrapped = {"type": "object", "properties": {"tags": schema}, "required": ["tags"]}
    with pytest.raises(UnsupportedSchemaError) as err:
        schema_to_pattern(wrapped)
    assert err.value.keyword == keyword
    assert err.value.path == "#/properties/tags"


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


def _reordered(value, pattern: str):
    """The value with each object's keys sorted by where the key literal first appears in the pattern."""
    if isinstance(value, dict):
        def where(k):
            i = pattern.find(json.dumps(k, ensure_ascii=False).replace('"', '\\"'))
            return i if i >= 0 else len(pattern)
        return {k: _reordered(value[k], pattern) for k in sorted(value, key=where)}
    if isinstance(value, list):
        return [_reordered(v, pattern) for v in value]
    return value


def _depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _matches_with_deeper_open_values(schema, text: str) -> bool:
    saved = schema_module.IMPLICIT_EXTRA_DEPTH
    schema_module.IMPLICIT_EXTRA_DEPTH = 4
    try:
        return bool(fullmatcher(schema_to_pattern(schema, any_value_depth=4))(text))
    except GrammarTooLargeError:
        return False
    finally:
        schema_module.IMPLICIT_EXTRA_DEPTH = saved


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
                elif match_c(compact(_reordered(data, pc))):
                    misses["key order differs from schema order"] += 1
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
