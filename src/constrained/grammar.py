"""Grammar: an immutable DFA + token index over one vocabulary, compiled once and cached in memory and on disk.

Owns compilation entry points (`compile_regex`, `compile_json_schema`) and both caches; refuses nothing the
compilers accept (their errors propagate: `RegexSyntaxError`, `UnsupportedSchemaError`, `GrammarTooLargeError`,
`IncompatibleVocabularyError`).

    compile_json_schema: schema ──► memory ──hit──► (pattern, warnings) ──► compile_regex(pattern)
                                      │ miss
                                      ▼
                             schema alias  alias/<sha256(schema text, whitespace, unknown_keywords, vocab,
                                      │                 compiler identity)>.json
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
                        fsm.compile_dfa ──► TokenIndex(dfa, vocab) ──► Grammar ──► saved (entry + aliases)

A warm process pays no schema translation, no DFA compile and no index walk for a grammar it has seen: masks
computed in a process are written back by `Grammar.precompute`, `Grammar.save` and at interpreter exit. The
compiler identity (sha256 of the sources that turn a schema into a pattern and a pattern into a DFA) is in
both alias keys, so a changed compiler never reuses an old translation. `UnknownKeywordWarning`s of a schema
are stored with its alias and re-emitted on every hit (memory or disk), from the caller's line, exactly as the
cold path emits them: a cache hit never makes a warning silent. Errors are never cached.

Entry format (one file, little-endian raw arrays, no compression: one vectored write to save)::

    preamble  magic, version, header length, file size, body end, crc32 of the body
    body      JSON header (fingerprints, shapes, identities) + pattern (UTF-8) + the DFA: run-length-encoded
              transitions (~10x smaller than the table), accepting, distance + the mask directory (a row per
              stored state: counts, encodings, pool offset, crc32)
    pool      per-state masks: allowed ids (or, when most ids are allowed, the ids that are not) and next
              states (or their runs)

A load reads the preamble and the body (two reads) and validates all of it: the body crc32, every header field
and shape, and the DFA arrays (a few vectorized range checks); transitions are expanded with one ``np.repeat``.
The pool stays on disk: a state's mask is read (from the very file loaded: same inode, size and mtime), checked
(its crc32, ids strictly ascending in range, next states in range) and decoded on first access only
(`_StoredMasks`), so a precomputed grammar of thousands of states loads as fast as a fresh one. Anything
truncated, corrupt or mismatched counts as absent: the grammar (or that one state) is recomputed, never
trusted. Writes are atomic (temp file + rename), so concurrent processes never read a torn entry. Cache directory:
``$EMBER_CACHE_DIR`` (``off`` disables the disk cache), else ``$XDG_CACHE_HOME/ember/index`` or
``~/.cache/ember/index``.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import itertools
import json
import os
import re
import struct
import threading
import warnings
import weakref
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from constrained import fsm
from constrained.errors import UnknownKeywordWarning
from constrained.fsm import DFA
from constrained.index import TERMINAL, TokenIndex
from constrained.matcher import Matcher
from constrained.vocabulary import Vocabulary

__all__ = ["Grammar", "compile_regex", "compile_json_schema", "cache_directory", "clear_memory_cache"]

_FORMAT = "ember.grammar.v3"
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

    def matcher(self, max_tokens: int | None = None) -> Matcher:
        """A fresh cursor at the start of the grammar.

        Raises:
            BudgetTooSmallError: ``max_tokens`` is below the tokens the shortest document needs.
        """
        return Matcher(self, max_tokens)

    def precompute(self) -> None:
        """Compute every state's mask now and persist them (e.g. ahead of serving)."""
        self.index.precompute()
        self.save()

    def save(self) -> Path | None:
        """Write the DFA and every mask computed so far to the disk cache; the path, or None if disabled."""
        directory = cache_directory()
        if directory is None:
            return None
        path = _entry_path(directory, self.fingerprint)
        if _saved_counts.get(path) == len(self.index.computed_states) and path.exists():
            return path  # counted without decoding a stored mask
        for _ in range(len(self.index.computed_states) + 1):
            try:
                masks = self.index.export_masks()
                break
            except KeyError:  # a stored state failed its check on this first read: now dropped, export again
                continue
        else:
            return None
        try:
            _atomic_write(path, _encode_entry(self, masks))
        except OSError as error:
            _warn_once(f"ember: cannot write the grammar cache at {directory}: {error}")
            return None
        _saved_counts[path] = len(masks)
        return path

    def __repr__(self) -> str:
        return (
            f"Grammar(fingerprint={self.fingerprint[:12]}…, n_states={self.dfa.n_states}, "
            f"vocabulary={self.vocabulary.name or '?'}, pattern={self.pattern[:60]!r})"
        )


