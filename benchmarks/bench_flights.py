"""Flight study: a schema is a contract on form, not on truth.

Owns the form-vs-truth measurement of the seed (tool-calling-and-structured-outputs, the search_flights study) on
Ember's own runtime: the 24 requests of `studies_data` (6 city pairs × 4 date phrasings against a fixed today),
one model loaded once, greedy decoding, every row scored against the known answers. Refuses to interpret: the
numbers go to the table, docs/form-vs-truth.md says what they mean.

    REQUESTS ──► row (tools, tool_choice, system prompt) ──► ChatModelEngine.run_turn ──► codec.parse
                                                      └─(lookup row) Session.run: airports.lookup ─► search_flights
            ──► found_call (strict envelope call, else JSON recovered from prose) ──► score_call ──► table + plot

Rows: ``thin`` and ``rich`` schema decoded freely; ``rich`` constrained with ``tool_choice="auto"`` (the lazy grammar
only acts once the model opens ``<tool_call>``) and with ``"required"`` (the envelope and the schema are forced);
then knowledge injected on top of the constrained/required row, so form is held fixed and only truth can move:
(a) today's date in the system prompt, (b) an ``airports.lookup`` data tool in a real `Session`, (c) an IATA enum
in the schema, and all three together.

The auto study (`AUTO_ROWS`, English and Finnish requests, ``--lang en,fi``): every request a real `Session` under
``tool_choice="auto"`` — no per-turn plan, no forced first tool — on top of the constrained rich schema: the
baseline, (a) today and weekday in the system prompt, (b) airports.lookup offered, (b2) calendar.resolve_date
offered (`knowledge_tools`), (c) the IATA enum, (a) + (c), (e) the tools run on the request by the application
and their answers in the system prompt, (f) those answers as the schema's enums, (e) + (f'), (g) today's date from
the real ``mcp-server-time`` server over MCP (`knowledge_tools.time_server_tools`; scored against the date that
server returned, since the study's fixed today is not the machine's), and agent as a tool
(one ``travel_desk`` tool whose implementation is a child Session with airports.lookup and calendar.resolve_date,
`agent.subagent.agent_tool`). Each request is traced and the trace verified (nested traces included); one request's
trace per row is kept under ``benchmarks/traces/flights/``. Each row's per-request results are stored under
``benchmarks/results/flights/`` and the RESULTS.md section is rebuilt from every stored row (``--report-only``
rebuilds it without a model).

Measurement shortcut (documented in the table notes): a turn stops once its first ``</tool_call>`` has been
generated (the engine's cancel hook), because only the first call is scored and this model otherwise repeats the
call until ``max_tokens`` when the envelope is forced. The constrained rows use `rich_schema(date_pattern=False)`:
Ember's schema compiler refuses ``format`` together with ``pattern`` (``UnsupportedSchemaError``); every
``format: date`` string already matches the dropped pattern, so the enforced language is the intersection anyway.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_flights.py [--model NAME|PATH] [--limit N] [--rows a,b]
[--lang en,fi] [--no-write] [--report-only]``
(also ``ember bench flights``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


import studies_data as sd
from _common import BENCHMARKS_DIR, environment_lines, figure, markdown_table, save_figure, write_section
from knowledge_tools import CALENDAR_TOOL, LOOKUP_TOOL

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_THREADS",
    "HEADING",
    "ROWS",
    "FirstCallStop",
    "RequestOutcome",
    "Row",
    "RowResult",
    "load_engine",
    "main",
    "run_row",
    "single_turn",
]

DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"
HEADING = "## Flight study: form vs truth (search_flights, 24 requests)"
MAX_TOKENS = 128
FLIGHT_TOOL = "search_flights"
PACKAGES = ("llama-cpp-python", "numpy", "jsonschema")
DEFAULT_THREADS = 1
"""llama.cpp threads for both generation and batches. Not llama-cpp-python's default (half the cores for single
tokens, all cores for batches): on a 2-core machine shared with other work, the all-core batch path stalls on
thread barriers — measured here, a constrained turn (27 of 39 tokens forced, evaluated in batches) took 64 s with
the default and 4.4 s with one thread. ``--threads 0`` restores the default."""


def load_engine(model: str, *, threads: int | None = DEFAULT_THREADS, n_ctx: int = 4096,
                progress: Callable[[str], None] | None = None) -> Any:
    """The model (store name or path) loaded once, wrapped in a greedy `ChatModelEngine` with its codec.

    Same resolution as `agent.chat.load_chat_model`, which does not take a thread count."""
    from agent import models
    from agent.engine import ChatModelEngine
    from agent.protocol import codec_for
    from constrained.llama import LlamaModel

    path = models.model_path(model, progress=progress)
    if progress is not None:
        progress(f"loading {path.name} (n_threads={threads or 'default'})")
    llama_model = LlamaModel.load(path, n_ctx=n_ctx, n_threads=threads or None)
    return ChatModelEngine(llama_model, codec_for(llama_model))


@dataclass(frozen=True, kw_only=True)
class Row:
    """One configuration of the study."""

    key: str
    """Short id used by ``--rows``."""
    label: str
    """The table's first column."""
    schema: Callable[[], dict[str, Any]]
    """The search_flights parameters."""
    constrained: bool = False
    """ToolSpec.constrained: the argument schema is enforced inside the envelope."""
    tool_choice: str = "auto"
    today: bool = False
    """Knowledge (a): today's date in the system prompt."""
    lookup: bool = False
    """Knowledge (b): an airports.lookup data tool, run as a real Session."""
    first_tool_choice: str | None = None
    """The Session's tool_choice for its first turn when it differs from ``tool_choice`` (e.g. force the lookup)."""
    session: bool = False
    """Run as a real multi-step `Session` under ``tool_choice`` (the auto study: no plan, no forced first tool)."""
    calendar: bool = False
    """Knowledge (b2): a calendar.resolve_date data tool beside search_flights."""
    hint: bool = True
    """Auto rows: tell the model in the system prompt to call the offered knowledge tools first (`TOOL_HINTS`)."""
    agent: bool = False
    """Agent as a tool: one travel_desk tool (a child Session with airports.lookup and calendar.resolve_date)."""
    resolved: bool = False
    """Knowledge (e): the knowledge tools run on the request by the application, their answers in the system
    prompt (`knowledge_tools.request_prompt`)."""
    mcp_time: bool = False
    """Knowledge (g): the real ``mcp-server-time`` server's tools offered (over MCP, `agent.mcp`); the request is
    scored against the date the server returned (`knowledge_tools.server_today`), not the study's fixed today."""
    request_enum: str = ""
    """Knowledge (f): those answers as the schema's enums (`knowledge_tools.request_enums`): from/to one of the
    request's two airports, listed ``"sorted"`` or ``"as named"`` (in the request's order); the date the one it
    names. ``""``: no such enum."""
    grounded: Any = None
    """Enforcement (h): the ``x-grounded`` declaration put on search_flights' ``from``, ``to`` and ``date`` (``True``:
    any input or tool result; ``"tool_result"``: tool results only; a list of sources or tool names); None: none.
    The session then holds those values to what the conversation holds (`agent.grounding_policy`)."""
    tool_arguments_grounded: bool = False
    """Enforcement rows: the knowledge tools' own arguments (the lookup's ``city``, the calendar's ``expression``)
    declared ``"x-grounded": "user"``: the model passes words of the request, never an example from a description."""
    tool_descriptions: str = "examples"
    """The knowledge tools' descriptions, a style of `knowledge_tools.DESCRIPTIONS`: ``examples`` (every other
    row's), ``request`` (pass the user's request as written: both tools find what they need in it), ``words`` (the
    date words / the city name as the request writes them, with no example value to copy)."""
    typed_inputs: bool = False
    """Enforcement rows: calendar.resolve_date's argument declares the language it reads (a ``pattern``,
    `knowledge_tools.DATE_EXPRESSION_PATTERN`), so its dynamic enum holds only the request's date phrases."""
    lookup_other_words: bool = False
    """Enforcement rows: airports.lookup, passed text that also holds other words (a whole request), says which words
    named no airport (`knowledge_tools.other_words`)."""
    calendar_first: bool = False
    """Enforcement rows: calendar.resolve_date is offered (listed, and hinted) before airports.lookup."""
    refusal_only: bool = False
    """Enforcement rows, a diagnostic of the two layers: each declared value's own constraints moved under an
    ``allOf``, where the session does not narrow the grammar to the candidates (`agent.grounding_policy`: a leaf
    under ``allOf`` is held by validation alone), so search_flights stays callable and an ungrounded value is refused
    with an ok:false result naming the path, instead of being masked out."""
    source_descriptions: bool = False
    """Enforcement rows: search_flights' ``from``/``to``/``date`` descriptions name the tool whose result each value
    is copied from (`SOURCE_DESCRIPTIONS`)."""
    final_pattern: str | None = None
    """Enforcement rows: the Session's ``final_pattern``; a slot such as ``{{text@search_flights}}`` holds the answer to
    a value that tool returned, so the run cannot end before the search ran (`agent.grounding_policy`)."""

    @property
    def multi_step(self) -> bool:
        return self.lookup or self.session


