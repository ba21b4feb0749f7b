"""Deterministic knowledge tools of the flight study: ``calendar.resolve_date`` and ``airports.lookup``.

Owns the two data tools the study offers beside ``search_flights`` — knowledge moved out of the model into its
input: a small date-expression parser (English and Finnish) that resolves against the study's fixed today, and an
airport table (English and Finnish city names, with a small rule for Finnish case endings); the finders that run
them over running text (`date_in`, `airports_in`), and their answers for one request as a system-prompt sentence
or as enums (`request_prompt`, `request_enums`: the rows where the application, not the model, calls the tools).
Refuses: answer keys (that is `studies_data`), model turns, scoring.

    "next Friday" / "ensi perjantaina" ──resolve_expression(expr, today)──► date ──► {"expression","date","weekday"}
    "Madrid" / "Berliiniin" ──lookup_city──► {"city", "iata"}                          (ToolFailure when unknown)
    mcp-server-time (a real MCP server) ──time_server_tools──► time.get_current_time, time.convert_time
        its answers in a run ──server_today──► the date the server said it is (what a request is scored against)

Date semantics (the same as `studies_data.resolve_date` for the study's phrases, which the tests check):

* ``today`` / ``tänään`` — today; ``tomorrow`` / ``huomenna`` — today + 1; ``day after tomorrow`` /
  ``ylihuomenna`` — today + 2.
* ``next <weekday>`` / ``ensi <weekday, essive: maanantaina … sunnuntaina>`` — the first such weekday strictly
  after today (a Monday's "next Monday" is 7 days later, its "next Friday" 4 days later).
* ``this <weekday>``, a bare ``<weekday>`` / ``tänä <essive>``, a bare ``<essive>`` — the first such weekday on or
  after today.
* ``the Nth of next month`` / ``ensi kuun N. päivä(nä)`` — day N of the calendar month after today's (December
  rolls into January); a day the month does not have is an error, never clamped.
* ``the Nth`` / ``N. päivä(nä)`` (a day of the month alone) — the next day N on or after today, in this month or
  the first later month that has it.
* ``N(st|nd|rd|th)? <Month>``, ``<Month> N(st|nd|rd|th)?`` / ``N. <month, partitive: tammikuuta … joulukuuta>`` —
  the next such date on or after today; with a year (``15 December 2027``, ``15. joulukuuta 2027``) that date.
* ``YYYY-MM-DD`` — that date.

Expressions are matched case-insensitively after trimming whitespace, a trailing full stop and a leading ``on``
(English). Anything else is a `ToolFailure` naming the forms understood, so the model can repair its call.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import studies_data as sd

__all__ = [
    "AIRPORT_NAMES",
    "CALENDAR_TOOL",
    "FI_MONTHS_PARTITIVE",
    "FI_WEEKDAYS_ESSIVE",
    "LOOKUP_TOOL",
    "airport_candidates",
    "airports_in",
    "airports_tool",
    "calendar_tool",
    "date_in",
    "lookup_city",
    "request_enums",
    "request_prompt",
    "resolve_expression",
    "server_today",
    "time_server_tools",
]

CALENDAR_TOOL = "calendar.resolve_date"
LOOKUP_TOOL = "airports.lookup"
TIME_TOOL = "time.get_current_time"
"""The real ``mcp-server-time`` server's clock, offered through `agent.mcp` (`time_server_tools`)."""
_TIME_SERVER: list[Any] = []

EN_WEEKDAYS: tuple[str, ...] = tuple(calendar.day_name[i].lower() for i in range(7))
EN_MONTHS: tuple[str, ...] = tuple(calendar.month_name[i].lower() for i in range(1, 13))
FI_WEEKDAYS_ESSIVE: tuple[str, ...] = ("maanantaina", "tiistaina", "keskiviikkona", "torstaina", "perjantaina",
                                       "lauantaina", "sunnuntaina")
"""Monday … Sunday in the essive ("on Friday" = "perjantaina")."""
FI_MONTHS_PARTITIVE: tuple[str, ...] = ("tammikuuta", "helmikuuta", "maaliskuuta", "huhtikuuta", "toukokuuta",
                                        "kesäkuuta", "heinäkuuta", "elokuuta", "syyskuuta", "lokakuuta",
                                        "marraskuuta", "joulukuuta")
