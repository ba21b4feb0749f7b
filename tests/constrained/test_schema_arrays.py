"""Arrays and numbers under negation: ``contains`` (min/maxContains), ``not`` of items / prefixItems /
additionalItems / contains / array literals, ``not multipleOf`` and ``uniqueItems`` over a finite item language (rule
mode). Every document the grammar accepts validates with jsonschema; valid documents drawn are accepted and invalid
ones rejected; what cannot be exact is refused with a reason."""

from __future__ import annotations

import json
import pathlib
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constrained import compile_json_schema
from constrained.errors import UnsupportedSchemaError
from constrained.fsm import compile_dfa
from constrained.frontends.json_schema.policy import PatternApproximates
from constrained.pushdown import PushdownGrammar
from constrained.schema import schema_to_pattern, schema_to_rules
from tests.constrained.test_schema import dfa_sample, oracle

DRAFT7 = "http://json-schema.org/draft-07/schema#"
CASES = [
    ({"type": "array", "contains": {"type": "integer"}}, [[1], ["a", 1], [1, "a"], ["a", "b", 2, "c"]],
     [[], ["a"], [None, "b"]]),
    ({"type": "array", "contains": {"type": "integer"}, "minContains": 2, "maxContains": 3},
     [[1, 2], [1, "a", 2], [1, 2, 3]], [[1], [1, 2, 3, 4], ["a", 1, "b"]]),
    ({"type": "array", "contains": {"const": 5}, "minContains": 0, "maxContains": 1}, [[], [1], [5], [1, 5, 2]],
     [[5, 5], [5, 1, 5]]),
    ({"type": "array", "prefixItems": [{"type": "string"}], "contains": {"type": "integer"}, "maxItems": 3},
     [["a", 1], ["a", "b", 1]], [["a"], ["a", "b", "c", 1], [], [1]]),
    ({"type": "array", "items": {"type": ["integer", "string"]}, "contains": {"type": "string"}, "minItems": 3},
     [[1, 2, "a"], ["a", "b", "c"]], [[1, "a"], [1, 2, 3], [None, "a", "b"]]),
    ({"type": "array", "allOf": [{"contains": {"type": "integer"}}, {"contains": {"type": "null"}}],
      "items": {"type": ["integer", "null", "boolean"]}},
     [[1, None], [None, True, 1]], [[1, 2], [None], [True]]),
    ({"type": "array", "not": {"items": {"type": "integer"}}}, [["a"], [1, "a"], [1, 2, None]], [[], [1], [1, 2]]),
    ({"type": "array", "not": {"prefixItems": [{"type": "string"}], "items": {"type": "integer"}}},
     [[1], ["a", "b"], [None, 2], ["a", 1, None]], [[], ["a"], ["a", 1], ["a", 1, 2]]),
    ({"type": "array", "not": {"prefixItems": [{"type": "string"}, {"type": "integer"}]}},
     [[1], ["a", "b"], [1, 2, 3]], [[], ["a"], ["a", 1], ["a", 1, "x"]]),
    ({"$schema": DRAFT7, "not": {"items": [{"type": "string"}], "additionalItems": {"type": "integer"}}},
     [[1], ["a", "b"], ["a", 1, None]], [[], ["a"], ["a", 1], 3, "x"]),
    ({"type": "array", "not": {"contains": {"type": "integer"}}}, [[], ["a"], [None, "b"]], [[1], ["a", 1]]),
    ({"not": {"enum": [[1, "x"], []]}}, [[1], [1, "y"], [2, "x"], [1, "x", 3], 3, "a", None], [[1, "x"], []]),
    ({"type": "array", "items": {"type": ["integer", "string"]}, "not": {"enum": [[1, "x"], [2, "x"], [1, "y"]]}},
     [[3, "x"], [2, "y"], [1], [1, "x", 1]], [[1, "x"], [2, "x"], [1, "y"], "x"]),
    ({"allOf": [{"enum": [[1, "x"], [1, 2]]}, {"not": {"items": {"type": "integer"}}}]}, [[1, "x"]], [[1, 2]]),
    ({"type": "integer", "not": {"multipleOf": 3}}, [1, 2, -4, 10], [0, 3, -3, 9, 1.5]),
    ({"not": {"multipleOf": 3}}, [1, 1.5, -0.25], [0, 3, "a", None, [1]]),
    ({"type": "number", "not": {"multipleOf": 0.5}}, [1.25, 0.3, 2.75, -0.125], [0, 1, 1.5, -0.5]),
    ({"type": "number", "not": {"multipleOf": 2.0}}, [1, 3, 1.5], [0, 2, -4]),
    ({"not": {"type": "number", "minimum": 1, "maximum": 12, "multipleOf": 1}}, [0, 13, 1.5, "x"], [1, 12, 7]),
]


