"""fsm.compile_dfa / next_hop: the byte DFA accepts exactly what Python's `re` full-matches (as UTF-8), and is
minimal, trimmed, canonically numbered, with exact distances; budgets and empty languages are refused."""

from __future__ import annotations

import re
from collections import deque

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from constrained.errors import EmptyLanguageError, GrammarTooLargeError, RegexSyntaxError
from constrained.fsm import DEAD, DFA, compile_dfa, next_hop

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PER_PATTERN = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])

STRING = r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"'
INTEGER = r"(?:0|-?[1-9][0-9]*)"
NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
OBJECT = (
    r'\{"name":' + STRING + r',"age":' + INTEGER + r',"score":' + NUMBER + r',"active":(?:true|false)'
    r',"tags":\[(?:' + STRING + r"(?:," + STRING + r")*)?\]\}"
)

HAND_WRITTEN = [
    "",
    "a",
    "abc",
    "a|b|",
    "(a|b)*abb",
    "a{3}",
    "a{2,4}b{0,2}",
    "(?:ab){2,}",
    "a{,3}",
    "x{",
    "a{1,2",
    "[a-cx-z]+",
    "[^a-c]",
    "[^a]*",
    "[]a]",
    "[a-]",
    "[-a]",
    r"[\d\s]+",
    r"\w+\W",
    r"\D\S",
    ".",
    ".*",
    "é+",
    "[à-ÿ]{2}",
    "[\u0100-\uffff]",
    "[^\u0000-\u007f]",
    "😀|[😀-🙏]x",
    r"\u00e9\x41\t\n\r\f\v",
    r"\.\*\+\?\(\)\[\]\{\}\|\^\$\-\/\"\\",
    "^abc$",
    "(?P<name>ab)c",
    "a*?b+?c??d{2,3}?",
    "((a|b)(c|d))*",
    "(a*)*",
    "(a|)+",
    "()",
    "a}]",
    INTEGER,
    NUMBER,
    STRING,
    OBJECT,
    r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])",
]

TEXT_ALPHABET = "abcdxyz09 -_\n\t\"\\é😀{}[]é\u0100\uffff\U0010ffff"


def fullmatch(pattern: str, text: str) -> bool:
    return re.fullmatch(pattern, text, re.ASCII) is not None


def moore_state_count(dfa: DFA) -> int:
    """Number of Myhill–Nerode classes, computed independently (Moore refinement on the completed table)."""
    table = np.where(dfa.transitions == DEAD, dfa.n_states, dfa.transitions)
    table = np.vstack([table, np.full((1, dfa.n_symbols), dfa.n_states)])
    block = np.append(dfa.accepting.astype(np.int64), 2)  # the added sink is its own class
    count = len(np.unique(block))
    while True:
        signature = np.concatenate([block[:, None], block[table]], axis=1)
        _, block = np.unique(signature, axis=0, return_inverse=True)
        block = block.ravel()
        new_count = int(block.max()) + 1
        if new_count == count:
            return count - 1  # classes minus the sink's
        count = new_count


def forward_distance(dfa: DFA, state: int) -> int:
    seen = {state}
    queue = deque([(state, 0)])
    while queue:
        s, d = queue.popleft()
        if dfa.accepting[s]:
            return d
        for t in set(dfa.transitions[s].tolist()) - {DEAD}:
            if t not in seen:
                seen.add(t)
                queue.append((t, d + 1))
    return -1


# ---------------------------------------------------------------------------------------------- random regexes


def regex_trees() -> st.SearchStrategy[str]:
    atoms = st.sampled_from(
        ["a", "b", "c", "é", "😀", r"\"", r"\\", "[ab]", "[^a]", "[a-c]", r"\d", r"\s", r"\w", ".", "[^\n]",
         "[é-😀]", "[^b-é]", "\u0100"]
    )

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        quantifiers = st.sampled_from(["*", "+", "?", "{2}", "{0,2}", "{1,3}", "{2,}", "*?"])
        return st.one_of(
            st.tuples(inner, inner).map(lambda p: p[0] + p[1]),
            st.tuples(inner, inner).map(lambda p: f"(?:{p[0]}|{p[1]})"),
            st.tuples(inner, quantifiers).map(lambda p: f"(?:{p[0]}){p[1]}"),
            inner.map(lambda p: f"({p})"),
        )

    return st.recursive(atoms, extend, max_leaves=8)


@pytest.mark.parametrize("pattern", HAND_WRITTEN)
@given(data=st.data())
@PER_PATTERN
def test_hand_written_patterns_accept_exactly_what_re_fullmatches(pattern: str, data: st.DataObject) -> None:
    dfa = compile_dfa(pattern)
    matching = data.draw(st.from_regex(re.compile(pattern, re.ASCII), fullmatch=True))
    assume(not any(0xD800 <= ord(ch) <= 0xDFFF for ch in matching))
    assert dfa.accepts(matching.encode("utf-8"))
    other = data.draw(st.text(alphabet=TEXT_ALPHABET, max_size=10) | st.text(max_size=6))
    assert dfa.accepts(other.encode("utf-8")) == fullmatch(pattern, other)


