"""benchmarks/knowledge_tools.py: calendar.resolve_date agrees with the study's answer key and with datetime
arithmetic; airports.lookup knows the study's cities in English and in their Finnish case forms; the kept traces of
the flight study verify."""

from __future__ import annotations

import calendar
import dataclasses
import json
import re
import datetime as dt
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import knowledge_tools as kt  # noqa: E402
import studies_data as sd  # noqa: E402

DAYS = st.dates(min_value=dt.date(2000, 1, 1), max_value=dt.date(2099, 12, 31))


@pytest.mark.parametrize("phrase", sd.DATE_PHRASES)
def test_every_english_study_phrase_resolves_to_the_answer_key(phrase: str) -> None:
    assert kt.resolve_expression(phrase) == sd.resolve_date(phrase)


@pytest.mark.parametrize("phrase", sd.DATE_PHRASES)
def test_every_finnish_study_phrase_resolves_to_the_answer_key(phrase: str) -> None:
    assert kt.resolve_expression(sd.FI_DATE_PHRASES[phrase]) == sd.resolve_date(phrase)


@pytest.mark.parametrize("request_", sd.REQUESTS + sd.FI_REQUESTS, ids=lambda r: f"{r.language}-{r.id}")
def test_the_date_words_of_every_request_resolve_to_its_answer(request_: sd.Request) -> None:
    assert request_.date_words in request_.text
    assert kt.resolve_expression(request_.date_words).isoformat() == request_.date


@given(DAYS)
def test_study_phrases_agree_with_the_answer_key_on_any_day(today: dt.date) -> None:
    for phrase in sd.DATE_PHRASES:
        expected = sd.resolve_date(phrase, today)
        assert kt.resolve_expression(phrase, today) == expected
        assert kt.resolve_expression(sd.FI_DATE_PHRASES[phrase], today) == expected


@given(DAYS, st.integers(0, 6))
def test_weekdays_follow_datetime_arithmetic(today: dt.date, weekday: int) -> None:
    en, fi = calendar.day_name[weekday], kt.FI_WEEKDAYS_ESSIVE[weekday]
    nxt = kt.resolve_expression(f"next {en}", today)
    assert nxt.weekday() == weekday and 1 <= (nxt - today).days <= 7
    assert kt.resolve_expression(f"ensi {fi}", today) == nxt
    this = kt.resolve_expression(f"this {en}", today)
    assert this.weekday() == weekday and 0 <= (this - today).days <= 6
    assert kt.resolve_expression(en.upper(), today) == this == kt.resolve_expression(fi, today)


@given(DAYS, st.integers(1, 31))
def test_day_of_next_month_follows_datetime_arithmetic(today: dt.date, day: int) -> None:
    year, month = (today.year + 1, 1) if today.month == 12 else (today.year, today.month + 1)
    suffix = {1: "st", 2: "nd", 3: "rd"}.get(day % 10 if day not in (11, 12, 13) else 0, "th")
    phrases = (f"the {day}{suffix} of next month", f"ensi kuun {day}. päivä", f"ensi kuun {day}. päivänä")
    if day > calendar.monthrange(year, month)[1]:
        for phrase in phrases:
            with pytest.raises(kt.DateExpressionError):
                kt.resolve_expression(phrase, today)
        return
    for phrase in phrases:
        assert kt.resolve_expression(phrase, today) == dt.date(year, month, day)