def _rich_c() -> dict[str, Any]:
    return sd.rich_schema(date_pattern=False)


def _enum_c() -> dict[str, Any]:
    schema = sd.enum_schema()
    schema["properties"]["date"].pop("pattern")
    return schema


def _thin_c() -> dict[str, Any]:
    return sd.thin_schema()


GROUNDED_FIELDS: tuple[str, ...] = ("from", "to", "date")
"""The search_flights parameters an enforcement row declares grounded (every parameter the answer key scores)."""


SOURCE_DESCRIPTIONS: Mapping[str, str] = {
    "from": "Departure airport: the three-letter IATA code airports.lookup returned for the departure city.",
    "to": "Arrival airport: the three-letter IATA code airports.lookup returned for the arrival city.",
    "date": "Departure date: the YYYY-MM-DD date calendar.resolve_date returned for the request's date words.",
}
"""search_flights' parameter descriptions where they name the knowledge tool each value comes from."""


def grounded_schema(schema: dict[str, Any], declaration: Any, *, describe_sources: bool = False,
                    refusal_only: bool = False) -> dict[str, Any]:
    """``schema`` with ``"x-grounded": declaration`` on each of `GROUNDED_FIELDS` (a new dict; None: unchanged; a
    `Mapping` gives each field its own),
    with ``describe_sources`` their descriptions replaced by `SOURCE_DESCRIPTIONS`, and with ``refusal_only`` their
    type, pattern and format moved under an ``allOf`` (`Row.refusal_only`: validation alone holds them)."""
    from agent.grounding import GROUNDED_KEY

    if declaration is None and not describe_sources:
        return schema
    out = json.loads(json.dumps(schema))
    for key in GROUNDED_FIELDS:
        prop = out["properties"][key]
        if describe_sources:
            prop["description"] = SOURCE_DESCRIPTIONS[key]
        if refusal_only:
            prop = out["properties"][key] = {"description": prop.pop("description"),
                                             "allOf": [prop]} if "description" in prop else {"allOf": [prop]}
        if declaration is not None:
            prop[GROUNDED_KEY] = declaration[key] if isinstance(declaration, Mapping) else declaration
    return out


AGENT_TOOL_NAME = "travel_desk"

ROWS: tuple[Row, ...] = (
    Row(key="thin", label="thin schema, free", schema=sd.thin_schema),
    Row(key="rich", label="rich schema, free", schema=sd.rich_schema),
    Row(key="rich-c", label="rich, constrained, auto", schema=_rich_c, constrained=True),
    Row(key="rich-cr", label="rich, constrained, required", schema=_rich_c, constrained=True,
        tool_choice="required"),
    Row(key="today", label="+ (a) today in system prompt", schema=_rich_c, constrained=True, tool_choice="required",
        today=True),
    Row(key="lookup", label="+ (b) airports.lookup offered (Session)", schema=_rich_c, constrained=True,
        tool_choice="required", lookup=True),
    Row(key="lookup-first", label="+ (b') airports.lookup forced first (Session)", schema=_rich_c, constrained=True,
        tool_choice="required", lookup=True, first_tool_choice=LOOKUP_TOOL),
    Row(key="enum", label="+ (c) IATA enum in schema", schema=_enum_c, constrained=True, tool_choice="required"),
    Row(key="all", label="+ (a) + (b') + (c)", schema=_enum_c, constrained=True, tool_choice="required", today=True,
        lookup=True, first_tool_choice=LOOKUP_TOOL),
)
"""The single-turn study's rows (``tool_choice="required"``), in table order."""

TOOL_SOURCES: Mapping[str, list[str]] = {"from": [LOOKUP_TOOL], "to": [LOOKUP_TOOL], "date": [CALENDAR_TOOL]}
"""Row (h4)'s declarations: each value grounded in the one tool that returns it, which a blocked call's note names."""

FLIGHT_ANSWER = "Flight {{text@search_flights}}"
"""Row (h3)'s final answer: a flight the search returned, named as it returned it."""

AUTO_ROWS: tuple[Row, ...] = (
    Row(key="auto", label="rich, constrained, auto (Session)", schema=_rich_c, constrained=True, session=True),
    Row(key="auto-thin", label="thin schema, constrained, auto (Session)", schema=_thin_c, constrained=True,
        session=True),
    Row(key="auto-today", label="+ (a) today and weekday in system prompt", schema=_rich_c, constrained=True,
        session=True, today=True),
    Row(key="auto-lookup", label="+ (b) airports.lookup offered", schema=_rich_c, constrained=True, session=True,
        lookup=True),
    Row(key="auto-calendar", label="+ (b2) calendar.resolve_date offered", schema=_rich_c, constrained=True,
        session=True, calendar=True),
    Row(key="auto-enum", label="+ (c) IATA enum in schema", schema=_enum_c, constrained=True, session=True),
    Row(key="auto-best", label="(a) + (c)", schema=_enum_c, constrained=True, session=True,
        today=True),
    Row(key="auto-resolved", label="+ (e) tools run on the request, answers in system prompt", schema=_rich_c,
        constrained=True, session=True, resolved=True),
    Row(key="auto-request-enum", label="+ (f) enum of this request's airports (sorted) and date, from the tools",
        schema=_rich_c, constrained=True, session=True, request_enum="sorted"),
    Row(key="auto-best-request", label="best combination: (e) + (f'), the airports listed as the request names them",
        schema=_rich_c, constrained=True, session=True, resolved=True, request_enum="as named"),
    Row(key="auto-agent", label="agent as a tool: travel_desk (lookup + calendar)", schema=_rich_c,
        constrained=True, session=True, agent=True),
    Row(key="auto-mcp-time", label="+ (g) time.get_current_time offered: the real mcp-server-time over MCP "
        "(scored against its date)", schema=_rich_c, constrained=True, session=True, mcp_time=True),
    Row(key="auto-grounded", label="+ (h) from/to/date declared x-grounded: true; airports.lookup and "
        "calendar.resolve_date offered", schema=_rich_c, constrained=True, session=True, lookup=True, calendar=True,
        grounded=True),
    Row(key="auto-grounded-2", label="(h2) = (h) + the knowledge tools' own arguments grounded in the request's "
        "words, their descriptions without examples, calendar first, search_flights' descriptions naming each value's "
        "tool", schema=_rich_c, constrained=True, session=True, lookup=True, calendar=True, grounded=True,
        tool_arguments_grounded=True, tool_descriptions="words", calendar_first=True, source_descriptions=True),
    Row(key="auto-grounded-2-results", label="(h2') = (h2) with x-grounded: \"tool_result\" (tool results only)",
        schema=_rich_c, constrained=True, session=True, lookup=True, calendar=True, grounded="tool_result",
        tool_arguments_grounded=True, tool_descriptions="words", calendar_first=True, source_descriptions=True),
    Row(key="auto-grounded-answer", label="(h3) = (h2') + the final answer held to a search_flights result "
        f"(`{FLIGHT_ANSWER}`)", schema=_rich_c, constrained=True, session=True, lookup=True, calendar=True,
        grounded="tool_result", tool_arguments_grounded=True, tool_descriptions="words", calendar_first=True,
        source_descriptions=True, final_pattern=FLIGHT_ANSWER),
    Row(key="auto-grounded-tools", label="(h4) = (h3) with each value declared from its tool (from/to: "
        "airports.lookup, date: calendar.resolve_date)", schema=_rich_c, constrained=True, session=True, lookup=True,
        calendar=True, grounded=TOOL_SOURCES, tool_arguments_grounded=True, tool_descriptions="words",
        calendar_first=True, source_descriptions=True, final_pattern=FLIGHT_ANSWER),
    Row(key="auto-grounded-typed", label="(h5) = (h3) + calendar.resolve_date's argument typed by the language it "
        "reads (a `pattern`: its dynamic enum holds only the request's date phrases)", schema=_rich_c,
        constrained=True, session=True, lookup=True, calendar=True, grounded="tool_result",
        tool_arguments_grounded=True, tool_descriptions="words", calendar_first=True, source_descriptions=True,
        final_pattern=FLIGHT_ANSWER, typed_inputs=True),
)
"""The auto study's rows: every request a real `Session` under ``tool_choice="auto"`` (no per-turn plan, no forced
first tool), knowledge rows on top of the constrained auto baseline."""

