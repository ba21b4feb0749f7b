"""Decode benchmark: free vs constrained generation speed on real models, with llama.cpp GBNF and outlines beside.

Owns the claim "constrained decoding costs (almost) nothing, and on structured output it is faster than free
decoding". For each model it runs, interleaved round by round on one loaded ``Llama`` with greedy sampling and the
same prompt token ids, these configurations:

    own loop (constrained.decode)           llama-cpp-python create_completion (its sampler chain)
      own/free                                cc/free
      own/ours           (Matcher, mask)      cc/ours       (our LogitsProcessor)
      own/ours+forced    (forced batching)    cc/gbnf       (LlamaGrammar.from_json_schema)
                                              cc/outlines   (outlines 1.3.3 outlines-core backend processor)

    per model: load ─► compile (timed, cold) ─► warm-up round (cold: full prompt eval, lazy masks) ─►
               rounds × [every config once, shuffled-free fixed order] ─► medians + per-round ratios

Measurement. ``Llama.eval`` is wrapped on the instance (both paths call it): the first batch of a call is the
prompt (plus, with forced batching, forced tokens that precede the first sampled position — those are not
counted as output); **decode seconds** run from the end of that batch to the return of the call; **tokens** are
the tokens the call appended after that batch, a sampled EOS included (create_completion: completion_tokens, +1
when it stopped on EOS). tokens/s = tokens / decode seconds. Timed rounds re-evaluate only the last prompt token
(the rest of the prompt stays in the KV cache, for every config alike); prompt eval is reported from the cold
round (full prompt). The eval wrapper also sums the time inside ``llama_decode``; decode seconds minus that, per
token, is the **loop overhead** (sampling, masking, Python) — the noise-robust number for "costs nothing".
Ratios to free are computed per round (adjacent runs share the machine's load) and the median is reported.

A micro-benchmark measures what llama-cpp-python's processor hook costs per token: it hands processors a strided
float view of its ``llama_token_data`` array (n_vocab entries) and copies the result back over it.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_decode.py [--models qwen,smollm2,gemma] [--rounds 3]
[--max-tokens 64] [--no-write]`` or ``ember bench decode``. n_threads=1 (llama.cpp threads spin; on a shared
2-core machine one thread is faster and steadier).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


from _common import (
    BENCHMARKS_DIR,
    environment_lines,
    figure,
    markdown_table,
    save_figure,
    write_section,
)

__all__ = [
    "HEADING",
    "MODELS",
    "CONFIGS",
    "TOOL_CALL_SCHEMA",
    "Sample",
    "ModelReport",
    "run_model",
    "render_report",
    "target_checks",
    "main",
]

HEADING = "## Decode: free vs constrained tokens/s (tool-call JSON)"
"""The RESULTS.md section this benchmark owns."""

MODELS = {
    "qwen": "qwen2.5-coder-0.5b-instruct",
    "smollm2": "smollm2-135m-instruct",
    "gemma": "gemma3-270m",
}
"""Short name → model store name."""

CONFIGS = ("own/free", "own/ours", "own/ours+forced", "cc/free", "cc/ours", "cc/gbnf", "cc/outlines")
"""Every configuration, in the order each round runs them."""

TOOL_CALL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"enum": ["book_flight", "get_weather", "cancel_booking"]},
        "arguments": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 32},
                "date": {"type": "string", "format": "date"},
                "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
                "cabin": {"enum": ["economy", "premium_economy", "business", "first"]},
            },
            "required": ["city", "date", "passengers", "cabin"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "arguments"],
    "additionalProperties": False,
}
"""A tool-call-shaped schema: a tool name enum and typed arguments."""

_SYSTEM = (
    'You call tools by answering with one JSON object {"name": ..., "arguments": {...}} and nothing else. '
    "Tools: book_flight(city, date YYYY-MM-DD, passengers 1-9, cabin economy|premium_economy|business|first), "
    "get_weather(city, date), cancel_booking(city, date)."
)
_USER = "Book a flight to Paris on 2025-03-14 for 2 passengers in business class."


def _prompt_text(short: str) -> str:
    if short == "gemma":
        return f"<start_of_turn>user\n{_SYSTEM}\n\n{_USER}<end_of_turn>\n<start_of_turn>model\n"
    return (
        f"<|im_start|>system\n{_SYSTEM}<|im_end|>\n<|im_start|>user\n{_USER}<|im_end|>\n<|im_start|>assistant\n"
    )


# -- measurement --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One timed generation."""

    config: str
    """One of `CONFIGS`."""
    cold: bool
    """Warm-up run: full prompt eval, lazily computed masks, first use of every cache."""
    text: bytes
    """What the call produced (without a terminator)."""
    n_tokens: int
    """Tokens appended after the first batch (a sampled EOS included)."""
    n_forced: int
    """Of those, tokens appended by forced batching (own loop only)."""
    decode_s: float
    """End of the first batch → return of the call."""
    eval_s: float
    """Of ``decode_s``, time inside ``Llama.eval`` (llama_decode)."""
    n_evals: int
    """``Llama.eval`` calls after the first batch."""
    prompt_s: float
    """Call start → end of the first batch."""
    n_first_batch: int
    """Tokens in the first batch."""
    valid: bool
    """The text parses as JSON and validates against the schema."""

    @property
    def tokens_per_s(self) -> float:
        return self.n_tokens / self.decode_s if self.decode_s > 0 else float("nan")

    @property
    def overhead_ms_per_token(self) -> float:
        """Decode time outside llama_decode, per token (sampling, masking, the loop itself)."""
        return (self.decode_s - self.eval_s) / self.n_tokens * 1e3 if self.n_tokens else float("nan")