# -- public compilers -----------------------------------------------------------------------------------------------


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


def compile_json_schema(
    schema: dict[str, Any] | str,
    vocab: Vocabulary,
    whitespace: Literal["compact", "flexible"] = "compact",
    *,
    unknown_keywords: Literal["warn", "error"] = "warn",
) -> Grammar:
    """Compile a JSON Schema (dict or JSON text) to a grammar over ``vocab``.

    ``unknown_keywords``: keys that are no JSON Schema keyword are warned about and ignored ("warn") or refused
    ("error"); see `constrained.schema.schema_to_pattern`. The warnings are emitted on every call, cached or not.

    Raises:
        UnsupportedSchemaError, InvalidSchemaError: from the schema compiler.
        IncompatibleVocabularyError: the vocabulary cannot spell the grammar.
    """
    canonical = schema if isinstance(schema, str) else json.dumps(schema, sort_keys=False, separators=(",", ":"))
    schema_key = (canonical, whitespace, unknown_keywords)
    remembered = _schema_patterns.get(schema_key)
    if remembered is not None:
        pattern, messages = remembered
        _emit_unknown_keywords(messages)
        return compile_regex(pattern, vocab)
    directory = cache_directory()
    alias_path = None
    if directory is not None:
        alias_path = directory / "alias" / f"{_schema_alias(canonical, whitespace, unknown_keywords, vocab)}.json"
        loaded = _load_schema(alias_path, directory, vocab)
        if loaded is not None:
            grammar, messages = loaded
            _remember_schema(schema_key, grammar.pattern, messages)
            _emit_unknown_keywords(messages)
            return grammar
    pattern, messages, complete = _schema_pattern(schema, whitespace, unknown_keywords)
    if complete:
        _remember_schema(schema_key, pattern, messages)
    _emit_unknown_keywords(messages)
    grammar = compile_regex(pattern, vocab)
    if alias_path is not None and complete and grammar.save() is not None:
        alias = {"format": _FORMAT, "grammar": grammar.fingerprint, "pattern_sha256": _sha256(pattern),
                 "warnings": list(messages)}  # fmt: skip
        try:
            _atomic_write(alias_path, [json.dumps(alias).encode()])
        except OSError as error:
            _warn_once(f"ember: cannot write the grammar cache at {alias_path.parent}: {error}")
    return grammar


def cache_directory() -> Path | None:
    """Where grammar entries live (created on demand), or None when ``EMBER_CACHE_DIR=off``."""
    configured = os.environ.get("EMBER_CACHE_DIR")
    if configured is not None and configured.strip().lower() == "off":
        return None
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ember" / "index"


def clear_memory_cache() -> None:
    """Forget every in-memory grammar (tests; the disk cache is untouched)."""
    _memory.clear()
    _schema_patterns.clear()


# -- memory cache ---------------------------------------------------------------------------------------------------

_memory: dict[tuple[str, bool, str], Grammar] = {}
_schema_patterns: dict[tuple[str, str, str], tuple[str, tuple[str, ...]]] = {}
_locks: dict[tuple[str, bool, str], threading.Lock] = {}
_locks_guard = threading.Lock()
_saved_counts: dict[Path, int] = {}
_live: weakref.WeakSet[Grammar] = weakref.WeakSet()
_warned: set[str] = set()


def _compile_lock(key: tuple[str, bool, str]) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


def _remember(key: tuple[str, bool, str], grammar: Grammar) -> None:
    if len(_memory) >= _MEMORY_LIMIT:
        _memory.pop(next(iter(_memory)))
    _memory[key] = grammar
    _live.add(grammar)


