"""regex.py: the dialect parser (AST, refusals with positions), its cache of parsed groups (invisible: the same
ASTs and the same errors as without it), the UTF-8 range split, and the translation of an ECMA ``pattern`` into a
pattern over JSON-encoded string bodies."""

from __future__ import annotations

import json
import re
from unittest import mock

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from constrained import regex
from constrained.dialect import parser as dialect_parser
from constrained.errors import EmptyLanguageError, GrammarTooLargeError, RegexSyntaxError, UnsupportedSchemaError
from constrained.fsm import compile_dfa
from constrained.regex import (
    MAX_SCALAR,
    Alternation,
    CharSet,
    Concat,
    Empty,
    Repeat,
    Special,
    json_string_body_pattern,
    parse,
    special_names,
    utf8_sequences,
)

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PER_PATTERN = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def lit(text: str) -> CharSet | Concat:
    chars = [CharSet(ranges=((ord(c), ord(c)),)) for c in text]
    return chars[0] if len(chars) == 1 else Concat(items=tuple(chars))


# ------------------------------------------------------------------------------------------------------- parser


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("", Empty()),
        ("ab", lit("ab")),
        ("a|b", Alternation(items=(lit("a"), lit("b")))),
        ("a|", Alternation(items=(lit("a"), Empty()))),
        ("a*", Repeat(item=lit("a"), min=0, max=None)),
        ("a+?", Repeat(item=lit("a"), min=1, max=None)),
        ("a{2,5}", Repeat(item=lit("a"), min=2, max=5)),
        ("a{3}", Repeat(item=lit("a"), min=3, max=3)),
        ("a{2,}", Repeat(item=lit("a"), min=2, max=None)),
        ("a{,2}", Repeat(item=lit("a"), min=0, max=2)),
        ("a{1}", lit("a")),
        ("a{", lit("a{")),
        ("a{x}", lit("a{x}")),
        ("{}", lit("{}")),
        ("]}", lit("]}")),
        ("^ab$", lit("ab")),
        ("(?:a)(b)(?P<n>c)", lit("abc")),
        ("[a-c]", CharSet(ranges=((97, 99),))),
        ("[]a]", CharSet(ranges=((93, 93), (97, 97)))),
        ("[a-]", CharSet(ranges=((45, 45), (97, 97)))),
        ("[\\b]", CharSet(ranges=((8, 8),))),
        (r"\d", CharSet(ranges=((48, 57),))),
        (r"[\w]", CharSet(ranges=((48, 57), (65, 90), (95, 95), (97, 122)))),
        (r"\s", CharSet(ranges=((9, 13), (32, 32)))),
        (".", CharSet(ranges=((0, 9), (11, 0xD7FF), (0xE000, MAX_SCALAR)))),
        ("[^a]", CharSet(ranges=((0, 96), (98, 0xD7FF), (0xE000, MAX_SCALAR)))),
        ("[\u0000-\uffff]", CharSet(ranges=((0, 0xD7FF), (0xE000, 0xFFFF)))),
        (r"\x41\u00e9\U0001F600", lit("Aé😀")),
        (r"\n\r\t\f\v", lit("\n\r\t\f\v")),
        (r"\.\*\+\?\(\)\[\]\{\}\|\^\$\-\/\"\\\#\ \é", lit('.*+?()[]{}|^$-/"\\# é')),
    ],
)
def test_parse_builds_the_expected_ast(pattern: str, expected: object) -> None:
    assert parse(pattern) == expected


def test_special_terminals_parse_when_allowed_and_are_named_in_order() -> None:
    node = parse("(?&<b>)x(?&<|a|>)(?&<b>)", allow_special=True)
    assert node == Concat(items=(Special(name="<b>"), lit("x"), Special(name="<|a|>"), Special(name="<b>")))
    assert special_names(node) == ("<b>", "<|a|>")
    assert special_names(parse("(?:(?&s)|(?&t))*(?&s)", allow_special=True)) == ("s", "t")


