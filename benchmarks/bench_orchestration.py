"""Orchestration benchmark: what the session itself costs per step, with the model scripted away.

Owns the seed's scripted benchmark: ``--runs`` (200) repetitions of one session — `agent.session.Session` over
`agent.testkit.ScriptedEngine` speaking real Qwen2.5 syntax through the real `QwenCodec`, mock tools built with
`Tool.from_function`, a real `TraceRecorder` writing JSONL to a temp file — of four model steps:

    step 1: <tool_call> get_weather </tool_call> ─► parse · validate · approve · execute · reinject · trace
    step 2: <tool_call> book_flight </tool_call> ─► (same)
    step 3: <tool_call> get_weather </tool_call> ─► (same)
    step 4: final text                            ─► parse · commit · run_completed

Method. ``Session.run`` is timed as a whole; ``engine.run_turn`` is wrapped and its time (the scripted engine:
a Jinja render of the prompt plus replaying the text — a real engine's work, not orchestration) is subtracted.
The remaining time is split into steps at the engine calls: step i = end of model turn i → start of model turn
i+1 (the first step also carries the run's start: run_started + provenance events; the last its end).
Phase timings wrap the session's own methods on the instance (``_parse``, ``_commit_turn``, ``_validate``,
``_approve``, ``_execute_batch``, ``_reinject``; for attribution also ``_begin`` (run_started, provenance, the first
commits), ``_model_turn`` minus the engine call inside it (ledger copy, model_call_* events) and ``_end`` (the
terminal event and its fsync)) and ``TraceRecorder.emit`` (tracing happens inside the other phases: its column is
a part of theirs, not an addition). Step p50s are also reported per position in the run (step 1 carries the
run's start, step 4 its end). Wrapping costs ~1 µs per call and is included. None of this changes what the
per-step number measures.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_orchestration.py [--runs 200] [--no-write]`` or
``ember bench orchestration``. Target: ≤ 1 ms p50 per step.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal


from _common import (
    BENCHMARKS_DIR,
    environment_lines,
    figure,
    format_seconds,
    markdown_table,
    percentiles,
    save_figure,
    write_section,
)

__all__ = ["HEADING", "PHASES", "OrchestrationReport", "run_benchmark", "render_report", "main"]

HEADING = "## Orchestration: session overhead per step (scripted engine)"
"""The RESULTS.md section this benchmark owns."""
PHASES = ("_parse", "_commit_turn", "_validate", "_approve", "_execute_batch", "_reinject")
"""Session methods timed as phases (``_execute_batch`` runs the tools and calls ``_reinject`` inside it). A name the
session no longer has is skipped (its row reads n = 0): the per-step number never depends on them."""
EXTRA_PHASES = ("_begin", "_model_turn", "_end")
"""Session methods timed for attribution only (``_model_turn`` minus the engine call inside it)."""
TARGET_P50_S = 1e-3


def _tools() -> list[Any]:
    from agent.tool import Tool, ToolKind

    def get_weather(city: str, date: str) -> dict[str, Any]:
        """Weather forecast for a city on a date."""
        return {"city": city, "date": date, "forecast": "sunny", "high_c": 21}

    def book_flight(city: str, date: str, passengers: int,
                    cabin: Literal["economy", "premium_economy", "business", "first"]) -> dict[str, Any]:
        """Book a flight (an action inside the run)."""
        return {"booking": "EMB-0042", "city": city, "date": date, "passengers": passengers, "cabin": cabin}

    return [Tool.from_function(get_weather), Tool.from_function(book_flight, kind=ToolKind.ACTION)]


def _script(codec: Any) -> list[str]:
    """Model texts for the four steps, rendered by the codec itself (stop token excluded, as engines report)."""
    from agent.protocol import FinalText, ToolCall, ToolCalls

    def model_text(action: Any) -> str:
        base = [{"role": "user", "content": "u"}]
        prompt = codec.render(base, add_generation_prompt=True)
        full = codec.render([*base, codec.assistant_message(action)], add_generation_prompt=False)
        turn = full[len(prompt):]
        return turn[: turn.rindex(codec.stop_token_names[0])]

    def call(name: str, **arguments: Any) -> str:
        return model_text(ToolCalls(calls=(ToolCall(name=name, arguments=arguments, raw=""),)))

    return [
        call("get_weather", city="Paris", date="2025-03-14"),
        call("book_flight", city="Paris", date="2025-03-14", passengers=2, cabin="business"),
        call("get_weather", city="Lyon", date="2025-03-15"),
        model_text(FinalText(text="Booked EMB-0042: Paris on 2025-03-14, 2 passengers in business. Sunny, 21 °C.")),
    ]


@dataclass(frozen=True, kw_only=True)
class OrchestrationReport:
    """Everything measured."""

    runs: int
    steps_per_run: int
    run_s: list[float]
    """Session.run wall time per run."""
    engine_s: list[float]
    """Scripted engine time per run (subtracted)."""
    step_s: list[float]
    """Orchestration time per step (runs × steps)."""
    phase_s: dict[str, list[float]]
    """Per call, for each wrapped phase (and ``emit``)."""
    step_index_s: dict[int, list[float]]
    """Orchestration time per step, by position in the run (1-based)."""
    trace_events_per_run: float
    outcomes: dict[str, int]


def _timed(fn: Callable[..., Any], sink: list[float]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            sink.append(time.perf_counter() - start)

    return wrapper


def run_benchmark(*, runs: int = 200, warmup: int = 5) -> OrchestrationReport:
    """Run the scripted session ``warmup + runs`` times; keep the last ``runs``."""
    from agent.protocol import QwenCodec
    from agent.session import Session
    from agent.testkit import ScriptedEngine
    from agent.tool import ToolRegistry
    from agent.trace import TraceRecorder

    codec = QwenCodec()
    registry = ToolRegistry(_tools())
    script = _script(codec)
    run_s: list[float] = []
    engine_s: list[float] = []
    step_s: list[float] = []
    phase_s: dict[str, list[float]] = defaultdict(list)
    step_index_s: dict[int, list[float]] = defaultdict(list)
    n_events = 0
    outcomes: dict[str, int] = defaultdict(int)
    with tempfile.TemporaryDirectory(prefix="ember-bench-orch-") as tmp:
        for index in range(warmup + runs):
            keep = index >= warmup
            engine = ScriptedEngine(script, codec)
            recorder = TraceRecorder(Path(tmp) / f"trace-{index}.jsonl")
            session = Session(engine, registry, trace=recorder, system_prompt="You are a travel assistant.")
            marks: list[tuple[float, float]] = []  # (start, end) of each engine call
            run_turn = engine.run_turn

            def timed_turn(*args: Any, _run_turn: Any = run_turn, _marks: Any = marks, **kwargs: Any) -> Any:
                start = time.perf_counter()
                try:
                    return _run_turn(*args, **kwargs)
                finally:
                    _marks.append((start, time.perf_counter()))

            engine.run_turn = timed_turn  # type: ignore[method-assign]
            sinks: dict[str, list[float]] = {name: [] for name in (*PHASES, *EXTRA_PHASES, "emit")}
            for name in (*PHASES, "_begin", "_end"):
                if hasattr(session, name):
                    setattr(session, name, _timed(getattr(session, name), sinks[name]))

            def model_turn(*args: Any, _fn: Any = session._model_turn, _marks: Any = marks,
                           _sink: Any = sinks["_model_turn"]) -> Any:
                start = time.perf_counter()
                n_marks = len(_marks)
                try:
                    return _fn(*args)
                finally:
                    inner = sum(b - a for a, b in _marks[n_marks:])
                    _sink.append(time.perf_counter() - start - inner)

            session._model_turn = model_turn  # type: ignore[method-assign]
            recorder.emit = _timed(recorder.emit, sinks["emit"])  # type: ignore[method-assign]
            start = time.perf_counter()
            result = session.run("Book me a flight to Paris on 2025-03-14 for 2 in business; check the weather.")
            end = time.perf_counter()
            recorder.close()
            if not keep:
                continue
            outcomes[str(result.outcome)] += 1
            run_s.append(end - start)
            engine_s.append(sum(b - a for a, b in marks))
            next_starts = [a for a, _ in marks[1:]] + [end]
            first_gap = marks[0][0] - start if marks else 0.0
            for i in range(len(marks)):
                gap = next_starts[i] - marks[i][1]
                step_s.append(gap + (first_gap if i == 0 else 0.0))
                step_index_s[i + 1].append(step_s[-1])
            for name, values in sinks.items():
                phase_s[name].extend(values)
            n_events += len(sinks["emit"])
    return OrchestrationReport(
        runs=runs, steps_per_run=len(script), run_s=run_s, engine_s=engine_s, step_s=step_s,
        phase_s=dict(phase_s), step_index_s=dict(step_index_s), trace_events_per_run=n_events / max(runs, 1),
        outcomes=dict(outcomes),
    )  # fmt: skip


def render_report(report: OrchestrationReport) -> str:
    """The RESULTS.md section body."""
    lines = environment_lines(["jsonschema", "jsonschema-rs", "pydantic", "jinja2"])
    out = ["\n".join(lines), ""]
    out.append(
        f"{report.runs} runs × {report.steps_per_run} model steps (3 tool calls via the real Qwen2.5 codec, then a "
        f"final answer), real TraceRecorder to a temp file ({report.trace_events_per_run:.0f} events/run), mock "
        f"tools; outcomes: {report.outcomes}. Orchestration = Session.run minus the scripted engine's run_turn, "
        "split into steps at the engine calls (see the module docstring)."
    )
    p50, p99 = percentiles(report.step_s)
    orch_run = [r - e for r, e in zip(report.run_s, report.engine_s, strict=True)]
    rows = [
        ["**orchestration per step**", format_seconds(p50), format_seconds(p99), len(report.step_s)],
        ["orchestration per run", *map(format_seconds, percentiles(orch_run)), len(orch_run)],
        ["scripted engine per run (template render + replay; excluded)",
         *map(format_seconds, percentiles(report.engine_s)), len(report.engine_s)],
        ["Session.run per run (total)", *map(format_seconds, percentiles(report.run_s)), len(report.run_s)],
    ]  # fmt: skip
    for index, values in sorted(report.step_index_s.items()):
        rows.append([f"step {index} of {report.steps_per_run}", *map(format_seconds, percentiles(values)),
                     len(values)])
    labels = {"emit": "of which tracing: emit (per event)", "_model_turn": "model turn excl. engine (per call)",
              "_begin": "run begin (per run)", "_end": "run end, incl. terminal fsync (per run)"}
    for name in (*PHASES, *EXTRA_PHASES, "emit"):
        values = report.phase_s.get(name, [])
        label = labels.get(name, f"phase {name.lstrip('_')} (per call)")
        rows.append([label, *map(format_seconds, percentiles(values)), len(values)])
    out.append("")
    out.append(markdown_table(["measure", "p50", "p99", "n"], rows))
    met = p50 <= TARGET_P50_S
    out.append("")
    out.append(f"Target ≤ 1 ms p50 per step: {format_seconds(p50)} — {'met' if met else '**not met**'}.")
    out.append("\n![orchestration per step](orchestration.png)")
    return "\n".join(out)


def plot(report: OrchestrationReport, path: Path) -> Path:
    fig, ax = figure(figsize=(7, 4))
    ax.hist([s * 1e3 for s in report.step_s], bins=60)
    ax.axvline(TARGET_P50_S * 1e3, color="red", linestyle="--", label="1 ms target (p50)")
    ax.set_xlabel("orchestration time per step (ms)")
    ax.set_ylabel("steps")
    ax.set_title("Session overhead per step, scripted engine")
    ax.legend()
    return save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    report = run_benchmark(runs=args.runs)
    body = render_report(report)
    print(body)
    if not args.no_write:
        write_section(BENCHMARKS_DIR / "RESULTS.md", HEADING, body)
        plot(report, BENCHMARKS_DIR / "orchestration.png")
    p50 = statistics.median(report.step_s) if report.step_s else float("nan")
    return 0 if p50 <= TARGET_P50_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
