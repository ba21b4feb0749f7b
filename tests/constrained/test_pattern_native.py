"""The native front end (constrained._pattern behind fsm.compile_dfa) gives exactly the program
`automata.program.Program.build(regex.parse(...))` gives, or declines with None: never a program for a pattern the Python
parser refuses, never a different one; and it actually handles every pattern the schema compiler, the codecs and
the format files produce (otherwise compile_dfa would silently keep paying for the Python parse)."""

from __future__ import annotations

import functools
import json
import pathlib
import random
import warnings
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.protocol import Llama3Codec, QwenCodec, ToolSpec
from constrained import _pattern, fsm, regex, schema
from constrained.automata import dfa as automata_dfa
from constrained.automata import program as automata_program
from constrained.dialect import json_lexemes
from constrained.dialect import parser as dialect_parser
from constrained.errors import GrammarTooLargeError, RegexSyntaxError
from tests.constrained.fsm_reference import compile_dfa_reference

CORPUS = sorted(pathlib.Path("/work/shared/corpus/maskbench-dev").glob("*.json"))
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def python_program(pattern: str, allow_special: bool = False) -> tuple[object, ...] | None:
    """The reference program as the native tuple (budget check lifted: the size is compared instead); None when
    the Python parser refuses the pattern."""
    try:
        ast = regex.parse(pattern, allow_special=allow_special)
    except (RegexSyntaxError, ValueError):
        return None
    with mock.patch.object(automata_program, "MAX_NFA_STATES", 2**62):
        program = automata_program.Program.build(ast)
    return (program.code.tobytes(), program.templates.tobytes(), program.offsets.tobytes(), program.names,
            program.size)


def assert_agrees(pattern: str, allow_special: bool = False, *, handled: bool = False) -> None:
    """None or identical; None whenever Python refuses; with ``handled``, never None for an accepted pattern."""
    native = _pattern.program(pattern, allow_special)
    reference = python_program(pattern, allow_special)
    if reference is None:
        assert native is None, pattern
    elif native is not None:
        assert native == reference, pattern
    else:
        assert not handled, f"native path declined an accepted pattern: {pattern[:300]!r}"


# -- patterns the engine compiles ---------------------------------------------------------------------------------


@functools.cache
def corpus_patterns() -> tuple[str, ...]:
    patterns = []
    for path in CORPUS:
        document = json.loads(path.read_text(encoding="utf-8"))
        for whitespace in ("compact", "flexible"):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    patterns.append(schema.schema_to_pattern(document["schema"], whitespace=whitespace))
            except Exception:  # noqa: BLE001 - refused schemas have no pattern to compare
                continue
    return tuple(patterns)


@pytest.mark.skipif(not CORPUS, reason="maskbench-dev corpus absent")
def test_every_corpus_pattern_takes_the_native_path_and_matches_python() -> None:
    patterns = corpus_patterns()
    assert len(patterns) >= 400
    for pattern in patterns:
        if "(?@" in pattern:  # an embedded automaton: Python-only syntax, which the native parser declines
            assert _pattern.program(pattern, False) is None
            continue
        assert_agrees(pattern, handled=True)


def test_embedded_automata_are_declined_natively() -> None:
    for pattern in ("(?@!61>0)", "a(?@62>1;!)c", "(?:x|(?@!))+", "(?@!61>0,62>0)", "(?@"):
        assert _pattern.program(pattern, False) is None
        assert_agrees(pattern)


CALC = ToolSpec(name="calc.eval", constrained=True, parameters={
    "type": "object", "properties": {"expression": {"type": "string", "maxLength": 20}}, "required": ["expression"],
    "additionalProperties": False})
SEARCH = ToolSpec(name="crm.search_customer", constrained=True, parameters={
    "type": "object", "properties": {"query": {"type": "string", "pattern": "^[a-zé ]+$"},
                                     "limit": {"type": "integer", "minimum": 1, "maximum": 50},
                                     "tags": {"type": "array", "items": {"enum": ["vip", "new", "€uro"]}}},
    "required": ["query"]})
FREE = ToolSpec(name="notes", parameters={"type": "object"})


def codec_patterns() -> list[str]:
    patterns = []
    for codec in (QwenCodec(), QwenCodec(special_tags=False), Llama3Codec(), Llama3Codec(python_tag=False)):
        for tools in ([CALC], [CALC, SEARCH, FREE], [FREE]):
            for choice in ("auto", "required", "none", tools[0].name):
                for final in (None, r"DONE [0-9]+%"):
                    for parallel in (False, True):
                        patterns.append(codec.tool_call_grammar(tools, choice, parallel_calls=parallel,
                                                                final_pattern=final))
    return list(dict.fromkeys(patterns))


