"""Moved to `constrained.dialect` (nodes, classes, parser, json_string); kept for one release.

Re-exports the public names other code reads from here; new code imports from `constrained.dialect.*`.
"""

from __future__ import annotations

from constrained.dialect.json_string import json_char_pattern, json_string_body_pattern
from constrained.dialect.nodes import (
    ANY_SCALAR,
    MAX_SCALAR,
    Alternation,
    Automaton,
    CharSet,
    Concat,
    Empty,
    Node,
    Range,
    Repeat,
    Special,
    normalize_ranges,
    special_names,
    utf8_sequences,
)
from constrained.dialect.parser import automaton_text, clear_caches, parse
from constrained.dialect.writer import class_text

__all__ = [
    "MAX_SCALAR",
    "Range",
    "Empty",
    "CharSet",
    "Special",
    "Concat",
    "Alternation",
    "Repeat",
    "Automaton",
    "Node",
    "parse",
    "special_names",
    "clear_caches",
    "utf8_sequences",
    "json_string_body_pattern",
    "normalize_ranges",
    "class_text",
    "json_char_pattern",
    "ANY_SCALAR",
    "automaton_text",
]
