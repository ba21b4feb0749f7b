"""Grammar: an immutable DFA + token index over one vocabulary, compiled once and cached in memory and on disk.

Owns compilation entry points (`compile_regex`, `compile_json_schema`) and both caches; refuses nothing the
compilers accept (their errors propagate: `RegexSyntaxError`, `UnsupportedSchemaError`, `GrammarTooLargeError`,
`IncompatibleVocabularyError`).

    pattern ──► memory cache ──hit──► Grammar
                   │ miss
                   ▼
               disk cache  (alias: sha256(pattern, allow_special, vocab) → grammar fingerprint
                   │        entry: <fingerprint>.npz = DFA + every state mask computed so far,
                   │        ids delta-encoded, zip-compressed)
                   │ miss
                   ▼
            fsm.compile_dfa ──► TokenIndex(dfa, vocab) ──► Grammar ──► saved (initial state's mask)

A warm process pays no DFA compile and no index walk for a grammar it has seen: masks computed in a process
are written back by `Grammar.precompute`, `Grammar.save` and at interpreter exit. Writes are atomic (temp file
+ rename), so concurrent processes never read a torn entry; a corrupt or mismatched entry is ignored and the
grammar recompiled. Cache directory: ``$EMBER_CACHE_DIR`` (``off`` disables the disk cache), else
``$XDG_CACHE_HOME/ember/index`` or ``~/.cache/ember/index``.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import tempfile
import threading
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from constrained import fsm
from constrained.fsm import DFA
from constrained.index import TokenIndex
from constrained.matcher import Matcher
from constrained.vocabulary import Vocabulary

__all__ = ["Grammar", "compile_regex", "compile_json_schema", "cache_directory", "clear_memory_cache"]

_FORMAT = "ember.grammar.v2"
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
        path = directory / f"{self.fingerprint}.npz"
        masks = self.index.export_masks()
        if _saved_counts.get(path) == len(masks) and path.exists():
            return path
        states = np.asarray(sorted(masks), dtype=np.int32)
        lengths = np.asarray([masks[s][0].shape[0] for s in states.tolist()], dtype=np.int64)
        offsets = np.zeros(states.shape[0] + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        empty = np.zeros(0, dtype=np.int32)
        arrays = {
            "format": np.asarray(_FORMAT),
            "pattern": np.asarray(self.pattern),
            "allow_special": np.asarray(self.allow_special),
            "vocab_fingerprint": np.asarray(self.vocabulary.fingerprint),
            "dfa_fingerprint": np.asarray(self.dfa.fingerprint),
            "special_names": np.asarray(json.dumps(list(self.dfa.special_names))),
            "transitions": np.asarray(self.dfa.transitions, dtype=np.int32),
            "accepting": np.asarray(self.dfa.accepting, dtype=bool),
            "distance": np.asarray(self.dfa.distance, dtype=np.int32),
            "initial": np.asarray(self.dfa.initial, dtype=np.int64),
            "mask_states": states,
            "mask_offsets": offsets,
            "mask_id_deltas": _delta_encode(masks, states.tolist()) if len(states) else empty,
            "mask_next": np.concatenate([masks[s][1] for s in states.tolist()]) if len(states) else empty,
        }
        try:
            _atomic_write(path, lambda handle: np.savez_compressed(handle, **arrays))
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
    ("error"); see `constrained.schema.schema_to_pattern`.

    Raises:
        UnsupportedSchemaError, InvalidSchemaError: from the schema compiler.
        IncompatibleVocabularyError: the vocabulary cannot spell the grammar.
    """
    from constrained.schema import schema_to_pattern

    canonical = schema if isinstance(schema, str) else json.dumps(schema, sort_keys=False, separators=(",", ":"))
    schema_key = (canonical, whitespace, unknown_keywords)
    pattern = _schema_patterns.get(schema_key)
    if pattern is None:
        pattern = schema_to_pattern(schema, whitespace=whitespace, unknown_keywords=unknown_keywords)
        if len(_schema_patterns) >= _MEMORY_LIMIT:
            _schema_patterns.pop(next(iter(_schema_patterns)))
        _schema_patterns[schema_key] = pattern
    return compile_regex(pattern, vocab)


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


# -- internals ------------------------------------------------------------------------------------------------------

_memory: dict[tuple[str, bool, str], Grammar] = {}
_schema_patterns: dict[tuple[str, str], str] = {}
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


