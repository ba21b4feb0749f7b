"""The serving-engine contract (vLLM's StructuredOutputGrammar moves) over real vocabularies: every move agrees with
stepping a fresh matcher along the same tokens, and nothing moves when a move is refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from constrained.grammar import compile_json_schema
from constrained.serving import RequestGrammar

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                           "days": {"type": "integer", "minimum": 1, "maximum": 14},
                                           "unit": {"enum": ["celsius", "fahrenheit"]}},
          "required": ["city", "days"], "additionalProperties": False}


@pytest.fixture(scope="module")
def grammar(qwen2_vocab):
    return compile_json_schema(SCHEMA, qwen2_vocab)


def walk(grammar, picks: list[int], max_tokens: int = 48) -> list[int]:
    """A token path the grammar accepts, to EOS: at each step the allowed token chosen by ``picks``."""
    request = RequestGrammar(grammar, max_tokens=max_tokens)
    path: list[int] = []
    while not request.is_terminated():
        allowed = request.matcher.allowed_token_ids()
        token = int(allowed[picks[len(path) % len(picks)] % len(allowed)])
        assert request.accept_tokens("r", [token])
        path.append(token)
    return path


def refused(request: RequestGrammar) -> list[int]:
    """One token the grammar does not allow here."""
    allowed = request.matcher.allowed_token_ids()
    return [int(np.setdiff1d(np.arange(len(request.matcher.grammar.vocabulary)), allowed)[0])]


@settings(max_examples=30, deadline=None)
@given(picks=st.lists(st.integers(0, 10**6), min_size=1, max_size=8), cut=st.integers(0, 60))
def test_draft_tokens_validate_to_their_accepted_prefix_and_nothing_moves(grammar, picks, cut):
    path = walk(grammar, picks)
    request = RequestGrammar(grammar, max_tokens=48)
    head = path[: min(cut, len(path))]
    assert request.accept_tokens("r", head)
    before = (request.matcher.state, request.num_processed_tokens)
    rest = path[len(head):]
    assert request.validate_tokens(rest) == rest
    bad = refused(request)
    assert request.validate_tokens([*bad, *rest]) == []
    if rest:
        after_first = request.copy()
        after_first.accept_tokens("r", rest[:1])
        wrong = refused(after_first)
        assert request.validate_tokens([rest[0], *wrong]) == rest[:1]
        assert not request.accept_tokens("r", [rest[0], *wrong]), "all or nothing"
    assert (request.matcher.state, request.num_processed_tokens) == before


@settings(max_examples=20, deadline=None)
@given(picks=st.lists(st.integers(0, 10**6), min_size=1, max_size=8), back=st.integers(0, 60))
def test_rollback_and_reset_return_to_the_states_a_fresh_walk_passes_through(grammar, picks, back):
    path = walk(grammar, picks)
    request = RequestGrammar(grammar, max_tokens=48)
    assert request.accept_tokens("r", path) and request.is_terminated()
    n = min(back, len(path))
    request.rollback(n)
    fresh = RequestGrammar(grammar, max_tokens=48)
    fresh.accept_tokens("r", path[: len(path) - n])
    assert request.matcher.state == fresh.matcher.state
    assert np.array_equal(request.matcher.allowed_token_ids(), fresh.matcher.allowed_token_ids())
    request.reset()
    assert request.num_processed_tokens == 0 and request.validate_tokens(path) == path


def test_a_batch_row_gets_the_matchers_bitmask_and_zeros_past_the_vocabulary(grammar):
    request = RequestGrammar(grammar, max_tokens=48)
    words = (len(grammar.vocabulary) + 31) // 32
    batch = np.full((3, words + 2), -1, dtype=np.int32)  # an embedding padded past the vocabulary
    request.fill_bitmask(batch, 1)
    own = np.zeros(words, dtype=np.uint32)
    request.matcher.fill_bitmask(own)
    assert np.array_equal(batch[1, :words].view(np.uint32), own) and not batch[1, words:].any()
    assert (batch[0] == -1).all() and (batch[2] == -1).all(), "other rows untouched"
    ids = np.flatnonzero(np.unpackbits(own.view(np.uint8), bitorder="little"))
    assert np.array_equal(ids, request.matcher.allowed_token_ids())
    with pytest.raises(ValueError, match="32-bit words"):
        request.fill_bitmask(np.zeros((1, words - 1), dtype=np.int32), 0)


def test_a_copy_moves_on_its_own(grammar):
    path = walk(grammar, [3, 1, 4, 1, 5])
    request = RequestGrammar(grammar, max_tokens=48)
    request.accept_tokens("r", path[:3])
    twin = request.copy()
    assert twin.accept_tokens("r", path[3:]) and twin.is_terminated()
    assert request.num_processed_tokens == 3 and not request.is_terminated()
