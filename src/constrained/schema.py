"""Moved to `constrained.frontends.json_schema` (and its lexemes to `constrained.dialect.json_lexemes`); kept for one
release: the public names of the old ``constrained.schema``, re-exported."""

from constrained.dialect.json_lexemes import (
    EXPONENT_DIGITS,
    FLEXIBLE_WS,
    FRACTION_DIGITS,
    INTEGER_DIGITS,
    STRING,
    STRING_FORMATS,
    UNIT,
)
from constrained.dialect.writer import Pattern
from constrained.frontends.json_schema.depth import MAX_SCHEMA_DEPTH, check_schema_depth, recursion_room
from constrained.frontends.json_schema.policy import (
    IMPLICIT_EXTRA_DEPTH,
    MAX_PATTERN_CHARS,
    PatternApproximates,
    Whitespace,
)
from constrained.frontends.json_schema.translate import clear_caches, open_at_root, schema_to_pattern, schema_to_rules
from constrained.frontends.json_schema.vocabulary import ANNOTATION_KEYWORDS, SUPPORTED_KEYWORDS, UNSUPPORTED_KEYWORDS

__all__ = [
    "schema_to_pattern",
    "schema_to_rules",
    "PatternApproximates",
    "open_at_root",
    "clear_caches",
    "ANNOTATION_KEYWORDS",
    "SUPPORTED_KEYWORDS",
    "UNSUPPORTED_KEYWORDS",
    "STRING_FORMATS",
    "INTEGER_DIGITS",
    "EXPONENT_DIGITS",
    "IMPLICIT_EXTRA_DEPTH",
    "MAX_PATTERN_CHARS",
    "MAX_SCHEMA_DEPTH",
    "FRACTION_DIGITS",
    "FLEXIBLE_WS",
    "UNIT",
    "STRING",
    "Pattern",
    "Whitespace",
    "check_schema_depth",
    "recursion_room",
]
