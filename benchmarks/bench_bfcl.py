"""BFCL dev split: one `ember call` turn per case, constrained (and free), with and without grounding, AST-scored.

Owns the function-calling accuracy claim: the 200 cases of ``../shared/corpus/bfcl-dev`` (simple, multiple,
parallel, parallel_multiple, irrelevance; OpenAI-format tools), each answered by one model turn under
``tool_choice="auto"`` exactly as ``ember call --cases FILE --json`` answers it, with every tool constrained (the
default; ``--free`` adds a run with ``--no-constrained``), then scored by the faithful BFCL AST checker in
``../shared/eval/bfcl/score.py``. The turn is decoded once; *grounding* is ``ember call``'s one-turn policy
(`agent.calls.ground_record`, a pure function of the case and the turn) applied to it, as ``ember call`` applies it,
and *raw* is the turn as ``--no-grounding`` returns it. The policy was chosen on half A of the split (in each
category, the cases at even positions in id order) and is reported on half B and the whole, so the tuning shows.

    cases.jsonl ─► call_cases(grounding off) ─► benchmarks/bfcl/<model>.<mode>.jsonl ─► score.py ─► RESULTS.md
                                             └► ground_record ─► benchmarks/bfcl/<model>.<mode>+grounding.jsonl ─┘

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_bfcl.py [--model NAME ...] [--threads 1] [--limit N]``,
or score actions files already made with ``--actions MODEL=FILE`` (also ``ember bench bfcl``).
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

HEADING = "## BFCL dev split: tool calls under auto, with and without grounding (200 cases, AST-scored)"
SHARED = REPO_ROOT.parent / "shared"
MODELS = ("qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct")
CATEGORIES = ("simple", "multiple", "parallel", "parallel_multiple", "irrelevance")
COLUMNS = ("parse_fail", "no_call", "wrong_func", "wrong_count", "wrong_value")
TARGETS = {"irrelevance": 80, "overall": 66}
"""Accuracy (%) the default model should reach with grounding (issue 45), each category at most 5 points below raw."""


def _scorer(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("bfcl_score", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"bench_bfcl: no scorer at {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_mode(cases: list[dict[str, Any]], out: Path, *, model: str, constrained: bool, threads: int) -> float:
    """Answer every case (one turn each, nothing executed, grounding off) into ``out``; return the wall seconds."""
    from agent.calls import call_cases

    started = time.perf_counter()
    with out.open("w", encoding="utf-8") as f:
        for record in call_cases(model, cases, constrained=constrained, n_threads=threads, grounding=False):
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
    return time.perf_counter() - started


def grounded(raw: Path, out: Path, cases: dict[str, dict[str, Any]]) -> None:
    """``ember call``'s grounding policy over the raw turns (what ``ember call`` returns with grounding on)."""
    from agent.calls import ground_record

    with raw.open(encoding="utf-8") as f, out.open("w", encoding="utf-8") as w:
        for line in f:
            record = json.loads(line)
            w.write(json.dumps(ground_record(record, cases[record["id"]]), ensure_ascii=False) + "\n")


def halves(cases: list[dict[str, Any]], gold: dict[str, dict[str, Any]]) -> dict[str, set[str]]:
    """Half A (the even positions of each category in id order: where the policy was chosen) and half B."""
    by_category: dict[str, list[str]] = {}
    for case_id in sorted(c["id"] for c in cases):
        by_category.setdefault(gold[case_id]["category"], []).append(case_id)
    return {name: {i for ids in by_category.values() for i in ids[parity::2]} for parity, name in ((0, "A"), (1, "B"))}


def _cell(c: dict[str, Any] | None) -> str:
    return f"{100 * c['accuracy']:.1f} % ({c['passed']}/{c['n']})" if c and c["n"] else "—"


