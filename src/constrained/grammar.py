"""Grammar: an immutable DFA + token index over one vocabulary, compiled once and cached in memory and on disk.

Owns compilation entry points (`compile_regex`, `compile_rules`, `compile_json_schema`) and both caches; refuses
nothing the compilers accept (their errors propagate: `RegexSyntaxError`, `UnsupportedSchemaError`,
`GrammarTooLargeError`, `IncompatibleVocabularyError`).

    compile_json_schema: schema ──► memory ──hit──► (pattern, warnings) ──► compile_regex(pattern)
                                      │ miss
                                      ▼
                             schema alias  alias/<sha256(schema text, whitespace, unknown_keywords,
                                      │                 property_order, vocab, compiler identity)>.json
                                      │    = grammar fingerprint + pattern hash + warnings ──hit──► entry
                                      │ miss
                                      ▼
                             schema_to_pattern (warnings recorded) ──► compile_regex(pattern)

    compile_regex: pattern ──► memory ──hit──► Grammar
                                 │ miss
                                 ▼
                        pattern alias  alias/<sha256(pattern, allow_special, vocab, compiler identity)>.txt
                                 │     = grammar fingerprint
                                 ▼
                        entry  <fingerprint>.grammar (DFA + every mask computed so far) ──► Grammar
                                 │ miss / corrupt / mismatched
                                 ▼
                        fsm.compile_dfa ──► TokenIndex(dfa, vocab) ──► Grammar ──► saved by `save`, at exit or
                                                         when pushed out of memory (entry, then its aliases)

    compile_rules: rules ──► memory ──hit──► PushdownGrammar
                               │ miss
                               ▼
                      entry  <sha256(rules fingerprint, rules compiler identity)>.rules: the layout's tables
                               │ miss / corrupt / mismatched       (grammar_file.open_arrays; every index the
                               ▼                                     kernels trust is range-checked on adoption)
                      PushdownGrammar(rules) ──► saved by `save`, at exit or when pushed out of memory
    A schema that compiles to rules has its own alias (alias/<schema alias>.rules.json = the rule set's
    fingerprint + warnings), so a warm load skips its translation too.

A warm process pays no schema translation and no DFA compile for a grammar it has seen, and no index walk for a
one-DFA grammar's states seen before (a pushdown grammar's masks depend on the stack: per process): masks
computed in a process are written back by `Grammar.precompute`, `Grammar.save` and at interpreter exit. The
compiler identity (sha256 of the sources that turn a schema into a pattern and a pattern into a DFA) is in
both alias keys, so a changed compiler never reuses an old translation. `UnknownKeywordWarning`s of a schema
are stored with its alias and re-emitted on every hit (memory or disk), from the caller's line, exactly as the
cold path emits them: a cache hit never makes a warning silent. Errors are never cached.

The entry file and its checks are `constrained.grammar_file`'s: anything truncated, corrupt or mismatched
counts as absent, so the grammar (or that one state) is recomputed, never trusted. A warm load costs one small
alias read, one entry read and a `TokenIndex` (no Path objects, no re-hashing: the compiler and index identities
are computed once per process). Cache directory: ``$EMBER_CACHE_DIR`` (``off`` disables the disk cache), else
``$XDG_CACHE_HOME/ember/index`` or ``~/.cache/ember/index``.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import os
import re
import threading
import warnings
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from constrained import fsm, grammar_file, pushdown
from constrained.frontends.json_schema import depth as schema_depth
from constrained.errors import GrammarTooLargeError, UnknownKeywordWarning
from constrained.fsm import DFA
from constrained.grammar_file import FORMAT
from constrained.index import TokenIndex
from constrained.matcher import Matcher
from constrained.pushdown import PushdownGrammar
from constrained.rules import RuleSet
from constrained.vocabulary import Vocabulary

__all__ = [
    "Grammar", "compile_regex", "compile_rules", "compile_json_schema", "cache_directory", "clear_memory_cache",
]  # fmt: skip

_MEMORY_LIMIT = 128


@dataclass(frozen=True, kw_only=True, eq=False)
class Grammar:
    """A compiled grammar: shareable across threads and sequences; per-sequence state lives in `Matcher`."""

    pattern: str
    """The regex (our dialect) the DFA was compiled from."""
    allow_special: bool
    """Whether the pattern may name special tokens with ``(?&NAME)``."""
    dfa: DFA
    """The byte-level automaton."""
    vocabulary: Vocabulary
    """The vocabulary masks are computed over."""
    index: TokenIndex
    """Per-state allowed tokens (lazy, cached)."""
    fingerprint: str
    """sha256 hex of the DFA fingerprint + vocabulary fingerprint: the disk-cache key."""
    aliases: dict[str, bytes] = field(default_factory=dict, init=False, repr=False)
    """Aliases that name this grammar and are not on disk yet (file name under ``alias/`` → content), written by
    `save` after the entry. A cold compile writes nothing: creating the entry and two aliases (and their
    directories) took more than the compile itself for a one-DFA schema."""

    def matcher(self, max_tokens: int | None = None) -> Matcher:
        """A fresh cursor at the start of the grammar.

        Raises:
            BudgetTooSmallError: ``max_tokens`` is below the tokens the shortest document needs.
        """
        return Matcher(self, max_tokens)

    def accepts(self, data: bytes) -> bool:
        """Whether ``data`` (bytes only, no special tokens) is a complete document of the grammar (as
        `PushdownGrammar.accepts`)."""
        return self.dfa.accepts(data)

    def precompute(self) -> None:
        """Compute every state's mask now and persist them (e.g. ahead of serving)."""
        self.index.precompute()
        self.save()

    def save(self) -> Path | None:
        """Write the DFA and every mask computed so far to the disk cache, then the aliases that name it; the entry's
        path, or None if disabled or not written."""
        location = _cache_location()
        if location is None:
            return None
        path = _entry_path(location[1], self.fingerprint)
        on_disk = _saved_counts.get(path) == len(self.index.computed_states) and os.path.exists(path)  # no decoding
        if not on_disk and not self._write_entry(path):
            return None
        for name, text in list(self.aliases.items()):  # after the entry they name
            if _write_cache_file(os.path.join(location[1], "alias", name), [text]):
                self.aliases.pop(name, None)
        return Path(path)

    def _write_entry(self, path: str) -> bool:
        """Encode the DFA and every mask computed so far into the entry at ``path``; False if it was not written."""
        for _ in range(len(self.index.computed_states) + 1):
            try:
                masks = self.index.export_masks()
                break
            except KeyError:  # a stored state failed its check on this first read: now dropped, export again
                continue
        else:
            return False
        if not _write_cache_file(path, grammar_file.encode_entry(self, masks, _index_identity())):
            return False
        _saved_counts[path] = len(masks)
        return True

    def __repr__(self) -> str:
        return (
            f"Grammar(fingerprint={self.fingerprint[:12]}…, n_states={self.dfa.n_states}, "
            f"vocabulary={self.vocabulary.name or '?'}, pattern={self.pattern[:60]!r})"
        )