@pytest.mark.parametrize(
    ("pattern", "position", "feature"),
    [
        ("a(?=b)", 1, "lookahead"),
        ("a(?!b)", 1, "lookahead"),
        ("(?<=a)b", 0, "lookbehind"),
        ("(?<!a)b", 0, "lookbehind"),
        (r"(a)\1", 3, "backreference"),
        ("(?P<x>a)(?P=x)", 8, "backreference"),
        ("(?i)a", 0, "flags"),
        ("(?>a)", 0, "atomic"),
        ("(?(1)a|b)", 0, "conditional"),
        ("(?#c)", 0, "comment"),
        ("a^b", 1, "'^'"),
        ("a$b", 1, "'$'"),
        ("a|^b", 2, "'^'"),
        ("(^a)", 1, "'^'"),
        (r"\bword", 0, "word boundary"),
        (r"a\Z", 1, "\\Z"),
        (r"\A", 0, "\\A"),
        (r"\p{L}", 0, "escape \\p"),
        (r"\q", 0, "escape \\q"),
        ("*a", 0, "nothing to repeat"),
        ("a|+", 2, "nothing to repeat"),
        ("{2}", 0, "nothing to repeat"),
        ("a**", 2, "multiple repeat"),
        ("a{2}{3}", 4, "multiple repeat"),
        ("a*+", 2, "possessive"),
        ("a{3,2}", 1, "greater than max"),
        ("(ab", 0, "unterminated group"),
        ("ab)", 2, "unbalanced"),
        ("[ab", 0, "unterminated character class"),
        ("[z-a]", 1, "bad character range"),
        (r"[a-\d]", 1, "bad character range"),
        ("\\", 0, "trailing backslash"),
        (r"\x4", 0, "hex digits"),
        (r"\ud800", 0, "surrogate"),
        (r"[\udc00]", 1, "surrogate"),
        ("(?&x)", 0, "special-token"),
        ("(?P<1x>a)", 4, "group name"),
    ],
)
def test_unsupported_syntax_raises_with_position_and_named_feature(pattern: str, position: int, feature: str) -> None:
    with pytest.raises(RegexSyntaxError) as info:
        parse(pattern)
    assert info.value.pattern == pattern
    assert info.value.position == position
    assert feature in info.value.detail
    assert isinstance(info.value, ValueError)


def test_special_terminal_syntax_errors() -> None:
    with pytest.raises(RegexSyntaxError, match="empty special-token"):
        parse("(?&)", allow_special=True)
    with pytest.raises(RegexSyntaxError, match="unterminated special-token"):
        parse("(?&abc", allow_special=True)


def test_deep_nesting_is_refused_not_a_recursion_error() -> None:
    with pytest.raises(RegexSyntaxError, match="nested deeper"):
        parse("(" * 1000 + "a" + ")" * 1000)
    assert parse("(" * 100 + "a" + ")" * 100) == lit("a")


# ------------------------------------------------------------------------------------------------ group cache


def parse_outcome(pattern: str, **kwargs: object) -> tuple[object, ...]:
    """The AST, or the error's pattern, position and detail."""
    try:
        return ("ast", parse(pattern, **kwargs))
    except RegexSyntaxError as exc:
        return ("error", exc.pattern, exc.position, exc.detail)


def uncached_parse_outcome(pattern: str, **kwargs: object) -> tuple[object, ...]:
    """`parse_outcome` with the group cache out of the way: every group parsed from its text."""
    with mock.patch.object(dialect_parser, "cached_group", return_value=(-1, None)):
        return parse_outcome(pattern, **kwargs)


GROUP_FRAGMENTS = [
    "a", "é", r"\(", r"\)", "[()]", r"[\]()]", "[^)]", "[]()]", r"\\", r"\d", ".", "x{2,3}", "{", "(?:[ ]|\n[ ]{0,20})?",
    r'"(?:[^"\\]|\\.)*"', "(?P<n>q)", "(?&<s(>)", "(?&)", "(?=a)", "*", ")", "(", "[b", "$", "^", "a{3,1}",
    "(?P<1>a)", "\\", "(?#c)", "a**",
]
"""Pieces of patterns, valid and not: escaped and bracketed parentheses, specials with a '(' in their name and a
trailing backslash (escaping whatever follows) all mislead a naive search for a group's end."""