def _remember_schema(key: tuple[str, str, str], pattern: str, messages: tuple[str, ...]) -> None:
    if len(_schema_patterns) >= _MEMORY_LIMIT:
        _schema_patterns.pop(next(iter(_schema_patterns)))
    _schema_patterns[key] = (pattern, messages)


# -- schema translation and its warnings ----------------------------------------------------------------------------

_capture_lock = threading.Lock()


def _schema_pattern(schema: Any, whitespace: str, unknown_keywords: str) -> tuple[str, tuple[str, ...], bool]:
    """(pattern, unknown-keyword messages, complete): ``schema_to_pattern`` with its warnings recorded.

    Warnings are recorded under "always" (so neither the caller's filters nor the once-per-location registry hide
    one from the cache) and handed back to be emitted by the caller. ``complete`` is False when anything else was
    warned meanwhile (another category, or another thread: `warnings.catch_warnings` is process-wide); those are
    re-emitted as they were, and the result is not cached, so its next compile warns again on its own.
    Errors propagate, after re-emitting whatever was warned before them.
    """
    from constrained import schema as schema_module

    source = os.path.normcase(os.path.abspath(schema_module.__file__ or ""))
    caught: list[warnings.WarningMessage] = []
    try:
        with _capture_lock, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pattern = schema_module.schema_to_pattern(schema, whitespace=whitespace, unknown_keywords=unknown_keywords)
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
    return pattern, messages, not others


def _is_unknown_keyword(record: warnings.WarningMessage, source: str) -> bool:
    return record.category is UnknownKeywordWarning and os.path.normcase(os.path.abspath(record.filename)) == source


def _reemit(record: warnings.WarningMessage) -> None:
    warnings.warn_explicit(record.message, record.category, record.filename, record.lineno, source=record.source)


def _emit_unknown_keywords(messages: Sequence[str], stacklevel: int = 3) -> None:
    """Warn each message from the line that called `compile_json_schema` (cold and warm alike)."""
    for message in messages:
        warnings.warn(message, UnknownKeywordWarning, stacklevel=stacklevel)


# -- identities and aliases -----------------------------------------------------------------------------------------


def _compiler_sources() -> list[str]:
    """Every file that decides which pattern a schema becomes and which DFA a pattern becomes."""
    from constrained import _fsm, regex, schema

    files = [str(module.__file__) for module in (schema, regex, fsm, _fsm)]
    formats = getattr(schema, "_FORMAT_DIR", None)  # grammars/formats/*.regex: the string formats' patterns
    if formats is not None:
        files.extend(str(path) for path in sorted(Path(formats).glob("*")) if path.is_file())
    return files


def _index_sources() -> list[str]:
    """Every file that decides what a DFA state's mask is."""
    from constrained import _kernel, index

    return [str(index.__file__), str(_kernel.__file__)]


@functools.cache
def _compiler_identity() -> str:
    return _digest_files(_compiler_sources())


@functools.cache
def _index_identity() -> str:
    return _digest_files(_index_sources())


def _digest_files(paths: Sequence[str]) -> str:
    """sha256 over names and bytes; a file that cannot be read gives a per-process identity (no stale reuse)."""
    digest = hashlib.sha256(_FORMAT.encode())
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
    return hashlib.sha256(f"{_FORMAT}\0{dfa_fingerprint}\0{vocab_fingerprint}".encode()).hexdigest()


def _pattern_alias(pattern: str, allow_special: bool, vocab: Vocabulary) -> str:
    return _sha256(f"{_FORMAT}\0pattern\0{_compiler_identity()}\0{int(allow_special)}\0{vocab.fingerprint}\0{pattern}")


def _schema_alias(canonical: str, whitespace: str, unknown_keywords: str, vocab: Vocabulary) -> str:
    head = f"{_FORMAT}\0schema\0{_compiler_identity()}\0{whitespace}\0{unknown_keywords}\0{vocab.fingerprint}\0"
    return _sha256(head + canonical)


_HEX64 = re.compile(r"[0-9a-f]{64}")


def _entry_path(directory: Path, fingerprint: str) -> Path:
    return directory / f"{fingerprint}.grammar"


# -- cold compile and loads -----------------------------------------------------------------------------------------


