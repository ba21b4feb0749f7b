"""JSON's lexemes as pattern text in the engine's dialect: a string body's unit, a string, numbers, scalars, the
whitespace slot, and the string formats' patterns.

What a JSON-shaped grammar is made of, for the front end that writes one (`constrained.frontends.json_schema`) and
the mask layers that recognise its pieces (`constrained.shortcut`: the string body) without importing a front end.
Pure text and data; the formats are package data under constrained/grammars/formats/, read once each.
"""

from __future__ import annotations

import functools
import pathlib

__all__ = [
    "INTEGER_DIGITS",
    "FRACTION_DIGITS",
    "EXPONENT_DIGITS",
    "FLEXIBLE_WS",
    "FORMAT_DIR",
    "STRING_FORMATS",
    "format_body",
    "UNIT",
    "STRING",
    "INTEGER",
    "NUMBER",
    "SCALAR",
    "SHORT_ESCAPES",
]

# -- policy constants: how long a number the unbounded lexemes take -----------------------------------------------

INTEGER_DIGITS = 15
"""Most digits in the integer part of a number the pattern accepts on a side with no explicit bound."""
FRACTION_DIGITS = 15
"""Most digits after the decimal point."""
EXPONENT_DIGITS = 2
"""Most exponent digits (unbounded numbers only): keeps every value finite as an IEEE double."""
FLEXIBLE_WS = r"(?:[ ]|\n[ ]{0,20})?"
"""One insignificant-whitespace slot in the flexible policy: nothing, one space, or one newline plus at
most 20 spaces (json.dumps separators and indent output). Bounded, so a model cannot loop on blanks."""

# -- string formats -------------------------------------------------------------------------------------------------

FORMAT_DIR = pathlib.Path(__file__).resolve().parent.parent / "grammars" / "formats"
"""The format patterns: package data of ``constrained`` (shipped in the wheel; see grammars/README.md)."""
STRING_FORMATS = ("date", "time", "date-time", "uuid", "email", "ipv4", "uri", "uri-reference", "hostname", "byte")
"""String formats enforced, each from constrained/grammars/formats/<name>.regex (the decoded string's pattern)."""


@functools.cache
def format_body(name: str) -> str:
    """The pattern of a string format, loaded once from its declarative source file."""
    text = (FORMAT_DIR / f"{name}.regex").read_text(encoding="utf-8")
    return "".join(line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))


# -- lexemes ---------------------------------------------------------------------------------------------------------

UNIT = r'(?:[^"\\\x00-\x1f]|\\["\\bfnrt]|\\u00[01][0-9a-f])'
"""One JSON-encoded character of a string body as json.dumps(ensure_ascii=False) writes it."""
STRING = f'"{UNIT}*"'
"""A JSON string, any body."""
INTEGER = rf"(?:0|-?[1-9][0-9]{{0,{INTEGER_DIGITS - 1}}})"
"""An integer of at most `INTEGER_DIGITS` digits (never ``-0``)."""
NUMBER = (
    rf"-?(?:0|[1-9][0-9]{{0,{INTEGER_DIGITS - 1}}})(?:\.[0-9]{{1,{FRACTION_DIGITS}}})?"
    rf"(?:[eE][+\-]?[0-9]{{1,{EXPONENT_DIGITS}}})?"
)
"""A number: at most `INTEGER_DIGITS` integer digits, `FRACTION_DIGITS` fraction digits, `EXPONENT_DIGITS`
exponent digits."""
SCALAR = f"(?:null|true|false|{NUMBER}|{STRING})"
"""Any scalar: null, a boolean, a `NUMBER`, a `STRING` (one group: ``SCALAR[3:-1]`` is its alternatives)."""
SHORT_ESCAPES = {"\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t"}
"""The control characters JSON spells with a one-letter escape, and the letter."""
