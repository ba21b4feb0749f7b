"""Many tools at once: the tool-call grammar over 10 … 1,000 functions, ours beside llguidance, in one run.

Owns the measurement behind "servers expose tens to hundreds of tools": the first N functions of a fixed pool
offered at once, every one constrained (`function_pool`: the 276 distinct functions of ``../shared/corpus/bfcl-dev``,
then the function-parameter schemas of ``../shared/corpus/maskbench-dev``, then the same again under new names).
For each N, three grammars compiled cold (empty memory and disk caches) to their first mask:

- ours, codec: the Qwen turn grammar ``tool_choice="required"`` (`agent.engine.tool_call_grammar`: one DFA when it
  fits, else a pushdown grammar whose rules are the tools' arguments);
- ours, schema: ``compile_json_schema`` on the public-API envelope ``{"anyOf": [{"name": const, "arguments":
  parameters}, ...]}``;
- llguidance on the same envelope (``grammar_from_json_schema`` + ``LLMatcher`` + the first bitmask).

Then masks along one call: a seeded random walk of our schema grammar's allowed tokens (budget 160, so it closes)
picks the call; the same token ids are fed to ours (``fill_bitmask``) and to llguidance (``fill_next_token_bitmask``),
each mask timed. The codec grammar's masks are timed along its own seeded walk. Ratios in the table are ours over
llguidance in this run; the machine is shared, so only ratios are claims.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_many_tools.py [--sizes 10,50,100,276,500,1000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BENCHMARKS_DIR, environment_lines, format_seconds, markdown_table, percentiles, write_section  # noqa: E402

CASES = BENCHMARKS_DIR.parent.parent / "shared" / "corpus" / "bfcl-dev" / "cases.jsonl"
MASKBENCH = BENCHMARKS_DIR.parent.parent / "shared" / "corpus" / "maskbench-dev"
FUNCTION_FILES = ("Glaiveai2K---*.json", "BFCL_*.json")
"""The MaskBench files whose schema is one function's parameters (Glaive: the name after ``---``) or
``{name: parameters}`` objects (BFCL)."""
HEADING = "## Many tools: tool-call grammars over 10–1,000 functions (ours vs llguidance)"
BUDGET = 160
ROUNDS = 3
"""Cold compiles per grammar and size, interleaved across the three; the best is reported."""
_SCRATCH = "ember-many-tools-"
"""Name prefix of the empty disk-cache directories the cold compiles use (each removed when the next is made)."""


def distinct_functions(path: Path) -> list[dict[str, Any]]:
    """Every distinct function of the BFCL cases, first definition wins, in file order."""
    seen: dict[str, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        for tool in json.loads(line)["tools"]:
            seen.setdefault(tool["function"]["name"], tool)
    return list(seen.values())


def corpus_functions(directory: Path) -> list[dict[str, Any]]:
    """The function schemas of the MaskBench corpus (`FUNCTION_FILES`) that have a valid instance, as OpenAI tools
    named as their files name them, in file-name order."""
    tools = []
    for pattern in FUNCTION_FILES:
        for path in sorted(directory.glob(pattern)):
            case = json.loads(path.read_text())
            if not any(test["valid"] for test in case["tests"]):
                continue  # no valid instance: the schema may admit no call at all (one is unsatisfiable)
            schema = case["schema"]
            if path.name.startswith("BFCL_"):  # {name: parameters}, or an anyOf of such objects
                named = [(name, parameters) for member in schema.get("anyOf", [schema])
                         for name, parameters in member["properties"].items()]
            else:
                named = [(path.stem.split("---", 1)[1], schema)]
            tools += [{"type": "function", "function": {"name": name, "parameters": parameters}}
                      for name, parameters in named]
    return tools


def function_pool(n: int) -> tuple[list[dict[str, Any]], int]:
    """The first ``n`` tools of the pool, every name distinct: the BFCL dev functions, then the corpus's function
    schemas not already among them, then the pool again under suffixed names (``name_2``...). Also how many of the
    ``n`` are the pool's own (the rest repeat its parameters under new names)."""
    pool: dict[str, dict[str, Any]] = {}
    for tool in distinct_functions(CASES) + corpus_functions(MASKBENCH):
        pool.setdefault(tool["function"]["name"], tool)
    base = list(pool.values())
    chosen = base[:n]
    copy = 2
    while len(chosen) < n:
        chosen += [{**t, "function": {**t["function"], "name": f"{t['function']['name']}_{copy}"}}
                   for t in base[: n - len(chosen)]]
        copy += 1
    return chosen, min(n, len(base))