# -- public compilers -----------------------------------------------------------------------------------------------


CompiledGrammar = Grammar | PushdownGrammar
"""What a compile returns: one DFA (`Grammar`) or rules (`PushdownGrammar`); both give a matcher with the same
cursor interface (`constrained.matcher.Cursor`), masks, ``accepts``, ``precompute`` and ``save``."""


def compile_regex(pattern: str, vocab: Vocabulary, *, allow_special: bool = False) -> Grammar:
    """Compile a full-match regex (our dialect, see fsm/regex) against a vocabulary, using both caches.

    Raises:
        RegexSyntaxError, GrammarTooLargeError: from the DFA compiler.
        IncompatibleVocabularyError: the vocabulary cannot spell the grammar.
    """
    key = (pattern, bool(allow_special), vocab.fingerprint)
    grammar = _memory.get(key)
    if grammar is not None:
        return grammar
    with _compile_lock(key):
        grammar = _memory.get(key)
        if grammar is None:
            grammar = _load(pattern, allow_special, vocab)
            if grammar is None:
                grammar = _compile(pattern, allow_special, vocab)
            _remember(key, grammar)
    return grammar


def compile_rules(
    rules: Mapping[str, str], start: str, vocab: Vocabulary, *, allow_special: bool = False
) -> PushdownGrammar:
    """Compile rules (name → body pattern, ``(?&=NAME)`` calls) starting at ``start`` over ``vocab``, using both
    caches: memory, then ``<key>.rules`` entries on disk (a rule set's tables, written by ``save()`` or at exit).

    Raises:
        GrammarError: an undefined or invalid rule name, a special token without ``allow_special``, left recursion.
        RegexSyntaxError, GrammarTooLargeError: from a rule body's DFA compiler.
        EmptyLanguageError: the start rule derives no finite string.
        IncompatibleVocabularyError: the vocabulary lacks a special token the rules name.
    """
    key = (tuple(rules.items()), start, bool(allow_special), vocab.fingerprint)
    grammar = _rule_sets.get(key)
    if grammar is None:
        entry = _rules_entry_path(rules, start, vocab, allow_special)
        grammar = None if entry is None else _load_rules(entry, vocab, (rules, start, allow_special))
        if grammar is None:
            grammar = pushdown.PushdownGrammar(rules, start, vocab, allow_special=allow_special)
            if entry is not None:
                grammar.saver = _RulesSaver(entry)
                _live.add(grammar)
        grammar = _remember_rules(key, grammar)
    return grammar