DIAGNOSTIC_ROWS: tuple[Row, ...] = (
    Row(key="auto-agent-first", label="diagnostic: travel_desk forced first, then auto", schema=_rich_c,
        constrained=True, session=True, agent=True, first_tool_choice=AGENT_TOOL_NAME),
    Row(key="auto-mcp-time-first", label="diagnostic: time.get_current_time (mcp-server-time) forced first, then "
        "auto (scored against its date)", schema=_rich_c, constrained=True, session=True, mcp_time=True,
        first_tool_choice="time.get_current_time"),
)
"""Not part of the auto study (they force a first tool): what the child agent does when it is called at all."""

ALL_ROWS: tuple[Row, ...] = ROWS + AUTO_ROWS + DIAGNOSTIC_ROWS


# -- one turn -----------------------------------------------------------------------------------------------------


class FirstCallStop:
    """A cancel signal + text sink for ``run_turn``: trips once the first ``</tool_call>`` has been generated, and
    records when the first text arrived (time to first token)."""

    def __init__(self, close_tag: str = "</tool_call>") -> None:
        self.close_tag = close_tag
        self.text = ""
        self.started = time.perf_counter()
        self.first_text_s: float | None = None
        """Seconds from construction to the first generated text piece; None when nothing was generated."""

    def on_text(self, piece: str) -> None:
        if self.first_text_s is None:
            self.first_text_s = time.perf_counter() - self.started
        self.text += piece

    def is_set(self) -> bool:
        return self.close_tag in self.text


@dataclass(frozen=True, kw_only=True)
class TurnRecord:
    """One single-turn run: what the model wrote and what it cost."""

    text: str
    strict_calls: tuple[tuple[str, dict[str, Any]], ...]
    action: str
    """``tool_calls``, ``final_text`` or ``malformed`` (the codec's verdict)."""
    finish_reason: str
    n_prompt_tokens: int
    n_reused_tokens: int
    n_output_tokens: int
    seconds: float
    ttft_s: float | None
    prompt_eval_ms: float | None


def single_turn(engine: Any, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any], *, tool_choice: str,
                max_tokens: int = MAX_TOKENS) -> TurnRecord:
    """One speculative turn (rolled back after), stopped after its first complete call, parsed by the codec."""
    from agent.protocol.base import MalformedToolCall, ToolCalls

    stop = FirstCallStop()
    turn = engine.run_turn(messages, tools=list(tools), tool_choice=tool_choice, max_tokens=max_tokens,
                           cancel=stop, on_text=stop.on_text)
    engine.rollback()
    action = engine.codec.parse(turn.text)
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    kind = "final_text"
    if isinstance(action, ToolCalls):
        calls, kind = tuple((c.name, dict(c.arguments)) for c in action.calls), "tool_calls"
    elif isinstance(action, MalformedToolCall):
        kind = f"malformed:{action.reason}"
    timings = turn.timings or {}
    return TurnRecord(text=turn.text, strict_calls=calls, action=kind, finish_reason=turn.finish_reason,
                      n_prompt_tokens=turn.n_prompt_tokens, n_reused_tokens=turn.n_reused_tokens,
                      n_output_tokens=turn.n_output_tokens, seconds=turn.seconds, ttft_s=stop.first_text_s,
                      prompt_eval_ms=timings.get("prompt_eval_ms"))


# -- rows ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RequestOutcome:
    """One request under one row."""

    request_id: str
    score: sd.CallScore
    call: dict[str, Any] | None
    """The scored call (``name``, ``arguments``, ``strict``), or None."""
    raw: str
    """What the model wrote (the whole conversation's assistant text for the Session row)."""
    seconds: float
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class RowResult:
    row: Row
    outcomes: tuple[RequestOutcome, ...]
    seconds: float

    def count(self, column: str) -> int:
        return sum(bool(getattr(o.score, column)) for o in self.outcomes)


TOOL_HINTS: tuple[tuple[str, str], ...] = (
    ("lookup", "Before search_flights, call airports.lookup for each city to get its IATA code."),
    ("calendar", "Before search_flights, call calendar.resolve_date with the date words of the request to get the "
                 "date."),
    ("agent", "Before search_flights, ask travel_desk for the airport codes and the date."),
    ("mcp_time", "Before search_flights, call time.get_current_time to learn today's date."),
)
"""Auto rows only: one sentence per offered knowledge tool, appended to the system prompt (a study input: with the
plain prompt this model called none of them in a smoke run, see RESULTS.md)."""


def _system(row: Row, request: sd.Request) -> str:
    import knowledge_tools as kt

    prompt = sd.today_system_prompt() if row.today else sd.BASE_SYSTEM_PROMPT
    if row.resolved and (facts := kt.request_prompt(request.text)):
        prompt = f"{prompt} {facts}"
    if row.session and row.hint:
        hints = sorted(TOOL_HINTS, key=lambda h: h[0] != "calendar") if row.calendar_first else TOOL_HINTS
        prompt = " ".join([prompt, *(hint for attr, hint in hints if getattr(row, attr))])
    return prompt


def _flight_spec(row: Row) -> Any:
    from agent.protocol.base import ToolSpec

    return ToolSpec(name=FLIGHT_TOOL, description=sd.FLIGHT_TOOL_DESCRIPTION, parameters=row.schema(),
                    constrained=row.constrained)


def _call_dict(call: sd.FoundCall | None) -> dict[str, Any] | None:
    return None if call is None else {"name": call.name, "arguments": dict(call.arguments), "strict": call.strict}


def _run_single(engine: Any, row: Row, request: sd.Request, max_tokens: int) -> RequestOutcome:
    messages = [{"role": "system", "content": _system(row, request)}, {"role": "user", "content": request.text}]
    rec = single_turn(engine, messages, [_flight_spec(row)], tool_choice=row.tool_choice, max_tokens=max_tokens)
    call = sd.found_call(rec.strict_calls, rec.text, prefer=FLIGHT_TOOL)
    return RequestOutcome(request_id=request.id, score=sd.score_call(call, request, tool=FLIGHT_TOOL),
                          call=_call_dict(call), raw=rec.text, seconds=rec.seconds,
                          detail={"action": rec.action, "finish_reason": rec.finish_reason,
                                  "n_output_tokens": rec.n_output_tokens, "n_prompt_tokens": rec.n_prompt_tokens})


def lookup_tools(row: Row, searches: list[dict[str, Any]]) -> list[Any]:
    """The Session row's registry contents: airports.lookup (data: city → IATA code) and a recording
    search_flights that returns a canned result."""
    from agent.tool import Tool, ToolFailure, ToolKind

    by_city = {city.casefold(): code for city, code in sd.AIRPORTS.items()}

    def lookup(args: Any, ctx: Any) -> dict[str, str]:
        city = str(args["city"]).strip()
        code = by_city.get(city.casefold())
        if code is None:
            raise ToolFailure(f"no airport known for city {city!r}")
        return {"city": city, "iata": code}

    def search(args: Any, ctx: Any) -> dict[str, Any]:
        searches.append(dict(args.values))
        return {"flights": [{"flight": "EM 123", "departs": "08:05", "arrives": "11:40", "price_eur": 129}]}

    lookup_tool = Tool(
        name=LOOKUP_TOOL, kind=ToolKind.DATA, constrained=row.constrained,
        description="Look up the IATA code of a city's airport. Call it for each city before search_flights.",
        parameters={"type": "object", "properties": {"city": {"type": "string", "description": "City name, "
                                                                                              "e.g. Madrid."}},
                    "required": ["city"]},
        function=lookup)
    search_tool = Tool(name=FLIGHT_TOOL, kind=ToolKind.DATA, constrained=row.constrained,
                       description=sd.FLIGHT_TOOL_DESCRIPTION, parameters=row.schema(), function=search)
    return [lookup_tool, search_tool]


def _search_call(strict: list[tuple[str, dict[str, Any]]], message: Mapping[str, Any]) -> sd.FoundCall | None:
    """The search_flights call of one assistant message: a strict call, else one written in its prose."""
    found = sd.found_call([c for c in strict if c[0] == FLIGHT_TOOL], "" if strict else message.get("content") or "",
                          prefer=FLIGHT_TOOL)
    return found if found is not None and found.name == FLIGHT_TOOL else None