class _EvalClock:
    """Wraps ``Llama.eval`` on one instance: first-batch end time and size, later eval count and time."""

    def __init__(self, llm: Any) -> None:
        self._original = llm.eval
        llm.eval = self._eval
        self.reset()

    def reset(self) -> None:
        self.first_end: float | None = None
        self.first_len = 0
        self.eval_s = 0.0
        self.n_evals = 0

    def _eval(self, tokens: Sequence[int]) -> None:
        start = time.perf_counter()
        self._original(tokens)
        end = time.perf_counter()
        if self.first_end is None:
            self.first_end = end
            self.first_len = len(tokens)
        else:
            self.eval_s += end - start
            self.n_evals += 1


def _valid(text: bytes) -> bool:
    import jsonschema

    try:
        jsonschema.validate(json.loads(text), TOOL_CALL_SCHEMA, format_checker=jsonschema.FormatChecker())
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


class _Runner:
    """Everything loaded for one model, and one method per configuration."""

    def __init__(self, short: str, *, max_tokens: int) -> None:
        from agent.models import model_path
        from constrained.llama import LlamaModel

        self.short = short
        self.max_tokens = max_tokens
        self.model = LlamaModel.load(model_path(MODELS[short]), n_ctx=1024, n_threads=1)
        self.llm = self.model.llama
        self.vocab_size = self.model.n_vocab
        add_bos = short == "gemma"
        self.prompt = self.model.tokenize(_prompt_text(short), add_bos=add_bos, special=True)
        self.clock = _EvalClock(self.llm)
        self.compile_s: dict[str, float] = {}
        self.notes: list[str] = []
        self._compile()

    def _compile(self) -> None:
        import llama_cpp

        from constrained.grammar import compile_json_schema

        start = time.perf_counter()
        self.grammar = compile_json_schema(TOOL_CALL_SCHEMA, self.model.vocabulary)
        self.compile_s["ours"] = time.perf_counter() - start
        start = time.perf_counter()
        self.gbnf = llama_cpp.LlamaGrammar.from_json_schema(json.dumps(TOOL_CALL_SCHEMA), verbose=False)
        self.compile_s["gbnf"] = time.perf_counter() - start
        self.outlines = None
        try:
            import outlines
            from outlines.backends import get_json_schema_logits_processor

            start = time.perf_counter()
            wrapped = outlines.from_llamacpp(self.llm)
            self.outlines = get_json_schema_logits_processor("outlines_core", wrapped, json.dumps(TOOL_CALL_SCHEMA))
            self.compile_s["outlines"] = time.perf_counter() - start
        except Exception as exc:  # noqa: BLE001 - a missing / failing baseline is reported, not fatal
            self.notes.append(f"outlines unavailable: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        self.model.close()

    # -- one run -------------------------------------------------------------------------------------------------

    def run(self, config: str, *, cold: bool) -> Sample | None:
        if config == "cc/outlines" and self.outlines is None:
            return None
        if cold:
            self.model.rollback(0)
        else:
            self._keep_prompt_prefix()
        self.clock.reset()
        start = time.perf_counter()
        if config.startswith("own/"):
            text, appended, n_forced, terminated_by_eos = self._own(config, cold=cold)
        else:
            text, appended, terminated_by_eos = self._completion(config, cold=cold)
            n_forced = 0
        end = time.perf_counter()
        first_end = self.clock.first_end if self.clock.first_end is not None else end
        n_prompt_in_batch = len(self.prompt) if cold else 1
        leading = max(self.clock.first_len - n_prompt_in_batch, 0)  # forced tokens evaluated with the prompt
        return Sample(
            config=config, cold=cold, text=text, n_tokens=appended - leading, n_forced=n_forced - leading,
            decode_s=end - first_end, eval_s=self.clock.eval_s, n_evals=self.clock.n_evals,
            prompt_s=first_end - start, n_first_batch=self.clock.first_len, valid=_valid(text),
        )  # fmt: skip

    def _keep_prompt_prefix(self) -> None:
        """KV = the prompt without its last token (re-evaluated by every config alike)."""
        keep = len(self.prompt) - 1
        if self.model.n_past < keep or self.model.tokens[:keep] != self.prompt[:keep]:
            self.model.rollback(0)
            self.model.eval(self.prompt[:keep])
        self.model.rollback(keep)

    def _own(self, config: str, *, cold: bool) -> tuple[bytes, int, int, bool]:
        from constrained.decoding import FinishReason, decode

        matcher = None if config == "own/free" else self.grammar.matcher(self.max_tokens)
        prompt = self.prompt if cold else self.prompt[-1:]
        result = decode(
            self.model, prompt, matcher=matcher, max_tokens=self.max_tokens,
            forced_batching=config == "own/ours+forced",
        )  # fmt: skip
        eos = result.finish_reason == FinishReason.EOS
        return result.text, len(result.tokens), result.timings.n_forced, eos

    def _completion(self, config: str, *, cold: bool) -> tuple[bytes, int, bool]:
        import llama_cpp

        from constrained.processor import LogitsProcessor

        processors = None
        grammar = None
        if config == "cc/ours":
            processors = llama_cpp.LogitsProcessorList([LogitsProcessor(self.grammar, max_tokens=self.max_tokens)])
        elif config == "cc/outlines":
            self.outlines.reset()
            processors = llama_cpp.LogitsProcessorList([self.outlines])
        elif config == "cc/gbnf":
            grammar = self.gbnf
        result = self.llm.create_completion(
            list(self.prompt), max_tokens=self.max_tokens, temperature=0.0, repeat_penalty=1.0,
            logits_processor=processors, grammar=grammar,
        )  # fmt: skip
        choice = result["choices"][0]
        n = int(result["usage"]["completion_tokens"])
        eos = choice["finish_reason"] == "stop"
        text = choice["text"].encode("utf-8")
        return text, n + (1 if eos else 0), eos


# -- processor hook micro-benchmark -------------------------------------------------------------------------------


def processor_hook_costs(runner: _Runner, *, repeats: int = 30) -> dict[str, float]:
    """Median ms per token of llama-cpp-python's processor hook (as in ``Llama._init_sampler``'s ``apply_func``)
    with an identity processor and with ours, and of our own loop's copy + mask on a contiguous array."""
    import llama_cpp

    from constrained.processor import LogitsProcessor

    n_vocab = runner.vocab_size
    rng = np.random.default_rng(0)
    logits = rng.standard_normal(n_vocab).astype(np.float32)
    data = (llama_cpp.llama_token_data * n_vocab)()
    dtype = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)
    view = np.frombuffer(data, dtype=dtype)
    ids = np.asarray(runner.prompt, dtype=np.intc)
    # a state inside the JSON structure right after the prompt: the start of the document
    processor = LogitsProcessor(runner.grammar, max_tokens=None)  # the unbudgeted hook, as before the default budget
    processor(ids, logits.copy())  # record the prompt

    def hook(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
        view["id"] = np.arange(n_vocab)
        view["logit"] = logits
        recarray = np.recarray(shape=(n_vocab,), dtype=dtype, buf=(llama_cpp.llama_token_data * n_vocab).from_address(
            ctypes.addressof(data)))  # fmt: skip
        recarray.logit[:] = fn(ids, recarray.logit)

    def fill_only() -> None:
        view["id"] = np.arange(n_vocab)
        view["logit"] = logits

    matcher = runner.grammar.matcher()
    scratch = np.empty(n_vocab, dtype=np.float32)

    def own_copy_and_mask() -> None:
        np.copyto(scratch, logits)
        matcher.apply_mask(scratch)

    def own_copy_only() -> None:
        np.copyto(scratch, logits)

    cases = {
        "fill (baseline)": fill_only,
        "hook, identity processor": lambda: hook(lambda _ids, scores: scores),
        "hook, our LogitsProcessor": lambda: hook(processor),
        "own loop: copy": own_copy_only,
        "own loop: copy + mask": own_copy_and_mask,
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1e3)
    result = {name: statistics.median(values) for name, values in times.items()}
    base = result["fill (baseline)"]
    for name in ("hook, identity processor", "hook, our LogitsProcessor"):
        result[name] -= base
    return result


# -- the run ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ModelReport:
    """Everything measured for one model."""

    short: str
    name: str
    vocab_size: int
    n_prompt: int
    compile_s: dict[str, float]
    samples: tuple[Sample, ...]
    hook_ms: dict[str, float]
    notes: tuple[str, ...]

    def warm(self, config: str) -> list[Sample]:
        return [s for s in self.samples if s.config == config and not s.cold]

    def cold(self, config: str) -> Sample | None:
        return next((s for s in self.samples if s.config == config and s.cold), None)

    def median_tps(self, config: str) -> float:
        values = [s.tokens_per_s for s in self.warm(config)]
        return statistics.median(values) if values else float("nan")

    def ratio(self, config: str, free: str) -> float:
        """Median over rounds of tokens/s(config) / tokens/s(free) within the same round."""
        pairs = [a.tokens_per_s / b.tokens_per_s for a, b in zip(self.warm(config), self.warm(free), strict=False)]
        return statistics.median(pairs) if pairs else float("nan")

    def median_overhead_ms(self, config: str) -> float:
        values = [s.overhead_ms_per_token for s in self.warm(config)]
        return statistics.median(values) if values else float("nan")

    def median_decode_s(self, config: str) -> float:
        values = [s.decode_s for s in self.warm(config)]
        return statistics.median(values) if values else float("nan")


def run_model(short: str, *, rounds: int, max_tokens: int, progress: Callable[[str], None] = print) -> ModelReport:
    """Load one model, run the warm-up round and ``rounds`` interleaved rounds of every config."""
    runner = _Runner(short, max_tokens=max_tokens)
    progress(f"[{short}] vocab {runner.vocab_size}, prompt {len(runner.prompt)} tokens, compile "
             + ", ".join(f"{k} {v:.2f}s" for k, v in runner.compile_s.items()))  # fmt: skip
    samples: list[Sample] = []
    try:
        for round_index in range(rounds + 1):
            cold = round_index == 0
            for config in CONFIGS:
                sample = runner.run(config, cold=cold)
                if sample is None:
                    continue
                samples.append(sample)
                progress(
                    f"[{short}] {'cold' if cold else f'round {round_index}'} {config:16s} {sample.n_tokens:3d} tok "
                    f"{sample.tokens_per_s:7.2f} tok/s  overhead {sample.overhead_ms_per_token:6.3f} ms/tok  "
                    f"valid={sample.valid}  {sample.text[:60]!r}"
                )
        hook = processor_hook_costs(runner)
    finally:
        runner.close()
    return ModelReport(
        short=short, name=MODELS[short], vocab_size=runner.vocab_size, n_prompt=len(runner.prompt),
        compile_s=dict(runner.compile_s), samples=tuple(samples), hook_ms=hook, notes=tuple(runner.notes),
    )  # fmt: skip


# -- report -------------------------------------------------------------------------------------------------------

_FREE_OF = {"own": "own/free", "cc": "cc/free"}


def _fmt(value: float, digits: int = 2) -> str:
    return "—" if value != value else f"{value:.{digits}f}"


def render_report(reports: Sequence[ModelReport], *, rounds: int, max_tokens: int) -> str:
    """The RESULTS.md section body."""
    import llama_cpp

    lines = environment_lines(["llama_cpp_python", "numpy", "outlines", "outlines_core"])
    lines.append(f"- llama.cpp via llama-cpp-python {llama_cpp.__version__}; n_threads=1; greedy; max_tokens="
                 f"{max_tokens}; {rounds} interleaved rounds after one cold warm-up round; medians")  # fmt: skip
    out = ["\n".join(lines), ""]
    out.append(
        "Method: tokens/s = tokens appended after the first batch (a sampled EOS included; forced tokens that "
        "share the prompt batch not counted) / seconds from the end of that batch to the return of the call. "
        "Ratio = median over rounds of (config tokens/s ÷ free tokens/s of the same path in the same round). "
        "Overhead = decode time outside llama_decode per token (sampling, masking, Python). "
        "Timed rounds keep the prompt in the KV cache and re-evaluate its last token; prompt eval (full prompt) "
        "is from the cold round. own = our decode loop (`constrained.decode`); cc = llama-cpp-python "
        "`create_completion` (its sampler chain; processors get a strided full-vocabulary view)."
    )
    for report in reports:
        out.append(f"\n### {report.name} ({report.vocab_size:,} vocab, prompt {report.n_prompt} tokens)\n")
        rows = []
        for config in CONFIGS:
            warm = report.warm(config)
            if not warm:
                continue
            free = _FREE_OF[config.split("/")[0]]
            cold = report.cold(config)
            rows.append([
                config,
                _fmt(report.median_tps(config)),
                "1.00" if config == free else _fmt(report.ratio(config, free), 3),
                _fmt(report.median_overhead_ms(config), 3),
                _fmt(statistics.median(s.n_tokens for s in warm), 0),
                _fmt(statistics.median(s.n_forced for s in warm), 0) if config.startswith("own") else "—",
                _fmt(report.median_decode_s(config), 2),
                f"{sum(s.valid for s in report.samples if s.config == config)}/"
                f"{sum(1 for s in report.samples if s.config == config)}",
                _fmt(cold.tokens_per_s) if cold else "—",
                _fmt(cold.prompt_s * 1e3, 0) if cold else "—",
            ])  # fmt: skip
        out.append(markdown_table(
            ["config", "tok/s", "ratio to free", "overhead ms/tok", "tokens", "forced", "decode s", "valid",
             "cold tok/s", "cold prompt ms"], rows))  # fmt: skip
        out.append("")
        out.append("Compile (cold): " + ", ".join(f"{k} {v:.2f} s" for k, v in report.compile_s.items())
                   + (" (outlines: vocabulary scan + index)" if "outlines" in report.compile_s else ""))  # fmt: skip
        out.append("")
        out.append("Processor hook vs own loop, per token (median ms, micro-benchmark on this vocabulary): "
                   + ", ".join(f"{k} {v:.3f}" for k, v in report.hook_ms.items()))  # fmt: skip
        texts = {}
        for config in CONFIGS:
            warm = report.warm(config)
            if warm:
                texts.setdefault(warm[0].text, []).append(config)
        out.append("")
        out.append("Outputs (first timed round):")
        for text, configs in texts.items():
            out.append(f"- {', '.join(configs)}: `{text.decode('utf-8', 'replace')[:160]}`")
        for note in report.notes:
            out.append(f"- note: {note}")
    checks = target_checks(reports)
    out.append("\n### Targets\n")
    out.append(markdown_table(["target", "measured", "met"], [[c[0], c[1], "yes" if c[2] else "**no**"] for c in checks]))
    out.append("\n![decode tokens/s](decode.png)")
    return "\n".join(out)


def target_checks(reports: Sequence[ModelReport]) -> list[tuple[str, str, bool]]:
    """(target, measured, met) for the issue's claims."""
    checks: list[tuple[str, str, bool]] = []
    for report in reports:
        if report.short == "qwen":
            r = report.ratio("own/ours", "own/free")
            checks.append(("Qwen own loop, constrained/free ≥ 0.97", _fmt(r, 3), r >= 0.97))
            r = report.ratio("own/ours+forced", "own/free")
            checks.append(("Qwen own loop + forced batching, constrained/free ≥ 1.0", _fmt(r, 3), r >= 1.0))
        ours = max(report.median_tps("cc/ours"), report.median_tps("own/ours"))
        for rival in ("cc/gbnf", "cc/outlines"):
            theirs = report.median_tps(rival)
            if theirs == theirs:
                checks.append((f"{report.short}: ours faster per token than {rival}",
                               f"{_fmt(report.median_tps('cc/ours'))} (cc) / {_fmt(report.median_tps('own/ours'))} "
                               f"(own) vs {_fmt(theirs)} tok/s", ours > theirs))  # fmt: skip
    return checks


def plot(reports: Sequence[ModelReport], path: Path) -> Path:
    """Grouped bars: median tokens/s per config, one group per model."""
    fig, ax = figure(figsize=(10, 4.5))
    width = 0.8 / len(CONFIGS)
    for i, config in enumerate(CONFIGS):
        values = [report.median_tps(config) for report in reports]
        xs = [j + i * width for j in range(len(reports))]
        ax.bar(xs, [0 if v != v else v for v in values], width, label=config)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(reports))])
    ax.set_xticklabels([report.name for report in reports])
    ax.set_ylabel("output tokens / s (median)")
    ax.set_title("Greedy decode of a tool-call JSON, n_threads=1")
    ax.legend(fontsize=8, ncols=2)
    return save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="qwen,smollm2,gemma", help="comma-separated: " + ",".join(MODELS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md and plots alone")
    args = parser.parse_args(argv)
    shorts = [s.strip() for s in args.models.split(",") if s.strip()]
    unknown = [s for s in shorts if s not in MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    reports = [run_model(s, rounds=args.rounds, max_tokens=args.max_tokens) for s in shorts]
    body = render_report(reports, rounds=args.rounds, max_tokens=args.max_tokens)
    print(body)
    if not args.no_write:
        write_section(BENCHMARKS_DIR / "RESULTS.md", HEADING, body)
        plot(reports, BENCHMARKS_DIR / "decode.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