"""January … December in the partitive, as in a Finnish date ("15. joulukuuta")."""

_ORD = r"(\d{1,2})(?:st|nd|rd|th)?"


class DateExpressionError(ValueError):
    """An expression the parser does not understand, or one naming a date that does not exist."""


def _next_month(today: dt.date) -> tuple[int, int]:
    return (today.year + 1, 1) if today.month == 12 else (today.year, today.month + 1)


def _weekday_from(today: dt.date, weekday: int, *, strictly_after: bool) -> dt.date:
    ahead = (weekday - today.weekday()) % 7
    if ahead == 0 and strictly_after:
        ahead = 7
    return today + dt.timedelta(days=ahead)


def _date(year: int, month: int, day: int, expression: str) -> dt.date:
    try:
        return dt.date(year, month, day)
    except ValueError:
        raise DateExpressionError(f"{expression!r} names no real date ({year}-{month:02d} has no day {day})") \
            from None


def _day_month(day: int, month: int, year: int | None, today: dt.date, expression: str) -> dt.date:
    if year is not None:
        return _date(year, month, day, expression)
    max_day = 29 if month == 2 else calendar.monthrange(2001, month)[1]
    if not 1 <= day <= max_day:
        raise DateExpressionError(f"{expression!r} names no real date (month {month} has no day {day})")
    for year_ in range(today.year, today.year + 9):  # 29 February: the next leap year within 8 years
        if day <= calendar.monthrange(year_, month)[1] and dt.date(year_, month, day) >= today:
            return dt.date(year_, month, day)
    raise DateExpressionError(f"{expression!r}: no such date in the next 8 years")  # pragma: no cover


def _day_of_month(day: int, today: dt.date, expression: str) -> dt.date:
    if not 1 <= day <= 31:
        raise DateExpressionError(f"{expression!r} names no real date (no month has day {day})")
    year, month = today.year, today.month
    while day > calendar.monthrange(year, month)[1] or dt.date(year, month, day) < today:
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return dt.date(year, month, day)


def _normalize(expression: str) -> str:
    text = unicodedata.normalize("NFC", expression).casefold().strip()
    text = re.sub(r"\s+", " ", text)
    text = text.rstrip(" .!?,")
    return re.sub(r"^on ", "", text)


_SIMPLE: Mapping[str, int] = {"today": 0, "tomorrow": 1, "day after tomorrow": 2, "the day after tomorrow": 2,
                               "tänään": 0, "huomenna": 1, "ylihuomenna": 2}
"""The expressions that are a fixed number of days from today."""
_WEEKDAYS, _ESSIVES = "|".join(EN_WEEKDAYS), "|".join(FI_WEEKDAYS_ESSIVE)
_MONTHS, _PARTITIVES = "|".join(EN_MONTHS), "|".join(FI_MONTHS_PARTITIVE)
_YEAR = r"(?:,? (\d{4}))?"


def _in_next_month(m: re.Match[str], today: dt.date, expression: str) -> dt.date:
    year, month = _next_month(today)
    return _date(year, month, int(m[1]), expression)


def _day_alone(m: re.Match[str], today: dt.date, expression: str) -> dt.date:
    return _day_of_month(int(m[1]), today, expression)


def _year(group: str | None) -> int | None:
    return int(group) if group else None


