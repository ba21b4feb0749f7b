"""The rule-table kernels (`_kernel.lay_out_rules`, `_kernel.row_classes`, `_kernel.shortest_completions`,
`_kernel.bytes_to_boundary`, `_kernel.first_class_into`) agree with plain Python definitions of the same
blocks, classes, graph and searches, on random arrays and rule tables and on the tables of real schema grammars;
the symbol classes a pushdown table gets from its rules' classes are the table's own."""

from __future__ import annotations

import heapq

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from constrained import _kernel, fsm
from constrained.fsm import DEAD
from constrained.grammar import compile_rules
from constrained.index import UNREACHABLE
from constrained.schema import schema_to_rules

from .test_pushdown import JSON_RULES, TREE


def _shortest_reference(table: np.ndarray, accept: np.ndarray, calls: list[tuple[int, int, int]]):
    """Knuth–Dijkstra as a heap of (distance, state); ties to the canonical hop (a call before a symbol, then the
    smaller target / (callee, continuation)). Returns (dist, final, kind, a, b) with a symbol hop's a = target."""
    n = table.shape[0]
    into: dict[int, set[int]] = {}
    for s, t in zip(*np.nonzero(table >= 0)):
        into.setdefault(int(table[s, t]), set()).add(int(s))
    dist = [UNREACHABLE] * n
    hop: list = [None] * n
    final = [False] * n
    heap = [(0, s) for s in np.flatnonzero(accept).tolist()]
    for _, s in heap:
        dist[s] = 0
    heapq.heapify(heap)

    def rank(how):  # ("call", callee, cont) sorts before ("sym", target)
        return (0, how[1], how[2]) if how[0] == "call" else (1, how[1], -1)

    def relax(s, d, how):
        if d < dist[s] or (d == dist[s] and hop[s] is not None and rank(how) < rank(hop[s])):
            dist[s], hop[s] = d, how
            heapq.heappush(heap, (d, s))

    while heap:
        d, u = heapq.heappop(heap)
        if final[u] or d != dist[u]:
            continue
        final[u] = True
        for s in sorted(into.get(u, ())):
            if not final[s]:
                relax(s, d + 1, ("sym", u))
        for s, callee, cont in calls:
            if cont == u and final[callee] and not final[s]:
                relax(s, dist[callee] + d, ("call", callee, u))
            if callee == u and final[cont] and not final[s]:
                relax(s, d + dist[cont], ("call", u, cont))
    kind = [0 if h is None else (1 if h[0] == "sym" else 2) for h in hop]
    a = [-1 if h is None else h[1] for h in hop]
    b = [-1 if h is None or h[0] == "sym" else h[2] for h in hop]
    return dist, [int(f) for f in final], kind, a, b


def _reach_reference(table: np.ndarray, boundary: np.ndarray, cap: int) -> list[int]:
    """Fewest symbols to a boundary state by relaxing edges until nothing changes (capped)."""
    reach = [0 if boundary[s] else cap for s in range(table.shape[0])]
    changed = True
    while changed:
        changed = False
        for s, t in zip(*np.nonzero(table >= 0)):
            better = reach[int(table[s, t])] + 1
            if better < reach[s] and better < cap:
                reach[int(s)] = better
                changed = True
    return reach


def _predecessors(table: np.ndarray) -> list[np.ndarray]:
    """The CSR the graph kernels search: into[start[t]:start[t + 1]] are t's distinct sources, ascending."""
    into = [sorted({s for s in range(table.shape[0]) if (table[s] == t).any()}) for t in range(table.shape[0])]
    start = np.cumsum([0] + [len(sources) for sources in into])
    return [start.astype(np.int32), np.asarray([s for sources in into for s in sources], dtype=np.int32)]


