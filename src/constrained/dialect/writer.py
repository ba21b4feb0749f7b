"""Pattern TEXT in the engine's dialect, written by the front ends: alternation, concatenation, repetition, escaped
literals, integer ranges and rule calls.

Every builder takes and returns pattern text (a `Pattern`: a string, or None for the empty language, which
`alt` drops and `cat` propagates), so a front end composes patterns without knowing the parser. The dialect is
`constrained.regex`'s: Python-`re`-compatible text plus ``(?@...)`` embedded automata and ``(?&=NAME|guard)`` rule
calls; every escaping of a literal or a class member is written here. Refuses: more than `MAX_ALTERNATION`
distinct alternatives in one alternation (`GrammarTooLargeError`) and a lone surrogate in a literal
(`UnsupportedSchemaError`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from constrained.errors import GrammarTooLargeError, UnsupportedSchemaError

__all__ = [
    "Pattern",
    "MAX_ALTERNATION",
    "escape_literal",
    "char_text",
    "class_member",
    "class_text",
    "alt",
    "cat",
    "rep",
    "one_of",
    "natural_range",
]

Pattern = str | None
"""A pattern, or None for the empty language (an unsatisfiable sub-schema)."""

MAX_ALTERNATION = 4096
"""Most distinct alternatives one alternation may list (a huge enum); beyond it GrammarTooLargeError."""

_SPECIAL = set("\\.^$*+?()[]{}|-/\"")


def escape_literal(text: str) -> str:
    """Escape literal text into the dialect (metacharacters backslashed, controls as \\xHH)."""
    if _SURROGATE.search(text):
        raise UnsupportedSchemaError("#", "enum", "lone surrogate in a literal string")
    return text.translate(_LITERAL_ESCAPES)


_LITERAL_ESCAPES = {**{ord(ch): "\\" + ch for ch in _SPECIAL},
                    **{code: f"\\x{code:02x}" for code in [*range(0x20), 0x7F]}}
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def char_text(cp: int) -> str:
    """One code point as a dialect literal outside a class: a metacharacter backslashed, printable ASCII as itself,
    anything else as in a class (`class_member`), so a surrogate code point is written, never embedded."""
    ch = chr(cp)
    if ch in _SPECIAL:
        return "\\" + ch
    return ch if 0x20 <= cp < 0x7F else class_member(cp)


def class_member(cp: int) -> str:
    """One code point written so it is literal inside ``[...]`` (and outside): ASCII letters and digits as
    themselves, other code points below U+10000 as ``\\xHH`` / ``\\uHHHH``, the rest as themselves."""
    if cp < 0x80 and chr(cp).isalnum():
        return chr(cp)
    if cp < 0x100:
        return f"\\x{cp:02x}"
    return f"\\u{cp:04x}" if cp < 0x10000 else chr(cp)


def class_text(ranges: Sequence[tuple[int, int]]) -> str:
    """A dialect fragment matching one scalar of ``ranges`` (sorted, disjoint, non-empty): a literal for one
    scalar, else a class."""
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return char_text(ranges[0][0])
    parts = []
    for lo, hi in ranges:
        if lo == hi:
            parts.append(class_member(lo))
        elif hi == lo + 1:
            parts.append(class_member(lo) + class_member(hi))
        else:
            parts.append(f"{class_member(lo)}-{class_member(hi)}")
    return "[" + "".join(parts) + "]"


def alt(parts: Sequence[Pattern]) -> Pattern:
    """The alternation of the non-empty parts, deduplicated in order (None: no part; one part: itself)."""
    seen = {p: None for p in parts if p is not None}  # ordered dedup, linear in len(parts)
    if not seen:
        return None
    if len(seen) > MAX_ALTERNATION:
        raise GrammarTooLargeError("alternatives", MAX_ALTERNATION, f"{len(seen)} distinct alternatives")
    return next(iter(seen)) if len(seen) == 1 else "(?:" + "|".join(seen) + ")"


def cat(*parts: Pattern) -> Pattern:
    """The concatenation of the parts (None when any part is the empty language)."""
    texts = [p for p in parts if p is not None]
    return None if len(texts) < len(parts) else "".join(texts)


def rep(p: str, lo: int, hi: int | None) -> str:
    """``p`` repeated ``lo`` to ``hi`` times (None: unbounded), written in the shortest quantifier."""
    if hi == 0 or p == "":
        return ""
    g = f"(?:{p})"
    if hi is None:
        return g + ("*" if lo == 0 else "+" if lo == 1 else f"{{{lo},}}")
    if lo == hi:
        return g if lo == 1 else f"{g}{{{lo}}}"
    return g + ("?" if (lo, hi) == (0, 1) else f"{{{lo},{hi}}}")


# -- integer ranges -------------------------------------------------------------------------------------------------


def _same_length_range(a: str, b: str) -> str:
    """Digit strings of len(a) == len(b) between a and b inclusive."""
    if a == b:
        return a
    if a[0] == b[0]:
        return a[0] + _same_length_range(a[1:], b[1:])
    n = len(a) - 1
    if a[1:] == "0" * n and b[1:] == "9" * n:
        return f"[{a[0]}-{b[0]}]" + (f"[0-9]{{{n}}}" if n > 1 else "[0-9]" if n else "")
    parts = [a[0] + _same_length_range(a[1:], "9" * n)]
    lo, hi = int(a[0]) + 1, int(b[0]) - 1
    if lo <= hi:
        cls = str(lo) if lo == hi else f"[{lo}-{hi}]"
        parts.append(cls + (f"[0-9]{{{n}}}" if n > 1 else "[0-9]" if n else ""))
    parts.append(b[0] + _same_length_range("0" * n, b[1:]))
    return "(?:" + "|".join(parts) + ")"


def natural_range(lo: int, hi: int) -> Pattern:
    """Decimal naturals (no leading zeros) n with lo <= n <= hi, 0 <= lo."""
    if lo > hi:
        return None
    parts: list[str] = []
    full_from: int | None = None  # run of lengths whose whole [10^(L-1), 10^L - 1] is covered
    for length in range(len(str(lo)), len(str(hi)) + 1):
        first = 0 if length == 1 else 10 ** (length - 1)
        a, b = max(lo, first), min(hi, 10**length - 1)
        if length > 1 and a == first and b == 10**length - 1:
            full_from = length if full_from is None else full_from
            continue
        if full_from is not None:
            parts.append(_full_lengths(full_from, length - 1))
            full_from = None
        parts.append(_same_length_range(str(a), str(b)))
    if full_from is not None:
        parts.append(_full_lengths(full_from, len(str(hi))))
    return alt(parts)


def _full_lengths(l1: int, l2: int) -> str:
    return f"[1-9][0-9]{{{l1 - 1}}}" if l1 == l2 else f"[1-9][0-9]{{{l1 - 1},{l2 - 1}}}"


def one_of(distinct: list[str]) -> str:
    """Alternatives known to be distinct (a trie node's branches start with distinct characters): `alt` without
    its dedup, for the many small nodes of a key trie."""
    return distinct[0] if len(distinct) == 1 else "(?:" + "|".join(distinct) + ")"