_FORMS: tuple[tuple[str, Callable[[re.Match[str], dt.date, str], dt.date], bool], ...] = (
    ("today|tomorrow|(?:the )?day after tomorrow|tänään|huomenna|ylihuomenna",
     lambda m, today, e: today + dt.timedelta(days=_SIMPLE[m[0]]), False),
    (r"(\d{4})-(\d{2})-(\d{2})", lambda m, today, e: _date(int(m[1]), int(m[2]), int(m[3]), e), False),
    (rf"(next |this )?({_WEEKDAYS})",
     lambda m, today, e: _weekday_from(today, EN_WEEKDAYS.index(m[2]), strictly_after=m[1] == "next "), False),
    (rf"(ensi |tänä )?({_ESSIVES})",
     lambda m, today, e: _weekday_from(today, FI_WEEKDAYS_ESSIVE.index(m[2]), strictly_after=m[1] == "ensi "), False),
    (rf"(?:the )?{_ORD} (?:day )?of next month", _in_next_month, False),
    (r"ensi kuun (\d{1,2})\.?(?: päivä| päivänä)?", _in_next_month, False),
    (rf"the {_ORD}(?: day)?", _day_alone, True),
    (r"(\d{1,2})\. päivä(?:nä)?", _day_alone, True),
    (rf"(?:the )?{_ORD} (?:of )?({_MONTHS}){_YEAR}",
     lambda m, today, e: _day_month(int(m[1]), EN_MONTHS.index(m[2]) + 1, _year(m[3]), today, e), False),
    (rf"({_MONTHS}) (?:the )?{_ORD}{_YEAR}",
     lambda m, today, e: _day_month(int(m[2]), EN_MONTHS.index(m[1]) + 1, _year(m[3]), today, e), False),
    (rf"(\d{{1,2}})\. ?({_PARTITIVES})(?: (\d{{4}}))?",
     lambda m, today, e: _day_month(int(m[1]), FI_MONTHS_PARTITIVE.index(m[2]) + 1, _year(m[3]), today, e), False),
)
"""Every form `resolve_expression` reads, in the order it tries them: (regex over the normalised expression, its
date, whether it is a day of the month alone). `DATE_EXPRESSION_PATTERN` is written from the same regexes."""


def resolve_expression(expression: str, today: dt.date = sd.TODAY, *, day_alone: bool = True) -> dt.date:
    """The date ``expression`` means on ``today`` (semantics in the module docstring). ``day_alone=False`` leaves
    out a day of the month alone (``the 3rd``): among other words it may be part of a longer date (``the 3rd of
    last month``) or no date at all (``the 3rd flight``).

    Raises:
        DateExpressionError: an expression outside the documented forms, or a date that does not exist.
    """
    text = _normalize(expression)
    for form, resolve, alone in _FORMS:
        if (day_alone or not alone) and (m := re.fullmatch(form, text)):
            return resolve(m, today, expression)
    raise DateExpressionError(
        f"cannot resolve date expression {expression!r}; understood: today, tomorrow, day after tomorrow, "
        "next/this <weekday>, the Nth of next month, the Nth, N <Month>, <Month> N, YYYY-MM-DD (Finnish: tänään, "
        "huomenna, ylihuomenna, ensi <perjantaina…>, ensi kuun N. päivä, N. päivä, N. <joulukuuta…>)")


def _either_case(words: str) -> str:
    """``words`` as a pattern that also matches each word capitalised (``next friday`` or ``Next Friday``)."""
    return re.sub(r"(?<![\w\\])([^\W\d_])", lambda m: f"[{m[1]}{m[1].upper()}]", words)


def _date_expression_pattern() -> str:
    """The ECMA pattern of every expression `resolve_expression` reads as written in a request (its words
    lower-case or capitalised, an ``on`` before it), anchored: `_FORMS`, their groups made non-capturing."""
    forms = (_either_case(re.sub(r"\((?!\?)", "(?:", form)) for form, _, _ in _FORMS)
    return "^(?:on |On )?(?:" + "|".join(forms) + ")$"


DATE_EXPRESSION_PATTERN: str = _date_expression_pattern()
"""What calendar.resolve_date reads, as its argument's ``pattern`` where a row types the tools' inputs: a dynamic
enum of the request's words then offers only the phrases that name a date."""


# -- airports -------------------------------------------------------------------------------------------------------

AIRPORT_NAMES: Mapping[str, tuple[str, ...]] = {
    "Madrid": ("Madrid",), "Berlin": ("Berlin", "Berliini"),
    "Lisbon": ("Lisbon", "Lisboa", "Lissabon"), "Oslo": ("Oslo",),
    "Helsinki": ("Helsinki", "Helsingfors"), "Athens": ("Athens", "Ateena"),
    "Zurich": ("Zurich", "Zürich"), "Copenhagen": ("Copenhagen", "Kööpenhamina", "København"),
    "Bucharest": ("Bucharest", "Bukarest", "București"), "Seville": ("Seville", "Sevilla"),
    "Porto": ("Porto",), "Bologna": ("Bologna",),
}
"""Study city (the key of `studies_data.AIRPORTS`) → the names it goes by: English, Finnish, local. Data, like the
codes: a lookup table knows a city's names."""