def report(runs: dict[str, dict[str, dict[str, Any]]], *, seconds: dict[str, float | None]) -> str:
    """One table per model: each run's accuracy per category on the whole split, then raw and grounding on each
    half; failures by kind."""
    lines = [*environment_lines(["llama-cpp-python"]),
             "- Each case one turn, greedy, `tool_choice` auto, max_tokens 256, parallel calls allowed, n_threads 1, "
             "as `ember call --cases ../shared/corpus/bfcl-dev/cases.jsonl --json` runs it"
             + (f"; decode time per run: {', '.join(f'{k} {v:.0f} s' for k, v in seconds.items() if v)}"
                if any(seconds.values()) else "") + ".",
             "- *raw*: the calls as the model wrote them (`--no-grounding`); *grounding*: `ember call`'s default, "
             "the one-turn grounding policy (docs/cli.md#ember-call): a call written twice stands once, a call none "
             "of whose required free values occur in the request is withheld, and so is one with at most half of "
             "them there unless a content word of the tool's name is among the request's words; an optional "
             "argument whose values are all ungrounded is dropped. *constrained*: every tool `constrained=True`; "
             "*free*: `--no-constrained`.",
             "- Scored by `../shared/eval/bfcl/score.py` (BFCL's AST checker; irrelevance passes when no call is "
             "made). Actions: `benchmarks/bfcl/<model>.<run>.jsonl`. Half A: the even positions of each category "
             "in id order, where the policy was chosen; half B: the rest.", ""]
    for model, model_runs in runs.items():
        names = list(model_runs)
        headers = ["category", *(f"{n}" for n in names if not n.endswith((" A", " B")))]
        rows = []
        for cat in (*CATEGORIES, "overall"):
            row = [cat]
            for name in headers[1:]:
                s = model_runs[name]
                row.append(_cell(s["categories"].get(cat) if cat != "overall" else s["overall"]))
            rows.append(row)
        lines += [f"**{model}**, the whole split:", "", markdown_table(headers, rows), ""]
        half_names = [n for n in names if n.endswith((" A", " B"))]
        if half_names:
            rows = [[cat, *(_cell(model_runs[n]["categories"].get(cat) if cat != "overall"
                                   else model_runs[n]["overall"]) for n in half_names)]
                    for cat in (*CATEGORIES, "overall")]
            lines += ["By half:", "", markdown_table(["category", *half_names], rows), ""]
        outcome_rows = [[n, *(sum(model_runs[n]["categories"].get(c, {}).get(col, 0) for c in CATEGORIES)
                              for col in COLUMNS)] for n in headers[1:]]
        lines += ["Failures by kind:", "", markdown_table(["run", *COLUMNS], outcome_rows), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", default=[], help=f"store name or GGUF path (default: {MODELS})")
    parser.add_argument("--cases", type=Path, default=SHARED / "corpus" / "bfcl-dev" / "cases.jsonl")
    parser.add_argument("--gold", type=Path, default=SHARED / "corpus" / "bfcl-dev" / "gold.jsonl")
    parser.add_argument("--scorer", type=Path, default=SHARED / "eval" / "bfcl" / "score.py")
    parser.add_argument("--actions", action="append", default=[], metavar="MODEL=FILE",
                        help="score this raw constrained actions file for MODEL instead of running it")
    parser.add_argument("--free", action="store_true", help="also run every model with --no-constrained")
    parser.add_argument("--limit", type=int, default=None, help="first N cases only (a smoke run)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-write", action="store_true", help="print the section, leave RESULTS.md alone")
    args = parser.parse_args(argv)

    scorer = _scorer(args.scorer)
    cases = [json.loads(line) for line in args.cases.read_text(encoding="utf-8").splitlines() if line.strip()]
    cases = cases[: args.limit] if args.limit else cases
    by_id = {c["id"]: c for c in cases}
    given = dict(a.split("=", 1) for a in args.actions)
    gold = [g for g in scorer.load_jsonl(args.gold) if g["id"] in by_id]
    split = halves(cases, {g["id"]: g for g in gold})
    out_dir = BENCHMARKS_DIR / "bfcl"
    out_dir.mkdir(exist_ok=True)
    runs: dict[str, dict[str, dict[str, Any]]] = {}
    seconds: dict[str, float | None] = {}
    for model in args.model or list(MODELS):
        short = Path(model).name.removesuffix(".gguf")
        runs[model] = {}
        for mode, constrained in (("constrained", True), *((("free", False),) if args.free else ())):
            raw = Path(given[model]) if mode == "constrained" and model in given else out_dir / f"{short}.{mode}.jsonl"
            if not (mode == "constrained" and model in given):
                print(f"bench_bfcl: {model} {mode}: {len(cases)} cases", file=sys.stderr, flush=True)
                seconds[f"{short} {mode}"] = run_mode(cases, raw, model=model, constrained=constrained,
                                                      threads=args.threads)
            policy = out_dir / f"{short}.{mode}+grounding.jsonl"
            grounded(raw, policy, by_id)
            for label, path in ((f"{mode} raw", raw), (f"{mode} grounding", policy)):
                actions, _ = scorer.load_actions(path)
                _, runs[model][label] = scorer.score_run(gold, actions)
                if mode == "constrained":
                    for half, ids in split.items():
                        _, runs[model][f"{label} {half}"] = scorer.score_run(
                            [g for g in gold if g["id"] in ids], [a for a in actions if a["id"] in ids])
    body = report(runs, seconds=seconds)
    print(HEADING + "\n\n" + body)
    if not args.no_write:
        write_section(BENCHMARKS_DIR / "RESULTS.md", HEADING, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