def group_patterns() -> st.SearchStrategy[str]:
    """Patterns full of repeated groups, short and long (past the cache's 64-character window), nested."""

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(inner, inner).map("".join),
            inner.map(lambda p: p + p),
            st.tuples(st.sampled_from(["(?:", "(", "(?P<g>"]), inner).map(lambda p: f"{p[0]}{p[1]})"),
            st.tuples(inner, inner).map(lambda p: f"(?:{p[0]}|{p[1]})"),
            inner.map(lambda p: f"(?:{p * 4})"),
            st.tuples(inner, st.sampled_from(["*", "?", "{2}", "{0,3}"])).map(lambda p: f"(?:{p[0]}){p[1]}"),
        )

    # cut long ones (the cut may unbalance them: errors are compared too)
    return st.recursive(st.sampled_from(GROUP_FRAGMENTS), extend, max_leaves=12).map(lambda p: p[:3000])


@given(warmup=st.lists(group_patterns(), max_size=3), pattern=group_patterns(), allow_special=st.booleans())
@SETTINGS
def test_cached_groups_parse_exactly_as_without_the_cache(warmup: list[str], pattern: str, allow_special: bool) -> None:
    regex.clear_caches()
    for other in warmup:  # fill the cache with groups that may reappear in `pattern`, under either flag
        parse_outcome(other, allow_special=not allow_special)
        parse_outcome(other, allow_special=allow_special)
    expected = uncached_parse_outcome(pattern, allow_special=allow_special)
    assert parse_outcome(pattern, allow_special=allow_special) == expected
    assert parse_outcome(pattern, allow_special=allow_special) == expected  # every group of it cached now


@given(pattern=group_patterns())
@PER_PATTERN
def test_cached_groups_compile_to_the_uncached_dfa(pattern: str) -> None:
    assume(uncached_parse_outcome(pattern)[0] == "ast")

    def outcome() -> tuple[object, ...]:
        try:
            dfa = compile_dfa(pattern, max_states=2000)
        except (GrammarTooLargeError, EmptyLanguageError) as exc:
            return ("error", type(exc), str(exc))
        return ("dfa", dfa.fingerprint, dfa.distance.tobytes(), dfa.special_names)

    with mock.patch.object(dialect_parser, "cached_group", return_value=(-1, None)):
        expected = outcome()
    parse(pattern)  # the compile below runs on cached groups
    assert outcome() == expected


def test_identical_groups_share_one_node() -> None:
    regex.clear_caches()
    ast = parse("(?:ab|c)x(?:ab|c)")
    assert isinstance(ast, Concat) and ast.items[0] is ast.items[2]
    long_group = "(?:" + "abc|" * 30 + "d)"  # past the 64-character window: found by its first characters
    ast = parse(long_group + "-" + long_group)
    assert isinstance(ast, Concat) and ast.items[0] is ast.items[2]


@pytest.mark.parametrize("ecma", [False, True])
def test_a_cached_group_still_counts_its_nesting_depth(ecma: bool) -> None:
    inner = "(" * 10 + "a" + ")" * 10
    limit = 96 if ecma else 100
    regex.clear_caches()
    for extra in (0, 1):  # at the limit, then one past it
        outer = limit - 10 + extra
        pattern = "(" * outer + inner + ")" * outer

        def outcome(text: str = pattern) -> tuple[object, ...]:
            if not ecma:
                return parse_outcome(text)
            try:
                return ("ok", json_string_body_pattern(text))
            except UnsupportedSchemaError as exc:
                return ("error", exc.detail)

        with mock.patch.object(dialect_parser, "cached_group", return_value=(-1, None)):
            expected = outcome()
        outcome(inner)  # cached at depth 0
        assert outcome() == expected
        assert (expected[0] == "error") == bool(extra)
        if extra:
            assert "nested deeper" in str(expected[-1])


