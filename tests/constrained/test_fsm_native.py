"""The native compile path (constrained._fsm behind fsm.compile_dfa) gives exactly the reference's DFA: identical
tables, acceptance, distances, special names and fingerprints, and identical budget / empty-language errors at the
same limits; the program handed to it is the same whether or not the AST shares nodes; malformed native input fails
loud."""

from __future__ import annotations

import array
import threading
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constrained import _fsm, fsm, regex
from constrained.automata import dfa as automata_dfa
from constrained.automata import program as automata_program
from constrained.errors import EmptyLanguageError, GrammarTooLargeError
from constrained.regex import Alternation, CharSet, Concat, Empty, Node, Repeat, Special
from constrained.schema import schema_to_pattern
from tests.constrained.fsm_reference import compile_dfa_reference
from tests.constrained.test_fsm import HAND_WRITTEN, OBJECT, STRING, regex_trees

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def outcome(compile_, pattern: str, **kwargs: object) -> tuple[object, ...]:
    """Everything observable about one compilation: the DFA's arrays and names, or the error's typed fields."""
    try:
        dfa = compile_(pattern, **kwargs)
    except GrammarTooLargeError as exc:
        return ("too_large", exc.what, exc.limit, str(exc))
    except EmptyLanguageError as exc:
        return ("empty", exc.pattern)
    assert dfa.transitions.dtype == np.int32 and dfa.transitions.flags.c_contiguous
    assert dfa.accepting.dtype == bool and dfa.distance.dtype == np.int32
    assert not dfa.transitions.flags.writeable and not dfa.accepting.flags.writeable
    return ("dfa", dfa.transitions.tobytes(), dfa.transitions.shape, dfa.accepting.tobytes(), dfa.distance.tobytes(),
            dfa.special_names, dfa.initial, dfa.fingerprint)


def assert_same(pattern: str, **kwargs: object) -> None:
    native = outcome(fsm.compile_dfa, pattern, **kwargs)
    reference = outcome(compile_dfa_reference, pattern, **kwargs)
    assert native == reference, pattern


SPECIAL_PATTERNS = [
    "(?&<tool_call>)x(?&<|eot_id|>)|(?&<tool_call>)y",
    "a(?&<s>)*b",
    "(?:(?&<a>)|(?&<b>)[0-9]+){2,5}(?&<a>)?",
    '(?&<tool_call>)\\{"name":' + STRING + "\\}(?&</tool_call>)|[^<]*",
]

SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": -5, "maximum": 1234},
                                      "b": {"type": "string", "maxLength": 3}}, "required": ["a"]},
    {"type": "array", "items": {"enum": ["x", "y", 3, None]}, "minItems": 1, "maxItems": 4},
    {"type": "object", "properties": {"n": {"type": "number"}, "t": {"type": "boolean"},
                                      "s": {"type": "string", "pattern": "^[a-z]+@[a-z]+\\.com$"}}},
    {"anyOf": [{"type": "string", "format": "date"}, {"type": "array", "items": {"type": "integer"}}]},
    {"type": "object", "properties": {"deep": {"type": "object", "properties": {"x": {"type": "array"}}}},
     "additionalProperties": False},
]


def _automaton_of(pattern: str) -> str:
    return regex.automaton_text(fsm.automaton(fsm.compile_dfa(pattern)))


AUTOMATON_PATTERNS = [
    "(?@!61>0)", "(?@!)", "(?@)", "(?@)a|b", "(?@61>1;62>2;!)", "(?@61>1;!61>1)",
    "x" + _automaton_of("(?:ab|[0-9x])*") + "y",
    "(?:" + _automaton_of("[a-z]+[0-9]*") + "|q){2,4}",
    "(?:" + _automaton_of("(?:é|[a-c])*z?") + ")+" + _automaton_of("[^\x00-\x7f]{1,3}"),
    '"' + _automaton_of(r'(?:[^"\\\x00-\x1f]|\\["\\bfnrt]|\\u00[01][0-9a-f]){0,5}') + '"',
]


@pytest.mark.parametrize("pattern", AUTOMATON_PATTERNS)
def test_native_matches_reference_on_embedded_automata(pattern: str) -> None:
    assert_same(pattern)


@pytest.mark.parametrize("schema", [
    {"type": "string", "pattern": "^[a-c]+x?$", "minLength": 2, "maxLength": 5},
    {"type": "object", "patternProperties": {"^a": {"type": "integer"}, "b$": {"type": "string"}},
     "properties": {"ab": {"type": "integer"}}, "additionalProperties": {"type": "boolean"}},
])
def test_native_matches_reference_on_schema_patterns_with_automata(schema: dict) -> None:
    for whitespace in ("compact", "flexible"):
        pattern = schema_to_pattern(schema, whitespace=whitespace)
        assert "(?@" in pattern
        assert_same(pattern)


@pytest.mark.parametrize("pattern", HAND_WRITTEN + [OBJECT, "(a|b)*a(a|b){5}", "(a?){300}b", r"[^\x00-\x7f]{2,3}"])
def test_native_matches_reference_on_hand_written_patterns(pattern: str) -> None:
    assert_same(pattern)


@pytest.mark.parametrize("pattern", SPECIAL_PATTERNS)
def test_native_matches_reference_with_special_terminals(pattern: str) -> None:
    assert_same(pattern, allow_special=True)


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize("whitespace", ["compact", "flexible"])
def test_native_matches_reference_on_schema_patterns(schema: dict, whitespace: str) -> None:
    assert_same(schema_to_pattern(schema, whitespace=whitespace))


@given(pattern=regex_trees())
@SETTINGS
def test_native_matches_reference_on_random_regexes(pattern: str) -> None:
    assert_same(pattern)