@given(pattern=regex_trees(), data=st.data())
@SETTINGS
def test_random_regexes_agree_with_re_fullmatch_on_utf8(pattern: str, data: st.DataObject) -> None:
    compiled = re.compile(pattern, re.ASCII)
    try:
        dfa = compile_dfa(pattern)
    except EmptyLanguageError:
        pytest.fail(f"{pattern!r} is not empty")
    for _ in range(3):
        text = data.draw(st.from_regex(compiled, fullmatch=True))
        if any(0xD800 <= ord(ch) <= 0xDFFF for ch in text):
            continue
        assert dfa.accepts(text.encode("utf-8")), (pattern, text)
    for _ in range(5):
        text = data.draw(st.text(alphabet=TEXT_ALPHABET, max_size=8))
        assert dfa.accepts(text.encode("utf-8")) == (compiled.fullmatch(text) is not None), (pattern, text)


@given(pattern=regex_trees())
@SETTINGS
def test_compiled_dfa_is_minimal_trimmed_and_canonical(pattern: str) -> None:
    dfa = compile_dfa(pattern)
    assert dfa.initial == 0
    assert dfa.n_states == moore_state_count(dfa)
    assert (dfa.distance >= 0).all()  # trimmed: every state can still finish
    # canonical: BFS from 0 over symbols in increasing order visits states 0, 1, 2, ...
    order = [0]
    seen = {0}
    for s in order:
        for t in dfa.transitions[s].tolist():
            if t != DEAD and t not in seen:
                seen.add(t)
                order.append(t)
    assert order == list(range(dfa.n_states))


@pytest.mark.parametrize(
    ("left", "right"),
    [("a|b", "[ab]"), ("(a*)*", "a*"), ("aa*", "a+"), ("a{2,3}", "aaa?"), (r"\d", "[0-9]"),
     ("(?:ab|ac)", "a[bc]"), ("x(?P<g>y)z", "xyz"), ("[^a]", "[^a]|b"), ("é", "\u00e9"), ("a*?", "a*"),
     ("(?:a?){3}", "a{0,3}"), ("(?:a+){2,}", "a{2,}"), ("(?:a{1,3})?", "a{0,3}"), ("(?:a*){0}", ""),
     ("(?:a+)*", "a*"), ("(?:a*)+", "a*"), ("(?:a{2}){3}", "a{6}"), ("(?:(?:ab)?){2,4}c", "(?:ab){0,4}c")],
)
def test_equivalent_patterns_give_identical_tables_and_fingerprints(left: str, right: str) -> None:
    a, b = compile_dfa(left), compile_dfa(right)
    assert a.fingerprint == b.fingerprint
    assert np.array_equal(a.transitions, b.transitions)
    assert np.array_equal(a.accepting, b.accepting)


def test_fingerprint_is_stable_and_separates_languages() -> None:
    assert compile_dfa(OBJECT).fingerprint == compile_dfa(OBJECT).fingerprint
    prints = {compile_dfa(p).fingerprint for p in ["a", "b", "a*", "a+", "", "[^a]"]}
    assert len(prints) == 6
    with_special = compile_dfa("(?&<x>)", allow_special=True)
    other_name = compile_dfa("(?&<y>)", allow_special=True)
    assert with_special.fingerprint != other_name.fingerprint  # same table shape, different terminal


@given(pattern=regex_trees())
@SETTINGS
def test_distance_is_the_shortest_path_to_acceptance(pattern: str) -> None:
    dfa = compile_dfa(pattern)
    for state in range(dfa.n_states):
        assert dfa.distance[state] == forward_distance(dfa, state)


@given(pattern=regex_trees() | st.sampled_from(HAND_WRITTEN))
@SETTINGS
def test_next_hop_reaches_acceptance_in_exactly_distance_steps_by_smallest_symbols(pattern: str) -> None:
    dfa = compile_dfa(pattern)
    hop = next_hop(dfa)
    assert hop.dtype == np.int32 and hop.shape == (dfa.n_states,)
    for state in range(dfa.n_states):
        if dfa.accepting[state]:
            assert hop[state] == -1
            continue
        row = dfa.transitions[state]
        candidates = [
            x for x in range(dfa.n_symbols) if row[x] != DEAD and dfa.distance[row[x]] == dfa.distance[state] - 1
        ]
        assert hop[state] == min(candidates)
        s, steps = state, 0
        while not dfa.accepting[s]:
            s = int(dfa.transitions[s, hop[s]])
            steps += 1
        assert steps == dfa.distance[state]


@pytest.mark.parametrize("pattern", ["[^a]*", ".*", r"\W*", r"[^\x00-\x7f]*", "[\u0080-\U0010ffff]*", r"\S+"])
@given(data=st.binary(max_size=8))
@PER_PATTERN
def test_negated_and_wide_classes_never_accept_invalid_utf8(pattern: str, data: bytes) -> None:
    dfa = compile_dfa(pattern)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        assert not dfa.accepts(data)
        return
    assert dfa.accepts(data) == fullmatch(pattern, text)


