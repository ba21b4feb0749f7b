"""BFCL dev split: one `ember call` turn per case on the default model, constrained and free, AST-scored.

Owns the function-calling accuracy claim: the 200 cases of ``../shared/corpus/bfcl-dev`` (simple, multiple,
parallel, parallel_multiple, irrelevance; OpenAI-format tools), each answered by one model turn under
``tool_choice="auto"`` exactly as ``ember call --cases FILE --json`` answers it, once with every tool constrained
(the default) and once with ``--no-constrained`` (free decoding; the codec still parses every call shape), then
scored by the faithful BFCL AST checker in ``../shared/eval/bfcl/score.py``. Refuses to tune: the dev split is the
only one read here.

    cases.jsonl ─► call_cases(constrained | free) ─► benchmarks/bfcl/<mode>.jsonl ─► score.py ─► RESULTS.md

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_bfcl.py [--threads 1] [--limit N]``, or score action
files already made with ``--actions constrained=A.jsonl --actions free=B.jsonl`` (also ``ember bench bfcl``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

from _common import BENCHMARKS_DIR, REPO_ROOT, environment_lines, markdown_table, write_section

HEADING = "## BFCL dev split: tool calls under auto (200 cases, AST-scored)"
SHARED = REPO_ROOT.parent / "shared"
MODES = {"constrained": True, "free": False}
CATEGORIES = ("simple", "multiple", "parallel", "parallel_multiple", "irrelevance")
COLUMNS = ("parse_fail", "no_call", "wrong_func", "wrong_count", "wrong_value")
TARGETS = {"simple": 85, "multiple": 80, "parallel": 60, "parallel_multiple": 50, "irrelevance": 85}
"""Accuracy (%) the constrained run should reach per category (issue 14); parse failures: 0."""


def _scorer(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("bfcl_score", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"bench_bfcl: no scorer at {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_mode(cases: list[dict[str, Any]], out: Path, *, model: str, constrained: bool, threads: int) -> float:
    """Answer every case (one turn each, nothing executed) into ``out``; return the wall seconds."""
    from agent.calls import call_cases

    started = time.perf_counter()
    with out.open("w", encoding="utf-8") as f:
        for record in call_cases(model, cases, constrained=constrained, n_threads=threads):
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
    return time.perf_counter() - started


def report(summaries: dict[str, dict[str, Any]], *, model: str, seconds: dict[str, float | None]) -> str:
    headers = ["category", *(f"{mode}: accuracy" for mode in summaries), "target (constrained)"]
    rows = []
    for cat in (*CATEGORIES, "overall"):
        cells = []
        for summary in summaries.values():
            c = summary["categories"].get(cat) if cat != "overall" else summary["overall"]
            cells.append(f"{100 * c['accuracy']:.1f} % ({c['passed']}/{c['n']})" if c and c["n"] else "—")
        rows.append([cat, *cells, f"≥ {TARGETS[cat]} %" if cat in TARGETS else "—"])
    outcome_rows = [[mode, *(sum(s["categories"].get(c, {}).get(col, 0) for c in CATEGORIES) for col in COLUMNS)]
                    for mode, s in summaries.items()]
    runs = ", ".join(f"{mode} {t:.0f} s" for mode, t in seconds.items() if t is not None)
    lines = [
        *environment_lines(["llama-cpp-python"]),
        f"- Model: `{model}`, greedy, `tool_choice` auto, max_tokens 256, parallel calls allowed, n_threads 1; "
        f"each case one turn, as `ember call --cases ../shared/corpus/bfcl-dev/cases.jsonl --json` runs it"
        + (f"; whole runs: {runs}" if runs else "") + ".",
        "- *constrained*: every offered tool `constrained=True` (the lazy grammar takes over at the family tag, a "
        "```` ```json ```` block or a bare `{`); *free*: `--no-constrained`, the same codec parsing every shape.",
        "- Scored by `../shared/eval/bfcl/score.py` (BFCL's AST checker; irrelevance passes when no call is made, "
        "a malformed turn counting as no call). Actions: `benchmarks/bfcl/<mode>.jsonl`.",
        "",
        markdown_table(headers, rows),
        "",
        "Failures by kind (all categories):",
        "",
        markdown_table(["mode", *COLUMNS], outcome_rows),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--cases", type=Path, default=SHARED / "corpus" / "bfcl-dev" / "cases.jsonl")
    parser.add_argument("--gold", type=Path, default=SHARED / "corpus" / "bfcl-dev" / "gold.jsonl")
    parser.add_argument("--scorer", type=Path, default=SHARED / "eval" / "bfcl" / "score.py")
    parser.add_argument("--actions", action="append", default=[], metavar="MODE=FILE",
                        help="score this actions file for MODE instead of running it")
    parser.add_argument("--limit", type=int, default=None, help="first N cases only (a smoke run)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-write", action="store_true", help="print the section, leave RESULTS.md alone")
    args = parser.parse_args(argv)

    scorer = _scorer(args.scorer)
    cases = [json.loads(line) for line in args.cases.read_text(encoding="utf-8").splitlines() if line.strip()]
    cases = cases[: args.limit] if args.limit else cases
    given = dict(a.split("=", 1) for a in args.actions)
    ids = {c["id"] for c in cases}
    gold = [g for g in scorer.load_jsonl(args.gold) if g["id"] in ids]
    out_dir = BENCHMARKS_DIR / "bfcl"
    out_dir.mkdir(exist_ok=True)
    summaries: dict[str, dict[str, Any]] = {}
    seconds: dict[str, float | None] = {}
    for mode, constrained in MODES.items():
        path = Path(given[mode]) if mode in given else out_dir / f"{mode}.jsonl"
        seconds[mode] = None
        if mode not in given:
            print(f"bench_bfcl: {mode}: {len(cases)} cases", file=sys.stderr, flush=True)
            seconds[mode] = run_mode(cases, path, model=args.model, constrained=constrained, threads=args.threads)
        actions, _ = scorer.load_actions(path)
        _, summaries[mode] = scorer.score_run(gold, actions)
    body = report(summaries, model=args.model, seconds=seconds)
    print(HEADING + "\n\n" + body)
    if not args.no_write:
        write_section(BENCHMARKS_DIR / "RESULTS.md", HEADING, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