def _run_session(engine: Any, row: Row, request: sd.Request, max_tokens: int) -> RequestOutcome:
    from agent.limits import AgentLimits
    from agent.session import Session
    from agent.tool import ToolRegistry

    searches: list[dict[str, Any]] = []
    session = Session(engine, ToolRegistry(lookup_tools(row, searches)), system_prompt=_system(row, request),
                      tool_choice=row.first_tool_choice or row.tool_choice,
                      limits=AgentLimits(max_model_steps=3, max_tool_calls=8, max_output_tokens=max_tokens))
    started = time.perf_counter()
    result = session.run(request.text)
    seconds = time.perf_counter() - started
    engine.rollback()
    call, lookups, raw = None, [], []
    for message in result.messages:
        if message.get("role") != "assistant":
            continue
        strict = []
        for tc in message.get("tool_calls") or []:
            fn = tc.get("function", tc)
            args = fn.get("arguments")
            args = json.loads(args) if isinstance(args, str) else args
            strict.append((fn["name"], dict(args or {})))
            if fn["name"] == LOOKUP_TOOL:
                lookups.append((args or {}).get("city"))
            raw.append(f"<call {fn['name']} {json.dumps(args, ensure_ascii=False)}>")
        if message.get("content"):
            raw.append(message["content"])
        if call is None:
            call = _search_call(strict, message)
    return RequestOutcome(request_id=request.id, score=sd.score_call(call, request, tool=FLIGHT_TOOL),
                          call=_call_dict(call), raw="\n".join(raw), seconds=seconds,
                          detail={"outcome": str(result.outcome), "steps": result.steps,
                                  "tool_calls": result.tool_calls, "lookups": lookups, "executed_searches": searches,
                                  "limit": str(result.limit) if result.limit else None})


AUTO_LIMITS = dict(max_model_steps=6, max_tool_calls=12)
"""The auto study's Session bounds: room for lookup → lookup → resolve → search → answer (and one repair)."""
AGENT_TOOL = AGENT_TOOL_NAME
AGENT_SYSTEM_PROMPT = ("You are a travel desk. For each city in the request call airports.lookup, and for the date "
                       "words call calendar.resolve_date. Then answer with the departure airport code, the arrival "
                       "airport code and the date as YYYY-MM-DD.")
AGENT_DESCRIPTION = ("Ask the travel desk to resolve a travel request into airport codes and an ISO date. Pass the "
                     "cities and the date words; it answers with IATA codes and YYYY-MM-DD. Call it before "
                     "search_flights.")


def flight_schema(row: Row, request: sd.Request) -> dict[str, Any]:
    """The row's search_flights parameters for ``request``: `Row.schema`, narrowed to the request's airports and
    date when the row injects them as enums (f). Fewer than two airports or no date leave that part as it is."""
    import knowledge_tools as kt

    schema = grounded_schema(row.schema(), row.grounded, describe_sources=row.source_descriptions,
                             refusal_only=row.refusal_only)
    if row.request_enum:
        codes, dates = kt.request_enums(request.text, as_named=row.request_enum == "as named")
        props = schema["properties"]
        if len(codes) >= 2:
            for key in ("from", "to"):
                props[key].pop("pattern", None)
                props[key]["enum"] = codes
        if dates:
            props["date"].pop("format", None)
            props["date"]["enum"] = dates
    return schema


def auto_tools(engine: Any, row: Row, searches: list[dict[str, Any]], request: sd.Request, *,
               child_dir: Path | None) -> list[Any]:
    """The auto row's registry: search_flights (recording, canned result) plus the row's knowledge tools."""
    from agent.limits import AgentLimits
    from agent.subagent import SubAgent, agent_tool
    from agent.tool import Tool, ToolKind, ToolRegistry

    import knowledge_tools as kt

    def search(args: Any, ctx: Any) -> dict[str, Any]:
        searches.append(dict(args.values))
        return {"flights": [{"flight": "EM 123", "departs": "08:05", "arrives": "11:40", "price_eur": 129}]}

    tools: list[Any] = []
    own = "user" if row.tool_arguments_grounded else None
    if row.lookup:
        tools.append(kt.airports_tool(constrained=row.constrained, grounded=own, descriptions=row.tool_descriptions,
                                      other=row.lookup_other_words))
    if row.calendar:
        calendar_ = kt.calendar_tool(constrained=row.constrained, grounded=own, descriptions=row.tool_descriptions,
                                     typed=row.typed_inputs)
        tools.insert(0, calendar_) if row.calendar_first else tools.append(calendar_)
    if row.mcp_time:
        tools += kt.time_server_tools()
    if row.agent:
        desk = SubAgent(engine=engine, tools=ToolRegistry([kt.airports_tool(), kt.calendar_tool()]),
                        system_prompt=AGENT_SYSTEM_PROMPT,
                        limits=AgentLimits(**AUTO_LIMITS, max_output_tokens=MAX_TOKENS), trace_dir=child_dir)
        tools.append(agent_tool(AGENT_TOOL, AGENT_DESCRIPTION, desk))
    tools.append(Tool(name=FLIGHT_TOOL, kind=ToolKind.DATA, constrained=row.constrained,
                      description=sd.FLIGHT_TOOL_DESCRIPTION, parameters=flight_schema(row, request), function=search))
    return tools