@pytest.mark.parametrize("allow_special", [True, False])
def test_codec_grammars_take_the_native_path_and_match_python(allow_special: bool) -> None:
    patterns = codec_patterns()
    assert any("(?&" in p for p in patterns)
    for pattern in patterns:
        assert_agrees(pattern, allow_special, handled=allow_special or "(?&" not in pattern)


def test_format_patterns_and_string_bodies_take_the_native_path_and_match_python() -> None:
    for name in json_lexemes.STRING_FORMATS:
        assert_agrees(json_lexemes.format_body(name), handled=True)
    for ecma in ["^[a-z]+@[a-z]+\\.com$", "\\d{3}-\\d{4}", "^(?:[A-Z]{2}|\\u00e9)\\s*$", "[^\\x00-\\x1f]+", "."]:
        assert_agrees(regex.json_string_body_pattern(ecma), handled=True)


# -- the dialect, generated ---------------------------------------------------------------------------------------

LITERALS = ["a", "b", "Z", "0", "7", " ", ",", ":", '"', "-", "/", "]", "}", "é", "ß", "中", "😀", "\U00010000",
            "\U0010ffff", "\x00", "\n", "#", "&", "<", ">", "=", "!", "P"]
ESCAPES = ["\\.", "\\*", "\\+", "\\?", "\\(", "\\)", "\\[", "\\]", "\\{", "\\}", "\\|", "\\^", "\\$", "\\-", "\\/",
           '\\"', "\\\\", "\\n", "\\r", "\\t", "\\f", "\\v", "\\x41", "\\xe9", "\\u00e9", "\\u20AC", "\\U0001F600",
           "\\U0010FFFF", "\\é", "\\ ", "\\d", "\\D", "\\w", "\\W", "\\s", "\\S",
           # refused by the Python parser
           "\\q", "\\1", "\\0", "\\b", "\\B", "\\A", "\\Z", "\\z", "\\G", "\\x4", "\\uD800", "\\udfff", "\\U00110000",
           "\\ud800", "\\"]
CLASS_ITEMS = ["a", "z", "0-9", "a-z", "A-Z", "é-😀", "\\x00-\\x1f", "\\u0100-\\uffff", "\\d", "\\w", "\\s", "\\D",
               "\\W", "\\S", "\\]", "\\\\", "\\-", "\\b", "\\n", "-", "^", "[", ".", "😀", "\\U00010000-\\U0010ffff",
               "\\ud7ff-\\ue000",
               # refused
               "z-a", "\\d-z", "a-\\w", "\\ud800", "\ud800", "\\q"]
QUANTIFIERS = ["*", "+", "?", "{2}", "{0}", "{1}", "{0,1}", "{1,1}", "{0,3}", "{2,}", "{0,}", "{1,}", "{,2}",
               "{,}", "{,0}", "{3,5}", "*?", "+?", "??", "{2,4}?", "{007}",
               # refused or literal braces
               "{3,1}", "*+", "**", "{2}{3}", "{", "{}", "{a}", "{2", "{,", "?+"]
SPECIALS = ["(?&<tool_call>)", "(?&</tool_call>)", "(?&<|eot_id|>)", "(?&x)", "(?&é)", "(?&)", "(?&<a"]
GROUP_OPENERS = ["(?:", "(", "(?P<g>", "(?P<é_1>", "(?P<_>",
                 # refused
                 "(?P<1a>", "(?P<>", "(?P<a", "(?=", "(?!", "(?<=", "(?i)", "(?#", "(?P=g)", "(?>", "(?<n>", "(?"]


def class_text() -> st.SearchStrategy[str]:
    items = st.lists(st.sampled_from(CLASS_ITEMS), max_size=4).map("".join)
    return st.tuples(st.sampled_from(["[", "[^", "[]", "[^]"]), items, st.sampled_from(["]", "]", "]", "-]", ""])).map(
        "".join)


def dialect_patterns() -> st.SearchStrategy[str]:
    atoms = st.one_of(st.sampled_from(LITERALS), st.sampled_from(ESCAPES), class_text(), st.just("."),
                      st.sampled_from(SPECIALS), st.sampled_from(["$", "^", "|", ")", "(", "*", "\udc00"]))

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.lists(inner, min_size=2, max_size=4).map("".join),
            st.tuples(inner, inner).map("|".join),
            st.tuples(st.sampled_from(GROUP_OPENERS), inner).map(lambda p: f"{p[0]}{p[1]})"),
            st.tuples(inner, st.sampled_from(QUANTIFIERS)).map("".join),
            st.tuples(inner, st.sampled_from(QUANTIFIERS)).map(lambda p: f"(?:{p[0]}){p[1]}"),
        )

    body = st.recursive(atoms, extend, max_leaves=16)
    return st.tuples(st.sampled_from(["", "", "^"]), body, st.sampled_from(["", "", "$"])).map("".join)