FI_OBLIQUE_STEMS: Mapping[str, str] = {"Helsingi": "Helsinki"}
"""Finnish stems a city's case forms are built on where consonant gradation changes them (``Helsingistä``):
data, like the names, since no small rule undoes gradation."""

_BY_NAME: dict[str, str] = {name.casefold(): city for city, names in AIRPORT_NAMES.items() for name in names}
_BY_NAME.update({stem.casefold(): city for stem, city in FI_OBLIQUE_STEMS.items()})

_FI_LOCAL_CASES = ("sta", "stä", "lta", "ltä", "ssa", "ssä", "lla", "llä", "lle")
"""Elative, ablative, inessive, adessive, allative endings (from/in/at/to)."""


def airport_candidates(word: str) -> list[str]:
    """Base forms a (possibly Finnish-inflected) city name may stand for, most literal first.

    The rule, general but deliberately small: the word itself; minus a local-case ending (-sta/-stä, -lta/-ltä,
    -ssa/-ssä, -lla/-llä, -lle); an illative long vowel + n (``Osloon``, ``Berliiniin``) minus its ``Vn``; and each
    of those minus a final connecting ``i`` (foreign consonant-final names: ``Madridista`` → ``Madridi`` →
    ``Madrid``). It does not undo consonant gradation (`FI_OBLIQUE_STEMS` lists those stems) or -seen/-hVn
    illatives."""
    w = word.strip()
    stems = [w]
    low = w.casefold()
    for ending in _FI_LOCAL_CASES:
        if low.endswith(ending) and len(w) > len(ending) + 2:
            stems.append(w[: -len(ending)])
    if re.search(r"([aeiouyäö])\1n$", low) and len(w) > 4:
        stems.append(w[:-2])
    out: list[str] = []
    for stem in stems:
        for s in (stem, stem[:-1] if stem.casefold().endswith("i") and len(stem) > 3 else None):
            if s and s not in out:
                out.append(s)
    return out


def lookup_city(name: str) -> tuple[str, str]:
    """(study city, IATA code) for ``name``.

    Raises:
        KeyError: no airport city by that name (or a Finnish case form of it, see `airport_candidates`)."""
    for candidate in airport_candidates(name):
        city = _BY_NAME.get(candidate.casefold())
        if city is not None:
            return city, sd.AIRPORTS[city]
    raise KeyError(name)


# -- finding them in running text -----------------------------------------------------------------------------------

_MAX_DATE_WORDS = 6
"""The longest date expression understood ("the 3rd day of next month", "ensi kuun 3. päivänä")."""


def date_in(text: str, today: dt.date = sd.TODAY) -> tuple[str, dt.date] | None:
    """The first date expression written in ``text`` and its date, or None: the longest run of words that
    `resolve_expression` understands, the earliest of equally long ones ("from Madrid to Berlin next Friday" →
    ("next Friday", 2026-09-11))."""
    words = text.split()
    for size in range(min(_MAX_DATE_WORDS, len(words)), 0, -1):
        for start in range(len(words) - size + 1):
            phrase = re.sub(r"^on ", "", " ".join(words[start:start + size]).strip(",;:!?()\"'").rstrip("."))
            try:
                return phrase, resolve_expression(phrase, today, day_alone=False)
            except DateExpressionError:
                continue
    return None


def airports_in(text: str) -> list[tuple[str, str, str]]:
    """(word as written, study city, IATA code) for each airport city named in ``text``, in order of appearance
    ("Lissabonista Osloon" → [("Lissabonista", "Lisbon", "LIS"), ("Osloon", "Oslo", "OSL")])."""
    found = []
    for word in re.findall(r"[^\W\d_]+", text):
        try:
            found.append((word, *lookup_city(word)))
        except KeyError:
            continue
    return found


# -- the tools ------------------------------------------------------------------------------------------------------

def _argument(schema: dict[str, Any], grounded: Any) -> dict[str, Any]:
    """An argument's schema, with ``"x-grounded": grounded`` when one is given (`agent.grounding`)."""
    return schema if grounded is None else {**schema, "x-grounded": grounded}


