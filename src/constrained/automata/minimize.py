"""Table passes on partial DFAs over a class alphabet: distances to acceptance, trimming, Hopcroft minimization
and canonical renumbering.

Owns the steps that turn any reachable table (int32 [n_states, n_classes], ``DEAD`` where there is no move, state 0
initial) into the canonical minimal form a `DFA` holds: the language operations of `constrained.automata.operations`
run their products through them (and so does the reference compiler in tests/constrained/fsm_reference.py). The
native compiler (_fsm.c) does the same passes itself.

Imports only `constrained.automata.dfa` (for ``DEAD``) and `constrained.errors`.
"""

from __future__ import annotations

import numpy as np

from constrained.automata.dfa import DEAD
from constrained.errors import EmptyLanguageError

__all__ = ["distances", "trim", "minimize", "canonical_order"]


def _predecessors(table: np.ndarray) -> tuple[list[int], list[int]]:
    """CSR of distinct predecessors: preds[starts[t]:starts[t+1]] are the states with an edge into t."""
    n = table.shape[0]
    src, col = np.nonzero(table >= 0)
    dst = table[src, col].astype(np.int64)
    pairs = np.unique(dst * n + src)
    dst = pairs // n
    src = pairs % n
    starts = np.searchsorted(dst, np.arange(n + 1))
    return src.tolist(), starts.tolist()


def distances(table: np.ndarray, accepting: np.ndarray) -> np.ndarray:
    """Reverse BFS from the accepting states: shortest symbol count to acceptance, -1 if unreachable."""
    preds, starts = _predecessors(table)
    distance = np.full(table.shape[0], -1, dtype=np.int32)
    frontier = np.flatnonzero(accepting).tolist()
    dist = distance.tolist()
    for s in frontier:
        dist[s] = 0
    level = 0
    while frontier:
        level += 1
        nxt = []
        for t in frontier:
            for s in preds[starts[t] : starts[t + 1]]:
                if dist[s] < 0:
                    dist[s] = level
                    nxt.append(s)
        frontier = nxt
    distance[:] = dist
    return distance


def trim(table: np.ndarray, accepting: np.ndarray, pattern: str) -> tuple[np.ndarray, np.ndarray]:
    """Drop states that cannot reach acceptance (all states are reachable after subset construction)."""
    live = distances(table, accepting) >= 0
    if not live[0]:
        raise EmptyLanguageError(pattern)
    if live.all():
        return table, accepting
    new_id = np.full(table.shape[0] + 1, DEAD, dtype=np.int32)  # index -1 (dead) stays dead
    new_id[:-1][live] = np.arange(int(live.sum()), dtype=np.int32)
    return new_id[table[live]], accepting[live]


def minimize(table: np.ndarray, accepting: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hopcroft partition refinement on the partial class-level DFA; returns the quotient automaton.

    Each splitter block refines by all classes at once: a state's signature is the bitmask of classes leading
    into the splitter, and a block splits by signature (multi-way split; every part but the largest is queued
    unless the block already was). No sink state is added: with a partial transition function Hopcroft stays
    correct when *both* initial blocks start queued (Valmari & Lehtinen, 2008). The table is trimmed, so no
    live state is equivalent to the missing dead state.
    """
    n = table.shape[0]
    incoming = _incoming_masks(table)
    accept_list = accepting.tolist()
    blocks: list[set[int]] = [b for b in ({s for s in range(n) if accept_list[s]},
                                          {s for s in range(n) if not accept_list[s]}) if b]
    block_of = [0] * n
    for b, members in enumerate(blocks):
        for s in members:
            block_of[s] = b
    waiting = set(range(len(blocks)))
    while waiting:
        splitter = waiting.pop()
        signature: dict[int, int] = {}
        for t in blocks[splitter]:
            for source, mask in incoming[t]:
                signature[source] = signature.get(source, 0) | mask
        touched: dict[int, dict[int, list[int]]] = {}
        for source, sig in signature.items():
            groups = touched.get(block_of[source])
            if groups is None:
                touched[block_of[source]] = {sig: [source]}
            elif sig in groups:
                groups[sig].append(source)
            else:
                groups[sig] = [source]
        for b, groups in touched.items():
            members = blocks[b]
            parts = list(groups.values())
            if len(parts) == 1 and len(parts[0]) == len(members):
                continue
            was_waiting = b in waiting
            if sum(map(len, parts)) == len(members):  # every member touched: the largest part keeps the id
                parts.sort(key=len, reverse=True)
                blocks[b] = set(parts[0])
                parts = queued = parts[1:]
            else:  # the untouched remainder keeps the id
                for part in parts:
                    members.difference_update(part)
                largest = max(parts, key=len)
                if len(largest) > len(members) and not was_waiting:
                    waiting.add(b)
                    queued = [part for part in parts if part is not largest]
                    parts = queued + [largest]
                else:
                    queued = parts
            for part in parts:
                new_block = len(blocks)
                blocks.append(set(part))
                for s in part:
                    block_of[s] = new_block
                if was_waiting or any(part is q for q in queued):
                    waiting.add(new_block)
            if was_waiting:
                waiting.add(b)
    if len(blocks) == n:
        return table, accepting
    live_blocks = list(dict.fromkeys(block_of))  # first-occurrence order: state 0's block stays initial
    renumber = {b: i for i, b in enumerate(live_blocks)}
    block_id = np.array([renumber[block_of[s]] for s in range(n)] + [DEAD], dtype=np.int32)
    representatives = np.array([next(iter(blocks[b])) for b in live_blocks], dtype=np.intp)
    return block_id[table[representatives]], accepting[representatives]


def _incoming_masks(table: np.ndarray) -> list[list[tuple[int, int]]]:
    """For each state t, the (source, bitmask of classes) pairs of the edges into t."""
    n, n_classes = table.shape
    src, col = np.nonzero(table >= 0)
    dst = table[src, col].astype(np.int64)
    key = dst * n + src
    order = np.argsort(key, kind="stable")
    key, col = key[order], col[order]
    first = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]])) if key.size else np.zeros(0, np.intp)
    incoming: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    words = []
    for w in range(0, n_classes, 62):  # 62 classes per int64 word, combined into Python ints
        in_word = (col >= w) & (col < w + 62)
        bits = np.where(in_word, np.left_shift(np.int64(1), (col - w).clip(0, 61)), 0)
        words.append(np.bitwise_or.reduceat(bits, first).tolist() if key.size else [])
    keys = key[first].tolist()
    for i, k in enumerate(keys):
        mask = words[0][i]
        for w in range(1, len(words)):
            mask |= words[w][i] << (62 * w)
        incoming[k // n].append((k % n, mask))
    return incoming


def canonical_order(table: np.ndarray, accepting: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Renumber states in BFS order from state 0, visiting classes (hence symbols) in increasing order."""
    n = table.shape[0]
    rows = table.tolist()
    order = [0]
    new_id = [-1] * n
    new_id[0] = 0
    for s in order:
        for t in rows[s]:
            if t >= 0 and new_id[t] < 0:
                new_id[t] = len(order)
                order.append(t)
    mapping = np.array(new_id + [DEAD], dtype=np.int32)
    old = np.array(order, dtype=np.intp)
    return mapping[table[old]], accepting[old]
