"""Repeat-call loops: how often a real session ends at a limit or runs the same call twice, before and after the
repeat rule (issue #44 item 3).

Owns the loop-rate measurement of the shared repeat rule (`agent.repeats`: a call written twice in one turn stands
once; a turn made only of calls the conversation already answered is rolled back and the next turn answers under
``none``). Real `agent.session.Session` runs on the default model (greedy, one thread, the default `AgentLimits()`),
each traced, over four workloads:

* ``calculator``: the issue's one-step question under ``ember run --tools builtin`` (builtin tools, auto);
* ``demo``: the demo task under auto with no plan (`agent.demo.AUTO_PROMPT`, the form-only final pattern);
* ``flights``: the 24 English requests of `studies_data` with search_flights (rich schema, constrained),
  airports.lookup and calendar.resolve_date offered under auto, as the flight study's auto knowledge rows;
* ``bfcl``: multi-step sessions on BFCL dev requests (the first N ids per category, every offered tool
  constrained, each answering ``{"status": "ok"}``).

It uses only public API that exists both at ``dc3640a`` (before the rule) and in the tree after it, so the same
file runs against either library: ``--label`` names the tree, and each session's record goes to
``benchmarks/results/loops/<label>.jsonl`` (a rerun resumes: sessions already recorded are skipped unless
``--fresh``). The RESULTS.md section is rebuilt from every label's file (``--report-only`` rebuilds it without a
model). Refuses to judge answers beyond the calculator's: only how runs end and what they repeat.

    workload ─► Session.run (traced) ─► read_trace ─► classify(events) ─► results/loops/<label>.jsonl ─► RESULTS.md

A run *looped* when it ended at a limit, or the same (tool, validated arguments) ran more than once (a real
execution, not a replay). Repeat requests (the model asked again for a call it had already asked for: replayed,
refused, or dropped as a duplicate in its turn) are counted separately: they are what the model did, the loop is
what the session let happen. So is a completed run whose final answer is a tool call written as text (the call
again, in a code block: a loop that ends "completed").

Run (each library from its own worktree, its C extensions built there, the same script file for both):

    git worktree add /tmp/ember-before dc3640a    # before the rule; the after tree: its commit, or src/
    (cd /tmp/ember-before && /work/main/.venv/bin/python setup.py build_ext --inplace)
    PYTHONPATH=/tmp/ember-before/src .venv/bin/python benchmarks/bench_loops.py --label before
        [--workloads calculator,demo,flights,bfcl] [--bfcl-per-category 8] [--fresh] [--no-write]
    PYTHONPATH=src .venv/bin/python benchmarks/bench_loops.py --label after
    .venv/bin/python benchmarks/bench_loops.py --report-only

About 25 minutes a tree on one thread here (calculator and demo 2 minutes, flights 6-8, BFCL 12-15).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from _common import BENCHMARKS_DIR, REPO_ROOT, environment_lines, markdown_table, write_section

__all__ = ["HEADING", "WORKLOADS", "bfcl_sample", "call_as_answer", "classify", "main", "summarize"]

HEADING = "## Repeat-call loops: sessions before and after the repeat rule (issue #44)"
DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"
WORKLOADS = ("calculator", "demo", "flights", "bfcl")
LABELS = ("before", "after")
"""Report order of the trees; any other label is reported after these."""
RESULTS_DIR = BENCHMARKS_DIR / "results" / "loops"
PACKAGES = ("llama-cpp-python",)
CALCULATOR_PROMPT = "What is 17.5 multiplied by 4.2? Use the calculator tool, then answer with just the number."
CALCULATOR_ANSWER = 73.5
DEMO_FINAL_PATTERN = r"DONE [0-9]{1,6}\.[0-9]{2}%"
"""The demo's form-only final pattern (`agent.demo.FINAL_ANSWER_PATTERN` at dc3640a; the after tree's grounded
pattern has slots the before tree does not know)."""
BFCL_CASES = REPO_ROOT.parent / "shared" / "corpus" / "bfcl-dev" / "cases.jsonl"
BFCL_CATEGORIES = ("simple", "multiple", "parallel", "parallel_multiple", "irrelevance")
BFCL_RESULT = {"status": "ok"}
FLIGHT_TOOL = "search_flights"
FLIGHT_RESULT = {"flights": [{"flight": "EM 123", "departs": "08:05", "arrives": "11:40", "price_eur": 129}]}
FLIGHT_HINTS = ("Before search_flights, call airports.lookup for each city to get its IATA code.",
                "Before search_flights, call calendar.resolve_date with the date words of the request to get the "
                "date.")
"""The flight study's auto-row hints for the two knowledge tools (`bench_flights.TOOL_HINTS`), copied."""


