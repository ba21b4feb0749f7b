"""Tool-count study: does offering more tools hurt selection, and what does it cost in prompt?

Owns the seed's second measurement on Ember's runtime: the 24 requests of `studies_data`, offered 1, 5, 10 and 20
tools (the first n of `studies_data.TOOL_CATALOG`: travel.search_flights first, then three deliberately confusable
ones — rail.search_trains, ferry.search_ferries, bus.search_buses — then unrelated namespaced tools). For each size:
the right-tool rate decoded freely (``tool_choice="auto"``) and with the constrained name enum
(``tool_choice="required"``, every tool ``constrained=True``), the prompt size (the engine's ``n_prompt_tokens``),
time to first token cold (KV cleared before the first request of a size) and warm (the tool prefix reused), and
seconds per turn. Refuses to interpret: docs/form-vs-truth.md does.

    for n in TOOL_COUNTS: tools = catalog[:n]
        KV cleared ─► 24 × single_turn(free) ─► 24 × single_turn(required + constrained) ─► found_call ─► name right?
    ──► table + RESULTS.md section + tools.png

Free turns are scored like the flight study: the codec's envelope call when there is one ("parses"), else the JSON
call object the model wrote in prose ("intent"). Turns stop after their first ``</tool_call>``.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_tools.py [--model NAME|PATH] [--limit N] [--counts 1,20]``
(also ``ember bench tools``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


import studies_data as sd
from _common import BENCHMARKS_DIR, environment_lines, figure, markdown_table, save_figure, write_section
from bench_flights import (
    DEFAULT_MODEL,
    DEFAULT_THREADS,
    MAX_TOKENS,
    PACKAGES,
    TurnRecord,
    load_engine,
    single_turn,
)

__all__ = ["HEADING", "ModeResult", "SizeResult", "main", "run_size"]

HEADING = "## Tool-count study: selection and prompt size (1 → 20 tools, 24 requests)"
MODES = ("free", "required")


@dataclass(frozen=True, kw_only=True)
class ModeResult:
    """One tool-set size under one decoding mode."""

    mode: str
    """``free`` (tool_choice auto, unconstrained) or ``required`` (constrained name enum + arguments)."""
    strict_right: int
    """Envelope calls naming the right tool."""
    intent_right: int
    """Calls (envelope, else JSON recovered from prose) naming the right tool."""
    chosen: dict[str, int]
    """Scored call name (``"(none)"`` when no call) → count."""
    prompt_tokens: tuple[int, ...]
    ttft_cold_s: float | None
    """Seconds to the first generated text of the first request of this size and mode. Cold for ``free`` (the KV
    is cleared before it, so the whole tool prefix is evaluated); ``required`` follows the free pass, so its
    prefix is already warm."""
    ttft_warm_s: float | None
    """Median time to first text over the other requests (tool prefix reused from the KV)."""
    turn_s: float
    """Median seconds per turn."""
    records: tuple[TurnRecord, ...]


@dataclass(frozen=True, kw_only=True)
class SizeResult:
    n_tools: int
    names: tuple[str, ...]
    modes: tuple[ModeResult, ...]

    def mode(self, name: str) -> ModeResult:
        return next(m for m in self.modes if m.mode == name)


def _specs(tools: Sequence[dict[str, Any]], *, constrained: bool) -> list[Any]:
    from agent.calls import tool_spec

    return [tool_spec(t, constrained=constrained) for t in tools]


def run_size(engine: Any, n_tools: int, requests: Sequence[sd.Request], *, max_tokens: int = MAX_TOKENS,
             progress: Callable[[str], None] | None = None) -> SizeResult:
    """Both modes for the first ``n_tools`` tools of the catalog; the KV is cleared first (cold prefix)."""
    tools = sd.tool_catalog()[:n_tools]
    engine.model.rollback(0)  # cold: the first request of this size evaluates the whole tool prefix
    modes = []
    for mode in MODES:
        specs = _specs(tools, constrained=mode == "required")
        choice = "required" if mode == "required" else "auto"
        records, chosen = [], {}
        strict_right = intent_right = 0
        for i, request in enumerate(requests, 1):
            messages = [{"role": "system", "content": sd.BASE_SYSTEM_PROMPT},
                        {"role": "user", "content": request.text}]
            rec = single_turn(engine, messages, specs, tool_choice=choice, max_tokens=max_tokens)
            records.append(rec)
            call = sd.found_call(rec.strict_calls, rec.text)
            name = call.name if call is not None else "(none)"
            chosen[name] = chosen.get(name, 0) + 1
            strict_right += bool(call is not None and call.strict and name == sd.TARGET_TOOL)
            intent_right += name == sd.TARGET_TOOL
            if progress is not None:
                progress(f"[{n_tools} tools {mode} {i}/{len(requests)}] {request.id} {rec.seconds:5.1f}s "
                         f"prompt {rec.n_prompt_tokens} (reused {rec.n_reused_tokens}) "
                         f"{'' if call is None or call.strict else '~'}{name}")
        ttfts = [r.ttft_s for r in records[1:] if r.ttft_s is not None]
        modes.append(ModeResult(
            mode=mode, strict_right=strict_right, intent_right=intent_right, chosen=dict(sorted(chosen.items())),
            prompt_tokens=tuple(r.n_prompt_tokens for r in records), ttft_cold_s=records[0].ttft_s,
            ttft_warm_s=statistics.median(ttfts) if ttfts else None,
            turn_s=statistics.median(r.seconds for r in records), records=tuple(records)))
    return SizeResult(n_tools=n_tools, names=tuple(t["name"] for t in tools), modes=tuple(modes))


# -- report -------------------------------------------------------------------------------------------------------

def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def table(results: Sequence[SizeResult]) -> str:
    headers = ["tools", "right tool, free: parses / intent", "right tool, constrained required",
               "prompt tokens / request", "TTFT cold (s)", "TTFT warm (s)", "s/turn free", "s/turn required",
               "wrong picks (free / required)"]
    rows = []
    for r in results:
        free, req = r.mode("free"), r.mode("required")
        n = len(free.records)
        wrong = [", ".join(f"{k} ×{v}" for k, v in m.chosen.items() if k != sd.TARGET_TOOL) or "—"
                 for m in (free, req)]
        tokens = sorted(set(free.prompt_tokens))
        rows.append([r.n_tools, f"{free.strict_right}/{n} / {free.intent_right}/{n}", f"{req.strict_right}/{n}",
                     f"{statistics.mean(free.prompt_tokens):.0f} ({tokens[0]}–{tokens[-1]})",
                     _s(free.ttft_cold_s), _s(free.ttft_warm_s), _s(free.turn_s), _s(req.turn_s),
                     f"{wrong[0]} / {wrong[1]}"])
    return markdown_table(headers, rows)


def plot(results: Sequence[SizeResult], path: Path) -> Path:
    fig, ax = figure(figsize=(7.5, 4.2))
    xs = [r.n_tools for r in results]
    n = max(len(r.mode("free").records) for r in results)
    ax.plot(xs, [r.mode("free").intent_right for r in results], "o-", label="right tool, free (intent)")
    ax.plot(xs, [r.mode("free").strict_right for r in results], "s:", label="right tool, free (envelope)")
    ax.plot(xs, [r.mode("required").strict_right for r in results], "^-", label="right tool, constrained required")
    ax.set_xlabel("tools offered")
    ax.set_ylabel(f"requests (of {n})")
    ax.set_ylim(-0.5, n + 0.5)
    ax.set_xticks(xs)
    ax2 = ax.twinx()
    ax2.plot(xs, [statistics.mean(r.mode("free").prompt_tokens) for r in results], "k--", alpha=0.6,
             label="prompt tokens")
    ax2.set_ylabel("prompt tokens per request")
    ax2.set_ylim(0, None)
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=7, loc="center right")
    ax.set_title("Tool count: selection vs prompt size (greedy)")
    return save_figure(fig, path)


def report(results: Sequence[SizeResult], *, model_label: str, model_sha: str, codec_id: str, n_requests: int,
           plot_name: str, wall_s: float, max_tokens: int, threads: int) -> str:
    env = "\n".join(environment_lines(PACKAGES))
    notes = [
        f"- Model: `{model_label}` (sha256 `{model_sha[:16]}…`), codec `{codec_id}`, greedy, max_tokens "
        f"{max_tokens}, n_threads {threads or 'default'}; {n_requests} requests per cell; whole run {wall_s:.0f} s.",
        f"- Tool sets: the first n of `{', '.join(sd.TOOL_CATALOG)}` (flight tool first, rich schema; the three "
        "confusable tools from n = 5).",
        "- *parses*: the codec parsed a `<tool_call>` naming travel.search_flights; *intent*: the first call "
        "object the model wrote, envelope or JSON in prose (e.g. a ```json block), names it. Constrained required: "
        "the mask forces the envelope, a name from the offered set and each tool's argument schema.",
        "- Prompt tokens: the engine's `n_prompt_tokens` (system + tool definitions + user). TTFT cold: first request "
        "of a size with the KV cleared (the whole tool prefix evaluated); warm: median of the rest (prefix reused). "
        "Turns stop after their first `</tool_call>`.",
        f"- Plot: `benchmarks/{plot_name}`. Interpretation: `docs/form-vs-truth.md`.",
    ]
    return "\n".join([env, *notes, "", table(results)])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="store name or GGUF path")
    parser.add_argument("--limit", type=int, default=None, help="first N requests only (quick run)")
    parser.add_argument("--counts", default=",".join(map(str, sd.TOOL_COUNTS)), help="tool-set sizes, e.g. 1,20")
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                        help="llama.cpp threads (0: llama-cpp-python's default; see bench_flights.DEFAULT_THREADS)")
    parser.add_argument("--records", type=Path, default=None, help="write per-request records (JSON) here")
    parser.add_argument("--results", type=Path, default=BENCHMARKS_DIR / "RESULTS.md")
    parser.add_argument("--no-write", action="store_true", help="print the table only; leave RESULTS.md and the plot")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.counts.split(",") if c.strip()]
    if any(not 1 <= c <= len(sd.TOOL_CATALOG) for c in counts):
        parser.error(f"tool counts must be within 1..{len(sd.TOOL_CATALOG)}")
    requests = sd.REQUESTS[: args.limit] if args.limit else sd.REQUESTS

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    started = time.perf_counter()
    engine = load_engine(args.model, threads=args.threads, progress=progress)
    results = [run_size(engine, n, requests, max_tokens=args.max_tokens, progress=progress) for n in counts]
    wall = time.perf_counter() - started

    print(table(results))
    if args.records:
        args.records.write_text(json.dumps([asdict(r) for r in results], indent=1, ensure_ascii=False, default=str),
                                encoding="utf-8")
    if not args.no_write:
        plot_name = "tools.png"
        plot(results, BENCHMARKS_DIR / plot_name)
        body = report(results, model_label=args.model, model_sha=engine.model.sha256, codec_id=engine.codec.id,
                      n_requests=len(requests), plot_name=plot_name, wall_s=wall, max_tokens=args.max_tokens,
                      threads=args.threads)
        write_section(args.results, HEADING, body)
        print(f"wrote {args.results} and {BENCHMARKS_DIR / plot_name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
