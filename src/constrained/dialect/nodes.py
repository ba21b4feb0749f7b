"""The dialect's values: AST nodes over Unicode scalar values, the scalar-range algebra, and the UTF-8 view.

Owns what a parsed pattern *is* (see `constrained.dialect.parser` for the text it comes from): the immutable node
classes (`CharSet` over scalars, `Special`, `Concat`, `Alternation`, `Repeat`, `Empty`, `Automaton`), the
canonical form of a set of scalars (`normalize_ranges`: sorted, merged, surrogate-free) with its set operations,
`special_names` (the special-token symbols of a node, in numbering order) and `utf8_sequences`, which turns a
`CharSet` into byte-range sequences matching exactly the UTF-8 encodings of its scalars (the automata compile
them into NFA edges).

Imports nothing of the engine.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

__all__ = [
    "MAX_SCALAR",
    "SURROGATES",
    "Range",
    "Empty",
    "CharSet",
    "Special",
    "Concat",
    "Alternation",
    "Repeat",
    "Automaton",
    "Node",
    "normalize_ranges",
    "negate_ranges",
    "subtract_ranges",
    "intersect_ranges",
    "ANY_SCALAR",
    "special_names",
    "utf8_sequences",
]

MAX_SCALAR = 0x10FFFF
"""The largest Unicode scalar value."""

SURROGATES = (0xD800, 0xDFFF)
"""The UTF-16 surrogate code points (inclusive): code points, but not scalar values, so never in a `CharSet`."""

Range = tuple[int, int]
"""An inclusive range of code points (or of bytes, in a UTF-8 sequence)."""


# ---------------------------------------------------------------------------------------------------------- AST


@dataclass(frozen=True, kw_only=True, slots=True)
class Empty:
    """Matches the empty string."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CharSet:
    """Matches one Unicode scalar value from a set (possibly empty: then it matches nothing)."""

    ranges: tuple[Range, ...]
    """Sorted, disjoint, non-adjacent inclusive code point ranges; never contains a surrogate."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Special:
    """Matches one special-token terminal (a symbol of its own, not bytes)."""

    name: str
    """The special token's text, e.g. ``"<tool_call>"``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Concat:
    """Matches its items one after the other."""

    items: tuple[Node, ...]
    """At least two items."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Alternation:
    """Matches any one of its items."""

    items: tuple[Node, ...]
    """At least two items."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Repeat:
    """Matches ``item`` between ``min`` and ``max`` times."""

    item: Node
    """The repeated node."""
    min: int
    """Fewest repetitions."""
    max: int | None
    """Most repetitions; ``None`` means unbounded."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Automaton:
    """Matches the byte strings a deterministic automaton accepts (states 0..n_states-1, start 0); lets a
    language computed elsewhere (an intersection, a complement) travel inside pattern text."""

    n_states: int
    """At least one."""
    accepting: tuple[int, ...]
    """Accepting states, ascending (0 among them: the empty string matches)."""
    edges: tuple[tuple[int, int, int, int], ...]
    """(source, lo, hi, target) with inclusive byte ranges, sorted by (source, lo), disjoint per source, adjacent
    ranges with one target merged."""


Node = Empty | CharSet | Special | Concat | Alternation | Repeat | Automaton


# ----------------------------------------------------------------------------------------------- character sets


def normalize_ranges(ranges: list[Range]) -> tuple[Range, ...]:
    """Sort, merge and drop surrogates: the canonical `CharSet.ranges` form."""
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    result: list[Range] = []
    s_lo, s_hi = SURROGATES
    for lo, hi in out:
        if hi < s_lo or lo > s_hi:
            result.append((lo, hi))
            continue
        if lo < s_lo:
            result.append((lo, s_lo - 1))
        if hi > s_hi:
            result.append((s_hi + 1, hi))
    return tuple(result)


def negate_ranges(ranges: tuple[Range, ...]) -> tuple[Range, ...]:
    """All scalar values not in ``ranges``."""
    out: list[Range] = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_SCALAR:
        out.append((nxt, MAX_SCALAR))
    return normalize_ranges(out)


def subtract_ranges(ranges: tuple[Range, ...], removed: tuple[Range, ...]) -> tuple[Range, ...]:
    """Set difference of two normalized range tuples."""
    return intersect_ranges(ranges, negate_ranges(removed))


def intersect_ranges(a: tuple[Range, ...], b: tuple[Range, ...]) -> tuple[Range, ...]:
    """Intersection of two normalized range tuples."""
    out: list[Range] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


ANY_SCALAR = negate_ranges(())
"""Every Unicode scalar value."""


def special_names(node: Node) -> tuple[str, ...]:
    """Distinct special-token names in order of first appearance (symbol ``256 + i`` is the i-th)."""
    seen: dict[str, None] = {}
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Special):
            seen.setdefault(n.name, None)
        elif isinstance(n, (Concat, Alternation)):
            stack.extend(reversed(n.items))
        elif isinstance(n, Repeat):
            stack.append(n.item)
    return tuple(seen)


# ------------------------------------------------------------------------------------------------------ UTF-8


@functools.lru_cache(maxsize=4096)
def utf8_sequences(ranges: tuple[Range, ...]) -> tuple[tuple[Range, ...], ...]:
    """Byte-range sequences matching exactly the UTF-8 encodings of the scalars in ``ranges``.

    The standard split (as Rust's ``utf8-ranges``): first by encoded length, then until every continuation byte
    position spans a full or aligned range, so each sequence is a product of byte ranges and invalid UTF-8
    (overlongs, surrogates, > U+10FFFF) is never matched. Sequences come in code point order.
    """
    out: list[tuple[Range, ...]] = []
    for lo, hi in ranges:
        _split(lo, hi, out)
    return tuple(out)


def _split(lo: int, hi: int, out: list[tuple[Range, ...]]) -> None:
    stack = [(lo, hi)]
    while stack:
        lo, hi = stack.pop()
        for bound in (0x7F, 0x7FF, 0xFFFF):
            if lo <= bound < hi:
                stack.append((bound + 1, hi))
                stack.append((lo, bound))
                break
        else:
            if hi <= 0x7F:
                out.append(((lo, hi),))
                continue
            for i in (1, 2, 3):
                m = (1 << (6 * i)) - 1
                if lo & ~m != hi & ~m:
                    if lo & m:
                        stack.append(((lo | m) + 1, hi))
                        stack.append((lo, lo | m))
                        break
                    if hi & m != m:
                        stack.append((hi & ~m, hi))
                        stack.append((lo, (hi & ~m) - 1))
                        break
            else:
                a = chr(lo).encode("utf-8")
                b = chr(hi).encode("utf-8")
                out.append(tuple(zip(a, b)))
