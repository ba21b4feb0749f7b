"""Keywords compiled by rewriting (constrained.schema_keywords): not, overlapping oneOf, if/then/else, dependencies,
propertyNames, min/maxProperties, non-integer number bounds, multipleOf, and the added formats.

For every schema: (a) DFA random-walk samples all validate under jsonschema (soundness), (b) hand-listed valid
instances are accepted and invalid ones refused, (c) hypothesis instances: accepted ⇒ valid. A test that cannot
fail is a defect, so `test_the_soundness_check_catches_a_wrong_pattern` feeds the same check a wrong pattern.
"""

from __future__ import annotations

import json
import random
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constrained import schema_keywords
from constrained.errors import UnknownKeywordWarning, UnsupportedSchemaError
from constrained.fsm import compile_dfa
from constrained.schema import schema_to_pattern
from tests.constrained.test_schema import dfa_sample, oracle

# (schema, valid instances, invalid instances)
CASES = [
    ({"type": "number", "minimum": 0.5, "maximum": 2.25}, [0.5, 1, 2.25, 2, 0.75, 1.999], [0.49, 2.26, 3, -1, 0]),
    ({"type": "number", "exclusiveMinimum": 0.3, "exclusiveMaximum": 0.7}, [0.31, 0.5, 0.69, 0.3000001],
     [0.3, 0.7, 0.2, 1]),
    ({"type": "number", "minimum": -1.5, "exclusiveMaximum": -0.25}, [-1.5, -1, -0.3], [-0.25, 0, -1.51, -2]),
    ({"type": "number", "maximum": 0.1}, [0.1, 0, -3, 0.09999], [0.10001, 1]),
    ({"type": "integer", "minimum": 0.5, "maximum": 3.5}, [1, 2, 3], [0, 4]),
    ({"type": "integer", "multipleOf": 12, "minimum": -100, "maximum": 100}, [0, 12, -96, 96], [1, 13, 108, -108]),
    ({"type": "integer", "multipleOf": 7}, [0, 7, -14, 700000000007], [1, 8, -15]),
    ({"type": "number", "multipleOf": 0.01, "minimum": 0}, [0, 1, 2.5, 3.25, 100], [-1, 0.001]),
    ({"type": "number", "multipleOf": 3}, [0, 3, -9], [1, 1.5]),
    ({"not": {"type": "number"}}, ["a", None, True, {}, []], [1, 1.5]),
    ({"not": {"type": "integer"}}, ["a", 1.5, -0.25], [1, 0]),
    ({"not": {"enum": [-2.0, "x", None, {}]}}, [-1, -3, 0, "a", True, {"a": 1}], [-2, "x", None, {}]),
    ({"not": {"maximum": 3.0}}, [4, 3.5], [3, 2, -1, "x"]),
    ({"not": {"minLength": 2}}, ["", "a"], ["ab", 1]),
    ({"not": {"required": ["error"]}}, [{}, {"a": 1}], [{"error": 1}, 1]),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "not": {"required": ["a"]}}, [{}], [{"a": 1}]),
    ({"not": {"properties": {"bar": {"type": "string"}, "foo": {"type": "integer"}}}}, [{"bar": 1}, {"foo": "x"}],
     [{}, {"bar": "x"}, {"foo": 1}, 1, "a"]),
    ({"type": "string", "not": {"pattern": "a"}}, ["", "bcd"], ["a", "bab"]),
    ({"not": {"anyOf": [{"type": "string"}, {"type": "boolean"}]}}, [1, None], ["a", True]),
    ({"not": {"not": {"type": "string"}}}, ["a"], [1, None]),
    ({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, [1, 0, -5, 2.5, "x"], [2, 3]),
    ({"oneOf": [{"type": "object", "required": ["a"]}, {"type": "object", "required": ["b"]}],
      "properties": {"a": {}, "b": {}}}, [{"a": 1}, {"b": 1}], [{"a": 1, "b": 2}, {}]),
    ({"if": {"maximum": 4}, "then": {"type": "integer"}, "else": {"type": "string"}}, [3, -7], [3.5, 5, 6, "a"]),
    ({"if": {"type": "string"}, "then": {"minLength": 2}}, ["ab", 1], ["a"]),
    ({"if": {"type": "string"}, "else": {"type": "null"}}, ["a", None], [1]),
    ({"type": "object", "dependentRequired": {"a": ["b"]}, "properties": {"a": {}, "b": {}}},
     [{}, {"a": 1, "b": 2}, {"b": 1}], [{"a": 1}]),
    ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "dependencies": {"a": {"required": ["c"]}},
      "properties": {"a": {}, "c": {}}},
     [{}, {"a": 1, "c": 2}], [{"a": 1}]),
    ({"type": "object", "propertyNames": {"pattern": "^..$"}, "additionalProperties": {"type": "integer"}},
     [{}, {"ab": 1}], [{"a": 1}, {"abc": 1}]),
    ({"type": "object", "propertyNames": {"maxLength": 1}, "properties": {"ab": {}, "c": {}}}, [{"c": 1}, {"d": 2}],
     [{"ab": 1}]),
    ({"type": "object", "minProperties": 1}, [{"a": 1}], [{}]),
    ({"type": "object", "properties": {"a": {}, "b": {}}, "additionalProperties": False, "minProperties": 1,
      "maxProperties": 1}, [{"a": 1}, {"b": 2}], [{}, {"a": 1, "b": 2}]),
    ({"type": "object", "maxProperties": 2}, [{}, {"a": 1}, {"a": 1, "b": 2}], [{"a": 1, "b": 2, "c": 3}]),
    ({"type": "object", "properties": {"a": {}}, "required": ["a"], "minProperties": 2}, [{"a": 1, "b": 2}],
     [{"a": 1}]),
    ({"type": "string", "format": "hostname"}, ["example.com", "a-b.c", "localhost"], ["-a.com", "a..b", "a_b", ""]),
    ({"type": "string", "format": "uri-reference"}, ["", "/a/b", "a/b?x=1#f", "http://x.y/z", "//h:80/p"],
     ["a b", ":a", "http://a b"]),
    ({"type": "string", "format": "byte"}, ["", "YWJj", "YQ==", "YWI="], ["Y", "YQ=", "a b"]),
    ({"type": "string", "format": "full-date"}, ["2020-02-29"], ["2021-02-29"]),
    ({"type": "integer", "format": "utc-millisec"}, [0, 12345], ["x"]),
]


