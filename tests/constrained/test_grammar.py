"""Grammar: compile once, cache in memory and on disk; a warm cache pays no schema translation, no DFA compile and
no index walk, re-emits the same warnings, and never trusts a damaged or stale entry."""

from __future__ import annotations

import json
import warnings
from concurrent.futures import ThreadPoolExecutor
from operator import attrgetter
from pathlib import Path

import numpy as np
import pytest

from constrained import fsm, grammar as grammar_module
from constrained import index as index_module
from constrained.frontends.json_schema import translate as schema_module
from constrained.errors import IncompatibleVocabularyError, UnknownKeywordWarning, UnsupportedSchemaError
from constrained.grammar import cache_directory, clear_memory_cache, compile_json_schema, compile_regex
from constrained.vocabulary import Vocabulary

PATTERN = r'\{"id":(0|[1-9][0-9]{0,5}),"tags":\[("[a-z]{1,8}"(,"[a-z]{1,8}"){0,3})?\]\}'
STRING_PATTERN = r'\{"name":"[ !#-\[\]-~]{0,12}","n":(0|[1-9][0-9]{0,3})\}'
"""Its string states allow most of the small vocabulary, mostly to one next state: stored as complement + runs."""
SCHEMA = {
    "type": "object", "required": ["ok"], "additionalProperties": False, "javaType": "Ok",
    "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "maximum": 9, "_format": "x"}},
}  # fmt: skip
"""Two unknown keywords: two UnknownKeywordWarnings on every compile."""


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


def snapshot(grammar) -> tuple:
    """Everything a grammar is: its identity, its DFA (every array) and every state's mask."""
    dfa = grammar.dfa
    return (
        grammar.pattern, grammar.allow_special, grammar.fingerprint, dfa.fingerprint, dfa.initial, dfa.special_names,
        dfa.transitions.tolist(), dfa.accepting.tolist(), dfa.distance.tolist(), all_masks(grammar),
    )  # fmt: skip


