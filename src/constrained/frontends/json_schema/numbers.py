"""Numbers and integers as exact pattern text: digit ranges between bounds, ``multipleOf``, non-integers.

    integer: bounds (rounded inward)        ──integer_range──►  digit ranges, never ``-0``
    number, integer-valued bounds           ──compile_number──►  plain decimals between them
    number: non-integer bounds, multipleOf  ──number_pattern──►  exact decimal ranges (Fraction thresholds)

Numbers are judged the way `jsonschema` judges them: a text with a fraction is parsed to the nearest double
and compared exactly with the bound (also a double, or an int). A decimal threshold halfway between the
bound and its neighbouring double is exclusive on the safe side, so rounding can never cross a bound. Limits: at
most `INTEGER_DIGITS` integer digits unless a bound needs more, at most `FRACTION_DIGITS` fraction digits.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Any, Callable

from constrained.automata.dfa import DEAD, DFA, compile_dfa
from constrained.automata.operations import automaton, intersection
from constrained.dialect.json_lexemes import FRACTION_DIGITS, INTEGER, INTEGER_DIGITS, NUMBER
from constrained.dialect.parser import automaton_text
from constrained.dialect.writer import Pattern, alt, cat, natural_range
from constrained.errors import ConstrainedError, EmptyLanguageError, InvalidSchemaError, UnsupportedSchemaError
from constrained.frontends.json_schema.vocabulary import NOT_INTEGER, NOT_MULTIPLE

__all__ = [
    "Bound",
    "integer_range",
    "decimal_between",
    "integer_multiple_pattern",
    "number_pattern",
    "number_language",
    "integer_bounds",
    "compile_integer",
    "compile_number",
]

# -- integer-valued bounds -------------------------------------------------------------------------------------------


def integer_range(lo: int | None, hi: int | None) -> Pattern:
    """Integers lo <= n <= hi (None: up to the digit cap on that side). Never "-0"."""
    if lo is None and hi is None:
        return INTEGER
    known = hi if hi is not None else lo  # the bounded side
    digits = max(INTEGER_DIGITS, len(str(abs(known or 0))))
    lo = -(10**digits - 1) if lo is None else lo
    hi = 10**digits - 1 if hi is None else hi
    parts = []
    if lo < 0:
        parts.append(cat("-", natural_range(max(1, -hi), -lo)))
    if hi >= 0:
        parts.append(natural_range(max(lo, 0), hi))
    return alt(parts)


def _nonzero_fraction(max_len: int) -> Pattern:
    """Fraction digit strings of length 1..max_len that are not all zeros."""
    if max_len <= 0:
        return None
    return alt(["0" * j + "[1-9]" + (f"[0-9]{{0,{max_len - 1 - j}}}" if max_len - 1 - j else "") for j in range(max_len)])


def _nonneg_decimal(a: int, a_incl: bool, b: int | None, b_incl: bool) -> Pattern:
    """Unsigned decimals x (no exponent) with a <(=) x <(=) b, integer bounds, b None = digit cap.

    Exclusive bounds keep a value and its bound at most 15 significant digits apart so the parsed
    double can never round onto the bound itself.
    """
    cap = 10**INTEGER_DIGITS - 1
    zero_frac = rf"(?:\.0{{1,{FRACTION_DIGITS}}})?"
    whole_hi = cap if b is None else (b if b_incl else b - 1)
    parts: list[Pattern] = [cat(natural_range(a if a_incl else a + 1, whole_hi), zero_frac)]
    m_lo, m_hi = a, cap if b is None else b - 1
    if m_lo <= m_hi:
        def frac_at(m: int) -> int:
            return FRACTION_DIGITS if m == 0 else min(FRACTION_DIGITS, 15 - len(str(m)))
        inner_lo, inner_hi = m_lo, m_hi
        if not a_incl:
            parts.append(cat(str(m_lo), r"\.", _nonzero_fraction(frac_at(m_lo))))
            inner_lo = m_lo + 1
        if b is not None and not b_incl and m_hi >= inner_lo:
            parts.append(cat(str(m_hi), r"\.", _nonzero_fraction(frac_at(m_hi))))
            inner_hi = m_hi - 1
        parts.append(cat(natural_range(inner_lo, inner_hi), r"\.", _nonzero_fraction(FRACTION_DIGITS)))
    return alt(parts)


def _decimal_range(lo: tuple[int, bool] | None, hi: tuple[int, bool] | None) -> Pattern:
    """Numbers between integer-valued bounds (value, inclusive), plain decimal notation."""
    parts: list[Pattern] = []
    if hi is None or hi[0] > 0 or (hi[0] == 0 and hi[1]):
        a, a_incl = (lo if lo is not None and lo[0] >= 0 else (0, True))
        parts.append(_nonneg_decimal(a, a_incl, None if hi is None else hi[0], True if hi is None else hi[1]))
    if lo is None or lo[0] < 0:
        a, a_incl = ((-hi[0], hi[1]) if hi is not None and hi[0] < 0 else (0, False))
        neg = _nonneg_decimal(a, a_incl, None if lo is None else -lo[0], True if lo is None else lo[1])
        parts.append(cat("-", neg))
    return alt(parts)


# -- exact rational bounds -------------------------------------------------------------------------------------------

Bound = tuple[Fraction, bool]
"""(value, inclusive)."""


def _frac_set(lo: Bound | None, hi: Bound | None, k: int) -> tuple[bool, str | None]:
    """Digit strings s of length 0..k with lo <(=) 0.s <(=) hi: (whether the empty one is in, pattern of the
    non-empty ones or None). Bounds are in [0, 1]; None: no bound on that side."""
    def ok(v: Fraction) -> bool:
        return ((lo is None or v > lo[0] or (v == lo[0] and lo[1]))
                and (hi is None or v < hi[0] or (v == hi[0] and hi[1])))
    empty = ok(Fraction(0))
    if k == 0:
        return empty, None
    if lo is None and hi is None:
        return empty, f"[0-9]{{1,{k}}}" if k > 1 else "[0-9]"
    alts = []
    dl = -1 if lo is None else min(9, math.floor(lo[0] * 10))
    dh = 10 if hi is None else min(9, math.floor(hi[0] * 10))
    free_lo, free_hi = dl + 1, dh - 1
    if free_lo <= free_hi:
        cls = str(free_lo) if free_lo == free_hi else f"[{free_lo}-{free_hi}]"
        alts.append(cls + (f"[0-9]{{0,{k - 1}}}" if k > 1 else ""))
    for d in sorted({x for x in (dl, dh) if 0 <= x <= 9}):
        sub_lo = None if lo is None or lo[0] * 10 - d < 0 else (lo[0] * 10 - d, lo[1])
        sub_hi = None if hi is None or hi[0] * 10 - d >= 1 else (hi[0] * 10 - d, hi[1])
        if sub_lo is not None and sub_lo[0] >= 1:
            continue
        if sub_hi is not None and sub_hi[0] < 0:
            continue
        e, rest = _frac_set(sub_lo, sub_hi, k - 1)
        if e and rest:
            alts.append(f"{d}(?:{rest})?")
        elif e:
            alts.append(str(d))
        elif rest:
            alts.append(f"{d}(?:{rest})")
    if not alts:
        return empty, None
    return empty, alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


def _nonneg_between(lo: Bound, hi: Bound, int_cap: int, frac_digits: int) -> str | None:
    """Plain decimals v >= 0 (no sign, no exponent, no leading zeros) with lo <(=) v <(=) hi."""
    a, b = math.floor(lo[0]), math.floor(hi[0])
    b = min(b, int_cap)
    parts: list[str | None] = []

    def with_fraction(i: int, flo: Bound | None, fhi: Bound | None) -> str | None:
        empty, rest = _frac_set(flo, fhi, frac_digits)
        tail = None if rest is None else rf"\.{rest}"
        if empty and tail:
            return f"{i}(?:{tail})?"
        return str(i) if empty else (f"{i}{tail}" if tail else None)

    if a > b:
        return None
    if a == b:
        parts.append(with_fraction(a, (lo[0] - a, lo[1]), (hi[0] - a, hi[1]) if hi[0] - a < 1 else None))
    else:
        parts.append(with_fraction(a, (lo[0] - a, lo[1]), None))
        middle = natural_range(a + 1, b - 1)
        if middle is not None:
            parts.append(f"{middle}" + (rf"(?:\.[0-9]{{1,{frac_digits}}})?" if frac_digits else ""))
        if hi[0] - b < 1:
            parts.append(with_fraction(b, None, (hi[0] - b, hi[1])))
        else:
            parts.append(with_fraction(b, None, None))
    return alt(parts)


def decimal_between(lo: Bound | None, hi: Bound | None, *, int_digits: int, frac_digits: int) -> str | None:
    """Plain decimal texts (no exponent, never ``-0``) whose exact value lies between exact rational bounds."""
    cap = Fraction(10**int_digits)
    parts: list[str | None] = []
    # v >= 0
    nlo: Bound = (Fraction(0), True) if lo is None or lo[0] < 0 else lo
    nhi: Bound = (cap, False) if hi is None or hi[0] >= cap else hi
    if nlo[0] < nhi[0] or (nlo[0] == nhi[0] and nlo[1] and nhi[1]):
        parts.append(_nonneg_between(nlo, nhi, 10**int_digits - 1, frac_digits))
    # v < 0: magnitudes u = -v in (max(0, -hi), -lo)
    if lo is None or lo[0] < 0:
        ulo: Bound = (Fraction(0), False) if hi is None or hi[0] >= 0 else (-hi[0], hi[1])
        uhi: Bound = (cap, False) if lo is None or -lo[0] >= cap else (-lo[0], lo[1])
        if ulo[0] < uhi[0] or (ulo[0] == uhi[0] and ulo[1] and uhi[1]):
            mag = _nonneg_between(ulo, uhi, 10**int_digits - 1, frac_digits)
            if mag is not None:
                parts.append("-" + mag)  # one alternative, or a group: no top-level '|'

    return alt(parts)


def _threshold(value: Any, key: str, path: str) -> Bound:
    """The exact decimal threshold (exclusive) that keeps a text's parsed double on the valid side of a bound."""
    if isinstance(value, int) and abs(value) > 2**53:
        raise UnsupportedSchemaError(path, key, "an integer bound beyond 2**53 next to non-integer bounds")
    b = float(value)
    prev, nxt = math.nextafter(b, -math.inf), math.nextafter(b, math.inf)
    down, up = (Fraction(prev) + Fraction(b)) / 2, (Fraction(b) + Fraction(nxt)) / 2
    return {"minimum": (down, False), "exclusiveMinimum": (up, False),
            "maximum": (up, False), "exclusiveMaximum": (down, False)}[key]


