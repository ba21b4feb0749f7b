"""Type stub of the native extension constrained._kernel (C, built from src/constrained/kernel/, one source per
concern): its functions take numpy arrays (C-contiguous, of the dtype each docstring names) and the token trie as
one `Trie`, write their outputs in place, and return ints, tuples or None. ValueError on anything out of range."""

from collections.abc import Sequence
from typing import Any

import numpy as np

_Array = np.ndarray[Any, Any]
_Bytes = _Array | bytes | bytearray | memoryview

class Trie:
    """A preorder-flattened token trie as one object: its arrays held, and validated once, when made."""

    def __new__(
        cls, node_byte: _Array, node_depth: _Array, node_end: _Array, tok_start: _Array, tok_ids: _Array,
        root_child: _Array, max_depth: int, vocab_size: int,
    ) -> Trie: ...  # fmt: skip
    @property
    def n_nodes(self) -> int: ...
    @property
    def n_tokens(self) -> int: ...
    @property
    def max_depth(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...

# trie.c
def build_trie(
    blob: _Bytes, offsets: _Array, include: _Array, node_byte: _Array, node_depth: _Array, node_end: _Array,
    tok_ids: _Array, terminal: _Array,
) -> tuple[int, int, int]: ...  # fmt: skip
def subtree_deepest(trie: Trie, out: _Array) -> None: ...
def min_tokenization(symbols: _Array, trie: Trie, best: _Array) -> None: ...

# walks.c
def check(classes: _Array, symbol_class: _Array) -> None: ...
def walk(
    classes: _Array, symbol_class: _Array, state: int, trie: Trie, out_ids: _Array, out_next: _Array,
    scratch: _Array,
) -> int: ...  # fmt: skip
def walk_rule(
    classes: _Array, symbol_class: _Array, state: int, boundary: _Array, roots: _Array, trie: Trie,
    out_ids: _Array, out_next: _Array, out_exit_nodes: _Array, out_exit_states: _Array, scratch: _Array,
) -> tuple[int, int]: ...  # fmt: skip
def rule_exits(
    classes: _Array, symbol_class: _Array, boundary: _Array, reach: _Array, starts: _Array, start_states: _Array,
    trie: Trie, deepest: _Array, out_exit_nodes: _Array, out_exit_states: _Array,
) -> int: ...  # fmt: skip
def walk_family(
    class_table: _Array, symbol_class: _Array, starts: _Array, boundary: _Array, roots: _Array, trie: Trie,
    out_member: _Array, out_ids: _Array, out_next: _Array, out_exit_member: _Array, out_exit_nodes: _Array,
    out_exit_states: _Array,
) -> tuple[int, int]: ...  # fmt: skip

# template.c
def walk_exits(transitions: _Array, width: int, state: int, trie: Trie, out_nodes: _Array, out_states: _Array) -> int: ...
def template_map(
    classes: _Array, symbol_class: _Array, state: int, template: _Array, template_width: int, template_start: int,
    out_map: _Array,
) -> bool: ...  # fmt: skip
def walk_template(
    classes: _Array, symbol_class: _Array, state: int, template: _Array, map: _Array, pure_bits: _Array,
    exit_nodes: _Array, exit_tstate: _Array, trie: Trie, out_bits: _Array, out_ids: _Array, out_next: _Array,
    scratch: _Array,
) -> tuple[int, int]: ...  # fmt: skip

# bits.c
def bits_to_ids(bits: _Array, vocab_size: int, value: int, out: _Array) -> int: ...
def ids_to_bits(ids: _Array, vocab_size: int, out: _Array) -> int: ...
def or_bits(masks: Sequence[_Array], out: _Array) -> int: ...
def apply_allowed(logits: _Array, allowed: _Array) -> None: ...
def apply_disallowed(logits: _Array, disallowed: _Array) -> None: ...
def apply_bytemask(logits: _Array, keep: _Array) -> None: ...

# tables.c
def expand_runs(values: _Array, lengths: _Array, lo: int, hi: int, out: _Array) -> bool: ...
def expand_classes(class_table: _Array, symbol_class: _Array, out: _Array) -> None: ...
def row_classes(rows: _Bytes, width: int) -> tuple[bytes, bytes]: ...
def lay_out_rules(rules: Sequence[tuple[Any, ...]], width: int) -> tuple[Any, ...]: ...
# (rules: (n_states, class_table, symbol_class, accepting, columns) each; returns nine int32/uint8 byte strings)

# graphs.c
def shortest_completions(
    pred_start: _Bytes, pred: _Bytes, rule_accept: _Array, call_src: _Bytes, call_callee: _Bytes, call_cont: _Bytes,
    unreachable: int, dist: _Array, final: _Array, hop_kind: _Array, hop_a: _Array, hop_b: _Array,
) -> None: ...  # fmt: skip
def first_class_into(classes: _Array, states: _Array, targets: _Array, out: _Array) -> None: ...
def bytes_to_boundary(pred_start: _Bytes, pred: _Bytes, boundary: _Array, cap: int, reach: _Array) -> None: ...
def completion_bounds(
    classes: _Array, symbol_class: _Array, symbol_hop: _Array, dist: _Array, rule_accept: _Array, hop_a: _Array,
    hop_b: _Array, trie: Trie, ub: _Array, states: _Array,
) -> None: ...  # fmt: skip
def follow_hops(classes: _Array, symbol_class: _Array, hop: _Array, state: int, chain: _Array, symbols: _Array) -> int: ...
