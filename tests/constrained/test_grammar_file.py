"""The grammar entry file: a warm load gives back exactly what was saved, and nothing damaged, truncated,
mismatched or replaced is ever used (the grammar, or that one state, is recomputed instead)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from constrained import fsm
from constrained import grammar as grammar_module
from constrained import grammar_file
from constrained import index as index_module
from constrained.grammar import clear_memory_cache, compile_regex
from tests.constrained import test_grammar
from tests.constrained.test_grammar import PATTERN, STRING_PATTERN, all_masks, only_entry, snapshot

small_vocab = test_grammar.small_vocab
cache_dir = test_grammar.cache_dir


def encode(grammar, masks) -> list:
    return grammar_file.encode_entry(grammar, masks, grammar_module._index_identity())


def open_entry(path, vocab) -> grammar_file.Entry:
    entry = grammar_file.open_entry(path, vocab, grammar_module._index_identity())
    assert entry is not None
    return entry


def test_large_masks_are_stored_as_complement_and_runs(small_vocab, cache_dir):
    compile_regex(STRING_PATTERN, small_vocab).precompute()
    entry = only_entry(cache_dir)
    stored = open_entry(entry, small_vocab).masks
    kinds = set(stored._directory[:, 2].tolist())
    assert kinds >= {0, grammar_file._IDS_COMPLEMENT | grammar_file._NEXT_RUNS}, kinds


def test_damaged_entries_are_recompiled_never_trusted(small_vocab, cache_dir):
    compiled = compile_regex(STRING_PATTERN, small_vocab)
    compiled.precompute()
    expected = snapshot(compiled)
    entry = only_entry(cache_dir)
    good = entry.read_bytes()

    @settings(max_examples=120, deadline=None)
    @given(
        st.one_of(
            st.integers(0, len(good) - 1).map(lambda n: ("truncate", n, 0)),
            st.tuples(st.just("flip"), st.integers(0, len(good) - 1), st.integers(1, 255)),
            st.tuples(st.just("append"), st.integers(1, 64), st.just(0)),
        )
    )
    def check(damage):
        kind, where, value = damage
        if kind == "truncate":
            damaged = good[:where]
        elif kind == "flip":
            damaged = good[:where] + bytes([good[where] ^ value]) + good[where + 1 :]
        else:
            damaged = good + bytes(where)
        entry.write_bytes(damaged)
        clear_memory_cache()
        assert snapshot(compile_regex(STRING_PATTERN, small_vocab)) == expected

    check()


def test_a_flip_that_every_range_check_accepts_is_caught_by_the_checksums(small_vocab, cache_dir):
    """Bit 0 of each little-endian word: run values, lengths, distances and mask ids stay plausible, so only the
    body crc32 (DFA) or the state's crc32 (masks) can tell the entry is wrong."""
    compiled = compile_regex(STRING_PATTERN, small_vocab)
    compiled.precompute()
    expected = snapshot(compiled)
    entry = only_entry(cache_dir)
    good = entry.read_bytes()
    header_end = grammar_file._PREAMBLE.size + grammar_file._PREAMBLE.unpack_from(good)[2]
    for position in range(header_end + (-header_end) % 4, len(good), 4)[::5]:  # a fifth of the words: ~1 s
        entry.write_bytes(good[:position] + bytes([good[position] ^ 1]) + good[position + 1 :])
        clear_memory_cache()
        assert snapshot(compile_regex(STRING_PATTERN, small_vocab)) == expected, position


def _reversed_pair(ids):
    ids = ids.copy()
    ids[[0, 1]] = ids[[1, 0]]
    return ids


@pytest.mark.parametrize(
    "tamper",
    [
        lambda ids, nxt, n_states, vocab_size: (_reversed_pair(ids), nxt),
        lambda ids, nxt, n_states, vocab_size: (np.append(ids[:-1], vocab_size), nxt),
        lambda ids, nxt, n_states, vocab_size: (ids, np.append(nxt[:-1], n_states)),
        lambda ids, nxt, n_states, vocab_size: (ids, np.append(nxt[:-1], -1)),
        lambda ids, nxt, n_states, vocab_size: (ids[:-1], nxt),
    ],
    ids=["ids-not-ascending", "id-past-vocabulary", "next-past-dfa", "next-dead", "lengths-differ"],
)
def test_a_well_formed_mask_that_breaks_an_invariant_is_not_trusted(small_vocab, cache_dir, tamper):
    """Checksums pass here (the entry is written by the encoder): only the per-state checks stand in the way."""
    compiled = compile_regex(PATTERN, small_vocab)
    compiled.precompute()
    expected = all_masks(compiled)
    masks = compiled.index.export_masks()
    state = compiled.dfa.initial
    assert len(masks[state][0]) >= 2
    masks[state] = tamper(*masks[state], compiled.dfa.n_states, len(small_vocab))
    grammar_file.atomic_write(only_entry(cache_dir), encode(compiled, masks))
    clear_memory_cache()
    loaded = compile_regex(PATTERN, small_vocab)
    assert all_masks(loaded) == expected