def _dfa_and(pattern: str, other: str) -> str | None:
    """The language of both patterns, embedded as an automaton (None: empty)."""

    try:
        a, b = compile_dfa(pattern), compile_dfa(other)
    except EmptyLanguageError:
        return None
    both = intersection(a, b)
    return None if both is None else automaton_text(automaton(both))


def _non_integer_texts(int_digits: int) -> str:
    """Plain decimals with a non-zero fraction and at most 15 significant digits (so the double is no integer)."""
    alts = [r"0\.[0-9]{0,14}[1-9]"]
    for n in range(1, min(int_digits, 14) + 1):
        alts.append(rf"[1-9][0-9]{{{n - 1}}}\.[0-9]{{0,{14 - n}}}[1-9]")
    return r"-?(?:" + "|".join(alts) + ")"


def _step_fractions(step: Fraction, raw: Any) -> tuple[str, bool] | None:
    """For a float divisor that is 1/m in decimal (0.01, 0.1, 0.05): the fraction spellings whose double is an
    exact multiple under both exact decimal and jsonschema's float arithmetic; None: not of that form."""
    if not isinstance(raw, float):
        return None
    m = round(1 / step)
    if m < 1 or Fraction(repr(raw)) != Fraction(1, m) or abs(step * m - 1) >= Fraction(1, 2**54):
        return None
    fracs = [r"\.0"]  # x.0 is the integer x
    if m % 2 == 0:
        fracs.append(r"\.50?")
    if m % 4 == 0:
        fracs.append(r"\.(?:25|75)")
    return "(?:" + "|".join(fracs) + ")?", True


