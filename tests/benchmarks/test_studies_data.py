"""benchmarks/studies_data.py: the answer key of the flight and tool-count studies is right, and scoring is exact."""

from __future__ import annotations

import calendar
import datetime as dt
import sys
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import studies_data as sd  # noqa: E402


def test_today_is_a_monday_in_september_2026() -> None:
    assert sd.TODAY == dt.date(2026, 9, 7)
    assert sd.TODAY.weekday() == calendar.MONDAY


def test_the_answer_key_matches_the_seed_examples() -> None:
    # The seed: "ensi perjantaina" -> 2026-09-11, "3rd October 2026" is the 3rd of next month.
    assert sd.resolve_date("next Friday") == dt.date(2026, 9, 11)
    assert sd.resolve_date("the 3rd of next month") == dt.date(2026, 10, 3)
    assert sd.resolve_date("15 December") == dt.date(2026, 12, 15)
    assert sd.resolve_date("tomorrow") == dt.date(2026, 9, 8)


@given(st.dates(min_value=dt.date(2000, 1, 1), max_value=dt.date(2099, 12, 31)))
def test_date_phrases_follow_their_documented_semantics_on_any_day(today: dt.date) -> None:
    tomorrow = sd.resolve_date("tomorrow", today)
    assert (tomorrow - today).days == 1
    friday = sd.resolve_date("next Friday", today)
    assert friday.weekday() == calendar.FRIDAY and 1 <= (friday - today).days <= 7
    third = sd.resolve_date("the 3rd of next month", today)
    assert third.day == 3 and (third.year * 12 + third.month) - (today.year * 12 + today.month) == 1
    december = sd.resolve_date("15 December", today)
    assert (december.month, december.day) == (12, 15) and 0 <= (december - today).days < 366


def test_an_unknown_phrase_is_refused() -> None:
    with pytest.raises(KeyError):
        sd.resolve_date("a week on Tuesday")


def test_there_are_24_requests_six_pairs_by_four_phrasings_each_with_an_answer() -> None:
    assert len(sd.REQUESTS) == 24
    assert len({r.id for r in sd.REQUESTS}) == 24
    assert {(r.origin_city, r.destination_city) for r in sd.REQUESTS} == set(sd.CITY_PAIRS)
    assert {r.phrase for r in sd.REQUESTS} == set(sd.DATE_PHRASES)
    for r in sd.REQUESTS:
        assert r.origin == sd.AIRPORTS[r.origin_city] and r.destination == sd.AIRPORTS[r.destination_city]
        assert sd.IATA_RE.match(r.origin) and sd.IATA_RE.match(r.destination)
        assert r.date == sd.resolve_date(r.phrase).isoformat()
        assert r.origin_city in r.text and r.destination_city in r.text and r.phrase in r.text


def test_every_city_is_used_once_and_its_code_is_unique() -> None:
    cities = [c for pair in sd.CITY_PAIRS for c in pair]
    assert sorted(cities) == sorted(sd.AIRPORTS)
    assert len(set(sd.AIRPORTS.values())) == len(sd.AIRPORTS)


def test_the_enum_holds_every_answer_and_distractors_not_in_the_answer_set() -> None:
    codes = sd.airport_enum()
    assert set(sd.AIRPORTS.values()) <= set(codes)
    assert set(sd.DISTRACTOR_AIRPORTS) & set(sd.AIRPORTS.values()) == set()
    assert len(codes) == len(set(codes)) == len(sd.AIRPORTS) + len(sd.DISTRACTOR_AIRPORTS)


@pytest.mark.parametrize("schema", [sd.thin_schema(), sd.rich_schema(), sd.rich_schema(date_pattern=False),
                                    sd.enum_schema()], ids=["thin", "rich", "rich-no-date-pattern", "enum"])
def test_every_right_answer_is_valid_under_every_flight_schema(schema: dict) -> None:
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    jsonschema.Draft202012Validator.check_schema(schema)
    for r in sd.REQUESTS:
        assert validator.is_valid({"from": r.origin, "to": r.destination, "date": r.date})


def test_the_rich_schema_rejects_what_the_seed_says_it_should() -> None:
    validator = jsonschema.Draft202012Validator(sd.rich_schema(), format_checker=jsonschema.FormatChecker())
    assert not validator.is_valid({"from": "Madrid", "to": "BER", "date": "2026-09-11"})
    assert not validator.is_valid({"from": "MAD", "to": "BER", "date": "3rd October 2026"})


def test_the_catalog_has_20_unique_namespaced_tools_with_valid_schemas() -> None:
    tools = sd.tool_catalog()
    assert len(tools) == 20 == max(sd.TOOL_COUNTS)
    names = [t["name"] for t in tools]
    assert len(set(names)) == 20 and all("." in n for n in names)
    assert names[0] == sd.TARGET_TOOL and tools[0]["parameters"] == sd.rich_schema(date_pattern=False)
    assert set(sd.CONFUSABLE_TOOLS) <= set(names[:5])
    for t in tools:
        jsonschema.Draft202012Validator.check_schema(t["parameters"])


def _request() -> sd.Request:
    return sd.REQUESTS[1]  # Madrid -> Berlin, next Friday


def test_a_right_call_scores_right_everywhere() -> None:
    r = _request()
    call = sd.FoundCall(name="search_flights", arguments={"from": "MAD", "to": "BER", "date": "2026-09-11"},
                        strict=True)
    assert sd.score_call(call, r, tool="search_flights") == sd.CallScore(
        strict=True, found=True, right_tool=True, date_format=True, date_value=True, airport_format=True,
        airport_value=True)


def test_well_formed_wrong_values_score_format_but_not_truth() -> None:
    call = sd.FoundCall(name="search_flights", arguments={"from": "MAD", "to": "BRU", "date": "2023-05-15"},
                        strict=True)
    score = sd.score_call(call, _request(), tool="search_flights")
    assert score.date_format and not score.date_value
    assert score.airport_format and not score.airport_value


def test_city_names_and_prose_dates_fail_format() -> None:
    call = sd.FoundCall(name="search_flights", arguments={"from": "Madrid", "to": "BER", "date": "3rd October"},
                        strict=False)
    score = sd.score_call(call, _request(), tool="search_flights")
    assert not score.airport_format and not score.date_format and not score.strict and score.found


def test_an_impossible_calendar_date_is_not_format_ok() -> None:
    call = sd.FoundCall(name="x", arguments={"from": "MAD", "to": "BER", "date": "2026-02-30"}, strict=True)
    assert not sd.score_call(call, _request(), tool="search_flights").date_format


def test_no_call_scores_nothing() -> None:
    assert not any(vars(sd.score_call(None, _request(), tool="search_flights")).values())


def test_found_call_prefers_strict_calls_then_recovers_fenced_json() -> None:
    strict = sd.found_call([("airports.lookup", {"city": "Madrid"}), ("search_flights", {"from": "MAD"})], "",
                           prefer="search_flights")
    assert strict == sd.FoundCall(name="search_flights", arguments={"from": "MAD"}, strict=True)
    text = 'Sure:\n```json\n{"name": "search_flights", "arguments": {"from": "MAD", "to": "BER"}}\n```'
    assert sd.found_call([], text) == sd.FoundCall(name="search_flights", arguments={"from": "MAD", "to": "BER"},
                                                   strict=False)
    assert sd.found_call([], "no call here {not json}") is None
    assert sd.found_call([], '{"name": "x", "parameters": "{\\"a\\": 1}"}') == sd.FoundCall(
        name="x", arguments={"a": 1}, strict=False)