def envelope_schema(tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {"anyOf": [
        {"type": "object", "properties": {"name": {"const": t["function"]["name"]},
                                          "arguments": t["function"]["parameters"]},
         "required": ["name", "arguments"], "additionalProperties": False}
        for t in tools
    ]}  # fmt: skip


def _cold() -> None:
    from constrained import grammar, regex

    previous = os.environ.get("EMBER_CACHE_DIR", "")
    os.environ["EMBER_CACHE_DIR"] = tempfile.mkdtemp(prefix=_SCRATCH)  # an empty disk cache each time
    if Path(previous).name.startswith(_SCRATCH):
        shutil.rmtree(previous, ignore_errors=True)
    grammar.clear_memory_cache()
    regex.clear_caches()


def _timed_compile(build: Any) -> tuple[Any, float]:
    _cold()
    start = time.perf_counter()
    compiled = build()
    matcher = compiled.matcher()
    bits = np.empty(-(-len(compiled.vocabulary.tokens) // 32), dtype=np.uint32)
    matcher.fill_bitmask(bits)
    return compiled, time.perf_counter() - start


def _walk(grammar: Any, seed: int) -> tuple[list[int], list[float]]:
    """A seeded random call under the budget: the token ids and the time of each mask."""
    rng = random.Random(seed)
    matcher = grammar.matcher(max_tokens=BUDGET)
    bits = np.empty(-(-len(grammar.vocabulary.tokens) // 32), dtype=np.uint32)
    eos = set(grammar.vocabulary.eos_token_ids)
    tokens, times = [], []
    while not matcher.is_terminated():
        start = time.perf_counter()
        matcher.fill_bitmask(bits)
        times.append(time.perf_counter() - start)
        allowed = [t for t in matcher.allowed_token_ids().tolist() if t not in eos]
        if not allowed:
            break
        token = rng.choice(allowed)
        assert matcher.advance(token)
        tokens.append(token)
    assert matcher.is_accepting()
    return tokens, times


class _LLGuidance:
    def __init__(self, vocab_path: Path) -> None:
        import llama_cpp
        import llguidance
        import llguidance.llamacpp
        import llguidance.numpy

        self._ll = llguidance
        self._fill = llguidance.numpy.fill_next_token_bitmask
        self._llm = llama_cpp.Llama(model_path=str(vocab_path), vocab_only=True, verbose=False)
        self.tokenizer = llguidance.llamacpp.lltokenizer_from_vocab(llama_cpp.llama_model_get_vocab(self._llm.model))
        self._mask = llguidance.numpy.allocate_token_bitmask(1, self.tokenizer.vocab_size)

    def compile(self, schema: dict[str, Any]) -> tuple[Any, float]:
        start = time.perf_counter()
        matcher = self._ll.LLMatcher(self.tokenizer, self._ll.LLMatcher.grammar_from_json_schema(schema), log_level=0)
        if matcher.is_error():
            raise RuntimeError(matcher.get_error())
        self._fill(matcher, self._mask)
        return matcher, time.perf_counter() - start

    def walk(self, compiled: Any, tokens: Sequence[int]) -> tuple[bool, list[float]]:
        matcher = compiled.deep_copy()
        times = []
        for token in tokens:
            start = time.perf_counter()
            self._fill(matcher, self._mask)
            times.append(time.perf_counter() - start)
            if not matcher.consume_token(token):
                return False, times
        return True, times


def run(sizes: Sequence[int], vocab_path: Path) -> list[dict[str, Any]]:
    from agent.calls import tool_spec
    from agent.engine import tool_call_grammar
    from agent.protocol.qwen import QwenCodec
    from constrained import Vocabulary, compile_json_schema

    warnings.simplefilter("ignore")  # BFCL schemas carry annotations our compiler warns about
    vocab = Vocabulary.from_gguf(vocab_path)
    peer = _LLGuidance(vocab_path)
    compile_json_schema({"type": "string"}, vocab).matcher()  # builds the token trie (llguidance's tokenizer: above)
    codec = QwenCodec()
    rows = []
    for n in sizes:
        chosen, distinct = function_pool(n)
        specs = [tool_spec(t, constrained=True) for t in chosen]
        schema = envelope_schema(chosen)
        codec_s = schema_s = peer_s = float("inf")
        for _ in range(ROUNDS):  # interleaved, best of each: one cold compile is one noisy sample
            codec_grammar, seconds = _timed_compile(lambda: tool_call_grammar(codec, specs, "required", vocab))
            codec_s = min(codec_s, seconds)
            schema_grammar, seconds = _timed_compile(lambda: compile_json_schema(schema, vocab))
            schema_s = min(schema_s, seconds)
            peer_matcher, seconds = peer.compile(schema)
            peer_s = min(peer_s, seconds)
        _, codec_times = _walk(codec_grammar, seed=n)
        tokens, schema_times = _walk(schema_grammar, seed=n)
        peer_ok, peer_times = peer.walk(peer_matcher, tokens)
        rows.append({
            "tools": len(chosen), "codec_kind": type(codec_grammar).__name__, "codec_s": codec_s,
            "codec_masks": percentiles(codec_times), "schema_kind": type(schema_grammar).__name__,
            "schema_s": schema_s, "schema_masks": percentiles(schema_times), "peer_s": peer_s,
            "peer_masks": percentiles(peer_times), "peer_agrees": peer_ok, "call_tokens": len(tokens),
            "distinct": distinct,
        })  # fmt: skip
        print(f"{len(chosen)} tools: codec {rows[-1]['codec_kind']} {format_seconds(codec_s)}, schema "
              f"{rows[-1]['schema_kind']} {format_seconds(schema_s)}, llguidance {format_seconds(peer_s)}", flush=True)
    return rows


def report(rows: Sequence[dict[str, Any]], out: Path) -> None:
    def masks(pair: tuple[float, ...]) -> str:
        return f"{format_seconds(pair[0])} / {format_seconds(pair[1])}"

    table = markdown_table(
        ["tools (distinct)", "ours codec (kind)", "compile", "masks p50 / p99", "ours schema (kind)", "compile",
         "masks p50 / p99", "llguidance compile", "masks p50 / p99", "compile ours/llg (schema)",
         "llg accepts our call"],
        [[f"{r['tools']} ({r['distinct']})", r["codec_kind"], format_seconds(r["codec_s"]), masks(r["codec_masks"]),
          r["schema_kind"], format_seconds(r["schema_s"]), masks(r["schema_masks"]), format_seconds(r["peer_s"]),
          masks(r["peer_masks"]),
          f"{r['schema_s'] / r['peer_s']:.1f}x", "yes" if r["peer_agrees"] else "NO"] for r in rows],
    )  # fmt: skip
    body = "\n".join([
        *environment_lines(["llguidance", "llama_cpp_python"]), "",
        "The first N functions of one pool offered at once, all constrained: the 276 distinct functions of "
        "`../shared/corpus/bfcl-dev`, then the function schemas of `../shared/corpus/maskbench-dev` (its Glaive and "
        "BFCL files), then the pool again under suffixed names (*distinct*: how many are the pool's own; the rest "
        "repeat their parameters, which either engine may share between copies). Qwen2.5 vocabulary (the default "
        "model's GGUF). Compile = cold (empty memory and disk caches) to the first mask, best of "
        f"{ROUNDS} interleaved rounds. Masks along one seeded random call of the schema grammar (budget {BUDGET} "
        "tokens), the same token ids fed to llguidance; the codec grammar along its own seeded call. Method: "
        "benchmarks/bench_many_tools.py.", "",
        table,
    ])  # fmt: skip
    write_section(out, HEADING, body)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,50,100,276,500,1000", help="comma-separated tool counts")
    parser.add_argument("--vocab", type=Path, default=None, help="Qwen2.5 GGUF (default: the default model)")
    parser.add_argument("--out", type=Path, default=BENCHMARKS_DIR / "RESULTS.md", help="markdown file to update")
    args = parser.parse_args(argv)
    try:
        sizes = [int(part) for part in args.sizes.split(",")]
    except ValueError:
        parser.error(f"--sizes: not a comma-separated list of integers: {args.sizes!r}")
    from agent.models import model_path

    vocab_path = args.vocab or model_path("qwen2.5-coder-0.5b-instruct")
    report(run(sizes, vocab_path), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