def integer_multiple_pattern(range_pattern: str, n: int, path: str, multiple: bool = True) -> str | None:
    """Integer texts of ``range_pattern`` whose value is a multiple of n (``multiple=False``: is not), an automaton
    tracking the remainder."""
    import numpy as np  # noqa: PLC0415

    if n == 1:
        return range_pattern if multiple else None
    if n > 100_000:
        raise UnsupportedSchemaError(path, "multipleOf" if multiple else "not", "a divisor over 100000")
    states = n + 2  # 0 start, 1 after '-', 2 + r: remainder r
    table = np.full((states, 256), DEAD, dtype=np.int32)
    table[0, ord("-")] = 1
    for src in (0, 1):
        for d in range(10):
            table[src, ord("0") + d] = 2 + d % n
    for r in range(n):
        for d in range(10):
            table[2 + r, ord("0") + d] = 2 + (r * 10 + d) % n
    accepting = np.zeros(states, dtype=bool)
    accepting[2:] = not multiple
    accepting[2] = multiple
    remainder = DFA.from_table(table, accepting=accepting, distance=np.zeros(states, dtype=np.int32),
                                   special_names=())
    try:
        base = compile_dfa(range_pattern)
    except EmptyLanguageError:
        return None
    both = intersection(base, remainder)
    return None if both is None else automaton_text(automaton(both))


