"""`ember demo` over seeds: how often each pinned model finishes the seed's workflow under auto, with no plan.

Owns the unscripted-workflow claim: the demo task (read two experiment summaries, compute the improvement with the
calculator, write a report artifact, answer ``DONE 21.57%``) under ``tool_choice="auto"``, sampled at a temperature
over seeds, each run traced and verified, on each model, in three variants: *grounded* (``ember demo``: the answer's
number must be a calculator result, the calculator's numbers ones the conversation holds), *ungrounded* (``ember demo
--ungrounded``: the answer's form alone) and *plan* (``ember demo --plan``: the scripted per-turn plan). A success is
the right answer *and* a verified trace (facts, grounding and the narration check); every other run is listed with
how it ended. Refuses to grade kindly: the answer must be exactly right.

    model × variant × seed: run_demo(...) ─► trace.jsonl (verified) ─► right answer? ─► RESULTS.md

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_demo.py [--model NAME ...] [--variant grounded ...]
[--seeds 10] [--temperature 0.7]`` (also ``ember bench demo``).
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


def section(results: dict[tuple[str, str], list[dict]], *, temperature: float, top_p: float, seeds: int) -> str:
    summary = [[model, variant, f"{sum(r['success'] for r in runs)}/{len(runs)}",
                sum(r["ungrounded"] > 0 for r in runs), sum(r["outcome"] != "completed" for r in runs)]
               for (model, variant), runs in results.items()]
    lines = [*environment_lines(["llama-cpp-python"]),
             f"- Temperature {temperature}, top_p {top_p}, seeds 0–{seeds - 1}, n_threads 1; `tool_choice` auto, one call "
             "per turn, "
             "8 model steps. *grounded* is `ember demo`: the answer `DONE {{number@calculator}}%` (its number one a "
             "calculator result holds), the calculator's expression held to numbers the conversation holds "
             "(docs/grounding.md); *ungrounded* (`--ungrounded`) holds the answer's form `DONE <number>%` only; "
             "*plan* (`--plan`) is the scripted per-turn plan.",
             "- Success: the answer is exactly `DONE 21.57%` and `trace verify` passes (facts, no ungrounded claim in "
             "the answer, no narration finding).", "",
             markdown_table(["model", "variant", "right and verified", "answers with an ungrounded claim",
                             "runs not completed"], summary), ""]
    for (model, variant), runs in results.items():
        rows = [[r["seed"], r["outcome"], f"`{r['answer']}`" if r["answer"] else "—",
                 " → ".join(r["calls"]) or "—", "OK" if r["verified"] else "FAILED", r["seconds"]] for r in runs]
        lines += [f"**{model}, {variant}**: {sum(r['success'] for r in runs)}/{len(runs)}", "",
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
    args = parser.parse_args(argv)
    results: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.model or list(MODELS):
            for variant in args.variant or list(VARIANTS):
                runs = results.setdefault((model, variant), [])
                for seed in range(args.seeds):
                    out = Path(tmp) / f"{Path(model).name.removesuffix('.gguf')}-{variant}-{seed}"
                    runs.append(run_seed(seed, args.temperature, args.top_p, out, model, variant))
                    print(json.dumps({"model": model, "variant": variant, **runs[-1]}), file=sys.stderr, flush=True)
    body = section(results, temperature=args.temperature, top_p=args.top_p, seeds=args.seeds)
    print(HEADING + "\n\n" + body)
    if not args.no_write:
        write_section(BENCHMARKS_DIR / "RESULTS.md", HEADING, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
