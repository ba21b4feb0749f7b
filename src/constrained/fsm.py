"""Regex AST → byte-level DFA: the finite-state grammar every mask is computed from.

CONTRACT STUB (lead): the `DFA` dataclass below is the interface between the regex/FSM compiler and
the token index. Implementer: keep the fields and their meaning; add what you need.

Alphabet: symbols 0..255 are bytes; symbols 256+i are the special-token terminals named in the
pattern (``(?&<tool_call>)``), in ``DFA.special_names`` order. A special-token symbol is consumed
by exactly one vocabulary token (the one whose text is that name); bytes are consumed by ordinary
tokens' byte strings.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEAD = -1
"""Transition target meaning "no continuation": the byte is not allowed here."""


@dataclass(frozen=True, kw_only=True, eq=False)
class DFA:
    """An immutable, minimal, trimmed deterministic automaton over bytes + special-token symbols.

    Trimmed: every state can reach an accepting state (dead ends are removed, so "allowed" at the byte level
    always means "can still complete").
    """

    transitions: np.ndarray
    """int32 [n_states, 256 + len(special_names)]; ``DEAD`` (-1) where there is no transition. Read-only."""
    accepting: np.ndarray
    """bool [n_states]."""
    initial: int
    """The start state (always 0)."""
    special_names: tuple[str, ...]
    """Names (token texts) of the special-token terminals; symbol ``256 + i`` is ``special_names[i]``."""
    distance: np.ndarray
    """int32 [n_states]: shortest number of symbols from the state to an accepting state (0 if accepting)."""
    fingerprint: str
    """sha256 hex of the canonical transition table: equal languages-as-compiled hash equal (cache key part)."""

    @property
    def n_states(self) -> int:
        return int(self.transitions.shape[0])
