"""Matcher: random walks over real vocabularies never leave the language, never miss a possible token,
end in documents Python's ``re`` accepts, and close within any feasible budget."""

from __future__ import annotations

import random
import re
import zlib

import numpy as np
import pytest
from tests.constrained.dfa_reference import make_dfa, walk_bytes

from constrained.errors import BudgetTooSmallError
from constrained.fsm import DEAD, DFA
from constrained.grammar import Grammar, compile_regex
from constrained.index import TERMINAL, TokenIndex
from constrained.matcher import Matcher
from constrained.vocabulary import Vocabulary

PATTERNS = [
    r'\{"name":"(get_weather|search)","arguments":\{"city":"[a-zA-Z ]{1,20}","days":(0|[1-9][0-9]?)\}\}',
    r'\[(-?(0|[1-9][0-9]{0,3})(\.[0-9]{1,3})?(, ?-?(0|[1-9][0-9]{0,3})(\.[0-9]{1,3})?){0,5})?\]',
    r'"([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}){0,24}"',
    r"(yes|no|maybe)( because [a-z ]{1,30})?\.",
    r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
    r"(héllo|日本語|emoji 🎉) ?[α-ω]{0,3}",
]


@pytest.fixture(scope="module", params=["llama3_vocab", "qwen2_vocab"])
def real_vocab(request) -> Vocabulary:
    return request.getfixturevalue(request.param)