DESCRIPTIONS: Mapping[str, Mapping[str, tuple[str, str]]] = {
    "examples": {  # the study's first descriptions: what to pass, with examples
        CALENDAR_TOOL: ("Resolve a date expression from the user's request (e.g. 'next Friday', 'tomorrow', "
                        "'15 December', 'ensi perjantaina') against today's date; returns the ISO date YYYY-MM-DD.",
                        "The date words exactly as the user wrote them, e.g. next Friday."),
        LOOKUP_TOOL: ("Look up the IATA code of a city's airport. Call it for each city before search_flights.",
                      "City name, e.g. Madrid.")},
    "request": {  # pass the whole request: each tool finds what it needs in it (`date_in`, `airports_in`)
        CALENDAR_TOOL: ("Find the date the user's request names and resolve it against today's date; returns the "
                        "ISO date YYYY-MM-DD. Pass the user's request as written.", "The user's request as written."),
        LOOKUP_TOOL: ("Look up the IATA codes of the airports the user's request names, in the order it names them. "
                      "Pass the user's request as written.", "The user's request as written, or one city name.")},
    "words": {  # the same asks as "examples", with no example value a model could copy
        CALENDAR_TOOL: ("Resolve the date words of the user's request against today's date; returns the ISO date "
                        "YYYY-MM-DD.", "The date words of the user's request, all of them, exactly as written."),
        LOOKUP_TOOL: ("Look up the IATA code of the airport of a city the user's request names.",
                      "The city name exactly as the user's request writes it.")},
}
"""Tool description and argument description of each knowledge tool, per style (``descriptions=``): the study
inputs the enforcement rows vary. "examples" is what every other row offers."""


def calendar_tool(*, constrained: bool = True, today: dt.date = sd.TODAY, grounded: Any = None,
                  descriptions: str = "examples", typed: bool = False) -> Any:
    """``calendar.resolve_date`` (data tool): ``{"expression"}`` → ``{"expression", "date", "weekday"}``; text that
    holds a date expression among other words resolves that expression (`date_in`). ``grounded``: an
    ``x-grounded`` declaration for ``expression`` (``"user"``: words of the user's request only).
    ``descriptions``: a style of `DESCRIPTIONS`. ``typed``: ``expression`` declares the language the tool reads
    (`DATE_EXPRESSION_PATTERN`)."""
    from agent.tool import Tool, ToolFailure, ToolKind

    def resolve(args: Any, ctx: Any) -> dict[str, str]:
        expression = str(args["expression"])
        try:
            date = resolve_expression(expression, today)
        except DateExpressionError as e:
            found = date_in(expression, today)  # a whole request passed in: resolve the date words inside it
            if found is None:
                raise ToolFailure(str(e)) from None
            expression, date = found
        return {"expression": expression, "date": date.isoformat(), "weekday": f"{date:%A}"}

    return Tool(
        name=CALENDAR_TOOL, kind=ToolKind.DATA, constrained=constrained,
        description=DESCRIPTIONS[descriptions][CALENDAR_TOOL][0],
        parameters={"type": "object", "properties": {"expression": _argument({
            "type": "string", "description": DESCRIPTIONS[descriptions][CALENDAR_TOOL][1],
            **({"pattern": DATE_EXPRESSION_PATTERN} if typed else {})}, grounded)},
            "required": ["expression"]},
        function=resolve)


def other_words(text: str) -> str:
    """The words of ``text`` that name no airport city, in order (`airports_in` finds the others): what a lookup
    passed a whole request did not use ("Madridista Berliiniin ensi perjantaina" → "ensi perjantaina")."""
    cities = {word for word, _, _ in airports_in(text)}
    return " ".join(w for w in re.findall(r"[^\W_]+(?:\.(?=\s|$))?", text) if w.rstrip(".") not in cities)