def _compile(pattern: str, allow_special: bool, vocab: Vocabulary) -> Grammar:
    dfa = fsm.compile_dfa(pattern, allow_special=allow_special)
    index = TokenIndex(dfa, vocab)
    index.state_mask(dfa.initial)
    grammar = Grammar(
        pattern=pattern, allow_special=allow_special, dfa=dfa, vocabulary=vocab, index=index,
        fingerprint=_grammar_fingerprint(dfa.fingerprint, vocab.fingerprint),
    )  # fmt: skip
    path = grammar.save()
    if path is not None:
        alias_path = path.parent / "alias" / f"{_pattern_alias(pattern, allow_special, vocab)}.txt"
        try:
            _atomic_write(alias_path, [grammar.fingerprint.encode()])
        except OSError as error:
            _warn_once(f"ember: cannot write the grammar cache at {alias_path.parent}: {error}")
    return grammar


def _load(pattern: str, allow_special: bool, vocab: Vocabulary) -> Grammar | None:
    """The cached grammar for this pattern, or None (absent, corrupt or mismatched entries count as absent)."""
    directory = cache_directory()
    if directory is None:
        return None
    try:
        fingerprint = _read_small(directory / "alias" / f"{_pattern_alias(pattern, allow_special, vocab)}.txt")
    except OSError:
        return None
    return _load_entry(directory, fingerprint, vocab, allow_special, pattern=pattern)