@pytest.fixture(autouse=True)
def no_disk_cache(monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", "off")


def assert_mask_is_exact(matcher: Matcher, rng: random.Random, n_disallowed_checks: int = 300) -> None:
    """Allowed tokens stay alive in the DFA and disallowed ones really are dead (random samples of both; the
    exhaustive comparison is in test_index); specials only when named, EOS iff accepting."""
    grammar = matcher.grammar
    dfa, vocab = grammar.dfa, grammar.vocabulary
    state = matcher.state
    allowed = matcher.allowed_token_ids()
    assert allowed.dtype == np.int32 and np.all(np.diff(allowed) > 0)
    allowed_set = set(allowed.tolist())
    named = {vocab.special_ids_by_name[name]: 256 + i for i, name in enumerate(dfa.special_names)}
    allowed_list = allowed.tolist()
    for token_id in rng.sample(allowed_list, min(len(allowed_list), 1500)):
        if token_id in named and dfa.transitions[state, named[token_id]] != DEAD:
            continue
        if token_id in vocab.eos_token_ids:
            assert dfa.accepting[state], "EOS allowed in a non-accepting state"
            continue
        assert token_id in vocab.normal_ids, f"special token {token_id} allowed without being named"
        assert walk_bytes(dfa, state, vocab.tokens[token_id]) != DEAD
    eos_allowed = allowed_set & vocab.eos_token_ids
    if matcher.remaining_budget is None or matcher.remaining_budget >= 1:
        assert bool(eos_allowed) == bool(dfa.accepting[state])
    normal_disallowed = [i for i in rng.sample(range(len(vocab)), n_disallowed_checks) if i not in allowed_set]
    for token_id in normal_disallowed:
        if token_id in vocab.normal_ids and vocab.tokens[token_id] and matcher.remaining_budget is None:
            assert walk_bytes(dfa, state, vocab.tokens[token_id]) == DEAD, f"token {token_id} wrongly masked"
        assert not matcher.advance(token_id)
        assert matcher.state == state


def random_walk(matcher: Matcher, rng: random.Random, *, check: bool, max_steps: int = 200) -> bytes:
    vocab = matcher.grammar.vocabulary
    out = bytearray()
    for _ in range(max_steps):
        if matcher.is_terminated():
            break
        if check:
            assert_mask_is_exact(matcher, rng)
        allowed = matcher.allowed_token_ids().tolist()
        assert allowed, "a non-terminated matcher must allow something"
        eos = [t for t in allowed if t in vocab.eos_token_ids]
        token_id = rng.choice(eos) if eos and rng.random() < 0.3 else rng.choice(allowed)
        assert matcher.advance(token_id)
        if token_id not in vocab.eos_token_ids:
            out += vocab.tokens[token_id]
    return bytes(out)


@pytest.mark.model
@pytest.mark.parametrize("pattern", PATTERNS)
def test_random_walks_stay_inside_the_language_and_end_in_full_matches(real_vocab, pattern):
    grammar = compile_regex(pattern, real_vocab)
    rng = random.Random(zlib.crc32(pattern.encode()))
    completed = 0
    for walk in range(6):
        matcher = grammar.matcher()
        text = random_walk(matcher, rng, check=walk < 2)
        if matcher.is_accepting():
            completed += 1
            assert re.fullmatch(pattern, text.decode("utf-8")), text
    assert completed > 0


@pytest.mark.model
@pytest.mark.parametrize("pattern", PATTERNS)
def test_budgeted_walks_always_close_within_budget(real_vocab, pattern):
    grammar = compile_regex(pattern, real_vocab)
    needed = grammar.index.needed_budget(grammar.dfa.initial)
    with pytest.raises(BudgetTooSmallError):
        grammar.matcher(max_tokens=needed - 1)
    rng = random.Random(7)
    for extra in (0, 1, 3, 10):
        for _ in range(3):
            matcher = grammar.matcher(max_tokens=needed + extra)
            text = random_walk(matcher, rng, check=False, max_steps=needed + extra + 1)
            assert matcher.is_terminated()
            assert matcher.is_accepting()
            assert matcher.tokens_consumed <= needed + extra
            assert re.fullmatch(pattern, text.decode("utf-8")), text


@pytest.mark.model
def test_rollback_restores_state_and_mask(real_vocab):
    grammar = compile_regex(PATTERNS[0], real_vocab)
    matcher = grammar.matcher(max_tokens=60)
    rng = random.Random(3)
    snapshots = []
    for _ in range(8):
        snapshots.append((matcher.state, matcher.allowed_token_ids().copy(), matcher.remaining_budget))
        assert matcher.advance(rng.choice(matcher.allowed_token_ids().tolist()))
    for back in range(8, 0, -1):
        matcher.rollback(1)
        state, allowed, remaining = snapshots[back - 1]
        assert matcher.state == state
        assert matcher.remaining_budget == remaining
        np.testing.assert_array_equal(matcher.allowed_token_ids(), allowed)
    with pytest.raises(ValueError):
        matcher.rollback(1)
    assert matcher.advance(int(matcher.allowed_token_ids()[0]))
    matcher.reset()
    assert matcher.tokens_consumed == 0 and matcher.state == grammar.dfa.initial


@pytest.mark.model
def test_apply_mask_leaves_exactly_the_allowed_ids_finite(real_vocab):
    grammar = compile_regex(PATTERNS[2], real_vocab)
    matcher = grammar.matcher()
    rng = np.random.default_rng(0)
    for _ in range(4):
        logits = rng.standard_normal(len(real_vocab)).astype(np.float32)
        matcher.apply_mask(logits)
        np.testing.assert_array_equal(np.flatnonzero(np.isfinite(logits)), matcher.allowed_token_ids())
        normal = [t for t in matcher.allowed_token_ids().tolist() if t not in real_vocab.eos_token_ids]
        if not normal:
            break
        assert matcher.advance(normal[len(normal) // 2])


# -- small, hand-built grammars (no real vocabulary needed) -----------------------------------------------------------


def grammar_of(dfa: DFA, vocab: Vocabulary) -> Grammar:
    return Grammar(pattern="<hand-built>", allow_special=True, dfa=dfa, vocabulary=vocab,
                   index=TokenIndex(dfa, vocab), fingerprint=dfa.fingerprint)  # fmt: skip


def test_advance_refuses_disallowed_tokens_without_moving():
    vocab = Vocabulary.from_tokens([b"a", b"b", b"</s>"], eos_token_ids=[2], special_ids_by_name={"</s>": 2})
    table = np.full((2, 256), DEAD, dtype=np.int32)
    table[0, ord("a")] = 1
    matcher = grammar_of(make_dfa(table, np.asarray([False, True])), vocab).matcher()
    assert not matcher.advance(1) and not matcher.advance(2) and not matcher.advance(10**6) and not matcher.advance(-1)
    assert matcher.tokens_consumed == 0
    assert matcher.advance(0)
    assert matcher.allowed_token_ids().tolist() == [2]
    assert matcher.is_terminated() and matcher.is_accepting()  # accepting, nothing but EOS left
    assert matcher.forced_token() == 2
    assert matcher.advance(2)
    assert matcher.state == TERMINAL and matcher.allowed_token_ids().tolist() == []
    assert not matcher.advance(2)
    logits = np.zeros(3, dtype=np.float32)
    matcher.apply_mask(logits)
    assert np.all(np.isneginf(logits))
    matcher.rollback(1)
    assert matcher.state == 1 and matcher.allowed_token_ids().tolist() == [2]


def test_forced_special_token_and_forced_bytes():
    pieces = [b"{", b"}", b"x", b"<tool_call>", b"<|eot|>"]
    vocab = Vocabulary.from_tokens(pieces, eos_token_ids=[4], special_ids_by_name={"<tool_call>": 3, "<|eot|>": 4})
    table = np.full((4, 257), DEAD, dtype=np.int32)
    table[0, 256] = 1  # <tool_call>
    table[1, ord("{")] = 2
    table[2, ord("x")] = 2
    table[2, ord("}")] = 3
    matcher = grammar_of(make_dfa(table, np.asarray([False, False, False, True]), ("<tool_call>",)), vocab).matcher()
    assert matcher.forced_token() == 3
    assert matcher.forced_bytes() == b""  # a special symbol stops forced bytes
    assert matcher.advance(3)
    assert matcher.forced_bytes() == b"{"
    assert matcher.forced_token() == 0
    assert matcher.advance(0)
    assert matcher.forced_bytes() == b"" and matcher.forced_token() is None


def test_budget_exhausted_in_accepting_state_terminates_with_nothing_allowed():
    vocab = Vocabulary.from_tokens([b"a", b"</s>"], eos_token_ids=[1], special_ids_by_name={"</s>": 1})
    table = np.full((1, 256), DEAD, dtype=np.int32)
    table[0, ord("a")] = 0
    grammar = grammar_of(make_dfa(table, np.asarray([True])), vocab)
    matcher = grammar.matcher(max_tokens=2)
    assert matcher.allowed_token_ids().tolist() == [0, 1]
    assert matcher.advance(0) and matcher.advance(0)
    assert matcher.remaining_budget == 0
    assert matcher.allowed_token_ids().tolist() == []
    assert matcher.is_terminated() and matcher.is_accepting()
    assert grammar.matcher(max_tokens=0).is_terminated()
