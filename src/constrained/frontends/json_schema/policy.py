"""The JSON Schema front end's options and limits that more than one of its modules reads, and the refusal of a
schema one pattern could only approximate (`PatternApproximates`)."""

from __future__ import annotations

from typing import Literal

from constrained.errors import UnsupportedSchemaError

__all__ = ["Whitespace", "IMPLICIT_EXTRA_DEPTH", "MAX_PATTERN_CHARS", "PatternApproximates"]

Whitespace = Literal["compact", "spaced", "flexible"]
"""``compact``: no insignificant whitespace; ``spaced``: json.dumps's default separators (``", "`` and ``": "``,
nothing else), the layout chat templates' ``tojson`` writes; ``flexible``: a bounded blank in every slot."""
IMPLICIT_EXTRA_DEPTH = 1
"""Most containers the value of an extra property may nest when ``additionalProperties`` is absent
(they appear on nearly every object, so they are kept shallow; an explicit ``true`` gets any_value_depth)."""
MAX_PATTERN_CHARS = 2_000_000
"""Largest pattern produced; beyond it GrammarTooLargeError("regex_length")."""


class PatternApproximates(UnsupportedSchemaError):
    """One pattern could only approximate the schema (``schema_to_pattern(exact=True)``): a recursive ``$ref``, an
    open-ended value, containers deeper than ``max_depth``."""