@given(pattern=dialect_patterns(), allow_special=st.booleans())
@SETTINGS
def test_generated_patterns_match_python_exactly(pattern: str, allow_special: bool) -> None:
    assert_agrees(pattern, allow_special, handled=True)


SCALARS = st.integers(0, regex.MAX_SCALAR).filter(lambda cp: not 0xD800 <= cp <= 0xDFFF)


@given(ranges=st.lists(st.tuples(SCALARS, SCALARS).map(sorted), max_size=40), negate=st.booleans(),
       shorthands=st.lists(st.sampled_from(["\\d", "\\W", "\\S", "\\s"]), max_size=3))
@SETTINGS
def test_large_classes_match_python_exactly(ranges: list[list[int]], negate: bool, shorthands: list[str]) -> None:
    items = "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in ranges)
    assert_agrees(("[^" if negate else "[") + items + "".join(shorthands) + "]", handled=True)


@given(pattern=st.text(alphabet="ab()[]{}|*+?.^$\\-,0123456789:?P<>&xudé😀\n", max_size=24),
       allow_special=st.booleans())
@SETTINGS
def test_random_text_over_the_metacharacters_matches_python(pattern: str, allow_special: bool) -> None:
    assert_agrees(pattern, allow_special)


MUTATION_ALPHABET = "()[]{}|*+?.^$\\-,:0123456789<>&Pxu\"é😀\ud800\x00"


@pytest.mark.skipif(not CORPUS, reason="maskbench-dev corpus absent")
def test_mutated_patterns_never_crash_and_never_disagree() -> None:
    rng = random.Random(20241130)
    seeds = [p for p in corpus_patterns() if len(p) <= 4000][:60] + codec_patterns()[:20]
    seeds += [json_lexemes.format_body(name) for name in json_lexemes.STRING_FORMATS]
    for _ in range(3000):
        text = rng.choice(seeds)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(text) + 1)
            action = rng.randrange(4)
            if action == 0:
                text = text[:i]
            elif action == 1:
                text = text[:i] + "".join(rng.choice(MUTATION_ALPHABET) for _ in range(rng.randint(1, 3))) + text[i:]
            elif action == 2:
                text = text[:i] + text[i + rng.randint(1, 5):]
            else:
                text = text[:i] + chr(rng.randrange(0x110000)) + text[i:]
        for allow_special in (False, True):
            assert_agrees(text, allow_special)


# -- edges ---------------------------------------------------------------------------------------------------------


def test_nesting_limit_is_the_python_parser_limit() -> None:
    limit = dialect_parser.MAX_NESTING
    assert_agrees("(" * limit + "a" + ")" * limit, handled=True)
    assert _pattern.program("(" * (limit + 1) + "a" + ")" * (limit + 1), False) is None
    assert_agrees("(?&x)" * 3 + "(?:" * limit + "(?&y)" + ")" * limit, True, handled=True)


def test_counts_beyond_int32_and_sizes_beyond_the_budget() -> None:
    assert _pattern.program("a{2147483648}", False) is None  # declined: Python reports the budget error
    assert _pattern.program("(?:){99999999999}", False) is None  # declined, though Python accepts it (Empty)
    assert_agrees("a{2147483647}", handled=True)  # over budget: the caller raises on the exact size
    assert_agrees("((((a{1000}){1000}){1000}){1000}){1000}", handled=True)
    with pytest.raises(GrammarTooLargeError) as native, mock.patch.object(automata_dfa, "parse", side_effect=AssertionError):
        fsm.compile_dfa("a{300000}")
    with pytest.raises(GrammarTooLargeError) as reference:
        compile_dfa_reference("a{300000}")
    assert str(native.value) == str(reference.value)


def test_non_str_and_str_subclasses_are_left_to_python() -> None:
    class Text(str):
        pass

    assert _pattern.program(Text("abc"), False) is None
    assert _pattern.program(b"abc", False) is None


def test_compile_dfa_uses_the_native_program_and_falls_back_for_errors() -> None:
    with mock.patch.object(automata_dfa, "parse", side_effect=AssertionError("python path taken")):
        dfa = fsm.compile_dfa("(?&<s>)[a-zé]{1,3}(?:x|y)*", allow_special=True)
    assert dfa.special_names == ("<s>",)
    reference = compile_dfa_reference("(?&<s>)[a-zé]{1,3}(?:x|y)*", allow_special=True)
    assert dfa.fingerprint == reference.fingerprint
    with pytest.raises(RegexSyntaxError) as info:
        fsm.compile_dfa("ab(?=c)")
    assert info.value.position == 2