_NUMBER_KEYWORDS = ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "multipleOf", NOT_INTEGER)
_SAFE_INTEGER = 10**15 - 1
"""Integers up to this magnitude are exact doubles: jsonschema's float division by a float divisor is exact there."""


def _binary_step(step: Fraction) -> bool:
    """Whether a divisor is 1/2**j (0.5, 0.25, ...): x / step is then exact in floating point."""
    return step.numerator == 1 and step.denominator > 1 and step.denominator & (step.denominator - 1) == 0


def _digits_except(excluded: frozenset[str]) -> str:
    """Non-empty digit strings not in ``excluded``."""
    parts = []
    for d in "0123456789":
        below = frozenset(e[1:] for e in excluded if e[:1] == d)
        if not below:
            parts.append(f"{d}[0-9]*")
            continue
        rest = _digits_except(frozenset(e for e in below if e))
        parts.append(f"{d}(?:{rest})?" if "" not in below else f"{d}{rest}")
    return "(?:" + "|".join(parts) + ")"


def not_multiple_pattern(pattern: Pattern, flat: dict, path: str, integer: bool) -> Pattern:
    """``pattern`` (integer texts, or non-integer plain decimals under ``NOT_INTEGER``) less the multiples of each
    divisor in ``NOT_MULTIPLE``. Integer divisors: a remainder automaton on integers, nothing to take from
    non-integers; 1/2**j: every integer is a multiple, a non-integer is one when its fraction is some k/2**j.
    Other divisors are refused (jsonschema's float quotient decides, not the exact value)."""
    for m in flat.get(NOT_MULTIPLE) or ():
        if pattern is None:
            return None
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not m > 0 or not math.isfinite(m):
            raise InvalidSchemaError(path, "multipleOf must be a positive number")
        step = Fraction(m)
        if step.denominator == 1 and integer:
            if isinstance(m, float):
                pattern = _dfa_and(pattern, integer_range(-_SAFE_INTEGER, _SAFE_INTEGER) or "")
            pattern = None if pattern is None else integer_multiple_pattern(pattern, int(step), path, False)
        elif step.denominator == 1:
            if not flat.get(NOT_INTEGER):
                raise UnsupportedSchemaError(path, "not", "the complement of multipleOf over decimals that may be "
                                             "integer-valued")
        elif _binary_step(step) and step.denominator <= 64:
            if integer:
                return None
            if not flat.get(NOT_INTEGER):
                raise UnsupportedSchemaError(path, "not", "the complement of multipleOf over decimals that may be "
                                             "integer-valued")
            fractions = frozenset(_fraction_digits(Fraction(k, step.denominator)) for k in range(1, step.denominator))
            pattern = _dfa_and(pattern, rf"-?(?:0|[1-9][0-9]*)\.{_digits_except(fractions)}")
        else:
            raise UnsupportedSchemaError(path, "not", f"the complement of multipleOf {m} (only integers and 1/2**j "
                                         "divisors, whose quotients jsonschema computes exactly)")
    return pattern