def _kernel_shortest(table, accept, calls):
    n, width = table.shape
    columns = [np.asarray(c, dtype=np.int32) for c in zip(*calls)] if calls else [np.zeros(0, dtype=np.int32)] * 3
    out = (np.empty(n, np.int64), np.empty(n, np.uint8), np.empty(n, np.uint8), np.empty(n, np.int32),
           np.empty(n, np.int32))  # fmt: skip
    _kernel.shortest_completions(*_predecessors(table), accept.astype(np.uint8), *columns, UNREACHABLE, *out)
    return tuple(x.tolist() for x in out)


@st.composite
def rule_tables(draw):
    """A small random table over a few symbols, some accepting states, some call moves."""
    n = draw(st.integers(1, 12))
    width = draw(st.integers(1, 4))
    cells = draw(st.lists(st.integers(-1, n - 1), min_size=n * width, max_size=n * width))
    table = np.asarray(cells, dtype=np.int32).reshape(n, width)
    accept = np.asarray(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    calls = draw(st.lists(st.tuples(*(st.integers(0, n - 1),) * 3), max_size=6))
    return table, accept, calls


@settings(max_examples=300, deadline=None)
@given(rule_tables())
def test_shortest_completions_match_the_reference(case):
    table, accept, calls = case
    assert _kernel_shortest(table, accept, calls) == _shortest_reference(table, accept, calls)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6).flatmap(lambda width: st.lists(st.lists(st.integers(-2, 2), min_size=width,
                                                                 max_size=width), max_size=40).map(
    lambda rows: np.asarray(rows, dtype=np.int32).reshape(len(rows), width))))
def test_row_classes_number_equal_rows_alike_in_order_of_first_appearance(matrix):
    classes: dict[tuple[int, ...], int] = {}
    expected = [classes.setdefault(tuple(row), len(classes)) for row in matrix.tolist()]
    class_of, first = fsm.classes_of_rows(matrix)
    assert class_of.tolist() == expected
    assert first.tolist() == [expected.index(c) for c in range(len(classes))]


def test_row_classes_refuses_rows_that_are_not_a_matrix():
    for rows, width in ((np.zeros(5, np.int32), 2), (np.zeros(4, np.int32), 0)):
        with pytest.raises(ValueError, match="row_classes"):
            _kernel.row_classes(rows, width)


