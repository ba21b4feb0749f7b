"""TokenIndex / token trie / C kernel: masks equal a byte-by-byte reference walk, on random and real vocabularies."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from tests.constrained.dfa_reference import live_tokens, make_dfa, walk_bytes
from hypothesis import given, settings
from hypothesis import strategies as st

from constrained import _kernel
from constrained.errors import IncompatibleVocabularyError
from constrained.fsm import DEAD
from constrained.index import TERMINAL, StateMask, TokenIndex
from constrained.trie import TokenTrie, token_trie
from constrained.vocabulary import Vocabulary

ALPHABET = b"abcd"


def trie_token_bytes(trie: TokenTrie) -> dict[int, bytes]:
    """Rebuild every token's bytes from the flattened trie (preorder + depth)."""
    prefix: list[int] = []
    spelled: dict[int, bytes] = {}
    for node in range(1, trie.n_nodes):
        depth = int(trie.node_depth[node])
        del prefix[depth - 1 :]
        prefix.append(int(trie.node_byte[node]))
        for k in range(int(trie.tok_start[node]), int(trie.tok_start[node + 1])):
            spelled[int(trie.tok_ids[k])] = bytes(prefix)
    return spelled


def mask_ids(vocab: Vocabulary) -> list[int]:
    return sorted(i for i in vocab.normal_ids - vocab.eos_token_ids if vocab.tokens[i])


@st.composite
def small_worlds(draw):
    """A random vocabulary over a 4-byte alphabet and a random trimmed DFA over the same bytes."""
    pieces = draw(st.lists(st.binary(min_size=1, max_size=5).map(lambda b: bytes(ALPHABET[x % 4] for x in b)),
                           min_size=1, max_size=40))  # fmt: skip
    pieces += [bytes([c]) for c in ALPHABET]  # every byte spellable, duplicates allowed
    vocab = Vocabulary.from_tokens(pieces)
    n_states = draw(st.integers(1, 6))
    table = np.full((n_states, 256), DEAD, dtype=np.int32)
    for state in range(n_states):
        for byte in ALPHABET:
            table[state, byte] = draw(st.sampled_from([DEAD, *range(n_states)]))
    accepting = np.asarray(draw(st.lists(st.booleans(), min_size=n_states, max_size=n_states)))
    return vocab, make_dfa(table, accepting)


@settings(max_examples=150, deadline=None)
@given(small_worlds())
def test_kernel_walk_equals_byte_by_byte_reference(world):
    vocab, dfa = world
    index = TokenIndex(dfa, vocab)
    for state in range(dfa.n_states):
        mask = index.state_mask(state)
        expected = live_tokens(dfa, state, vocab.tokens, mask_ids(vocab))
        got = dict(zip(mask.allowed.tolist(), mask.next_states.tolist()))
        assert got == expected
        assert np.all(np.diff(mask.allowed) > 0)


@settings(max_examples=100, deadline=None)
@given(small_worlds())
def test_upper_bound_is_a_real_tokenization_of_the_canonical_completion(world):
    vocab, dfa = world
    index = TokenIndex(dfa, vocab)
    by_bytes = {piece for piece in vocab.tokens}
    for state in range(dfa.n_states):
        # canonical completion: smallest symbol on a shortest path
        completion, current = bytearray(), state
        while not dfa.accepting[current]:
            hops = [b for b in range(256) if dfa.transitions[current, b] != DEAD
                    and dfa.distance[dfa.transitions[current, b]] == dfa.distance[current] - 1]  # fmt: skip
            completion.append(hops[0])
            current = int(dfa.transitions[current, hops[0]])
        best = [0] + [10**9] * len(completion)  # best[i] = fewest tokens for completion[:i]
        for end in range(1, len(completion) + 1):
            for start in range(end):
                if bytes(completion[start:end]) in by_bytes:
                    best[end] = min(best[end], best[start] + 1)
        assert index.upper_bound(state) == best[len(completion)]


