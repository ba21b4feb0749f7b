"""The on-disk format of a compiled grammar: one ``<fingerprint>.grammar`` file per grammar, read back lazily;
and of a compiled rule set: one ``<key>.rules`` file of named arrays (`encode_arrays`, `open_arrays`).

Separate from `constrained.grammar` (which decides *when* to load and save, and under which keys) because the
format is where the integrity rules live: a loaded entry feeds C kernels that trust their tables, so everything
read here is checked before it is used, and anything that fails counts as absent (None), never as an error.

Entry file (little-endian arrays, no compression; written with one vectored write)::

    ┌ preamble  magic, version, header length, file size, body end, crc32 of the body                 40 bytes
    ├ body      JSON header (fingerprints, identities, counts) · pattern (UTF-8) · symbol classes · class
    │           table as runs (values, lengths: ~30x smaller than the table by symbol) · distances · mask
    │           directory (a row per stored state: counts, encodings, pool offset, crc32)
    │                                                                         ── crc32-checked on every load
    └ pool      per-state masks: allowed ids (or, when most ids are allowed, the ids that are not) and next
                states (or their runs)                                            ── each checked on first read

A load is one open and two reads (the preamble, then exactly the body) into private memory, never a mapping: a
file changed in place after the checks could otherwise reach the kernels. It checks the body crc32, every
header field, and four ranges on the small arrays (symbol classes in [0, n_classes), run targets in
[-1, n_states), run lengths summing to the class table, distances >= 0); accepting states are not stored but
derived (distance 0, by definition), and the class table is checked and expanded in one C pass. The DFA keeps its
class form, which is what the mask kernels read: the table by symbol (`DFA.transitions`) is never built for masks.
Runs rather than the raw class table: ~3x fewer bytes to read and crc32 (~0.3 ms/MB) on every load. The
pool stays on disk: the directory is checked on the first lookup, and a state's mask is read (from the very
file loaded: same inode, size and mtime), checked (its crc32, ids strictly ascending in range, next states in
range) and decoded on first access only (`StoredMasks`), so a precomputed grammar of thousands of states loads
as fast as a fresh one. Writes are atomic (temp file + rename), so concurrent processes never read a torn
entry, and a loaded entry's pool is never read from its replacement.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from constrained import _kernel
from constrained.fsm import DEAD, DFA
from constrained.index import TERMINAL
from constrained.vocabulary import Vocabulary

FORMAT = "ember.grammar.v5"
"""Names the entry format (in every entry header) and, via the cache keys, the alias format."""

_MAGIC = b"EMBERGRM"
_VERSION = 5
_PREAMBLE = struct.Struct("<8sIIQQII")
"""magic, version, header length, file size, body end (= pool start), crc32 of bytes [preamble end, body end), 0."""
_ALIGN = 8
_O_BINARY = getattr(os, "O_BINARY", 0)
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
class Entry:
    """A loaded entry: what was compiled (pattern, DFA) and the masks stored with it (read lazily)."""

    pattern: str
    pattern_sha256: str
    allow_special: bool
    dfa: DFA
    masks: StoredMasks
    n_masks: int
    """Masks the file holds (its directory rows; `masks` checks them on first use)."""


def _aligned(offset: int) -> int:
    return -(-offset // _ALIGN) * _ALIGN


def _runs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run-length encoding of a 1-D array: (value of each run, int32 length of each run)."""
    if values.shape[0] == 0:
        return values[:0], np.zeros(0, dtype=np.int32)
    starts = np.flatnonzero(values[1:] != values[:-1]) + 1
    bounds = np.concatenate(([0], starts, [values.shape[0]]))
    return values[bounds[:-1]], np.diff(bounds).astype(np.int32)


class EntrySource(Protocol):
    """What an entry stores of a one-DFA grammar (`constrained.Grammar`)."""

    @property
    def dfa(self) -> DFA: ...

    @property
    def vocabulary(self) -> Vocabulary: ...

    @property
    def pattern(self) -> str: ...

    @property
    def allow_special(self) -> bool: ...