def _compact(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


_DFAS: dict[int, object] = {}


def _dfa(index: int):
    if index not in _DFAS:
        _DFAS[index] = compile_dfa(schema_to_pattern(CASES[index][0]))
    return _DFAS[index]


@pytest.mark.parametrize("index", range(len(CASES)), ids=lambda i: json.dumps(CASES[i][0])[:60])
def test_listed_instances_are_exact_and_samples_validate(index) -> None:
    schema, valid, invalid = CASES[index]
    dfa, validator = _dfa(index), oracle(schema)
    for value in valid:
        assert validator.is_valid(value), value
        assert dfa.accepts(_compact(value)), (schema, value)
    for value in invalid:
        assert not validator.is_valid(value), value
        assert not dfa.accepts(_compact(value)), (schema, value)
    rng = random.Random(index)
    for _ in range(80):
        text = dfa_sample(dfa, rng, soft_limit=120)
        assert validator.is_valid(json.loads(text)), (schema, text)


_scalars = st.none() | st.booleans() | st.integers(-20, 20) | st.sampled_from(["a", "x", 0.5, 1.25, -2.5])
_elements = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=2), max_leaves=3)
_values = st.lists(_elements, max_size=5) | _scalars
"""Arrays with and without witnesses (integers, strings, nulls), short and long, and non-arrays; no integral float
(1.0 is spelled one way only: checked for soundness below)."""


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(index=st.integers(0, len(CASES) - 1), value=_values)
def test_drawn_values_are_accepted_exactly_when_valid(index: int, value) -> None:
    assert _dfa(index).accepts(_compact(value)) == oracle(CASES[index][0]).is_valid(value), (CASES[index][0], value)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(index=st.integers(0, len(CASES) - 1), value=st.lists(st.floats(-5, 5) | st.integers(-5, 5), max_size=4))
def test_integral_floats_are_never_wrongly_accepted(index: int, value) -> None:
    if _dfa(index).accepts(_compact(value)):
        assert oracle(CASES[index][0]).is_valid(value)


@settings(max_examples=200, deadline=None)
@given(step=st.integers(2, 40), k=st.integers(-10**6, 10**6), off=st.integers(0, 39))
def test_not_multiple_of_is_the_residues_other_than_zero(step: int, k: int, off: int) -> None:
    dfa = _step_dfa(step)
    n = k * step + off % step
    assert dfa.accepts(str(n).encode()) == (n % step != 0)
    assert dfa.accepts(f"{n}.5".encode())  # a non-integer is never a multiple of an integer


_STEP_DFAS: dict[int, object] = {}


def _step_dfa(step: int):
    if step not in _STEP_DFAS:
        _STEP_DFAS[step] = compile_dfa(schema_to_pattern({"type": "number", "not": {"multipleOf": step}}))
    return _STEP_DFAS[step]


# -- uniqueItems: rule mode ------------------------------------------------------------------------------------------

UNIQUE = {"type": "array", "items": {"enum": ["GET", "POST", 1, 1.0, True, None]}, "uniqueItems": True, "minItems": 1}
UNIQUE_RANGE = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 5}, "uniqueItems": True,
                "maxItems": 3}


@pytest.fixture(scope="module")
def unique_grammars(qwen2_vocab):
    grammars = {}
    for name, schema in (("enum", UNIQUE), ("range", UNIQUE_RANGE)):
        grammar = compile_json_schema(schema, qwen2_vocab, "compact")
        assert isinstance(grammar, PushdownGrammar)
        grammars[name] = grammar
    return grammars


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(value=st.lists(st.sampled_from(["GET", "POST", 1, 1.0, True, None, False, "PUT"]), max_size=7))
def test_unique_enum_items_are_accepted_exactly_when_valid(unique_grammars, value) -> None:
    """Duplicates (1 and 1.0 are one value) and values outside the enum are refused. 1.0 has one spelling in the
    language (1): a valid array spelling it 1.0 may be refused, never an invalid one accepted."""
    accepted, valid = unique_grammars["enum"].accepts(_compact(value)), oracle(UNIQUE).is_valid(value)
    if accepted:
        assert valid, value
    elif valid:
        assert any(isinstance(v, float) for v in value), value


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(value=st.lists(st.integers(-1, 6), max_size=5))
def test_unique_integer_range_is_exact(unique_grammars, value) -> None:
    assert unique_grammars["range"].accepts(_compact(value)) == oracle(UNIQUE_RANGE).is_valid(value), value


