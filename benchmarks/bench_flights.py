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

Measurement shortcut (documented in the table notes): a turn stops once its first ``</tool_call>`` has been
generated (the engine's cancel hook), because only the first call is scored and this model otherwise repeats the
call until ``max_tokens`` when the envelope is forced. The constrained rows use `rich_schema(date_pattern=False)`:
Ember's schema compiler refuses ``format`` together with ``pattern`` (``UnsupportedSchemaError``); every
``format: date`` string already matches the dropped pattern, so the enforced language is the intersection anyway.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_flights.py [--model NAME|PATH] [--limit N] [--rows a,b]``
(also ``ember bench flights``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


import studies_data as sd
from _common import BENCHMARKS_DIR, environment_lines, figure, markdown_table, save_figure, write_section

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
LOOKUP_TOOL = "airports.lookup"
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


def _rich_c() -> dict[str, Any]:
    return sd.rich_schema(date_pattern=False)


def _enum_c() -> dict[str, Any]:
    schema = sd.enum_schema()
    schema["properties"]["date"].pop("pattern")
    return schema


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
"""The study's rows, in table order."""


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


def _system(row: Row) -> str:
    return sd.today_system_prompt() if row.today else sd.BASE_SYSTEM_PROMPT


def _flight_spec(row: Row) -> Any:
    from agent.protocol.base import ToolSpec

    return ToolSpec(name=FLIGHT_TOOL, description=sd.FLIGHT_TOOL_DESCRIPTION, parameters=row.schema(),
                    constrained=row.constrained)


def _call_dict(call: sd.FoundCall | None) -> dict[str, Any] | None:
    return None if call is None else {"name": call.name, "arguments": dict(call.arguments), "strict": call.strict}


def _run_single(engine: Any, row: Row, request: sd.Request, max_tokens: int) -> RequestOutcome:
    messages = [{"role": "system", "content": _system(row)}, {"role": "user", "content": request.text}]
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


def _run_session(engine: Any, row: Row, request: sd.Request, max_tokens: int) -> RequestOutcome:
    from agent.limits import AgentLimits
    from agent.session import Session
    from agent.tool import ToolRegistry

    searches: list[dict[str, Any]] = []
    session = Session(engine, ToolRegistry(lookup_tools(row, searches)), system_prompt=_system(row),
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
            found = sd.found_call([c for c in strict if c[0] == FLIGHT_TOOL], "" if strict else
                                  message.get("content") or "", prefer=FLIGHT_TOOL)
            if found is not None and found.name == FLIGHT_TOOL:
                call = found
    return RequestOutcome(request_id=request.id, score=sd.score_call(call, request, tool=FLIGHT_TOOL),
                          call=_call_dict(call), raw="\n".join(raw), seconds=seconds,
                          detail={"outcome": str(result.outcome), "steps": result.steps,
                                  "tool_calls": result.tool_calls, "lookups": lookups, "executed_searches": searches,
                                  "limit": str(result.limit) if result.limit else None})


def run_row(engine: Any, row: Row, requests: Sequence[sd.Request], *, max_tokens: int = MAX_TOKENS,
            progress: Callable[[str], None] | None = None) -> RowResult:
    """Every request under ``row``, in order."""
    started = time.perf_counter()
    outcomes = []
    for i, request in enumerate(requests, 1):
        run = _run_session if row.lookup else _run_single
        outcome = run(engine, row, request, max_tokens)
        outcomes.append(outcome)
        if progress is not None:
            call = outcome.call
            shown = "no call" if call is None else (f"{'' if call['strict'] else '~'}{call['name']} "
                                                    f"{json.dumps(call['arguments'], ensure_ascii=False)}")
            progress(f"[{row.key} {i}/{len(requests)}] {request.id} {outcome.seconds:5.1f}s {shown}")
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


def plot(results: Sequence[RowResult], path: Path) -> Path:
    import numpy as np

    fig, ax = figure(figsize=(11, 4.8))
    cols = [c for c in COLUMNS if c[0] != "strict"]
    width = 0.8 / len(cols)
    x = np.arange(len(results))
    for k, (col, label) in enumerate(cols):
        ax.bar(x + k * width - 0.4 + width / 2, [r.count(col) for r in results], width, label=label)
    ax.set_xticks(x, [r.row.label.replace(", ", ",\n").replace(" (", "\n(") for r in results], fontsize=7)
    n = max((len(r.outcomes) for r in results), default=24)
    ax.set_ylim(0, n + 1)
    ax.set_ylabel(f"requests (of {n})")
    ax.set_title("search_flights: form vs truth (greedy)")
    ax.legend(fontsize=7, ncol=3, loc="upper left")
    return save_figure(fig, path)


def report(results: Sequence[RowResult], *, model_label: str, model_sha: str, codec_id: str, n_requests: int,
           plot_name: str, wall_s: float, max_tokens: int, threads: int) -> str:
    env = "\n".join(environment_lines(PACKAGES))
    notes = [
        f"- Model: `{model_label}` (sha256 `{model_sha[:16]}…`), codec `{codec_id}`, greedy, "
        f"max_tokens {max_tokens}, n_threads {threads or 'default'}; {n_requests} requests; today fixed at "
        f"{sd.TODAY.isoformat()} ({sd.TODAY:%A}); whole run {wall_s:.0f} s.",
        "- Columns count requests. *parses (envelope)*: the codec parsed a `<tool_call>` — what the runtime would "
        "execute. *right tool* and the value columns score the first search_flights call, strict or — when the model "
        "wrote the call as a JSON object in prose (e.g. a ```json block) — recovered by the benchmark, so form and "
        "truth are measured even where the envelope failed.",
        "- *date format ok*: a real calendar date written YYYY-MM-DD; *from/to format ok*: both `^[A-Z]{3}$`; "
        "*value right*: equals the answer key (`benchmarks/studies_data.py`).",
        "- Constrained rows use the rich schema without the redundant date `pattern` (Ember's compiler refuses "
        "`format` + `pattern` on one string); knowledge rows (a)–(c) sit on top of *rich, constrained, required*, so "
        "only truth can move. Turns stop after their first `</tool_call>` (only the first call is scored).",
        f"- Plot: `benchmarks/{plot_name}`. Interpretation: `docs/form-vs-truth.md`.",
    ]
    for r in results:
        if r.row.lookup:
            called = sum(bool(o.detail.get("lookups")) for o in r.outcomes)
            notes.append(f"- {r.row.label}: the model called airports.lookup in {called}/{len(r.outcomes)} requests "
                         f"(Session limits: 3 model steps; the first search_flights call is scored).")
    return "\n".join([env, *notes, "", table(results)])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="store name or GGUF path")
    parser.add_argument("--limit", type=int, default=None, help="first N requests only (quick run)")
    parser.add_argument("--rows", default=None, help=f"comma-separated subset of {[r.key for r in ROWS]}")
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                        help="llama.cpp threads (0: llama-cpp-python's default; see DEFAULT_THREADS)")
    parser.add_argument("--records", type=Path, default=None, help="write per-request records (JSON) here")
    parser.add_argument("--results", type=Path, default=BENCHMARKS_DIR / "RESULTS.md")
    parser.add_argument("--no-write", action="store_true", help="print the table only; leave RESULTS.md and the plot")
    args = parser.parse_args(argv)

    rows = ROWS
    if args.rows:
        keys = [k.strip() for k in args.rows.split(",") if k.strip()]
        unknown = [k for k in keys if k not in {r.key for r in ROWS}]
        if unknown:
            parser.error(f"unknown rows {unknown}; known: {[r.key for r in ROWS]}")
        rows = tuple(r for r in ROWS if r.key in keys)
    requests = sd.REQUESTS[: args.limit] if args.limit else sd.REQUESTS

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    started = time.perf_counter()
    engine = load_engine(args.model, threads=args.threads, progress=progress)
    results = [run_row(engine, row, requests, max_tokens=args.max_tokens, progress=progress) for row in rows]
    wall = time.perf_counter() - started

    text = table(results)
    print(text)
    if args.records:
        args.records.write_text(json.dumps([{"row": r.row.key, "outcomes": [
            {**asdict(o), "score": asdict(o.score)} for o in r.outcomes]} for r in results],
            indent=1, ensure_ascii=False, default=str), encoding="utf-8")
    if not args.no_write:
        plot_name = "flights.png"
        plot(results, BENCHMARKS_DIR / plot_name)
        body = report(results, model_label=args.model, model_sha=engine.model.sha256, codec_id=engine.codec.id,
                      n_requests=len(requests), plot_name=plot_name, wall_s=wall, max_tokens=args.max_tokens,
                      threads=args.threads)
        write_section(args.results, HEADING, body)
        print(f"wrote {args.results} and {BENCHMARKS_DIR / plot_name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