def compile_json_schema(
    schema: dict[str, Any] | str,
    vocab: Vocabulary,
    whitespace: Literal["compact", "spaced", "flexible"] = "compact",
    *,
    unknown_keywords: Literal["warn", "error", "annotation"] = "warn",
    property_order: Literal["schema", "any"] = "schema",
) -> CompiledGrammar:
    """Compile a JSON Schema (dict or JSON text) to a grammar over ``vocab``.

    ``unknown_keywords``: keys that are no JSON Schema keyword are warned about and ignored ("warn") or refused
    ("error"); a ``format`` the engine does not know is refused either way, unless "annotation" ignores it too
    (JSON Schema's reading); see `constrained.schema.schema_to_pattern`. The warnings are emitted on every call,
    cached or not.

    ``property_order``: "schema" (generation: one canonical spelling per object, its properties in schema order)
    or "any" (acceptance: an object's members in any order, each at most once; always a pushdown grammar, see
    `constrained.schema.schema_to_rules`).

    The grammar is exact: its language is the schema's valid documents (in schema key order unless
    ``property_order="any"``, within the number and whitespace policies). A schema that one DFA cannot hold exactly
    — a recursive ``$ref``, an open-ended value (``true``, ``{}``, extra properties), containers deeper than 12, or
    a `GrammarTooLargeError` on the way — compiles to a pushdown grammar instead (`constrained.pushdown`, rules
    from `schema.schema_to_rules`): the same matcher interface, values at any depth, no state budget over the whole
    document.

    Raises:
        UnsupportedSchemaError, InvalidSchemaError: from the schema compiler; a schema nested deeper than
            ``MAX_SCHEMA_DEPTH`` (`constrained.schema_depth`), refused before any recursive walk.
        IncompatibleVocabularyError: the vocabulary cannot spell the grammar.
    """
    schema_depth.check_schema_depth(schema)  # iterative: before json.dumps, the compile's first recursive walk
    with schema_depth.recursion_room():  # a schema MAX_SCHEMA_DEPTH deep takes more frames than the default limit
        canonical = schema if isinstance(schema, str) else json.dumps(schema, sort_keys=False, separators=(",", ":"))
        schema_key = (canonical, whitespace, unknown_keywords, property_order)
        rules = _schema_rules.get(schema_key)
        rules_alias = None
        if rules is None:
            remembered = _schema_patterns.get(schema_key)
            if remembered is not None:  # a one-DFA schema seen in this process
                _emit_unknown_keywords(remembered[1])
                return compile_regex(remembered[0], vocab)
            alias = _schema_alias_path(schema_key, vocab)
            if alias is not None:  # a schema of rules compiled before: no translation, no DFA attempt
                rules_alias = f"{alias}.rules.json"
                loaded = _load_schema_rules(rules_alias, schema_key, vocab)
                if loaded is not None:
                    return loaded
            warned = False
            if property_order == "schema" and not _open_at_root(schema):
                try:
                    return _compile_schema_dfa(schema, schema_key, vocab, None if alias is None else f"{alias}.json")
                except _OneDfaCannot as wall:
                    warned = wall.warned
            rules = _rules_for(schema, schema_key, warned=warned)
        else:
            _emit_unknown_keywords(rules[2])
        try:
            grammar = compile_rules(rules[0], rules[1], vocab)
        except GrammarTooLargeError:
            if rules[3]:
                raise
            rules = _rules_for(schema, schema_key, warned=True, fine=True)  # a rule too big for one automaton: smaller
            grammar = compile_rules(rules[0], rules[1], vocab)
        if rules_alias is not None and schema_key in _schema_rules:  # a complete translation (no stray warning)
            entry = {"format": FORMAT, "rules": grammar.fingerprint, "warnings": list(rules[2]), "fine": rules[3]}
            saver = grammar.saver if isinstance(grammar.saver, _RulesSaver) else _RulesSaver(None)
            grammar.saver = saver
            saver.aliases[rules_alias] = json.dumps(entry).encode()
            _live.add(grammar)
        return grammar