@given(pattern=regex_trees(), max_states=st.integers(1, 40), max_work=st.integers(1, 400))
@SETTINGS
def test_budgets_trip_at_the_same_point_as_the_reference(pattern: str, max_states: int, max_work: int) -> None:
    with mock.patch.object(automata_dfa, "MAX_SUBSET_WORK", max_work):
        assert_same(pattern, max_states=max_states)


@pytest.mark.parametrize(
    ("pattern", "max_states", "what"),
    [("(a|b)*a(a|b){20}", 2000, "dfa_states"), ("(a|aa){1000}", 50_000, None), ("((a{100}){100}){100}", 50_000,
                                                                                   "nfa_states")],
)
def test_budget_errors_are_the_reference_errors(pattern: str, max_states: int, what: str | None) -> None:
    native = outcome(fsm.compile_dfa, pattern, max_states=max_states)
    assert native == outcome(compile_dfa_reference, pattern, max_states=max_states)
    if what is not None:
        assert native[:2] == ("too_large", what)


@pytest.mark.parametrize("pattern", [r"[^\x00-\U0010ffff]", r"a[^\x00-\U0010ffff]b", r"(?:[^\x00-\U0010ffff])+"])
def test_empty_languages_are_refused_like_the_reference(pattern: str) -> None:
    native = outcome(fsm.compile_dfa, pattern)
    assert native == ("empty", pattern) == outcome(compile_dfa_reference, pattern)


def unshared(node: Node) -> Node:
    """An equal AST in which no node object occurs twice (what the parser built before it cached groups)."""
    if isinstance(node, (Concat, Alternation)):
        return type(node)(items=tuple(unshared(item) for item in node.items))
    if isinstance(node, Repeat):
        return Repeat(item=unshared(node.item), min=node.min, max=node.max)
    if isinstance(node, CharSet):
        return CharSet(ranges=node.ranges)
    if isinstance(node, Special):
        return Special(name=node.name)
    return Empty()


def program_bytes(ast: Node) -> tuple[object, ...]:
    program = automata_program.Program.build(ast)
    return (program.code.tobytes(), program.templates.tobytes(), program.offsets.tobytes(), program.names,
            program.size)


def shared_group_patterns() -> st.SearchStrategy[str]:
    """Patterns whose groups recur (so the parser shares their nodes), with charsets needing templates and
    special terminals, whose numbers depend on the order they first appear in."""
    atoms = st.sampled_from(["a", "é", "[é-😀]", "[^b-é]", r"\d", ".", "(?&<a>)", "(?&<b>)", "(?:)", "[ab]"])

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(inner, inner).map("".join),
            st.tuples(inner, inner).map(lambda p: f"(?:{p[0]}){p[1]}(?:{p[0]})"),
            st.tuples(inner, inner).map(lambda p: f"(?:{p[0]}|{p[1]})"),
            st.tuples(inner, st.sampled_from(["*", "?", "{2}", "{1,3}", "{2,}"])).map(lambda p: f"(?:{p[0]}){p[1]}"),
        )

    return st.recursive(atoms, extend, max_leaves=10)


@given(pattern=shared_group_patterns())
@SETTINGS
def test_programs_of_shared_nodes_are_the_programs_of_unshared_ones(pattern: str) -> None:
    regex.clear_caches()
    ast = regex.parse(pattern, allow_special=True)
    assert program_bytes(ast) == program_bytes(unshared(ast))


def test_shared_nodes_are_copied_with_their_first_numbering() -> None:
    ast = regex.parse("(?:(?&<b>)[é-😀]|x)(?&<a>)[^b-é](?:(?&<b>)[é-😀]|x)", allow_special=True)
    assert isinstance(ast, Concat) and ast.items[0] is ast.items[3]  # one node, emitted twice
    assert program_bytes(ast) == program_bytes(unshared(ast))
    assert automata_program.Program.build(ast).names == ("<b>", "<a>")
    assert_same("(?:(?&<b>)[é-😀]|x)(?&<a>)[^b-é](?:(?&<b>)[é-😀]|x)", allow_special=True)


def test_repeat_counts_beyond_int32_are_refused_by_size() -> None:
    assert outcome(fsm.compile_dfa, "a{3000000000}") == outcome(compile_dfa_reference, "a{3000000000}")
    with pytest.raises(GrammarTooLargeError, match="~9000000003 NFA states"):
        fsm.compile_dfa("a{3000000000}")


def test_concurrent_native_compiles_agree() -> None:
    pattern = schema_to_pattern(SCHEMAS[0], whitespace="flexible")
    expected = fsm.compile_dfa(pattern).fingerprint
    results: list[str] = []

    def work() -> None:
        for _ in range(5):
            results.append(fsm.compile_dfa(pattern).fingerprint)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [expected] * 20


@pytest.mark.parametrize(
    "code",
    [[99], [automata_program.OP_CONCAT, 2, automata_program.OP_BYTE, 97], [automata_program.OP_CHARSET, 5], [automata_program.OP_SPECIAL, 256],
     [automata_program.OP_BYTE, 97, automata_program.OP_BYTE], [automata_program.OP_REPEAT, 3, 1, automata_program.OP_EMPTY], [automata_program.OP_BYTE, 300]],
)
def test_malformed_programs_raise_value_error(code: list[int]) -> None:
    empty = array.array("i")
    with pytest.raises(ValueError, match="malformed"):
        _fsm.compile(array.array("i", code), empty, empty, 0, 100, 1000)


def test_non_int32_buffers_are_refused() -> None:
    with pytest.raises(ValueError, match="int32"):
        _fsm.compile(array.array("q", [automata_program.OP_EMPTY]), array.array("i"), array.array("i"), 0, 100, 1000)
