"""`ember demo`: the seed's workflow on the default model, end to end, traced and verified.

The model reads two experiment summaries (read_file), computes the relative improvement (calculator),
writes a Markdown artifact (write_artifact) and answers ``DONE 21.57%``. Then the demo writes the HTML
report and runs `verify_trace`, so the final line is a checked fact, not the model's word.

The model runs the task under ``tool_choice="auto"``: which tool each turn calls, and every value (which file to
read, the numbers in the expression, the artifact text) is its own. Constraint holds the form, grounding holds the
truth: the final answer is ``DONE <number>%`` where the number must be one a calculator result holds
(``DONE {{number@calculator:last}}%``, `agent.grounding_policy`), so the model cannot answer before it has computed,
nor with a number it made up; the calculator's expression must take its numbers from the conversation (the files
read, the task's ``* 100`` and ``2``), so it cannot compute on numbers it made up either; and read_file and
write_artifact take only the file names the task gives. A wrong value still fails
the demo. ``plan=True`` runs the scripted variant for comparison: a per-turn tool-choice plan fixes which tool each
step calls (`TOOL_PLAN`).

    data/demo/*.md ─► sandbox ─► run_session(builtin tools, constrained calls) ─► trace.jsonl + artifacts/
                                                                              └─► verify_trace ─► report.html

A rerun never destroys the previous run: its ``trace.jsonl``, ``report.html`` and ``artifacts/`` move to
``previous/<time of that trace>/`` first (``force=True`` deletes them instead).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from agent import trace, trace_report
from agent.builtins import builtin_tools
from agent.limits import AgentLimits
from agent.runner import run_session
from constrained import SamplingParams

__all__ = ["AUTO_PROMPT", "DEMO_PROMPT", "EXPECTED_ANSWER", "GROUNDED_ANSWER_PATTERN", "run_demo"]

DEMO_DATA = Path(__file__).parent / "data" / "demo"
TOOL_PLAN = ("read_file", "read_file", "calculator", "write_artifact", "none")
"""Which tool each model turn must call (the last entry, ``none``, is the final answer)."""
FINAL_ANSWER_PATTERN = r"DONE [0-9]{1,6}\.[0-9]{2}%"
"""The answer's form alone (``grounded=False``, and the scripted plan)."""
GROUNDED_ANSWER_PATTERN = "DONE {{number@calculator:last}}%"
"""The answer's form, its number one the calculator's latest result holds."""
EXPECTED_ANSWER = "DONE 21.57%"
SYSTEM_PROMPT = ("You are a careful research assistant. You learn file contents only by calling read_file, compute "
                 "only with calculator, and create files only with write_artifact. Make exactly one tool call per "
                 "turn and follow the plan in order.")
AUTO_SYSTEM_PROMPT = ("You are a careful research assistant. You learn file contents only by calling read_file, "
                      "compute only with calculator, and create files only with write_artifact.")
AUTO_PROMPT = ("The experiment summaries baseline_q4.md and tuned_q8.md each report a score. Find out how much "
               "better the tuned score is: first read both files, then compute round((tuned_score - baseline_score) "
               "/ baseline_score * 100, 2) with the calculator from the two scores you read, then write a short "
               "Markdown report named best-config.md with write_artifact (the best configuration, both scores and "
               "the improvement), then reply with exactly one line: DONE <improvement>%")
"""``ember demo``: the task, not a plan; which tool each turn calls, and with what, is the model's decision."""
DEMO_PROMPT = ("Follow this plan, one step per turn:\n"
               "1. read_file with path baseline_q4.md\n"
               "2. read_file with path tuned_q8.md\n"
               "3. calculator with the expression round((tuned_score - baseline_score) / baseline_score * 100, 2), "
               "using the two scores you read\n"
               "4. write_artifact with name best-config.md and as content a short Markdown report: the best "
               "configuration, both scores, and the improvement in percent from step 3\n"
               "5. reply with exactly one line: DONE followed by the result the calculator returned in step 3, "
               "then %")


_RUN_FILES = ("trace.jsonl", "report.html", "artifacts")
"""What one demo run writes into ``out_dir`` (the sandbox ``experiments/`` is the demo's own input copy)."""