def _fraction_digits(value: Fraction) -> str:
    """The fraction digits of a dyadic value in (0, 1), without trailing zeros."""
    digits = ""
    while value:
        value *= 10
        digits += str(int(value))
        value -= int(value)
    return digits


def number_pattern(flat: dict, path: str, integer: bool, int_digits: int, frac_digits: int,
                   integer_range: Callable[[int | None, int | None], str | None]) -> str | None:
    """Numbers (or integers) under the node's bounds, multipleOf and NOT_INTEGER, exact. Remembered by those
    keywords (`number_language`): one pattern inlines a number definition at every reference (a schema of 109
    percentages spent 100 ms on three distinct ones). An error is raised afresh with this node's path."""
    key = tuple((k, type(flat[k]), flat[k]) for k in _NUMBER_KEYWORDS if k in flat)
    if NOT_MULTIPLE not in flat and all(type(v) in (int, float, bool) for _, _, v in key):
        try:
            return number_language(key, integer, int_digits, frac_digits, integer_range)
        except ConstrainedError:
            pass  # not remembered: computed again below, to raise at this path
    return _number_pattern(flat, path, integer, int_digits, frac_digits, integer_range)


@functools.lru_cache(maxsize=256)
def number_language(key: tuple, integer: bool, int_digits: int, frac_digits: int,
                    integer_range: Callable[[int | None, int | None], str | None]) -> str | None:
    """`number_pattern` of the numeric keywords in ``key`` ((keyword, type, value) triples)."""
    return _number_pattern({k: v for k, _, v in key}, "#", integer, int_digits, frac_digits, integer_range)