def _open_at_root(schema: Any) -> bool:
    from constrained.frontends.json_schema.translate import open_at_root

    try:
        return open_at_root(json.loads(schema) if isinstance(schema, str) else schema)
    except json.JSONDecodeError:
        return False  # the translation says what is wrong


class _OneDfaCannot(Exception):
    """The schema needs a pushdown grammar; ``warned``: its unknown-keyword warnings were already emitted."""

    def __init__(self, warned: bool) -> None:
        self.warned = warned


def _rules_for(schema: Any, key: _SchemaKey, *, warned: bool, fine: bool = False) -> _SchemaRules:
    from constrained.frontends.json_schema import translate as schema_module

    _, whitespace, unknown_keywords, property_order = key
    (rules, start), messages, complete = _translate(
        schema_module.schema_to_rules, schema, whitespace=whitespace, unknown_keywords=unknown_keywords, fine=fine,
        property_order=property_order,
    )
    if not warned:
        _emit_unknown_keywords(messages, stacklevel=4)
    if complete:
        _remember_schema_rules(key, (rules, start, messages, fine))
    return rules, start, messages, fine


def _compile_schema_dfa(schema: Any, schema_key: _SchemaKey, vocab: Vocabulary, alias_path: str | None
                        ) -> Grammar:
    """`compile_json_schema` through one pattern and its disk alias (``alias_path``, None without a cache);
    `_OneDfaCannot` when one DFA cannot hold it."""
    from constrained.frontends.json_schema.policy import PatternApproximates

    _, whitespace, unknown_keywords, _ = schema_key
    if alias_path is not None:
        loaded = _load_schema(alias_path, os.path.dirname(os.path.dirname(alias_path)), vocab)
        if loaded is not None:
            grammar, messages = loaded
            _remember_schema(schema_key, grammar.pattern, messages)
            _emit_unknown_keywords(messages, stacklevel=4)
            return grammar
    try:
        pattern, messages, complete = _schema_pattern(schema, whitespace, unknown_keywords)
    except (GrammarTooLargeError, PatternApproximates):
        raise _OneDfaCannot(warned=False) from None
    if complete:
        _remember_schema(schema_key, pattern, messages)
    _emit_unknown_keywords(messages, stacklevel=4)
    try:
        grammar = compile_regex(pattern, vocab)
    except GrammarTooLargeError:
        raise _OneDfaCannot(warned=True) from None
    if alias_path is not None and complete:
        alias = {"format": FORMAT, "grammar": grammar.fingerprint, "pattern_sha256": _sha256(pattern),
                 "warnings": list(messages)}  # fmt: skip
        grammar.aliases[os.path.basename(alias_path)] = json.dumps(alias).encode()  # compile_regex keeps it in _live
    return grammar


def cache_directory() -> Path | None:
    """Where grammar entries live (created on demand), or None when ``EMBER_CACHE_DIR=off``."""
    location = _cache_location()
    return None if location is None else location[0]


def clear_memory_cache() -> None:
    """Forget every in-memory grammar, pushdown ones included, and the schema compiler's memos (tests, benchmarks;
    the disk cache is untouched)."""
    from constrained.frontends.json_schema import translate as schema_module

    _memory.clear()
    _rule_sets.clear()
    _schema_patterns.clear()
    _schema_rules.clear()
    schema_module.clear_caches()


# -- memory cache ---------------------------------------------------------------------------------------------------

_memory: dict[tuple[str, bool, str], Grammar] = {}
_SchemaKey = tuple[str, str, str, str]
"""A schema's text, whitespace policy, unknown-keyword policy and property order: what its translation depends on."""
_schema_patterns: dict[_SchemaKey, tuple[str, tuple[str, ...]]] = {}
_SchemaRules = tuple[dict[str, str], str, tuple[str, ...], bool]
"""A schema's rules, start rule, unknown-keyword messages, and whether they are `schema_to_rules`' fine ones."""
_schema_rules: dict[_SchemaKey, _SchemaRules] = {}
"""Schemas that need a pushdown grammar: their rules and unknown-keyword messages."""
_rule_sets: dict[tuple, PushdownGrammar] = {}
"""Compiled rule sets by (rules, start, allow_special, vocabulary)."""
_RULE_SETS_LIMIT = 64
_locks = tuple(threading.Lock() for _ in range(64))
"""Compile locks, striped by key: one grammar is compiled once at a time, and no key (a whole pattern) is kept
alive by its lock. Never nested, so two keys sharing a stripe only wait for each other."""
_saved_counts: dict[str, int] = {}
_live: weakref.WeakSet[Grammar | PushdownGrammar] = weakref.WeakSet()
"""Grammars with something to write at exit (masks computed since a load; a rule set not yet stored)."""
_warned: set[str] = set()