def _grammar_fingerprint(dfa_fingerprint: str, vocab_fingerprint: str) -> str:
    return hashlib.sha256(f"{_FORMAT}\0{dfa_fingerprint}\0{vocab_fingerprint}".encode()).hexdigest()


def _alias(pattern: str, allow_special: bool, vocab: Vocabulary) -> str:
    text = f"{_FORMAT}\0{int(allow_special)}\0{vocab.fingerprint}\0{pattern}"
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


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
        alias_path = path.parent / "alias" / f"{_alias(pattern, allow_special, vocab)}.txt"
        try:
            _atomic_write(alias_path, lambda handle: handle.write(grammar.fingerprint.encode()))
        except OSError as error:
            _warn_once(f"ember: cannot write the grammar cache at {alias_path.parent}: {error}")
    return grammar


def _load(pattern: str, allow_special: bool, vocab: Vocabulary) -> Grammar | None:
    """The cached grammar for this pattern, or None (absent, corrupt or mismatched entries count as absent)."""
    directory = cache_directory()
    if directory is None:
        return None
    alias_path = directory / "alias" / f"{_alias(pattern, allow_special, vocab)}.txt"
    try:
        fingerprint = alias_path.read_text().strip()
        path = directory / f"{fingerprint}.npz"
        with np.load(path, allow_pickle=False) as data:
            entry = {name: data[name] for name in data.files}
    except (OSError, ValueError, KeyError, EOFError):
        return None
    try:
        if str(entry["format"]) != _FORMAT or str(entry["vocab_fingerprint"]) != vocab.fingerprint:
            return None
        if str(entry["pattern"]) != pattern or bool(entry["allow_special"]) != allow_special:
            return None
        transitions = np.ascontiguousarray(entry["transitions"], dtype=np.int32)
        accepting = np.asarray(entry["accepting"], dtype=bool)
        distance = np.asarray(entry["distance"], dtype=np.int32)
        n_states = transitions.shape[0]
        if accepting.shape != (n_states,) or distance.shape != (n_states,) or transitions.ndim != 2:
            return None
        if transitions.size and (transitions.min() < -1 or transitions.max() >= n_states):
            return None
        for array in (transitions, accepting, distance):
            array.flags.writeable = False
        dfa = DFA(
            transitions=transitions, accepting=accepting, initial=int(entry["initial"]),
            special_names=tuple(json.loads(str(entry["special_names"]))), distance=distance,
            fingerprint=str(entry["dfa_fingerprint"]),
        )  # fmt: skip
        if _grammar_fingerprint(dfa.fingerprint, vocab.fingerprint) != fingerprint:
            return None
        offsets = entry["mask_offsets"]
        deltas, next_states = entry["mask_id_deltas"], entry["mask_next"]
        masks = {}
        for i, state in enumerate(entry["mask_states"].tolist()):
            ids = np.cumsum(deltas[offsets[i] : offsets[i + 1]], dtype=np.int64)
            if not 0 <= state < n_states or (ids.size and (ids[0] < 0 or ids[-1] >= len(vocab))):
                return None
            if ids.size > 1 and np.any(np.diff(ids) <= 0):
                return None
            masks[int(state)] = (ids.astype(np.int32), np.array(next_states[offsets[i] : offsets[i + 1]]))
    except (KeyError, ValueError, TypeError, IndexError):
        return None
    index = TokenIndex(dfa, vocab, masks=masks)
    grammar = Grammar(
        pattern=pattern, allow_special=allow_special, dfa=dfa, vocabulary=vocab, index=index, fingerprint=fingerprint
    )
    _saved_counts[path] = len(masks)
    return grammar


def _delta_encode(masks: dict[int, tuple[np.ndarray, np.ndarray]], states: list[int]) -> np.ndarray:
    """Sorted ids as differences (first id of each state absolute): mostly small numbers, which compress ~10x."""
    parts = []
    for state in states:
        ids = masks[state][0].astype(np.int32)
        deltas = ids.copy()
        deltas[1:] -= ids[:-1]
        parts.append(deltas)
    return np.concatenate(parts)


def _atomic_write(path: Path, write: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False)
    try:
        with handle:
            write(handle)
        os.replace(handle.name, path)
    except BaseException:
        try:
            os.unlink(handle.name)
        except OSError:
            pass
        raise


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
