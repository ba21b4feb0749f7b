"""The other ways a text writes a number or a date, read into their plain forms (what grounding compares).

    "4%"            ─► 4 and 0.04             "1.267 billion" ─► 1267000000       "twelve" ─► 12
    "May 12, 2022"  ─► "2022-05-12"           "28 January 2021" ─► "2021-01-28"

A value the model copied in another notation is still a copy: ``rate: 0.04`` for "an annual rate of 4%", a
``start_date`` of ``2022-05-12`` for "starting from May 12, 2022". What needs knowledge beyond the text stays
unread: "next Friday" (today's date), "quarterly" (4), "a deck of cards" (52). English words only; each reading
keeps the span it came from.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from typing import Final

__all__ = ["date_readings", "number_readings"]

_WORDS: Final = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
    "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50,
    "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100, "thousand": 1000, "dozen": 12,
}
_SCALES: Final = {"thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
_WORD_RE: Final = re.compile(r"\b(" + "|".join(_WORDS) + r")\b", re.IGNORECASE)
_NUMBER: Final = r"(?<![\w.])(\d+(?:,\d{3})*(?:\.\d+)?)"
_PERCENT_RE: Final = re.compile(_NUMBER + r"\s*(?:%|percent\b)", re.IGNORECASE)
_SCALED_RE: Final = re.compile(_NUMBER + r"\s*(" + "|".join(_SCALES) + r")\b", re.IGNORECASE)
_UNIT_RE: Final = re.compile(_NUMBER + r"(?=[^\W\d_]{1,3}(?!\w))")
"""A number with its unit glued on (``298K``, ``10m``, ``5kg``); not a code (``A320``, ``Q8_0``, ``0x1F``)."""

_MONTHS: Final = {name: n for n, names in enumerate(
    [("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",), ("june", "jun"),
     ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"), ("october", "oct"), ("november", "nov"),
     ("december", "dec")], start=1) for name in names}
_MONTH: Final = r"(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY: Final = r"(\d{1,2})(?:st|nd|rd|th)?"
_MONTH_FIRST_RE: Final = re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+(\d{{4}})\b", re.IGNORECASE)
_DAY_FIRST_RE: Final = re.compile(rf"\b{_DAY}(?:\s+of)?\s+{_MONTH},?\s+(\d{{4}})\b", re.IGNORECASE)


def _decimal(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None


def number_readings(text: str, *, digits: bool = True) -> Iterator[tuple[Decimal, int, int]]:
    """Numbers ``text`` writes in another notation: a percentage as its fraction, a number with a scale word, a
    number with its unit glued on, a number word; (value, start, end). ``digits=False``: the caller knows the text
    has no digit (words only)."""
    for m in _PERCENT_RE.finditer(text) if digits else ():
        value = _decimal(m.group(1))
        if value is not None:
            yield value / 100, m.start(), m.end()
    for m in _SCALED_RE.finditer(text) if digits else ():
        value = _decimal(m.group(1))
        if value is not None:
            yield value * _SCALES[m.group(2).lower()], m.start(), m.end()
    for m in _UNIT_RE.finditer(text) if digits else ():
        value = _decimal(m.group(1))
        if value is not None:
            yield value, m.start(), m.end()
    for m in _WORD_RE.finditer(text):
        yield Decimal(_WORDS[m.group(1).lower()]), m.start(), m.end()


def date_readings(text: str) -> Iterator[tuple[str, int, int]]:
    """Calendar dates ``text`` writes with the month's name and a year, as ISO 8601 ``YYYY-MM-DD``; (date, start,
    end). Impossible days (February 31) are not read."""
    import datetime

    for pattern, month_group, day_group in ((_MONTH_FIRST_RE, 1, 2), (_DAY_FIRST_RE, 2, 1)):
        for m in pattern.finditer(text):
            try:
                date = datetime.date(int(m.group(3)), _MONTHS[m.group(month_group).lower()], int(m.group(day_group)))
            except ValueError:
                continue
            yield date.isoformat(), m.start(), m.end()
