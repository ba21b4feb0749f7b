"""Grounding: where each value came from (`agent.grounding`), declared and enforced (`agent.grounding_policy`).

Property tests pin the two directions of the matching rule: a value copied from anywhere in a tool result is
found there, and a value absent from the ledger is never grounded. The rest pins the rule's edges (whole tokens,
numbers as decimals, claims) and the policy (dynamic enums, the numbers of composed text, final-answer slots).
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Annotated, Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agent.grounding import (SourceKind, Sources, find_claims, ground_text, ground_value, iter_leaves, normalize_token,
                             requirement)
from agent.grounding_policy import (final_pattern_for_turn, ground_arguments, narrowed_parameters,
                                    ungrounded_errors)
from agent.protocol._pattern import escape
from agent.readings import number_readings
from agent.schema import render_path
from agent.tool import grounded


def tool_result(value: Any) -> str:
    return json.dumps({"ok": True, "result": value})


def sources(*, user: str = "", system: str = "", results: tuple[tuple[str, Any], ...] = ()) -> Sources:
    out = Sources()
    index = 0
    if system:
        out.add_entry(index, "system", {"content": system})
        index += 1
    out.add_entry(index, "user", {"content": user})
    for n, (tool, value) in enumerate(results, start=1):
        out.add_entry(index + 2 * n, "tool_result", {"content": tool_result(value)}, ok=True, call_id=f"call-{n}",
                      tool=tool)
    return out


# -- the matching rule --------------------------------------------------------------------------------------------

words = st.text(alphabet=st.characters(categories=("L",)), min_size=1, max_size=8)
json_leaves = st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=False, allow_infinity=False, width=32),
                        st.lists(words, min_size=1, max_size=4).map(" ".join))
json_values = st.recursive(json_leaves, lambda inner: st.one_of(
    st.lists(inner, min_size=1, max_size=4), st.dictionaries(words, inner, min_size=1, max_size=4)), max_leaves=12)


def _texts_by_path(value: Any) -> dict[str, list[str]]:
    """What each JSON path of a value holds as text: its leaf, and (for an object member) its key."""
    out: dict[str, list[str]] = {}
    for parts, leaf in iter_leaves(value):
        out.setdefault(render_path(parts), []).append(leaf if isinstance(leaf, str) else "")
        if parts and isinstance(parts[-1], str):
            out[render_path(parts)].append(parts[-1])
    return out


def _tokens(text: str) -> list[str]:
    return [normalize_token(t) for t in re.findall(r"[^\W\d_]+|\d+", text)]


@settings(max_examples=200, deadline=None)
@given(value=json_values, data=st.data())
def test_a_value_copied_from_any_position_of_a_tool_result_is_found_there(value: Any, data: st.DataObject) -> None:
    leaves = list(iter_leaves(value))
    parts, leaf = data.draw(st.sampled_from(leaves))
    found = ground_value("x", leaf, sources(results=(("lookup", value),))).source
    assert found.kind is SourceKind.TOOL_RESULT and found.tool == "lookup" and found.call_id == "call-1"
    held = {render_path(p): v for p, v in iter_leaves(value)}
    if isinstance(leaf, str):  # the path names a string (or key) whose tokens hold the value's, in order
        texts = _texts_by_path(value)[found.path]
        assert any(" ".join(_tokens(leaf)) in " ".join(_tokens(text)) for text in texts)
    else:  # the path names the number itself, or a text holding it
        at = held.get(found.path)
        assert (not isinstance(at, str) and Decimal(repr(at) if isinstance(at, float) else at)
                == Decimal(repr(leaf) if isinstance(leaf, float) else leaf)) or isinstance(at, str) or at is None


@settings(max_examples=200, deadline=None)
@given(text=st.lists(words, max_size=20).map(" ".join), result=json_values, value=words,
       number=st.integers(-10**9, 10**9))
def test_a_value_absent_from_the_ledger_is_never_grounded(text: str, result: Any, value: str, number: int) -> None:
    given_sources = sources(user=text, results=(("lookup", result),))
    everything = json.dumps(result, ensure_ascii=False) + " " + text
    seen = {normalize_token(t) for t in re.findall(r"[^\W\d_]+|\d+", everything)}
    assume(normalize_token(value) not in seen)
    assert ground_value("x", value, given_sources).source.kind is SourceKind.NONE
    held = {Decimal(t) for t in re.findall(r"\d+(?:\.\d+)?", everything)}
    held |= {value for value, _, _ in number_readings(everything)}  # "ONE" holds 1, "5%" 0.05 (agent.readings)
    assume(Decimal(number) not in held and Decimal(abs(number)) not in held)
    assert ground_value("n", number, given_sources).source.kind is SourceKind.NONE


@pytest.mark.parametrize(("value", "text"), [("MAD", "Flights from Madrid to Berlin"), ("BUC", "from Bucharest"),
                                             ("SEV", "to Seville"), ("BOL", "Bologna on Friday")])
def test_a_code_inside_a_word_is_not_grounded_by_it(value: str, text: str) -> None:
    assert ground_value("from", value, sources(user=text)).source.kind is SourceKind.NONE


def test_whole_tokens_match_across_case_accents_and_punctuation() -> None:
    given_sources = sources(user="Weather in Zürich, and the time in Asia/Tokyo please")
    assert ground_value("city", "zurich", given_sources).source.kind is SourceKind.USER
    text = "Weather in Zürich, and the time in Asia/Tokyo please"
    found = ground_value("tz", "Asia Tokyo", given_sources).source
    assert found.kind is SourceKind.USER and found.span is not None
    assert text[found.span[0]:found.span[1]] == "Asia/Tokyo"


@pytest.mark.parametrize(("value", "text"), [(0.744, "a score of .744"), (0.744, "score: 0.7440"), (1000, "1,000 runs"),
                                             ("1000", "1,000 runs"), (21.57, "DONE 21.57%")])
def test_numbers_are_equal_as_decimals(value: Any, text: str) -> None:
    assert ground_value("n", value, sources(user=text)).source.kind is SourceKind.USER


@pytest.mark.parametrize(("value", "text"), [(298, "its temperature is 298K"), (10, "a height of 10m, a width"),
                                             (4, "radius of 4m."), (50_000_000, "a payout of 50 million USD"),
                                             (0.05, "a rate of 5%")])
def test_a_number_written_with_its_unit_or_scale_is_read_as_that_number(value: Any, text: str) -> None:
    assert ground_value("n", value, sources(user=text)).source.kind is SourceKind.USER


@pytest.mark.parametrize(("value", "text"), [(320, "an A320 at the gate"), (4, "the q4 model"), (1, "0x1F"),
                                             (5, "1e5 tokens"), (23, "at 2026-12-07T23h")])
def test_digits_inside_a_code_are_no_number(value: Any, text: str) -> None:
    assert ground_value("n", value, sources(user=text)).source.kind is SourceKind.NONE


def test_a_sign_counts_and_digits_inside_identifiers_are_no_claims() -> None:
    assert ground_value("n", 3, sources(user="it is -3 outside")).source.kind is SourceKind.NONE
    assert [c.text for c in find_claims("Use baseline_q4 and Qwen2.5 here")] == ["Qwen"]


def test_claims_are_numbers_quotes_and_names_not_list_markers_or_sentence_starts() -> None:
    claims = find_claims('1. The "best config" is Tuned, 21.57% better.\nParis is nice; so is NASA.')
    assert [(c.kind, c.text) for c in claims] == [("quoted", "best config"), ("name", "Tuned"), ("number", "21.57"),
                                                  ("name", "NASA")]


def test_a_composed_string_is_grounded_only_when_each_claim_is() -> None:
    given_sources = sources(user="compute it * 100, 2", results=(("read_file", {"score": 0.612}),))
    good = ground_value("expression", "round((0.612 - 0.612) / 0.612 * 100, 2)", given_sources)
    assert good.source.kind is SourceKind.COMPOSED and all(p.source.grounded for p in good.parts)
    bad = ground_value("expression", "round((0.75 - 0.612) / 0.612 * 100, 2)", given_sources)
    assert bad.source.kind is SourceKind.NONE and [p.text for p in bad.parts if not p.source.grounded] == ["0.75"]


def test_tool_definitions_and_failed_results_are_no_sources() -> None:
    out = Sources()
    out.add_entry(0, "user", {"content": "hi"})
    out.add_entry(2, "tool_result", {"content": json.dumps({"ok": False, "kind": "invalid_arguments",
                                                            "detail": "expected 2023"})}, ok=False, call_id="call-1",
                  tool="t")
    out.add_entry(3, "assistant_tool_call", {"content": "2023"})
    assert ground_value("year", 2023, out).source.kind is SourceKind.NONE


def test_sources_prefer_the_users_words_then_the_latest_tool_result() -> None:
    both = sources(user="about 0.5", results=(("a", 0.5), ("b", 0.5)))
    assert both.find_number(Decimal("0.5")).kind is SourceKind.USER
    only_tools = sources(user="hi", results=(("a", 0.5), ("b", 0.5)))
    assert only_tools.find_number(Decimal("0.5")).tool == "b"
    assert only_tools.find_number(Decimal("0.5"), frozenset({"a"})).tool == "a"


def test_the_final_answer_of_the_issue_is_ungrounded_and_the_right_one_is_not() -> None:
    given_sources = sources(user="reply with DONE <improvement>% computed * 100, 2",
                            results=(("read_file", {"content": "score: 0.612"}), ("calculator", 21.57)))
    assert [c.source.kind for c in ground_text("DONE 21.57%", given_sources)] == [SourceKind.USER,
                                                                                 SourceKind.TOOL_RESULT]
    made_up = ground_text("DONE 10.00%", given_sources)
    assert [c.text for c in made_up if not c.source.grounded] == ["10.00"]


# -- declarations -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("declaration", [0, "", [], ["user", 3], {"sources": True, "match": "part"},
                                         {"sources": False}, {"source": "user"}])
def test_a_bad_declaration_is_refused(declaration: Any) -> None:
    with pytest.raises(ValueError, match="x-grounded"):
        requirement(declaration)


def test_a_declared_leaf_is_refused_with_its_path_when_ungrounded() -> None:
    schema = {"type": "object", "properties": {"from": {"type": "string", "x-grounded": True},
                                               "note": {"type": "string"}}}
    given_sources = sources(user="Flights from Madrid please")
    grounding = ground_arguments({"from": "MAD", "note": "anything"}, schema, given_sources)
    (error,) = ungrounded_errors(grounding)
    assert error.path == "from" and error.kind == "ungrounded" and "lookup tool" in error.reason
    assert not ungrounded_errors(ground_arguments({"from": "Madrid", "note": "x"}, schema, given_sources))


def test_an_enum_or_const_grounds_a_value_and_sources_can_be_named() -> None:
    schema = {"type": "object", "properties": {
        "unit": {"type": "string", "enum": ["km", "mi"], "x-grounded": True},
        "date": {"type": "string", "x-grounded": "calendar"}}}
    given_sources = sources(user="on 2026-09-11", results=(("calendar", {"date": "2026-09-11"}),))
    records = {g.path: g for g in ground_arguments({"unit": "km", "date": "2026-09-11"}, schema, given_sources)}
    assert records["unit"].source.kind is SourceKind.SCHEMA
    assert records["date"].source.tool == "calendar" and records["date"].satisfied
    only_user = sources(user="on 2026-09-11")
    refused = ground_arguments({"unit": "km", "date": "2026-09-11"}, schema, only_user)
    assert ungrounded_errors(refused)  # the calendar was asked for: the user's words do not satisfy it ...
    assert refused[1].source.kind is SourceKind.USER and not refused[1].satisfied  # ... but are where it was found


# -- enforcement in the grammar -----------------------------------------------------------------------------------

FLIGHTS = {"type": "object", "required": ["from", "to"], "additionalProperties": False, "properties": {
    "from": {"type": "string", "pattern": "^[A-Z]{3}$", "x-grounded": True},
    "to": {"type": "string", "pattern": "^[A-Z]{3}$", "x-grounded": True},
    "passengers": {"type": "integer", "x-grounded": True}}}


def test_a_declared_leaf_becomes_the_enum_of_the_values_its_sources_hold() -> None:
    looked_up = sources(user="Flights from Madrid to Berlin for 2",
                        results=(("airports.lookup", {"airports": [{"city": "Madrid", "iata": "MAD"},
                                                                   {"city": "Berlin", "iata": "BER"}]}),))
    narrowed = narrowed_parameters(FLIGHTS, looked_up)
    assert isinstance(narrowed, dict)
    assert sorted(narrowed["properties"]["from"]["enum"]) == ["BER", "MAD"]
    assert narrowed["properties"]["passengers"] == {"enum": [2]}


def test_a_required_leaf_with_no_candidate_makes_the_tool_uncallable() -> None:
    missing: list[str] = []
    assert narrowed_parameters(FLIGHTS, sources(user="Flights from Madrid to Berlin"), missing=missing) is False
    assert missing == ["from", "to"]


def test_a_blocked_leaf_names_the_tools_its_declaration_takes_values_from() -> None:
    """The note a blocked tool's next turn reads says which call gets each missing value."""
    from agent.grounding_policy import blocked_note

    schema = {"type": "object", "required": ["from", "date"], "properties": {
        "from": {"type": "string", "x-grounded": ["airports.lookup"]},
        "date": {"type": "string", "format": "date", "x-grounded": ["calendar.resolve_date", "user"]}}}
    missing: list[str] = []
    assert narrowed_parameters(schema, sources(user="Flights from Madrid on Friday"), missing=missing) is False
    assert missing == ["from (which airports.lookup returns)", "date (which calendar.resolve_date returns)"]
    assert ("for from (which airports.lookup returns), date (which calendar.resolve_date returns)."
            in blocked_note("search_flights", missing))
    missing.clear()  # a date in the request's words serves the date; the airport still needs the lookup
    assert narrowed_parameters(schema, sources(user="Flights from Madrid on 2026-09-11"), missing=missing) is False
    assert missing == ["from (which airports.lookup returns)"]