def _compile_lock(key: tuple[str, bool, str]) -> threading.Lock:
    return _locks[hash(key) % len(_locks)]


def _remember(key: tuple[str, bool, str], grammar: Grammar) -> None:
    if len(_memory) >= _MEMORY_LIMIT:
        _memory.pop(next(iter(_memory))).save()  # its pending writes, before nothing may hold it any more
    _memory[key] = grammar
    _live.add(grammar)


def _remember_rules(key: tuple, grammar: PushdownGrammar) -> PushdownGrammar:
    """Keep ``grammar`` under ``key``, or the one another thread kept first (both are the same grammar)."""
    if len(_rule_sets) >= _RULE_SETS_LIMIT and key not in _rule_sets:
        evicted = _rule_sets.pop(next(iter(_rule_sets)), None)
        if evicted is not None:
            evicted.save()
    return _rule_sets.setdefault(key, grammar)


def _remember_schema_rules(key: _SchemaKey, rules: _SchemaRules) -> None:
    if len(_schema_rules) >= _MEMORY_LIMIT and key not in _schema_rules:
        _schema_rules.pop(next(iter(_schema_rules)))
    _schema_rules[key] = rules


def _remember_schema(key: _SchemaKey, pattern: str, messages: tuple[str, ...]) -> None:
    if len(_schema_patterns) >= _MEMORY_LIMIT:
        _schema_patterns.pop(next(iter(_schema_patterns)))
    _schema_patterns[key] = (pattern, messages)


# -- schema translation and its warnings ----------------------------------------------------------------------------

_capture_lock = threading.Lock()


def _schema_pattern(schema: Any, whitespace: str, unknown_keywords: str) -> tuple[str, tuple[str, ...], bool]:
    """(pattern, unknown-keyword messages, complete): ``schema_to_pattern`` with its warnings recorded (see
    `_translate`); a schema one pattern could only approximate raises `PatternApproximates` (the caller compiles
    rules instead), and so does a pattern too large, both without re-emitting its warnings (the rules translation warns them)."""
    from constrained.frontends.json_schema import translate as schema_module

    return _translate(schema_module.schema_to_pattern, schema, whitespace=whitespace,
                      unknown_keywords=unknown_keywords, exact=True)  # fmt: skip


def _translate(translate: Any, schema: Any, **options: Any) -> tuple[Any, tuple[str, ...], bool]:
    """(result, unknown-keyword messages, complete): a schema translation with its warnings recorded.

    Warnings are recorded under "always" (so neither the caller's filters nor the once-per-location registry hide
    one from the cache) and handed back to be emitted by the caller. ``complete`` is False when anything else was
    warned meanwhile (another category, or another thread: `warnings.catch_warnings` is process-wide); those are
    re-emitted as they were, and the result is not cached, so its next compile warns again on its own.
    Errors propagate, after re-emitting whatever was warned before them.
    """
    from constrained.frontends.json_schema import walk  # the module whose frames its UnknownKeywordWarnings name
    from constrained.frontends.json_schema.policy import PatternApproximates

    source = os.path.normcase(os.path.abspath(walk.__file__ or ""))
    caught: list[warnings.WarningMessage] = []
    try:
        with _capture_lock, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = translate(schema, **options)
    except (GrammarTooLargeError, PatternApproximates):
        raise
    except BaseException:
        for record in caught:  # in order, as they would have been warned before the error
            if _is_unknown_keyword(record, source):
                _emit_unknown_keywords([str(record.message)], stacklevel=4)
            else:
                _reemit(record)
        raise
    messages = tuple(str(record.message) for record in caught if _is_unknown_keyword(record, source))
    others = [record for record in caught if not _is_unknown_keyword(record, source)]
    for record in others:
        _reemit(record)
    return result, messages, not others


def _is_unknown_keyword(record: warnings.WarningMessage, source: str) -> bool:
    return record.category is UnknownKeywordWarning and os.path.normcase(os.path.abspath(record.filename)) == source


