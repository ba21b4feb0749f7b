"""Language operations (fsm.intersection / fsm.difference), the embedded-automaton syntax ``(?@...)``, and what the
schema compiler builds with them: string ``pattern``/``format`` intersected with each other and with lengths, and
``patternProperties`` (keys split by the patterns, the rest governed by additionalProperties)."""

from __future__ import annotations

import json
import pathlib
import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constrained import fsm, regex
from constrained.automata import operations as automata_operations
from constrained.errors import GrammarTooLargeError, RegexSyntaxError, UnsupportedSchemaError
from constrained.fsm import compile_dfa
from constrained.schema import schema_to_pattern
from tests.constrained.fsm_reference import compile_dfa_reference
from tests.constrained.test_schema import _reordered, dfa_sample, oracle

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
CORPUS = pathlib.Path("/work/shared/corpus/maskbench-dev")

LANGUAGES = ["(?:ab|b)*", "a*b?", "[ab]{2,3}", "(?:a|bé)+", "é?[a-c]*", "[^a]*", "b(?:a|b)*a", "(?:aa)*", "a|ba|é"]
ALPHABET = "abcé"
UNIVERSE = "(?:[abc]|é)*"


def accepts(dfa: fsm.DFA | None, text: str) -> bool:
    return dfa is not None and dfa.accepts(text.encode("utf-8"))


@SETTINGS
@given(a=st.sampled_from(LANGUAGES), b=st.sampled_from(LANGUAGES), words=st.lists(st.text(ALPHABET, max_size=7)))
def test_intersection_and_complement_agree_with_their_definitions(a: str, b: str, words: list[str]) -> None:
    da, db, universe = compile_dfa(a), compile_dfa(b), compile_dfa(UNIVERSE)
    both, outside = fsm.intersection(da, db), fsm.difference(universe, da)
    for word in words + ["", "a", "b", "ab", "ba", "bé", "é"]:
        assert accepts(both, word) == (accepts(da, word) and accepts(db, word)), (a, b, word)
        assert accepts(outside, word) == (accepts(universe, word) and not accepts(da, word)), (a, word)


@SETTINGS
@given(a=st.sampled_from(LANGUAGES), b=st.sampled_from(LANGUAGES))
def test_results_are_minimal_canonical_and_survive_the_text_round_trip(a: str, b: str) -> None:
    both = fsm.intersection(compile_dfa(a), compile_dfa(b))
    if both is None:
        return
    text = regex.automaton_text(fsm.automaton(both))
    again = compile_dfa(text)
    assert again.fingerprint == both.fingerprint == compile_dfa_reference(text).fingerprint
    assert fsm.intersection(both, both).fingerprint == both.fingerprint


def test_an_empty_result_is_none_and_budgets_are_enforced() -> None:
    assert fsm.intersection(compile_dfa("a+"), compile_dfa("b+")) is None
    assert fsm.difference(compile_dfa("a*"), compile_dfa("a*")) is None
    with pytest.raises(GrammarTooLargeError):
        fsm.intersection(compile_dfa("[ab]*a[ab]{9}"), compile_dfa("[ab]*"), max_states=100)


def test_the_product_budget_is_enforced_before_minimizing(monkeypatch) -> None:
    monkeypatch.setattr(automata_operations, "MAX_PRODUCT_STATES", 50)
    with pytest.raises(GrammarTooLargeError) as caught:
        fsm.intersection(compile_dfa("[ab]*a[ab]{6}"), compile_dfa("[ab]*b[ab]{6}"))
    assert caught.value.what == "product_states"


@pytest.mark.parametrize("text", ["(?@61>0,61>0)", "(?@!61>0,62>0)", "(?@!61>00)", "(?@!!)", "(?@61>2)", "(?@A>0)",
                                  "(?@ 61>0)", "(?@61-61>0)", "(?@62>0,61>0)", "(?@!61>0"])
def test_only_the_canonical_automaton_text_parses(text: str) -> None:
    with pytest.raises(RegexSyntaxError):
        regex.parse(text)


def test_automaton_text_round_trips_and_is_refused_in_ecma_patterns() -> None:
    node = regex.parse("(?@61-63>1,e9>0;!)")
    assert node == regex.Automaton(n_states=2, accepting=(1,), edges=((0, 0x61, 0x63, 1), (0, 0xE9, 0xE9, 0)))
    assert regex.automaton_text(node) == "(?@61-63>1,e9>0;!)"
    with pytest.raises(UnsupportedSchemaError):
        regex.json_string_body_pattern("(?@!61>0)")


# -- strings ------------------------------------------------------------------------------------------------------