def test_a_long_request_still_narrows_a_declared_string_and_a_longer_one_leaves_it_to_validation() -> None:
    """Every run of up to six words of the request is a candidate: an 1,800-character request stays under
    MAX_CANDIDATES (the file name in it is one of them); past the bound the leaf is left to validation (None)."""
    import itertools

    from agent.grounding_policy import MAX_CANDIDATES

    path = {"type": "object", "properties": {"path": {"type": "string", "maxLength": 200, "x-grounded": "user"}},
            "required": ["path"]}
    words = ["".join(w) for w in itertools.islice(itertools.product("bcdfg", "aeiou", "klmnp", "aeiou", "rstvz"), 300)]
    request = " ".join(words[:150]) + " then read notes/baseline_q4.md " + " ".join(words[150:])
    assert len(request) > 1_800
    narrowed = narrowed_parameters(path, sources(user=request))
    assert isinstance(narrowed, dict) and "notes/baseline_q4.md" in narrowed["properties"]["path"]["enum"]
    assert len(narrowed["properties"]["path"]["enum"]) <= MAX_CANDIDATES
    assert narrowed_parameters(path, sources(user=request + " " + request.upper())) is None


def test_nothing_declared_means_nothing_narrowed() -> None:
    assert narrowed_parameters({"type": "object", "properties": {"a": {"type": "string"}}}, sources(user="x")) is None