def _reemit(record: warnings.WarningMessage) -> None:
    warnings.warn_explicit(record.message, record.category, record.filename, record.lineno, source=record.source)


def _emit_unknown_keywords(messages: Sequence[str], stacklevel: int = 3) -> None:
    """Warn each message from the line that called `compile_json_schema` (cold and warm alike)."""
    for message in messages:
        warnings.warn(message, UnknownKeywordWarning, stacklevel=stacklevel)


# -- identities and aliases -----------------------------------------------------------------------------------------


def _package_sources(*packages: Any) -> list[str]:
    """Every Python source of ``packages`` (module objects), sorted."""
    return [str(path) for package in packages for path in sorted(Path(str(package.__file__)).parent.glob("*.py"))]


def _compiler_sources() -> list[str]:
    """Every file that decides which pattern a schema becomes and which DFA a pattern becomes."""
    from constrained import _fsm, _pattern, automata, dialect
    from constrained.dialect import json_lexemes
    from constrained.frontends import json_schema

    files = _package_sources(json_schema, dialect, automata) + [str(_pattern.__file__), str(_fsm.__file__)]
    formats = json_lexemes.FORMAT_DIR  # constrained/grammars/formats/*.regex: the formats' patterns
    files.extend(str(path) for path in sorted(formats.glob("*")) if path.is_file())
    return files


def _index_sources() -> list[str]:
    """Every file that decides what a DFA state's mask is."""
    from constrained import _kernel, index, shortcut, trie

    return [str(module.__file__) for module in (index, shortcut, trie, _kernel)]


@functools.cache
def _compiler_identity() -> str:
    return _digest_files(_compiler_sources())


@functools.cache
def _rules_identity() -> str:
    """The sources that turn rules into a `PushdownGrammar`'s tables: the DFA compiler, pushdown and its kernels."""
    from constrained import _fsm, _pattern, automata, dialect, pushdown_masks, rules

    modules = (_pattern, _fsm, pushdown, pushdown_masks, rules)
    return _digest_files(_package_sources(dialect, automata) + [str(m.__file__) for m in modules] + _index_sources())


@functools.cache
def _index_identity() -> str:
    return _digest_files(_index_sources())


def _digest_files(paths: Sequence[str]) -> str:
    """sha256 over names and bytes; a file that cannot be read gives a per-process identity (no stale reuse)."""
    digest = hashlib.sha256(FORMAT.encode())
    try:
        for path in paths:
            digest.update(b"\0" + os.path.basename(path).encode("utf-8", errors="surrogatepass") + b"\0")
            digest.update(Path(path).read_bytes())
    except OSError:
        digest.update(os.urandom(16))
    return digest.hexdigest()


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


def _grammar_fingerprint(dfa_fingerprint: str, vocab_fingerprint: str) -> str:
    return hashlib.sha256(f"{FORMAT}\0{dfa_fingerprint}\0{vocab_fingerprint}".encode()).hexdigest()


def _pattern_alias(pattern: str, allow_special: bool, vocab: Vocabulary) -> str:
    return _sha256(f"{FORMAT}\0pattern\0{_compiler_identity()}\0{int(allow_special)}\0{vocab.fingerprint}\0{pattern}")


def _schema_alias(key: _SchemaKey, vocab: Vocabulary) -> str:
    canonical, whitespace, unknown_keywords, property_order = key
    head = (f"{FORMAT}\0schema\0{_compiler_identity()}\0{whitespace}\0{unknown_keywords}\0{property_order}\0"
            f"{vocab.fingerprint}\0")
    return _sha256(head + canonical)


_HEX64 = re.compile(r"[0-9a-f]{64}")


def _cache_location() -> tuple[Path, str] | None:
    """`cache_directory` and its text, worked out once per environment (every warm load asks)."""
    configured = os.environ.get("EMBER_CACHE_DIR")
    if configured:
        return _location_for(configured, None, None)
    return _location_for(configured, os.environ.get("XDG_CACHE_HOME"), os.path.expanduser("~"))


@functools.lru_cache(maxsize=16)
def _location_for(configured: str | None, xdg: str | None, home: str | None) -> tuple[Path, str] | None:
    if configured is not None and configured.strip().lower() == "off":
        return None
    if configured:
        directory = Path(configured).expanduser()
    else:
        directory = Path(xdg or os.path.join(home or "~", ".cache")) / "ember" / "index"
    return directory, str(directory)