def string_schemas() -> list[dict]:
    return [
        {"type": "string", "pattern": "^[a-c]+$", "maxLength": 3},
        {"type": "string", "pattern": "b", "minLength": 2, "maxLength": 4},
        {"type": "string", "pattern": "^(a|é\\n)*$", "minLength": 1, "maxLength": 3},
        {"type": "string", "pattern": "[\"\\\\]", "maxLength": 2},
        {"type": "string", "pattern": "^[^\\s]+$", "minLength": 2},
    ]


@pytest.mark.parametrize("schema", string_schemas())
@SETTINGS
@given(value=st.text("abcé\n\"\\ \x01", max_size=6))
def test_pattern_and_length_together_are_exact(schema: dict, value: str) -> None:
    dfa = compile_dfa(schema_to_pattern(schema))
    accepted, valid = dfa.accepts(json.dumps(value, ensure_ascii=False).encode()), oracle(schema).is_valid(value)
    assert valid or not accepted, value
    assert accepted or not valid or value.endswith("\n"), value  # Python's $ also matches before a final newline


@pytest.mark.parametrize("schema", [
    {"type": "string", "format": "date", "maxLength": 10},
    {"type": "string", "format": "email", "maxLength": 12},
    {"type": "string", "format": "date-time", "pattern": "^2020-"},
    {"type": "string", "format": "uri", "pattern": "^https://", "minLength": 10, "maxLength": 20},
    {"type": "string", "format": "ipv4", "minLength": 15},
])
def test_format_with_length_or_pattern_is_sound(schema: dict) -> None:
    dfa = compile_dfa(schema_to_pattern(schema))
    rng = random.Random(0)
    for _ in range(40):
        assert oracle(schema).is_valid(json.loads(dfa_sample(dfa, rng))), schema


def test_implied_lengths_leave_the_body_as_it_was_and_contradictions_are_unsatisfiable() -> None:
    date = schema_to_pattern({"type": "string", "format": "date"})
    assert schema_to_pattern({"type": "string", "format": "date", "minLength": 1, "maxLength": 10}) == date
    nothing = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^a+$", "maxLength": 0}}}
    assert not compile_dfa(schema_to_pattern(nothing)).accepts(b'{"s":"a"}')
    with pytest.raises(GrammarTooLargeError) as refused:
        schema_to_pattern({"type": "string", "format": "uri", "maxLength": 65536})
    message = str(refused.value)  # the budget once, then where, which keywords and how far over
    assert message.startswith("grammar exceeds the nfa_states budget of ") and message.count("budget") == 1, message
    assert "#: format with minLength/maxLength: the pattern expands to ~" in message, message
    assert "smaller bounds fit" in message and message.endswith("count them in chunks)"), message


# -- patternProperties ---------------------------------------------------------------------------------------------

OBJECTS = [
    {"type": "object", "patternProperties": {"^[a-z_]+$": {"type": "integer"}}},
    {"type": "object", "patternProperties": {"^[a-z_]+$": {"type": "integer"}}, "additionalProperties": False},
    {"type": "object", "patternProperties": {"^a": {"type": "integer"}, "b$": {"minimum": 3}},
     "additionalProperties": {"type": "string"}},
    {"type": "object", "properties": {"ab": {"maximum": 5}, "c": {"type": "boolean"}}, "required": ["ab"],
     "patternProperties": {"^a": {"type": "integer"}}, "additionalProperties": False},
    {"type": "object", "patternProperties": {"^x": {"type": "null"}, "^xy": {"type": "null"}, "y": False}},
    {"type": "object", "patternProperties": {".": {"type": "string"}}, "additionalProperties": False},
]
VALUES = st.one_of(st.integers(-2, 8), st.sampled_from([None, True, "s", 2.5]))


@pytest.mark.parametrize("schema", OBJECTS)
@SETTINGS
@given(value=st.dictionaries(st.text("abxy_C\n", max_size=3), VALUES, max_size=4))
def test_pattern_properties_are_exact_on_small_objects(schema: dict, value: dict) -> None:
    dfa = compile_dfa(schema_to_pattern(schema))
    text = json.dumps(_reordered(value, schema_to_pattern(schema)), ensure_ascii=False, separators=(",", ":"))
    listed = list(schema.get("properties", {}))
    in_order = [k for k in value if k in listed] == [k for k in listed if k in value]
    valid = oracle(schema).is_valid(value)
    assert not dfa.accepts(text.encode()) or valid, text
    # listed keys come in schema order only; a key ending in a newline matches `$` in Python only: never admitted
    if valid and in_order and all(k not in listed and not k.endswith("\n") for k in value):
        assert dfa.accepts(text.encode()), text


@pytest.mark.parametrize("schema", OBJECTS)
def test_pattern_properties_samples_validate(schema: dict) -> None:
    for whitespace in ("compact", "flexible"):
        dfa = compile_dfa(schema_to_pattern(schema, whitespace=whitespace))
        rng = random.Random(1)
        for _ in range(60):
            text = dfa_sample(dfa, rng)
            assert oracle(schema).is_valid(json.loads(text)), (schema, text)


