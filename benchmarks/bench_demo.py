"""`ember demo --auto` over seeds: how often the default model finishes the seed's workflow with no per-turn plan.

Owns the unscripted-workflow claim: the demo task (read two experiment summaries, compute the improvement with the
calculator, write a report artifact, answer ``DONE 21.57%``) under ``tool_choice="auto"``, sampled at a temperature
over seeds, each run traced and verified. A success is the right answer *and* a verified trace; every other run
is listed with how it ended. Refuses to grade kindly: the answer must be exactly right.

    for seed: run_demo(auto=True, temperature, seed) ─► trace.jsonl (verified) ─► right answer? ─► RESULTS.md

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_demo.py [--seeds 10] [--temperature 0.7]``
(also ``ember bench demo``).
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

HEADING = "## Demo under auto: the seed's workflow with no per-turn plan (ember demo --auto)"


def run_seed(seed: int, temperature: float, out: Path, model: str) -> dict:
    """One demo run; its outcome, final answer, tool calls made, trace verification and seconds."""
    from agent.demo import run_demo

    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        run_demo(model=model, out_dir=out, n_threads=1, auto=True, temperature=temperature, seed=seed)
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
    verified = report.ok and not report.narration  # facts, and no unbacked claim in the answer
    return {"seed": seed, "outcome": end.data.get("outcome"), "answer": answer, "calls": calls,
            "verified": verified, "success": verified and (answer or "").strip() == EXPECTED_ANSWER,
            "seconds": round(seconds, 1) if seconds is not None else "—"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--existing", metavar="PATTERN", help="summarize demo directories already run with "
                        "these settings instead, e.g. /tmp/demo-{seed} (runs nothing)")
    parser.add_argument("--no-write", action="store_true", help="print the section, leave RESULTS.md alone")
    args = parser.parse_args(argv)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            if args.existing:
                runs.append(summarize(seed, Path(args.existing.format(seed=seed)), None))
            else:
                runs.append(run_seed(seed, args.temperature, Path(tmp) / f"seed-{seed}", args.model))
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    wins = sum(r["success"] for r in runs)
    rows = [[r["seed"], r["outcome"], f"`{r['answer']}`" if r["answer"] else "—", " → ".join(r["calls"]) or "—",
             "OK" if r["verified"] else "FAILED", r["seconds"]] for r in runs]
    body = "\n".join([
        *environment_lines(["llama-cpp-python"]),
        f"- Model: `{args.model}`, temperature {args.temperature}, seeds 0–{args.seeds - 1}, n_threads 1; "
        "`tool_choice` auto, parallel calls allowed, the final answer held to `DONE <number>%`, 8 model steps.",
        "- Success: the answer is exactly `DONE 21.57%` and `trace verify` passes. The scripted `ember demo` "
        "(per-turn plan) is the deterministic baseline.",
        "",
        f"**{wins}/{len(runs)} runs succeeded.**",
        "",
        markdown_table(["seed", "outcome", "answer", "tools executed (in order)", "trace verify", "s"], rows),
    ]) + "\n"
    print(HEADING + "\n\n" + body)
    if not args.no_write:
        write_section(BENCHMARKS_DIR / "RESULTS.md", HEADING, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