@pytest.mark.parametrize(
    "tamper", ["transition-past-dfa", "transition-below-dead", "symbol-class-past-classes", "distance-negative"]
)
def test_a_well_formed_dfa_that_breaks_an_invariant_is_not_trusted(small_vocab, cache_dir, tamper):
    compiled = compile_regex(PATTERN, small_vocab)
    compiled.save()
    expected = snapshot(compiled)
    dfa = compiled.dfa
    classes, table, distance = dfa.symbol_classes.copy(), dfa.class_table.copy(), dfa.distance.copy()
    if tamper == "transition-past-dfa":
        table[0, classes[ord("{")]] = dfa.n_states
    elif tamper == "transition-below-dead":
        table[-1, classes[ord("a")]] = -2
    elif tamper == "symbol-class-past-classes":
        classes[ord("a")] = table.shape[1]
    else:
        distance[0] = -1
    bad = dataclasses.replace(
        compiled, dfa=dataclasses.replace(dfa, symbol_classes=classes, class_table=table, distance=distance)
    )
    grammar_file.atomic_write(only_entry(cache_dir), encode(bad, {}))
    clear_memory_cache()
    assert snapshot(compile_regex(PATTERN, small_vocab)) == expected


@pytest.mark.parametrize("where", ["accepting", "not-accepting"])
def test_accepting_states_are_derived_from_distance_so_a_dfa_that_disagrees_is_never_stored(
    small_vocab, cache_dir, where
):
    """The file stores distances only (accepting ⇔ distance 0): a DFA breaking that cannot be written at all."""
    compiled = compile_regex(PATTERN, small_vocab)
    distance = compiled.dfa.distance.copy()
    accepting = compiled.dfa.accepting
    distance[np.flatnonzero(accepting if where == "accepting" else ~accepting)[0]] = 1 if where == "accepting" else 0
    bad = dataclasses.replace(compiled, dfa=dataclasses.replace(compiled.dfa, distance=distance))
    with pytest.raises(ValueError, match="distance 0"):
        encode(bad, {})


def test_masks_are_read_only_from_the_very_file_loaded(small_vocab, cache_dir):
    """A loaded grammar reads a state's mask on first access; if the file was replaced meanwhile (here by a
    well-formed entry whose masks belong to other states), it recomputes instead of reading the newcomer."""
    compiled = compile_regex(STRING_PATTERN, small_vocab)
    compiled.precompute()
    expected = all_masks(compiled)
    clear_memory_cache()
    loaded = compile_regex(STRING_PATTERN, small_vocab)
    masks = compiled.index.export_masks()
    states = sorted(masks)
    shuffled = {state: masks[states[(i + 1) % len(states)]] for i, state in enumerate(states)}
    grammar_file.atomic_write(only_entry(cache_dir), encode(compiled, shuffled))
    assert all_masks(loaded) == expected
    loaded.save()  # its masks replace the newcomer's
    clear_memory_cache()
    assert all_masks(compile_regex(STRING_PATTERN, small_vocab)) == expected


def test_a_damaged_mask_is_dropped_recomputed_and_rewritten(small_vocab, cache_dir):
    compiled = compile_regex(STRING_PATTERN, small_vocab)
    compiled.precompute()
    expected = all_masks(compiled)
    entry = only_entry(cache_dir)
    good = entry.read_bytes()
    stored = open_entry(entry, small_vocab).masks
    body_end = grammar_file._PREAMBLE.unpack_from(good)[4]
    row = len(stored) // 2
    state, _, _, offset, _, _, _ = stored._directory[row].tolist()
    position = body_end + 4 * offset
    entry.write_bytes(good[:position] + bytes([good[position] ^ 0x40]) + good[position + 1 :])
    clear_memory_cache()
    loaded = compile_regex(STRING_PATTERN, small_vocab)
    assert all_masks(loaded) == expected
    loaded.save()  # the dropped state was recomputed: the entry is rewritten whole
    assert entry.read_bytes() != good[:position] + bytes([good[position] ^ 0x40]) + good[position + 1 :]
    again = open_entry(entry, small_vocab).masks
    assert len(again) == compiled.dfa.n_states and all(again[s][0].tolist() == expected[s][0] for s in again)
    assert state in again