def _set_aside_previous_run(out_dir: Path, *, force: bool, progress: Callable[[str], None] | None) -> None:
    """Move a previous run's files to ``previous/<YYYYmmdd-HHMMSS>/`` (or delete them with ``force``)."""
    present = [out_dir / name for name in _RUN_FILES if (out_dir / name).exists()]
    if not present:
        return
    if force:
        for path in present:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        return
    trace_file = out_dir / "trace.jsonl"
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime((trace_file if trace_file.exists() else present[0])
                                                            .stat().st_mtime))
    target = out_dir / "previous" / stamp
    n = 1
    while target.exists():
        n += 1
        target = out_dir / "previous" / f"{stamp}-{n}"
    target.mkdir(parents=True)
    for path in present:
        path.rename(target / path.name)
    if progress is not None:
        progress(f"previous demo run moved to {target}")


def run_demo(*, model: str, out_dir: Path, n_threads: int | None = None,
             progress: Callable[[str], None] | None = None, n_ctx: int = 4096, force: bool = False,
             plan: bool = False, grounded: bool = True, temperature: float = 0.0, top_p: float = 1.0,
             seed: int | None = None) -> int:
    """Run the workflow; exit status 0 only if the answer is right and the trace verifies.

    By default the task runs under ``tool_choice="auto"`` with no per-turn plan (`AUTO_PROMPT`): the model chooses
    every step, as in the seed's run, and its answer's number must come from a calculator result. ``grounded=False``
    holds only the answer's form (``DONE <number>%``) and lets the calculator take any number. ``plan`` runs the
    scripted variant instead (`TOOL_PLAN`, `DEMO_PROMPT`).

    A previous run in ``out_dir`` is moved to ``out_dir/previous/<time>/`` first, or deleted with ``force``."""
    out_dir = out_dir.resolve()
    if out_dir.exists() and not out_dir.is_dir():
        from agent.inputs import InputError

        raise InputError(f"--out {out_dir}: exists and is not a directory")
    _set_aside_previous_run(out_dir, force=force, progress=progress)
    sandbox = out_dir / "experiments"
    sandbox.mkdir(parents=True, exist_ok=True)
    for source in sorted(DEMO_DATA.glob("*.md")):
        shutil.copyfile(source, sandbox / source.name)
    trace_path = out_dir / "trace.jsonl"
    artifact_root = out_dir / "artifacts"

    tools = builtin_tools(sandbox, grounded=grounded and not plan)
    result = run_session(model=model, tools=tools, prompt=DEMO_PROMPT if plan else AUTO_PROMPT,
                         trace_path=trace_path, artifact_root=artifact_root, sandbox_root=sandbox,
                         system_prompt=SYSTEM_PROMPT if plan else AUTO_SYSTEM_PROMPT,
                         limits=AgentLimits(max_model_steps=8), tool_choice=TOOL_PLAN if plan else "auto",
                         final_pattern=GROUNDED_ANSWER_PATTERN if grounded and not plan else FINAL_ANSWER_PATTERN,
                         n_threads=n_threads, progress=progress, n_ctx=n_ctx, parallel_calls=False,
                         sampling=SamplingParams(temperature=temperature, top_p=top_p, seed=seed))

    report_path = out_dir / "report.html"
    events = trace.read_trace(trace_path).events
    report_path.write_text(trace_report.render_html_report(events, title="ember demo"), encoding="utf-8")
    verification = trace.verify_trace(trace_path, artifact_root=artifact_root)
    artifacts = sorted(p.name for p in artifact_root.glob("*") if p.is_file()) if artifact_root.is_dir() else []

    print()
    print(f"final answer : {result.final_text}")
    print(f"trace        : {trace_path}")
    print(f"report       : {report_path}")
    print(f"artifacts    : {', '.join(artifacts) or '(none)'} in {artifact_root}")
    for problem in verification.problems:
        print(f"PROBLEM      : {problem}")
    for finding in verification.ungrounded:
        print(f"UNGROUNDED   : {finding}")
    for finding in verification.narration:
        print(f"heuristic    : {finding}")
    verified = verification.ok and not verification.ungrounded and not verification.narration
    print(f"trace verify : {'OK' if verified else 'FAILED'}")
    answer_ok = (result.final_text or "").strip() == EXPECTED_ANSWER
    if not answer_ok:
        print(f"expected the answer {EXPECTED_ANSWER!r}; the run ended {result.outcome}"
              + (f" ({result.detail})" if result.detail else ""))
    return 0 if answer_ok and verified else 1