@pytest.mark.parametrize(
    "bad",
    [b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf4\x90\x80\x80",
     b"\xf5\x80\x80\x80", b"\xff", b"\x80", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98"],
)
def test_overlongs_surrogates_and_truncations_are_rejected(bad: bytes) -> None:
    dfa = compile_dfa("[^a]")
    assert not dfa.accepts(bad)
    assert dfa.accepts("\ud7ff".encode()) and dfa.accepts("\ue000".encode()) and dfa.accepts("\U0010ffff".encode())


def test_special_terminals_get_symbols_in_order_of_first_appearance() -> None:
    dfa = compile_dfa("(?&<tool_call>)x(?&<|eot_id|>)|(?&<tool_call>)y", allow_special=True)
    assert dfa.special_names == ("<tool_call>", "<|eot_id|>")
    assert dfa.n_symbols == 258
    assert dfa.accepts([256, ord("x"), 257])
    assert dfa.accepts([256, ord("y")])
    assert not dfa.accepts([257, ord("x"), 256])
    assert not dfa.accepts(b"<tool_call>y")  # the name's bytes are not the terminal
    assert next_hop(dfa)[0] == 256


def test_special_terminals_can_be_repeated_and_mixed_with_bytes() -> None:
    dfa = compile_dfa("a(?&<s>)*b", allow_special=True)
    assert dfa.accepts([97, 256, 256, 98]) and dfa.accepts(b"ab")
    assert not dfa.accepts([97, 256])


def test_special_terminals_are_refused_without_allow_special() -> None:
    with pytest.raises(RegexSyntaxError) as info:
        compile_dfa("(?&<tool_call>)")
    assert info.value.position == 0


@pytest.mark.parametrize("pattern", [r"[^\x00-\U0010ffff]", r"a[^\x00-\U0010ffff]b", r"(?:[^\x00-\U0010ffff])+"])
def test_empty_language_is_refused(pattern: str) -> None:
    with pytest.raises(EmptyLanguageError) as info:
        compile_dfa(pattern)
    assert isinstance(info.value, ValueError)
    assert info.value.pattern == pattern


def test_empty_alternative_of_an_empty_set_is_not_an_empty_language() -> None:
    dfa = compile_dfa(r"a|[^\x00-\U0010ffff]|(?:[^\x00-\U0010ffff])*")
    assert dfa.accepts(b"a") and dfa.accepts(b"") and dfa.n_states == 2


def test_ambiguous_bounded_repetition_finishes_or_refuses() -> None:
    try:
        dfa = compile_dfa("(a|aa){1000}")
    except GrammarTooLargeError:
        return
    assert dfa.accepts(b"a" * 1000) and dfa.accepts(b"a" * 2000)
    assert not dfa.accepts(b"a" * 999) and not dfa.accepts(b"a" * 2001)


def test_nested_optional_repetition_compiles_to_a_chain() -> None:
    dfa = compile_dfa("(a?){1000}b")
    assert dfa.n_states == 1002
    assert dfa.accepts(b"a" * 1000 + b"b") and not dfa.accepts(b"a" * 1001 + b"b")


def test_nested_repetition_exceeding_the_nfa_budget_is_refused_before_building() -> None:
    with pytest.raises(GrammarTooLargeError) as info:
        compile_dfa("((a{100}){100}){100}")
    assert info.value.what == "nfa_states"


def test_exponential_dfa_is_refused_at_max_states() -> None:
    with pytest.raises(GrammarTooLargeError) as info:
        compile_dfa("(a|b)*a(a|b){20}", max_states=2000)
    assert info.value.what == "dfa_states" and info.value.limit == 2000
    assert compile_dfa("(a|b)*a(a|b){5}").n_states == 64  # the textbook 2^(k+1)


def test_arrays_are_read_only_and_typed() -> None:
    dfa = compile_dfa(OBJECT)
    assert dfa.transitions.dtype == np.int32 and dfa.distance.dtype == np.int32 and dfa.accepting.dtype == bool
    assert dfa.transitions.shape == (dfa.n_states, 256)
    with pytest.raises(ValueError):
        dfa.transitions[0, 0] = 1
    with pytest.raises(ValueError):
        dfa.accepting[0] = True


def test_object_pattern_accepts_json_dumps_output_and_nothing_truncated() -> None:
    import json

    dfa = compile_dfa(OBJECT)
    doc = json.dumps(
        {"name": 'Zoë "Z" \\ 😀\n', "age": -42, "score": 1.5e-3, "active": True, "tags": ["x", "\u0001"]},
        ensure_ascii=False, separators=(",", ":"),
    )
    data = doc.encode("utf-8")
    assert dfa.accepts(data)
    for cut in range(len(data)):
        assert not dfa.accepts(data[:cut])
    assert dfa.walk(data[:10]) != DEAD
