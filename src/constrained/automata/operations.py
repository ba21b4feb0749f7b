"""Language operations on byte DFAs: intersection, difference (complement within a universe), and the DFA as an
`Automaton` node that travels inside pattern text.

Owns what the schema compiler computes on compiled languages (keys no pattern matches, constrained string bodies):
products over the joint byte classes of two DFAs, budgeted (`MAX_PRODUCT_STATES`), then trimmed, minimized and
renumbered into canonical `DFA`s (`constrained.automata.minimize`).

Imports only `constrained.dialect`, `constrained.errors` and the other automata modules.
"""

from __future__ import annotations

import numpy as np

from constrained.automata.dfa import DEAD, DFA, classes_of_rows
from constrained.automata.minimize import canonical_order, distances, minimize, trim
from constrained.dialect.nodes import Automaton
from constrained.errors import EmptyLanguageError, GrammarTooLargeError

__all__ = ["MAX_PRODUCT_STATES", "intersection", "difference", "automaton"]

MAX_PRODUCT_STATES = 200_000
"""Budget on the reachable pairs of a product (`intersection`, `difference`) before it is trimmed and minimized."""


def intersection(a: DFA, b: DFA, *, max_states: int = 4096) -> DFA | None:
    """The minimal DFA of L(a) ∩ L(b) (byte automata), or None when it is empty.

    Raises:
        GrammarTooLargeError: the product or the minimal result exceeds its budget.
    """
    return _product(a, b, complement_b=False, max_states=max_states)


def difference(universe: DFA, a: DFA, *, max_states: int = 4096) -> DFA | None:
    """The minimal DFA of L(universe) ∖ L(a): the complement of ``a`` within ``universe``; None when empty.

    Raises:
        GrammarTooLargeError: the product or the minimal result exceeds its budget.
    """
    return _product(universe, a, complement_b=True, max_states=max_states)


def automaton(dfa: DFA) -> Automaton:
    """The `Automaton` node of a byte DFA (`constrained.dialect.parser.automaton_text` writes it into a pattern)."""
    if dfa.special_names:
        raise ValueError("an automaton node has bytes only, not special-token symbols")
    table = np.asarray(dfa.transitions[:, :256])
    n = table.shape[0]
    change = np.ones((n, 256), dtype=bool)
    change[:, 1:] = table[:, 1:] != table[:, :-1]
    rows, los = np.nonzero(change)  # run starts, row-major: sorted by (state, byte)
    his = np.empty_like(los)
    his[:-1] = np.where(rows[1:] == rows[:-1], los[1:] - 1, 255)
    his[-1:] = 255
    targets = table[rows, los]
    keep = targets >= 0
    edges = tuple(zip(rows[keep].tolist(), los[keep].tolist(), his[keep].tolist(), targets[keep].tolist()))
    return Automaton(n_states=n, accepting=tuple(np.flatnonzero(dfa.accepting).tolist()), edges=edges)


def _product(a: DFA, b: DFA, *, complement_b: bool, max_states: int) -> DFA | None:
    """Reachable pairs of the product, level by level over the joint byte classes; then trim, minimize, order."""
    if a.special_names or b.special_names:
        raise ValueError("language operations take byte automata (no special-token symbols)")
    joint = np.ascontiguousarray(np.stack([a.symbol_classes[:256], b.symbol_classes[:256]], axis=1), dtype=np.int32)
    class_of_byte, first = classes_of_rows(joint)  # joint classes numbered by their first byte
    table_a = a.class_table[:, a.symbol_classes[first]]
    table_b = b.class_table[:, b.symbol_classes[first]]
    accept_b = b.accepting
    n_b = table_b.shape[0]
    if complement_b:  # a sink stands for b's missing transitions: everything b rejects from there on
        table_b = np.where(table_b < 0, n_b, table_b)
        table_b = np.vstack([table_b, np.full((1, table_b.shape[1]), n_b, dtype=table_b.dtype)])
        accept_b = np.append(accept_b, False)
        n_b += 1
    cells = a.n_states * n_b
    if cells > 1 << 25:
        raise GrammarTooLargeError("product_states", MAX_PRODUCT_STATES, f"{a.n_states} × {n_b} state pairs")
    ids = np.full(cells, DEAD, dtype=np.int64)
    ids[0] = 0
    fa, fb = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    pair_a, pair_b, rows = [fa], [fb], []
    hi = 1
    while fa.size:
        next_a, next_b = table_a[fa], table_b[fb]
        valid = (next_a >= 0) & (next_b >= 0)
        key = np.where(valid, next_a.astype(np.int64) * n_b + next_b, 0)
        fresh = np.unique(key[valid])
        fresh = fresh[ids[fresh] < 0]
        ids[fresh] = np.arange(hi, hi + fresh.size)
        if hi + fresh.size > MAX_PRODUCT_STATES:
            raise GrammarTooLargeError("product_states", MAX_PRODUCT_STATES, "intersecting string languages")
        fa, fb = fresh // n_b, fresh % n_b
        pair_a.append(fa)
        pair_b.append(fb)
        rows.append(np.where(valid, ids[key], DEAD).astype(np.int32))
        hi += fresh.size
    all_a, all_b = np.concatenate(pair_a), np.concatenate(pair_b)
    accepting = a.accepting[all_a] & (~accept_b[all_b] if complement_b else accept_b[all_b])
    table = np.vstack(rows)
    try:
        table, accepting = trim(table, accepting, "")
    except EmptyLanguageError:
        return None
    table, accepting = minimize(table, accepting)
    table, accepting = canonical_order(table, accepting)
    if table.shape[0] > max_states:
        raise GrammarTooLargeError("dfa_states", max_states, f"a computed string language has {table.shape[0]} states")
    distance = distances(table, accepting)
    return DFA.from_table(table[:, class_of_byte], accepting=accepting, distance=distance, special_names=())