# ------------------------------------------------------------------------------------------------------- UTF-8


def sequence_matches(sequences: tuple[tuple[tuple[int, int], ...], ...], data: bytes) -> bool:
    return any(len(seq) == len(data) and all(lo <= b <= hi for b, (lo, hi) in zip(data, seq)) for seq in sequences)


scalars = st.integers(0, MAX_SCALAR).filter(lambda cp: not 0xD800 <= cp <= 0xDFFF)


@given(a=scalars, b=scalars, probe=scalars)
@SETTINGS
def test_utf8_sequences_match_exactly_the_encodings_of_the_range(a: int, b: int, probe: int) -> None:
    lo, hi = min(a, b), max(a, b)
    ranges = parse(f"[\\U{lo:08x}-\\U{hi:08x}]").ranges  # also drops surrogates inside the range
    sequences = utf8_sequences(ranges)
    for cp in (probe, lo, hi, lo - 1, hi + 1):
        if 0 <= cp <= MAX_SCALAR and not 0xD800 <= cp <= 0xDFFF:
            assert sequence_matches(sequences, chr(cp).encode("utf-8")) == (lo <= cp <= hi)


@given(a=scalars, b=scalars, data=st.binary(min_size=1, max_size=4))
@SETTINGS
def test_utf8_sequences_never_match_invalid_utf8(a: int, b: int, data: bytes) -> None:
    sequences = utf8_sequences(parse(f"[\\U{min(a, b):08x}-\\U{max(a, b):08x}]").ranges)
    if sequence_matches(sequences, data):
        decoded = data.decode("utf-8")  # raises on invalid UTF-8, failing the test
        assert len(decoded) == 1 and min(a, b) <= ord(decoded) <= max(a, b)


def test_utf8_sequences_of_everything_is_the_standard_split() -> None:
    assert utf8_sequences(((0, 0xD7FF), (0xE000, MAX_SCALAR))) == (
        ((0x00, 0x7F),),
        ((0xC2, 0xDF), (0x80, 0xBF)),
        ((0xE0, 0xE0), (0xA0, 0xBF), (0x80, 0xBF)),
        ((0xE1, 0xEC), (0x80, 0xBF), (0x80, 0xBF)),
        ((0xED, 0xED), (0x80, 0x9F), (0x80, 0xBF)),
        ((0xEE, 0xEF), (0x80, 0xBF), (0x80, 0xBF)),
        ((0xF0, 0xF0), (0x90, 0xBF), (0x80, 0xBF), (0x80, 0xBF)),
        ((0xF1, 0xF3), (0x80, 0xBF), (0x80, 0xBF), (0x80, 0xBF)),
        ((0xF4, 0xF4), (0x80, 0x8F), (0x80, 0xBF), (0x80, 0xBF)),
    )


# ------------------------------------------------------------------------------------------ JSON string bodies

# (ECMA pattern, Python pattern with the same meaning under re.search + re.ASCII: `$` is a real end, `.` has ECMA's
# line terminators)
JSON_CASES = [
    ("^[A-Z]{3}$", r"^[A-Z]{3}\Z"),
    (r"\d{4}-\d{2}-\d{2}", r"\d{4}-\d{2}-\d{2}"),
    (r'^a"b\\c', r'^a"b\\c'),
    ("[^a]+", "[^a]+"),
    ("é+", "é+"),
    ("^.{2,3}$", "^[^\n\r\u2028\u2029]{2,3}\\Z"),
    ("b$", r"b\Z"),
    ("^$", r"^\Z"),
    ("", ""),
    ("^(?:ab|c)*$|^x", r"^(?:ab|c)*\Z|^x"),
    (r"^[\x00-\x1f\\\"]+$", r'^[\x00-\x1f\\"]+\Z'),
    (r"^\w+@\w+\.[a-z]{2,3}$", r"^\w+@\w+\.[a-z]{2,3}\Z"),
    ("^(?<year>[0-9]{4})$", r"^(?P<year>[0-9]{4})\Z"),
    (r"^\uD83D\uDE00+$", "^\U0001f600+\\Z"),
    ("[😀-🙏]", "[😀-🙏]"),
    ("^\t\n$", "^\t\n\\Z"),
]