@pytest.mark.parametrize("seed", range(3))
def test_random_unique_documents_validate(qwen2_vocab, unique_grammars, seed) -> None:
    from tests.constrained.test_pushdown import _checked_random_document

    text, _ = _checked_random_document(unique_grammars["enum"], qwen2_vocab, 40, seed, b'[],"')
    assert oracle(UNIQUE).is_valid(json.loads(text)), text


def test_unique_items_need_rules_and_pattern_mode_says_so() -> None:
    with pytest.raises(PatternApproximates) as err:
        schema_to_pattern(UNIQUE, exact=True)
    assert err.value.keyword == "uniqueItems"
    rules, _ = schema_to_rules(UNIQUE)
    assert sum("once=" in body for body in rules.values()) == 1


@pytest.mark.parametrize(("schema", "keyword", "reason"), [
    ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "uniqueItems", "not a context-free"),
    ({"type": "array", "uniqueItems": True}, "uniqueItems", "not a context-free"),
    ({"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 100}, "uniqueItems": True},
     "uniqueItems", "at most 64"),
    ({"type": "array", "items": {"enum": list(range(65))}, "uniqueItems": True}, "uniqueItems", "64"),
    ({"not": {"multipleOf": 0.3}}, "not", "multipleOf"),
    ({"not": {"enum": [[1, 2, 3, 4], [2, 2, 3, 4], [3, 2, 3, 4], [4, 2, 3, 4], [5, 2, 3, 4]]}}, "not", "array literals"),
    ({"type": "array", "contains": {"type": "integer"}, "maxItems": 200, "minContains": 3,
      "items": {"type": ["integer", "string"]}}, "contains", "explode"),
])  # fmt: skip
def test_what_cannot_be_exact_is_refused_with_a_reason(schema, keyword, reason) -> None:
    with pytest.raises(UnsupportedSchemaError) as err:
        schema_to_rules(schema)
    assert err.value.keyword == keyword and reason in str(err.value), err.value


DEV = pathlib.Path("/work/shared/corpus/maskbench-dev")


@pytest.mark.parametrize("name", ["Handwritten---oneofanyofitc6",
                                  "Synthesized---draft2019_09_valid_items_id2_subschema1_not_2",
                                  "Synthesized---draft2019_09_valid_const_id23_subschema1_not_2",
                                  "JsonSchemaStore---proxies"])
def test_dev_corpus_schemas_compile_and_pass_their_tests(qwen2_vocab, name) -> None:
    path = DEV / f"{name}.json"
    if not path.exists():
        pytest.skip("the dev corpus is not here")
    doc = json.loads(path.read_text())
    grammar = compile_json_schema(doc["schema"], qwen2_vocab, "flexible", property_order="any")
    for test in doc["tests"]:
        text = json.dumps(test["data"], indent=2).encode()
        assert grammar.accepts(text) == test["valid"], test["data"]


METHODS = {"type": "array", "items": {"enum": ["GET", "POST", "PUT", "DELETE", "HEAD", "PATCH"]}, "uniqueItems": True,
           "minItems": 3}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("slack", [0, 1, 3])
def test_tight_budgets_finish_with_distinct_values(qwen2_vocab, slack, seed) -> None:
    """The budget's bound reads the markers: after a value, the cheapest completion uses values still unused, so a
    walk at (or just above) the smallest budget is never stranded."""
    from constrained.errors import BudgetTooSmallError
    from tests.constrained.test_pushdown import _checked_random_document

    grammar = compile_json_schema(METHODS, qwen2_vocab, "compact")
    with pytest.raises(BudgetTooSmallError) as err:
        grammar.matcher(max_tokens=1)
    smallest = int(str(err.value).split("(")[1].split()[0])
    text, matcher = _checked_random_document(grammar, qwen2_vocab, smallest + slack, seed, b'[],"')
    assert matcher.is_terminated() and oracle(METHODS).is_valid(json.loads(text)), text