def _number_pattern(flat: dict, path: str, integer: bool, int_digits: int, frac_digits: int,
                    integer_range: Callable[[int | None, int | None], str | None]) -> str | None:
    keys = [k for k in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum") if k in flat]
    step_raw = flat.get("multipleOf")
    step = None if step_raw is None else Fraction(step_raw)
    if step is not None and step <= 0:
        raise InvalidSchemaError(path, "multipleOf must be positive")
    if integer or (step is not None and step.denominator == 1):
        if flat.get(NOT_INTEGER):
            return None
        lo = hi = None
        for k in keys:
            v = Fraction(flat[k])
            cand = {"minimum": math.ceil(v), "exclusiveMinimum": math.floor(v) + 1,
                    "maximum": math.floor(v), "exclusiveMaximum": math.ceil(v) - 1}[k]
            if k in ("minimum", "exclusiveMinimum"):
                lo = cand if lo is None else max(lo, cand)
            else:
                hi = cand if hi is None else min(hi, cand)
        if lo is not None and hi is not None and lo > hi:
            return None
        base = not_multiple_pattern(integer_range(lo, hi), flat, path, True)
        if base is None or step is None:
            return base
        if step.denominator == 1:
            return integer_multiple_pattern(base, int(step), path)
        fr = _step_fractions(step, step_raw)
        if fr is not None or (isinstance(step_raw, float) and step.numerator == 1
                              and step.denominator & (step.denominator - 1) == 0):
            return base  # every integer is a multiple (exactly and in jsonschema's float division)
        raise UnsupportedSchemaError(path, "multipleOf", f"multipleOf {step_raw} on integers")
    lo_b: Bound | None = None
    hi_b: Bound | None = None
    for k in keys:
        t = _threshold(flat[k], k, path)
        if k in ("minimum", "exclusiveMinimum"):
            lo_b = t if lo_b is None or t[0] > lo_b[0] else lo_b
        else:
            hi_b = t if hi_b is None or t[0] < hi_b[0] else hi_b
    if lo_b is not None and hi_b is not None and lo_b[0] >= hi_b[0]:
        return None
    for b in (lo_b, hi_b):
        if b is not None and abs(b[0]) >= 10**int_digits:
            raise UnsupportedSchemaError(path, keys[0], f"number bounds must have at most {int_digits} digits")
    pattern = decimal_between(lo_b, hi_b, int_digits=int_digits, frac_digits=frac_digits)
    if pattern is None:
        return None
    if step is not None:
        fr = _step_fractions(step, step_raw)
        if fr is None:
            raise UnsupportedSchemaError(path, "multipleOf", f"multipleOf {step_raw} on numbers (only integers, "
                                         "and 0.1, 0.01, 0.05, ... of the form 1/m, are enforced)")
        pattern = _dfa_and(pattern, rf"-?(?:0|[1-9][0-9]*){fr[0]}")
        if pattern is None:
            return None
    if flat.get(NOT_INTEGER):
        pattern = _dfa_and(pattern, _non_integer_texts(int_digits))
    return not_multiple_pattern(pattern, flat, path, False)


# -- the compiler's number and integer values -----------------------------------------------------------------------


def integer_bounds(flat: dict, path: str) -> tuple[int | None, int | None]:
    """The least and greatest integers the node's bounds allow (None: unbounded on that side)."""
    lo = hi = None
    if "minimum" in flat:
        lo = math.ceil(Fraction(flat["minimum"]))
    if "exclusiveMinimum" in flat:
        v = math.floor(Fraction(flat["exclusiveMinimum"])) + 1
        lo = v if lo is None else max(lo, v)
    if "maximum" in flat:
        hi = math.floor(Fraction(flat["maximum"]))
    if "exclusiveMaximum" in flat:
        v = math.ceil(Fraction(flat["exclusiveMaximum"])) - 1
        hi = v if hi is None else min(hi, v)
    return lo, hi


def compile_integer(flat: dict, path: str) -> Pattern:
    """An integer value under the node's bounds and ``multipleOf``."""
    if flat.get(NOT_INTEGER):
        return None
    if NOT_MULTIPLE in flat or "multipleOf" in flat and Fraction(flat["multipleOf"]).denominator == 1 or (
            "multipleOf" in flat and _step_fractions(Fraction(flat["multipleOf"]), flat["multipleOf"])):
        return number_pattern(flat, path, True, INTEGER_DIGITS, FRACTION_DIGITS, integer_range)
    if "multipleOf" in flat:
        step = Fraction(flat["multipleOf"])
        if step <= 0:
            raise InvalidSchemaError(path, "multipleOf must be positive")
        trivial = step == 1 or (isinstance(flat["multipleOf"], float) and step.numerator == 1
                                and step.denominator & (step.denominator - 1) == 0)
        if not trivial:
            raise UnsupportedSchemaError(path, "multipleOf", "only divisors of 1 (trivially satisfied) are enforced")
    lo, hi = integer_bounds(flat, path)
    if lo is not None and hi is not None and lo > hi:
        return None
    return integer_range(lo, hi)


def compile_number(flat: dict, path: str) -> Pattern:
    """A number value under the node's bounds, ``multipleOf`` and ``NOT_INTEGER``."""
    bound_keys = [k for k in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum") if k in flat]
    if ("multipleOf" in flat or flat.get(NOT_INTEGER) or NOT_MULTIPLE in flat
            or any(Fraction(flat[k]).denominator != 1 for k in bound_keys)):
        return number_pattern(flat, path, False, INTEGER_DIGITS, FRACTION_DIGITS, integer_range)
    if not bound_keys:
        return NUMBER
    for key in bound_keys:
        value = Fraction(flat[key])
        if value.denominator != 1:
            raise UnsupportedSchemaError(path, key, "only integer-valued bounds are enforced on numbers")
        if abs(value) >= 10**INTEGER_DIGITS:
            raise UnsupportedSchemaError(path, key, f"number bounds must have at most {INTEGER_DIGITS} digits")
    lo = _tighter([(int(flat[k]), k == "minimum") for k in ("minimum", "exclusiveMinimum") if k in flat], lower=True)
    hi = _tighter([(int(flat[k]), k == "maximum") for k in ("maximum", "exclusiveMaximum") if k in flat], lower=False)
    return _decimal_range(lo, hi)


def _tighter(bounds: list[tuple[int, bool]], *, lower: bool) -> tuple[int, bool] | None:
    """The tightest of integer bounds (value, inclusive) on one side (None: no bound)."""
    if not bounds:
        return None
    # lower bound: larger value wins; on a tie the exclusive one (inclusive=False) wins
    return max(bounds, key=lambda b: (b[0], not b[1])) if lower else min(bounds, key=lambda b: (b[0], b[1]))