def _rules_entry(root: str, fingerprint: str) -> str:
    """The entry file of a compiled rule set (its `PushdownGrammar.fingerprint`) under the cache directory: keyed
    with the rules compiler's identity too, so a changed compiler never reads an old entry."""
    key = _sha256("\0".join((grammar_file.RULES_FORMAT, _rules_identity(), fingerprint)))
    return os.path.join(root, f"{key}.rules")


def _rules_entry_path(rules: Mapping[str, str], start: str, vocab: Vocabulary, allow_special: bool) -> str | None:
    location = _cache_location()
    if location is None:
        return None
    return _rules_entry(location[1], RuleSet(rules, start).fingerprint(vocab.fingerprint, allow_special=allow_special))


def _schema_alias_path(key: _SchemaKey, vocab: Vocabulary) -> str | None:
    """A schema's alias path without its suffix (``.json``: its one-DFA grammar; ``.rules.json``: its rule set),
    or None without a disk cache."""
    location = _cache_location()
    if location is None:
        return None
    return os.path.join(location[1], "alias", _schema_alias(key, vocab))


def _entry_path(root: str, fingerprint: str) -> str:
    """The entry file of a grammar under the cache directory ``root`` (text: the warm path builds no `Path`)."""
    return os.path.join(root, f"{fingerprint}.grammar")


# -- cold compile and loads -----------------------------------------------------------------------------------------


def _compile(pattern: str, allow_special: bool, vocab: Vocabulary) -> Grammar:
    dfa = fsm.compile_dfa(pattern, allow_special=allow_special)
    index = TokenIndex(dfa, vocab, table_checked=True)  # the compiler's own canonical table: in range by construction
    index.state_mask(dfa.initial)
    grammar = Grammar(
        pattern=pattern, allow_special=allow_special, dfa=dfa, vocabulary=vocab, index=index,
        fingerprint=_grammar_fingerprint(dfa.fingerprint, vocab.fingerprint),
    )  # fmt: skip
    grammar.aliases[f"{_pattern_alias(pattern, allow_special, vocab)}.txt"] = grammar.fingerprint.encode()
    return grammar


def _load(pattern: str, allow_special: bool, vocab: Vocabulary) -> Grammar | None:
    """The cached grammar for this pattern, or None (absent, corrupt or mismatched entries count as absent)."""
    location = _cache_location()
    if location is None:
        return None
    root = location[1]
    try:
        fingerprint = grammar_file.read_small(
            os.path.join(root, "alias", f"{_pattern_alias(pattern, allow_special, vocab)}.txt")
        )
    except OSError:
        return None
    return _load_entry(root, fingerprint, vocab, allow_special, pattern=pattern)