def encode_entry(
    grammar: EntrySource, masks: Mapping[int, tuple[np.ndarray, np.ndarray]], index_identity: str
) -> list[Any]:
    """The entry file as a list of byte buffers (written with one vectored write)."""
    dfa, vocab_size = grammar.dfa, len(grammar.vocabulary)
    table = np.ascontiguousarray(dfa.class_table, dtype=_I32)
    n_states, n_classes = table.shape
    if table.size >= 2**31:
        raise OSError(f"a DFA of {table.size} transitions is too large for the cache format")
    distance = np.ascontiguousarray(dfa.distance, dtype=_I32)
    if distance.shape != (n_states,) or not np.array_equal(dfa.accepting, distance == 0):
        raise ValueError("a DFA whose accepting states are not exactly those at distance 0")  # not stored: derived
    run_values, run_lengths = _runs(table.reshape(-1))
    directory, pool = _encode_masks(masks, vocab_size)
    pattern = grammar.pattern.encode("utf-8", errors="surrogatepass")
    header = {
        "format": FORMAT,
        "pattern_sha256": hashlib.sha256(pattern).hexdigest(),
        "allow_special": grammar.allow_special,
        "vocab_fingerprint": grammar.vocabulary.fingerprint,
        "vocab_size": vocab_size,
        "index_identity": index_identity,
        "dfa_fingerprint": dfa.fingerprint,
        "special_names": list(dfa.special_names),
        "n_states": n_states,
        "n_symbols": dfa.n_symbols,
        "n_classes": n_classes,
        "initial": int(dfa.initial),
        "pattern_bytes": len(pattern),
        "runs": int(run_values.shape[0]),
        "masks": int(directory.shape[0]),
        "pool": int(pool.shape[0]),
    }
    header_bytes = json.dumps(header).encode("ascii")
    body: list[Any] = [header_bytes]
    offset = len(header_bytes)  # within the body, which starts 8-aligned in the file
    sections = (  # (array, whether it starts 8-aligned): the layout `_decode_body` computes from the header
        (np.frombuffer(pattern, dtype=_U8), True),
        (np.ascontiguousarray(dfa.symbol_classes, dtype=_I32), True),
        (run_values.astype(_I32, copy=False), False),
        (run_lengths.astype(_I32, copy=False), False),
        (distance, False),
        (directory.astype(_I64, copy=False).reshape(-1), True),
    )
    for section, aligned in sections:
        if aligned:
            body.append(bytes(_aligned(offset) - offset))
            offset = _aligned(offset)
        body.append(section)
        offset += section.nbytes
    body.append(bytes(_aligned(offset) - offset))
    body_end = _PREAMBLE.size + _aligned(offset)
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
        crc = zlib.crc32(stored_next.data, zlib.crc32(stored_ids.data))  # .data: the bytes, typed as a buffer
        rows.append((int(state), n_allowed, kinds, offset, stored_ids.shape[0], stored_next.shape[0], crc))
        chunks += (stored_ids, stored_next)
        offset += stored_ids.shape[0] + stored_next.shape[0]
    directory = np.asarray(rows, dtype=np.int64).reshape(len(rows), _DIRECTORY_COLUMNS)
    pool = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32)
    return directory, pool


def open_entry(
    path: str | Path, vocab: Vocabulary, index_identity: str, on_drop: Callable[[], object] = lambda: None
) -> Entry | None:
    """The entry at ``path`` if intact and made for ``vocab`` and ``index_identity``; None for anything absent,
    truncated, corrupt or mismatched. ``on_drop`` runs whenever a stored mask later fails its check."""
    try:
        return _open_entry(path, vocab, index_identity, on_drop)
    except (OSError, ValueError, TypeError, KeyError, IndexError, OverflowError, struct.error):
        return None


