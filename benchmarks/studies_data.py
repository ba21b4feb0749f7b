"""Fixed inputs and answer key of the two tool-calling studies (form vs truth; tool count), and turn scoring.

Owns: the fixed "today" (`TODAY`), the 24 requests (6 city pairs × 4 date phrasings) with their known answers
(city → IATA code, phrase → ISO date, both resolved here with `datetime` arithmetic, never typed in by hand), the
tool schemas the studies offer (thin, rich, rich-with-enum, the 20-tool catalog), and the scoring of one parsed
call against a request. Refuses: loading models, running turns, timing — the ``bench_*.py`` scripts do that.

    TODAY + DATE_PHRASES ──resolve_date──► expected ISO date ─┐
    CITY_PAIRS + AIRPORTS ─────────────────► expected IATA ───┼─► Request ──► score_call(call, request) ─► CallScore
    model text ──found_call (strict codec call, else the first JSON {"name","arguments"} object) ─┘

Why a fixed today: relative phrases ("next Friday") only have a right answer against a known date, and the study
must reproduce. ``TODAY`` is Monday 2026-09-07 (the seed's "next Friday" answer, 2026-09-11, implies a Monday in
that week). Phrase semantics, chosen once and documented here:

* ``tomorrow`` — today + 1 day.
* ``next Friday`` — the first Friday strictly after today (a Monday's "next Friday" is 4 days later).
* ``the 3rd of next month`` — day 3 of the calendar month after today's month (December rolls into January).
* ``15 December`` — the next 15 December on or after today.

The same 24 requests exist in Finnish (`FI_REQUESTS`, the study's second language): same ids, pairs and answers,
the seed's Finnish phrasings (`FI_DATE_PHRASES`), city names in their Finnish case forms (`FI_CITY_FORMS`).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AIRPORTS",
    "BASE_SYSTEM_PROMPT",
    "CITY_PAIRS",
    "DATE_PHRASES",
    "FI_CITY_FORMS",
    "FI_DATE_PHRASES",
    "FI_REQUESTS",
    "LANGUAGES",
    "DISTRACTOR_AIRPORTS",
    "FLIGHT_TOOL_DESCRIPTION",
    "REQUESTS",
    "TODAY",
    "TOOL_CATALOG",
    "TOOL_COUNTS",
    "CONFUSABLE_TOOLS",
    "IATA_RE",
    "ISO_DATE_RE",
    "TARGET_TOOL",
    "CallScore",
    "FoundCall",
    "Request",
    "airport_enum",
    "build_requests",
    "build_requests_fi",
    "requests_for",
    "enum_schema",
    "found_call",
    "resolve_date",
    "rich_schema",
    "score_call",
    "thin_schema",
    "today_system_prompt",
    "tool_catalog",
]

TODAY = dt.date(2026, 9, 7)
"""The fixed "today" every request is resolved against: Monday 7 September 2026."""

BASE_SYSTEM_PROMPT = "You are a helpful travel assistant."
"""The system prompt of every row; the today row appends the date to it, so that is the only difference."""

AIRPORTS: Mapping[str, str] = {
    "Madrid": "MAD", "Berlin": "BER",
    "Lisbon": "LIS", "Oslo": "OSL",
    "Helsinki": "HEL", "Athens": "ATH",
    "Zurich": "ZRH", "Copenhagen": "CPH",
    "Bucharest": "OTP", "Seville": "SVQ",
    "Porto": "OPO", "Bologna": "BLQ",
}
"""City → the IATA code of its one scheduled-passenger airport. Single-airport cities only, so every answer is
unique; the list mixes codes a model can guess from the name (MAD, LIS) with codes it cannot (OTP, SVQ, BLQ)."""

CITY_PAIRS: tuple[tuple[str, str], ...] = (
    ("Madrid", "Berlin"),
    ("Lisbon", "Oslo"),
    ("Helsinki", "Athens"),
    ("Zurich", "Copenhagen"),
    ("Bucharest", "Seville"),
    ("Porto", "Bologna"),
)
"""(origin, destination): six pairs, every city once."""

DATE_PHRASES: tuple[str, ...] = ("the 3rd of next month", "next Friday", "15 December", "tomorrow")
"""The four date phrasings of the seed, in its order."""

_PHRASE_IN_REQUEST: Mapping[str, str] = {
    "the 3rd of next month": "on the 3rd of next month",
    "next Friday": "next Friday",
    "15 December": "on 15 December",
    "tomorrow": "tomorrow",
}

FI_DATE_PHRASES: Mapping[str, str] = {
    "the 3rd of next month": "ensi kuun 3. päivä",
    "next Friday": "ensi perjantaina",
    "15 December": "15. joulukuuta",
    "tomorrow": "huomenna",
}
"""The seed's four Finnish phrasings, keyed by the English phrase whose semantics (and answer) they share."""

