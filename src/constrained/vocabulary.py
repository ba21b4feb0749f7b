"""Vocabulary: exact token bytes from llama.cpp, never decoded lossily.

CONTRACT STUB (lead): fields below are the interface the token index and the matcher use.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True, eq=False)
class Vocabulary:
    """Every token's exact bytes and role. Token id == index into ``tokens``."""

    tokens: tuple[bytes, ...]
    """Raw bytes of each token's piece (``llama_token_to_piece``, full length, special rendering on)."""
    normal_ids: frozenset[int] | None = None
    """Ids of ordinary text tokens (llama attr NORMAL or BYTE) that may appear inside a grammar by their bytes.
    Everything else (control, user-defined, unknown, unused) is special: never allowed unless a grammar names it."""
    eos_token_ids: frozenset[int] = field(default_factory=frozenset)
    """End-of-generation ids (EOS, EOT, EOM...): allowed only in accepting states, and they end the sequence."""
    special_ids_by_name: dict[str, int] = field(default_factory=dict)
    """Text of every special (non-normal) token → its id, e.g. ``{"<tool_call>": 151657}``."""
    name: str = ""
    """Human label (model file name) for messages and benchmarks."""