def _open_entry(path: str | Path, vocab: Vocabulary, index_identity: str, on_drop: Callable[[], object]) -> Entry | None:
    """One open, two reads (preamble, body); the pool stays on disk until a state is asked for."""
    fd = os.open(path, os.O_RDONLY | _O_BINARY)
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
        body = _pread(fd, body_end - _PREAMBLE.size, _PREAMBLE.size)
    finally:
        os.close(fd)
    if len(body) != body_end - _PREAMBLE.size or zlib.crc32(body) != crc:
        return None
    pool = PoolFile(path, (stat.st_dev, stat.st_ino, size, stat.st_mtime_ns), body_end, (size - body_end) // 4)
    return _decode_body(body, header_length, vocab, index_identity, pool, on_drop)


def _decode_body(
    body: bytes, header_length: int, vocab: Vocabulary, index_identity: str, pool: PoolFile,
    on_drop: Callable[[], object],
) -> Entry | None:  # fmt: skip
    """Parse and validate the header and DFA sections of a crc-checked body (masks: on first access)."""
    header = json.loads(body[:header_length])
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        return None
    if header.get("vocab_fingerprint") != vocab.fingerprint or header.get("vocab_size") != len(vocab):
        return None
    if header.get("index_identity") != index_identity:
        return None
    pattern_sha256, dfa_fingerprint, names = (
        header["pattern_sha256"],
        header["dfa_fingerprint"],
        header["special_names"],
    )
    n_states, width, initial, n_masks = header["n_states"], header["n_symbols"], header["initial"], header["masks"]
    n_pattern, n_runs, allow_special = header["pattern_bytes"], header["runs"], header["allow_special"]
    n_classes = header["n_classes"]
    counts = (n_states, width, n_classes, initial, n_masks, n_pattern, n_runs, header["pool"])
    if not all(type(value) is int and value >= 0 for value in counts) or type(allow_special) is not bool:
        return None
    if not isinstance(names, list) or not all(isinstance(v, str) for v in (pattern_sha256, dfa_fingerprint, *names)):
        return None
    if not 0 <= initial < n_states or width != 256 + len(names) or n_runs == 0 or header["pool"] != pool.n_words:
        return None
    pattern_at = _aligned(header_length)  # offsets within the body (the body starts 8-aligned in the file)
    classes_at = _aligned(pattern_at + n_pattern)
    runs_at = classes_at + 4 * width
    distance_at = runs_at + 8 * n_runs
    directory_at = _aligned(distance_at + 4 * n_states)
    if _aligned(directory_at + 8 * _DIRECTORY_COLUMNS * n_masks) != len(body):
        return None
    symbol_classes = _array(body, _I32, width, classes_at)
    runs = _array(body, _I32, 2 * n_runs, runs_at)
    run_values, run_lengths = runs[:n_runs], runs[n_runs:]
    distance = _array(body, _I32, n_states, distance_at)
    if symbol_classes.min() < 0 or symbol_classes.max() >= n_classes or distance.min() < 0:
        return None
    class_table = np.empty((n_states, n_classes), dtype=np.int32)
    if not _kernel.expand_runs(run_values, run_lengths, DEAD, n_states, class_table):
        return None  # a target out of [DEAD, n_states), a negative length, or lengths not covering the table
    accepting = distance == 0  # the definition of distance: 0 exactly at accepting states
    for array_ in (symbol_classes, class_table, accepting, distance):
        array_.flags.writeable = False
    dfa = DFA(
        symbol_classes=symbol_classes, class_table=class_table, accepting=accepting, initial=initial,
        special_names=tuple(names), distance=distance,
    )  # fmt: skip
    dfa.__dict__["fingerprint"] = dfa_fingerprint  # as stored: the entry's checksum and key already vouch for it
    directory = _array(body, _I64, _DIRECTORY_COLUMNS * n_masks, directory_at).reshape(n_masks, _DIRECTORY_COLUMNS)
    masks = StoredMasks(directory, pool, n_states, len(vocab), on_drop)
    pattern = body[pattern_at : pattern_at + n_pattern].decode("utf-8", errors="surrogatepass")
    return Entry(pattern, pattern_sha256, allow_special, dfa, masks, n_masks)


def _array(body: bytes, dtype: np.dtype, count: int, offset: int) -> np.ndarray:
    """``count`` items of ``dtype`` at byte ``offset`` of the body: a read-only view (a native copy on BE hosts)."""
    array = np.frombuffer(body, dtype=dtype, count=count, offset=offset)
    return array if dtype.isnative else array.astype(dtype.newbyteorder("="))


class StoredMasks(Mapping[int, tuple[np.ndarray, np.ndarray]]):
    """The masks of a loaded entry: state → (ascending allowed ids, next states), decoded on first access.

    Nothing is checked at load (a warm load that never asks for a stored mask pays nothing for them). The first
    lookup checks that the directory's states ascend within the DFA (else every state is dropped); each state is
    checked when first read: its directory row (kinds, counts, pool bounds), its crc32, ids strictly ascending in
    [0, vocab), next states in [0, n_states) or `TERMINAL`. A state that fails is dropped (``get`` answers None,
    so the index recomputes it) and ``on_drop`` is called (the entry needs rewriting). Once the file is gone or
    replaced (another process saved more masks), every state not yet read is dropped at once.
    """

    def __init__(
        self, directory: np.ndarray, pool: PoolFile, n_states: int, vocab_size: int, on_drop: Callable[[], object]
    ) -> None:
        self._directory = directory
        self._states = directory[:, 0]
        self._pool = pool
        self._n_states = n_states
        self._vocab_size = vocab_size
        self._dropped: set[int] = set()
        self._on_drop = on_drop
        self._checked = False

    def __len__(self) -> int:
        return 0 if self._unusable() else int(self._states.shape[0]) - len(self._dropped)

    def __iter__(self) -> Iterator[int]:
        states = [] if self._unusable() else self._states.tolist()
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
            self._on_drop()
            raise KeyError(state)
        return decoded

    def _unusable(self) -> bool:
        """Whether no stored state can be used any more (file gone or replaced, or a corrupt directory)."""
        if not self._checked:  # idempotent, so threads racing here agree; flagged only once decided
            states, n_states = self._states, self._n_states
            if states.shape[0] and (states[0] < 0 or states[-1] >= n_states or np.any(states[1:] <= states[:-1])):
                self._pool.gone = True
                self._on_drop()
            self._checked = True
        return self._pool.gone

    def _row_of(self, state: object) -> int:
        if not isinstance(state, (int, np.integer)) or state in self._dropped or self._unusable():
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


# -- rule-set entries -----------------------------------------------------------------------------------------------

RULES_FORMAT = "ember.rules.v2"
"""Names the rule-set entry format: ``<key>.rules`` files holding a compiled `PushdownGrammar`'s arrays."""
_RULES_MAGIC = b"EMBERRUL"
_RULES_PREAMBLE = struct.Struct("<8sIIQI")
"""magic, header length, 0, file size, crc32 of everything after the preamble."""
_ARRAY_DTYPES: dict[str, np.dtype[Any]] = {"i4": _I32, "i8": _I64, "u1": _U8}


def encode_arrays(header: Mapping[str, Any], arrays: Mapping[str, np.ndarray], *, runs: Sequence[str] = ()
                  ) -> list[Any]:
    """A rule-set entry as byte buffers: a JSON header (``header`` plus each array's dtype, shape and offset),
    then the arrays, 8-aligned, little-endian; the int32 arrays named in ``runs`` as run-length pairs (a table's
    rows are long runs of the same target: ~30x fewer bytes). `open_arrays` reads it back."""
    layout, offset = {}, 0
    parts: list[Any] = []  # the arrays and their padding bytes, returned as they are
    for name, array in arrays.items():
        kind = {np.dtype(np.int32): "i4", np.dtype(np.int64): "i8", np.dtype(np.uint8): "u1"}[array.dtype]
        data = np.ascontiguousarray(array, dtype=_ARRAY_DTYPES[kind])
        if name in runs:
            values, lengths = _runs(data.reshape(-1))
            data, kind = np.concatenate((values, lengths)).astype(_I32), "runs"
        layout[name] = [kind, list(array.shape), offset, int(data.shape[0])]
        parts += [data, bytes(_aligned(offset + data.nbytes) - offset - data.nbytes)]
        offset = _aligned(offset + data.nbytes)
    header_bytes = json.dumps({**header, "format": RULES_FORMAT, "arrays": layout}).encode("utf-8")
    head = header_bytes + bytes(_aligned(len(header_bytes)) - len(header_bytes))
    crc = zlib.crc32(head)
    for part in parts:
        crc = zlib.crc32(part, crc)
    size = _RULES_PREAMBLE.size + len(head) + offset
    return [_RULES_PREAMBLE.pack(_RULES_MAGIC, len(header_bytes), 0, size, crc), head, *parts]


def open_arrays(path: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
    """(header, read-only arrays) of the rule-set entry at ``path``; None for anything absent, truncated, corrupt
    or of another format. Only the framing is checked here (crc32, layout in bounds, runs covering their arrays);
    what the arrays must hold is the reader's (`PushdownGrammar` checks every range its kernels trust)."""
    try:
        data = read_small(path)
        magic, header_length, _, size, crc = _RULES_PREAMBLE.unpack_from(data)
        if magic != _RULES_MAGIC or size != len(data) or zlib.crc32(memoryview(data)[_RULES_PREAMBLE.size:]) != crc:
            return None
        header = json.loads(data[_RULES_PREAMBLE.size:_RULES_PREAMBLE.size + header_length])
        if not isinstance(header, dict) or header.get("format") != RULES_FORMAT:
            return None
        start = _RULES_PREAMBLE.size + _aligned(header_length)
        arrays = {}
        for name, (kind, shape, offset, count) in header.pop("arrays").items():
            dtype = _I32 if kind == "runs" else _ARRAY_DTYPES[kind]
            if offset < 0 or offset % _ALIGN or count < 0 or start + offset + count * dtype.itemsize > size:
                return None
            stored = _array(data, dtype, count, start + offset)
            if kind == "runs":
                array = np.empty(shape, dtype=np.int32)
                half = count // 2
                if count % 2 or not _kernel.expand_runs(stored[:half], stored[half:], -(2**31), 2**31 - 1, array):
                    return None
                array.flags.writeable = False
            else:
                array = stored.reshape(shape)
            arrays[name] = array
        return header, arrays
    except (OSError, ValueError, TypeError, KeyError, AttributeError, struct.error):
        return None


# -- files ----------------------------------------------------------------------------------------------------------

_temporary_serial = itertools.count()
_SMALL_READ = 1 << 16


def read_small(path: str | Path) -> bytes:
    """A whole (small) file: plain os calls, cheaper than an io stack for an alias read on every warm load.

    A read shorter than asked is taken as the end of the file (as it is for regular files); were it not, the
    content would be cut short, which every caller refuses (malformed JSON, not a fingerprint, wrong hash)."""
    fd = os.open(path, os.O_RDONLY | _O_BINARY)
    try:
        data = os.read(fd, _SMALL_READ)
        if len(data) < _SMALL_READ:
            return data
        chunks = [data]
        while chunk := os.read(fd, _SMALL_READ):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


@dataclass
class PoolFile:
    """Where a loaded entry's masks live on disk: read one state at a time, only from the very file loaded.

    Reopened per read (a loaded grammar holds no file descriptor). Once the path no longer names the file that
    was loaded (same device, inode, size, mtime), ``gone`` is set for good: its pool is never read again.
    """

    path: str | Path
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
            fd = os.open(self.path, os.O_RDONLY | _O_BINARY)
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


def atomic_write(path: str | Path, parts: Sequence[Any]) -> None:
    """Write ``parts`` (bytes-like) to a fresh temp file beside ``path``, then rename it over ``path``."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.{next(_temporary_serial)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_BINARY
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