_FI_PHRASE_IN_REQUEST: Mapping[str, str] = {
    "the 3rd of next month": "ensi kuun 3. päivänä",  # the seed's "3. päivä" in the essive a sentence needs
    "next Friday": "ensi perjantaina",
    "15 December": "15. joulukuuta",
    "tomorrow": "huomenna",
}

FI_CITY_FORMS: Mapping[str, tuple[str, str, str]] = {
    "Madrid": ("Madrid", "Madridista", "Madridiin"),
    "Berlin": ("Berliini", "Berliinistä", "Berliiniin"),
    "Lisbon": ("Lissabon", "Lissabonista", "Lissaboniin"),
    "Oslo": ("Oslo", "Oslosta", "Osloon"),
    "Helsinki": ("Helsinki", "Helsingistä", "Helsinkiin"),
    "Athens": ("Ateena", "Ateenasta", "Ateenaan"),
    "Zurich": ("Zürich", "Zürichistä", "Zürichiin"),
    "Copenhagen": ("Kööpenhamina", "Kööpenhaminasta", "Kööpenhaminaan"),
    "Bucharest": ("Bukarest", "Bukarestista", "Bukarestiin"),
    "Seville": ("Sevilla", "Sevillasta", "Sevillaan"),
    "Porto": ("Porto", "Portosta", "Portoon"),
    "Bologna": ("Bologna", "Bolognasta", "Bolognaan"),
}
"""City → its Finnish (nominative, elative "from", illative "to"): a Finnish request says "Madridista Berliiniin"
(from Madrid to Berlin). Finnish exonyms where Finnish has one (Berliini, Lissabon, Ateena, Kööpenhamina…)."""

LANGUAGES: tuple[str, ...] = ("en", "fi")
"""The study's two request languages."""

DISTRACTOR_AIRPORTS: tuple[str, ...] = ("LHR", "CDG", "FRA", "AMS", "FCO", "BCN", "MUC", "VIE", "DUB", "BRU",
                                        "WAW", "PRG")
"""Codes of other airports added to the enum row, so the enum is not just the answer set."""

IATA_RE = re.compile(r"^[A-Z]{3}$")
ISO_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def resolve_date(phrase: str, today: dt.date = TODAY) -> dt.date:
    """The date a phrase of `DATE_PHRASES` means on ``today`` (semantics in the module docstring).

    Raises:
        KeyError: a phrase this study does not define.
    """
    if phrase == "tomorrow":
        return today + dt.timedelta(days=1)
    if phrase == "next Friday":
        ahead = (4 - today.weekday()) % 7 or 7  # Friday is weekday 4; "next" is strictly after today
        return today + dt.timedelta(days=ahead)
    if phrase == "the 3rd of next month":
        year, month = (today.year + 1, 1) if today.month == 12 else (today.year, today.month + 1)
        return dt.date(year, month, 3)
    if phrase == "15 December":
        this_year = dt.date(today.year, 12, 15)
        return this_year if this_year >= today else dt.date(today.year + 1, 12, 15)
    raise KeyError(f"no date semantics for phrase {phrase!r}; known: {list(DATE_PHRASES)}")


@dataclass(frozen=True, kw_only=True)
class Request:
    """One user request of the studies, with its known answer."""

    id: str
    """Stable id, ``"<pair index>-<phrase index>"`` (``"0-1"`` = Madrid→Berlin, next Friday)."""
    text: str
    """The user message."""
    origin_city: str
    destination_city: str
    phrase: str
    """The date phrasing used (one of `DATE_PHRASES`)."""
    origin: str
    """Expected IATA code of the origin."""
    destination: str
    """Expected IATA code of the destination."""
    date: str
    """Expected departure date, ISO 8601 (``YYYY-MM-DD``), resolved against `TODAY`."""
    language: str = "en"
    """``en`` or ``fi`` (`LANGUAGES`)."""
    date_words: str = ""
    """The date phrasing as written in ``text`` (``phrase`` itself in English; `FI_DATE_PHRASES` in Finnish)."""