def _load_schema(alias_path: str, root: str, vocab: Vocabulary) -> tuple[Grammar, tuple[str, ...]] | None:
    """The cached grammar and unknown-keyword messages of a schema alias, or None (absent or not trustworthy)."""
    try:
        alias = json.loads(grammar_file.read_small(alias_path))
        fingerprint, pattern_sha256, messages = alias["grammar"], alias["pattern_sha256"], alias["warnings"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if alias.get("format") != FORMAT or not isinstance(pattern_sha256, str) or not isinstance(messages, list):
        return None
    if not all(isinstance(message, str) for message in messages):
        return None
    grammar = _load_entry(root, fingerprint, vocab, False, pattern_sha256=pattern_sha256)
    if grammar is None:
        return None
    key = (grammar.pattern, False, vocab.fingerprint)
    with _compile_lock(key):
        existing = _memory.get(key)
        if existing is not None and existing.fingerprint == grammar.fingerprint:
            grammar = existing
        else:
            _remember(key, grammar)
    return grammar, tuple(messages)


def _load_entry(
    root: str,
    fingerprint: Any,
    vocab: Vocabulary,
    allow_special: bool,
    *,
    pattern: str | None = None,
    pattern_sha256: str | None = None,
) -> Grammar | None:
    """The grammar stored under ``fingerprint`` if it is intact and is the one asked for (pattern or its hash)."""
    if isinstance(fingerprint, bytes):
        fingerprint = fingerprint.decode("latin-1").strip()
    if not isinstance(fingerprint, str) or not _HEX64.fullmatch(fingerprint):
        return None  # never let a corrupt alias name a path
    path = _entry_path(root, fingerprint)
    entry = grammar_file.open_entry(path, vocab, _index_identity(), functools.partial(_saved_counts.pop, path, None))
    if entry is None or entry.allow_special != allow_special:
        return None
    if (pattern is not None and entry.pattern != pattern) or (
        pattern_sha256 is not None and entry.pattern_sha256 != pattern_sha256
    ):
        return None
    if _grammar_fingerprint(entry.dfa.fingerprint, vocab.fingerprint) != fingerprint:
        return None
    try:
        index = TokenIndex(entry.dfa, vocab, masks=entry.masks, preflight=False, table_checked=True)
    except (ValueError, IndexError, TypeError, KeyError):
        return None  # e.g. a special the entry names is missing: recompile (a real incompatibility raises there)
    grammar = Grammar(
        pattern=entry.pattern, allow_special=allow_special, dfa=entry.dfa, vocabulary=vocab, index=index,
        fingerprint=fingerprint,
    )  # fmt: skip
    _saved_counts[path] = entry.n_masks
    return grammar


def _load_rules(path: str, vocab: Vocabulary, expected: tuple[Mapping[str, str], str, bool] | None
                ) -> PushdownGrammar | None:
    """The rule set stored at ``path`` (for ``expected`` (rules, start, allow_special), or whichever rules the entry
    holds), or None: absent, corrupt or another grammar's entries count as absent and are recompiled."""
    stored = grammar_file.open_arrays(path)
    if stored is None:
        return None
    header, _ = stored
    try:
        rules, start, allow_special = expected or (dict(header["rules"]), header["start"], header["allow_special"])
        return pushdown.PushdownGrammar(rules, start, vocab, allow_special=bool(allow_special), stored=stored)
    except (ValueError, TypeError, KeyError, IndexError):  # GrammarError is a ValueError
        return None


class _RulesSaver:
    """A rule set's pending writes: its entry (``entry``; None when it is on disk already) and the schema aliases
    that name it. Run by `PushdownGrammar.save`, at exit and when the rule set leaves the memory cache, not at its
    compile: a cold compile pays no encoding and no write."""

    def __init__(self, entry: str | None) -> None:
        self.entry = entry
        self.aliases: dict[str, bytes] = {}

    def __call__(self, grammar: PushdownGrammar) -> None:
        if self.entry is not None:
            if not _write_cache_file(self.entry, grammar_file.encode_arrays(*grammar.stored(), runs=("by_class",))):
                return
            self.entry = None
        for path, text in list(self.aliases.items()):  # after the entry they name
            if _write_cache_file(path, [text]):
                del self.aliases[path]


def _load_schema_rules(
    alias_path: str, schema_key: _SchemaKey, vocab: Vocabulary
) -> PushdownGrammar | None:
    """The rule set a schema's rules alias names, remembered as if just translated, its unknown-keyword warnings
    emitted from the caller's line; or None (absent or not trustworthy: the schema is compiled afresh)."""
    try:
        alias = json.loads(grammar_file.read_small(alias_path))
        fingerprint, messages, fine = alias["rules"], alias["warnings"], alias["fine"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if alias.get("format") != FORMAT or not isinstance(fingerprint, str) or not _HEX64.fullmatch(fingerprint):
        return None
    if not isinstance(messages, list) or not all(isinstance(m, str) for m in messages) or not isinstance(fine, bool):
        return None
    grammar = _load_rules(_rules_entry(os.path.dirname(os.path.dirname(alias_path)), fingerprint), vocab, None)
    if grammar is None or grammar.fingerprint != fingerprint or grammar.allow_special:
        return None
    _remember_schema_rules(schema_key, (grammar.rules, grammar.start, tuple(messages), fine))
    grammar = _remember_rules((tuple(grammar.rules.items()), grammar.start, False, vocab.fingerprint), grammar)
    _emit_unknown_keywords(messages, stacklevel=4)
    return grammar


def _write_cache_file(path: str, parts: Sequence[Any]) -> bool:
    """Write one cache file atomically; on failure warn once per directory (the cache is an optimisation; the
    error text names a fresh temporary file each time, so it cannot be the once-only key)."""
    try:
        grammar_file.atomic_write(path, parts)
    except OSError as error:
        directory = os.path.dirname(path)
        if directory not in _warned:
            _warned.add(directory)
            warnings.warn(f"ember: cannot write the grammar cache at {directory}: {error}", RuntimeWarning,
                          stacklevel=3)  # the caller of whatever wrote
        return False
    return True


@atexit.register
def _save_live_grammars() -> None:
    for grammar in list(_live):
        try:
            grammar.save()
        except Exception:  # noqa: BLE001 - never fail interpreter exit over a cache write
            pass