def test_a_directory_out_of_order_drops_every_stored_mask_but_keeps_the_dfa(small_vocab, cache_dir, monkeypatch):
    """Checksums pass (the encoder wrote it): the first mask lookup finds the states not ascending, so every
    stored state is recomputed (and the entry rewritten), while the DFA is still loaded, not recompiled."""
    compiled = compile_regex(PATTERN, small_vocab)
    compiled.precompute()
    expected = snapshot(compiled)
    encode_masks = grammar_file._encode_masks
    with monkeypatch.context() as patch:
        patch.setattr(grammar_file, "_encode_masks", lambda *a: (lambda d, p: (d[::-1].copy(), p))(*encode_masks(*a)))
        grammar_file.atomic_write(only_entry(cache_dir), encode(compiled, compiled.index.export_masks()))
    clear_memory_cache()
    monkeypatch.setattr(grammar_module.fsm, "compile_dfa", lambda *a, **k: pytest.fail("recompiled"))
    loaded = compile_regex(PATTERN, small_vocab)
    assert snapshot(loaded) == expected
    assert len(loaded.index._stored) == 0
    loaded.save()
    clear_memory_cache()
    assert open_entry(only_entry(cache_dir), small_vocab).masks.keys() == set(range(compiled.dfa.n_states))


@st.composite
def dfas_and_masks(draw, vocab_size: int):
    """A random DFA (runs of equal targets, as real tables have) and masks of a random subset of its states."""
    n_states = draw(st.integers(1, 24))
    names = draw(st.sampled_from([(), ("<x>",), ("</s>", "<x>")]))
    width = 256 + len(names)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lengths = rng.integers(1, draw(st.sampled_from([2, 40, 600])), size=n_states * width)
    values = rng.integers(-1, n_states, size=lengths.shape[0], dtype=np.int32)
    transitions = np.repeat(values, lengths)[: n_states * width].reshape(n_states, width)
    distance = rng.integers(0, 4, size=n_states, dtype=np.int32)
    classes, class_table = fsm.symbol_classes(transitions)
    dfa = fsm.DFA(
        symbol_classes=classes, class_table=class_table, accepting=distance == 0, initial=0, special_names=names,
        distance=distance,
    )  # fmt: skip
    masks = {}
    for state in draw(st.sets(st.integers(0, n_states - 1))):
        n_allowed = draw(st.sampled_from([0, 1, 2, 40, vocab_size - 3, vocab_size]))
        ids = np.sort(rng.choice(vocab_size, size=n_allowed, replace=False)).astype(np.int32)
        targets = np.append(np.arange(n_states, dtype=np.int32), index_module.TERMINAL)
        next_states = np.repeat(rng.choice(targets, size=n_allowed), rng.integers(1, 9, size=n_allowed))[:n_allowed]
        masks[state] = (ids, next_states.astype(np.int32))
    return dfa, masks


def test_any_dfa_and_masks_read_back_exactly(small_vocab, tmp_path):
    path = tmp_path / "entry.grammar"

    @settings(max_examples=60, deadline=None)
    @given(dfas_and_masks(len(small_vocab)), st.text(max_size=40), st.booleans())
    def check(dfa_and_masks, pattern, allow_special):
        dfa, masks = dfa_and_masks
        grammar = SimpleNamespace(dfa=dfa, vocabulary=small_vocab, pattern=pattern, allow_special=allow_special)
        grammar_file.atomic_write(path, encode(grammar, masks))
        entry = open_entry(path, small_vocab)
        assert (entry.pattern, entry.allow_special, entry.n_masks) == (pattern, allow_special, len(masks))
        loaded = entry.dfa
        assert (loaded.initial, loaded.special_names, loaded.fingerprint) == (0, dfa.special_names, dfa.fingerprint)
        for name in ("symbol_classes", "class_table", "transitions", "accepting", "distance"):
            assert getattr(loaded, name).dtype == getattr(dfa, name).dtype
            np.testing.assert_array_equal(getattr(loaded, name), getattr(dfa, name))
            assert not getattr(loaded, name).flags.writeable
        assert {s: (i.tolist(), n.tolist()) for s, (i, n) in entry.masks.items()} == {
            s: (i.tolist(), n.tolist()) for s, (i, n) in masks.items()
        }
        assert grammar_file.open_entry(path, small_vocab, "another index") is None

    check()