def airports_tool(*, constrained: bool = True, grounded: Any = None, descriptions: str = "examples",
                  other: bool = False) -> Any:
    """``airports.lookup`` (data tool): ``{"city"}`` → ``{"city", "iata"}``, names as in `lookup_city`; text naming
    several cities (``"Lissabonista Osloon"``) → ``{"airports": [{"city", "iata"}, …]}`` in their order.
    ``grounded``: an ``x-grounded`` declaration for ``city`` (``"user"``: words of the user's request only).
    ``descriptions``: a style of `DESCRIPTIONS`. ``other``: an answer for a text that also holds words naming no
    airport says which (``"other_words"``, `other_words`), so a caller that passed a whole request learns what it
    still has to resolve elsewhere."""
    from agent.tool import Tool, ToolFailure, ToolKind

    def lookup(args: Any, ctx: Any) -> dict[str, Any]:
        name = str(args["city"]).strip()
        try:
            return {"city": name, "iata": lookup_city(name)[1]}
        except KeyError:
            pass
        found = airports_in(name)  # several cities, or a whole request, passed in: every city named in it
        if not found:
            raise ToolFailure(f"no airport known for city {name!r}")
        answer: dict[str, Any] = ({"city": found[0][0], "iata": found[0][2]} if len(found) == 1 else
                                  {"airports": [{"city": word, "iata": code} for word, _, code in found]})
        if other and (rest := other_words(name)):
            answer["other_words"] = rest
        return answer

    return Tool(
        name=LOOKUP_TOOL, kind=ToolKind.DATA, constrained=constrained,
        description=DESCRIPTIONS[descriptions][LOOKUP_TOOL][0],
        parameters={"type": "object", "properties": {"city": _argument({
            "type": "string", "description": DESCRIPTIONS[descriptions][LOOKUP_TOOL][1]}, grounded)},
                    "required": ["city"]},
        function=lookup)


# -- the same knowledge written into the input ----------------------------------------------------------------------

def request_prompt(text: str, today: dt.date = sd.TODAY) -> str:
    """Knowledge injection (e): the two tools run by the application on the request before the model sees it,
    their answers written into the system prompt. Only what the tools compute: the date words `date_in` finds
    and the cities `airports_in` finds; an empty string when they find nothing."""
    facts = []
    if (found := date_in(text, today)) is not None:
        words, date = found
        facts.append(f'the date "{words}" = {date.isoformat()} ({date:%A})')
    facts.extend(f"the airport of {word} = {code}" if word == city else f"the airport of {word} ({city}) = {code}"
                 for word, city, code in airports_in(text))
    return f"Resolved by the travel tools for this request: {'; '.join(facts)}." if facts else ""


def request_enums(text: str, today: dt.date = sd.TODAY, *, as_named: bool = False) -> tuple[list[str], list[str]]:
    """Knowledge injection (f): (the IATA codes of the cities ``text`` names; the date it names, if any) — the
    tools' answers for this request, for the schema's enums: the smallest set there is to list. The codes are
    sorted, or with ``as_named`` in the order the request names the cities (the lookup's own order)."""
    found = date_in(text, today)
    codes = list(dict.fromkeys(code for *_, code in airports_in(text)))
    return codes if as_named else sorted(codes), [found[1].isoformat()] if found else []


def time_server_tools() -> list[Any]:
    """The tools of the real ``mcp-server-time`` server (PyPI, pinned in the dev extras, installed beside this
    interpreter), connected once per process through `agent.mcp.connect` and named ``time.*``. Its clock is the
    machine's, not the study's fixed `studies_data.TODAY`: a request that uses it is scored against the date the
    server returned (`server_today`)."""
    import sys
    from pathlib import Path

    from agent.mcp import connect

    if not _TIME_SERVER:
        command = str(Path(sys.executable).parent / "mcp-server-time")
        _TIME_SERVER.append(connect({"mcpServers": {"time": {"command": command}}}))  # stopped at exit
    return list(_TIME_SERVER[0].tools)


def server_today(messages: Sequence[Mapping[str, Any]]) -> dt.date | None:
    """The date in the first ``time.*`` result the model received in ``messages`` (a tool message whose result
    carries a ``datetime``, as ``get_current_time`` answers), or None when it asked the server nothing."""
    import json

    for message in messages:
        if message.get("role") not in ("tool", "ipython"):
            continue
        try:
            value = json.loads(message.get("content") or "")
        except (TypeError, ValueError):
            continue
        result = value.get("result") if isinstance(value, dict) and value.get("ok") else None
        stamp = result.get("datetime") if isinstance(result, dict) else None
        if isinstance(stamp, str) and re.match(r"\d{4}-\d{2}-\d{2}T", stamp):
            return dt.date.fromisoformat(stamp[:10])
    return None
