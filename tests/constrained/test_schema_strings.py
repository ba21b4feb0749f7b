"""String languages of JSON Schema: ECMA anchors anywhere in a ``pattern`` and formats/patterns under lengths counted
in rules.

(a) ``^``/``$`` inside groups, alternations and repeated groups: the translated body accepts a string iff Python's
``re.search`` (``$`` written ``\\Z``: ECMA's end of input) finds the pattern in it; the wide reading accepts at
least what either engine matches. (b) A ``format``/``pattern`` with ``minLength``/``maxLength`` that one product
automaton cannot hold is counted by chunk rules (`counted.CountedLexeme`): the grammar accepts exactly the strings
in the format's own automaton and within the bounds, counted in characters (code points), whatever their escapes.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from constrained.dialect.json_lexemes import format_body
from constrained.dialect.json_string import NO_BODY, json_string_body_pattern
from constrained.errors import EmptyLanguageError, GrammarTooLargeError, InvalidSchemaError, UnsupportedSchemaError
from constrained.fsm import DFA, compile_dfa
from constrained.frontends.json_schema import counted
from constrained.frontends.json_schema.strings import bodies_dfa
from constrained.grammar import compile_rules
from constrained.pushdown import PushdownGrammar
from constrained.schema import schema_to_pattern, schema_to_rules
from constrained.vocabulary import Vocabulary

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
FEW = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


# -- (a) anchors ------------------------------------------------------------------------------------------------------


def _patterns() -> st.SearchStrategy[str]:
    """ECMA patterns over ``ab`` with ``^``/``$`` anywhere: in groups, alternations and repeated groups."""
    atom = st.sampled_from(["a", "b", "^", "$", "", "[ab]", "\\n"])

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        group = inner.map(lambda p: f"({p})") | inner.map(lambda p: f"(?:{p})")
        quantified = st.tuples(group, st.sampled_from(["*", "+", "?", "{2}", "{0,2}", "{1,3}", "{2,}"])).map("".join)
        return (st.lists(inner | group | quantified, min_size=2, max_size=4).map("".join)
                | st.lists(inner, min_size=2, max_size=3).map("|".join) | group | quantified)

    return st.recursive(atom, extend, max_leaves=8)


def _python(pattern: str) -> str:
    """The same search in Python's ``re``: ``$`` is ECMA's end of input, ``\\Z`` (Python's ``$`` also matches
    before a final newline)."""
    return pattern.replace("$", r"\Z")


def _body(value: str) -> bytes:
    return json.dumps(value, ensure_ascii=False)[1:-1].encode()


def _dfa_or_none(pattern: str) -> DFA | None:
    """The pattern's DFA, None when it matches nothing."""
    try:
        return compile_dfa(pattern)
    except EmptyLanguageError:
        return None


@given(pattern=_patterns(), values=st.lists(st.text(alphabet="ab\nc", max_size=6), max_size=12))
@SETTINGS
def test_anchors_anywhere_agree_with_re_search(pattern: str, values: list[str]) -> None:
    """The rule kept: ``^`` holds only at position 0 and ``$`` only at the end, wherever they are written."""
    narrow = json_string_body_pattern(pattern)
    wide = json_string_body_pattern(pattern, wide=True)
    dfa, wide_dfa = _dfa_or_none(narrow), _dfa_or_none(wide)
    ecma, python = re.compile(_python(pattern)), re.compile(pattern)
    for value in values + ["", "a", "b", "ab", "ba", "a\n", "\n"]:
        expected = ecma.search(value) is not None
        got = dfa is not None and dfa.accepts(_body(value))
        assert got == expected, (pattern, narrow, value)
        if python.search(value) is not None or expected:  # wide: at least what either engine matches
            assert wide_dfa is not None and wide_dfa.accepts(_body(value)), (pattern, wide, value)


@pytest.mark.parametrize(
    ("pattern", "matching", "other"),
    [
        ("(^gs://(.+))|(^http://(.+))|(^https://(.+))", ["gs://b", "http://x", "https://y/z"], ["xgs://b", "http://"]),
        ("^$|(^a.b)", ["", "axb", "a-bc"], ["a", "xaxb"]),
        ("(a$|b)", ["a", "xa", "b", "bx"], ["ax", "", "c"]),
        ("(?:^|,)x(?:,|$)", ["x", "x,y", "y,x", "y,x,z"], ["yx", "xy", ""]),
        ("(^a)*b", ["b", "ab", "cb", "aab"], ["a", ""]),
    ],
)
def test_anchored_alternatives_match_what_the_schema_means(pattern: str, matching: list[str], other: list[str]) -> None:
    """Dev-corpus shapes (Github_medium---o27402's URL schemes) compile to one pattern that accepts exactly them."""
    schema = {"type": "string", "pattern": pattern}
    compiled = re.compile(schema_to_pattern(schema))
    for value in matching:
        assert compiled.fullmatch(json.dumps(value)), (pattern, value)
    for value in other:
        assert not compiled.fullmatch(json.dumps(value)), (pattern, value)


@pytest.mark.parametrize("pattern", ["a^b", "a$b", "(a|b)^c"])
def test_a_pattern_no_string_matches_leaves_no_string_value(pattern: str) -> None:
    """``^`` after consumed input (``$`` before it) holds nowhere: the string value is unsatisfiable, not refused."""
    assert json_string_body_pattern(pattern) == NO_BODY
    with pytest.raises(InvalidSchemaError, match="no JSON document satisfies"):
        schema_to_pattern({"type": "string", "pattern": pattern})
    compiled = re.compile(schema_to_pattern({"type": ["string", "null"], "pattern": pattern}))
    assert compiled.fullmatch("null") and not compiled.fullmatch('"ab"')