def build_requests(today: dt.date = TODAY) -> tuple[Request, ...]:
    """The 24 requests, pair-major (all four phrasings of a pair, then the next pair)."""
    requests = []
    for i, (origin, destination) in enumerate(CITY_PAIRS):
        for j, phrase in enumerate(DATE_PHRASES):
            requests.append(Request(
                id=f"{i}-{j}",
                text=f"Search flights from {origin} to {destination} {_PHRASE_IN_REQUEST[phrase]}.",
                origin_city=origin, destination_city=destination, phrase=phrase,
                origin=AIRPORTS[origin], destination=AIRPORTS[destination],
                date=resolve_date(phrase, today).isoformat(), language="en", date_words=phrase))
    return tuple(requests)


def build_requests_fi(today: dt.date = TODAY) -> tuple[Request, ...]:
    """The same 24 requests (same ids, pairs, phrase semantics and answers) written in Finnish:
    ``"Etsi lennot Madridista Berliiniin ensi perjantaina."``."""
    requests = []
    for i, (origin, destination) in enumerate(CITY_PAIRS):
        for j, phrase in enumerate(DATE_PHRASES):
            requests.append(Request(
                id=f"{i}-{j}",
                text=f"Etsi lennot {FI_CITY_FORMS[origin][1]} {FI_CITY_FORMS[destination][2]} "
                     f"{_FI_PHRASE_IN_REQUEST[phrase]}.",
                origin_city=origin, destination_city=destination, phrase=phrase,
                origin=AIRPORTS[origin], destination=AIRPORTS[destination],
                date=resolve_date(phrase, today).isoformat(), language="fi",
                date_words=_FI_PHRASE_IN_REQUEST[phrase]))
    return tuple(requests)


REQUESTS: tuple[Request, ...] = build_requests()
"""The 24 requests against `TODAY`."""

FI_REQUESTS: tuple[Request, ...] = build_requests_fi()
"""The 24 requests in Finnish, against `TODAY`."""


def requests_for(language: str) -> tuple[Request, ...]:
    """`REQUESTS` (``en``) or `FI_REQUESTS` (``fi``)."""
    if language not in LANGUAGES:
        raise ValueError(f"unknown language {language!r}; known: {list(LANGUAGES)}")
    return REQUESTS if language == "en" else FI_REQUESTS


def today_system_prompt(today: dt.date = TODAY) -> str:
    """`BASE_SYSTEM_PROMPT` plus today's date: knowledge injection (a)."""
    return f"{BASE_SYSTEM_PROMPT} Today is {today:%A}, {today.day} {today:%B %Y} ({today.isoformat()})."


# -- schemas ----------------------------------------------------------------------------------------------------------

FLIGHT_TOOL_DESCRIPTION = "Search scheduled flights between two airports on a given day."


def thin_schema() -> dict[str, Any]:
    """The seed's thin search_flights parameters: nothing wrong, nothing said."""
    return {
        "type": "object",
        "properties": {
            "from": {"type": "string", "description": "Airport."},
            "to": {"type": "string", "description": "Airport."},
            "date": {"type": "string", "description": "The date."},
        },
        "required": ["from", "to", "date"],
    }


def rich_schema(*, date_pattern: bool = True) -> dict[str, Any]:
    """The seed's rich parameters: IATA/ISO descriptions, ``pattern ^[A-Z]{3}$``, ``format: date`` and the date
    pattern ``^\\d{4}-\\d{2}-\\d{2}$``. ``date_pattern=False`` drops that last (redundant: every ``format: date``
    string matches it) pattern, for engines that cannot combine ``format`` with ``pattern``."""
    airport = ("airport as a three-letter IATA code, e.g. MAD for Madrid. Never a city name.")
    date: dict[str, Any] = {
        "type": "string",
        "description": "Departure date as an ISO 8601 calendar date, YYYY-MM-DD. "
                       "Resolve relative dates against today before calling.",
        "format": "date",
    }
    if date_pattern:
        date["pattern"] = r"^\d{4}-\d{2}-\d{2}$"
    return {
        "type": "object",
        "properties": {
            "from": {"type": "string", "description": f"Departure {airport}", "pattern": "^[A-Z]{3}$"},
            "to": {"type": "string", "description": f"Arrival {airport}", "pattern": "^[A-Z]{3}$"},
            "date": date,
        },
        "required": ["from", "to", "date"],
    }


def airport_enum() -> list[str]:
    """The enum of knowledge injection (c): every airport of the study plus `DISTRACTOR_AIRPORTS`, sorted."""
    return sorted(set(AIRPORTS.values()) | set(DISTRACTOR_AIRPORTS))


def enum_schema() -> dict[str, Any]:
    """`rich_schema` with ``from``/``to`` as an enum of codes (the pattern is dropped: the enum implies it)."""
    schema = rich_schema()
    for key in ("from", "to"):
        prop = schema["properties"][key]
        prop.pop("pattern")
        prop["enum"] = airport_enum()
    return schema