def test_budget_mask_keeps_exactly_tokens_whose_completion_fits():
    vocab = Vocabulary.from_tokens([b"a", b"b", b"ab", b"bbb", b"</s>"], eos_token_ids=[4], special_ids_by_name={"</s>": 4})
    # a b{0,5}: state k = after a + k b's
    table = np.full((7, 256), DEAD, dtype=np.int32)
    table[0, ord("a")] = 1
    for k in range(1, 6):
        table[k, ord("b")] = k + 1
    dfa = make_dfa(table, np.asarray([False] + [True] * 6))
    index = TokenIndex(dfa, vocab)
    assert index.upper_bound(0) == 1  # "a"
    assert index.needed_budget(0) == 1
    full = index.state_mask(1)
    assert dict(zip(full.allowed.tolist(), full.next_states.tolist())) == {1: 2, 3: 4, 4: TERMINAL}
    for remaining in range(0, 4):
        mask = index.budget_mask(1, remaining)
        for token_id, target in zip(mask.allowed.tolist(), mask.next_states.tolist()):
            assert 1 + index.upper_bound(target) <= remaining
    assert index.budget_mask(1, 0).allowed.tolist() == []


@pytest.mark.parametrize("seed", range(2))
def test_budget_masks_of_a_real_grammar_equal_the_definition_at_every_budget(qwen2_vocab, seed):
    """String states (masks built from bits by the string-body shortcut, cut by the template state each token ends
    in) and the others, at every budget up to past their highest level: exactly the tokens t with
    1 + UB(next(t)) <= budget, however the cuts are cached."""
    from constrained import compile_json_schema

    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string", "maxLength": 5},
              "c": {"type": "integer"}}, "required": ["a", "b", "c"], "additionalProperties": False}  # fmt: skip
    grammar = compile_json_schema(schema, qwen2_vocab)  # closed: one DFA
    index = grammar.index
    rng = np.random.default_rng(seed)
    matcher = grammar.matcher()
    checked = 0
    while not matcher.is_terminated():
        state = matcher.state
        full = index.state_mask(state)
        bounds = {s: index.upper_bound(s) for s in np.unique(full.next_states).tolist()}
        after = np.asarray([bounds[s] for s in full.next_states.tolist()])
        for remaining in rng.permutation(int(after.max()) + 3).tolist():  # any order: the cuts are cached
            expected = full.allowed[after + 1 <= remaining].tolist()
            assert index.budget_mask(state, remaining).allowed.tolist() == expected, (state, remaining)
            checked += 1
        allowed = matcher.allowed_token_ids()
        assert matcher.advance(int(rng.choice(allowed)))
        if matcher.tokens_consumed > 40:
            break
    assert checked > 40


def test_masks_budgets_and_forced_bytes_never_expand_the_table_by_symbol(qwen2_vocab):
    """Every kernel reads the class form: a DFA's table by symbol (n_states x 257 int32, 10 MB at 10k states) is
    only for automaton operations, never for a mask, a budget bound or a forced run."""
    from constrained import compile_json_schema

    schema = {"type": "object", "properties": {"when": {"type": "string", "format": "date"}, "n": {"type": "integer"},
              "tag": {"enum": ["red", "green"]}}, "required": ["when", "n", "tag"], "additionalProperties": False}
    grammar = compile_json_schema(schema, qwen2_vocab)  # closed: one DFA
    dfa, index = grammar.dfa, grammar.index
    for state in range(dfa.n_states):
        index.budget_mask(state, 4)
        index.forced_bytes(state)
    assert index.forced_bytes(0) == b'{"when":"'
    assert "transitions" not in vars(dfa)