def _compact(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _dfa(schema):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnknownKeywordWarning)
        return compile_dfa(schema_to_pattern(schema))


def assert_sound(schema, dfa, seed: int = 0, n: int = 60) -> None:
    """Random walks of the DFA: each sample is JSON that the schema accepts."""
    validator, rng = oracle(schema), random.Random(seed)
    for _ in range(n):
        text = dfa_sample(dfa, rng, soft_limit=200)
        value = json.loads(text)
        assert validator.is_valid(value), (schema, text)


@pytest.mark.parametrize(("schema", "valid", "invalid"), CASES, ids=lambda x: json.dumps(x)[:60])
def test_keyword_is_exact_on_listed_instances_and_samples_validate(schema, valid, invalid) -> None:
    dfa = _dfa(schema)
    validator = oracle(schema)
    for value in valid:
        assert validator.is_valid(value), value  # the list itself is right
        assert dfa.accepts(_compact(value)), (schema, value)
    for value in invalid:  # formats without a jsonschema checker here (hostname, uri-reference, byte): by the RFC
        assert "format" in schema or not validator.is_valid(value), value
        assert not dfa.accepts(_compact(value)), (schema, value)
    assert_sound(schema, dfa)


def test_the_soundness_check_catches_a_wrong_pattern() -> None:
    """A variant that forgets the negation (``not`` dropped) must be caught by the same checks."""
    schema = {"type": "string", "not": {"pattern": "a"}}
    wrong = compile_dfa(schema_to_pattern({"type": "string"}))
    with pytest.raises(AssertionError):
        for seed in range(20):
            assert_sound(schema, wrong, seed)
    assert wrong.accepts(_compact("a")) and not oracle(schema).is_valid("a")
    # an inverted negation (the mistake of keeping the other types in ¬maximum) is caught by the listed cases
    bad_neg = compile_dfa(schema_to_pattern({"anyOf": [{"type": "string"}, {"type": "number", "exclusiveMinimum": 3}]}))
    assert bad_neg.accepts(_compact("x")) and not oracle({"not": {"maximum": 3}}).is_valid("x")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(-1e6, 1e6, allow_nan=False)
    | st.text("abcxy", max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abcxy"), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(CASES) - 1), value=json_values)
def test_accepted_hypothesis_instances_are_valid(index: int, value) -> None:
    schema = CASES[index][0]
    if _dfa_cached(index).accepts(_compact(value)):
        assert oracle(schema).is_valid(value), (schema, value)


_DFAS: dict[int, object] = {}


def _dfa_cached(index: int):
    if index not in _DFAS:
        _DFAS[index] = _dfa(CASES[index][0])
    return _DFAS[index]


@settings(max_examples=200, deadline=None)
@given(lo=st.decimals(-1000, 1000, places=3, allow_nan=False), width=st.decimals(0, 50, places=2),
       value=st.decimals(-1100, 1100, places=4, allow_nan=False), excl=st.booleans())
def test_decimal_bounds_agree_with_jsonschema(lo, width, value, excl) -> None:
    schema = {"type": "number", ("exclusiveMinimum" if excl else "minimum"): float(lo),
              "maximum": float(lo + width)}
    try:
        dfa = compile_dfa(schema_to_pattern(schema))
    except Exception:  # an empty range
        return
    text = format(value, "f")  # e.g. "12.3400": a JSON number with trailing zeros, as a model may write it
    parsed = json.loads(text)
    if dfa.accepts(text.encode()):
        assert oracle(schema).is_valid(parsed), (schema, text)


@settings(max_examples=100, deadline=None)
@given(step=st.integers(2, 40), k=st.integers(-10**6, 10**6))
def test_integer_multiple_of_is_exact(step: int, k: int) -> None:
    dfa = compile_dfa(schema_to_pattern({"type": "integer", "multipleOf": step}))
    assert dfa.accepts(str(k).encode()) == (k % step == 0)


@pytest.mark.parametrize(
    ("schema", "keyword"),
    [
        ({"not": {"multipleOf": 0.3}}, "not"),
        ({"type": "object", "maxProperties": 600, "not": {"additionalProperties": False}}, "maxProperties"),
        ({"not": {"uniqueItems": True}}, "not"),
        ({"not": {"format": "email"}}, "not"),
        ({"type": "number", "multipleOf": 0.3}, "multipleOf"),
        ({"type": "string", "format": "regex"}, "format"),
        ({"type": "string", "format": "ipv6"}, "format"),
    ],
)
def test_what_cannot_be_exact_is_refused_with_a_reason(schema, keyword) -> None:
    with pytest.raises(UnsupportedSchemaError) as err:
        schema_to_pattern(schema)
    assert err.value.keyword == keyword


def test_a_number_language_is_remembered_by_its_keywords_and_errors_name_each_path() -> None:
    percent = {"type": "number", "minimum": 0, "maximum": 99.99, "multipleOf": 0.01}
    schema_keywords.number_language.cache_clear()
    dfa = compile_dfa(schema_to_pattern({"type": "object", "properties": {"a": percent, "b": dict(percent)}}))
    assert schema_keywords.number_language.cache_info().hits == 1  # b's language is a's
    assert dfa.accepts(b'{"a":12.5,"b":0.25}') and not dfa.accepts(b'{"a":12.5,"b":100}')
    assert not dfa.accepts(b'{"a":1.0,"b":1.001}')
    bad = {"type": "number", "multipleOf": 0.3}
    for name in ("x", "y"):
        with pytest.raises(UnsupportedSchemaError) as err:
            schema_to_pattern({"type": "object", "properties": {name: bad}})
        assert err.value.path == f"#/properties/{name}"


def test_internal_keywords_only_narrow() -> None:
    assert schema_keywords.NOT_STRINGS in schema_keywords.INTERNAL_KEYWORDS
    dfa = compile_dfa(schema_to_pattern({"type": "string", schema_keywords.NOT_STRINGS: ["a"]}))
    assert not dfa.accepts(b'"a"') and dfa.accepts(b'"b"')
