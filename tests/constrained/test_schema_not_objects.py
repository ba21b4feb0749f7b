"""``not`` of the object keywords, built exactly: additionalProperties, patternProperties, propertyNames and object
literals (``SOME_MEMBER``: some member whose key is in K and whose value is in V), and oneOf branches found disjoint
by their names instead of negated.

For every schema, in both property orders: what the grammar accepts validates (DFA random walks, rule-mode random
documents), and each hypothesis instance (members outside the allowed set, keys matching and missing the patterns,
objects one key away from the literal) is accepted exactly when jsonschema says it is valid.
"""

from __future__ import annotations

import json
import pathlib
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constrained.errors import InvalidSchemaError, UnsupportedSchemaError
from constrained.fsm import compile_dfa
from constrained.pushdown import PushdownGrammar
from constrained.grammar import compile_rules
from constrained.schema import schema_to_pattern, schema_to_rules
from constrained.frontends.json_schema.vocabulary import SOME_MEMBER

from .test_pushdown import _checked_random_document, _walk_checking_budgets
from .test_schema import dfa_sample, oracle

SCHEMAS = {
    "additional": {  # some member not "a", matching no "^x", whose value is no integer ("b" always is one)
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
        "not": {"properties": {"a": {}}, "patternProperties": {"^x": {}}, "additionalProperties": {"type": "integer"}},
    },
    "pattern": {  # some member whose key starts with x and whose value is no integer
        "type": "object",
        "properties": {"xa": {"type": ["integer", "string"]}, "c": {"type": "integer"}},
        "additionalProperties": {"type": ["integer", "null"]},
        "not": {"patternProperties": {"^x": {"type": "integer"}}},
    },
    "names": {  # some key longer than one character
        "type": "object",
        "properties": {"ab": {"type": "integer"}, "c": {"type": "boolean"}},
        "not": {"propertyNames": {"maxLength": 1}},
    },
    "literal": {  # any object but these two
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}},
        "additionalProperties": {"type": ["integer", "null"]},
        "not": {"enum": [{"a": 1, "b": True}, {"a": 2}]},
    },
    "closed_literal": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}},
        "additionalProperties": False,
        "not": {"const": {"a": 1, "b": True}},
    },
    "two_witnesses": {  # some key holding an "a" and some key holding a "b" (one key may hold both)
        "type": "object",
        "properties": {"c": {}},
        "additionalProperties": {"type": "integer"},
        "not": {"anyOf": [{"propertyNames": {"pattern": "^[^a]*$"}}, {"propertyNames": {"pattern": "^[^b]*$"}}]},
    },
    "counted": {  # two to three members, one of them a key of two characters or more
        "type": "object",
        "properties": {"a": {"type": "integer"}, "c": {}},
        "additionalProperties": {"type": ["integer", "boolean"]},
        "minProperties": 2,
        "maxProperties": 3,
        "not": {"propertyNames": {"maxLength": 1}},
    },
    "counted_two": {  # at most two members, keys holding "a" and "b" among them (one key may hold both)
        "type": "object",
        "properties": {"c": {}},
        "additionalProperties": {"type": "integer"},
        "maxProperties": 2,
        "not": {"anyOf": [{"propertyNames": {"pattern": "^[^a]*$"}}, {"propertyNames": {"pattern": "^[^b]*$"}}]},
    },
    "disjoint_one_of": {  # Github_trivial---o83137's shape: "error" is forbidden by the first branch
        "type": "object",
        "oneOf": [
            {"properties": {"locks": {"type": "array"}, "next": {"type": "string"}}, "additionalProperties": False,
             "required": ["locks"]},
            {"properties": {"locks": {"type": "null"}, "error": {"type": "string"}}, "additionalProperties": False,
             "required": ["error"]},
        ],
    },
}

MERGED = {
    "open": {"type": "object", "allOf": [
        {"patternProperties": {"^a": {"type": "integer"}}, "properties": {"c": {"type": "integer"}}},
        {"patternProperties": {"b$": {"minimum": 0}, "^a": {"maximum": 2}}, "properties": {"ab": {"maximum": 1}}},
    ]},
    "closed": {"type": "object", "allOf": [
        {"patternProperties": {"^x": {"type": "integer"}}, "properties": {"a": {}, "b": {"type": "integer"}},
         "additionalProperties": False},
        {"patternProperties": {"^x": {"minimum": 0}}, "properties": {"b": {"maximum": 1}}},
    ]},
}  # fmt: skip
"""patternProperties merged across allOf members beside other property keywords."""

