"""The token trie of a vocabulary: every normal token's bytes, sorted and flattened in preorder.

What the mask kernels walk (`constrained.index`, `constrained.shortcut`, `constrained.pushdown`): built once per
vocabulary and shared by every grammar over it. The kernels take it as one object, ``TokenTrie.native`` (a
`_kernel.Trie`: the arrays below, held and validated once when made), never as loose arrays.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import numpy as np

from constrained import _kernel
from constrained.vocabulary import Vocabulary

__all__ = ["TokenTrie", "token_trie"]

@dataclass(frozen=True, kw_only=True, eq=False)
class TokenTrie:
    """The normal tokens of one vocabulary as a preorder-flattened byte trie (node 0 is the root)."""

    node_byte: np.ndarray
    """uint8 [n_nodes]: the byte on the edge into each node (0 for the root)."""
    node_depth: np.ndarray
    """int32 [n_nodes]: length of the prefix each node spells."""
    node_end: np.ndarray
    """int32 [n_nodes]: one past the last node of the node's subtree."""
    tok_start: np.ndarray
    """int32 [n_nodes + 1]: CSR offsets into ``tok_ids`` of the tokens ending exactly at each node."""
    tok_ids: np.ndarray
    """int32 [n_tokens]: token ids in trie (byte-lexicographic) order."""
    root_child: np.ndarray
    """int32 [256]: the depth-1 node for each first byte, -1 when no token starts with it."""
    single_byte: np.ndarray
    """bool [256]: whether some normal token is exactly that one byte."""
    max_depth: int
    """Length in bytes of the longest normal token."""
    vocab_size: int
    """Number of ids in the vocabulary (normal or not)."""
    native: _kernel.Trie
    """The same trie as the one object every kernel walk takes (validated when made: the kernels trust it)."""

    @classmethod
    def build(cls, vocab: Vocabulary) -> TokenTrie:
        """Sort the normal, non-empty, non-EOS tokens by bytes and flatten their trie (one kernel pass)."""
        tokens = vocab.tokens
        size = len(tokens)
        lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=size)
        offsets = np.zeros(size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        include = np.zeros(size, dtype=np.uint8)
        normal = vocab.normal_ids if vocab.normal_ids is not None else range(size)
        include[np.fromiter(normal, dtype=np.int64, count=len(normal))] = 1
        include[np.fromiter(vocab.eos_token_ids, dtype=np.int64, count=len(vocab.eos_token_ids))] = 0
        include[lengths == 0] = 0
        blob = b"".join(tokens)
        cap = len(blob) + 1
        node_byte = np.zeros(cap, dtype=np.uint8)
        node_depth = np.zeros(cap, dtype=np.int32)
        node_end = np.zeros(cap, dtype=np.int32)
        tok_ids = np.zeros(size, dtype=np.int32)
        terminal = np.zeros(size, dtype=np.int32)
        n_nodes, n_tokens, max_depth = _kernel.build_trie(
            blob, offsets, include, node_byte, node_depth, node_end, tok_ids, terminal
        )
        node_byte, node_depth, node_end = node_byte[:n_nodes].copy(), node_depth[:n_nodes].copy(), node_end[:n_nodes].copy()
        tok_ids, terminal = tok_ids[:n_tokens].copy(), terminal[:n_tokens]
        tok_start = np.searchsorted(terminal, np.arange(n_nodes + 1, dtype=np.int32), side="left").astype(np.int32)
        depth_one = np.flatnonzero(node_depth == 1)
        root_child = np.full(256, -1, dtype=np.int32)
        root_child[node_byte[depth_one]] = depth_one
        single_byte = np.zeros(256, dtype=bool)
        single_byte[node_byte[depth_one]] = tok_start[depth_one + 1] > tok_start[depth_one]
        for array in (node_byte, node_depth, node_end, tok_start, tok_ids, root_child, single_byte):
            array.flags.writeable = False
        # made once, validated once: the kernels trust it
        native = _kernel.Trie(node_byte, node_depth, node_end, tok_start, tok_ids, root_child, int(max_depth),
                              len(tokens))  # fmt: skip
        return cls(
            node_byte=node_byte, node_depth=node_depth, node_end=node_end, tok_start=tok_start, tok_ids=tok_ids,
            root_child=root_child, single_byte=single_byte, max_depth=int(max_depth), vocab_size=len(tokens),
            native=native,
        )  # fmt: skip

    @property
    def n_nodes(self) -> int:
        return int(self.node_byte.shape[0])

    @property
    def n_tokens(self) -> int:
        return int(self.tok_ids.shape[0])


_tries_by_vocab: weakref.WeakKeyDictionary[Vocabulary, TokenTrie] = weakref.WeakKeyDictionary()
_tries_by_fingerprint: dict[str, TokenTrie] = {}
_tries_lock = threading.Lock()


def token_trie(vocab: Vocabulary) -> TokenTrie:
    """The trie of a vocabulary, built once per process (cached by object, then by fingerprint)."""
    with _tries_lock:
        trie = _tries_by_vocab.get(vocab)
        if trie is None:
            fingerprint = vocab.fingerprint
            trie = _tries_by_fingerprint.get(fingerprint)
            if trie is None:
                trie = TokenTrie.build(vocab)
                if len(_tries_by_fingerprint) >= 8:
                    _tries_by_fingerprint.pop(next(iter(_tries_by_fingerprint)))
                _tries_by_fingerprint[fingerprint] = trie
            _tries_by_vocab[vocab] = trie
        return trie