def _load_schema(alias_path: Path, directory: Path, vocab: Vocabulary) -> tuple[Grammar, tuple[str, ...]] | None:
    """The cached grammar and unknown-keyword messages of a schema alias, or None (absent or not trustworthy)."""
    try:
        alias = json.loads(_read_small(alias_path))
        fingerprint, pattern_sha256, messages = alias["grammar"], alias["pattern_sha256"], alias["warnings"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if alias.get("format") != _FORMAT or not isinstance(pattern_sha256, str) or not isinstance(messages, list):
        return None
    if not all(isinstance(message, str) for message in messages):
        return None
    grammar = _load_entry(directory, fingerprint, vocab, False, pattern_sha256=pattern_sha256)
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
    directory: Path,
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
    path = _entry_path(directory, fingerprint)
    try:
        entry = _open_entry(path, vocab)
    except (OSError, ValueError, TypeError, KeyError, IndexError, OverflowError, struct.error):
        return None
    if entry is None or entry.allow_special != allow_special:
        return None
    if (pattern is not None and entry.pattern != pattern) or (
        pattern_sha256 is not None and entry.pattern_sha256 != pattern_sha256
    ):
        return None
    if _grammar_fingerprint(entry.dfa.fingerprint, vocab.fingerprint) != fingerprint:
        return None
    try:
        index = TokenIndex(entry.dfa, vocab, masks=entry.masks, preflight=False)
    except (ValueError, IndexError, TypeError, KeyError):
        return None  # e.g. the kernel refused the table: recompile (a real incompatibility raises again there)
    grammar = Grammar(
        pattern=entry.pattern, allow_special=allow_special, dfa=entry.dfa, vocabulary=vocab, index=index,
        fingerprint=fingerprint,
    )  # fmt: skip
    _saved_counts[path] = len(entry.masks)
    return grammar


# -- entry format ---------------------------------------------------------------------------------------------------

_MAGIC = b"EMBERGRM"
_VERSION = 3
_PREAMBLE = struct.Struct("<8sIIQQII")
"""magic, version, header length, file size, body end (= pool start), crc32 of bytes [preamble end, body end), 0."""
_ALIGN = 8
_I32 = np.dtype("<i4")
_I64 = np.dtype("<i8")
_U8 = np.dtype("u1")
_DIRECTORY_COLUMNS = 7
"""state, allowed count, kinds, pool offset, stored id count, stored next-state count, crc32 (int64 each)."""
_IDS_COMPLEMENT = 1
"""Kind bit: the state stores the ids it does not allow (cheaper when it allows most of the vocabulary)."""
_NEXT_RUNS = 2
"""Kind bit: the state stores its next states as run values then run lengths (tokens mostly lead one place)."""
_RUNS_MIN = 32
"""Fewer allowed tokens than this: next states are stored as they are (runs cannot save much)."""


@dataclass(frozen=True)
class _Entry:
    pattern: str
    pattern_sha256: str
    allow_special: bool
    dfa: DFA
    masks: _StoredMasks


def _aligned(offset: int) -> int:
    return -(-offset // _ALIGN) * _ALIGN


def _runs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run-length encoding of a 1-D array: (value of each run, int32 length of each run)."""
    if values.shape[0] == 0:
        return values[:0], np.zeros(0, dtype=np.int32)
    starts = np.flatnonzero(values[1:] != values[:-1]) + 1
    bounds = np.concatenate(([0], starts, [values.shape[0]]))
    return values[bounds[:-1]], np.diff(bounds).astype(np.int32)


def _encode_entry(grammar: Grammar, masks: Mapping[int, tuple[np.ndarray, np.ndarray]]) -> list[Any]:
    """The entry file as a list of byte buffers (written with one vectored write)."""
    dfa, vocab_size = grammar.dfa, len(grammar.vocabulary)
    table = np.ascontiguousarray(dfa.transitions, dtype=_I32)
    n_states, width = table.shape
    if table.size >= 2**31:
        raise OSError(f"a DFA of {table.size} transitions is too large for the cache format")
    run_values, run_lengths = _runs(table.reshape(-1))
    directory, pool = _encode_masks(masks, vocab_size)
    pattern = grammar.pattern.encode("utf-8", errors="surrogatepass")
    header = {
        "format": _FORMAT,
        "pattern_sha256": hashlib.sha256(pattern).hexdigest(),
        "allow_special": grammar.allow_special,
        "vocab_fingerprint": grammar.vocabulary.fingerprint,
        "vocab_size": vocab_size,
        "index_identity": _index_identity(),
        "dfa_fingerprint": dfa.fingerprint,
        "special_names": list(dfa.special_names),
        "n_states": n_states,
        "n_symbols": width,
        "initial": int(dfa.initial),
        "pattern_bytes": len(pattern),
        "runs": int(run_values.shape[0]),
        "masks": int(directory.shape[0]),
        "pool": int(pool.shape[0]),
    }
    header_bytes = json.dumps(header).encode("ascii")
    body: list[Any] = [header_bytes]
    offset = _PREAMBLE.size + len(header_bytes)
    sections = (
        np.frombuffer(pattern, dtype=_U8),
        run_values.astype(_I32, copy=False),
        run_lengths.astype(_I32, copy=False),
        np.ascontiguousarray(dfa.accepting, dtype=_U8),
        np.ascontiguousarray(dfa.distance, dtype=_I32),
        directory.astype(_I64, copy=False).reshape(-1),
    )
    for section in sections:
        body.append(bytes(_aligned(offset) - offset))
        offset = _aligned(offset) + section.nbytes
        body.append(section)
    body.append(bytes(_aligned(offset) - offset))
    body_end = _aligned(offset)
    crc = 0
    for part in body:
        crc = zlib.crc32(part, crc)
    pool = pool.astype(_I32, copy=False)
    preamble = _PREAMBLE.pack(_MAGIC, _VERSION, len(header_bytes), body_end + pool.nbytes, body_end, crc, 0)
    return [preamble, *body, pool]


def _encode_masks(masks: Mapping[int, tuple[np.ndarray, np.ndarray]], vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(directory int64 [n, 7], pool int32): each state's ids (or their complement) and next states (or runs)."""
    rows: list[tuple[int, ...]] = []
    chunks: list[np.ndarray] = []
    offset = 0
    for state in sorted(masks):
        ids, next_states = masks[state]
        ids = np.asarray(ids, dtype=np.int32)
        next_states = np.asarray(next_states, dtype=np.int32)
        n_allowed = int(ids.shape[0])
        kinds = 0
        stored_ids = ids
        if n_allowed > vocab_size - n_allowed:
            absent = np.ones(vocab_size, dtype=bool)
            absent[ids] = False
            stored_ids = np.flatnonzero(absent).astype(np.int32)
            kinds |= _IDS_COMPLEMENT
        stored_next = next_states
        if n_allowed >= _RUNS_MIN:
            values, lengths = _runs(next_states)
            if 2 * values.shape[0] < n_allowed:
                stored_next = np.concatenate((values, lengths))
                kinds |= _NEXT_RUNS
        stored_ids = np.ascontiguousarray(stored_ids, dtype=_I32)
        stored_next = np.ascontiguousarray(stored_next, dtype=_I32)
        crc = zlib.crc32(stored_next, zlib.crc32(stored_ids))
        rows.append((int(state), n_allowed, kinds, offset, stored_ids.shape[0], stored_next.shape[0], crc))
        chunks += (stored_ids, stored_next)
        offset += stored_ids.shape[0] + stored_next.shape[0]
    directory = np.asarray(rows, dtype=np.int64).reshape(len(rows), _DIRECTORY_COLUMNS)
    pool = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32)
    return directory, pool


def _open_entry(path: Path, vocab: Vocabulary) -> _Entry | None:
    """Read and validate the preamble and body (two reads); the pool stays on disk until a state is asked for."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    try:
        stat = os.fstat(fd)
        preamble = _pread(fd, _PREAMBLE.size, 0)
        if len(preamble) != _PREAMBLE.size:
            return None
        magic, version, header_length, size, body_end, crc, _ = _PREAMBLE.unpack(preamble)
        if magic != _MAGIC or version != _VERSION or size != stat.st_size:
            return None
        if not _PREAMBLE.size + header_length <= body_end <= size or (size - body_end) % 4:
            return None
        buffer = np.empty(body_end, dtype=np.uint8)
        buffer[: _PREAMBLE.size] = np.frombuffer(preamble, dtype=np.uint8)
        if _pread_into(fd, memoryview(buffer)[_PREAMBLE.size :], _PREAMBLE.size) != body_end - _PREAMBLE.size:
            return None
    finally:
        os.close(fd)
    buffer.flags.writeable = False
    if zlib.crc32(buffer[_PREAMBLE.size :]) != crc:
        return None
    pool = _PoolFile(path, (stat.st_dev, stat.st_ino, size, stat.st_mtime_ns), body_end, (size - body_end) // 4)
    return _decode_body(buffer, header_length, vocab, pool)


def _decode_body(buffer: np.ndarray, header_length: int, vocab: Vocabulary, pool: _PoolFile) -> _Entry | None:
    """Parse and validate the header and DFA sections of a crc-checked body (masks: on first access)."""
    header = json.loads(buffer[_PREAMBLE.size : _PREAMBLE.size + header_length].tobytes())
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        return None
    if header.get("vocab_fingerprint") != vocab.fingerprint or header.get("vocab_size") != len(vocab):
        return None
    if header.get("index_identity") != _index_identity():
        return None
    pattern_sha256, dfa_fingerprint, names = (
        header["pattern_sha256"],
        header["dfa_fingerprint"],
        header["special_names"],
    )
    n_states, width, initial, n_masks = header["n_states"], header["n_symbols"], header["initial"], header["masks"]
    n_pattern, n_runs, allow_special = header["pattern_bytes"], header["runs"], header["allow_special"]
    counts = (n_states, width, initial, n_masks, n_pattern, n_runs, header["pool"])
    if not all(type(value) is int and value >= 0 for value in counts) or type(allow_special) is not bool:
        return None
    if not isinstance(names, list) or not all(isinstance(v, str) for v in (pattern_sha256, dfa_fingerprint, *names)):
        return None
    if not 0 <= initial < n_states or width != 256 + len(names) or n_runs == 0 or header["pool"] != pool.n_words:
        return None
    offset = _PREAMBLE.size + header_length
    sections = []
    for count, dtype in ((n_pattern, _U8), (n_runs, _I32), (n_runs, _I32), (n_states, _U8), (n_states, _I32),
                         (n_masks * _DIRECTORY_COLUMNS, _I64)):  # fmt: skip
        offset = _aligned(offset)
        end = offset + count * dtype.itemsize
        if end > buffer.shape[0]:
            return None
        sections.append(_view(buffer, offset, count, dtype))
        offset = end
    if _aligned(offset) != buffer.shape[0]:
        return None
    pattern_utf8, run_values, run_lengths, accepting, distance, directory = sections
    if run_values.min() < -1 or run_values.max() >= n_states:
        return None
    if int(run_lengths.sum(dtype=np.int64)) != n_states * width:
        return None  # a negative length makes np.repeat raise: also refused
    if distance.min() < 0 or np.any(accepting != (distance == 0)):
        return None  # accepting is exactly 0/1, and 1 where the distance to acceptance is 0
    transitions = np.repeat(run_values, run_lengths).reshape(n_states, width)
    accepting = accepting.view(np.bool_)
    for array in (transitions, accepting, distance):
        array.flags.writeable = False
    dfa = DFA(
        transitions=transitions, accepting=accepting, initial=initial, special_names=tuple(names), distance=distance,
        fingerprint=dfa_fingerprint,
    )  # fmt: skip
    masks = _StoredMasks(directory.reshape(n_masks, _DIRECTORY_COLUMNS), pool, n_states, len(vocab))
    pattern = pattern_utf8.tobytes().decode("utf-8", errors="surrogatepass")
    return _Entry(pattern, pattern_sha256, allow_special, dfa, masks)


def _view(buffer: np.ndarray, offset: int, count: int, dtype: np.dtype) -> np.ndarray:
    """``count`` items of ``dtype`` at byte ``offset`` of the file buffer, as native-order values (no copy on LE)."""
    view = buffer[offset : offset + count * dtype.itemsize].view(dtype)
    return view if dtype.isnative else view.astype(dtype.newbyteorder("="))


class _StoredMasks(Mapping[int, tuple[np.ndarray, np.ndarray]]):
    """The masks of a loaded entry: state → (ascending allowed ids, next states), decoded on first access.

    Loading checks only that the directory's states ascend within the DFA (two vectorized comparisons); each
    state is checked when first read: its directory row (kinds, counts, pool bounds), its crc32, ids strictly
    ascending in [0, vocab), next states in [0, n_states) or `TERMINAL`. A state that fails is dropped (``get``
    answers None, so the index recomputes it) and the entry is marked for rewriting by the next save. Once the
    file is gone or replaced (another process saved more masks), every state not yet read is dropped at once.
    """

    def __init__(self, directory: np.ndarray, pool: _PoolFile, n_states: int, vocab_size: int) -> None:
        states = directory[:, 0]
        if states.shape[0] and (states[0] < 0 or states[-1] >= n_states or np.any(states[1:] <= states[:-1])):
            raise ValueError("corrupt mask directory")
        self._directory = directory
        self._states = states
        self._pool = pool
        self._n_states = n_states
        self._vocab_size = vocab_size
        self._dropped: set[int] = set()

    def __len__(self) -> int:
        return 0 if self._pool.gone else int(self._states.shape[0]) - len(self._dropped)

    def __iter__(self) -> Iterator[int]:
        states = [] if self._pool.gone else self._states.tolist()
        return (state for state in states if state not in self._dropped)

    def __contains__(self, state: object) -> bool:
        return self._row_of(state) >= 0

    def __getitem__(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        row = self._row_of(state)
        if row < 0:
            raise KeyError(state)
        decoded = self._decode(row)
        if decoded is None:
            self._dropped.add(int(state))
            _saved_counts.pop(self._pool.path, None)
            raise KeyError(state)
        return decoded

    def _row_of(self, state: object) -> int:
        if not isinstance(state, (int, np.integer)) or state in self._dropped or self._pool.gone:
            return -1
        row = int(np.searchsorted(self._states, state))
        return row if row < self._states.shape[0] and self._states[row] == state else -1

    def _decode(self, row: int) -> tuple[np.ndarray, np.ndarray] | None:
        _, n_allowed, kinds, offset, n_ids, n_next, crc = self._directory[row].tolist()
        vocab_size, n_states = self._vocab_size, self._n_states
        complement, runs = bool(kinds & _IDS_COMPLEMENT), bool(kinds & _NEXT_RUNS)
        if not 0 <= n_allowed <= vocab_size or kinds & ~(_IDS_COMPLEMENT | _NEXT_RUNS) or min(offset, n_next) < 0:
            return None
        if (
            n_ids != (vocab_size - n_allowed if complement else n_allowed)
            or offset + n_ids + n_next > self._pool.n_words
        ):
            return None
        if n_next != (n_next // 2 * 2 if runs else n_allowed) or (runs and not 0 < n_next // 2 <= n_allowed):
            return None
        data = self._pool.read(offset, n_ids + n_next)
        if data is None or zlib.crc32(data) != crc:
            return None
        stored = np.frombuffer(data, dtype=_I32)
        if not _I32.isnative:
            stored = stored.astype(np.int32)
        ids, next_states = stored[:n_ids], stored[n_ids:]
        if n_ids and (ids[0] < 0 or ids[-1] >= vocab_size or (n_ids > 1 and not np.all(ids[1:] > ids[:-1]))):
            return None
        if complement:
            allowed = np.ones(vocab_size, dtype=bool)
            allowed[ids] = False
            ids = np.flatnonzero(allowed).astype(np.int32)
        if runs:
            values, lengths = next_states[: n_next // 2], next_states[n_next // 2 :]
            if lengths.min() < 1 or int(lengths.sum(dtype=np.int64)) != n_allowed:
                return None
            next_states = np.repeat(values, lengths)
        if n_allowed and not np.all(((next_states >= 0) & (next_states < n_states)) | (next_states == TERMINAL)):
            return None
        return ids, next_states


# -- files ----------------------------------------------------------------------------------------------------------

_temporary_serial = itertools.count()


def _read_small(path: Path) -> bytes:
    """A whole (small) file: plain os calls, cheaper than an io stack for an alias read on every warm load."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


@dataclass
class _PoolFile:
    """Where a loaded entry's masks live on disk: read one state at a time, only from the very file loaded.

    Reopened per read (a loaded grammar holds no file descriptor). Once the path no longer names the file that
    was loaded (same device, inode, size, mtime), ``gone`` is set for good: its pool is never read again.
    """

    path: Path
    identity: tuple[int, int, int, int]
    start: int
    """Byte offset of the pool."""
    n_words: int
    """int32 words in the pool."""
    gone: bool = False

    def read(self, offset: int, count: int) -> bytes | None:
        """``count`` int32 words at word ``offset`` of the pool, or None (file gone, replaced or short)."""
        if self.gone:
            return None
        if count == 0:
            return b""
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
            try:
                stat = os.fstat(fd)
                if (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns) != self.identity:
                    self.gone = True
                    return None
                data = _pread(fd, 4 * count, self.start + 4 * offset)
            finally:
                os.close(fd)
        except FileNotFoundError:
            self.gone = True
            return None
        except OSError:
            return None
        return data if len(data) == 4 * count else None


def _pread(fd: int, size: int, offset: int) -> bytes:
    """Up to ``size`` bytes at ``offset`` (fewer only at end of file)."""
    chunks, got = [], 0
    while got < size:
        if hasattr(os, "pread"):
            chunk = os.pread(fd, size - got, offset + got)
        else:
            os.lseek(fd, offset + got, os.SEEK_SET)
            chunk = os.read(fd, size - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _pread_into(fd: int, view: memoryview, offset: int) -> int:
    """Fill ``view`` from ``offset``; the number of bytes read (short only at end of file)."""
    got = 0
    while got < len(view):
        if hasattr(os, "preadv"):
            count = os.preadv(fd, [view[got:]], offset + got)
        else:
            chunk = _pread(fd, len(view) - got, offset + got)
            count = len(chunk)
            view[got : got + count] = chunk
        if count == 0:
            break
        got += count
    return got


def _atomic_write(path: Path, parts: Sequence[Any]) -> None:
    """Write ``parts`` (bytes-like) to a fresh temp file beside ``path``, then rename it over ``path``."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.{next(_temporary_serial)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(temporary, flags, 0o666)
    except FileNotFoundError:  # first write into this directory
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(temporary, flags, 0o666)
    try:
        try:
            views = [memoryview(part).cast("B") for part in parts]
            _write_all(fd, [view for view in views if len(view)])
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _write_all(fd: int, views: list[memoryview]) -> None:
    while views:
        if hasattr(os, "writev"):
            written = os.writev(fd, views[:64])
        else:
            written = os.write(fd, views[0])
        while views and written >= len(views[0]):
            written -= len(views[0])
            views.pop(0)
        if written:
            views[0] = views[0][written:]


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


@atexit.register
def _save_live_grammars() -> None:
    for grammar in list(_live):
        try:
            grammar.save()
        except Exception:  # noqa: BLE001 - never fail interpreter exit over a cache write
            pass