@settings(max_examples=200, deadline=None)
@given(pieces=st.lists(st.one_of(st.sampled_from(["0.612", "0.744", "100", "2", "7", "0.75", "13"]),
                                 st.sampled_from([" - ", " * ", "(", ")", ", ", " / ", "round("])), max_size=12))
def test_composed_text_is_held_to_the_numbers_its_sources_hold(pieces: list[str]) -> None:
    schema = {"type": "object", "properties": {"expression": {"type": "string",
                                                              "x-grounded": {"match": "claims"}}}}
    given_sources = sources(user="* 100, 2", results=(("read_file", {"a": 0.612, "b": 0.744}),))
    narrowed = narrowed_parameters(schema, given_sources)
    assert isinstance(narrowed, dict)
    pattern = narrowed["properties"]["expression"]["allOf"][1]["pattern"]
    text = "".join(pieces)
    runs = re.findall(r"\d+(?:\.\d+)?", text)
    assert (re.search(pattern, text) is not None) == all(r in {"0.612", "0.744", "100", "2"} for r in runs)


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.sampled_from(["0.612", "100", "2", "1", "e", "e-", "E+", ".", "-", " ", "x", "round("]),
                       max_size=10))
def test_the_numbers_the_grammar_admits_in_text_are_the_grounded_ones(pieces: list[str]) -> None:
    """Soundness against the claims reader: text the narrowed grammar admits holds no number claim (exponents and
    decimals included) that its sources do not hold."""
    schema = {"type": "object", "properties": {"text": {"type": "string", "x-grounded": {"match": "claims"}}}}
    given_sources = sources(user="multiply 0.612 by 100 and 2 and 1")
    narrowed = narrowed_parameters(schema, given_sources)
    pattern = narrowed["properties"]["text"]["allOf"][1]["pattern"]
    text = "".join(pieces)
    if re.search(pattern, text) is not None:
        assert all(given_sources.find_number(c.number).grounded for c in find_claims(text) if c.number is not None)
    assert re.search(pattern, "1e-100") is None and re.search(pattern, "0.612.5") is None
    assert re.search(pattern, "round(0.612 * 100, 2).") is not None