@pytest.mark.parametrize("seed", range(3))
def test_a_restricted_mask_keeps_exactly_the_tokens_within_the_limit_for_any_bounds(qwen2_vocab, seed):
    """`StateMask.restricted` (a string state's mask in bit space: pure tokens dropped by the template state they
    end in, on the smaller side, listed tokens by their own bound; another mask by its ids), under random
    per-state bounds, equals the token-by-token definition at every limit."""
    from constrained import compile_json_schema
    from constrained.index import BitsLookup

    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string", "maxLength": 5}},
              "required": ["a", "b"], "additionalProperties": False}  # fmt: skip
    grammar = compile_json_schema(schema, qwen2_vocab)
    table = np.random.default_rng(seed).integers(0, 4, size=grammar.dfa.n_states)

    def bounds_of(states: np.ndarray) -> np.ndarray:
        return np.where(states >= 0, table[np.maximum(states, 0)], 0)

    kinds = set()
    for prefix in (b'{"a":"', b'{"a":"\\u00', b'{"a":"x","b":"', b'{"a":"x","b":"abc'):
        state = grammar.dfa.initial
        for byte in prefix:
            state = int(grammar.dfa.transitions[state, byte])
        index = TokenIndex(grammar.dfa, qwen2_vocab)  # fresh: its masks not yet spelled out as ids
        mask = index.state_mask(state)
        kinds.add(isinstance(mask._lookup, BitsLookup) and mask._next_states is None)
        got = {limit: mask.restricted(bounds_of, limit) for limit in range(-1, 5)}
        keep = bounds_of(mask.next_states)
        for limit, restricted in got.items():
            assert restricted.allowed.tolist() == mask.allowed[keep <= limit].tolist(), (prefix, limit)
            assert len(restricted) == int((keep <= limit).sum())
            for token_id in restricted.allowed[:: max(1, len(restricted) // 50)].tolist():
                assert restricted.next_state(token_id) == mask.next_state(token_id)
    assert kinds == {True, False}  # string states built from bits, and an escape's mask built from ids


def test_named_special_is_allowed_and_other_specials_never():
    pieces = [b"a", b"b", b"<x>", b"<y>", b"</s>"]
    vocab = Vocabulary.from_tokens(pieces, eos_token_ids=[4], special_ids_by_name={"<x>": 2, "<y>": 3, "</s>": 4})
    table = np.full((3, 257), DEAD, dtype=np.int32)
    table[0, 256] = 1  # (?&<x>)
    table[1, ord("a")] = 2
    table[1, ord("b")] = 2
    dfa = make_dfa(table, np.asarray([False, False, True]), special_names=("<x>",))
    index = TokenIndex(dfa, vocab)
    assert index.state_mask(0).allowed.tolist() == [2]
    assert index.state_mask(1).allowed.tolist() == [0, 1]
    assert index.state_mask(2).allowed.tolist() == [4]  # EOS only in the accepting state
    assert index.forced_bytes(1) == b""


def test_missing_named_special_raises_naming_it():
    vocab = Vocabulary.from_tokens([b"a"])
    table = np.full((2, 257), DEAD, dtype=np.int32)
    table[0, 256] = 1
    dfa = make_dfa(table, np.asarray([False, True]), special_names=("<tool_call>",))
    with pytest.raises(IncompatibleVocabularyError) as caught:
        TokenIndex(dfa, vocab)
    assert caught.value.missing == ("<tool_call>",)


def test_state_no_token_can_leave_raises_with_state_and_missing_bytes():
    vocab = Vocabulary.from_tokens([b"a", b"b"])
    table = np.full((3, 256), DEAD, dtype=np.int32)
    table[0, ord("a")] = 1
    table[1, ord("c")] = 2
    dfa = make_dfa(table, np.asarray([False, False, True]))
    with pytest.raises(IncompatibleVocabularyError) as caught:
        TokenIndex(dfa, vocab)
    assert caught.value.state == 1
    assert caught.value.missing == (b"c",)


def test_forced_bytes_stop_at_choice_and_acceptance():
    vocab = Vocabulary.from_tokens([bytes([c]) for c in b'{"ab:}'])
    text = b'{"a":'
    table = np.full((len(text) + 3, 256), DEAD, dtype=np.int32)
    for i, byte in enumerate(text):
        table[i, byte] = i + 1
    table[len(text), ord("a")] = len(text) + 1
    table[len(text), ord("b")] = len(text) + 1
    table[len(text) + 1, ord("}")] = len(text) + 2
    dfa = make_dfa(table, np.asarray([False] * (len(text) + 2) + [True]))
    index = TokenIndex(dfa, vocab)
    assert index.forced_bytes(0) == text
    assert index.forced_bytes(len(text)) == b""
    assert index.forced_bytes(len(text) + 1) == b"}"
    assert index.forced_bytes(len(text) + 2) == b""


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.one_of(st.integers(0, 1000), st.sampled_from([0, 125, 126, 937, 938, 1000])),
    st.sampled_from(["contiguous", "strided", "float64", "longer"]),
)
def test_every_mask_representation_writes_the_same_logits(seed, n_allowed, layout):
    rng = np.random.default_rng(seed)
    vocab_size = 1000
    allowed = np.sort(rng.choice(vocab_size, size=n_allowed, replace=False)).astype(np.int32)
    mask = StateMask(allowed, np.zeros(n_allowed, dtype=np.int32), vocab_size)
    assert mask.form == ("allowed" if n_allowed <= 125 else "disallowed" if n_allowed >= 938 else "bytemask")
    logits = rng.standard_normal(vocab_size).astype(np.float32)
    expected = np.full(vocab_size, -np.inf, dtype=np.float32)
    expected[allowed] = logits[allowed]
    if layout == "strided":
        backing = np.zeros((vocab_size, 3), dtype=np.float32)
        backing[:, 1] = logits
        target = backing[:, 1]
    elif layout == "float64":
        target = logits.astype(np.float64)
    elif layout == "longer":  # a model whose logits row is longer than its vocabulary: the tail is disallowed
        target = np.concatenate([logits, np.ones(7, dtype=np.float32)])
        expected = np.concatenate([expected, np.full(7, -np.inf, dtype=np.float32)])
    else:
        target = logits.copy()
    mask.apply(target)
    np.testing.assert_array_equal(np.asarray(target, dtype=np.float32), expected)
    assert set(np.flatnonzero(mask.keep).tolist()) == set(allowed.tolist())
    assert sorted(set(mask.disallowed.tolist()) | set(allowed.tolist())) == list(range(vocab_size))


def test_kernel_mask_writers_reject_ids_outside_the_logits():
    logits = np.zeros(4, dtype=np.float32)
    with pytest.raises(ValueError):
        _kernel.apply_allowed(logits, np.asarray([1, 9], dtype=np.int32))
    with pytest.raises(ValueError):
        _kernel.apply_disallowed(logits, np.asarray([-1], dtype=np.int32))
    with pytest.raises(ValueError):
        _kernel.apply_allowed(logits, np.asarray([2, 1], dtype=np.int32))
    with pytest.raises(ValueError):
        _kernel.apply_bytemask(logits, np.ones(3, dtype=np.uint8))


# -- real vocabularies ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["llama3_vocab", "qwen2_vocab"])
def real_vocab(request):
    return request.getfixturevalue(request.param)


@pytest.mark.model
def test_trie_spells_every_normal_token_exactly_once(real_vocab):
    trie = token_trie(real_vocab)
    assert trie.tok_ids.shape[0] == len(set(trie.tok_ids.tolist()))
    spelled = trie_token_bytes(trie)
    assert sorted(spelled) == mask_ids(real_vocab)
    assert all(real_vocab.tokens[i] == piece for i, piece in spelled.items())
    assert token_trie(real_vocab) is trie


@pytest.mark.model
def test_real_vocabulary_masks_equal_reference_in_json_like_states(real_vocab):
    # hand-built: '{"k":' then a string body of [^"\\] bytes (incl. UTF-8 continuation bytes) then '"}'
    prefix = b'{"k":"'
    n = len(prefix)
    table = np.full((n + 3, 256), DEAD, dtype=np.int32)
    for i, byte in enumerate(prefix):
        table[i, byte] = i + 1
    body = [b for b in range(0x20, 256) if b not in (ord('"'), ord("\\"))]
    table[n, body] = n
    table[n, ord('"')] = n + 1
    table[n + 1, ord("}")] = n + 2
    dfa = make_dfa(table, np.asarray([False] * (n + 2) + [True]))
    index = TokenIndex(dfa, real_vocab)
    ids = mask_ids(real_vocab)
    for state in range(dfa.n_states):
        mask = index.state_mask(state)
        expected = live_tokens(dfa, state, real_vocab.tokens, ids)
        normal = {i: t for i, t in zip(mask.allowed.tolist(), mask.next_states.tolist()) if t != TERMINAL}
        assert normal == expected
        eos = set(mask.allowed.tolist()) & real_vocab.eos_token_ids
        assert eos == (set(real_vocab.eos_token_ids) if dfa.accepting[state] else set())
    assert len(index.state_mask(n)) > len(real_vocab) // 2  # the string body allows most of the vocabulary
    assert index.state_mask(n).form == "disallowed"
    assert walk_bytes(dfa, 0, prefix) == n


def test_kernel_check_rejects_tables_and_tries_the_walk_could_not_trust():
    vocab = Vocabulary.from_tokens([b"a", b"ab", b"b"])
    trie = token_trie(vocab)
    table = np.full((2, 3), DEAD, dtype=np.int32)  # the class form: 3 classes
    symbol_class = np.zeros(256, dtype=np.int32)
    symbol_class[ord("a")], symbol_class[ord("b")] = 1, 2
    _kernel.check(table, symbol_class)
    table[1, 2] = 2  # target past the last state
    with pytest.raises(ValueError, match="transition"):
        _kernel.check(table, symbol_class)
    table[1, 2] = 1
    for bad_classes in (symbol_class[:255], np.full(256, 3, dtype=np.int32)):  # too short; a column past the last
        with pytest.raises(ValueError, match="class"):
            _kernel.check(table, bad_classes)
    # the trie is checked once, when its kernel object is made
    arrays = [trie.node_byte, trie.node_depth, trie.node_end, trie.tok_start, trie.tok_ids, trie.root_child]
    native = _kernel.Trie(*arrays, trie.max_depth, trie.vocab_size)
    assert (native.n_nodes, native.n_tokens, native.max_depth) == (trie.n_nodes, trie.n_tokens, trie.max_depth)
    bad_end = trie.node_end.copy()
    bad_end[1] = 1  # a subtree that ends before it starts would loop forever
    with pytest.raises(ValueError, match="subtree"):
        _kernel.Trie(*arrays[:2], bad_end, *arrays[3:], trie.max_depth, trie.vocab_size)
    with pytest.raises(ValueError, match="depth"):
        _kernel.Trie(*arrays, trie.max_depth - 1, trie.vocab_size)  # a node deeper than the bound
    with pytest.raises(ValueError, match="token id"):
        _kernel.Trie(*arrays, trie.max_depth, int(trie.tok_ids.max()))  # an id past the vocabulary
    bad_child = trie.root_child.copy()
    bad_child[0] = trie.n_nodes
    with pytest.raises(ValueError, match="root child"):
        _kernel.Trie(*arrays[:5], bad_child, trie.max_depth, trie.vocab_size)
    with pytest.raises(ValueError, match="disagree"):
        _kernel.Trie(*arrays[:3], trie.tok_start[:-1], *arrays[4:], trie.max_depth, trie.vocab_size)
    with pytest.raises(TypeError):  # the walks take the one object, not loose arrays
        _kernel.walk(table, symbol_class, 0, trie.node_byte, *arrays[1:])


def test_token_index_refuses_a_table_the_kernels_could_not_trust():
    vocab = Vocabulary.from_tokens([b"a", b"b"])
    table = np.full((2, 256), DEAD, dtype=np.int32)
    table[0, ord("a")] = 1
    dfa = make_dfa(table, np.asarray([False, True]))
    TokenIndex(dfa, vocab)
    good = make_dfa(table, np.asarray([False, True]))
    bad = good.class_table.copy()
    bad[0, good.symbol_classes[ord("b")]] = 7  # a target past the last state: the walk would read outside the table
    forged = dataclasses.replace(good, class_table=bad)
    with pytest.raises(ValueError, match="out of range"):
        TokenIndex(forged, vocab)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-3, 9), st.integers(-2, 6)), max_size=30),
    st.integers(-2, 2),
)
def test_expand_runs_decodes_exactly_what_np_repeat_would_and_refuses_anything_out_of_range(runs, slack):
    """The cache loader's one-pass decoder: values in [DEAD, 8), lengths >= 0, covering ``out`` exactly."""
    values = np.asarray([v for v, _ in runs], dtype=np.int32)
    lengths = np.asarray([n for _, n in runs], dtype=np.int32)
    total = int(lengths.clip(0).sum())
    size = max(0, total + slack)
    valid = bool(np.all((values >= DEAD) & (values < 8)) and np.all(lengths >= 0)) and size == total
    out = np.full(size, 99, dtype=np.int32)
    assert _kernel.expand_runs(values, lengths, DEAD, 8, out) is valid
    if valid:
        np.testing.assert_array_equal(out, np.repeat(values, lengths))


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 6),
    st.integers(1, 5),
    st.lists(st.integers(-1, 5), max_size=40),
    st.integers(-1, 1),
    st.randoms(use_true_random=False),
)
def test_expand_classes_equals_take_along_symbols_and_refuses_a_class_or_shape_out_of_range(
        states, classes, symbol_class, slack, rng):
    """A DFA's table by symbol, expanded from its class form: exactly numpy's take along axis 1, or a ValueError
    with ``out`` untouched when a symbol's class is not a column or ``out`` has the wrong size."""
    table = np.asarray([[rng.randrange(-1, 9) for _ in range(classes)] for _ in range(states)],
                       dtype=np.int32).reshape(states, classes)
    sc = np.asarray(symbol_class, dtype=np.int32)
    out = np.full(max(0, states * len(sc) + slack * bool(states)), 77, dtype=np.int32)
    if np.all((sc >= 0) & (sc < classes)) and out.size == states * len(sc):
        _kernel.expand_classes(table, sc, out)
        np.testing.assert_array_equal(out.reshape(states, len(sc)), np.take(table, sc, axis=1))
    else:
        with pytest.raises(ValueError, match="expand_classes"):
            _kernel.expand_classes(table, sc, out)
        assert np.all(out == 77)