def test_unenforceable_pattern_properties_are_refused_with_a_reason() -> None:
    with pytest.raises(UnsupportedSchemaError, match="lookahead"):
        schema_to_pattern({"type": "object", "patternProperties": {"^(?!a)": {}}})
    many = {"type": "object", "patternProperties": {f"^{c}": {"maxLength": i} for i, c in enumerate("abcdefg")}}
    with pytest.raises(UnsupportedSchemaError, match="distinct schemas"):
        schema_to_pattern(many)
    merged = {"allOf": [{"patternProperties": {"^a": {"type": "integer"}}},
                        {"properties": {"b": {}}, "additionalProperties": False}]}  # it would meet "a…" keys
    with pytest.raises(UnsupportedSchemaError) as err:
        schema_to_pattern(merged)
    assert err.value.keyword == "patternProperties"


# -- the corpus ----------------------------------------------------------------------------------------------------

NEWLY_COMPILED = [
    "Github_easy---o10009", "Github_easy---o79448", "Github_hard---o32807", "Github_hard---o82824",
    "Github_medium---o10297", "Github_medium---o39749", "Github_medium---o53619", "Github_medium---o65503",
    "Github_medium---o65507", "Github_medium---o82664", "Github_medium---o9517", "Github_trivial---o47168",
    "JsonSchemaStore---azure-iot-edge-deployment-2.0",
]
"""Corpus schemas refused before patternProperties and the string intersections were compiled."""


@pytest.mark.skipif(not CORPUS.exists(), reason="maskbench-dev corpus absent")
@pytest.mark.parametrize("name", NEWLY_COMPILED)
def test_newly_compiled_corpus_schemas_are_sound(name: str) -> None:
    doc = json.loads((CORPUS / f"{name}.json").read_text(encoding="utf-8"))
    validator = oracle(doc["schema"])
    for whitespace in ("compact", "flexible"):
        pattern = schema_to_pattern(doc["schema"], whitespace=whitespace)
        try:
            dfa = compile_dfa(pattern)
        except GrammarTooLargeError:  # o82824: its maxLength-5000 strings exceed the NFA budget, automata aside
            assert name == "Github_hard---o82824"
            continue
        for test in doc["tests"]:
            data = test["data"]
            text = (json.dumps(data, ensure_ascii=False) if whitespace == "flexible"
                    else json.dumps(data, ensure_ascii=False, separators=(",", ":")))
            if not test["valid"]:
                assert not dfa.accepts(text.encode()), (name, text[:200])
            elif name != "Github_hard---o32807":  # its valid instances list keys out of schema order
                assert dfa.accepts(text.encode()) or dfa.accepts(
                    json.dumps(_reordered(data, pattern), ensure_ascii=False,
                               separators=None if whitespace == "flexible" else (",", ":")).encode()), (name, text[:200])
        rng = random.Random(name)
        for _ in range(15):
            sample = dfa_sample(dfa, rng)
            errors = [e.message for e in validator.iter_errors(json.loads(sample))]
            assert not errors, (name, sample[:300], errors[:3])
    assert re.search(r"\(\?@", schema_to_pattern(doc["schema"])) or name in ("Github_medium---o53619",)


@pytest.mark.parametrize("pattern", ["^[^+#$\\s.]+$", "^\\D\\W$", "^[\\d\\s]$", "^[^\\w]$", "^\\w+$", "^[^\\S]$",
                                     "^[^\\D]$", "a.$", "^\\S$"])
def test_narrow_and_wide_body_patterns_bracket_what_python_matches(pattern: str) -> None:
    """jsonschema runs ECMA patterns with Python's ``re``: the narrow body admits only what it matches, the wide
    body (used to exclude keys) everything it matches."""
    narrow = compile_dfa(regex.json_string_body_pattern(pattern))
    wide = compile_dfa(regex.json_string_body_pattern(pattern, wide=True))
    rng = random.Random(pattern)
    samples = [chr(c) for c in range(0x300)] + [chr(c) for c in (0x85, 0x1C, 0x2028, 0x3000, 0x0663, 0xFEFF, 0xFF10)]
    samples += [chr(rng.choice([rng.randrange(0xD800), rng.randrange(0xE000, 0x110000)])) for _ in range(300)]
    for a in samples[::40]:
        for b in samples:
            for text in (a + b, b, b + "\n", "a" + b):
                python = re.search(pattern, text) is not None
                body = json.dumps(text, ensure_ascii=False)[1:-1].encode()
                assert not narrow.accepts(body) or python, (pattern, text)
                assert wide.accepts(body) or not python, (pattern, text)
