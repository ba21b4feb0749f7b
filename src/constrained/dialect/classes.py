"""The dialect's named character classes: ``\\d \\w \\s`` (and their negations) and ``.``, as sets of scalars.

Owns what each shorthand means in the two languages the parser reads: the dialect itself (ASCII meanings, as
documented in `constrained.dialect.parser`) and the ECMA-262 patterns of JSON Schema, which `jsonschema` also runs
through Python's ``re`` (Unicode ``\\d \\w``, a different ``\\s``): `shorthand_ranges` gives the meaning both engines
agree on, or with ``wide`` one covering either.

Imports only `constrained.dialect.nodes`.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from constrained.dialect.nodes import MAX_SCALAR, SURROGATES, Range, negate_ranges, normalize_ranges

__all__ = ["DOT", "ECMA_DOT", "shorthand_ranges"]

_DIGIT = ((0x30, 0x39),)
_WORD = normalize_ranges([(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)])
_SPACE = normalize_ranges([(0x09, 0x0D), (0x20, 0x20)])
# ECMA-262 WhiteSpace ∪ LineTerminator, intersected with Python's str.isspace() (\ufeff is ECMA-only): a string
# the mask admits then satisfies both an ECMA validator and Python's `re`, which `jsonschema` uses.
_ECMA_SPACE = normalize_ranges(
    [(0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A), (0x2028, 0x2029),
     (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000)]
)
# The complement side uses the union of both definitions for the same reason.
_ECMA_WIDE_SPACE = normalize_ranges(list(_ECMA_SPACE) + [(0x1C, 0x1F), (0x85, 0x85), (0xFEFF, 0xFEFF)])
_ECMA_NOT_SPACE = negate_ranges(_ECMA_WIDE_SPACE)
DOT = negate_ranges(((0x0A, 0x0A),))
"""``.`` in the dialect: any scalar but ``\\n``."""
ECMA_DOT = negate_ranges(normalize_ranges([(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]))
"""``.`` in ECMA-262: any scalar but a line terminator."""


def _every_scalar() -> str:
    """Every Unicode scalar value once, in order (built by decoding UTF-32: ~10x faster than joining chr())."""
    scalars = np.concatenate(
        (np.arange(SURROGATES[0], dtype="<u4"), np.arange(SURROGATES[1] + 1, MAX_SCALAR + 1, dtype="<u4"))
    )
    return scalars.tobytes().decode("utf-32-le")


@functools.cache
def _python_class(shorthand: str) -> tuple[Range, ...]:
    """The scalars Python's ``re`` (str patterns: Unicode) matches with ``\\d`` or ``\\w`` — jsonschema's meaning.

    Found by scanning every scalar once (~50 ms, once per process): a match's span maps back to scalars
    (position p is scalar p below the surrogates, p + 0x800 above them).
    """
    gap = SURROGATES[0]
    ranges = []
    for match in re.finditer(shorthand + "+", _every_scalar()):
        lo, hi = match.start(), match.end() - 1
        for a, b in ((lo, min(hi, gap - 1)), (max(lo, gap), hi)):  # a run across the gap: two ranges
            if a <= b:
                ranges.append((a if a < gap else a + 0x800, b if b < gap else b + 0x800))
    return normalize_ranges(ranges)


def shorthand_ranges(letter: str, ecma: bool, wide: bool = False, exact: bool = False) -> tuple[Range, ...]:
    """A class shorthand's scalars. ECMA patterns are also run by Python's ``re`` (jsonschema), whose ``\\d \\w``
    are Unicode and ``\\s`` differs: the narrow meaning is what both match (for languages a mask admits), the
    wide one at least what either matches (for complements: keys no pattern matches), exactly that with ``exact``
    (inside a negated class, whose complement must stay narrow yet not needlessly small)."""
    if ecma:
        if letter in "dw":  # Python's extra members are all non-ASCII: the wide side takes every non-ASCII scalar
            ascii_ = _DIGIT if letter == "d" else _WORD
            if wide:
                return _python_class("\\" + letter) if exact else normalize_ranges([*ascii_, (0x80, MAX_SCALAR)])
            return ascii_
        if letter in "DW":
            ascii_ = _DIGIT if letter == "D" else _WORD
            return negate_ranges(ascii_) if wide else negate_ranges(_python_class("\\" + letter.lower()))
        if letter == "s":
            return _ECMA_WIDE_SPACE if wide else _ECMA_SPACE
        return negate_ranges(_ECMA_SPACE) if wide else _ECMA_NOT_SPACE
    if letter == "d":
        return _DIGIT
    if letter == "D":
        return negate_ranges(_DIGIT)
    if letter == "w":
        return _WORD
    if letter == "W":
        return negate_ranges(_WORD)
    if letter == "s":
        return _ECMA_SPACE if ecma else _SPACE
    return _ECMA_NOT_SPACE if ecma else negate_ranges(_SPACE)