@pytest.mark.parametrize("pattern", ["^*", "a$+", "(a|^?)", "x${2}"])
def test_a_quantifier_on_an_anchor_is_refused_with_its_reason(pattern: str) -> None:
    with pytest.raises(UnsupportedSchemaError, match="nothing to repeat") as info:
        schema_to_pattern({"type": "string", "pattern": pattern})
    assert info.value.keyword == "pattern"


# -- (b) counted lexemes ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def byte_vocab() -> Vocabulary:
    """One token per byte (and an end of sequence): a grammar's token language is its byte language."""
    return Vocabulary.from_tokens([bytes([b]) for b in range(256)] + [b"</s>"], eos_token_ids=[256], name="bytes")


URI = {"type": "string", "format": "uri", "minLength": 12, "maxLength": 5000}
"""A product automaton of ~340k NFA states (refused as one DFA): counted in rules instead."""


def test_a_format_with_a_large_max_length_compiles_to_counting_rules() -> None:
    with pytest.raises(GrammarTooLargeError, match="chunks"):
        schema_to_pattern(URI)  # one pattern cannot count it; the message says where it can be
    rules, _ = schema_to_rules(URI)
    assert any(name.startswith("string.counted") for name in rules)
    assert max(len(body) for body in rules.values()) < 200_000  # no rule grows with the bound


@given(length=st.one_of(st.sampled_from([0, 4, 5, 6, 249, 250, 505, 4992, 4993, 4994, 5100]), st.integers(0, 5100)),
       chars=st.lists(st.sampled_from(["a", "Z", "9", "/", "é", "%41", " ", '"', "\\", ":", "\n"]), min_size=1,
                      max_size=4),
       scheme=st.sampled_from(["http://", "h:", "", "1x:", "urn:"]))
@FEW
def test_a_format_under_counted_lengths_accepts_exactly_the_format_within_the_bounds(
    byte_vocab: Vocabulary, length: int, chars: list[str], scheme: str
) -> None:
    """Accepted iff the format's own automaton accepts the body and 12 <= characters <= 5000."""
    rules, start = schema_to_rules(URI)
    grammar = compile_rules(rules, start, byte_vocab)
    assert isinstance(grammar, PushdownGrammar)
    value = scheme + "".join(chars[i % len(chars)] for i in range(length))
    in_format = compile_dfa(format_body("uri")).accepts(_body(value))
    expected = in_format and 12 <= len(value) <= 5000
    assert grammar.accepts(json.dumps(value, ensure_ascii=False).encode()) == expected, (len(value), value[:20])


LANGUAGES = [format_body("date"), format_body("uri"), format_body("ipv4"), json_string_body_pattern("^a(b|$)"),
             json_string_body_pattern("x[^x]*x"), json_string_body_pattern("^[é\\n\"]*$")]
SAMPLED = 3
"""The first languages are formats: drawn from their own pattern too (fast on these; slow on translated bodies)."""


@given(which=st.integers(0, len(LANGUAGES) - 1), lo=st.integers(0, 20), span=st.one_of(st.none(), st.integers(0, 30)),
       chunk=st.sampled_from([2, 3, 8]), data=st.data())
@FEW
def test_chunk_rules_are_exact_for_any_chunk_and_bounds(
    byte_vocab: Vocabulary, monkeypatch: pytest.MonkeyPatch, which: int, lo: int, span: int | None, chunk: int,
    data: st.DataObject,
) -> None:
    """`CountedLexeme` for small chunks (many levels, every kind of rule): accepted iff the body's automaton
    accepts and the length (in characters) lies in ``[lo, lo + span]``."""
    body = LANGUAGES[which]
    monkeypatch.setattr(counted, "CHUNK_CHARS", chunk)
    monkeypatch.setattr(counted, "MIN_CHUNK_CHARS", 1)
    hi = None if span is None else lo + span
    dfa = bodies_dfa((body,))
    rules: dict[str, str] = {}
    entry = counted.CountedLexeme(dfa, rules, "t", lo, hi).entry
    if entry is None:
        return
    rules["root"] = '"' + entry
    grammar = compile_rules(rules, "root", byte_vocab)
    drawn = st.text("ab.x1é\n\":/-0", max_size=40)
    if which < SAMPLED:
        drawn = drawn | st.from_regex(re.compile(body), fullmatch=True)
    values = data.draw(st.lists(drawn, max_size=6))
    for encoded in values:
        try:
            value = json.loads('"' + encoded + '"') if "\\" in encoded or '"' in encoded else encoded
        except json.JSONDecodeError:
            continue
        assume(isinstance(value, str))
        canonical = _body(value)
        expected = dfa.accepts(canonical) and lo <= len(value) and (hi is None or len(value) <= hi)
        assert grammar.accepts(b'"' + canonical + b'"') == expected, (body, lo, hi, value)


def test_a_language_too_large_to_count_in_chunks_is_refused_with_both_reasons() -> None:
    """Over `MAX_COUNTED_STATES` DFA states the chunk rules are refused too: the error names the path, the
    product's budget and why counting did not fit."""
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(?:a{200})*$",
                                                     "maxLength": 100_000}}}
    with pytest.raises(GrammarTooLargeError) as info:
        schema_to_rules(schema)
    message = str(info.value)
    assert "#/properties/s: pattern with minLength/maxLength" in message, message
    assert "counted in chunk rules instead" in message and "states, too many" in message, message
