"""MCP tools for real: the four reference servers' tools offered at once, and what that costs as tools grow.

Owns the measurement behind "a run offering several servers at once compiles its tool-call grammar and answers":
the servers the tests run (``mcp-server-time`` from PyPI; ``server-memory``, ``server-everything`` and
``server-filesystem`` from tests/mcp_servers, pinned, ``npm ci``) are connected through `agent.mcp.connect`, and
their tools are offered cumulatively, server by server: 2 (time), 11 (+ memory), 24 (+ everything), 38 (+ fs).
For each set, on the default model's own vocabulary and chat template (Qwen2.5):

- the tool-call grammar ``ember run`` compiles (`agent.engine.tool_call_grammar`, every tool constrained,
  several calls per turn allowed), under ``tool_choice="auto"`` and ``"required"``, cold to its first mask: each
  compile in a fresh process with an empty disk cache (the compiler keeps several in-process caches that
  clearing the grammar caches does not reach; a second "cold" compile in one process measured 5x faster), after
  the vocabulary's token trie is built; best of `ROUNDS`;
- the prompt of "What time is it in Tokyo?" with those tools (`ChatModelEngine.prompt_tokens`: the tokens the model
  evaluates before its first output token);
- with ``--turns``, one real turn under ``auto`` on a freshly loaded model (no KV state to reuse): prompt
  evaluation and generation time, and the call the model made.

    connect(servers) ─► tools[:n] ─► specs ─► (fresh process) tool_call_grammar(codec, specs, choice, vocab)
                                                                  ─► first mask                        (timed)
                                         └─► engine.prompt_tokens(messages, specs)                       (counted)
                                         └─► engine.run_turn(messages, specs, "auto")   (--turns: timed, parsed)

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_mcp_tools.py [--turns] [--threads N]`` (also ``ember bench
mcp_tools``). Needs ``make test`` to have installed the npm servers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BENCHMARKS_DIR, environment_lines, format_seconds, markdown_table, write_section  # noqa: E402

HEADING = "## MCP tools: the four reference servers at once (2 → 38 tools)"
ROUNDS = 3
"""Cold compiles per grammar and size, interleaved; the best is reported."""
PROMPT = "What time is it in Tokyo?"
SERVERS_DIR = BENCHMARKS_DIR.parent / "tests" / "mcp_servers"
_SCRATCH = "ember-mcp-bench-"


def servers(tmp: Path) -> dict[str, Any]:
    """The four reference servers, as the tests configure them (the filesystem server confined to ``tmp``)."""
    node_bin = SERVERS_DIR / "node_modules" / ".bin"
    if not node_bin.is_dir():
        raise SystemExit(f"{node_bin} is missing: run `make test` (or `npm ci` in {SERVERS_DIR}) first")
    return {"mcpServers": {
        "time": {"command": str(Path(sys.executable).parent / "mcp-server-time")},
        "memory": {"command": str(node_bin / "mcp-server-memory"), "env": {"MEMORY_FILE_PATH": str(tmp / "m.jsonl")}},
        "everything": {"command": str(node_bin / "mcp-server-everything")},
        "fs": {"command": str(node_bin / "mcp-server-filesystem"), "args": [str(tmp)]},
    }}  # fmt: skip


def compile_once(specs_file: Path, choice: str) -> float:
    """In this (fresh) process: build the vocabulary's token trie, then compile the tool-call grammar of the specs in
    ``specs_file`` with an empty disk cache and compute its first mask; the seconds that took."""
    from agent.engine import tool_call_grammar
    from agent.models import DEFAULT_MODEL, model_path
    from agent.protocol import QwenCodec
    from agent.protocol.base import ToolSpec
    from constrained import Vocabulary, compile_json_schema

    os.environ["EMBER_CACHE_DIR"] = tempfile.mkdtemp(prefix=_SCRATCH)
    try:
        vocab = Vocabulary.from_gguf(model_path(DEFAULT_MODEL))
        compile_json_schema({"type": "string"}, vocab).matcher().allowed_token_ids()  # the token trie, built once
        specs = [ToolSpec(**spec) for spec in json.loads(specs_file.read_text(encoding="utf-8"))]
        start = time.perf_counter()
        compiled = tool_call_grammar(QwenCodec(), specs, choice, vocab, parallel_calls=True)
        bits = np.empty(-(-len(compiled.vocabulary.tokens) // 32), dtype=np.uint32)
        compiled.matcher().fill_bitmask(bits)
        return time.perf_counter() - start
    finally:
        shutil.rmtree(os.environ["EMBER_CACHE_DIR"], ignore_errors=True)


def _cold_compile(specs: Sequence[Any], choice: str, scratch: Path) -> float:
    """The best of `ROUNDS` fresh-process compiles (`compile_once`)."""
    specs_file = scratch / "specs.json"
    specs_file.write_text(json.dumps([{"name": s.name, "description": s.description, "parameters": s.parameters,
                                       "constrained": s.constrained} for s in specs]), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCHMARKS_DIR.parent / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    times = []
    for _ in range(ROUNDS):
        done = subprocess.run([sys.executable, __file__, "--compile-one", str(specs_file), choice], env=env,
                              capture_output=True, text=True, check=True)
        times.append(float(done.stdout.strip().splitlines()[-1]))
    return min(times)


def run(*, turns: bool, threads: int | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from agent.engine import ChatModelEngine
    from agent.mcp import connect
    from agent.models import DEFAULT_MODEL, model_path
    from agent.protocol import codec_for
    from constrained import LlamaModel

    path = model_path(DEFAULT_MODEL)
    model = LlamaModel.load(path, n_ctx=16384, n_threads=threads)
    engine = ChatModelEngine(model, codec_for(model))
    messages = [{"role": "user", "content": PROMPT}]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="mcp-bench-") as tmp:
        started = time.perf_counter()
        toolset = connect(servers(Path(tmp)))
        connect_s = time.perf_counter() - started
        with toolset:
            meta = {"connect_s": connect_s, "servers": [(s.name, s.implementation, s.version, s.protocol_version,
                                                         sum(t.server is s for t in toolset.tools))
                                                        for s in toolset.servers]}
            count = 0
            for server in toolset.servers:
                count += sum(t.server is server for t in toolset.tools)
                specs = [t.spec() for t in toolset.tools[:count]]
                row = {"servers": server.name, "tools": count, "auto_s": _cold_compile(specs, "auto", Path(tmp)),
                       "required_s": _cold_compile(specs, "required", Path(tmp)),
                       "prompt_tokens": len(engine.prompt_tokens(messages, specs))}
                if turns:
                    fresh = LlamaModel.load(path, n_ctx=16384, n_threads=threads)  # no KV state to reuse
                    try:
                        row.update(_turn(ChatModelEngine(fresh, codec_for(fresh)), messages, specs))
                    finally:
                        fresh.close()
                rows.append(row)
                print(f"{count} tools: auto {format_seconds(row['auto_s'])}, required "
                      f"{format_seconds(row['required_s'])}, prompt {row['prompt_tokens']} tokens"
                      + (f", turn {row['turn_s']:.1f} s: {row['call']}" if turns else ""), flush=True)
    model.close()
    return rows, meta


def _turn(engine: Any, messages: list[dict[str, Any]], specs: Sequence[Any]) -> dict[str, Any]:
    """One turn under auto on a fresh engine."""
    from agent.protocol.base import ToolCalls

    turn = engine.run_turn(messages, tools=list(specs), tool_choice="auto", max_tokens=64, parallel_calls=True)
    engine.rollback()
    action = engine.codec.parse(turn.text)
    timings = turn.timings or {}
    call = (f"{action.calls[0].name} {json.dumps(action.calls[0].arguments)}" if isinstance(action, ToolCalls)
            else type(action).__name__)
    return {"turn_s": turn.seconds, "prompt_eval_s": (timings.get("prompt_eval_ms") or 0) / 1000,
            "mask_ms": timings.get("mask_ms") or 0.0, "reused": turn.n_reused_tokens, "call": call}


def report(rows: Sequence[dict[str, Any]], meta: dict[str, Any], *, turns: bool, threads: int | None) -> str:
    headers = ["servers", "tools", "cold compile, auto", "cold compile, required", "prompt tokens"]
    body_rows = [[f"+ {r['servers']}" if i else r["servers"], r["tools"], format_seconds(r["auto_s"]),
                  format_seconds(r["required_s"]), f"{r['prompt_tokens']:,}"] for i, r in enumerate(rows)]
    if turns:
        headers += ["one cold turn (prompt eval)", "masks in the turn", "the call made"]
        for line, r in zip(body_rows, rows):
            line += [f"{r['turn_s']:.1f} s ({r['prompt_eval_s']:.1f} s)", format_seconds(r["mask_ms"] / 1000),
                     f"`{r['call']}`"]
    served = ", ".join(f"`{name}` = {impl} {version} ({n} tools, protocol {proto})"
                       for name, impl, version, proto, n in meta["servers"])
    return "\n".join([
        *environment_lines(["mcp", "llama_cpp_python"]), "",
        f"Servers: {served}; all four started and listed in {meta['connect_s']:.1f} s (concurrently, "
        "`agent.mcp.connect`). Tools offered cumulatively in that order, every one constrained; Qwen2.5 turn "
        "grammar with several calls per turn (`agent.engine.tool_call_grammar`, what `ember run --mcp` compiles) on "
        "the default model's vocabulary. Cold compile = a fresh process with an empty disk cache (the token trie "
        f"built first, as every process builds it once), to the first mask, best of {ROUNDS}. Prompt tokens: the "
        f"user message \"{PROMPT}\" with the tools, rendered by the model's template, as the engine tokenizes it."
        + (f" One cold turn: a freshly loaded model (no KV to reuse), `tool_choice=\"auto\"`, n_threads "
           f"{threads or 'default'}, max_tokens 64, greedy; the machine is shared, so times are one sample."
           if turns else ""), "",
        markdown_table(headers, body_rows), "",
        "Method: benchmarks/bench_mcp_tools.py. The 38-tool run end to end (the time server called, the answer "
        "quoting it) is `tests/agent/mcp/test_real_model.py`."])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", action="store_true", help="also run one cold model turn per tool set")
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads for --turns (0: default)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md")
    parser.add_argument("--compile-one", nargs=2, metavar=("SPECS", "CHOICE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.compile_one:  # the child process of one cold compile
        print(compile_once(Path(args.compile_one[0]), args.compile_one[1]))
        return 0
    rows, meta = run(turns=args.turns, threads=args.threads or None)
    body = report(rows, meta, turns=args.turns, threads=args.threads or None)
    print(body)
    if not args.no_write:
        write_section(BENCHMARKS_DIR / "RESULTS.md", HEADING, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
