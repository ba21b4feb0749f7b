"""Reference helpers for the index/matcher tests: hand-built DFAs and byte-by-byte walks (no kernel involved)."""

from __future__ import annotations

from collections import deque

import numpy as np

from constrained.fsm import DEAD, DFA


def make_dfa(transitions: np.ndarray, accepting: np.ndarray, special_names: tuple[str, ...] = ()) -> DFA:
    """A DFA from a raw table; states that cannot reach acceptance are made accepting (so it is trimmed)."""
    table = np.ascontiguousarray(transitions, dtype=np.int32)
    accepting = np.asarray(accepting, dtype=bool).copy()
    distance = _distances(table, accepting)
    accepting |= distance < 0
    distance = _distances(table, accepting)
    return DFA.from_table(table, accepting=accepting, distance=distance.astype(np.int32), special_names=special_names)


def _distances(table: np.ndarray, accepting: np.ndarray) -> np.ndarray:
    n_states = table.shape[0]
    distance = np.full(n_states, -1, dtype=np.int64)
    predecessors: list[list[int]] = [[] for _ in range(n_states)]
    for source, target in zip(*np.nonzero(table != DEAD)):
        predecessors[int(table[source, target])].append(int(source))
    queue = deque(int(s) for s in np.flatnonzero(accepting))
    distance[accepting] = 0
    while queue:
        state = queue.popleft()
        for source in predecessors[state]:
            if distance[source] < 0:
                distance[source] = distance[state] + 1
                queue.append(source)
    return distance


def walk_bytes(dfa: DFA, state: int, data: bytes) -> int:
    """The state after ``data`` from ``state``, or DEAD."""
    for byte in data:
        state = int(dfa.transitions[state, byte])
        if state == DEAD:
            return DEAD
    return state


def live_tokens(dfa: DFA, state: int, tokens: tuple[bytes, ...], ids: list[int]) -> dict[int, int]:
    """Vectorized reference: every id in ``ids`` whose bytes stay alive from ``state`` → the state it reaches."""
    if not ids:
        return {}
    matrix, lengths = _byte_matrix(tokens, tuple(ids))
    current = np.full(len(ids), state, dtype=np.int64)
    for column in range(matrix.shape[1]):
        active = (lengths > column) & (current != DEAD)
        current[active] = dfa.transitions[current[active], matrix[active, column]]
    return {token_id: int(target) for token_id, target in zip(ids, current.tolist()) if target != DEAD}


_matrices: dict[tuple[int, int], tuple[tuple[bytes, ...], tuple[int, ...], np.ndarray, np.ndarray]] = {}


def _byte_matrix(tokens: tuple[bytes, ...], ids: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    key = (id(tokens), hash(ids))
    cached = _matrices.get(key)
    if cached is not None and cached[0] is tokens and cached[1] == ids:
        return cached[2], cached[3]
    if len(ids) < 1000:  # cheap enough to rebuild; only real vocabularies are worth keeping
        return _build_matrix(tokens, ids)
    matrix, lengths = _build_matrix(tokens, ids)
    _matrices[key] = (tokens, ids, matrix, lengths)  # holds `tokens`, so its id cannot be reused
    return matrix, lengths


def _build_matrix(tokens: tuple[bytes, ...], ids: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.asarray([len(tokens[i]) for i in ids])
    matrix = np.zeros((len(ids), int(lengths.max())), dtype=np.int64)
    for row, token_id in enumerate(ids):
        piece = tokens[token_id]
        matrix[row, : len(piece)] = np.frombuffer(piece, dtype=np.uint8)
    return matrix, lengths
