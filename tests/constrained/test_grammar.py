"""Grammar: compile once, cache in memory and on disk; a warm cache pays no DFA compile and no index walk."""

from __future__ import annotations

import numpy as np
import pytest

from constrained import fsm, grammar as grammar_module
from constrained import index as index_module
from constrained.errors import IncompatibleVocabularyError
from constrained.grammar import cache_directory, clear_memory_cache, compile_json_schema, compile_regex
from constrained.vocabulary import Vocabulary

PATTERN = r'\{"id":(0|[1-9][0-9]{0,5}),"tags":\[("[a-z]{1,8}"(,"[a-z]{1,8}"){0,3})?\]\}'


@pytest.fixture
def small_vocab() -> Vocabulary:
    pieces = [bytes([b]) for b in range(32, 127)] + [b'{"', b'":', b'","', b"tags", b'"]', b"</s>", b"<x>"]
    eos, special = len(pieces) - 2, len(pieces) - 1
    return Vocabulary.from_tokens(
        pieces, eos_token_ids=[eos], special_ids_by_name={"</s>": eos, "<x>": special}, name="small"
    )


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    clear_memory_cache()
    yield tmp_path / "cache"
    clear_memory_cache()


def all_masks(grammar) -> list[tuple[list[int], list[int]]]:
    out = []
    for state in range(grammar.dfa.n_states):
        mask = grammar.index.state_mask(state)
        out.append((mask.allowed.tolist(), mask.next_states.tolist()))
    return out


def test_same_pattern_and_vocabulary_give_the_same_grammar_object(small_vocab, cache_dir):
    first = compile_regex(PATTERN, small_vocab)
    assert compile_regex(PATTERN, small_vocab) is first
    assert compile_regex(PATTERN, small_vocab, allow_special=True) is not first
    assert first.fingerprint != first.dfa.fingerprint
    assert len(first.fingerprint) == 64


def test_disk_cache_round_trip_gives_identical_masks_without_compiling(small_vocab, cache_dir, monkeypatch):
    compiled = compile_regex(PATTERN, small_vocab)
    compiled.precompute()
    expected = all_masks(compiled)
    assert any(cache_dir.glob("*.npz"))
    clear_memory_cache()

    def refuse(*args, **kwargs):
        raise AssertionError("a warm cache must not compile or walk")

    monkeypatch.setattr(fsm, "compile_dfa", refuse)
    monkeypatch.setattr(index_module._kernel, "walk", refuse)
    loaded = compile_regex(PATTERN, small_vocab)
    assert loaded is not compiled
    assert loaded.fingerprint == compiled.fingerprint
    assert loaded.index.computed_states == tuple(range(compiled.dfa.n_states))
    np.testing.assert_array_equal(loaded.dfa.transitions, compiled.dfa.transitions)
    assert all_masks(loaded) == expected


def test_masks_computed_after_compile_are_saved_and_reloaded(small_vocab, cache_dir):
    compiled = compile_regex(PATTERN, small_vocab)
    matcher = compiled.matcher()
    for token_id in (ord("{") - 32, ord('"') - 32):
        assert matcher.advance(token_id)
    matcher.allowed_token_ids()
    computed = compiled.index.computed_states
    assert len(computed) >= 3
    compiled.save()
    clear_memory_cache()
    loaded = compile_regex(PATTERN, small_vocab)
    assert loaded.index.computed_states == computed


def test_corrupt_cache_entry_is_ignored_and_recompiled(small_vocab, cache_dir):
    compiled = compile_regex(PATTERN, small_vocab)
    expected = all_masks(compiled)
    for entry in cache_dir.glob("*.npz"):
        entry.write_bytes(b"not a zip file")
    clear_memory_cache()
    again = compile_regex(PATTERN, small_vocab)
    assert all_masks(again) == expected


def test_disk_cache_can_be_turned_off(small_vocab, tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", "off")
    clear_memory_cache()
    assert cache_directory() is None
    grammar = compile_regex(PATTERN, small_vocab)
    assert grammar.save() is None
    assert not any(tmp_path.iterdir())


def test_named_special_needs_allow_special_and_the_token(small_vocab, cache_dir):
    grammar = compile_regex(r"(?&<x>)a", small_vocab, allow_special=True)
    assert grammar.matcher().allowed_token_ids().tolist() == [small_vocab.special_ids_by_name["<x>"]]
    with pytest.raises(IncompatibleVocabularyError) as caught:
        compile_regex(r"(?&<tool_call>)a", small_vocab, allow_special=True)
    assert caught.value.missing == ("<tool_call>",)


def test_json_schema_grammar_accepts_only_documents_of_the_schema(small_vocab, cache_dir):
    pytest.importorskip("constrained.schema")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}  # fmt: skip
    grammar = compile_json_schema(schema, small_vocab)
    assert compile_json_schema(schema, small_vocab) is grammar
    assert grammar.dfa.accepts(b'{"ok":true}')
    assert not grammar.dfa.accepts(b'{"ok":1}')
    matcher = grammar.matcher()
    for token_id in (small_vocab.tokens.index(b'{"'), *[b - 32 for b in b"ok"], small_vocab.tokens.index(b'":')):
        assert matcher.advance(token_id)
    assert matcher.forced_bytes() == b""  # true | false: a choice


@pytest.mark.model
def test_warm_cache_on_a_real_vocabulary_skips_compile_and_walk(llama3_vocab, cache_dir, monkeypatch):
    compiled = compile_regex(PATTERN, llama3_vocab)
    matcher = compiled.matcher()
    expected = []
    while not matcher.is_terminated():
        expected.append(matcher.allowed_token_ids().tolist())
        normal = [t for t in expected[-1] if t not in llama3_vocab.eos_token_ids]
        assert matcher.advance(normal[0] if normal else expected[-1][0])
    compiled.save()
    clear_memory_cache()
    monkeypatch.setattr(grammar_module.fsm, "compile_dfa", lambda *a, **k: pytest.fail("compiled"))
    monkeypatch.setattr(index_module._kernel, "walk", lambda *a, **k: pytest.fail("walked"))
    loaded = compile_regex(PATTERN, llama3_vocab)
    replay = loaded.matcher()
    for allowed in expected:
        assert replay.allowed_token_ids().tolist() == allowed
        normal = [t for t in allowed if t not in llama3_vocab.eos_token_ids]
        assert replay.advance(normal[0] if normal else allowed[0])