@given(DAYS, st.integers(1, 31))
def test_a_day_of_the_month_alone_is_its_next_occurrence(today: dt.date, day: int) -> None:
    got = kt.resolve_expression(f"the {day}th", today)
    assert got.day == day and got >= today and 0 <= (got - today).days < 62
    months_between = (got.year - today.year) * 12 + got.month - today.month
    skipped = [dt.date(today.year + (today.month + k - 1) // 12, (today.month + k - 1) % 12 + 1, 1)
               for k in range(months_between)]
    assert all(dt.date(m.year, m.month, day) < today if day <= calendar.monthrange(m.year, m.month)[1] else True
               for m in skipped)  # no earlier month had day N on or after today
    assert kt.resolve_expression(f"{day}. päivänä", today) == got == kt.resolve_expression(f"on the {day}", today)


@given(DAYS, DAYS)
def test_day_and_month_is_the_next_such_date(today: dt.date, target: dt.date) -> None:
    if target.month == 2 and target.day == 29:
        return  # leap day: covered below
    day, month = target.day, target.month
    this_year = dt.date(today.year, month, day)
    expected = this_year if this_year >= today else dt.date(today.year + 1, month, day)
    en, fi = calendar.month_name[month], kt.FI_MONTHS_PARTITIVE[month - 1]
    for phrase in (f"{day} {en}", f"{day}th {en}", f"{en} {day}", f"on {en} {day}.", f"{day}. {fi}"):
        assert kt.resolve_expression(phrase, today) == expected, phrase
    assert kt.resolve_expression(f"{day} {en} {target.year}", today) == target
    assert kt.resolve_expression(f"{day}. {fi} {target.year}", today) == target
    assert kt.resolve_expression(target.isoformat(), today) == target


def test_leap_day_is_the_next_leap_years_and_impossible_days_fail() -> None:
    assert kt.resolve_expression("29 February", dt.date(2026, 9, 7)) == dt.date(2028, 2, 29)
    for phrase in ("31 April", "30. helmikuuta", "2026-02-30", "February 30"):
        with pytest.raises(kt.DateExpressionError):
            kt.resolve_expression(phrase)


@pytest.mark.parametrize("phrase", ["", "someday", "next fortnight", "ensi vuonna", "the 3rd of last month",
                                    "15 Decembre", "2026/09/11", "in two weeks"])
def test_unknown_expressions_are_a_clear_tool_failure(phrase: str) -> None:
    from agent.tool import ToolFailure

    with pytest.raises(kt.DateExpressionError, match="cannot resolve date expression"):
        kt.resolve_expression(phrase)
    tool = kt.calendar_tool()
    with pytest.raises(ToolFailure, match="understood: today, tomorrow"):
        tool.function({"expression": phrase}, None)


def test_the_calendar_tool_returns_date_and_weekday() -> None:
    tool = kt.calendar_tool()
    assert tool.name == kt.CALENDAR_TOOL and tool.kind.value == "data"
    assert tool.function({"expression": "ensi perjantaina"}, None) == {
        "expression": "ensi perjantaina", "date": "2026-09-11", "weekday": "Friday"}


@pytest.mark.parametrize("city", sorted(sd.AIRPORTS))
def test_lookup_knows_every_city_in_english_and_in_finnish_case_forms(city: str) -> None:
    code = sd.AIRPORTS[city]
    nominative, elative, illative = sd.FI_CITY_FORMS[city]
    assert kt.lookup_city(city) == (city, code)
    assert kt.lookup_city(city.upper()) == (city, code)
    assert kt.lookup_city(nominative) == (city, code)
    assert kt.lookup_city(illative) == (city, code)
    assert kt.lookup_city(elative) == (city, code)


def test_lookup_rejects_unknown_cities_with_a_tool_failure() -> None:
    from agent.tool import ToolFailure

    with pytest.raises(KeyError):
        kt.lookup_city("Pariisista")
    with pytest.raises(ToolFailure, match="no airport known for city 'Paris'"):
        kt.airports_tool().function({"city": "Paris"}, None)
    assert kt.airports_tool().function({"city": "Madridista"}, None) == {"city": "Madridista", "iata": "MAD"}


@pytest.mark.parametrize("request_", sd.REQUESTS + sd.FI_REQUESTS, ids=lambda r: f"{r.language}-{r.id}")
def test_the_tools_find_every_requests_date_and_airports_in_its_text(request_: sd.Request) -> None:
    assert kt.date_in(request_.text) == (request_.date_words.removeprefix("on "),
                                         dt.date.fromisoformat(request_.date))
    assert [(city, code) for _, city, code in kt.airports_in(request_.text)] == [
        (request_.origin_city, request_.origin), (request_.destination_city, request_.destination)]
    facts = kt.request_prompt(request_.text)
    assert f"= {request_.date} ({dt.date.fromisoformat(request_.date):%A});" in facts
    assert f"= {request_.origin};" in facts and facts.endswith(f"= {request_.destination}.")


@given(DAYS, st.sampled_from(sd.DATE_PHRASES), st.sampled_from(["en", "fi"]),
       st.lists(st.sampled_from(["Search", "flights", "Etsi", "lennot", "please", "to", "from", "Madrid", "3",
                                 "the"]), max_size=4))
def test_date_in_finds_a_phrase_among_other_words_on_any_day(today, phrase, language, before) -> None:
    words = phrase if language == "en" else sd.FI_DATE_PHRASES[phrase]
    text = " ".join([*before, words]) + "."
    found = kt.date_in(text, today)
    assert found is not None and found[1] == sd.resolve_date(phrase, today)
    assert kt.calendar_tool(today=today).function({"expression": text}, None)["date"] == found[1].isoformat()


def test_the_lookup_tool_answers_every_city_of_a_text_in_order_and_nothing_else() -> None:
    tool = kt.airports_tool()
    assert tool.function({"city": "Lissabonista Osloon"}, None) == {
        "airports": [{"city": "Lissabonista", "iata": "LIS"}, {"city": "Osloon", "iata": "OSL"}]}
    assert tool.function({"city": "from Helsingistä"}, None) == {"city": "Helsingistä", "iata": "HEL"}
    assert kt.airports_in("Search flights next Friday") == []
    assert kt.date_in("Search flights from Madrid") is None
    assert kt.request_prompt("Hello") == ""


@pytest.mark.parametrize("request_", sd.REQUESTS + sd.FI_REQUESTS, ids=lambda r: f"{r.language}-{r.id}")
def test_the_request_enum_schema_admits_the_answer_and_no_other_airport_or_date(request_: sd.Request) -> None:
    import jsonschema

    import bench_flights as bf

    assert kt.request_enums(request_.text) == (sorted({request_.origin, request_.destination}), [request_.date])
    row = next(r for r in bf.AUTO_ROWS if r.key == "auto-request-enum")
    schema = bf.flight_schema(row, request_)
    answer = {"from": request_.origin, "to": request_.destination, "date": request_.date}
    jsonschema.validate(answer, schema)
    for wrong in ({"from": "LHR"}, {"to": "LHR"}, {"date": "2026-09-09"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**answer, **wrong}, schema)
    plain = next(r for r in bf.AUTO_ROWS if r.key == "auto")
    assert bf.flight_schema(plain, request_) == plain.schema()


def test_finnish_requests_mirror_the_english_ones() -> None:
    assert [(r.id, r.origin, r.destination, r.date) for r in sd.FI_REQUESTS] == \
        [(r.id, r.origin, r.destination, r.date) for r in sd.REQUESTS]
    assert sd.FI_REQUESTS[1].text == "Etsi lennot Madridista Berliiniin ensi perjantaina."


TRACES = BENCHMARKS / "traces" / "flights"


@pytest.mark.skipif(not TRACES.is_dir(), reason="the flight study's example traces are not written yet")
def test_the_kept_flight_traces_verify() -> None:
    from agent.trace_verify import verify_trace

    parents = [p for p in sorted(TRACES.glob("*.jsonl")) if p.name.count(".") == 1]
    assert parents
    for path in parents:
        report = verify_trace(path)
        assert report.ok, (path.name, report.problems)


# -- the auto study's plumbing, on the scripted engine (no model) ---------------------------------------------------

def _scripted(turns):
    from agent.protocol import QwenCodec
    from agent.testkit import ScriptedEngine

    return ScriptedEngine(turns, QwenCodec())


def _call_text(name: str, **arguments) -> str:
    from agent.protocol import FinalText, QwenCodec, ToolCall, ToolCalls  # noqa: F401

    codec = QwenCodec()
    base = [{"role": "user", "content": "u"}]
    prompt = codec.render(base, add_generation_prompt=True)
    action = ToolCalls(calls=(ToolCall(name=name, arguments=arguments, raw=""),))
    full = codec.render([*base, codec.assistant_message(action)], add_generation_prompt=False)
    turn = full[len(prompt):]
    return turn[: turn.rindex(codec.stop_token_names[0])]


def test_the_agent_row_scores_the_search_counts_the_desk_and_keeps_verified_nested_traces(tmp_path, monkeypatch):
    import bench_flights as bf
    from agent.trace_verify import verify_trace

    request = sd.FI_REQUESTS[1]  # Madridista Berliiniin ensi perjantaina
    engine = _scripted([
        _call_text("travel_desk", request="Madridista Berliiniin ensi perjantaina"),          # parent
        _call_text("airports.lookup", city="Madridista"), _call_text("airports.lookup", city="Berliiniin"),
        _call_text("calendar.resolve_date", expression="ensi perjantaina"), "MAD BER 2026-09-11",  # child
        _call_text("search_flights", **{"from": "MAD", "to": "BER", "date": "2026-09-11"}),    # parent
        "One flight: EM 123."])
    row = next(r for r in bf.AUTO_ROWS if r.key == "auto-agent")
    run_dir = tmp_path / "run"
    outcome = bf._run_auto(engine, row, request, 512, run_dir / f"{request.id}.jsonl")
    assert outcome.detail["trace_ok"], outcome.detail["trace_problems"]
    assert outcome.score.date_value and outcome.score.airport_value and outcome.score.strict
    result = bf.RowResult(row=row, outcomes=(outcome,), seconds=1.0)
    assert bf.knowledge_use(result) == {"travel_desk": 1}
    monkeypatch.setattr(bf, "TRACES_DIR", tmp_path / "kept")
    kept = bf.keep_trace(run_dir, result, language="fi")
    assert kept == tmp_path / "kept" / "fi-auto-agent.jsonl"
    assert len(list((tmp_path / "kept").glob("*.jsonl"))) == 2  # the parent and its nested desk run
    report = verify_trace(kept)
    assert report.ok and not any("no trace of it found" in w for w in report.warnings)


def test_the_section_is_rebuilt_from_stored_rows(tmp_path, monkeypatch):
    import bench_flights as bf

    monkeypatch.setattr(bf, "RESULTS_DIR", tmp_path / "stored")
    row = next(r for r in bf.AUTO_ROWS if r.key == "auto-calendar")
    score = sd.CallScore(strict=True, found=True, right_tool=True, date_format=True, date_value=True,
                         airport_format=True, airport_value=False)
    outcome = bf.RequestOutcome(request_id="0-1", score=score, call=None, raw="", seconds=2.0,
                                detail={"calls": [["calendar.resolve_date", {"expression": "next Friday"}],
                                                  ["search_flights", {}]], "trace_ok": True})
    meta = {"model_label": "m", "model_sha": "0" * 64, "codec_id": "c"}
    bf.store(bf.RowResult(row=row, outcomes=(outcome,), seconds=2.0), language="fi", meta={**meta, "date": "d"})
    loaded, stored_meta = bf.load_stored("fi", row)
    assert loaded.outcomes == (outcome,) and stored_meta["date"] == "d"
    results = tmp_path / "RESULTS.md"
    bf.write_results(meta, results, max_tokens=64, threads=1)
    text = results.read_text(encoding="utf-8")
    assert "### Auto study, Finnish requests" in text
    assert "| + (b2) calendar.resolve_date offered | 1/1 | 1/1 | 1/1 | 1/1 | 1/1 | 0/1 | 2.0 |" in text
    assert "calendar.resolve_date called in 1/1 requests" in text and "trace verify OK 1/1" in text
    assert "### Diagnostic" not in text
    diag = next(r for r in bf.DIAGNOSTIC_ROWS if r.key == "auto-agent-first")
    child = {"calls": [["travel_desk", {"request": "r"}]], "trace_ok": True, "child_runs": 1,
             "child_calls": [["airports.lookup", {"city": "Madrid"}, "validated"]]}
    bf.store(bf.RowResult(row=diag, outcomes=(dataclasses.replace(outcome, detail=child),), seconds=2.0),
             language="en", meta={**meta, "date": "d"})
    bf.write_results(meta, results, max_tokens=64, threads=1)
    text = results.read_text(encoding="utf-8")
    assert "| [en] diagnostic: travel_desk forced first, then auto |" in text
    assert "1 nested runs traced and verified with their parents; inside them airports.lookup called in 1/1" in text


# -- grounding: where the scored values came from ---------------------------------------------------------------------

def test_grounding_flags_read_each_scored_value_and_its_source_from_the_trace() -> None:
    import bench_flights as bf

    request = sd.REQUESTS[1]  # Madrid -> Berlin, next Friday: MAD, BER, 2026-09-11
    events = [
        {"event_type": "tool_call_validated",
         "data": {"tool": "airports.lookup", "call_id": "call-1", "grounding": []}},
        {"event_type": "tool_call_validated", "data": {"tool": "search_flights", "call_id": "call-2", "grounding": [
            {"path": "from", "source": {"kind": "user", "ledger_index": 1, "span": [20, 26]}},
            {"path": "to", "source": {"kind": "tool_result", "tool": "airports.lookup", "call_id": "call-1"}},
            {"path": "date", "source": {"kind": "none"}}]}},
        {"event_type": "tool_call_validated", "data": {"tool": "search_flights", "call_id": "call-3", "grounding": []}}]
    grounding = bf.search_grounding(events)
    assert grounding["call_id"] == "call-2" and grounding["status"] == "validated"
    flags = bf.grounding_flags({"from": "Madrid", "to": "BER", "date": "2023-09-15"}, grounding, request)
    assert flags == [{"field": "from", "value": "Madrid", "right": False, "source": "user"},
                     {"field": "to", "value": "BER", "right": True, "source": "tool_result", "tool": "airports.lookup"},
                     {"field": "date", "value": "2023-09-15", "right": False, "source": "none"}]
    rejected = [{"event_type": "tool_call_rejected", "data": {"tool": "search_flights", "call_id": "call-1",
                 "kind": "invalid_arguments", "errors": [{"path": "date", "kind": "ungrounded", "reason": "r"}]}}]
    grounding = bf.search_grounding(rejected)
    assert grounding == {"call_id": "call-1", "status": "rejected", "kind": "invalid_arguments", "ungrounded": ["date"]}
    flags = bf.grounding_flags({"from": "MAD", "to": "BER", "date": "2026-09-11"}, grounding, request)
    assert [f["source"] for f in flags] == ["unrecorded", "unrecorded", "none"]
    assert bf.ungrounded_refusals(rejected) == 1 and bf.ungrounded_refusals(events) == 0
    assert bf.search_grounding(events[:1]) is None
    assert [f["source"] for f in bf.grounding_flags({"from": "MAD"}, None, request)] == ["unrecorded"] * 3


def test_grounding_counts_separate_wrong_values_flagged_ungrounded_from_grounded_ones() -> None:
    import bench_flights as bf

    none = sd.CallScore(strict=False, found=False, right_tool=False, date_format=False, date_value=False,
                        airport_format=False, airport_value=False)

    def outcome(*flags):
        return bf.RequestOutcome(request_id="0-1", score=none, call=None, raw="", seconds=1.0,
                                 detail={"grounding_flags": [dict(zip(("field", "value", "right", "source"), f))
                                                             for f in flags]})

    outcomes = [outcome(("from", "Madrid", False, "user"), ("to", "BER", True, "none"), ("date", "2023-09-15", False,
                                                                                          "none")),
                outcome(("from", "MAD", True, "tool_result"), ("to", "MAD", False, "tool_result"),
                        ("date", "2026-09-11", True, "tool_result")),
                outcome(("from", "OTP", False, "unrecorded"), ("to", "SVQ", True, "unrecorded"),
                        ("date", "2026-12-15", True, "unrecorded")),
                bf.RequestOutcome(request_id="0-2", score=none, call=None, raw="", seconds=1.0)]
    counts = bf.grounding_counts(outcomes)
    date, airports = counts["date"], counts["from/to"]
    assert (date["values"], date["recorded"], date["wrong"], date["wrong_ungrounded"], date["right"],
            date["right_ungrounded"]) == (3, 2, 1, 1, 2, 0)
    assert (airports["values"], airports["recorded"], airports["wrong"], airports["wrong_ungrounded"],
            airports["wrong_grounded"], airports["wrong_unrecorded"], airports["right"],
            airports["right_ungrounded"]) == (6, 4, 3, 0, 2, 1, 3, 1)
    assert airports["grounded_wrong"] == {("Madrid", "from", "user"): 1, ("MAD", "to", "tool_result"): 1}
    result = bf.RowResult(row=bf.AUTO_ROWS[0], outcomes=tuple(outcomes), seconds=4.0)
    assert "| 2/3 / 4/6 | 1/3 | 1/1 | 3/6 | 0/3 | 0 / 2 | 0/2 / 1/3 |" in bf.grounding_table([result])
    note = bf.grounding_note(result)
    assert "wrong but grounded: 1 by tool_result (`MAD` for to ×1); 1 by the request's words" in note
    assert "(`Madrid` for from ×1)" in note


def test_the_enforcement_rows_declare_the_scored_values_grounded_and_offer_both_knowledge_tools() -> None:
    import bench_flights as bf

    rows = {r.key: r for r in bf.AUTO_ROWS if r.grounded is not None}
    assert set(rows) >= {"auto-grounded", "auto-grounded-2", "auto-grounded-2-results"}
    for row in rows.values():
        assert row.lookup and row.calendar and row.session and row.tool_choice == "auto" and not row.first_tool_choice
        assert not row.today and not row.resolved and not row.request_enum  # no knowledge in the input
        schema = bf.flight_schema(row, sd.REQUESTS[0])
        declared = [row.grounded[k] if isinstance(row.grounded, dict) else row.grounded for k in bf.GROUNDED_FIELDS]
        assert [schema["properties"][k]["x-grounded"] for k in bf.GROUNDED_FIELDS] == declared
    plain = next(r for r in bf.AUTO_ROWS if r.key == "auto")
    assert "x-grounded" not in json.dumps(bf.flight_schema(plain, sd.REQUESTS[0]))


def test_an_enforcement_row_refuses_a_remembered_value_and_traces_the_tools_as_the_sources(tmp_path) -> None:
    import bench_flights as bf

    request = sd.REQUESTS[1]  # Madrid -> Berlin, next Friday
    row = next(r for r in bf.AUTO_ROWS if r.key == "auto-grounded")
    engine = _scripted([
        _call_text("search_flights", **{"from": "MAD", "to": "BER", "date": "2026-09-11"}),  # from memory: refused
        _call_text("airports.lookup", city="Madrid to Berlin"),
        _call_text("calendar.resolve_date", expression="next Friday"),
        _call_text("search_flights", **{"from": "MAD", "to": "BER", "date": "2026-09-11"}),
        "One flight: EM 123."])
    outcome = bf._run_auto(engine, row, request, 512, tmp_path / f"{request.id}.jsonl")
    assert outcome.detail["trace_ok"], outcome.detail["trace_problems"]
    assert outcome.detail["ungrounded_refusals"] == 1 and len(outcome.detail["executed_searches"]) == 1
    assert [f["source"] for f in outcome.detail["grounding_flags"]] == ["none"] * 3  # the first call is scored
    events = [json.loads(line) for line in (tmp_path / f"{request.id}.jsonl").read_text().splitlines()]
    executed = [e for e in events if e["event_type"] == "tool_call_validated" and e["data"]["tool"] == "search_flights"]
    sources = {g["path"]: g["source"].get("tool") for g in executed[0]["data"]["grounding"]}
    assert sources == {"from": "airports.lookup", "to": "airports.lookup", "date": "calendar.resolve_date"}


def test_the_knowledge_tools_can_take_only_the_requests_words_and_describe_them_without_examples() -> None:
    plain = kt.calendar_tool()
    words = kt.calendar_tool(grounded="user", descriptions="words")
    assert "x-grounded" not in plain.parameters["properties"]["expression"] and "e.g." in plain.description
    assert words.parameters["properties"]["expression"]["x-grounded"] == "user" and words.declares_grounding
    lookup = kt.airports_tool(grounded="user", descriptions="words")
    for tool in (words, lookup):
        text = tool.description + json.dumps(tool.parameters)
        assert "e.g." not in text and "Madrid" not in text and "Friday" not in text  # no example value to copy
    assert set(kt.DESCRIPTIONS) == {"examples", "request", "words"}


@given(st.from_regex(kt.DATE_EXPRESSION_PATTERN, fullmatch=True))
def test_every_phrase_the_date_pattern_admits_is_read_by_the_calendar(phrase: str) -> None:
    try:
        kt.resolve_expression(phrase)
    except kt.DateExpressionError as error:  # the pattern counts days, not the days of each month
        assert "names no real date" in str(error)


@given(today=DAYS, phrase=st.sampled_from([*sd.DATE_PHRASES, *sd.FI_DATE_PHRASES.values()]),
       capitalised=st.booleans())
def test_the_date_pattern_admits_every_study_phrase_as_a_request_writes_it(today, phrase, capitalised) -> None:
    written = phrase[0].upper() + phrase[1:] if capitalised else phrase
    assert re.search(kt.DATE_EXPRESSION_PATTERN, written)
    assert kt.resolve_expression(written, today) == kt.resolve_expression(phrase, today)


def test_a_typed_calendar_is_offered_only_the_requests_date_phrases() -> None:
    from agent.grounding import Sources
    from agent.grounding_policy import narrowed_parameters

    tool = kt.calendar_tool(grounded="user", descriptions="words", typed=True)
    for request_ in sd.requests_for("fi") + sd.requests_for("en"):
        sources = Sources()
        sources.add_entry(0, "user", {"content": request_.text})
        narrowed = narrowed_parameters(tool.parameters, sources)
        assert isinstance(narrowed, dict)
        offered = narrowed["properties"]["expression"]["enum"]
        assert request_.date_words in offered  # the date words, and only phrases naming a date
        assert all(kt.resolve_expression(p) for p in offered)
        assert not any(city in p for p in offered for city, _, _ in kt.airports_in(request_.text))


def test_refusal_only_moves_each_declared_value_under_all_of_where_the_grammar_is_not_narrowed() -> None:
    import bench_flights as bf
    from agent.grounding import Sources
    from agent.grounding_policy import ground_arguments, narrowed_parameters, ungrounded_errors

    masked = bf.grounded_schema(sd.rich_schema(date_pattern=False), True)
    refused = bf.grounded_schema(sd.rich_schema(date_pattern=False), True, refusal_only=True)
    assert refused["properties"]["from"] == {"description": masked["properties"]["from"]["description"],
                                             "allOf": [{"type": "string", "pattern": "^[A-Z]{3}$"}],
                                             "x-grounded": True}
    sources = Sources()
    sources.add_entry(0, "user", {"content": sd.REQUESTS[1].text})
    assert narrowed_parameters(masked, sources) is False  # no code or date grounded yet: uncallable
    assert narrowed_parameters(refused, sources) is None  # callable as declared ...
    errors = ungrounded_errors(ground_arguments({"from": "MAD", "to": "BER", "date": "2026-09-11"}, refused, sources))
    assert [e.path for e in errors] == ["from", "to", "date"]  # ... and refused by validation