# -- the tool-count catalog -------------------------------------------------------------------------------------------

def _obj(properties: Mapping[str, Any], required: Sequence[str]) -> dict[str, Any]:
    return {"type": "object", "properties": dict(properties), "required": list(required)}


def _s(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


_ROUTE = {"from": _s("Departure city or station."), "to": _s("Arrival city or station."),
          "date": _s("Travel date, YYYY-MM-DD.")}

_CATALOG: tuple[dict[str, Any], ...] = (
    {"name": "travel.search_flights", "description": FLIGHT_TOOL_DESCRIPTION, "parameters": None},  # rich schema
    {"name": "rail.search_trains", "description": "Search train timetables between two railway stations on a "
                                                  "given day.", "parameters": _obj(_ROUTE, ["from", "to", "date"])},
    {"name": "ferry.search_ferries", "description": "Search ferry crossings between two ports on a given day.",
     "parameters": _obj({"from": _s("Departure port."), "to": _s("Arrival port."),
                         "date": _s("Sailing date, YYYY-MM-DD.")}, ["from", "to", "date"])},
    {"name": "bus.search_buses", "description": "Search long-distance bus routes between two cities on a given day.",
     "parameters": _obj(_ROUTE, ["from", "to", "date"])},
    {"name": "crm.search_customer", "description": "Find customer records by name or email.",
     "parameters": _obj({"query": _s("Name or email to search for.")}, ["query"])},
    {"name": "billing.create_invoice", "description": "Create an invoice for a customer.",
     "parameters": _obj({"customer_id": _s("Customer id."),
                         "amount": {"type": "number", "description": "Amount in EUR."},
                         "memo": _s("Line item text.")}, ["customer_id", "amount"])},
    {"name": "weather.forecast", "description": "Weather forecast for a city on a given day.",
     "parameters": _obj({"city": _s("City name."), "date": _s("Day, YYYY-MM-DD.")}, ["city", "date"])},
    {"name": "calendar.create_event", "description": "Create a calendar event.",
     "parameters": _obj({"title": _s("Event title."), "start": _s("Start, ISO 8601 date-time."),
                         "minutes": {"type": "integer", "description": "Duration in minutes."}},
                        ["title", "start"])},
    {"name": "email.send_message", "description": "Send an email message.",
     "parameters": _obj({"to": _s("Recipient address."), "subject": _s("Subject line."), "body": _s("Body text.")},
                        ["to", "subject", "body"])},
    {"name": "hotel.search_hotels", "description": "Search hotels in a city for a stay.",
     "parameters": _obj({"city": _s("City name."), "check_in": _s("YYYY-MM-DD."), "nights": {"type": "integer"}},
                        ["city", "check_in"])},
    {"name": "maps.directions", "description": "Driving or walking directions between two addresses.",
     "parameters": _obj({"origin": _s("Start address."), "destination": _s("End address."),
                         "mode": {"type": "string", "enum": ["driving", "walking"]}}, ["origin", "destination"])},
    {"name": "currency.convert", "description": "Convert an amount between currencies at today's rate.",
     "parameters": _obj({"amount": {"type": "number"}, "from_currency": _s("ISO 4217 code."),
                         "to_currency": _s("ISO 4217 code.")}, ["amount", "from_currency", "to_currency"])},
    {"name": "translate.text", "description": "Translate text into another language.",
     "parameters": _obj({"text": _s("Text to translate."), "target_language": _s("Language code, e.g. fi.")},
                        ["text", "target_language"])},
    {"name": "news.search", "description": "Search recent news articles.",
     "parameters": _obj({"query": _s("Search terms."), "days": {"type": "integer"}}, ["query"])},
    {"name": "stocks.quote", "description": "Latest stock price for a ticker symbol.",
     "parameters": _obj({"symbol": _s("Ticker symbol.")}, ["symbol"])},
    {"name": "notes.create", "description": "Save a note.",
     "parameters": _obj({"title": _s("Note title."), "text": _s("Note body.")}, ["text"])},
    {"name": "tasks.create", "description": "Create a to-do task with an optional due date.",
     "parameters": _obj({"title": _s("Task title."), "due": _s("Due date, YYYY-MM-DD.")}, ["title"])},
    {"name": "docs.search", "description": "Search the internal documentation.",
     "parameters": _obj({"query": _s("Search terms.")}, ["query"])},
    {"name": "payments.refund", "description": "Refund a payment, fully or partly.",
     "parameters": _obj({"payment_id": _s("Payment id."), "amount": {"type": "number"}}, ["payment_id"])},
    {"name": "support.create_ticket", "description": "Open a customer support ticket.",
     "parameters": _obj({"subject": _s("Ticket subject."), "body": _s("What happened.")}, ["subject", "body"])},
)

TOOL_COUNTS: tuple[int, ...] = (1, 5, 10, 20)
"""Tool-set sizes of the tool-count study; a set of size n is the first n tools of the catalog."""

TARGET_TOOL = "travel.search_flights"
"""The right tool for every request of the tool-count study."""

CONFUSABLE_TOOLS: tuple[str, ...] = ("rail.search_trains", "ferry.search_ferries", "bus.search_buses")
"""The three deliberately confusable tools (in every set of 5 or more)."""


def tool_catalog() -> list[dict[str, Any]]:
    """The 20 tool definitions (bare ``{"name","description","parameters"}``), the flight tool first with the rich
    schema minus its redundant date pattern (so the same definitions can be constrained); a fresh deep copy."""
    tools = copy.deepcopy(list(_CATALOG))
    tools[0]["parameters"] = rich_schema(date_pattern=False)
    return tools


TOOL_CATALOG: tuple[str, ...] = tuple(t["name"] for t in _CATALOG)
"""The catalog's tool names, in order."""


# -- scoring ----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class FoundCall:
    """The call a turn was scored on."""

    name: str
    arguments: Mapping[str, Any]
    strict: bool
    """True when the codec parsed it from the family's envelope (``<tool_call>``) — what the runtime would run;
    False when it was recovered by this study from a JSON object in prose (e.g. a fenced ```json block)."""


def found_call(strict_calls: Sequence[tuple[str, Mapping[str, Any]]], text: str,
               *, prefer: str | None = None) -> FoundCall | None:
    """The call to score: the first strict call (the first named ``prefer`` when given and present), else the first
    JSON object in ``text`` with a string ``"name"`` and an object ``"arguments"`` (or ``"parameters"``)."""
    if strict_calls:
        chosen = next((c for c in strict_calls if c[0] == prefer), strict_calls[0]) if prefer else strict_calls[0]
        return FoundCall(name=chosen[0], arguments=dict(chosen[1]), strict=True)
    lenient = [c for c in _json_calls(text)]
    if not lenient:
        return None
    chosen = next((c for c in lenient if c[0] == prefer), lenient[0]) if prefer else lenient[0]
    return FoundCall(name=chosen[0], arguments=chosen[1], strict=False)


def _json_calls(text: str) -> list[tuple[str, dict[str, Any]]]:
    decoder = json.JSONDecoder()
    calls, i = [], text.find("{")
    while i != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except ValueError:
            i = text.find("{", i + 1)
            continue
        if isinstance(obj, dict) and isinstance(obj.get("name"), str):
            args = obj.get("arguments", obj.get("parameters"))
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except ValueError:
                    args = None
            if isinstance(args, dict):
                calls.append((obj["name"], args))
        i = text.find("{", end)
    return calls


@dataclass(frozen=True, kw_only=True)
class CallScore:
    """One request's columns (each False when there is no call)."""

    strict: bool
    """The codec parsed a call from the envelope ("parses")."""
    found: bool
    """A call was found, strict or recovered from prose."""
    right_tool: bool
    date_format: bool
    """``date`` is a real calendar date written ``YYYY-MM-DD``."""
    date_value: bool
    """``date`` equals the expected date."""
    airport_format: bool
    """``from`` and ``to`` are both three capital letters."""
    airport_value: bool
    """``from`` and ``to`` are both the expected codes."""


def _is_iso_date(value: Any) -> bool:
    if not isinstance(value, str) or not ISO_DATE_RE.match(value):
        return False
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        return False
    return True


def score_call(call: FoundCall | None, request: Request, *, tool: str) -> CallScore:
    """Score ``call`` against ``request``'s known answer; ``tool`` is the right tool's name."""
    if call is None:
        return CallScore(strict=False, found=False, right_tool=False, date_format=False, date_value=False,
                         airport_format=False, airport_value=False)
    args = call.arguments
    origin, destination, date = args.get("from"), args.get("to"), args.get("date")
    airports = (origin, destination)
    return CallScore(
        strict=call.strict, found=True, right_tool=call.name == tool,
        date_format=_is_iso_date(date), date_value=date == request.date,
        airport_format=all(isinstance(a, str) and IATA_RE.match(a) is not None for a in airports),
        airport_value=airports == (request.origin, request.destination))