KEYS = ["a", "b", "c", "ab", "xa", "xb", "x", "ba", "locks", "next", "error", "zz"]
"""Keys listed by some schema, matching ^x or not, one character or more, holding a or b or neither."""

values = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["", "s", "a"]),
                   st.just([]), st.just({}))
objects = st.dictionaries(st.sampled_from(KEYS), values, max_size=4)


@st.composite
def near_literals(draw) -> dict:
    """A literal of the "literal" schemas, or it with one key dropped, added or changed."""
    literal = dict(draw(st.sampled_from([{"a": 1, "b": True}, {"a": 2}])))
    change = draw(st.sampled_from(["same", "drop", "add", "change"]))
    if change == "drop":
        literal.pop(draw(st.sampled_from(sorted(literal))))
    elif change == "add":
        literal[draw(st.sampled_from(["b", "c", "zz"]))] = draw(values)
    elif change == "change":
        literal[draw(st.sampled_from(sorted(literal)))] = draw(values)
    return literal


instances = st.one_of(objects, near_literals(), values)


def _in_schema_order(schema: dict, value):
    """``value`` with its listed keys first, in the schema's order (what the default property order spells)."""
    if not isinstance(value, dict):
        return value
    listed = list(schema.get("properties", {}))
    return dict(sorted(value.items(), key=lambda kv: listed.index(kv[0]) if kv[0] in listed else len(listed)))


def _text(value) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


_DFAS: dict[str, object] = {}
_GRAMMARS: dict[tuple[str, str, str], PushdownGrammar] = {}


def _dfa(name: str):
    if name not in _DFAS:
        _DFAS[name] = compile_dfa(schema_to_pattern(SCHEMAS[name]))
    return _DFAS[name]


def _rules(name: str, vocab, order: str) -> PushdownGrammar:
    """Rule mode, the object nested one level down (a rule of its own)."""
    key = (name, order, vocab.fingerprint)
    if key not in _GRAMMARS:
        wrapped = {"type": "object", "properties": {"v": SCHEMAS[name]}, "required": ["v"],
                   "additionalProperties": False}
        rules, start = schema_to_rules(wrapped, whitespace="compact", property_order=order)
        _GRAMMARS[key] = compile_rules(rules, start, vocab)
    return _GRAMMARS[key]


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_dfa_samples_validate(name):
    validator, rng = oracle(SCHEMAS[name]), random.Random(name)
    for _ in range(60):
        text = dfa_sample(_dfa(name), rng, soft_limit=200)
        assert validator.is_valid(json.loads(text)), (name, text)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(value=instances)
def test_schema_order_accepts_exactly_the_valid_instances(name, value):
    schema = SCHEMAS[name]
    value = _in_schema_order(schema, value)
    assert _dfa(name).accepts(_text(value)) == oracle(schema).is_valid(value), (name, value)


@pytest.mark.parametrize("order", ["schema", "any"])
@pytest.mark.parametrize("name", sorted(SCHEMAS))
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(value=instances, data=st.data())
def test_rule_mode_accepts_exactly_the_valid_instances(qwen2_vocab, order, name, value, data):
    schema = SCHEMAS[name]
    if order == "any" and isinstance(value, dict) and not {"minProperties", "maxProperties"} & set(schema):  # counted: schema order
        keys = data.draw(st.permutations(list(value)))
        value = {key: value[key] for key in keys}
    else:
        value = _in_schema_order(schema, value)
    accepted = _rules(name, qwen2_vocab, order).accepts(_text({"v": value}))
    assert accepted == oracle(schema).is_valid(value), (name, order, value)


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("name", ["additional", "literal", "two_witnesses"])
def test_any_order_random_documents_validate_and_budgets_close(llama3_vocab, qwen2_vocab, name, seed):
    """The witness is a member called once, which the closing brace needs: random documents validate, and every
    budgeted mask keeps exactly the tokens whose completion fits (the bound chain owes the witness)."""
    text, _ = _checked_random_document(_rules(name, llama3_vocab, "any"), llama3_vocab, 60, seed, b'{},"')
    assert oracle(SCHEMAS[name]).is_valid(json.loads(text)["v"]), text
    _walk_checking_budgets(_rules(name, qwen2_vocab, "any"), 40, seed)


