"""String-body shortcut: exactly the full trie walk's result (ids, next states, complement) wherever it applies."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constrained import _kernel, fsm
from constrained.fsm import compile_dfa
from constrained.index import TokenIndex
from constrained.trie import token_trie
from constrained.schema import UNIT, schema_to_pattern
from constrained.shortcut import string_body_shortcut

pytestmark = pytest.mark.model


@pytest.fixture(scope="module", params=["llama3_vocab", "qwen2_vocab"])
def real_vocab(request):
    return request.getfixturevalue(request.param)


def full_walk(index: TokenIndex, state: int) -> tuple[np.ndarray, np.ndarray]:
    trie = index.trie
    ids = np.empty(trie.n_tokens, dtype=np.int32)
    nxt = np.empty(trie.n_tokens, dtype=np.int32)
    scratch = np.full(trie.vocab_size, -1, dtype=np.int32)
    count = _kernel.walk(*index.dfa.table, state, trie.native, ids, nxt, scratch)
    return ids[:count], nxt[:count]


def planned_states_agree(index: TokenIndex) -> int:
    """Check every state the shortcut plans for against the full walk; return how many there were."""
    shortcut = string_body_shortcut(index.trie)
    assert shortcut is not None
    n_planned = 0
    for state in range(index.dfa.n_states):
        if shortcut.plan(index.dfa.table, state, index.trie.n_nodes) is None:
            continue
        n_planned += 1
        ids, nxt = full_walk(index, state)
        mask = index.state_mask(state)
        # every view of the bitmask-built mask agrees with the walk: single lookups first (nothing built yet) ...
        probe = np.random.default_rng(state).integers(0, mask.vocab_size, 64)
        walked = dict(zip(ids.tolist(), nxt.tolist()))
        for token_id in [*probe.tolist(), *ids[:: max(1, len(ids) // 64)].tolist()]:
            if token_id in walked or mask.next_state(token_id) is None:  # specials / EOS are not in the walk
                assert mask.next_state(token_id) == walked.get(token_id)
        assert np.array_equal(np.unpackbits(mask.bits.view(np.uint8), bitorder="little", count=mask.vocab_size),
                              np.isin(np.arange(mask.vocab_size), mask.allowed).astype(np.uint8))  # fmt: skip
        # ... then the materialized arrays and the complement
        normal = np.isin(mask.allowed, ids)
        assert np.array_equal(mask.allowed[normal], ids)
        assert np.array_equal(mask.next_states[normal], nxt)
        assert len(mask) == mask.allowed.shape[0]
        everything = np.zeros(mask.vocab_size, dtype=bool)
        everything[mask.allowed] = True
        assert np.array_equal(mask.disallowed, np.flatnonzero(~everything))
        # and it masks logits alike, contiguous or strided (the view llama-cpp-python hands processors)
        logits = np.random.default_rng(state).standard_normal(mask.vocab_size).astype(np.float32)
        expected = np.where(everything, logits, -np.inf).astype(np.float32)
        backing = np.zeros((mask.vocab_size, 2), dtype=np.float32)
        backing[:, 0] = logits
        for target in (logits.copy(), backing[:, 0]):
            mask.apply(target)
            np.testing.assert_array_equal(target, expected)
    return n_planned


SCHEMAS = [
    {"type": "string"},
    {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}}, "required": ["name"]},
    {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    {"type": "object", "additionalProperties": {"type": "string"}},
    {},  # any JSON value: strings as values and as keys
    {"anyOf": [{"type": "string"}, {"type": "null"}, {"enum": ["a\"b", "東京"]}]},
]


@pytest.mark.parametrize("schema", SCHEMAS, ids=[str(i) for i in range(len(SCHEMAS))])
def test_shortcut_equals_full_walk_on_schema_grammars(real_vocab, schema):
    dfa = compile_dfa(schema_to_pattern(schema, whitespace="flexible"))
    assert planned_states_agree(TokenIndex(dfa, real_vocab)) >= 1


def test_key_strings_that_exclude_known_names_are_planned_with_overrides(llama3_vocab):
    # additionalProperties allowed: after '{"' a key is either "name"/"age" or any other string, so the state
    # moves to the free string body on every byte but the known names' first letters, which are overridden.
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}
    dfa = compile_dfa(schema_to_pattern(schema, whitespace="compact"))
    index = TokenIndex(dfa, llama3_vocab)
    key_state = dfa.walk(b'{"')
    shortcut = string_body_shortcut(index.trie)
    assert shortcut.embedding(index.dfa.table, key_state) is None  # 'n' and 'a' lead elsewhere than the body
    assert shortcut.plan(index.dfa.table, key_state, index.trie.n_nodes) is not None
    assert planned_states_agree(index) >= 2


_SUFFIX_TEXT = st.text(alphabet=st.sampled_from(list('"\\,:}] \nab\x01é東')), min_size=0, max_size=4)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(suffixes=st.lists(_SUFFIX_TEXT, min_size=1, max_size=4), prefix_bytes=st.booleans())
def test_shortcut_equals_full_walk_whatever_follows_the_string(llama3_vocab, suffixes, prefix_bytes):
    # What follows the closing quote decides which tokens across the exits survive: vary it freely (including
    # more quotes, escapes and control bytes, which the body itself refuses).
    escaped = "|".join("".join(f"\\x{ord(c):02x}" if ord(c) < 0x80 else c for c in s) for s in suffixes)
    start = "(?:ab)?" if prefix_bytes else ""
    dfa = compile_dfa(f'{start}"{UNIT}*"(?:{escaped})')
    assert planned_states_agree(TokenIndex(dfa, llama3_vocab)) >= 1


def test_body_does_not_embed_where_the_string_is_bounded_or_patterned(llama3_vocab):
    shortcut = string_body_shortcut(token_trie(llama3_vocab))
    for schema in ({"type": "string", "maxLength": 5}, {"type": "string", "pattern": "^[a-z]+$"}):
        dfa = compile_dfa(schema_to_pattern(schema, whitespace="compact"))
        assert all(shortcut.embedding(dfa.table, s) is None for s in range(dfa.n_states))


def test_walk_template_refuses_maps_states_and_buffers_out_of_range(llama3_vocab):
    trie = token_trie(llama3_vocab)
    shortcut = string_body_shortcut(trie)
    dfa = compile_dfa(f'"{UNIT}*"')
    table = dfa.table
    plan = shortcut.plan(table, 1, trie.n_nodes)
    assert plan is not None
    out = (np.empty(trie.n_tokens, dtype=np.int32), np.empty(trie.n_tokens, dtype=np.int32),
           np.full(trie.vocab_size, -1, dtype=np.int32))  # fmt: skip
    bad = plan.embedding.copy()
    bad[0] = dfa.n_states  # a target past the last state
    with pytest.raises(ValueError, match="out of range"):
        shortcut.walk(table, 1, dataclasses.replace(plan, embedding=bad), trie, *out)
    bad[0] = -1  # a template state mapped nowhere
    with pytest.raises(ValueError, match="out of range"):
        shortcut.walk(table, 1, dataclasses.replace(plan, embedding=bad), trie, *out)
    template = plan.template.copy()
    template[-1, 255] = -2  # the last entry of the last row: every one is checked
    with pytest.raises(ValueError, match="out of range"):
        shortcut.walk(table, 1, dataclasses.replace(plan, template=template), trie, *out)
    with pytest.raises(ValueError, match="sizes"):
        shortcut.walk(table, dfa.n_states, plan, trie, *out)  # a state past the last one
    with pytest.raises(ValueError, match="sizes"):
        shortcut.walk(table, 1, plan, trie, out[0], out[1], out[2][:-1])
    columns = table.symbol_class.copy()
    columns[7] = table.classes.shape[1]  # a symbol's class past the last column
    with pytest.raises(ValueError, match="sizes"):
        shortcut.walk(table._replace(symbol_class=columns), 1, plan, trie, *out)
    with pytest.raises(ValueError, match="sizes"):
        shortcut.embedding(table._replace(symbol_class=columns), 1)
    with pytest.raises(ValueError, match="sizes"):
        shortcut.embedding(table._replace(symbol_class=columns[:255]), 1)  # fewer than the 256 bytes
    args = (trie.native, *out)
    hop = fsm.next_hop(dfa)
    chain, symbols = np.empty(dfa.n_states + 1, dtype=np.int32), np.empty(dfa.n_states, dtype=np.int32)
    for bad_columns in (columns, columns[:255]):  # the plain walk and the hop chain read the class form too
        with pytest.raises(ValueError, match="sizes"):
            _kernel.walk(table.classes, bad_columns, 1, *args)
        with pytest.raises(ValueError, match="sizes"):
            _kernel.follow_hops(table.classes, bad_columns, hop, 1, chain, symbols)
    assert _kernel.walk(*table, 1, *args) > 0 and _kernel.follow_hops(*table, hop, 1, chain, symbols) == 1


COUNTED_SCHEMAS = [
    {"type": "string", "maxLength": 5},
    {"type": "string", "minLength": 2, "maxLength": 40},
    {"type": "object", "properties": {"a": {"type": "string", "maxLength": 3}, "b": {"type": "string", "maxLength": 12}},
     "required": ["a", "b"]},
    {"type": "array", "items": {"type": "string", "maxLength": 2}, "maxItems": 3},
    {"type": "string", "maxLength": 300},  # longer than any token: the counted template stops at the longest one
    {"type": "string", "maxLength": 200},  # between the cap and the characters followed at once (twice the cap)
]


@pytest.mark.parametrize("schema", COUNTED_SCHEMAS, ids=[str(i) for i in range(len(COUNTED_SCHEMAS))])
def test_counted_strings_are_planned_and_equal_the_full_walk(real_vocab, schema):
    # A string with a maxLength has one state per characters left; each is masked through a counted body
    # template (its pure tokens: those that fit), never walked whole.
    dfa = compile_dfa(schema_to_pattern(schema, whitespace="flexible"))
    index = TokenIndex(dfa, real_vocab)
    shortcut = string_body_shortcut(index.trie)
    table = index.dfa.table
    counted = [s for s in range(dfa.n_states)
               if (plan := shortcut.plan(table, s, index.trie.n_nodes)) is not None
               and plan.template is not shortcut.body_transitions]  # fmt: skip
    assert len(counted) >= min(schema.get("maxLength", 3), 3)
    for state in counted:  # the index proves a counted string's later states from its first: the same plans
        direct, remembered = shortcut.plan(table, state, index.trie.n_nodes), index.plan(state)
        assert remembered.template.shape == direct.template.shape
        assert np.array_equal(remembered.embedding, direct.embedding)
    assert planned_states_agree(index) >= len(counted)


def test_a_counted_body_is_refused_where_the_string_goes_on_past_its_count(llama3_vocab):
    # At most 3 characters, or exactly 3 and then an "é": after 2 characters the body looks counted with one
    # left, but "té" (two) is allowed. The DFA's characters after the count are what the plan must refuse.
    dfa = compile_dfa(f'"(?:{UNIT}{{0,3}}|{UNIT}{{3}}é)"')
    index = TokenIndex(dfa, llama3_vocab)
    two = dfa.walk(b'"ab')
    assert string_body_shortcut(index.trie).counted_plan(index.dfa.table, two) is None
    assert index.state_mask(two).next_state(llama3_vocab.tokens.index("té".encode())) is not None
    planned_states_agree(index)
    # The same past the cap: one embedding of the first state's 200 characters would prove the later states'
    # plans, but the string goes on after them, so each state near the end is planned (or refused) on its own.
    dfa = compile_dfa(f'"(?:{UNIT}{{0,200}}|{UNIT}{{200}}é)"')
    index = TokenIndex(dfa, llama3_vocab)
    near_end = dfa.walk(b'"' + b"a" * 198)
    assert index.plan(dfa.walk(b'"')) is not None and index.plan(near_end) is None
    assert index.state_mask(near_end).next_state(llama3_vocab.tokens.index("té".encode())) is not None
    planned_states_agree(index)


def test_bits_to_ids_reads_either_value_and_ignores_padding():
    bits = np.asarray([0b1011, 0xFFFFFFFF], dtype=np.uint32)
    out = np.empty(64, dtype=np.int32)
    assert _kernel.bits_to_ids(bits, 40, 1, out) == 3 + 8
    assert out[:11].tolist() == [0, 1, 3, *range(32, 40)]
    assert _kernel.bits_to_ids(bits, 40, 0, out) == 40 - 11
    assert out[:3].tolist() == [2, 4, 5]
    with pytest.raises(ValueError, match="too small"):
        _kernel.bits_to_ids(bits, 40, 1, np.empty(2, dtype=np.int32))
    with pytest.raises(ValueError, match="one bit per id"):
        _kernel.bits_to_ids(bits, 80, 1, out)


@given(st.lists(st.integers(0, 79), max_size=40))
def test_ids_to_bits_sets_each_id_once_and_counts_the_distinct_ones(ids):
    """Repeated ids (members sharing a token) set one bit and count once."""
    bits = np.full(3, 0xFFFFFFFF, dtype=np.uint32)
    assert _kernel.ids_to_bits(np.asarray(ids, dtype=np.int32), 80, bits) == len(set(ids))
    assert [i for i in range(96) if bits[i >> 5] >> (i & 31) & 1] == sorted(set(ids))  # the padding cleared too


@given(st.lists(st.lists(st.integers(0, 2**32 - 1), min_size=3, max_size=3), max_size=6))
def test_or_bits_is_the_union_and_its_count(words):
    """Against numpy's OR and bit count; out may be the first mask (a count of one mask in place)."""
    masks = [np.asarray(w, dtype=np.uint32) for w in words]
    out = np.full(3, 0xFFFFFFFF, dtype=np.uint32)
    expected = np.bitwise_or.reduce(masks) if masks else np.zeros(3, dtype=np.uint32)
    assert _kernel.or_bits(masks, out) == int(np.bitwise_count(expected).sum())
    assert out.tolist() == expected.tolist()
    if masks:
        first = masks[0].copy()
        assert _kernel.or_bits((first,), first) == int(np.bitwise_count(masks[0]).sum())
        assert first.tolist() == masks[0].tolist()
    with pytest.raises(ValueError, match="as long as out"):
        _kernel.or_bits([np.zeros(2, dtype=np.uint32)], out)
