"""Moved to `constrained.frontends.json_schema` (`vocabulary`, `rewrites`, `numbers`, `members`, `strings`, `keys`);
kept for one release: the public names of the old ``constrained.schema_keywords``, re-exported."""

from constrained.frontends.json_schema.keys import KeyFilter
from constrained.frontends.json_schema.members import counted_members
from constrained.frontends.json_schema.numbers import (
    Bound,
    decimal_between,
    integer_multiple_pattern,
    number_language,
    number_pattern,
)
from constrained.frontends.json_schema.rewrites import conjuncts, exclusive_branches, negate
from constrained.frontends.json_schema.strings import not_pattern_body
from constrained.frontends.json_schema.vocabulary import (
    ALL_PATTERNS,
    ANNOTATION_FORMATS,
    FORMAT_ALIASES,
    INTERNAL_KEYWORDS,
    KNOWN_UNENFORCED_FORMATS,
    NOT_INTEGER,
    NOT_PATTERN,
    NOT_STRINGS,
    REWRITTEN_KEYWORDS,
    internal_validators,
)

__all__ = [
    "NOT_PATTERN",
    "ALL_PATTERNS",
    "NOT_STRINGS",
    "NOT_INTEGER",
    "INTERNAL_KEYWORDS",
    "REWRITTEN_KEYWORDS",
    "FORMAT_ALIASES",
    "ANNOTATION_FORMATS",
    "KNOWN_UNENFORCED_FORMATS",
    "internal_validators",
    "negate",
    "exclusive_branches",
    "conjuncts",
    "Bound",
    "decimal_between",
    "number_pattern",
    "number_language",
    "integer_multiple_pattern",
    "counted_members",
    "not_pattern_body",
    "KeyFilter",
]