def test_a_final_pattern_slot_takes_only_values_of_its_source() -> None:
    given_sources = sources(user="multiply by 100", results=(("read_file", {"score": 0.612}), ("calculator", 21.57)))
    pattern, answerable = final_pattern_for_turn("DONE {{number@calculator}}%", given_sources, escape)
    assert answerable and pattern == "DONE (?:21\\.57)%"
    empty, answerable = final_pattern_for_turn("DONE {{number@calculator}}%", sources(user="x"), escape)
    assert not answerable and re.fullmatch(empty, "DONE 1%") is None
    twice = sources(user="x", results=(("calculator", 0.0), ("read_file", {"score": 0.744}), ("calculator", 21.57)))
    assert final_pattern_for_turn("DONE {{number@calculator}}%", twice, escape)[0] == "DONE (?:0\\.0|21\\.57)%"
    assert final_pattern_for_turn("DONE {{number@calculator:last}}%", twice, escape)[0] == "DONE (?:21\\.57)%"


# -- the session: traced, checked, enforced -----------------------------------------------------------------------

def _session_tools(executed: list[str]) -> list[Any]:
    from agent.tool import Tool

    def lookup(args: Any, ctx: Any) -> dict[str, Any]:
        executed.append("airports.lookup")
        return {"airports": [{"city": "Madrid", "iata": "MAD"}, {"city": "Berlin", "iata": "BER"}]}

    def search(args: Any, ctx: Any) -> str:
        executed.append("search_flights")
        return f"3 flights {args['from']}->{args['to']}"

    return [Tool(name="airports.lookup", description="City names to IATA codes.", function=lookup,
                 parameters={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
                 constrained=True),
            Tool(name="search_flights", description="Search flights.", function=search,
                 parameters=FLIGHTS, constrained=True)]


def _call(name: str, **arguments: Any) -> str:
    from agent.protocol import QwenCodec
    from agent.testkit import call_text

    return call_text(QwenCodec(), name, **arguments)


def _run(tmp_path: Any, turns: list[str], **kw: Any) -> tuple[Any, Any, list[str], list[Any]]:
    from agent.protocol import QwenCodec
    from agent.session import Session
    from agent.testkit import ScriptedEngine
    from agent.tool import ToolRegistry
    from agent.trace import TraceRecorder, read_trace

    executed: list[str] = []
    engine = ScriptedEngine(turns, QwenCodec())
    with TraceRecorder(tmp_path / "trace.jsonl") as recorder:
        result = Session(engine, ToolRegistry(_session_tools(executed)), trace=recorder, **kw).run(
            "Flights from Madrid to Berlin for 2 people")
    return result, engine, executed, list(read_trace(tmp_path / "trace.jsonl").events)


def test_an_ungrounded_argument_is_refused_and_repaired_from_a_lookup(tmp_path: Any) -> None:
    turns = [_call("search_flights", **{"from": "MAD", "to": "BER", "passengers": 2}),
             _call("airports.lookup", query="Madrid Berlin"),
             _call("search_flights", **{"from": "MAD", "to": "BER", "passengers": 2}), "3 flights found"]
    result, engine, executed, events = _run(tmp_path, turns)
    assert result.outcome == "completed" and executed == ["airports.lookup", "search_flights"]
    rejected = next(e.data for e in events if e.event_type == "tool_call_rejected")
    assert {(e["path"], e["kind"]) for e in rejected["errors"]} == {("from", "ungrounded"), ("to", "ungrounded")}
    validated = [e.data for e in events if e.event_type == "tool_call_validated"][-1]
    sources_of = {g["path"]: g["source"] for g in validated["grounding"]}
    assert sources_of["from"]["tool"] == "airports.lookup" and sources_of["from"]["path"] == "airports[0].iata"
    assert sources_of["passengers"]["kind"] == "user"
    # the grammar held it too: before the lookup the tool could not be called, after it only the codes could be
    first, last = engine.calls[0].tools, engine.calls[2].tools
    assert next(t for t in first if t.name == "search_flights").constraint is False
    narrowed = next(t for t in last if t.name == "search_flights").constraint
    assert sorted(narrowed["properties"]["from"]["enum"]) == ["BER", "MAD"]


def test_the_final_answer_records_its_claims_and_verify_flags_a_made_up_number(tmp_path: Any) -> None:
    from agent.cli import main
    from agent.trace import verify_trace

    result, _, _, events = _run(tmp_path, ["DONE 10.00% for 2"])
    assert [(c.text, c.source.kind) for c in result.claims] == [("DONE", SourceKind.NONE), ("10.00", SourceKind.NONE),
                                                                 ("2", SourceKind.USER)]
    completed = events[-1].data
    assert [g["source"]["kind"] for g in completed["grounding"]] == ["none", "none", "user"]
    report = verify_trace(tmp_path / "trace.jsonl")
    assert report.ok and len(report.ungrounded) == 2 and "'10.00'" in report.ungrounded[1]
    assert main(["trace", "verify", str(tmp_path / "trace.jsonl")]) == 4


def test_verify_finds_recorded_grounding_that_the_ledger_does_not_back(tmp_path: Any) -> None:
    from agent.trace import verify_trace

    _run(tmp_path, ["3 flights for 2"])
    path = tmp_path / "trace.jsonl"
    lines = path.read_text().splitlines()
    last = json.loads(lines[-1])
    for claim in last["data"]["grounding"]:
        claim["source"] = {"kind": "tool_result", "call_id": "call-9", "tool": "x"}
    path.write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")
    report = verify_trace(path)
    assert not report.ok and any("disagrees" in p for p in report.problems)


def test_a_final_answer_slot_makes_the_model_call_before_it_can_answer(tmp_path: Any) -> None:
    turns = [_call("airports.lookup", query="Madrid"), "MAD"]
    result, engine, _, _ = _run(tmp_path, turns, final_pattern="{{text@airports.lookup}}")
    assert result.final_text == "MAD"
    assert "[^\\s\\S]" in engine.calls[0].final_pattern  # nothing to answer with yet: only a call can be written
    assert "MAD" in engine.calls[1].final_pattern


def test_a_slot_naming_no_source_is_refused_at_construction() -> None:
    from agent.protocol import QwenCodec
    from agent.session import Session, SessionError
    from agent.testkit import ScriptedEngine
    from agent.tool import ToolRegistry

    with pytest.raises(SessionError, match="names no source"):
        Session(ScriptedEngine([], QwenCodec()), ToolRegistry(_session_tools([])),
                final_pattern="DONE {{number@calculator}}%")


def test_a_call_refused_as_ungrounded_is_a_repeat_until_a_new_source_arrives(tmp_path: Any) -> None:
    search = _call("search_flights", **{"from": "MAD", "to": "BER", "passengers": 2})
    result, engine, executed, events = _run(tmp_path, [search, search, "I need the airport codes."])
    assert executed == [] and result.final_text == "I need the airport codes."
    (refused,) = [e.data for e in events if e.event_type == "repeats_refused"]
    assert refused["calls"][0]["answered_by"] == "call-1"
    assert "search_flights cannot be called yet" in engine.calls[2].prompt  # and the lookup is still a way on


@pytest.mark.model
def test_narrowed_schemas_compile_in_the_engine_and_hold_grounded_values(qwen2_vocab: Any) -> None:
    """What a turn's grammar enforces (the narrowed schemas, closed as the codec closes them) compiles over a real
    vocabulary and admits exactly the grounded arguments: the airport codes a lookup returned (a dynamic enum) and an
    expression's numbers (composed text)."""
    import constrained
    from agent.builtins import calculator_tool
    from agent.schema import close_for_grammar

    looked_up = sources(user="Flights from Madrid to Berlin for 2; compute it * 100, 2",
                        results=(("airports.lookup", {"airports": [{"iata": "MAD"}, {"iata": "BER"}]}),
                                 ("read_file", {"content": "score: 0.612"})))
    calculator = calculator_tool(grounded=True)

    def grammar(parameters: dict[str, Any]) -> Any:
        narrowed = narrowed_parameters(parameters, looked_up)
        assert isinstance(narrowed, dict)
        return constrained.compile_json_schema(close_for_grammar(narrowed), qwen2_vocab, whitespace="spaced")

    flights, expression = grammar(FLIGHTS), grammar(calculator.parameters)
    assert flights.accepts(b'{"from": "MAD", "to": "BER", "passengers": 2}')
    assert not flights.accepts(b'{"from": "MAD", "to": "OTP", "passengers": 2}')
    assert not flights.accepts(b'{"from": "MAD", "to": "BER", "passengers": 3}')
    assert expression.accepts(b'{"expression": "round((0.612 - 0.612) / 0.612 * 100, 2)"}')
    assert not expression.accepts(b'{"expression": "round((0.75 - 0.612) / 0.612 * 100, 2)"}')
    assert not expression.accepts(b'{"expression": "1e-100 * 100"}')


def test_typed_function_and_pydantic_builders_declare_grounding() -> None:
    import pydantic

    from agent.errors import ToolDefinitionError
    from agent.tool import Tool

    def pay(iban: Annotated[str, grounded("user")], amount: Annotated[float, grounded()], note: str = "") -> str:
        """Pay an invoice."""
        return "paid"

    tool = Tool.from_function(pay, kind="action")
    assert tool.parameters["properties"]["iban"]["x-grounded"] == "user"
    assert tool.parameters["properties"]["amount"]["x-grounded"] is True
    assert "x-grounded" not in tool.parameters["properties"]["note"] and tool.declares_grounding

    class Invoice(pydantic.BaseModel):
        iban: str = grounded(match="claims", description="the account")
        amount: float

    from_model = Tool.from_pydantic(Invoice, lambda invoice: "paid", name="pay_invoice", grounded=True)
    assert from_model.parameters["properties"]["iban"]["x-grounded"] == {"sources": True, "match": "claims"}
    assert from_model.grounding_requirement is not None and not from_model.grounding_requirement.whole
    with pytest.raises(ToolDefinitionError, match="x-grounded"):
        Tool(name="bad", function=lambda a, c: 0, parameters={"type": "object", "properties": {
            "x": {"type": "string", "x-grounded": ""}}})


@pytest.mark.model
def test_on_a_real_model_a_refused_ungrounded_code_is_repaired_from_a_lookup(tmp_path: Any) -> None:
    """The default model is made to call search_flights first (a named choice keeps a declared tool callable, so
    validation speaks): its airport codes are its own memory and are refused. Under ``required`` the lookup is then
    the only tool it can call, on words of the request (its query is grounded in the user's words, so not on a code
    it made up); the repaired search_flights can only take the codes the lookups returned (the turn's dynamic
    enum)."""
    from agent.chat import load_chat_model
    from agent.engine import ChatModelEngine
    from agent.session import Session
    from agent.tool import Tool, ToolRegistry
    from agent.trace import TraceRecorder, read_trace, verify_trace

    codes = {"madrid": "MAD", "berlin": "BER", "oslo": "OSL", "paris": "CDG"}

    def lookup(args: Any, ctx: Any) -> dict[str, Any]:
        words = re.findall(r"[a-z]+", args["query"].lower())
        return {"airports": [{"city": w.title(), "iata": codes[w]} for w in words if w in codes]}

    tools = [Tool(name="airports_lookup", description="IATA airport codes of the cities named in the query.",
                  function=lookup, constrained=True,
                  parameters={"type": "object", "properties": {"query": {"type": "string", "maxLength": 60,
                                                                         "x-grounded": "user"}},
                              "required": ["query"], "additionalProperties": False}),
             Tool(name="search_flights", description="Search flights between two airports (IATA codes).",
                  function=lambda args, ctx: f"2 flights {args['from']}->{args['to']}", constrained=True,
                  parameters={"type": "object", "required": ["from", "to"], "additionalProperties": False,
                              "properties": {side: {"type": "string", "pattern": "^[A-Z]{3}$", "x-grounded": True}
                                             for side in ("from", "to")}})]
    chat = load_chat_model("qwen2.5-coder-0.5b-instruct", n_ctx=2048, n_threads=1)
    try:
        with TraceRecorder(tmp_path / "trace.jsonl") as trace:
            result = Session(ChatModelEngine(chat.model, chat.codec), ToolRegistry(tools), trace=trace,
                             tool_choice=("search_flights", "required", "required", "search_flights", "none"),
                             parallel_calls=False).run("Find flights from Madrid to Berlin.")
    finally:
        chat.model.close()
    events = read_trace(tmp_path / "trace.jsonl").events
    rejected = [e.data for e in events if e.event_type == "tool_call_rejected"]
    assert rejected and {e["kind"] for e in rejected[0]["errors"]} == {"ungrounded"}
    ran = [e.data for e in events if e.event_type == "tool_call_validated"]
    assert {d["tool"] for d in ran[:-1]} == {"airports_lookup"} and ran[-1]["tool"] == "search_flights", result
    sources_of = {g["path"]: g["source"] for g in ran[-1]["grounding"]}
    assert {s["tool"] for s in sources_of.values()} == {"airports_lookup"}  # both codes from a lookup's result
    assert ran[-1]["arguments"]["from"] == "MAD"  # the refused MDN, repaired (which codes "to" got is the model's)
    assert verify_trace(tmp_path / "trace.jsonl").ok


def test_the_report_shows_every_value_with_its_source_linked_and_the_ungrounded_marked(tmp_path: Any) -> None:
    from agent.trace_report import render_html_report, render_timeline

    turns = [_call("search_flights", **{"from": "MAD", "to": "BER", "passengers": 2}),
             _call("airports.lookup", query="Madrid Berlin"),
             _call("search_flights", **{"from": "MAD", "to": "BER", "passengers": 2}), "Found 3 flights, MAD to OSL."]
    _, _, _, events = _run(tmp_path, turns)
    page = render_html_report(events)
    section = page[page.index("Where the values came from"):page.index("<h2>Timeline")]
    lookup_row = next(e.seq for e in events if e.event_type == "tool_result_committed" and e.data["ok"])
    assert f'href="#seq-{lookup_row}">airports.lookup result (call-2) at <code>airports[0].iata</code>' in section
    assert section.count('class="bad"') == 1 and "OSL" in section  # the answer's OSL: found nowhere
    assert f'id="seq-{lookup_row}"' in page
    assert "ungrounded: OSL" in render_timeline(events)


def test_a_refused_repeat_tells_the_model_which_grounded_values_a_blocked_tool_lacks(tmp_path: Any) -> None:
    lookup = _call("airports.lookup", query="Oslo")
    result, engine, _, _ = _run(tmp_path, [lookup, lookup, "Let me ask you for the codes."])
    assert result.final_text == "Let me ask you for the codes."
    note = engine.calls[2].prompt
    assert "search_flights cannot be called yet: no message or tool result holds a value for from, to" in note
    assert engine.calls[2].tool_choice == "auto"  # a blocked tool: the way on is another call, not only text
    lookup_spec = next(t for t in engine.calls[2].tools if t.name == "airports.lookup")
    assert lookup_spec.constraint is not False  # no other tool can be called: the lookup stays, with new words


def test_after_a_refused_repeat_that_cannot_answer_the_next_turn_offers_the_other_tools(tmp_path: Any) -> None:
    """A greedy model given the same prompt repeats the same calls: the turn after the refusal does not offer the
    repeated tool while another can be called, and the trace says which tools rest."""
    from agent.protocol import QwenCodec
    from agent.session import Session
    from agent.testkit import ScriptedEngine
    from agent.tool import Tool, ToolRegistry
    from agent.trace import TraceRecorder, read_trace

    clock = Tool(name="clock.today", description="Today's date.", function=lambda args, ctx: "2026-09-07",
                 parameters={"type": "object", "properties": {}}, constrained=True)
    lookup = _call("airports.lookup", query="Oslo")
    turns = [lookup, lookup, _call("clock.today"), "I need the codes."]
    engine = ScriptedEngine(turns, QwenCodec())
    with TraceRecorder(tmp_path / "trace.jsonl") as recorder:
        Session(engine, ToolRegistry([*_session_tools([]), clock]), trace=recorder).run("Flights Madrid-Berlin")
    offered = {t.name: t.constraint is not False for t in engine.calls[2].tools}
    assert offered == {"airports.lookup": False, "search_flights": False, "clock.today": True}
    assert engine.calls[2].tool_choice == "auto"
    assert {t.name: t.constraint is not False for t in engine.calls[3].tools}["airports.lookup"]  # one turn only
    (refused,) = [e.data for e in read_trace(tmp_path / "trace.jsonl").events if e.event_type == "repeats_refused"]
    assert refused["resting"] == ["airports.lookup"] and refused["next_tool_choice"] == "auto"


def test_a_result_of_a_call_on_invented_values_grounds_no_declaration_and_fails_verify(tmp_path: Any) -> None:
    """The calculator run on a number the model made up returns a number: it was found there (tainted), but it
    satisfies no declaration, and an answer that takes it fails trace verify."""
    from agent.builtins import builtin_tools
    from agent.protocol import QwenCodec
    from agent.session import Session
    from agent.testkit import ScriptedEngine
    from agent.tool import ToolRegistry
    from agent.trace import TraceRecorder, verify_trace

    turns = [_call("calculator", expression="0.75 * 100"), "DONE 75.0%"]

    def answer_pattern(question: str) -> str | None:
        engine = ScriptedEngine(turns, QwenCodec())
        Session(engine, ToolRegistry(builtin_tools(tmp_path)),
                final_pattern="DONE {{number@calculator}}%").run(question)
        return engine.calls[1].final_pattern

    assert "75" in (answer_pattern("What is 0.75 * 100 in %? DONE <n>%") or "")  # grounded: the slot takes it
    assert "75" not in (answer_pattern("What is it in %? DONE <n>%") or "")  # invented: the slot admits no number
    with TraceRecorder(tmp_path / "free.jsonl") as trace:
        free = Session(ScriptedEngine(turns, QwenCodec()), ToolRegistry(builtin_tools(tmp_path)), trace=trace).run(
            "What is it in %? DONE <n>%")
    (claim,) = [c for c in free.claims if c.kind == "number"]
    assert claim.source.tool == "calculator" and claim.source.tainted
    report = verify_trace(tmp_path / "free.jsonl")
    assert report.ok and any("comes only from the result of call-1" in u for u in report.ungrounded)


def test_after_a_result_the_model_reads_which_values_a_blocked_tool_still_lacks(tmp_path: Any) -> None:
    """A lookup asked about Oslo, which the request never names, returns a tainted result: search_flights stays
    uncallable, and the next turn is told why. A lookup of the request's own cities unblocks it: no note."""
    (tmp_path / "oslo").mkdir()
    (tmp_path / "cities").mkdir()
    _, engine, _, _ = _run(tmp_path / "oslo", [_call("airports.lookup", query="Oslo"), "I need the codes."])
    assert "search_flights cannot be called yet: no message or tool result holds a value for from, to" in (
        engine.calls[1].prompt)
    assert "cannot be called yet" not in engine.calls[0].prompt  # before any result: the tool list says enough
    _, engine, _, _ = _run(tmp_path / "cities", [_call("airports.lookup", query="Madrid Berlin"), "Found them."])
    assert "cannot be called yet" not in engine.calls[1].prompt


# -- the one-turn policy (`ember call`) ---------------------------------------------------------------------------

STOCKS = {"type": "object", "required": ["company_name", "detail_level", "market"], "properties": {
    "company_name": {"type": "string"}, "detail_level": {"type": "string"}, "market": {"type": "string"},
    "currency": {"type": "string"}}}


@pytest.mark.parametrize(("request_", "withheld"), [
    ("Give me detail information about stocks of Apple Inc.", False),  # the request names the tool: kept
    ("Give me detail information about Apple Inc.", True),  # it does not: one value of three is the request's
])
def test_a_call_mostly_of_the_models_values_stands_only_for_a_tool_the_request_names(request_: str,
                                                                                     withheld: bool) -> None:
    from agent.grounding_policy import judge_call

    arguments = {"company_name": "Apple Inc.", "detail_level": "detailed", "market": "NASDAQ"}
    verdict = judge_call("get_stock_info", arguments, STOCKS, sources(user=request_))
    assert verdict.withheld is withheld


def test_a_call_of_none_of_the_requests_values_is_withheld_even_for_a_named_tool() -> None:
    from agent.grounding_policy import judge_call

    arguments = {"company_name": "Microsoft", "detail_level": "detailed", "market": "NASDAQ", "currency": "USD"}
    verdict = judge_call("get_stock_info", arguments, STOCKS, sources(user="What do stocks do?"))
    assert verdict.withheld and verdict.dropped == ("currency",) and "currency" not in verdict.arguments
    kept = judge_call("get_stock_info", {**arguments, "company_name": "Apple", "market": "LSE"}, STOCKS,
                      sources(user="Apple's stocks on the LSE"))
    assert not kept.withheld  # two of three are the request's: no name needed


@given(word=st.sampled_from(["stock", "visit", "emission", "probability", "restaurant"]),
       ending=st.sampled_from(["", "s", "ed", "ing"]), other=st.sampled_from(["apple", "weather", "tennis"]))
def test_a_tool_is_named_by_a_content_word_of_its_name_in_any_inflection(word: str, ending: str,
                                                                         other: str) -> None:
    from agent.grounding_policy import names_tool

    inflected = word[:-1] + "ies" if word.endswith("y") and ending == "s" else word + ending
    for tool in (f"get_{word}_info", f"{word.title()}Data.fetch", f"calc.{word}_{other}"):
        assert names_tool(tool, sources(user=f"Something about {inflected.upper()} please"))
        assert not names_tool(tool.replace(word, "zzzz").replace(word.title(), "Zzzz"),
                              sources(user=f"Something about {inflected} please"))
    assert not names_tool(f"get_{word}_info", sources(user="get the info", system=f"Tools for {word}s"))