# -- classification (pure) --------------------------------------------------------------------------------------


def classify(events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What one traced run did, from its events (``{"event_type", "data"}``): how it ended and what it repeated.

    Keys: ``outcome``, ``limit`` (the limit kind, or None), ``steps``, ``tool_calls`` (counted by the session),
    ``executions`` (tools really run), ``replays`` (a repeat answered with its earlier result), ``refused`` (calls
    of a turn refused as repeats of answered calls), ``duplicates_dropped`` (copies of a call in the same turn),
    ``repeat_requests`` (every call the model asked for again: extra validated copies + refused + dropped),
    ``executed_twice`` (some (tool, arguments) ran more than once), ``looped`` (ended at a limit, or
    ``executed_twice``), ``final_text``."""
    key_of: dict[str, tuple[str, str]] = {}
    requested: Counter[tuple[str, str]] = Counter()
    ran: Counter[tuple[str, str]] = Counter()
    replays = refused = dropped = 0
    end: Mapping[str, Any] = {}
    for event in events:
        kind, data = event.get("event_type"), event.get("data") or {}
        if kind == "tool_call_validated":
            key = (str(data.get("tool")), str(data.get("arguments_sha256")))
            key_of[str(data.get("call_id"))] = key
            requested[key] += 1
        elif kind == "assistant_action_parsed":
            dropped += int(data.get("duplicates_dropped") or 0)
        elif kind == "repeats_refused":
            for call in data.get("calls") or ():
                refused += 1
                key = key_of.get(str(call.get("answered_by")))
                if key is not None:
                    requested[key] += 1
        elif kind == "tool_execution_finished":
            if data.get("replayed"):
                replays += 1
            else:
                key = key_of.get(str(data.get("call_id")))
                if key is not None:
                    ran[key] += 1
        elif kind in ("run_completed", "run_failed", "run_cancelled", "run_terminated"):
            end = data
    executed_twice = any(n > 1 for n in ran.values())
    limit = end.get("limit")
    return {
        "outcome": end.get("outcome", "unfinished"), "limit": limit, "steps": end.get("steps"),
        "tool_calls": end.get("tool_calls"), "executions": sum(ran.values()), "replays": replays,
        "refused": refused, "duplicates_dropped": dropped,
        "repeat_requests": sum(n - 1 for n in requested.values() if n > 1) + dropped,
        "executed_twice": executed_twice, "looped": limit is not None or executed_twice,
        "final_text": end.get("final_text"),
    }


def _natural(case_id: str) -> tuple[str, int]:
    prefix, _, number = case_id.rpartition("_")
    return (prefix, int(number)) if number.isdigit() else (case_id, -1)


def bfcl_category(case_id: str) -> str:
    """The BFCL category of a case id (``simple_python_3`` → ``simple``, ``parallel_multiple_7`` →
    ``parallel_multiple``)."""
    prefix = case_id.rpartition("_")[0]
    return "simple" if prefix == "simple_python" else prefix


def bfcl_sample(cases: Iterable[Mapping[str, Any]], per_category: int) -> list[Mapping[str, Any]]:
    """The first ``per_category`` cases of each category, ids in numeric order (``_2`` before ``_10``)."""
    by_category: dict[str, list[Mapping[str, Any]]] = {c: [] for c in BFCL_CATEGORIES}
    for case in cases:
        by_category.setdefault(bfcl_category(case["id"]), []).append(case)
    return [case for category in BFCL_CATEGORIES
            for case in sorted(by_category[category], key=lambda c: _natural(c["id"]))[:per_category]]


# -- sessions ---------------------------------------------------------------------------------------------------


def _library() -> str:
    """Where the agent library comes from: its git revision (``+dirty`` with uncommitted changes) and path."""
    import agent

    root = Path(agent.__file__).resolve().parents[2]
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "src"], capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return str(root)
    return f"{rev}{'+dirty' if dirty else ''} ({root})"


class SetupError(Exception):
    """The session could not be built for a case (a tool the library cannot define or compile)."""


class _Runner:
    """One model, loaded once; one traced Session per case."""

    def __init__(self, model: str, threads: int, work: Path) -> None:
        from agent.chat import load_chat_model
        from agent.engine import ChatModelEngine

        self.chat = load_chat_model(model, n_threads=threads)
        self.engine = ChatModelEngine(self.chat.model, self.chat.codec)
        self.work = work
        self.n = 0

    def run(self, tools: Sequence[Any], prompt: str, **session: Any) -> dict[str, Any]:
        from agent.artifact import ArtifactStore
        from agent.limits import AgentLimits
        from agent.session import Session
        from agent.tool import ToolRegistry
        from agent.trace import TraceRecorder, read_trace

        self.n += 1
        run_dir = self.work / f"run-{self.n}"
        run_dir.mkdir(parents=True)
        trace = TraceRecorder(run_dir / "trace.jsonl")
        try:
            s = Session(self.engine, ToolRegistry(list(tools)), limits=AgentLimits(), trace=trace,
                        artifacts=ArtifactStore(run_dir / "artifacts"), **session)
        except Exception as error:
            trace.close()
            raise SetupError(f"{type(error).__name__}: {error}") from error
        started = time.perf_counter()
        try:
            result = s.run(prompt)
        except Exception as error:  # a bug surfacing in the library under test: recorded, the sweep goes on
            self.engine.rollback()
            return {"outcome": "error", "detail": f"{type(error).__name__}: {str(error)[:300]}", "looped": None,
                    "seconds": round(time.perf_counter() - started, 1)}
        finally:
            trace.close()
        seconds = time.perf_counter() - started
        self.engine.rollback()
        events = [{"event_type": e.event_type, "data": e.data} for e in read_trace(run_dir / "trace.jsonl").events]
        record = classify(events)
        record.update(outcome=str(getattr(result.outcome, "value", result.outcome)),
                      limit=str(getattr(result.limit, "value", result.limit)) if result.limit else None,
                      steps=result.steps, tool_calls=result.tool_calls, detail=result.detail,
                      final_text=result.final_text, seconds=round(seconds, 1),
                      turns=[_turn(e["data"]) for e in events if e["event_type"] == "model_call_finished"])
        record["looped"] = record["limit"] is not None or record["executed_twice"]
        shutil.rmtree(run_dir, ignore_errors=True)
        return record


def _turn(data: Mapping[str, Any]) -> str:
    text = str(data.get("output") or "")
    return text if len(text) <= 300 else text[:300] + "…"


def _calculator(runner: _Runner) -> Iterator[tuple[str, dict[str, Any]]]:
    from agent.builtins import builtin_tools

    sandbox = runner.work / "calculator-sandbox"
    sandbox.mkdir(exist_ok=True)
    record = runner.run(builtin_tools(sandbox), CALCULATOR_PROMPT, tool_choice="auto")
    record["answer_ok"] = _number(record.get("final_text")) == CALCULATOR_ANSWER
    yield "calculator", record


def _number(text: Any) -> float | None:
    """The last number in an answer (``"The product of 17.5 and 4.2 is 73.5."`` → 73.5), or None."""
    found = re.findall(r"-?\d+(?:\.\d+)?", str(text or ""))
    return float(found[-1]) if found else None


def _demo(runner: _Runner) -> Iterator[tuple[str, dict[str, Any]]]:
    import agent.demo as demo
    from agent.builtins import builtin_tools

    sandbox = runner.work / "demo-sandbox"
    sandbox.mkdir(exist_ok=True)
    for source in sorted((Path(demo.__file__).parent / "data" / "demo").glob("*.md")):
        shutil.copyfile(source, sandbox / source.name)
    record = runner.run(builtin_tools(sandbox), demo.AUTO_PROMPT, system_prompt=demo.AUTO_SYSTEM_PROMPT,
                        tool_choice="auto", final_pattern=DEMO_FINAL_PATTERN)
    record["answer_ok"] = (record.get("final_text") or "").strip() == "DONE 21.57%"
    yield "demo", record


def _flights(runner: _Runner, done: set[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    import knowledge_tools as kt
    import studies_data as sd
    from agent.tool import Tool, ToolKind

    def search(args: Any, ctx: Any) -> dict[str, Any]:
        return FLIGHT_RESULT

    system = " ".join([sd.BASE_SYSTEM_PROMPT, *FLIGHT_HINTS])
    for request in sd.REQUESTS:
        if request.id in done:
            continue
        tools = [kt.airports_tool(constrained=True), kt.calendar_tool(constrained=True),
                 Tool(name=FLIGHT_TOOL, kind=ToolKind.DATA, constrained=True, description=sd.FLIGHT_TOOL_DESCRIPTION,
                      parameters=sd.rich_schema(date_pattern=False), function=search)]
        record = runner.run(tools, request.text, system_prompt=system, tool_choice="auto")
        yield request.id, record


def _bfcl(runner: _Runner, done: set[str], per_category: int) -> Iterator[tuple[str, dict[str, Any]]]:
    from agent.tool import Tool

    def ok(args: Any, ctx: Any) -> dict[str, Any]:
        return dict(BFCL_RESULT)

    cases = [json.loads(line) for line in BFCL_CASES.read_text(encoding="utf-8").splitlines() if line.strip()]
    for case in bfcl_sample(cases, per_category):
        if case["id"] in done:
            continue
        prompt = "\n\n".join(str(m["content"]) for m in case["messages"] if m.get("role") == "user")
        try:
            tools = [Tool.from_openai(d, ok, constrained=True) for d in case["tools"]]
            record = runner.run(tools, prompt, tool_choice="auto")
        except (SetupError, ValueError, TypeError) as error:  # a tool the library cannot define or compile
            record = {"outcome": "skipped", "detail": f"{type(error).__name__}: {str(error)[:300]}", "looped": None}
        record["category"] = bfcl_category(case["id"])
        yield case["id"], record


# -- records ----------------------------------------------------------------------------------------------------


def _results_path(label: str) -> Path:
    return RESULTS_DIR / f"{label}.jsonl"


def load_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def measure(label: str, workloads: Sequence[str], *, model: str, threads: int, per_category: int,
            fresh: bool) -> None:
    path = _results_path(label)
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = [r for r in load_records(path) if not (fresh and r["workload"] in workloads)]
    if fresh:
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept), encoding="utf-8")
    done = {(r["workload"], r["case"]) for r in kept}
    library = _library()
    print(f"bench_loops [{label}]: agent library {library}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="bench-loops-") as tmp:
        runner = _Runner(model, threads, Path(tmp))
        for workload in workloads:
            ids = {case for w, case in done if w == workload}
            if workload == "calculator":
                found = _calculator(runner) if "calculator" not in ids else iter(())
            elif workload == "demo":
                found = _demo(runner) if "demo" not in ids else iter(())
            elif workload == "flights":
                found = _flights(runner, ids)
            else:
                found = _bfcl(runner, ids, per_category)
            for case, record in found:
                record = {"label": label, "library": library, "workload": workload, "case": case, **record}
                with path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(record, ensure_ascii=False) + "\n")
                print(f"  {workload:<10} {case:<22} {record['outcome']:<9} limit={record.get('limit')} "
                      f"steps={record.get('steps')} calls={record.get('tool_calls')} "
                      f"looped={record.get('looped')} {record.get('seconds', '')}s", file=sys.stderr, flush=True)


# -- report -----------------------------------------------------------------------------------------------------


CALL_AS_TEXT = re.compile(r'"name"\s*:\s*"[^"]*"\s*,\s*"arguments"\s*:')
"""A final answer that is a tool call written as text (the call again, in a code block: a loop in disguise)."""


def call_as_answer(final_text: str | None) -> bool:
    """The run's final answer is a tool call written as text instead of an answer."""
    return bool(final_text) and CALL_AS_TEXT.search(final_text) is not None


def summarize(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One (workload, tree) cell group: runs, completed, looped, limits, means (skipped cases left out)."""
    runs = [r for r in records if r.get("outcome") != "skipped"]
    n = len(runs)
    looped = sum(bool(r.get("looped")) for r in runs)
    limits = Counter(str(r["limit"]) for r in runs if r.get("limit"))
    mean = (lambda key: sum(r.get(key) or 0 for r in runs) / n) if n else (lambda key: 0.0)
    return {"runs": n, "skipped": len(records) - n, "completed": sum(r.get("outcome") == "completed" for r in runs),
            "looped": looped, "loop_rate": looped / n if n else 0.0, "limits": dict(sorted(limits.items())),
            "repeating": sum((r.get("repeat_requests") or 0) > 0 for r in runs),
            "call_as_answer": sum(r.get("outcome") == "completed" and call_as_answer(r.get("final_text"))
                                  for r in runs),
            "repeat_requests": sum(r.get("repeat_requests") or 0 for r in runs),
            "refused": sum(r.get("refused") or 0 for r in runs),
            "executed_twice": sum(bool(r.get("executed_twice")) for r in runs),
            "tool_calls": mean("tool_calls"), "steps": mean("steps"), "executions": mean("executions"),
            "seconds": sum(r.get("seconds") or 0 for r in runs)}


def _limits_cell(limits: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in limits.items()) or "—"


def report(by_label: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    labels = [label for label in LABELS if label in by_label] + sorted(set(by_label) - set(LABELS))
    libraries = {label: sorted({r.get("library", "?") for r in by_label[label]}) for label in labels}
    rows = []
    for workload in WORKLOADS:
        for label in labels:
            records = [r for r in by_label[label] if r["workload"] == workload]
            if not records:
                continue
            s = summarize(records)
            rows.append([workload, label, s["runs"], s["completed"], s["call_as_answer"],
                         f"{s['looped']} ({s['loop_rate']:.0%})",
                         _limits_cell(s["limits"]), s["executed_twice"],
                         f"{s['repeating']} / {s['repeat_requests']}", s["refused"], f"{s['tool_calls']:.1f}",
                         f"{s['steps']:.1f}", f"{s['executions']:.1f}", f"{s['seconds']:.0f}"])
    headers = ["workload", "tree", "runs", "completed", "a call as text", "looped (rate)", "limit endings",
               "ran a call twice", "runs repeating / repeat requests", "refused repeats", "mean tool calls",
               "mean steps", "mean executions", "seconds"]
    lines = [f"Real `Session` runs of `{DEFAULT_MODEL}` (greedy, `n_threads=1`, the default `AgentLimits()`: 8 model",
             "steps, 16 tool calls, 256 output tokens a turn), each traced. *Looped*: ended at a limit, or the same",
             "(tool, validated arguments) really ran more than once. *Repeat requests*: calls the model asked for",
             "again (replayed with their earlier result, refused as a repeats-only turn, or dropped as a copy in the",
             "same turn). *A call as text*: a completed run whose final answer is a tool call written out instead",
             "of an answer. Rebuild: `.venv/bin/python benchmarks/bench_loops.py --report-only`; per-session records (each",
             "turn's text included) in `benchmarks/results/loops/<tree>.jsonl`.", "",
             *(f"- Tree `{label}`: agent library {', '.join(libraries[label])}" for label in labels),
             *environment_lines(PACKAGES), "", markdown_table(headers, rows), ""]
    calc = []
    for label in labels:
        for r in by_label[label]:
            if r["workload"] in ("calculator", "demo"):
                calc.append([r["workload"], label, r["outcome"] + (f" ({r['limit']})" if r.get("limit") else ""),
                             f"`{(r.get('final_text') or '—').strip()[:60]}`", r.get("tool_calls"), r.get("steps"),
                             r.get("executions"), r.get("replays"), r.get("refused"), r.get("seconds")])
    if calc:
        calc.sort(key=lambda row: (WORKLOADS.index(row[0]), labels.index(row[1])))
        lines += ["The two single runs:", "", markdown_table(
            ["workload", "tree", "ending", "answer", "tool calls", "steps", "executions", "replays", "refused",
             "seconds"], calc), ""]
    bfcl = []
    for label in labels:
        records = [r for r in by_label[label] if r["workload"] == "bfcl"]
        for category in BFCL_CATEGORIES:
            group = [r for r in records if r.get("category") == category]
            if group:
                s = summarize(group)
                bfcl.append([category, label, s["runs"], s["skipped"], s["completed"], s["call_as_answer"],
                             f"{s['looped']} ({s['loop_rate']:.0%})", _limits_cell(s["limits"]),
                             f"{s['repeating']} / {s['repeat_requests']}", f"{s['tool_calls']:.1f}"])
    if bfcl:
        skipped = sorted({f"{r['case']} ({r['label']}: {r.get('detail', '')[:120]})"
                          for label in labels for r in by_label[label]
                          if r["workload"] == "bfcl" and r.get("outcome") == "skipped"})
        lines += ["BFCL by category (first ids in numeric order per category; a case whose tools the library cannot",
                  "define is skipped and counted):", "", markdown_table(
                      ["category", "tree", "runs", "skipped", "completed", "a call as text", "looped (rate)",
                       "limit endings", "runs repeating / repeat requests", "mean tool calls"], bfcl), ""]
        if skipped:
            lines += ["Skipped: " + "; ".join(skipped), ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", default="after", help="the tree these runs measure (before, after)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, of {WORKLOADS}")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--bfcl-per-category", type=int, default=8)
    parser.add_argument("--fresh", action="store_true", help="drop this label's stored runs of these workloads")
    parser.add_argument("--report-only", action="store_true", help="rebuild the section from the stored runs")
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing RESULTS.md")
    parser.add_argument("--results", type=Path, default=BENCHMARKS_DIR / "RESULTS.md")
    args = parser.parse_args(argv)
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if unknown := [w for w in workloads if w not in WORKLOADS]:
        parser.error(f"unknown workloads {unknown}; choose from {WORKLOADS}")
    if not args.report_only:
        measure(args.label, workloads, model=args.model, threads=args.threads,
                per_category=args.bfcl_per_category, fresh=args.fresh)
    by_label = {p.stem: load_records(p) for p in sorted(RESULTS_DIR.glob("*.jsonl"))}
    body = report({k: v for k, v in by_label.items() if v})
    if args.no_write:
        print(body)
    else:
        write_section(args.results, HEADING, body)
        print(f"wrote {HEADING!r} to {args.results}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