BODY_ALPHABET = 'aAbBcxyzZ0129-@."\\\n\r\t\x00\x01\x1f\x7fé😀🙏\u2028\u00a0 '


@pytest.mark.parametrize(("ecma", "python"), JSON_CASES)
@given(data=st.data())
@PER_PATTERN
def test_json_body_pattern_matches_the_encoding_iff_the_value_matches(
    ecma: str, python: str, data: st.DataObject
) -> None:
    translated = json_string_body_pattern(ecma)
    dfa = compile_dfa(translated)
    oracle = re.compile(python, re.ASCII)
    value = data.draw(
        st.from_regex(oracle) | st.text(alphabet=BODY_ALPHABET, max_size=8) | st.text(max_size=5), label="value"
    )
    assume(not any(0xD800 <= ord(ch) <= 0xDFFF for ch in value))
    body = json.dumps(value, ensure_ascii=False)[1:-1]
    expected = oracle.search(value) is not None
    assert dfa.accepts(body.encode("utf-8")) == expected, (translated, value, body)
    assert (re.fullmatch(translated, body) is not None) == expected  # the translation is valid Python `re` too


@given(value=st.text(max_size=6), other=st.text(alphabet='"\\\n\x00\x1fé', max_size=4))
@SETTINGS
def test_json_body_pattern_accepts_only_canonical_escapes(value: str, other: str) -> None:
    dfa = compile_dfa(json_string_body_pattern("^.*$|\n|\r|\u2028|\u2029"))  # any string: canonical bodies only
    assume(not any(0xD800 <= ord(ch) <= 0xDFFF for ch in value + other))
    assert dfa.accepts(json.dumps(value + other, ensure_ascii=False)[1:-1].encode())
    for non_canonical in (r"\/", r"\u0041", r"\u00e9", r"\u000a", r"\U0000", "\\", '"', "\x01", "\\x"):
        assert not dfa.accepts(non_canonical.encode())


def test_ecma_whitespace_is_the_intersection_with_python_whitespace() -> None:
    dfa = compile_dfa(json_string_body_pattern(r"^\s$"))
    for ch in " \t\n\r\x0b\x0c\u00a0\u2028\u3000":
        assert dfa.accepts(json.dumps(ch, ensure_ascii=False)[1:-1].encode()), repr(ch)
    for ch in "\ufeff\x1c\x85a":  # ECMA-only or Python-only spaces are refused either way
        assert not dfa.accepts(json.dumps(ch, ensure_ascii=False)[1:-1].encode()), repr(ch)
    not_space = compile_dfa(json_string_body_pattern(r"^\S$"))
    for ch in "\ufeff\x1c\x85 ":
        assert not not_space.accepts(json.dumps(ch, ensure_ascii=False)[1:-1].encode()), repr(ch)
    assert not_space.accepts("a".encode())


@pytest.mark.parametrize(
    "pattern",
    ["(?=a)", "a(?!b)", "(?<=a)b", r"(a)\1", r"\bword", "(?i)abc", "[]", "[^]", "a^*", "(a$+)", r"\cA", r"\p{L}",
     r"\U0001F600", "a{2}{3}", "[\\uD83D\\uDE00]", r"\uD83D", "(?P=x)", "a**"],
)
def test_unenforceable_ecma_features_raise_unsupported_schema_error(pattern: str) -> None:
    with pytest.raises(UnsupportedSchemaError) as info:
        json_string_body_pattern(pattern)
    assert info.value.keyword == "pattern"
    assert info.value.path == ""
    assert info.value.detail


def test_ecma_brace_without_min_is_a_literal() -> None:
    dfa = compile_dfa(json_string_body_pattern("^a{,2}$"))
    assert dfa.accepts(b"a{,2}") and not dfa.accepts(b"aa")