def test_disjoint_branches_need_no_negation():
    """The branches of a oneOf that one requires a name the other forbids are disjoint: no ``not`` is built, so a
    branch whose negation cannot be built (¬items) is no obstacle."""
    schema = {"type": "object", "oneOf": [
        {"properties": {"p": {"type": "array", "items": {"type": "string"}}}, "additionalProperties": False,
         "required": ["p"]},
        {"properties": {"q": {"type": "array", "items": {"type": "string"}}}, "additionalProperties": False,
         "required": ["q"]},
    ]}  # fmt: skip
    dfa = compile_dfa(schema_to_pattern(schema))
    assert dfa.accepts(b'{"p":["a"]}') and dfa.accepts(b'{"q":[]}') and not dfa.accepts(b'{"p":[],"q":[]}')
    overlapping = {"type": "object", "oneOf": [
        {"properties": {"p": {"type": "array", "items": {"type": "string"}}}, "additionalProperties": False},
        {"properties": {"q": {"type": "array", "items": {"type": "string"}}}, "additionalProperties": False},
    ]}  # fmt: skip
    dfa = compile_dfa(schema_to_pattern(overlapping))  # {} is in both; p's negation within q's branch: not built
    assert not dfa.accepts(b"{}") and dfa.accepts(b'{"p":[1]}') is False and dfa.accepts(b'{"p":["a"]}')
    both_may_hold_p = {"type": "object", "oneOf": [
        {"properties": {"p": {"type": "array", "items": {"type": "string"}}}},
        {"properties": {"p": {"type": "array"}}, "additionalProperties": False}]}  # fmt: skip
    dfa = compile_dfa(schema_to_pattern(both_may_hold_p))  # ¬items is built (a contains of a non-string)
    assert dfa.accepts(b'{"p":[1]}') and dfa.accepts(b'{"x":1}') and not dfa.accepts(b'{"p":["a"]}')


def test_some_member_only_narrows_and_jsonschema_reads_it():
    """The internal keyword next to an enum: the candidates are filtered by a validator that understands it."""
    schema = {"enum": [{"a": 1}, {"b": 1}, {"ab": 2}], SOME_MEMBER: [[{"type": "string", "minLength": 2}, True]]}
    dfa = compile_dfa(schema_to_pattern(schema))
    assert dfa.accepts(b'{"ab":2}') and not dfa.accepts(b'{"a":1}') and not dfa.accepts(b'{"b":1}')
    counted = {"type": "object", "maxProperties": 600, "not": {"additionalProperties": False}}  # gaps counted
    with pytest.raises(UnsupportedSchemaError) as err:
        schema_to_pattern(counted)
    assert err.value.keyword == "maxProperties"


@pytest.mark.parametrize("name", sorted(MERGED))
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(value=objects)
def test_pattern_properties_merged_across_all_of_are_exact(name, value):
    schema = MERGED[name]
    if name not in _DFAS:
        _DFAS[name] = compile_dfa(schema_to_pattern(schema))
    listed = {"open": ["c", "ab"], "closed": ["a", "b"]}[name]  # the merged node's names, in order
    ordered = _in_schema_order({"properties": dict.fromkeys(listed)}, value)
    assert _DFAS[name].accepts(_text(ordered)) == oracle(schema).is_valid(value), (name, value)


def test_pattern_properties_beside_additional_properties_of_the_other_member_are_refused():
    """additionalProperties of one member would meet keys the other's patterns take: no flat node says that."""
    with pytest.raises(UnsupportedSchemaError) as err:
        schema_to_pattern({"allOf": [{"properties": {"a": {}}, "additionalProperties": False},
                                     {"patternProperties": {"^x": {}}}]})
    assert err.value.keyword == "patternProperties"