def refuse_compiling(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a warm cache must not translate, compile or walk")

    monkeypatch.setattr(schema_module, "schema_to_pattern", refuse)
    monkeypatch.setattr(fsm, "compile_dfa", refuse)
    monkeypatch.setattr(index_module._kernel, "walk", refuse)
    monkeypatch.setattr(index_module.TokenIndex, "_compute", refuse)


def compile_recording_warnings(schema, vocab, **kwargs):
    """(grammar, [(category, message, filename, lineno)]) for one call, every warning recorded."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grammar = compile_json_schema(schema, vocab, **kwargs)
    return grammar, [(w.category, str(w.message), w.filename, w.lineno) for w in caught]


def only_entry(cache_dir):
    (entry,) = cache_dir.glob("*.grammar")
    return entry


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
    assert any(cache_dir.glob("*.grammar"))
    clear_memory_cache()

    def refuse(*args, **kwargs):
        raise AssertionError("a warm cache must not compile or walk")

    monkeypatch.setattr(fsm, "compile_dfa", refuse)
    monkeypatch.setattr(index_module._kernel, "walk", refuse)
    monkeypatch.setattr(index_module.TokenIndex, "_compute", refuse)
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
    compiled.save()
    only_entry(cache_dir).write_bytes(b"not a zip file")
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


@pytest.mark.parametrize(
    ("pattern", "allow_special"), [(PATTERN, False), (STRING_PATTERN, False), (r"(?&<x>)a+", True)]
)
def test_warm_load_gives_the_identical_dfa_and_every_mask(small_vocab, cache_dir, monkeypatch, pattern, allow_special):
    compiled = compile_regex(pattern, small_vocab, allow_special=allow_special)
    compiled.precompute()
    expected = snapshot(compiled)
    clear_memory_cache()
    refuse_compiling(monkeypatch)
    loaded = compile_regex(pattern, small_vocab, allow_special=allow_special)
    assert loaded is not compiled
    assert snapshot(loaded) == expected


def test_saving_again_without_new_masks_does_not_rewrite(small_vocab, cache_dir):
    compiled = compile_regex(PATTERN, small_vocab)
    path = compiled.save()
    assert path == only_entry(cache_dir)
    before = path.stat().st_ino
    assert compiled.save() == path
    assert path.stat().st_ino == before
    compiled.index.state_mask(compiled.dfa.n_states - 1)
    compiled.save()
    assert path.stat().st_ino != before


def test_a_deleted_cache_costs_recomputation_only(small_vocab, cache_dir):
    compiled = compile_regex(STRING_PATTERN, small_vocab)
    compiled.precompute()
    expected = all_masks(compiled)
    clear_memory_cache()
    loaded = compile_regex(STRING_PATTERN, small_vocab)
    for path in sorted(cache_dir.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    assert all_masks(loaded) == expected
    assert loaded.save() == only_entry(cache_dir)


def test_an_entry_of_another_grammar_is_not_used(small_vocab, cache_dir):
    first = compile_regex(PATTERN, small_vocab)
    expected = snapshot(first)
    other = compile_regex(STRING_PATTERN, small_vocab)
    first.save()
    other.save()
    first_path = Path(grammar_module._entry_path(str(cache_dir), first.fingerprint))
    first_path.write_bytes(Path(grammar_module._entry_path(str(cache_dir), other.fingerprint)).read_bytes())
    clear_memory_cache()
    assert snapshot(compile_regex(PATTERN, small_vocab)) == expected


@pytest.mark.parametrize("alias", [b"", b"zz", b"../../../../etc/passwd", b"0" * 64, b"\xff" * 64])
def test_a_damaged_pattern_alias_is_ignored(small_vocab, cache_dir, alias):
    compiled = compile_regex(PATTERN, small_vocab)
    compiled.save()
    expected = snapshot(compiled)
    (alias_path,) = (cache_dir / "alias").glob("*.txt")
    alias_path.write_bytes(alias)
    clear_memory_cache()
    assert snapshot(compile_regex(PATTERN, small_vocab)) == expected


def test_json_schema_warm_load_skips_translation_and_gives_the_same_grammar(small_vocab, cache_dir, monkeypatch):
    with pytest.warns(UnknownKeywordWarning):
        compiled = compile_json_schema(SCHEMA, small_vocab, unknown_keywords="warn")
    compiled.precompute()
    expected = snapshot(compiled)
    clear_memory_cache()
    refuse_compiling(monkeypatch)
    with pytest.warns(UnknownKeywordWarning):
        loaded = compile_json_schema(SCHEMA, small_vocab)
    assert snapshot(loaded) == expected
    assert compile_regex(loaded.pattern, small_vocab) is loaded  # remembered under its pattern too


def test_unknown_keyword_warnings_are_the_same_cold_from_memory_and_from_disk(small_vocab, cache_dir, monkeypatch):
    def compile_once():
        return compile_recording_warnings(SCHEMA, small_vocab)  # one call site: equal locations

    cold, cold_warnings = compile_once()
    cold.save()
    assert sorted((c.__name__, m.split(" at ")[0]) for c, m, _, _ in cold_warnings) == [
        ("UnknownKeywordWarning", "ignoring '_format'"), ("UnknownKeywordWarning", "ignoring 'javaType'")
    ]  # fmt: skip
    assert all(filename == __file__ for _, _, filename, _ in cold_warnings)  # the caller's line, not schema.py
    memory, memory_warnings = compile_once()
    assert memory is cold and memory_warnings == cold_warnings
    clear_memory_cache()
    monkeypatch.setattr(schema_module, "schema_to_pattern", lambda *a, **k: pytest.fail("translated again"))
    disk, disk_warnings = compile_once()
    assert disk is not cold and disk.fingerprint == cold.fingerprint
    assert disk_warnings == cold_warnings
    clear_memory_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownKeywordWarning)
        with pytest.raises(UnknownKeywordWarning):
            compile_json_schema(SCHEMA, small_vocab)


def test_a_cold_compile_writes_nothing_and_save_writes_the_entry_before_its_aliases(small_vocab, cache_dir,
                                                                                   monkeypatch):
    with pytest.warns(UnknownKeywordWarning):
        compiled = compile_json_schema(SCHEMA, small_vocab)
    assert not cache_dir.exists() or not any(path.is_file() for path in cache_dir.rglob("*"))
    order = []
    atomic_write = grammar_module.grammar_file.atomic_write
    monkeypatch.setattr(grammar_module.grammar_file, "atomic_write",
                        lambda path, parts: order.append(Path(path).suffix) or atomic_write(path, parts))
    assert compiled in grammar_module._live  # what interpreter exit saves
    compiled.save()
    assert order[0] == ".grammar" and sorted(order[1:]) == [".json", ".txt"]  # an alias never names a missing entry
    written = {path: path.stat().st_mtime_ns for path in cache_dir.rglob("*") if path.is_file()}
    compiled.save()
    assert {path: path.stat().st_mtime_ns for path in cache_dir.rglob("*") if path.is_file()} == written
    clear_memory_cache()
    refuse_compiling(monkeypatch)
    with pytest.warns(UnknownKeywordWarning):
        assert compile_json_schema(SCHEMA, small_vocab).fingerprint == compiled.fingerprint


def test_a_grammar_pushed_out_of_memory_is_saved_first(small_vocab, cache_dir, monkeypatch):
    monkeypatch.setattr(grammar_module, "_MEMORY_LIMIT", 1)
    monkeypatch.setattr(grammar_module, "_RULE_SETS_LIMIT", 1)
    first = compile_regex(PATTERN, small_vocab).fingerprint
    grammar_module.compile_rules({"doc": r"\[(?&=doc)?\]"}, "doc", small_vocab)
    assert not cache_dir.exists() or not any(path.is_file() for path in cache_dir.rglob("*"))
    compile_regex(STRING_PATTERN, small_vocab)  # pushes the first grammar out of memory
    grammar_module.compile_rules({"doc": r"\((?&=doc)?\)"}, "doc", small_vocab)  # and the first rule set
    assert Path(grammar_module._entry_path(str(cache_dir), first)).exists()
    assert len(list((cache_dir / "alias").glob("*.txt"))) == 1  # its pattern alias, after it
    assert len(list(cache_dir.glob("*.rules"))) == 1


def test_errors_are_raised_cold_and_never_cached(small_vocab, cache_dir):
    compile_recording_warnings(SCHEMA, small_vocab)[0].save()
    aliases = sorted((cache_dir / "alias").iterdir())
    for _ in range(2):
        clear_memory_cache()
        with pytest.raises(UnsupportedSchemaError):
            compile_json_schema(SCHEMA, small_vocab, unknown_keywords="error")
    assert sorted((cache_dir / "alias").iterdir()) == aliases
    broken = {"type": "object", "properties": {"a": {"_format": "x", "type": "array", "unevaluatedItems": False}}}
    with pytest.warns(UnknownKeywordWarning, match="_format"), pytest.raises(UnsupportedSchemaError) as err:
        compile_json_schema(broken, small_vocab)  # what was warned before the error is still warned
    assert (err.value.keyword, err.value.path) == ("unevaluatedItems", "#/properties/a")


@pytest.mark.parametrize(
    "damage",
    [
        lambda alias: b"",
        lambda alias: b"{",
        lambda alias: json.dumps({**alias, "warnings": "x"}).encode(),
        lambda alias: json.dumps({**alias, "warnings": []}).encode(),  # not trustworthy, but still parses...
        lambda alias: json.dumps({**alias, "pattern_sha256": "0" * 64}).encode(),
        lambda alias: json.dumps({**alias, "grammar": "../" + alias["grammar"]}).encode(),
        lambda alias: json.dumps({**alias, "format": "ember.grammar.v2"}).encode(),
    ],
)
def test_a_damaged_schema_alias_falls_back_to_translation(small_vocab, cache_dir, damage):
    with pytest.warns(UnknownKeywordWarning):
        compiled = compile_json_schema(SCHEMA, small_vocab)
    compiled.save()
    expected = snapshot(compiled)
    (alias_path,) = (cache_dir / "alias").glob("*.json")
    alias = json.loads(alias_path.read_text())
    damaged = damage(alias)
    alias_path.write_bytes(damaged)
    clear_memory_cache()
    grammar, caught = compile_recording_warnings(SCHEMA, small_vocab)
    assert snapshot(grammar) == expected
    if damaged != json.dumps({**alias, "warnings": []}).encode():
        assert len(caught) == 2  # every fallback translates again, so it warns as a cold compile does


def test_a_changed_compiler_invalidates_both_aliases(small_vocab, cache_dir, monkeypatch, tmp_path):
    source = tmp_path / "compiler_part.py"
    source.write_text("version = 1\n")
    sources = grammar_module._compiler_sources
    monkeypatch.setattr(grammar_module, "_compiler_sources", lambda: [*sources(), str(source)])
    grammar_module._compiler_identity.cache_clear()
    try:
        with pytest.warns(UnknownKeywordWarning):
            compiled = compile_json_schema(SCHEMA, small_vocab)
        compiled.save()
        clear_memory_cache()
        with pytest.MonkeyPatch.context() as patch, pytest.warns(UnknownKeywordWarning):
            refuse_compiling(patch)
            assert compile_json_schema(SCHEMA, small_vocab).fingerprint == compiled.fingerprint  # same compiler
        source.write_text("version = 2\n")
        grammar_module._compiler_identity.cache_clear()  # a new process would hash the changed source
        clear_memory_cache()
        calls = []
        translate, compile_dfa = schema_module.schema_to_pattern, fsm.compile_dfa
        with pytest.MonkeyPatch.context() as patch, pytest.warns(UnknownKeywordWarning):
            patch.setattr(
                schema_module, "schema_to_pattern", lambda *a, **k: calls.append("schema") or translate(*a, **k)
            )
            patch.setattr(fsm, "compile_dfa", lambda *a, **k: calls.append("dfa") or compile_dfa(*a, **k))
            assert compile_json_schema(SCHEMA, small_vocab).fingerprint == compiled.fingerprint
        assert calls == ["schema", "dfa"]  # neither the schema alias nor the pattern alias was trusted
    finally:
        grammar_module._compiler_identity.cache_clear()


def test_a_changed_index_invalidates_stored_masks(small_vocab, cache_dir, monkeypatch, tmp_path):
    compiled = compile_regex(PATTERN, small_vocab)
    compiled.precompute()
    source = tmp_path / "index_part.py"
    source.write_text("changed = True\n")
    sources = grammar_module._index_sources
    monkeypatch.setattr(grammar_module, "_index_sources", lambda: [*sources(), str(source)])
    grammar_module._index_identity.cache_clear()
    try:
        clear_memory_cache()
        calls = []
        compile_dfa = fsm.compile_dfa
        monkeypatch.setattr(fsm, "compile_dfa", lambda *a, **k: calls.append("dfa") or compile_dfa(*a, **k))
        assert all_masks(compile_regex(PATTERN, small_vocab)) == all_masks(compiled)
        assert calls == ["dfa"]
    finally:
        grammar_module._index_identity.cache_clear()


def test_threads_compiling_one_pattern_compile_it_once_and_share_it(small_vocab, cache_dir, monkeypatch):
    calls = []
    compile_dfa = fsm.compile_dfa
    monkeypatch.setattr(fsm, "compile_dfa", lambda *a, **k: calls.append(a[0]) or compile_dfa(*a, **k))
    patterns = [PATTERN, STRING_PATTERN] * 8
    with ThreadPoolExecutor(max_workers=8) as pool:
        grammars = list(pool.map(lambda pattern: compile_regex(pattern, small_vocab), patterns))
    assert sorted(c for c in calls if c in patterns) == sorted([PATTERN, STRING_PATTERN])  # once each
    assert len({id(g) for g in grammars[0::2]}) == len({id(g) for g in grammars[1::2]}) == 1


def test_an_unwritable_cache_warns_once_per_directory_and_compiles_anyway(small_vocab, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(grammar_module, "_warned", set())
    clear_memory_cache()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = compile_json_schema({"type": "integer"}, small_vocab)
        compile_regex("ab+", small_vocab).save()
    clear_memory_cache()
    assert compiled.matcher().advance(small_vocab.tokens.index(b"7"))
    cache_warnings = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(cache_warnings) == 1
    assert f"cannot write the grammar cache at {blocker / 'cache'}" in str(cache_warnings[0].message)


# -- rule sets (pushdown grammars) ------------------------------------------------------------------------------------

OPEN_SCHEMA = {
    "type": "object", "required": ["id"], "javaType": "Node",
    "properties": {"id": {"type": "integer"}, "meta": {}, "kids": {"type": "array", "items": {"$ref": "#"}}},
}  # fmt: skip
"""Open-ended (``meta`` takes any value) and recursive: rules, not one DFA; one unknown keyword."""
OPEN_DOCUMENTS = [b'{"id":1}', b'{"id":2,"meta":{"a":[null,true]},"kids":[{"id":3,"kids":[{"id":4}]}]}',
                  b'{"id":5,"kids":[]}', b'{"meta":1}', b'{"id":1,"kids":[{"meta":0}]}', b'{"id":"1"}']  # fmt: skip
_RULE_ARRAYS = ("_table.classes", "_table.symbol_class", "_dist", "_hop_kind", "_hop_a", "_hop_b", "_reach",
                "_boundary", "_symbol_hop", "_rule_accept", "_top_accept")  # fmt: skip


def rules_snapshot(grammar, vocab) -> tuple:
    """A rule set's identity, every table the kernels read, and the masks along each document of `OPEN_DOCUMENTS`
    (as far as the grammar takes it)."""
    arrays = {name: attrgetter(name)(grammar) for name in _RULE_ARRAYS}
    tables = tuple((name, array.dtype.str, array.tolist()) for name, array in arrays.items())
    walks = []
    for document in OPEN_DOCUMENTS:
        matcher, steps = grammar.matcher(), []
        for byte in document:
            steps.append(matcher.allowed_token_ids().tolist())
            if not matcher.advance(vocab.tokens.index(bytes([byte]))):
                break
        walks.append((steps, matcher.is_accepting(), grammar.accepts(document)))
    pushes = [grammar._pushes[state] for state in range(grammar.n_states)]
    return (grammar.fingerprint, grammar.rules, grammar.start, grammar._starts, pushes, tables, walks)


def refuse_compiling_rules(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a warm rule set must not translate or compile")

    monkeypatch.setattr(schema_module, "schema_to_rules", refuse)
    monkeypatch.setattr(schema_module, "schema_to_pattern", refuse)
    monkeypatch.setattr(fsm, "compile_dfa", refuse)


def test_a_schema_of_rules_loads_from_disk_without_translating_or_compiling(small_vocab, cache_dir, monkeypatch):
    with pytest.warns(UnknownKeywordWarning, match="javaType"):
        compiled = compile_json_schema(OPEN_SCHEMA, small_vocab)
    assert isinstance(compiled, grammar_module.PushdownGrammar)
    expected = rules_snapshot(compiled, small_vocab)
    assert [w[1] for w in expected[-1]] == [True, True, True, False, False, False]  # the documents test something
    assert not cache_dir.exists()  # a cold compile writes nothing: its grammar is saved on request or at exit
    grammar_module._save_live_grammars()
    assert len(list(cache_dir.glob("*.rules"))) == 1 and len(list((cache_dir / "alias").glob("*.rules.json"))) == 1
    clear_memory_cache()
    refuse_compiling_rules(monkeypatch)
    with pytest.warns(UnknownKeywordWarning, match="javaType"):  # warned from disk as it was cold
        loaded = compile_json_schema(OPEN_SCHEMA, small_vocab)
    assert loaded is not compiled
    assert rules_snapshot(loaded, small_vocab) == expected
    with pytest.warns(UnknownKeywordWarning):
        assert compile_json_schema(OPEN_SCHEMA, small_vocab) is loaded  # then remembered in memory
    assert grammar_module.compile_rules(loaded.rules, loaded.start, small_vocab) is loaded


def test_compile_rules_stores_and_reloads_a_rule_set_with_specials(small_vocab, cache_dir, monkeypatch):
    rules = {"doc": r"\{(?&=item)(?:,(?&=item))*\}(?&</s>)?", "item": r"[a-z]+|(?&=doc)|(?&<x>)"}
    compiled = grammar_module.compile_rules(rules, "doc", small_vocab, allow_special=True)
    compiled.save()
    clear_memory_cache()
    refuse_compiling_rules(monkeypatch)
    loaded = grammar_module.compile_rules(rules, "doc", small_vocab, allow_special=True)
    assert loaded is not compiled and loaded.special_names == compiled.special_names == ("</s>", "<x>")
    for name in _RULE_ARRAYS:
        np.testing.assert_array_equal(attrgetter(name)(loaded), attrgetter(name)(compiled))
    assert all(loaded._pushes[s] == compiled._pushes[s] for s in range(compiled.n_states))
    assert [loaded.accepts(d) for d in (b"{ab,{c}}", b"{}", b"{a")] == [True, False, False]


def _rewrite_entry(entry: Path, change) -> None:
    """Rewrite a rule-set entry with one array changed, framing (crc32) intact: only the range checks can tell."""
    from constrained import grammar_file

    header, arrays = grammar_file.open_arrays(entry)
    arrays = {name: np.array(array) for name, array in arrays.items()}
    change(header, arrays)
    entry.write_bytes(b"".join(bytes(part) for part in grammar_file.encode_arrays(header, arrays, runs=("by_class",))))


@pytest.mark.parametrize(
    "damage",
    [
        lambda entry: entry.write_bytes(entry.read_bytes()[:-9]),
        lambda entry: entry.write_bytes(entry.read_bytes()[:200] + b"\xff" + entry.read_bytes()[201:]),
        lambda entry: _rewrite_entry(entry, lambda h, a: a["by_class"].__setitem__((0, 0), h["n_states"])),
        lambda entry: _rewrite_entry(entry, lambda h, a: a["symbol_class"].__setitem__(5, a["symbol_class"].max() + 1)),
        lambda entry: _rewrite_entry(entry, lambda h, a: a["call_cont"].__setitem__(0, -1)),
        lambda entry: _rewrite_entry(entry, lambda h, a: a.__setitem__("reach", a["reach"][:-1])),
        lambda entry: _rewrite_entry(entry, lambda h, a: a["hop_a"].__setitem__(np.argmax(a["hop_kind"] == 2),
                                                                                  h["n_states"] + 7)),
        lambda entry: _rewrite_entry(entry, lambda h, a: h["starts"].__setitem__(h["start_rule"], -3)),
    ],
)
def test_a_damaged_rule_set_entry_is_compiled_again(small_vocab, cache_dir, damage):
    with pytest.warns(UnknownKeywordWarning):
        compiled = compile_json_schema(OPEN_SCHEMA, small_vocab)
    compiled.save()
    expected = rules_snapshot(compiled, small_vocab)
    (entry,) = cache_dir.glob("*.rules")
    damage(entry)
    clear_memory_cache()
    with pytest.warns(UnknownKeywordWarning):
        assert rules_snapshot(compile_json_schema(OPEN_SCHEMA, small_vocab), small_vocab) == expected


def test_a_changed_rules_compiler_does_not_read_old_rule_sets(small_vocab, cache_dir, monkeypatch):
    with pytest.warns(UnknownKeywordWarning):
        compile_json_schema(OPEN_SCHEMA, small_vocab).save()
    clear_memory_cache()
    monkeypatch.setattr(grammar_module, "_rules_identity", lambda: "a changed pushdown compiler")
    compiled = []
    real = grammar_module.pushdown.PushdownGrammar

    def counting(*args, **kwargs):
        compiled.append(kwargs.get("stored") is None)
        return real(*args, **kwargs)

    monkeypatch.setattr(grammar_module.pushdown, "PushdownGrammar", counting)
    with pytest.warns(UnknownKeywordWarning):
        compile_json_schema(OPEN_SCHEMA, small_vocab).save()
    assert compiled == [True]  # compiled afresh, and stored under the new identity beside the old entry
    assert len(list(cache_dir.glob("*.rules"))) == 2


def test_an_entry_of_another_rule_set_is_not_used(small_vocab, cache_dir):
    first, second = {"doc": r"\[(?&=doc)?\]"}, {"doc": r"\((?&=doc)?\)"}
    grammar_module.compile_rules(first, "doc", small_vocab).save()
    (first_entry,) = cache_dir.glob("*.rules")
    grammar_module.compile_rules(second, "doc", small_vocab).save()
    (second_entry,) = set(cache_dir.glob("*.rules")) - {first_entry}
    second_entry.write_bytes(first_entry.read_bytes())  # a file under another rule set's name
    clear_memory_cache()
    loaded = grammar_module.compile_rules(second, "doc", small_vocab)
    assert loaded.accepts(b"(())") and not loaded.accepts(b"[[]]")


def test_a_rule_set_is_written_once_and_not_at_all_without_a_cache(small_vocab, cache_dir, tmp_path, monkeypatch):
    with pytest.warns(UnknownKeywordWarning):
        compiled = compile_json_schema(OPEN_SCHEMA, small_vocab)
    compiled.save()
    written = {path: path.stat().st_mtime_ns for path in cache_dir.rglob("*") if path.is_file()}
    assert len(written) == 2  # the entry and the schema's rules alias
    compiled.save()
    grammar_module._save_live_grammars()
    assert {path: path.stat().st_mtime_ns for path in cache_dir.rglob("*") if path.is_file()} == written
    monkeypatch.setenv("EMBER_CACHE_DIR", "off")
    clear_memory_cache()
    with pytest.warns(UnknownKeywordWarning):
        uncached = compile_json_schema(OPEN_SCHEMA, small_vocab)
    assert uncached is not compiled and uncached.saver is None
    uncached.save()
    assert {path for path in cache_dir.rglob("*") if path.is_file()} == set(written)
