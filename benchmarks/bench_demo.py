"""`ember demo` over seeds: how often each pinned model finishes the seed's workflow under auto, with no plan.

Owns the unscripted-workflow claim: the demo task (read two experiment summaries, compute the improvement with the
calculator, write a report artifact, answer ``DONE 21.57%``) under ``tool_choice="auto"``, sampled at a temperature
over seeds, each run traced and verified, on each model, in three variants: *grounded* (``ember demo``: the answer's
number must be a calculator result, the calculator's numbers ones the conversation holds), *ungrounded* (``ember demo
--ungrounded``: the answer's form alone) and *plan* (``ember demo --plan``: the scripted per-turn plan). A success is
the right answer *and* a verified trace (facts, grounding and the narration check); every other run is listed with
how it ended. Refuses to grade kindly: the answer must be exactly right.

    model × variant × seed: run_demo(...) ─► trace.jsonl (verified) ─► right answer?
        ─► benchmarks/results/demo/<model>__<variant>__t<T>__p<P>.jsonl (one line per seed)
        ─► RESULTS.md (every stored run)

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_demo.py [--model NAME ...] [--variant grounded ...]
[--seeds 10] [--temperature 0.7] [--top-p 0.8]`` (also ``ember bench demo``); ``--report-only`` rebuilds the
section from the stored runs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

from _common import BENCHMARKS_DIR, environment_lines, markdown_table, write_section

STORE = BENCHMARKS_DIR / "results" / "demo"

HEADING = "## Demo under auto: the seed's workflow with no per-turn plan (ember demo)"
MODELS = ("qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct")
VARIANTS = {"grounded": {}, "ungrounded": {"grounded": False}, "plan": {"plan": True}}
"""`run_demo` options per variant: ``ember demo``, ``--ungrounded``, ``--plan``."""


def run_seed(seed: int, temperature: float, top_p: float, out: Path, model: str, variant: str) -> dict:
    """One demo run; its outcome, final answer, tool calls made, trace verification and seconds."""
    from agent.demo import run_demo

    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        run_demo(model=model, out_dir=out, n_threads=1, temperature=temperature, top_p=top_p, seed=seed,
                 **VARIANTS[variant])
    return summarize(seed, out, time.perf_counter() - started)


def summarize(seed: int, out: Path, seconds: float | None) -> dict:
    """What the run in ``out`` (a demo ``--out`` directory) did, read from its trace."""
    from agent import trace
    from agent.demo import EXPECTED_ANSWER

    events = trace.read_trace(out / "trace.jsonl").events
    end = events[-1]
    calls = [e.data["tool"] for e in events if e.event_type == "tool_execution_finished"]
    answer = end.data.get("final_text")
    report = trace.verify_trace(out / "trace.jsonl", artifact_root=out / "artifacts")
    verified = report.ok and not report.ungrounded and not report.narration
    return {"seed": seed, "outcome": end.data.get("outcome"), "answer": answer, "calls": calls,
            "verified": verified, "ungrounded": len(report.ungrounded),
            "success": verified and (answer or "").strip() == EXPECTED_ANSWER,
            "seconds": round(seconds, 1) if seconds is not None else "—"}


def store_path(model: str, variant: str, temperature: float, top_p: float) -> Path:
    return STORE / f"{Path(model).name.removesuffix('.gguf')}__{variant}__t{temperature:g}__p{top_p:g}.jsonl"


def stored() -> dict[tuple[str, str, str], list[dict]]:
    """Every stored run: (model, variant, sampling) → its seeds' summaries."""
    out: dict[tuple[str, str, str], list[dict]] = {}
    for path in sorted(STORE.glob("*.jsonl")):
        model, variant, temperature, top_p = path.name.removesuffix(".jsonl").split("__")
        sampling = "greedy" if float(temperature[1:]) == 0 else f"T {temperature[1:]}, top_p {top_p[1:]}"
        out[(model, variant, sampling)] = [
            json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return out


def section(results: dict[tuple[str, str, str], list[dict]]) -> str:
    summary = [[model, variant, sampling, f"{sum(r['success'] for r in runs)}/{len(runs)}",
                sum(r["ungrounded"] > 0 for r in runs), sum(r["outcome"] != "completed" for r in runs)]
               for (model, variant, sampling), runs in results.items()]
    lines = [*environment_lines(["llama-cpp-python"]),
             "- Seeds 0–9 (greedy runs: one), n_threads 1; `tool_choice` auto, one call per turn, "
             "8 model steps. *grounded* is `ember demo`: the answer `DONE {{number@calculator}}%` (its number one a "
             "calculator result holds), the calculator's expression held to numbers the conversation holds "
             "(docs/grounding.md); *ungrounded* (`--ungrounded`) holds the answer's form `DONE <number>%` only; "
             "*plan* (`--plan`) is the scripted per-turn plan.",
             "- Success: the answer is exactly `DONE 21.57%` and `trace verify` passes (facts, no ungrounded claim in "
             "the answer, no narration finding).", "",
             markdown_table(["model", "variant", "sampling", "right and verified", "answers with an ungrounded claim",
                             "runs not completed"], summary), ""]
    for (model, variant, sampling), runs in results.items():
        rows = [[r["seed"], r["outcome"], f"`{r['answer']}`" if r["answer"] else "—",
                 " → ".join(r["calls"]) or "—", "OK" if r["verified"] else "FAILED", r["seconds"]] for r in runs]
        lines += [f"**{model}, {variant}, {sampling}**: {sum(r['success'] for r in runs)}/{len(runs)}", "",
                  markdown_table(["seed", "outcome", "answer", "tools executed (in order)", "trace verify", "s"], rows),
                  ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", default=[], help=f"store name or GGUF path (default: {MODELS})")
    parser.add_argument("--variant", action="append", default=[], choices=list(VARIANTS),
                        help="default: all three")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--top-p", type=float, default=0.8, help="default 0.8, Qwen2.5's own generation config")
    parser.add_argument("--no-write", action="store_true", help="print the section, leave RESULTS.md alone")
    parser.add_argument("--report-only", action="store_true", help="rebuild the section from the stored runs")
    args = parser.parse_args(argv)
    seeds = range(1) if args.temperature == 0 else range(args.seeds)
    with tempfile.TemporaryDirectory() as tmp:
        for model in [] if args.report_only else args.model or list(MODELS):
            for variant in args.variant or list(VARIANTS):
                runs = []
                for seed in seeds:
                    out = Path(tmp) / f"{Path(model).name.removesuffix('.gguf')}-{variant}-{seed}"
                    runs.append(run_seed(seed, args.temperature, args.top_p, out, model, variant))
                    print(json.dumps({"model": model, "variant": variant, **runs[-1]}), file=sys.stderr, flush=True)
                path = store_path(model, variant, args.temperature, args.top_p)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("".join(json.dumps(r) + "\n" for r in runs), encoding="utf-8")
    body = section(stored())
    print(HEADING + "\n\n" + body)
    if not args.no_write:
        write_section(BENCHMARKS_DIR / "RESULTS.md", HEADING, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