CORPUS = pathlib.Path("/work/shared/corpus/maskbench-dev")
NEWLY_COMPILED = [
    "Github_hard---o79008", "Github_trivial---o83137", "Github_ultra---o41081", "Github_ultra---o65421",
    "JsonSchemaStore---dart-test", "JsonSchemaStore---ubuntu-server-autoinstall", "Snowplow---sp_311_Normalized",
    "Synthesized---draft2019_09_valid_patternProperties_id19_subschema1_not_2",
    "Synthesized---draft2019_09_valid_properties_id8_subschema1_not_2", "Handwritten---object10",
    "Github_hard---o35186", "JsonSchemaStore---machine.schema",
]
"""Dev-corpus schemas refused before the object negations, the patternProperties merge, the disjointness by names
and by an enum's values a literal pattern misses (the last two: state machines, recursive)."""


@pytest.mark.skipif(not CORPUS.exists(), reason="maskbench-dev corpus absent")
@pytest.mark.filterwarnings("ignore::constrained.errors.UnknownKeywordWarning")
@pytest.mark.parametrize("name", NEWLY_COMPILED)
def test_newly_compiled_corpus_schemas_are_exact_on_their_tests(qwen2_vocab, name):
    """Any property order: the corpus's valid instances are accepted, its invalid ones refused, and random
    documents validate."""
    doc = json.loads((CORPUS / f"{name}.json").read_text(encoding="utf-8"))
    rules, start = schema_to_rules(doc["schema"], whitespace="compact", property_order="any",
                                   unknown_keywords="annotation")
    grammar = compile_rules(rules, start, qwen2_vocab)
    validator = oracle(doc["schema"])
    for test in doc["tests"]:
        text = json.dumps(test["data"], ensure_ascii=False, separators=(",", ":")).encode()
        assert grammar.accepts(text) == test["valid"], (name, text[:200])
    rng = random.Random(name)
    for _ in range(3):
        matcher, text = grammar.matcher(max_tokens=400), b""
        while not matcher.is_terminated():
            token_id = rng.choice(matcher.allowed_token_ids().tolist())
            assert matcher.advance(token_id)
            if token_id in qwen2_vocab.eos_token_ids:
                break
            text += qwen2_vocab.tokens[token_id]
        errors = [e.message for e in validator.iter_errors(json.loads(text))]
        assert not errors, (name, text[:300], errors[:3])


# -- recursion under negation, disjointness by literal patterns, unsatisfiable products ----------------------------

TREE = {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {"type": "array",
        "items": {"$ref": "#/definitions/tree"}}}, "required": ["v"], "additionalProperties": False}
WIDE = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/definitions/wide"}}}}
RECURSIVE = {
    # objects that are not trees: v missing or no integer, another key, or some kid, however deep, not a tree
    "not_tree": {"definitions": {"tree": TREE}, "type": "object", "not": {"$ref": "#/definitions/tree"}},
    # exactly one: a tree whose v is no positive integer, or an object with a positive v that is no tree
    "one_of_overlapping": {"definitions": {"tree": TREE},
                           "oneOf": [{"$ref": "#/definitions/tree"},
                                     {"type": "object", "properties": {"v": {"type": "integer", "minimum": 1}}}]},
}
"""Negations that reach their own ``$ref`` target again: the negation refers to itself (a rule of its own)."""

_NEAR_TREES = st.recursive(
    st.fixed_dictionaries({}, optional={"v": st.one_of(st.integers(0, 2), st.just("a")), "x": st.just(1)}),
    lambda kids: st.fixed_dictionaries({}, optional={"v": st.one_of(st.integers(0, 2), st.just("a")),
                                                     "kids": st.one_of(st.lists(kids, max_size=2), st.just(3)),
                                                     "x": st.just(1)}),
    max_leaves=6)
"""Trees, and objects one or more keys away from one at any depth (v missing, 0 or a string, an extra x, kids no
array)."""

_RECURSIVE_GRAMMARS: dict[tuple[str, str], PushdownGrammar] = {}