def _message_calls(message: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    calls = []
    for tc in message.get("tool_calls") or []:
        fn = tc.get("function", tc)
        args = fn.get("arguments")
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except ValueError:
            args = {"_unparsed": args}
        calls.append((fn["name"], dict(args or {}) if isinstance(args, dict) else {"_value": args}))
    return calls


def _run_auto(engine: Any, row: Row, request: sd.Request, max_tokens: int, trace_path: Path | None) -> RequestOutcome:
    """One request as a real Session under ``row.tool_choice`` (auto): the model decides which tools to call."""
    from agent.limits import AgentLimits
    from agent.session import Session
    from agent.tool import ToolRegistry
    from agent.trace import TraceRecorder
    from agent.trace_verify import verify_trace

    searches: list[dict[str, Any]] = []
    trace = None
    if trace_path is not None:
        trace_path.parent.mkdir(parents=True, exist_ok=True)
        trace = TraceRecorder(trace_path)
    tools = auto_tools(engine, row, searches, request, child_dir=None if trace_path is None else trace_path.parent)
    choice = (row.first_tool_choice, row.tool_choice) if row.first_tool_choice else row.tool_choice
    session = Session(engine, ToolRegistry(tools), system_prompt=_system(row, request), tool_choice=choice,
                      final_pattern=row.final_pattern, trace=trace,
                      limits=AgentLimits(**AUTO_LIMITS, max_output_tokens=max_tokens))
    started = time.perf_counter()
    try:
        result = session.run(request.text)
    finally:
        if trace is not None:
            trace.close()
    seconds = time.perf_counter() - started
    engine.rollback()
    call, calls, raw = None, [], []
    for message in result.messages:
        if message.get("role") == "tool":
            raw.append(f"<result {str(message.get('content'))[:160]}>")
        if message.get("role") != "assistant":
            continue
        strict = _message_calls(message)
        calls.extend(strict)
        raw.extend(f"<call {n} {json.dumps(a, ensure_ascii=False)}>" for n, a in strict)
        if message.get("content"):
            raw.append(message["content"])
        if call is None:
            call = _search_call(strict, message)
    if row.mcp_time:  # score against the date the server said it is, not the study's fixed today
        request, server_today, today_from = _server_request(request, result.messages)
    detail: dict[str, Any] = {
        "outcome": str(result.outcome.value), "steps": result.steps, "tool_calls": result.tool_calls,
        "calls": [[n, a] for n, a in calls], "executed_searches": searches,
        "limit": str(result.limit.value) if result.limit else None, "run_id": result.run_id,
        "final_text": result.final_text}
    if row.mcp_time:
        detail.update(server_today=server_today.isoformat(), server_today_from=today_from)
    if trace_path is not None:
        events = _trace_events(trace_path)
        grounding = search_grounding(events)
        detail["grounding"] = grounding
        if call is not None:
            detail["grounding_flags"] = grounding_flags(call.arguments, grounding, request)
        detail["ungrounded_refusals"] = ungrounded_refusals(events)
        detail["child_calls"] = _child_calls(trace_path.parent, result.run_id)
        detail["child_runs"] = len(list(trace_path.parent.glob(f"{result.run_id}.*.jsonl")))
        report = verify_trace(trace_path)
        detail["trace_ok"] = report.ok
        detail["trace_problems"] = list(report.problems)
        detail["trace"] = str(trace_path)
    return RequestOutcome(request_id=request.id, score=sd.score_call(call, request, tool=FLIGHT_TOOL),
                          call=_call_dict(call), raw="\n".join(raw), seconds=seconds, detail=detail)


def _server_request(request: sd.Request, messages: Sequence[Mapping[str, Any]]
                    ) -> tuple[sd.Request, dt.date, str]:
    """``request`` with its expected date resolved against the time server's today: the one the model was told
    when it asked the server, else the one the server gives the benchmark now (same server, same clock)."""
    import knowledge_tools as kt

    today, source = kt.server_today(messages), "the model's call"
    if today is None:
        [clock] = [t for t in kt.time_server_tools() if t.name == kt.TIME_TOOL]
        from agent.schema import validate_arguments

        args = validate_arguments(clock.name, clock.compiled_parameters, {"timezone": "Etc/UTC"})
        outcome = clock.execute(args, _context(), timeout_s=30)
        today, source = dt.date.fromisoformat(outcome.value["datetime"][:10]), "the benchmark's own call"
    return dataclasses.replace(request, date=sd.resolve_date(request.phrase, today).isoformat()), today, source


def _context() -> Any:
    from agent.tool import ToolContext

    return ToolContext(run_id="bench-flights", call_id="server-today")


def _child_calls(directory: Path, run_id: str) -> list[list[Any]]:
    """The calls the nested (agent-as-a-tool) runs of ``run_id`` validated or rejected, in order, read from their
    traces: ``[tool, arguments, "validated" | "rejected"]``."""
    calls: list[list[Any]] = []
    for path in sorted(directory.glob(f"{run_id}.*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            kind = event.get("event_type")
            if kind in ("tool_call_validated", "tool_call_rejected"):
                data = event.get("data") or {}
                calls.append([data.get("tool"), data.get("arguments"), kind.rsplit("_", 1)[1]])
    return calls


# -- grounding: where the scored values came from (read from the run's trace) ----------------------------------------

SCORED_FIELDS: tuple[tuple[str, str], ...] = (("from", "origin"), ("to", "destination"), ("date", "date"))
"""search_flights parameter → the `studies_data.Request` field holding its answer."""


def _trace_events(path: Path) -> list[dict[str, Any]]:
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def search_grounding(events: Sequence[Mapping[str, Any]], tool: str = FLIGHT_TOOL) -> dict[str, Any] | None:
    """What a run's trace records about the first ``tool`` call it validated or rejected: from its
    ``tool_call_validated`` event ``{"call_id", "status": "validated", "sources": {path: source record}}`` (every
    argument leaf's source, `agent.grounding`); from its ``tool_call_rejected`` event ``{"call_id", "status":
    "rejected", "kind", "ungrounded": [paths refused as ungrounded]}``; None when the trace holds neither."""
    for event in events:
        data = event.get("data") or {}
        if data.get("tool") != tool:
            continue
        if event.get("event_type") == "tool_call_validated":
            return {"call_id": data.get("call_id"), "status": "validated",
                    "sources": {g["path"]: g["source"] for g in data.get("grounding") or ()}}
        if event.get("event_type") == "tool_call_rejected":
            return {"call_id": data.get("call_id"), "status": "rejected", "kind": data.get("kind"),
                    "ungrounded": [e.get("path") for e in data.get("errors") or () if e.get("kind") == "ungrounded"]}
    return None


def grounding_flags(arguments: Mapping[str, Any], grounding: Mapping[str, Any] | None,
                    request: sd.Request) -> list[dict[str, Any]]:
    """Each scored value of a search_flights call (`SCORED_FIELDS`), whether the answer key says it is right, and
    where its trace says it came from: ``source`` is the source kind (``user``, ``system``, ``tool_result``,
    ``schema``, ``composed``, or ``none``: ungrounded, also for a value refused as ungrounded) or ``unrecorded``
    (the call was rejected for another reason, or the trace holds no record of it); ``tool`` names the tool whose
    result grounds it."""
    flags = []
    for name, answer in SCORED_FIELDS:
        value = arguments.get(name)
        source: Mapping[str, Any] = {}
        if grounding is not None and grounding.get("status") == "validated":
            source = (grounding.get("sources") or {}).get(name) or {}
        elif grounding is not None and name in (grounding.get("ungrounded") or ()):
            source = {"kind": "none"}
        flag = {"field": name, "value": value, "right": value == getattr(request, answer),
                "source": source.get("kind", "unrecorded")}
        if source.get("tool"):
            flag["tool"] = source["tool"]
        flags.append(flag)
    return flags


def ungrounded_refusals(events: Sequence[Mapping[str, Any]], tool: str = FLIGHT_TOOL) -> int:
    """How many ``tool`` calls validation refused for ungrounded values (errors of kind ``ungrounded``)."""
    return sum(1 for e in events if e.get("event_type") == "tool_call_rejected"
               and (e.get("data") or {}).get("tool") == tool
               and any(err.get("kind") == "ungrounded" for err in (e.get("data") or {}).get("errors") or ()))


GROUNDING_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (("date", ("date",)), ("from/to", ("from", "to")))


def grounding_counts(outcomes: Sequence[RequestOutcome]) -> dict[str, dict[str, Any]]:
    """Per value group (``date``; ``from/to``, two values a request): how many scored values there are
    (``values``), how many the trace records a source for (``recorded``), how many are wrong, wrong and flagged
    ungrounded, wrong but grounded (listed as ``(value, field, source)`` with counts), right, and right but
    ungrounded (the model's memory happened to be right)."""
    out: dict[str, dict[str, Any]] = {}
    for group, fields in GROUNDING_GROUPS:
        c: dict[str, Any] = {"values": 0, "recorded": 0, "wrong": 0, "wrong_ungrounded": 0, "wrong_grounded": 0,
                             "wrong_unrecorded": 0, "right": 0, "right_ungrounded": 0, "grounded_wrong": {},
                             "sources": {}}
        for outcome in outcomes:
            for flag in outcome.detail.get("grounding_flags") or ():
                if flag["field"] not in fields:
                    continue
                kind = flag["source"]
                c["values"] += 1
                c["recorded"] += kind != "unrecorded"
                where = f"{kind}:{flag['tool']}" if flag.get("tool") else kind
                c["sources"][where] = c["sources"].get(where, 0) + 1
                if flag["right"]:
                    c["right"] += 1
                    c["right_ungrounded"] += kind == "none"
                    continue
                c["wrong"] += 1
                if kind == "none":
                    c["wrong_ungrounded"] += 1
                elif kind == "unrecorded":
                    c["wrong_unrecorded"] += 1
                else:
                    c["wrong_grounded"] += 1
                    key = (str(flag["value"]), flag["field"], where)
                    c["grounded_wrong"][key] = c["grounded_wrong"].get(key, 0) + 1
        out[group] = c
    return out


KNOWLEDGE_TOOLS: tuple[tuple[str, str], ...] = (("lookup", "airports.lookup"), ("calendar", "calendar.resolve_date"),
                                                ("agent", AGENT_TOOL), ("mcp_time", "time.get_current_time"))


def knowledge_use(result: "RowResult") -> dict[str, int]:
    """Knowledge tool → in how many requests the model called it (auto rows; the row's own tools only)."""
    out = {}
    for attr, name in KNOWLEDGE_TOOLS:
        if getattr(result.row, attr):
            out[name] = sum(any(c[0] == name for c in o.detail.get("calls", ())) for o in result.outcomes)
    return out


def run_row(engine: Any, row: Row, requests: Sequence[sd.Request], *, max_tokens: int = MAX_TOKENS,
            progress: Callable[[str], None] | None = None, trace_dir: Path | None = None,
            language: str = "en") -> RowResult:
    """Every request under ``row``, in order. Auto rows trace every request under ``trace_dir`` (when given) as
    ``<language>-<row>/<request id>.jsonl`` and verify each trace."""
    started = time.perf_counter()
    outcomes = []
    for i, request in enumerate(requests, 1):
        if row.session:
            path = None if trace_dir is None else trace_dir / f"{language}-{row.key}" / f"{request.id}.jsonl"
            outcome = _run_auto(engine, row, request, max_tokens, path)
        else:
            run = _run_session if row.lookup else _run_single
            outcome = run(engine, row, request, max_tokens)
        outcomes.append(outcome)
        if progress is not None:
            call = outcome.call
            shown = "no call" if call is None else (f"{'' if call['strict'] else '~'}{call['name']} "
                                                    f"{json.dumps(call['arguments'], ensure_ascii=False)}")
            steps = " > ".join(f"{n}({next(iter(a.values()), '') if a else ''})"
                               for n, a in outcome.detail.get("calls", ()) if n != FLIGHT_TOOL)
            progress(f"[{language} {row.key} {i}/{len(requests)}] {request.id} {outcome.seconds:5.1f}s "
                     f"{steps + ' > ' if steps else ''}{shown}")
    return RowResult(row=row, outcomes=tuple(outcomes), seconds=time.perf_counter() - started)


# -- report -------------------------------------------------------------------------------------------------------

COLUMNS: tuple[tuple[str, str], ...] = (
    ("right_tool", "right tool"),
    ("strict", "parses (envelope)"),
    ("date_format", "date format ok"),
    ("date_value", "date value right"),
    ("airport_format", "from/to format ok"),
    ("airport_value", "from/to value right"),
)


def table(results: Sequence[RowResult]) -> str:
    headers = ["row", *(label for _, label in COLUMNS), "s/request"]
    rows = []
    for r in results:
        n = len(r.outcomes)
        rows.append([r.row.label, *(f"{r.count(col)}/{n}" for col, _ in COLUMNS), f"{r.seconds / max(n, 1):.1f}"])
    return markdown_table(headers, rows)


def plot(results: Sequence[RowResult], path: Path, *, languages: Sequence[str] | None = None) -> Path:
    import numpy as np

    fig, ax = figure(figsize=(13, 5.2))
    cols = [c for c in COLUMNS if c[0] != "strict"]
    width = 0.8 / len(cols)
    x = np.arange(len(results))
    for k, (col, label) in enumerate(cols):
        ax.bar(x + k * width - 0.4 + width / 2, [r.count(col) for r in results], width, label=label)
    labels = [r.row.key for r in results]  # the rows' labels are in the tables; keys stay legible under 40 bars
    if languages is not None:
        labels = [f"[{lang}] {label}" for lang, label in zip(languages, labels)]
    ax.set_xticks(x, labels, fontsize=6, rotation=60, ha="right")
    n = max((len(r.outcomes) for r in results), default=24)
    ax.set_ylim(0, n + 1)
    ax.set_ylabel(f"requests (of {n})")
    ax.set_title("search_flights: form vs truth (greedy)")
    ax.legend(fontsize=7, ncol=3, loc="upper left")
    return save_figure(fig, path)


RESULTS_DIR = BENCHMARKS_DIR / "results" / "flights"
"""Stored per-row results (``<language>-<row>.json``): the section is rebuilt from every stored row, so rows can be
measured in separate runs (one process at a time on a shared machine) and still land in one table."""
ARCHIVED_SINGLE_TURN = RESULTS_DIR / "single-turn-2026-11-30.md"
"""The single-turn table as measured on 2026-11-30 (and its 2026-12-01 auto re-run), kept verbatim until those rows
are re-run and stored."""
TRACES_DIR = BENCHMARKS_DIR / "traces" / "flights"
"""One example session trace per auto row: ``<language>-<row>.jsonl`` (+ the nested traces of the agent row)."""
KEPT_REQUEST = "0-1"
"""The request whose trace is kept per row (Madrid → Berlin, next Friday), or the first request run when absent."""


def _stored_path(language: str, key: str) -> Path:
    return RESULTS_DIR / f"{language}-{key}.json"


def store(result: RowResult, *, language: str, meta: Mapping[str, Any]) -> Path:
    path = _stored_path(language, result.row.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"row": result.row.key, "language": language, "seconds": result.seconds,
                                **meta, "outcomes": [{**asdict(o), "score": asdict(o.score)} for o in result.outcomes]},
                               indent=1, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    return path


def load_stored(language: str, row: Row) -> tuple[RowResult, dict[str, Any]] | None:
    path = _stored_path(language, row.key)
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    outcomes = tuple(RequestOutcome(request_id=o["request_id"], score=sd.CallScore(**o["score"]), call=o["call"],
                                    raw=o["raw"], seconds=o["seconds"], detail=o.get("detail") or {})
                     for o in data["outcomes"])
    meta = {k: v for k, v in data.items() if k not in ("outcomes",)}
    return RowResult(row=row, outcomes=outcomes, seconds=data["seconds"]), meta


def keep_trace(run_dir: Path, result: RowResult, *, language: str) -> Path | None:
    """Copy one request's trace (and its nested traces) from ``run_dir`` to `TRACES_DIR` as
    ``<language>-<row>.jsonl``; the nested ones keep their ``<parent run id>.<call id>.jsonl`` names, which is
    where `verify_trace` looks for them. Returns the kept parent trace."""
    import shutil

    chosen = next((o for o in result.outcomes if o.request_id == KEPT_REQUEST), result.outcomes[0])
    source = run_dir / f"{chosen.request_id}.jsonl"
    if not source.is_file():
        return None
    TRACES_DIR.mkdir(parents=True, exist_ok=True)
    target = TRACES_DIR / f"{language}-{result.row.key}.jsonl"
    if target.is_file():  # drop the previous example's nested traces
        old_run = _run_id(target)
        for stale in TRACES_DIR.glob(f"{old_run}.*.jsonl") if old_run else ():
            stale.unlink()
    shutil.copyfile(source, target)
    run_id = chosen.detail.get("run_id")
    for nested in run_dir.glob(f"{run_id}.*.jsonl") if run_id else ():
        shutil.copyfile(nested, TRACES_DIR / nested.name)
    return target


def _run_id(path: Path) -> str | None:
    try:
        first = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None
    return first.get("run_id")


def _knowledge_note(result: RowResult) -> str:
    n = len(result.outcomes)
    used = knowledge_use(result)
    parts = [f"{name} called in {k}/{n} requests" for name, k in used.items()]
    reached = sum(bool(o.call) for o in result.outcomes)
    executed = sum(bool(o.detail.get("executed_searches")) for o in result.outcomes)
    traced = [o for o in result.outcomes if "trace_ok" in o.detail]
    verified = f"; trace verify OK {sum(o.detail['trace_ok'] for o in traced)}/{len(traced)}" if traced else ""
    if result.row.agent:
        child = [o.detail.get("child_calls") or [] for o in result.outcomes]
        runs = sum(o.detail.get("child_runs", 0) for o in result.outcomes)
        verified += (f"; {runs} nested runs traced and verified with their parents; inside them airports.lookup "
                     f"called in {sum(any(c[0] == 'airports.lookup' for c in cs) for cs in child)}/{n}, "
                     f"calendar.resolve_date in {sum(any(c[0] == 'calendar.resolve_date' for c in cs) for cs in child)}"
                     f"/{n} requests")
    if result.row.grounded is not None:
        refused = [o.detail.get("ungrounded_refusals", 0) for o in result.outcomes]
        verified += (f"; search_flights refused as ungrounded {sum(refused)} times, in {sum(map(bool, refused))}/{n} "
                     "requests")
    if result.row.mcp_time:
        told = sum(o.detail.get("server_today_from") == "the model's call" for o in result.outcomes)
        days = sorted({o.detail.get("server_today") for o in result.outcomes if o.detail.get("server_today")})
        verified += (f"; scored against the server's today ({', '.join(days)}), which the model itself was told "
                     f"in {told}/{n} requests")
    return (f"- {result.row.label}: {'; '.join(parts) + '; ' if parts else ''}search_flights attempted in "
            f"{reached}/{n}, executed in {executed}/{n}{verified}.")


def grounding_table(results: Sequence[RowResult]) -> str:
    """Per row: where the first search_flights call's date and airport values came from, read from each request's
    trace (`grounding_counts`): wrong values, how many of them are flagged ungrounded, and right ones that are."""
    headers = ["row", "values with a trace record (date / from/to)", "date wrong", "… flagged ungrounded",
               "from/to wrong", "… flagged ungrounded", "wrong but grounded (date / from/to)",
               "right but ungrounded (date / from/to)"]
    rows = []
    for r in results:
        c = grounding_counts(r.outcomes)
        d, a = c["date"], c["from/to"]
        rows.append([r.row.label, f"{d['recorded']}/{d['values']} / {a['recorded']}/{a['values']}",
                     f"{d['wrong']}/{d['values']}", f"{d['wrong_ungrounded']}/{d['wrong']}",
                     f"{a['wrong']}/{a['values']}", f"{a['wrong_ungrounded']}/{a['wrong']}",
                     f"{d['wrong_grounded']} / {a['wrong_grounded']}",
                     f"{d['right_ungrounded']}/{d['right']} / {a['right_ungrounded']}/{a['right']}"])
    return markdown_table(headers, rows)


_SOURCE_WORDS = {"user": "the request's words", "system": "the system prompt", "schema": "fixed by the schema",
                 "composed": "composed of grounded parts", "none": "ungrounded", "unrecorded": "no trace record"}


def _source_words(where: str) -> str:
    kind, _, tool = where.partition(":")
    return f"{tool} result" if kind == "tool_result" and tool else _SOURCE_WORDS.get(kind, kind)


def grounding_note(result: RowResult, *, examples: int = 4) -> str:
    """One line per row: where its values came from, and the wrong values that are grounded, by source (the first
    ``examples`` of each, most frequent first)."""
    parts = []
    for group, c in grounding_counts(result.outcomes).items():
        sources = ", ".join(f"{_source_words(w)} {k}" for w, k in sorted(c["sources"].items(), key=lambda x: -x[1]))
        text = f"{group}: {sources or 'no value'}"
        by_source: dict[str, list[tuple[int, str]]] = {}
        for (value, field_, where), k in sorted(c["grounded_wrong"].items(), key=lambda x: (-x[1], x[0])):
            by_source.setdefault(where, []).append((k, f"`{value}` for {field_} ×{k}"))
        if by_source:
            listed = "; ".join(
                f"{sum(k for k, _ in items)} by {_source_words(where)} ("
                + ", ".join(t for _, t in items[:examples]) + (", …" if len(items) > examples else "") + ")"
                for where, items in by_source.items())
            text += f"; wrong but grounded: {listed}"
        parts.append(text)
    return f"- {result.row.label}: " + ". ".join(parts) + "."


def _example_facts() -> str:
    import knowledge_tools as kt

    return kt.request_prompt(next(r for r in sd.FI_REQUESTS if r.id == KEPT_REQUEST).text)


def report(results_by_language: Mapping[str, Sequence[RowResult]], single_turn: Sequence[RowResult], *,
           diagnostic: Sequence[tuple[str, RowResult]] = (), model_label: str, model_sha: str, codec_id: str, plot_name: str, max_tokens: int, threads: int,
           dates: Sequence[str]) -> str:
    env = "\n".join(environment_lines(PACKAGES))
    when = f"rows measured {min(dates)} – {max(dates)}" if dates else "no rows stored"
    notes = [
        f"- Model: `{model_label}` (sha256 `{model_sha[:16]}…`), codec `{codec_id}`, greedy, "
        f"max_tokens {max_tokens} per turn, n_threads {threads or 'default'}; today fixed at "
        f"{sd.TODAY.isoformat()} ({sd.TODAY:%A}); {when} (one row per process, stored under "
        "`benchmarks/results/flights/`, this section rebuilt from all of them).",
        "- Columns count requests and score the **first search_flights call** the model wrote (executed, or "
        "attempted and rejected), strict or — when it wrote the call as JSON in prose — recovered by the benchmark. "
        "*parses (envelope)*: the codec parsed it as a call (what the runtime would execute). *date format ok*: a "
        "real calendar date written YYYY-MM-DD; *from/to format ok*: both `^[A-Z]{3}$`; *value right*: equals the "
        "answer key (`benchmarks/studies_data.py`). A request where search_flights was never called scores 0 in "
        "every column.",
        "- **Auto study** (the two tables below): every request is a real `Session` under `tool_choice=\"auto\"` — "
        "no per-turn plan, no forced first tool; the model decides whether to call a knowledge tool. Limits: "
        f"{AUTO_LIMITS['max_model_steps']} model steps, {AUTO_LIMITS['max_tool_calls']} tool calls. search_flights "
        "is constrained (rich schema minus the redundant date `pattern`) and returns a canned flight. Knowledge "
        "tools (`benchmarks/knowledge_tools.py`): `airports.lookup` (city → IATA, English and Finnish names and "
        "case forms), `calendar.resolve_date` (a date-expression parser against today, English and Finnish). "
        f"(a) appends `{sd.today_system_prompt()[len(sd.BASE_SYSTEM_PROMPT) + 1:]}` to the system prompt "
        f"`{sd.BASE_SYSTEM_PROMPT}`. (e) runs the two tools on the request "
        "before the model does (`knowledge_tools.request_prompt`: the date words `date_in` finds and the cities "
        "`airports_in` finds) and appends their answers, e.g. "
        f"`{_example_facts()}`. (f) puts those answers in the schema instead: from/to an enum of the request's "
        "two airport codes, sorted, date an enum of the one date (`bench_flights.flight_schema`); (f') lists the "
        "two codes in the order the request names the cities, the order the lookup returns them (neither says "
        "which is from and which is to). The agent row offers one tool `{AGENT_TOOL}`: a child Session "
        "(`agent.subagent.agent_tool`) with its own system prompt, airports.lookup and calendar.resolve_date, "
        "the same limits, and a nested trace per call. (g) offers the two tools of the real `mcp-server-time` "
        "server (PyPI, over MCP through `agent.mcp`, named `time.*`); its clock is the machine's, so each request "
        "of that row is scored against the date the server returned — to the model when it called the server, "
        "else to the benchmark's own call at that moment (`bench_flights._server_request`).",
        "- Study inputs chosen here (prompts, descriptions): knowledge-tool descriptions say what to pass and what "
        "comes back (`knowledge_tools.py`); each knowledge row appends one sentence per offered tool to the system "
        "prompt, e.g. \"" + TOOL_HINTS[1][1] + "\" (`bench_flights.TOOL_HINTS`; in a 2-request smoke the plain "
        "prompt and the hinted one both got 0 knowledge-tool calls, as did two stronger step-by-step prompts tried "
        "on one English and one Finnish request); the travel desk's system prompt and description are "
        "`bench_flights.AGENT_SYSTEM_PROMPT` / `AGENT_DESCRIPTION`. No answer is written anywhere but the answer key: "
        "in (e), (f) and (f') the values come from the knowledge tools' code run on the request text.",
        "- **Grounding** (`docs/grounding.md`): every auto row's traces record where each argument value of each call "
        "came from (the request, the system prompt, a tool result, the schema) or that it came from nowhere the model "
        "was given (*ungrounded*: its memory). The grounding tables below read it for the first search_flights call "
        "of each request; rows measured before grounding existed have no such record and are left out. *thin "
        "schema* is the seed's plain schema (`studies_data.thin_schema`: three strings, \"Airport.\", \"The "
        "date.\") under the same constrained auto Session as the rich baseline. **Enforcement** (h): search_flights' "
        "`from`, `to` and `date` declared `\"x-grounded\": true` in the rich schema, airports.lookup and "
        "calendar.resolve_date offered with their hints, nothing else in the prompt: each turn's grammar admits only "
        "codes and dates the conversation holds (a dynamic enum), and search_flights cannot be called at all while "
        "one of them has no candidate. (h2) changes only what the tools and their descriptions say: the knowledge "
        "tools' own arguments declared `\"x-grounded\": \"user\"` (the model passes words of the request, never a "
        "value it made up or an example), their descriptions without example values (`knowledge_tools.DESCRIPTIONS"
        "[\"words\"]`), the calendar offered and hinted first, and search_flights' three descriptions naming the "
        "tool each value comes from (`bench_flights.SOURCE_DESCRIPTIONS`); (h2') is (h2) with `\"x-grounded\": "
        "\"tool_result\"`. (h3) is (h2') with the answer held too: the session's `final_pattern` "
        f"`{FLIGHT_ANSWER}` admits only a flight a search_flights result holds, so until the search has run the "
        "answer cannot be written and the turn can only call a tool; (h4) declares each value's own tool "
        "(`TOOL_SOURCES`), which the note a blocked search_flights leaves names (\"date (which "
        "calendar.resolve_date returns)\"). Rows (h3) and (h4) ran after two changes the earlier rows predate: the "
        "session's resting rule (after a refused repeat that cannot be answered yet, the next turn does not offer "
        "the repeated tools while another can be called) and the calendar's day-alone form (\"3. päivänä\", \"the "
        "3rd\": the next such day), which the model passed for \"ensi kuun 3. päivänä\". Variants tried on a few "
        "requests only (not stored; traces read by hand): validation instead of the mask (`Row.refusal_only`, the "
        "first design's tools; 4 Finnish + 2 English requests): the "
        "model called search_flights from memory first in 5/6, was refused, repeated the call and ended in text, 0/6 "
        "searches ran; the tools' arguments grounded with the example descriptions (3 + 3 requests): the English "
        "model passed \"next month\" for \"the 3rd of next month\" (2/3 dates right), Finnish 0/3 searches (also "
        "with search_flights' source descriptions); the "
        "tools told to take the whole request (`DESCRIPTIONS[\"request\"]`, 4 + 4): English 3/4 dates (it passed "
        "\"15 December 2023\", and the calendar's answer grounded the invented year), Finnish 0/4 searches; that "
        "with the calendar first, with and without grounded tool arguments (4 + 4 Finnish): 0/4 and 1/4 searches; "
        "(h2) with the lookup naming the words of its input that named no airport (`Row.lookup_other_words`, "
        "`\"other_words\": \"ensi perjantaina\"`; 6 Finnish requests): 0/6 searches, the calendar called in 1/6, "
        "never after the lookup's hint.",
        "- Finnish requests: `Etsi lennot Madridista Berliiniin ensi perjantaina.` — city names in their Finnish "
        "elative/illative (`studies_data.FI_CITY_FORMS`), the seed's four phrasings (\"ensi kuun 3. päivänä\", "
        "\"ensi perjantaina\", \"15. joulukuuta\", \"huomenna\"); same answer key.",
        f"- Example traces (one request per row, `trace verify` OK): `benchmarks/traces/flights/<language>-<row>.jsonl`"
        f" (request {KEPT_REQUEST}; the agent row's nested traces beside it). Plot: `benchmarks/{plot_name}`. "
        "Interpretation: `docs/form-vs-truth.md`.",
    ]
    parts = [env, *notes]
    titles = {"en": "English requests", "fi": "Finnish requests"}
    for language, results in results_by_language.items():
        if not results:
            continue
        parts += ["", f"### Auto study, {titles.get(language, language)} (`tool_choice=\"auto\"`, Session)", "",
                  table(results), ""]
        parts += [_knowledge_note(r) for r in results]
        traced = [r for r in results if any(o.detail.get("grounding_flags") for o in r.outcomes)]
        if traced:
            parts += ["", f"Grounding of the first search_flights call, {titles.get(language, language)} (each "
                      "request's trace: `tool_call_validated.data.grounding`, or the paths a `tool_call_rejected` "
                      "refused as ungrounded; a value is *flagged ungrounded* when its source is `none`):", "",
                      grounding_table(traced), ""]
            parts += [grounding_note(r) for r in traced]
    if diagnostic:
        parts += ["", "### Diagnostic (not the auto study: the first turn is forced to one knowledge tool, "
                  "`Session(tool_choice=(TOOL, \"auto\"))`; the model still writes its arguments)", "",
                  table([dataclasses.replace(r, row=dataclasses.replace(r.row, label=f"[{lang}] {r.row.label}"))
                         for lang, r in diagnostic]), ""]
        parts += [_knowledge_note(r) for _, r in diagnostic]
    parts += ["", "### Single-turn study (`tool_choice=\"required\"` unless noted), English requests", ""]
    if single_turn:
        parts += [table(single_turn)]
        parts += [_knowledge_note(r) for r in single_turn if r.row.lookup]
    elif ARCHIVED_SINGLE_TURN.is_file():
        parts += ["Measured 2026-11-30 (not re-run with the auto study; kept verbatim from the previous run):", "",
                  ARCHIVED_SINGLE_TURN.read_text(encoding="utf-8").strip()]
    return "\n".join(parts)


def _select(keys: str | None, rows: Sequence[Row], parser: argparse.ArgumentParser) -> tuple[Row, ...]:
    if not keys:
        return tuple(rows)
    wanted = [k.strip() for k in keys.split(",") if k.strip()]
    unknown = [k for k in wanted if k not in {r.key for r in rows}]
    if unknown:
        parser.error(f"unknown rows {unknown}; known: {[r.key for r in rows]}")
    return tuple(r for r in rows if r.key in wanted)


def write_results(engine_meta: Mapping[str, Any], results_path: Path, *, max_tokens: int, threads: int) -> None:
    """Rebuild the section (and the plot) from every stored row."""
    by_language: dict[str, list[RowResult]] = {}
    dates: list[str] = []
    diagnostic: list[tuple[str, RowResult]] = []
    for language in sd.LANGUAGES:
        for row in AUTO_ROWS + DIAGNOSTIC_ROWS:
            loaded = load_stored(language, row)
            if loaded is not None:
                if row in DIAGNOSTIC_ROWS:
                    diagnostic.append((language, loaded[0]))
                else:
                    by_language.setdefault(language, []).append(loaded[0])
                dates.append(loaded[1].get("date", ""))
    single = []
    for row in ROWS:
        loaded = load_stored("en", row)
        if loaded is not None:
            single.append(loaded[0])
            dates.append(loaded[1].get("date", ""))
    plot_name = "flights.png"
    plotted = [r for rs in by_language.values() for r in rs]
    if plotted:
        plot(plotted, BENCHMARKS_DIR / plot_name, languages=[lang for lang, rs in by_language.items() for _ in rs])
    body = report(by_language, single, diagnostic=diagnostic, plot_name=plot_name, max_tokens=max_tokens, threads=threads,
                  dates=[d for d in dates if d], **engine_meta)
    write_section(results_path, HEADING, body)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="store name or GGUF path")
    parser.add_argument("--limit", type=int, default=None, help="first N requests only (quick run)")
    parser.add_argument("--rows", default=None, help=f"comma-separated subset of {[r.key for r in ALL_ROWS]}")
    parser.add_argument("--lang", default="en", help="comma-separated request languages (en, fi); single-turn rows "
                                                     "are English only")
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                        help="llama.cpp threads (0: llama-cpp-python's default; see DEFAULT_THREADS)")
    parser.add_argument("--records", type=Path, default=None, help="write per-request records (JSON) here")
    parser.add_argument("--results", type=Path, default=BENCHMARKS_DIR / "RESULTS.md")
    parser.add_argument("--no-write", action="store_true",
                        help="print the table only; store nothing, keep no trace, leave RESULTS.md and the plot")
    parser.add_argument("--report-only", action="store_true",
                        help="load no model: rebuild the section from the stored rows")
    args = parser.parse_args(argv)

    rows = _select(args.rows, ALL_ROWS, parser)
    languages = [lang.strip() for lang in args.lang.split(",") if lang.strip()]
    for lang in languages:
        if lang not in sd.LANGUAGES:
            parser.error(f"unknown language {lang!r}; known: {list(sd.LANGUAGES)}")

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if args.report_only:
        meta = _stored_meta()
        if meta is None:
            parser.error("no stored rows to report")
        write_results(meta, args.results, max_tokens=args.max_tokens, threads=args.threads)
        print(f"wrote {args.results}", file=sys.stderr)
        return 0

    import tempfile

    engine = load_engine(args.model, threads=args.threads, progress=progress)
    meta = {"model_label": args.model, "model_sha": engine.model.sha256, "codec_id": engine.codec.id}
    results: list[tuple[str, RowResult]] = []
    failures = []
    with tempfile.TemporaryDirectory(prefix="flights-traces-") as tmp:
        for lang in languages:
            for row in rows:
                if not row.session and lang != "en":
                    continue
                requests = sd.requests_for(lang)
                requests = requests[: args.limit] if args.limit else requests
                result = run_row(engine, row, requests, max_tokens=args.max_tokens, progress=progress,
                                 trace_dir=Path(tmp), language=lang)
                results.append((lang, result))
                print(f"{lang} {row.key}: {_knowledge_note(result)}", file=sys.stderr, flush=True)
                bad = [o.request_id for o in result.outcomes if o.detail.get("trace_ok") is False]
                if bad:
                    failures.append(f"{lang} {row.key}: trace verify failed for {bad}")
                if not args.no_write:
                    store(result, language=lang, meta={**meta, "date": _now(), "limit": args.limit})
                    if row.session:
                        kept = keep_trace(Path(tmp) / f"{lang}-{row.key}", result, language=lang)
                        if kept is not None:
                            from agent.trace_verify import verify_trace

                            report_ = verify_trace(kept)
                            if not report_.ok:
                                failures.append(f"kept trace {kept}: {list(report_.problems)}")
    for lang in languages:
        chosen = [r for language, r in results if language == lang]
        if chosen:
            print(f"\n{lang}:\n{table(chosen)}")
    if args.records:
        args.records.write_text(json.dumps([{"row": r.row.key, "language": lang, "outcomes": [
            {**asdict(o), "score": asdict(o.score)} for o in r.outcomes]} for lang, r in results],
            indent=1, ensure_ascii=False, default=str), encoding="utf-8")
    if not args.no_write:
        write_results(meta, args.results, max_tokens=args.max_tokens, threads=args.threads)
        print(f"wrote {args.results} and {BENCHMARKS_DIR / 'flights.png'}", file=sys.stderr)
    for failure in failures:
        print(f"FAIL {failure}", file=sys.stderr)
    return 1 if failures else 0


def _now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _stored_meta() -> dict[str, Any] | None:
    for path in sorted(RESULTS_DIR.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if "model_sha" in data:
            return {k: data[k] for k in ("model_label", "model_sha", "codec_id")}
    return None


if __name__ == "__main__":
    raise SystemExit(main())