@st.composite
def rule_blocks(draw):
    """Rules in class form as `lay_out_rules` takes them, with special symbols of a combined width and calls."""
    width = 256 + draw(st.integers(0, 3))
    blocks = []
    for _ in range(draw(st.integers(1, 4))):
        n = draw(st.integers(1, 4))
        column = st.lists(st.integers(-1, n - 1), min_size=n, max_size=n).map(tuple)
        columns = draw(st.lists(column, min_size=1, max_size=4, unique=True))  # canonical: classes differ
        if draw(st.booleans()) and (DEAD,) * n not in columns:  # a dead class, as most rules have
            columns.insert(draw(st.integers(0, len(columns))), (DEAD,) * n)
        table, c = np.asarray(columns, dtype=np.int32).T.copy(), len(columns)
        specials = draw(st.lists(st.sampled_from(range(256, width)), unique=True)) if width > 256 else []
        calls = draw(st.lists(st.integers(0, 5), unique=True, max_size=3))
        special_columns = draw(st.permutations([*specials, *(-1 - j for j in calls)]))
        k = len(special_columns)
        byte_classes = draw(st.integers(1, c))  # fewer than c: a class only special tokens (or calls) have
        symbol_class = np.asarray(draw(st.lists(st.integers(0, byte_classes - 1), min_size=256, max_size=256))
                                  + draw(st.lists(st.integers(0, c - 1), min_size=k, max_size=k)), dtype=np.int32)
        accepting = bytes(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
        blocks.append((n, table.tobytes(), symbol_class, accepting, np.asarray(special_columns, dtype=np.int32)))
    return blocks, width


def _lay_out_reference(blocks, width):
    """The definition: a symbol's class in every rule (its all-dead class where the rule lacks it) is its key; keys
    numbered by first symbol; each rule's block offset into place; calls rule by rule, call by call, states up."""
    keys, tables, base = [], [], 0
    for n, table, symbol_class, _, columns in blocks:
        table = np.frombuffer(table, dtype=np.int32).reshape(n, -1)
        dead = [c for c in range(table.shape[1]) if (table[:, c] == DEAD).all()]
        key = [int(symbol_class[x]) for x in range(256)] + [dead[0] if dead else -1] * (width - 256)
        for k, column in enumerate(columns.tolist()):
            if column >= 0:
                key[column] = int(symbol_class[256 + k])
        keys.append(key)
        tables.append((base, table))
        base += n
    numbered: dict[tuple[int, ...], int] = {}
    class_of = [numbered.setdefault(tuple(key[x] for key in keys), len(numbered)) for x in range(width)]
    first = [class_of.index(c) for c in range(len(numbered))]
    rows, calls = [], []
    for (base, table), key, (_, _, symbol_class, _, columns) in zip(tables, keys, blocks):
        for row in table.tolist():
            rows.append([DEAD if key[x] < 0 or row[key[x]] < 0 else row[key[x]] + base for x in first])
        for k, column in enumerate(columns.tolist()):
            if column < 0:
                calls += [(base + s, -1 - column, base + int(t)) for s, t in
                          enumerate(table[:, symbol_class[256 + k]].tolist()) if t >= 0]  # fmt: skip
    accept = [a for block in blocks for a in block[3]]
    return class_of, first, rows, accept, calls


@settings(max_examples=300, deadline=None)
@given(rule_blocks())
def test_lay_out_rules_matches_the_definition(case):
    blocks, width = case
    class_of, first, by_class, accept, *moves = _kernel.lay_out_rules(blocks, width)
    ints = [np.frombuffer(part, dtype=np.int32).tolist() for part in (class_of, first, by_class, *moves)]
    expected_class_of, expected_first, rows, expected_accept, calls = _lay_out_reference(blocks, width)
    assert ints[:2] == [expected_class_of, expected_first]
    assert ints[2] == [x for row in rows for x in row]
    assert list(accept) == expected_accept
    assert list(zip(*ints[3:6])) == calls
    table = np.asarray(rows, dtype=np.int32).reshape(len(rows), -1)
    assert ints[6:] == [part.tolist() for part in _predecessors(table)]  # read from the rules' own classes


def test_lay_out_rules_refuses_a_rule_it_could_not_trust():
    table, classes, accepting = np.asarray([1, -1, 0, 1], dtype=np.int32), np.zeros(257, np.int32), b"\0\1"
    call = np.asarray([-1], dtype=np.int32)
    good = (2, table, classes, accepting, call)
    assert _kernel.lay_out_rules([good], 256)  # the baseline the forgeries below depart from
    forged = [(2, np.asarray([2, -1, 0, 1], dtype=np.int32), classes, accepting, call),  # a state past the rule
              (2, table, np.full(257, 2, np.int32), accepting, call),  # a class past the table
              (2, table, classes, accepting, np.asarray([7], dtype=np.int32)),  # a special column among the bytes
              (2, table, classes, accepting, np.asarray([256], dtype=np.int32)),  # a column past the width
              (2, table, classes, b"\0", call),  # acceptance of one state short
              (3, table, classes, accepting, call),  # states that do not divide the table
              (2, table, classes, accepting)]  # a field short
    for rule in forged:
        with pytest.raises(ValueError, match="lay_out_rules"):
            _kernel.lay_out_rules([good, rule], 256)
    with pytest.raises(ValueError, match="lay_out_rules"):
        _kernel.lay_out_rules([], 256)


def test_the_graph_kernels_refuse_a_table_or_graph_they_could_not_trust():
    table = np.asarray([[1, -1], [0, 1]], dtype=np.int32)
    start, into = _predecessors(table)
    accept, reach = np.ones(2, dtype=np.uint8), np.empty(2, dtype=np.int32)
    none = np.zeros(0, dtype=np.int32)
    outs = (np.empty(2, np.int64), np.empty(2, np.uint8), np.empty(2, np.uint8), np.empty(2, np.int32),
            np.empty(2, np.int32))  # fmt: skip
    forged = [(start, np.asarray([0, 2, 1], dtype=np.int32)),  # a source past the last state
              (np.asarray([0, 2, 1], dtype=np.int32), into),  # start decreasing
              (start[:-1], into)]  # one start short
    for pred in forged:
        with pytest.raises(ValueError, match="bytes_to_boundary"):
            _kernel.bytes_to_boundary(*pred, accept, 3, reach)
        with pytest.raises(ValueError, match="shortest_completions"):
            _kernel.shortest_completions(*pred, accept, none, none, none, UNREACHABLE, *outs)



def test_completion_bounds_refuses_a_class_map_out_of_the_table(qwen_vocab):
    """`completion_bounds` reads the class form through each symbol's column: a map naming a column the table lacks
    (or too short for the bytes) is refused, not followed."""
    grammar = compile_rules(JSON_RULES, "value", qwen_vocab)
    trie = grammar.trie
    width = grammar._table.classes.shape[1]
    for bad in (np.full_like(grammar._table.symbol_class, width), grammar._table.symbol_class[:255]):
        with pytest.raises(ValueError, match="completion_bounds"):
            _kernel.completion_bounds(grammar._table.classes, np.ascontiguousarray(bad), grammar._symbol_hop,
                                      grammar._dist, grammar._rule_accept, grammar._hop_a, grammar._hop_b,
                                      trie.native, np.full(grammar.n_states, -1, dtype=np.int64),
                                      np.zeros(1, np.int32))  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(rule_tables(), st.integers(0, 6))
def test_bytes_to_boundary_match_the_reference(case, cap):
    table, accept, _ = case
    reach = np.empty(table.shape[0], dtype=np.int32)
    _kernel.bytes_to_boundary(*_predecessors(table), accept.astype(np.uint8), cap, reach)
    assert reach.tolist() == _reach_reference(table, accept, cap)


def test_real_grammars_match_the_reference(qwen_vocab):
    """The tables of a JSON-value grammar and a recursive schema, as `PushdownGrammar` lays them out."""
    for rules, start in ((JSON_RULES, "value"), schema_to_rules(TREE, whitespace="flexible")):
        grammar = compile_rules(rules, start, qwen_vocab)
        classes, symbol_class = grammar._table
        table, accept = classes[:, symbol_class], grammar._rule_accept  # the table by symbol
        calls = [(s, callee, cont) for s in range(grammar.n_states) for callee, cont in grammar._pushes.calls(s)]
        dist, final, kind, a, b = _kernel_shortest(table, accept, calls)
        assert (dist, final, kind, a, b) == _shortest_reference(table, accept, calls)
        assert all(final)  # a compiled grammar keeps only states that can finish
        assert dist == grammar._dist.tolist()
        assert grammar._table.symbol_class.tolist() == fsm.symbol_classes(table)[0].tolist()  # from the rules' classes


def test_first_class_into_finds_the_first_column_and_refuses_what_it_cannot():
    """The class of a symbol hop: the first column whose move reaches the target (classes are numbered by their first
    symbol, so it holds the canonical symbol); a state out of range, or a target its row never reaches, is refused."""
    classes = np.asarray([[1, 2, 1], [-1, 0, 0], [2, 2, 2]], dtype=np.int32)
    out = np.empty(4, dtype=np.int32)
    states, targets = np.asarray([0, 0, 1, 2], dtype=np.int32), np.asarray([1, 2, 0, 2], dtype=np.int32)
    _kernel.first_class_into(classes, states, targets, out)
    assert out.tolist() == [0, 1, 1, 0]
    for states, targets in (([3], [0]), ([-1], [0]), ([1], [2])):
        with pytest.raises(ValueError, match="first_class_into"):
            _kernel.first_class_into(classes, np.asarray(states, dtype=np.int32), np.asarray(targets, dtype=np.int32),
                                     np.empty(1, dtype=np.int32))