@pytest.mark.parametrize("order", ["schema", "any"])
@pytest.mark.parametrize("name", sorted(RECURSIVE))
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(value=_NEAR_TREES)
def test_negation_of_a_recursive_ref_is_exact(qwen2_vocab, order, name, value):
    schema = RECURSIVE[name]
    if (name, order) not in _RECURSIVE_GRAMMARS:
        rules, start = schema_to_rules(schema, whitespace="compact", property_order=order)
        _RECURSIVE_GRAMMARS[name, order] = compile_rules(rules, start, qwen2_vocab)
    accepted = _RECURSIVE_GRAMMARS[name, order].accepts(_text(value))
    if order == "any":
        assert accepted == oracle(schema).is_valid(value), (name, order, value)
    else:  # a negation's object lists only the member that fails, so a valid document may spell another order
        assert not accepted or oracle(schema).is_valid(value), (name, order, value)


def test_a_negation_name_in_a_user_schema_is_no_reference():
    """``not(<pointer>)`` names a negation only where the compiler wrote it: a user's ``$ref`` of that text, met
    after the negation was built, is refused as a non-local reference (no validator could resolve it)."""
    schema = {"definitions": {"tree": TREE}, "type": "object", "not": {"$ref": "#/definitions/tree"},
              "properties": {"p": {"$ref": "not(#/definitions/tree)"}}}
    with pytest.raises(UnsupportedSchemaError, match="only local JSON-pointer references") as err:
        schema_to_rules(schema, whitespace="compact")
    assert err.value.keyword == "$ref"
    for ref in (["#/definitions/tree"], {"not": 1}, 3):  # no string: the schema is invalid, not the compiler broken
        with pytest.raises(InvalidSchemaError, match="must be a string"):
            schema_to_rules({**schema, "properties": {"p": {"$ref": ref}}}, whitespace="compact")


def test_an_intersection_of_two_recursive_refs_is_refused():
    """Every tree is wide, so exactly one of them is a wide object that is no tree: its kids' items are wide ∧ ¬tree,
    two recursions met in one value, which one rule call cannot say (a product of the two is not built)."""
    schema = {"definitions": {"tree": TREE, "wide": WIDE},
              "oneOf": [{"$ref": "#/definitions/tree"}, {"$ref": "#/definitions/wide"}]}
    with pytest.raises(UnsupportedSchemaError, match="recurses under sibling keywords") as err:
        schema_to_rules(schema, whitespace="compact")
    assert err.value.keyword == "$ref"


def test_branches_whose_enum_a_literal_pattern_narrows_need_no_negation(qwen2_vocab):
    """An enum's values a branch's literal pattern misses are no values of it (the state machines' ``type``): the
    branches are disjoint, so ¬uniqueItems, which cannot be built, is never needed."""
    base = {"type": "object", "properties": {"type": {"enum": ["atomic", "final"]},
                                             "tags": {"type": "array", "items": {"enum": [1, 2, 3]},
                                                      "uniqueItems": True}}, "required": ["type"]}
    schema = {"oneOf": [{"allOf": [base, {"properties": {"type": {"pattern": "atomic"}}}]},
                        {"allOf": [base, {"properties": {"type": {"pattern": "final"}}}]}]}
    grammar = compile_rules(*schema_to_rules(schema, whitespace="compact"), qwen2_vocab)
    assert grammar.accepts(b'{"type":"atomic"}') and grammar.accepts(b'{"type":"final","tags":[1,2]}')
    assert not grammar.accepts(b'{"type":"other"}') and not grammar.accepts(b'{"type":"final","tags":[1,1]}')
    overlapping = {"oneOf": [{"allOf": [base, {"properties": {"type": {"pattern": "a"}}}]},
                             {"allOf": [base, {"properties": {"type": {"pattern": "final"}}}]}]}
    with pytest.raises(UnsupportedSchemaError) as err:  # "final" holds an "a": the branches overlap
        schema_to_rules(overlapping, whitespace="compact")
    assert err.value.keyword == "not"


def test_an_unsatisfiable_product_is_dropped_at_its_first_contradiction():
    """Six anyOf of twenty string alternatives beside ``type: integer``: 20**6 combinations, none satisfiable,
    found so after the first member instead of by walking them all."""
    strings = {"anyOf": [{"type": "string", "minLength": i} for i in range(20)]}
    with pytest.raises(InvalidSchemaError, match="no JSON document"):
        schema_to_rules({"type": "integer", "allOf": [strings] * 6}, whitespace="compact")
