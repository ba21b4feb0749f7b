"""Generate the hostile suite's seed corpus (tests/hostile/corpus/) from real components, and run real sessions.

    python tests/hostile/make_corpus.py                      regenerate corpus/ (deterministic except timestamps)
    python tests/hostile/make_corpus.py --run TRACE ARTIFACTS [--turns N] [--slow-s S]
                                                             one real ScriptedEngine session (the kill -9 target)

corpus/traces/*.jsonl   real traces: a completed run with tool calls and write_artifact, a malformed-call repair,
                        a cancelled run, a limit-terminated run (fuzzed by truncation and corruption)
corpus/turns.json       real assistant turns per codec family (the codec's own rendering), mutated by the fuzzers
corpus/schemas.json     curated hostile schemas that are JSON (the compiler fuzz also generates its own)

Everything but the model is real: Qwen codec, tools through execute_tool, TraceRecorder, ArtifactStore.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1] / "src"), str(HERE.parents[1])]

from agent.artifact import ArtifactStore  # noqa: E402
from agent.builtins import write_artifact_tool  # noqa: E402
from agent.cancel import CancelToken  # noqa: E402
from agent.limits import AgentLimits  # noqa: E402
from agent.protocol import FinalText, Llama3Codec, QwenCodec, ToolCall, ToolCalls  # noqa: E402
from agent.session import RunResult, Session  # noqa: E402
from agent.testkit import ScriptedEngine, ScriptedTurn  # noqa: E402
from agent.tool import Tool, ToolKind, ToolRegistry  # noqa: E402
from agent.trace import TraceRecorder  # noqa: E402
from agent.testkit import model_text  # noqa: E402

CODEC = QwenCodec()
BIG = 1_000_000
"""max_output_tokens for scripted runs: the scripted engine counts one token per character."""


def call(name: str, /, **arguments: Any) -> str:
    return model_text(CODEC, ToolCalls(calls=(ToolCall(name=name, arguments=arguments, raw=""),)))


def final(text: str) -> str:
    return model_text(CODEC, FinalText(text=text))


def tools(*, slow_s: float = 0.0) -> list[Tool]:
    def add(a: float, b: float) -> float:
        """Add two numbers."""
        if slow_s:
            time.sleep(slow_s)
        return a + b

    def note(text: str) -> str:
        """Echo a note (an action)."""
        return f"noted {text}"

    return [Tool.from_function(add), Tool.from_function(note, kind=ToolKind.ACTION), write_artifact_tool()]


def scripted_run(trace_path: Path, artifact_root: Path, turns: list[Any], *, cancel: CancelToken | None = None,
                 limits: AgentLimits | None = None, slow_s: float = 0.0, fsync: str = "terminal") -> RunResult:
    engine = ScriptedEngine(turns, CODEC)
    recorder = TraceRecorder(trace_path, fsync=fsync)
    try:
        session = Session(engine, ToolRegistry(tools(slow_s=slow_s)), trace=recorder,
                          artifacts=ArtifactStore(artifact_root), limits=limits or AgentLimits(max_output_tokens=BIG),
                          system_prompt="You are careful.")
        return session.run("add things and save a report", cancel=cancel)
    finally:
        recorder.close()


def busy_turns(n: int) -> list[Any]:
    """A long run: n rounds of add + write_artifact (sizeable content), then a final answer."""
    turns: list[Any] = []
    for i in range(n):
        turns.append(call("add", a=i, b=i + 1))
        turns.append(call("write_artifact", name=f"report-{i}.md", content=f"# Report {i}\n" + "x" * 20_000))
    turns.append(final(f"I wrote {n} reports."))
    return turns


def generate(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    (out / "traces").mkdir(parents=True)
    work = out / ".work"
    runs = {
        "completed": [call("add", a=1, b=2), call("write_artifact", name="sum.md", content="3"),
                      final("I saved sum.md with the result 3.")],
        "malformed_then_repair": ["<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}\n</tool_call>",
                                  call("nope", x=1), call("add", a="1", b=2), call("add", a=1, b=2), final("3")],
        "cancelled": [ScriptedTurn(text=final("never committed"), trip=(token := CancelToken()))],
        "limit": [call("add", a=1, b=1)] * 3,
    }
    for name, turns in runs.items():
        run_dir = work / name
        run_dir.mkdir(parents=True)
        scripted_run(run_dir / "trace.jsonl", run_dir / "artifacts", turns,
                     cancel=token if name == "cancelled" else None,
                     limits=AgentLimits(max_model_steps=2) if name == "limit" else None)
        shutil.copy(run_dir / "trace.jsonl", out / "traces" / f"{name}.jsonl")
    shutil.rmtree(work)
    families = {"qwen2.5": CODEC, "llama3.1": Llama3Codec(family="llama3.1")}
    actions = [FinalText(text="4"), ToolCalls(calls=(ToolCall(name="add", arguments={"a": 1, "b": 2}, raw=""),)),
               ToolCalls(calls=(ToolCall(name="write_artifact", arguments={"name": "a.md", "content": "<tool_call>"},
                                         raw=""),))]
    turns = {f: [model_text(c, a) for a in actions] for f, c in families.items()}
    (out / "turns.json").write_text(json.dumps(turns, indent=1, ensure_ascii=False) + "\n")
    from tests.hostile.test_hostile_schema_compiler import CURATED  # the same list the compiler tests use

    serializable = []
    for schema in CURATED:
        try:
            text = json.dumps(schema, allow_nan=False)
        except (TypeError, ValueError):
            continue
        if len(text) < 20_000:
            serializable.append(schema)
    (out / "schemas.json").write_text(json.dumps(serializable) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", nargs=2, metavar=("TRACE", "ARTIFACTS"))
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--slow-s", type=float, default=0.0)
    args = parser.parse_args()
    if args.run:
        limits = AgentLimits(max_model_steps=2 * args.turns + 1, max_tool_calls=2 * args.turns,
                             max_output_tokens=BIG)
        result = scripted_run(Path(args.run[0]), Path(args.run[1]), busy_turns(args.turns), limits=limits,
                              slow_s=args.slow_s, fsync="every_event")
        print(result.outcome.value, flush=True)
        return
    generate(HERE / "corpus")
    print(f"wrote {HERE / 'corpus'}")


if __name__ == "__main__":
    main()
