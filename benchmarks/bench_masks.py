"""MaskBench-style corpus benchmark: our engine beside outlines-core and llguidance, in the same run.

Owns the method of JSONSchemaBench / llguidance's MaskBench applied to the ``maskbench-dev`` corpus (real-world
schemas, each with valid and invalid instances) over the Llama-3 vocabulary. For every schema and engine: compile
time (ours cold, with empty in-memory and disk caches, then warm twice: again in-process and from a fresh disk-cache
load); then for every instance, ``json.dumps(data, ensure_ascii=False)`` tokenized by llama.cpp's Llama-3 tokenizer
is walked token by token, timing the mask at each step before advancing. Valid instances must be accepted all the
way and end accepting; invalid ones should be rejected somewhere. Refuses to let any engine hang the run: each
engine runs in its own worker process, killed and restarted when a schema exceeds ``--timeout``.

    corpus/*.json ──► tokenize instances (llama.cpp) ──► Case ─┐
                                                                ├─► lane thread ──pipe──► worker process (one engine)
                                   --jobs lanes, engines split ─┘        ▲  timeout ⇒ kill, restart   │ compile, walk
                                                                        └──────── outcome dict ◄──────┘
    outcomes ──► EngineSummary per engine ──► table (stdout) + RESULTS.md section + masks.png

Two lanes are ours: "ours" compiles with the defaults (``property_order="schema"``: the language generation
uses, one spelling per object) and "ours-any" with ``property_order="any"`` (an object's members in any order: the
acceptance of valid JSON, always a pushdown grammar).

Per-step mask calls: ours ``Matcher.fill_bitmask`` (the allowed set as a token bitmask in llguidance's layout,
computed lazily per state and cached);
outlines-core ``Guide.write_mask_into`` (bitmask from its precomputed index); llguidance
``llguidance.numpy.fill_next_token_bitmask`` (bitmask, lazy Earley + token trie). Whitespace: ours "flexible"
(nothing, a space, or a newline + ≤ 20 spaces per slot), llguidance ``whitespace_flexible``, outlines-core its
default ``[ ]?``; the instances use ``json.dumps`` separators, which all three admit.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_masks.py [--limit N] [--engines ours,outlines,llguidance]``.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import enum
import json
import multiprocessing
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


from _common import (
    BENCHMARKS_DIR,
    REPO_ROOT,
    environment_lines,
    figure,
    format_seconds,
    markdown_table,
    package_version,
    percentiles,
    save_figure,
    write_section,
)

__all__ = [
    "ENGINES",
    "HEADING",
    "DEFAULT_CORPUS",
    "Case",
    "Instance",
    "OutcomeKind",
    "SchemaOutcome",
    "EngineSummary",
    "MaskBenchReport",
    "load_cases",
    "run_benchmark",
    "summarize",
    "render_report",
    "target_checks",
    "plot_masks",
    "main",
]

ENGINES = ("ours", "ours-any", "outlines", "llguidance")
"""Engine names accepted by ``--engines``, in report order."""
HEADING = "## Masks: MaskBench dev corpus (Llama-3 vocab)"
"""The RESULTS.md section this benchmark owns."""
DEFAULT_CORPUS = REPO_ROOT.parent / "shared" / "corpus" / "maskbench-dev"
"""The 400-schema dev corpus, next to the repository."""
_FALLBACK_VOCAB = Path("/tmp/ember/models/llama3-vocab.gguf")
_SETUP_TIMEOUT_S = 600.0
_LANE_WEIGHT = {"outlines": 3, "ours": 1, "ours-any": 1, "llguidance": 1}
"""Rough relative run time per engine, to balance lanes (outlines-core's eager index dominates)."""


# -- corpus ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Instance:
    """One test document of a schema, already tokenized."""

    valid: bool
    """Whether the corpus says the document satisfies the schema."""
    token_ids: tuple[int, ...]
    """Llama-3 tokens of ``json.dumps(data, ensure_ascii=False)`` (no BOS, no special parsing)."""


@dataclass(frozen=True, kw_only=True)
class Case:
    """One corpus schema with its tokenized instances."""

    name: str
    """File stem, e.g. ``"Github_easy---o21060"``."""
    schema: Any
    """The JSON Schema (usually a dict; boolean schemas pass through)."""
    instances: tuple[Instance, ...]
    """Tokenizable test documents, corpus order."""
    n_untokenizable: int = 0
    """Instances skipped because their text is not valid UTF-8 (lone surrogates)."""


def load_cases(
    corpus: Path, vocab_path: Path, *, limit: int | None = None, names: Sequence[str] | None = None
) -> list[Case]:
    """Read ``corpus/*.json`` (sorted; the first ``limit``, or only ``names``) and tokenize every instance."""
    import llama_cpp

    files = sorted(Path(corpus).glob("*.json"))
    if names is not None:
        wanted = set(names)
        files = [f for f in files if f.stem in wanted]
    if limit is not None:
        files = files[:limit]
    if not files:
        raise FileNotFoundError(f"no *.json schemas under {corpus}")
    tokenizer = llama_cpp.Llama(model_path=str(vocab_path), vocab_only=True, verbose=False)
    cases = []
    for path in files:
        entry = json.loads(path.read_text(encoding="utf-8"))
        instances, skipped = [], 0
        for test in entry.get("tests", []):
            try:
                text = json.dumps(test["data"], ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:
                skipped += 1
                continue
            ids = tokenizer.tokenize(text, add_bos=False, special=False)
            instances.append(Instance(valid=bool(test["valid"]), token_ids=tuple(int(i) for i in ids)))
        cases.append(Case(name=path.stem, schema=entry["schema"], instances=tuple(instances), n_untokenizable=skipped))
    return cases


# -- outcomes -------------------------------------------------------------------------------------------------------


class OutcomeKind(enum.StrEnum):
    """How one engine fared on one schema."""

    COMPILED = "compiled"
    COMPILE_ERROR = "compile_error"
    TIMEOUT = "timeout"
    CRASHED = "crashed"


@dataclass(frozen=True, kw_only=True)
class SchemaOutcome:
    """One engine × one schema."""

    engine: str
    """Engine name (see `ENGINES`)."""
    case: str
    """Schema name."""
    kind: OutcomeKind
    """Compiled, or why not."""
    error: str = ""
    """Short error label (error type / keyword) when not compiled."""
    detail: str = ""
    """The error's own first line (path and reason) when not compiled."""
    compile_s: float | None = None
    """Cold compile wall time (ours: empty memory and disk caches)."""
    first_mask_s: float | None = None
    """Time to first mask: the cold compile, then a cursor and its first mask (what a request waits for before its
    first token; laziness in the compile cannot hide work from it). None without instances."""
    warm_memory_s: float | None = None
    """Ours only: second compile of the same schema in the same process (in-memory cache)."""
    warm_disk_s: float | None = None
    """Ours only: compile after clearing memory caches, served from the disk cache written by the cold run."""
    valid_accepted: int = 0
    """Valid instances accepted token by token and accepting at the end."""
    valid_rejected: int = 0
    """Valid instances refused somewhere (a soundness failure of the engine)."""
    invalid_rejected: int = 0
    """Invalid instances refused somewhere (or not accepting at the end)."""
    invalid_accepted: int = 0
    """Invalid instances accepted (the engine over-approximates the schema)."""
    mask_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Wall time of every mask computation on this schema, nanoseconds."""


@dataclass(frozen=True, kw_only=True)
class EngineSummary:
    """One engine over the whole corpus."""

    engine: str
    """Engine name."""
    version: str
    """Package version (ours: the ``ember`` distribution, or "src")."""
    n_schemas: int
    """Schemas attempted."""
    compiled: int
    """Schemas compiled."""
    errors: dict[str, int]
    """Error label → schema count (compile errors, timeouts, crashes)."""
    valid_accepted: int
    """Valid instances accepted, over compiled schemas."""
    valid_total: int
    """Valid instances of compiled schemas."""
    invalid_rejected: int
    """Invalid instances rejected, over compiled schemas."""
    invalid_accepted: int
    """Invalid instances accepted, over compiled schemas."""
    compile_p50_s: float
    """Median compile time over compiled schemas."""
    compile_p99_s: float
    """99th-percentile compile time over compiled schemas."""
    first_mask_p50_s: float
    """Median time to first mask (compile + cursor + first mask)."""
    first_mask_p99_s: float
    """99th-percentile time to first mask."""
    mask_p50_s: float
    """Median per-token mask time over every token of every instance."""
    mask_p99_s: float
    """99th-percentile per-token mask time."""
    n_masks: int
    """Mask computations timed."""
    valid_rejected_cases: tuple[str, ...] = ()
    """Schemas where a valid instance was refused (soundness failures to investigate)."""
    warm_memory_p50_s: float | None = None
    """Ours: median in-process warm compile."""
    warm_disk_p50_s: float | None = None
    """Ours: median warm compile from the disk cache."""
    warm_disk_ratio_p50: float | None = None
    """Ours: median over schemas of cold / warm-from-disk compile time."""
    warm_memory_ratio_p50: float | None = None
    """Ours: median over schemas of cold / warm-in-process compile time."""

    @property
    def n_errors(self) -> int:
        """Schemas not compiled, for any reason."""
        return sum(self.errors.values())


@dataclass(frozen=True, kw_only=True)
class MaskBenchReport:
    """Everything one run measured."""

    engines: tuple[str, ...]
    """Engines run, report order."""
    cases: tuple[str, ...]
    """Schemas attempted, corpus order."""
    outcomes: dict[str, tuple[SchemaOutcome, ...]]
    """Engine → one outcome per case, corpus order."""
    summaries: dict[str, EngineSummary]
    """Engine → aggregate."""
    timeout_s: float
    """Per-schema, per-engine limit."""
    jobs: int
    """Worker processes run at once (one engine each)."""
    clock: str
    """"wall" (perf_counter) or "cpu" (thread CPU time) for compile and mask timings."""
    load_average: tuple[float, float]
    """1-minute load average before and after the run (other work on the machine inflates wall times)."""
    wall_s: float
    """Whole run, seconds."""
    n_instances: int
    """Tokenized instances across the corpus."""
    n_untokenizable: int
    """Instances skipped (not UTF-8 encodable)."""
    valid_by_case: dict[str, int]
    """Case → its valid instances (what a refused schema costs: none of them is accepted)."""


# -- engines (run inside worker processes) ---------------------------------------------------------------------------


_CLOCKS: dict[str, Callable[[], int]] = {"wall": time.perf_counter_ns, "cpu": time.thread_time_ns}
"""``--clock``: wall time (default; right on a quiet machine) or this thread's CPU time (robust to a loaded one)."""
_clock: Callable[[], int] = time.perf_counter_ns
"""The clock of this worker process, set once at worker start."""


class _Engine:
    """One engine's compile and walk, over the Llama-3 vocabulary; lives in a worker process."""

    name = ""
    setup_ns = 0
    """What the last `walk` spent creating its cursor (part of the time to first mask)."""

    def prepare(self) -> None:
        """Untimed reset before each schema's cold compile (ours: empty caches)."""

    def compile(self, schema: Any) -> Any:
        raise NotImplementedError

    def walk(self, compiled: Any, token_ids: Sequence[int]) -> tuple[bool, list[int]]:
        """Accepted?, and the ns of each mask computed on the way."""
        raise NotImplementedError

    def warm(self, compiled: Any, schema: Any) -> dict[str, float]:
        """Extra timings after the walks (ours: warm compiles)."""
        return {}

    def error_label(self, error: BaseException) -> str:
        return _short(f"{type(error).__name__}: {error}")


class _Ours(_Engine):
    name = "ours"
    property_order = "schema"

    def __init__(self, vocab_path: Path, scratch: Path) -> None:
        from constrained import grammar as grammar_module
        from constrained import regex as regex_module
        from constrained.vocabulary import Vocabulary

        self._grammar = grammar_module
        self._regex = regex_module
        self._scratch = scratch
        self._serial = 0
        self.vocab = Vocabulary.from_gguf(vocab_path)
        self._fresh_cache()
        self._grammar.compile_json_schema({"type": "string"}, self.vocab, whitespace="flexible")  # builds the trie

    def _fresh_cache(self) -> None:
        """Point the disk cache at a new empty directory and forget everything in memory."""
        self._serial += 1
        directory = self._scratch / f"cache-{os.getpid()}-{self._serial}"
        os.environ["EMBER_CACHE_DIR"] = str(directory)
        self._forget_compiled()

    def _forget_compiled(self) -> None:
        """Empty every in-memory cache, the parser's too: nothing carries over from other schemas or runs."""
        self._grammar.clear_memory_cache()
        self._regex.clear_caches()

    def prepare(self) -> None:
        previous = os.environ.get("EMBER_CACHE_DIR")
        self._fresh_cache()
        if previous:
            shutil.rmtree(previous, ignore_errors=True)

    def compile(self, schema: Any) -> Any:
        # MaskBench grades JSON Schema's semantics, where an unknown format validates anything: "annotation" reads
        # it so (the engine's default refuses a format it cannot enforce, docs/schema-coverage.md).
        return self._grammar.compile_json_schema(schema, self.vocab, whitespace="flexible",
                                                 property_order=self.property_order,
                                                 unknown_keywords="annotation")  # fmt: skip

    def walk(self, compiled: Any, token_ids: Sequence[int]) -> tuple[bool, list[int]]:
        clock = _clock
        start = clock()
        matcher = compiled.matcher()
        self.setup_ns = clock() - start
        bitmask = np.empty(-(-len(self.vocab) // 32), dtype=np.uint32)
        times = []
        for token in token_ids:
            start = clock()
            matcher.fill_bitmask(bitmask)
            times.append(clock() - start)
            if not matcher.advance(token):
                return False, times
        return matcher.is_accepting(), times

    def warm(self, compiled: Any, schema: Any) -> dict[str, float]:
        compiled.save()  # what a process writes back (also at exit): DFA + the masks this run computed
        start = _clock()
        self.compile(schema)
        warm_memory = (_clock() - start) * 1e-9
        self._forget_compiled()
        start = _clock()
        self.compile(schema)
        warm_disk = (_clock() - start) * 1e-9
        return {"warm_memory_s": warm_memory, "warm_disk_s": warm_disk}

    def error_label(self, error: BaseException) -> str:
        from constrained import errors

        if isinstance(error, errors.UnsupportedSchemaError):
            return f"unsupported: {error.keyword}"
        if isinstance(error, errors.GrammarTooLargeError):
            return f"too large: {error.what}"
        if isinstance(error, errors.InvalidSchemaError):
            return "invalid schema"
        if isinstance(error, errors.EmptyLanguageError):
            return "empty language"
        if isinstance(error, errors.IncompatibleVocabularyError):
            return "incompatible vocabulary"
        if isinstance(error, errors.RegexSyntaxError):
            return "regex syntax"
        return _short(f"{type(error).__name__}: {error}")


class _OursAnyOrder(_Ours):
    name = "ours-any"
    property_order = "any"


def _llama_vocab(vocab_path: Path) -> tuple[Any, Any]:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(vocab_path), vocab_only=True, verbose=False)
    return llm, llama_cpp.llama_model_get_vocab(llm.model)


class _Outlines(_Engine):
    name = "outlines"

    def __init__(self, vocab_path: Path, scratch: Path) -> None:
        import llama_cpp
        import outlines_core

        self._core = outlines_core
        from outlines_core.json_schema import build_regex_from_schema

        self._build_regex = build_regex_from_schema
        self._llm, vocab = _llama_vocab(vocab_path)
        n_tokens = llama_cpp.llama_vocab_n_tokens(vocab)
        buffer = ctypes.create_string_buffer(4096)
        normal = llama_cpp.LLAMA_TOKEN_ATTR_NORMAL | llama_cpp.LLAMA_TOKEN_ATTR_BYTE
        by_bytes: dict[bytes, list[int]] = {}
        for token in range(n_tokens):
            if not llama_cpp.llama_token_get_attr(vocab, token) & normal:
                continue  # control / special tokens never appear inside JSON text
            n = llama_cpp.llama_token_to_piece(vocab, token, buffer, len(buffer), 0, True)
            by_bytes.setdefault(bytes(buffer[:n]), []).append(token)
        self.vocabulary = outlines_core.Vocabulary(int(llama_cpp.llama_vocab_eos(vocab)), by_bytes)
        self._mask = np.zeros((n_tokens + 31) // 32, dtype=np.int32)

    def compile(self, schema: Any) -> Any:
        regex = self._build_regex(json.dumps(schema))
        return self._core.Index(regex, self.vocabulary)

    def walk(self, compiled: Any, token_ids: Sequence[int]) -> tuple[bool, list[int]]:
        clock = _clock
        start = clock()
        guide = self._core.Guide(compiled)
        self.setup_ns = clock() - start
        mask = self._mask
        pointer, size = mask.ctypes.data, mask.size
        times = []
        for token in token_ids:
            start = clock()
            guide.write_mask_into(pointer, size, 4)
            times.append(clock() - start)
            if not (int(mask[token >> 5]) >> (token & 31)) & 1:
                return False, times
            guide.advance(token, False)
        return bool(compiled.is_final_state(guide.get_state())), times


class _LLGuidance(_Engine):
    name = "llguidance"

    def __init__(self, vocab_path: Path, scratch: Path) -> None:
        import llguidance
        import llguidance.llamacpp
        import llguidance.numpy

        self._ll = llguidance
        self._fill = llguidance.numpy.fill_next_token_bitmask
        self._llm, vocab = _llama_vocab(vocab_path)
        self.tokenizer = llguidance.llamacpp.lltokenizer_from_vocab(vocab)
        self._mask = llguidance.numpy.allocate_token_bitmask(1, self.tokenizer.vocab_size)
        self.compile({"type": "string"})

    def compile(self, schema: Any) -> Any:
        grammar = self._ll.LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": True})
        matcher = self._ll.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise _PeerCompileError(matcher.get_error())
        return matcher

    def walk(self, compiled: Any, token_ids: Sequence[int]) -> tuple[bool, list[int]]:
        clock = _clock
        start = clock()
        matcher = compiled.deep_copy()
        self.setup_ns = clock() - start
        mask, fill = self._mask, self._fill
        times = []
        for token in token_ids:
            start = clock()
            fill(matcher, mask)
            times.append(clock() - start)
            if not (int(mask[0, token >> 5]) >> (token & 31)) & 1:
                return False, times
            if not matcher.consume_token(token):
                return False, times
        return bool(matcher.is_accepting()) and not matcher.is_error(), times

    def error_label(self, error: BaseException) -> str:
        return _short(str(error) if isinstance(error, _PeerCompileError) else f"{type(error).__name__}: {error}")


class _PeerCompileError(Exception):
    """A peer reported a compile failure as a value (llguidance's error state)."""


_ENGINE_CLASSES: dict[str, Callable[[Path, Path], _Engine]] = {
    "ours": _Ours,
    "ours-any": _OursAnyOrder,
    "outlines": _Outlines,
    "llguidance": _LLGuidance,
}


def _short(message: str, limit: int = 70) -> str:
    """First line of an error message, cut to ``limit`` characters, as a label to count errors by."""
    line = message.strip().splitlines()[0] if message.strip() else "error"
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _run_case(engine: _Engine, case: Case) -> dict[str, Any]:
    """Compile and walk one case; a plain dict (safe to pickle across processes)."""
    engine.prepare()
    start = _clock()
    try:
        compiled = engine.compile(case.schema)
    except Exception as error:  # noqa: BLE001 - every compile failure is a counted outcome
        return {"kind": OutcomeKind.COMPILE_ERROR.value, "error": engine.error_label(error),
                "detail": _short(str(error), 240)}
    compile_s = (_clock() - start) * 1e-9
    counts = collections.Counter()
    times: list[int] = []
    first_mask_s = None
    for instance in case.instances:
        engine.setup_ns = 0
        try:
            accepted, mask_ns = engine.walk(compiled, instance.token_ids)
        except Exception:  # noqa: BLE001 - a peer that raises mid-walk refused the document
            accepted, mask_ns = False, []
        if first_mask_s is None and mask_ns:  # the first instance's cursor and first mask, right after the compile
            first_mask_s = (engine.setup_ns + mask_ns[0]) * 1e-9
        times.extend(mask_ns)
        counts[("valid" if instance.valid else "invalid", accepted)] += 1
    result = {
        "kind": OutcomeKind.COMPILED.value,
        "compile_s": compile_s,
        "first_mask_s": compile_s + first_mask_s if first_mask_s is not None else None,
        "valid_accepted": counts[("valid", True)],
        "valid_rejected": counts[("valid", False)],
        "invalid_rejected": counts[("invalid", False)],
        "invalid_accepted": counts[("invalid", True)],
        "mask_ns": np.asarray(times, dtype=np.int64),
    }
    result.update(engine.warm(compiled, case.schema))
    return result


def _worker(engine_name: str, vocab_path: str, scratch: str, clock: str, connection: Any) -> None:
    """Worker process body: set the engine up, then answer one case per message until told to stop."""
    global _clock
    _clock = _CLOCKS[clock]
    try:
        engine = _ENGINE_CLASSES[engine_name](Path(vocab_path), Path(scratch))
    except Exception as error:  # noqa: BLE001 - reported to the lane, which fails loudly
        connection.send({"setup_error": f"{type(error).__name__}: {error}"})
        return
    connection.send({"ready": True})
    while True:
        case = connection.recv()
        if case is None:
            break
        connection.send(_run_case(engine, case))
    os.environ["EMBER_CACHE_DIR"] = "off"  # nothing to write back at exit


# -- coordination (main process) ------------------------------------------------------------------------------------


class _WorkerHandle:
    """A started worker process and its pipe."""

    def __init__(self, engine: str, vocab_path: Path, scratch: Path, clock: str) -> None:
        context = multiprocessing.get_context("spawn")
        self.connection, child = context.Pipe()
        self.process = context.Process(
            target=_worker, args=(engine, str(vocab_path), str(scratch), clock, child), name=f"bench-{engine}",
            daemon=True,
        )  # fmt: skip
        self.process.start()
        child.close()
        if not self.connection.poll(_SETUP_TIMEOUT_S):
            self.kill()
            raise RuntimeError(f"{engine} worker did not start within {_SETUP_TIMEOUT_S:.0f} s")
        try:
            message = self.connection.recv()
        except EOFError:
            self.kill()
            raise RuntimeError(f"{engine} worker died during setup (exit code {self.process.exitcode})") from None
        if "setup_error" in message:
            self.kill()
            raise RuntimeError(f"{engine} worker setup failed: {message['setup_error']}")

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(10)
        self.connection.close()

    def stop(self) -> None:
        try:
            self.connection.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.process.join(30)
        self.kill()


def _drive(
    engine: str,
    cases: Sequence[Case],
    *,
    vocab_path: Path,
    scratch: Path,
    timeout_s: float,
    clock: str,
    progress: Callable[[str], None] | None,
) -> tuple[SchemaOutcome, ...]:
    """Run every case through one engine's worker, restarting it after a timeout or crash."""
    outcomes = []
    worker: _WorkerHandle | None = None
    try:
        for number, case in enumerate(cases, 1):
            if worker is None:
                worker = _WorkerHandle(engine, vocab_path, scratch, clock)
            worker.connection.send(case)
            message: dict[str, Any] | None = None
            kind = OutcomeKind.TIMEOUT
            if worker.connection.poll(timeout_s):
                try:
                    message = worker.connection.recv()
                except (EOFError, OSError):
                    kind = OutcomeKind.CRASHED
            if message is None:
                label = f"timeout (> {timeout_s:g} s)" if kind is OutcomeKind.TIMEOUT else "worker crashed"
                worker.kill()
                worker = None
                outcome = SchemaOutcome(engine=engine, case=case.name, kind=kind, error=label)
            else:
                outcome = SchemaOutcome(engine=engine, case=case.name, **_outcome_fields(message))
            outcomes.append(outcome)
            if progress is not None:
                progress(f"[{engine} {number}/{len(cases)}] {case.name}: {_describe(outcome)}")
    finally:
        if worker is not None:
            worker.stop()
    return tuple(outcomes)


def _outcome_fields(message: dict[str, Any]) -> dict[str, Any]:
    fields = dict(message)
    fields["kind"] = OutcomeKind(fields["kind"])
    return fields


def _describe(outcome: SchemaOutcome) -> str:
    if outcome.kind is not OutcomeKind.COMPILED:
        return f"{outcome.kind.value}: {outcome.error}"
    assert outcome.compile_s is not None
    p50 = percentiles(outcome.mask_ns, (50,))[0] * 1e-9
    text = (
        f"compile {format_seconds(outcome.compile_s)}, valid {outcome.valid_accepted}/"
        f"{outcome.valid_accepted + outcome.valid_rejected}, invalid rejected {outcome.invalid_rejected}/"
        f"{outcome.invalid_rejected + outcome.invalid_accepted}, mask p50 {format_seconds(p50)}"
    )
    if outcome.warm_disk_s is not None:
        text += f", warm disk {format_seconds(outcome.warm_disk_s)}"
    return text


def _lanes(engines: Sequence[str], jobs: int) -> list[list[str]]:
    """Split engines over ``jobs`` lanes, heaviest first onto the lightest lane (each lane runs sequentially)."""
    lanes: list[list[str]] = [[] for _ in range(max(1, min(jobs, len(engines))))]
    loads = [0] * len(lanes)
    for engine in sorted(engines, key=lambda e: -_LANE_WEIGHT.get(e, 1)):
        lane = loads.index(min(loads))
        lanes[lane].append(engine)
        loads[lane] += _LANE_WEIGHT.get(engine, 1)
    return lanes


def run_benchmark(
    cases: Sequence[Case],
    *,
    engines: Sequence[str] = ENGINES,
    vocab_path: Path,
    timeout_s: float = 30.0,
    jobs: int = 2,
    clock: str = "wall",
    samples: dict[str, int] | None = None,
    progress: Callable[[str], None] | None = None,
) -> MaskBenchReport:
    """Run every engine over every case (engines split across ``jobs`` parallel worker lanes) and summarize.

    Args:
        samples: engine → N: that engine runs only an evenly spaced subset of N cases (a slow peer inside a
            time budget); comparisons with it are made on the schemas both ran.
    """
    unknown = [e for e in [*engines, *(samples or {})] if e not in _ENGINE_CLASSES]
    if unknown:
        raise ValueError(f"unknown engine(s) {unknown}; choose from {', '.join(ENGINES)}")
    if clock not in _CLOCKS:
        raise ValueError(f"clock must be one of {sorted(_CLOCKS)}, not {clock!r}")
    engines = [e for e in ENGINES if e in engines]
    engine_cases = {e: _spread(cases, (samples or {}).get(e)) for e in engines}
    load_before = _load_average()
    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="ember-bench-masks-"))
    results: dict[str, tuple[SchemaOutcome, ...]] = {}
    failures: dict[str, BaseException] = {}

    def run_lane(lane: list[str]) -> None:
        for engine in lane:
            try:
                results[engine] = _drive(
                    engine, engine_cases[engine], vocab_path=vocab_path, scratch=scratch, timeout_s=timeout_s,
                    clock=clock, progress=progress,
                )  # fmt: skip
            except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread below
                failures[engine] = error

    try:
        threads = [threading.Thread(target=run_lane, args=(lane,), daemon=True) for lane in _lanes(engines, jobs)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if failures:
        engine, error = next(iter(failures.items()))
        raise RuntimeError(f"engine {engine!r} could not run: {error}") from error
    wall_s = time.perf_counter() - started
    return MaskBenchReport(
        engines=tuple(engines),
        cases=tuple(case.name for case in cases),
        outcomes=results,
        summaries={engine: summarize(engine, results[engine]) for engine in engines},
        timeout_s=timeout_s,
        jobs=jobs,
        clock=clock,
        load_average=(load_before, _load_average()),
        wall_s=wall_s,
        n_instances=sum(len(case.instances) for case in cases),
        n_untokenizable=sum(case.n_untokenizable for case in cases),
        valid_by_case={case.name: sum(i.valid for i in case.instances) for case in cases},
    )


def _spread(cases: Sequence[Case], n: int | None) -> list[Case]:
    """All cases, or ``n`` of them evenly spaced over the corpus order (deterministic)."""
    if n is None or n >= len(cases):
        return list(cases)
    if n <= 0:
        return []
    picks = np.unique(np.linspace(0, len(cases) - 1, n).round().astype(int))
    return [cases[i] for i in picks.tolist()]


def _load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


# -- summary and report ---------------------------------------------------------------------------------------------


def _engine_version(engine: str) -> str:
    if engine.startswith("ours"):
        version = package_version("ember")
        return "src" if version == "not installed" else version
    return package_version({"outlines": "outlines_core", "llguidance": "llguidance"}[engine])


def summarize(engine: str, outcomes: Sequence[SchemaOutcome]) -> EngineSummary:
    """Aggregate one engine's outcomes (instance counts cover only the schemas the engine compiled)."""
    compiled = [o for o in outcomes if o.kind is OutcomeKind.COMPILED]
    errors = collections.Counter(o.error for o in outcomes if o.kind is not OutcomeKind.COMPILED)
    compile_times = [o.compile_s for o in compiled if o.compile_s is not None]
    masks = np.concatenate([o.mask_ns for o in compiled]) if compiled else np.zeros(0, dtype=np.int64)
    compile_p50, compile_p99 = percentiles(compile_times)
    first_mask_p50, first_mask_p99 = percentiles([o.first_mask_s for o in compiled if o.first_mask_s is not None])
    mask_p50, mask_p99 = (v * 1e-9 for v in percentiles(masks))
    extras: dict[str, Any] = {}
    warm = [o for o in compiled if o.warm_disk_s is not None and o.warm_memory_s is not None]
    if warm:
        extras = {
            "warm_memory_p50_s": percentiles([o.warm_memory_s for o in warm], (50,))[0],
            "warm_disk_p50_s": percentiles([o.warm_disk_s for o in warm], (50,))[0],
            "warm_disk_ratio_p50": percentiles([o.compile_s / max(o.warm_disk_s, 1e-9) for o in warm], (50,))[0],
            "warm_memory_ratio_p50": percentiles([o.compile_s / max(o.warm_memory_s, 1e-9) for o in warm], (50,))[0],
        }
    return EngineSummary(
        engine=engine,
        version=_engine_version(engine),
        n_schemas=len(outcomes),
        compiled=len(compiled),
        errors=dict(errors.most_common()),
        valid_accepted=sum(o.valid_accepted for o in compiled),
        valid_total=sum(o.valid_accepted + o.valid_rejected for o in compiled),
        invalid_rejected=sum(o.invalid_rejected for o in compiled),
        invalid_accepted=sum(o.invalid_accepted for o in compiled),
        compile_p50_s=compile_p50,
        compile_p99_s=compile_p99,
        first_mask_p50_s=first_mask_p50,
        first_mask_p99_s=first_mask_p99,
        mask_p50_s=mask_p50,
        mask_p99_s=mask_p99,
        n_masks=int(masks.size),
        valid_rejected_cases=tuple(o.case for o in compiled if o.valid_rejected),
        **extras,
    )


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def paired(report: MaskBenchReport, a: str, b: str) -> tuple[EngineSummary, EngineSummary]:
    """Summaries of engines ``a`` and ``b`` restricted to the schemas both compiled (like-for-like comparison)."""
    compiled = [
        {o.case for o in report.outcomes[engine] if o.kind is OutcomeKind.COMPILED} for engine in (a, b)
    ]
    common = compiled[0] & compiled[1]
    return (
        summarize(a, [o for o in report.outcomes[a] if o.case in common]),
        summarize(b, [o for o in report.outcomes[b] if o.case in common]),
    )


def target_checks(report: MaskBenchReport) -> list[str]:
    """The "Must show" lines of each of our lanes: each target, yes/no, with the measured values (peer comparisons
    like for like)."""
    lanes = [name for name in ("ours", "ours-any") if name in report.summaries]
    if not lanes:
        return ["- ours not run: no target checks"]
    return [line for name in lanes for line in _lane_checks(report, name)]


def _lane_checks(report: MaskBenchReport, name: str) -> list[str]:
    ours = report.summaries[name]
    lines = []
    if "llguidance" in report.summaries:
        mine, theirs = paired(report, name, "llguidance")
        where = f"on the {mine.compiled} schemas both compiled"
        lines.append(
            f"- {name} mask p50 ≤ llguidance: {_yes(mine.mask_p50_s <= theirs.mask_p50_s)} "
            f"({format_seconds(mine.mask_p50_s)} vs {format_seconds(theirs.mask_p50_s)} {where})"
        )
        lines.append(
            f"- {name} mask p99 ≤ llguidance: {_yes(mine.mask_p99_s <= theirs.mask_p99_s)} "
            f"({format_seconds(mine.mask_p99_s)} vs {format_seconds(theirs.mask_p99_s)} {where})"
        )
        lines.append(
            f"- {name} time to first mask p50 ≤ 1.5x llguidance: "
            f"{_yes(mine.first_mask_p50_s <= 1.5 * theirs.first_mask_p50_s)} ({format_seconds(mine.first_mask_p50_s)} "
            f"vs {format_seconds(theirs.first_mask_p50_s)}, {mine.first_mask_p50_s / theirs.first_mask_p50_s:.1f}x, "
            f"{where})"
        )
        lines.append(
            f"- {name} time to first mask p99 ≤ 3x llguidance: "
            f"{_yes(mine.first_mask_p99_s <= 3 * theirs.first_mask_p99_s)} ({format_seconds(mine.first_mask_p99_s)} "
            f"vs {format_seconds(theirs.first_mask_p99_s)}, {mine.first_mask_p99_s / theirs.first_mask_p99_s:.1f}x, "
            f"{where})"
        )
        lines.append(
            f"- {name} compile p50 within 3x of llguidance: {_yes(mine.compile_p50_s <= 3 * theirs.compile_p50_s)} "
            f"({format_seconds(mine.compile_p50_s)} vs {format_seconds(theirs.compile_p50_s)}, "
            f"{mine.compile_p50_s / theirs.compile_p50_s:.1f}x, {where})"
        )
    if "outlines" in report.summaries:
        mine, theirs = paired(report, name, "outlines")
        lines.append(
            f"- {name} compile p50 ≤ outlines-core: {_yes(mine.compile_p50_s <= theirs.compile_p50_s)} "
            f"({format_seconds(mine.compile_p50_s)} vs {format_seconds(theirs.compile_p50_s)} on the "
            f"{mine.compiled} schemas both compiled)"
        )
    for peer in ("llguidance", "outlines"):
        if peer in report.summaries:
            theirs = report.summaries[peer]
            lines.append(
                f"- {name} compiles at least as many schemas as {peer}: {_yes(ours.compiled >= theirs.compiled)} "
                f"({ours.compiled}/{ours.n_schemas} vs {theirs.compiled}/{theirs.n_schemas})"
            )
    lines.append(f"- {name} accepts no invalid instance: {_yes(ours.invalid_accepted == 0)} ({ours.invalid_accepted})")
    corpus_valid = sum(report.valid_by_case.values())
    lines.append(
        f"- {name} accepts ≥ 99.5 % of every valid instance of the corpus (a refused schema's count as refused): "
        f"{_yes(ours.valid_accepted >= 0.995 * corpus_valid)} ({ours.valid_accepted}/{corpus_valid}, "
        f"{100 * ours.valid_accepted / max(corpus_valid, 1):.1f} %)"
    )
    lines.append(
        f"- {name} accepts ≥ 99 % of the valid instances it compiled: "
        f"{_yes(ours.valid_accepted >= 0.99 * ours.valid_total)} ({ours.valid_accepted}/{ours.valid_total}, "
        f"{100 * ours.valid_accepted / max(ours.valid_total, 1):.1f} %)"
    )
    if ours.warm_disk_ratio_p50 is not None:
        lines.append(
            f"- {name} warm vs cold compile ≥ 20x: {_yes(ours.warm_disk_ratio_p50 >= 20)} (median per-schema ratio "
            f"{ours.warm_disk_ratio_p50:.1f}x from a fresh disk-cache load; {ours.warm_memory_ratio_p50:.0f}x "
            "in-process)"
        )
    return lines


def render_report(report: MaskBenchReport, *, corpus: Path | None = None, plot: str | None = None) -> str:
    """The RESULTS.md section body: environment, method, table, error breakdown, target checks."""
    headers = ["engine", "version", "compiled", "errors", "valid accepted", "invalid rejected", "invalid accepted",
               "compile p50", "compile p99", "first mask p50", "first mask p99", "mask p50", "mask p99",
               "masks timed"]  # fmt: skip
    rows = [
        [
            name, s.version, f"{s.compiled}/{s.n_schemas}", s.n_errors, f"{s.valid_accepted}/{s.valid_total}",
            s.invalid_rejected, s.invalid_accepted, format_seconds(s.compile_p50_s), format_seconds(s.compile_p99_s),
            format_seconds(s.first_mask_p50_s), format_seconds(s.first_mask_p99_s),
            format_seconds(s.mask_p50_s), format_seconds(s.mask_p99_s), s.n_masks,
        ]  # fmt: skip
        for name, s in report.summaries.items()
    ]
    packages = ["llama_cpp_python", "numpy"] + [
        {"outlines": "outlines_core", "llguidance": "llguidance"}[e] for e in report.engines if not e.startswith("ours")
    ]
    where = f" from `{_display_path(corpus)}`" if corpus is not None else ""
    parts = [
        "\n".join(
            environment_lines(packages)
            + [f"- Load average (1 min) before/after: {report.load_average[0]:.1f} / {report.load_average[1]:.1f}"]
        ),
        f"Corpus: {len(report.cases)} schemas{where}, {report.n_instances} instances "
        f"({report.n_untokenizable} skipped: not UTF-8). Per-schema limit {report.timeout_s:g} s per engine; "
        f"{report.jobs} worker process(es) at once, one engine each; run took {report.wall_s:.0f} s; "
        f"timings are {_CLOCK_WORDS[report.clock]}. "
        "Compile = cold (ours: empty memory + disk cache, parse caches cleared: nothing carries over from earlier "
        "schemas). First mask = the cold compile, then a cursor and its first mask, as one span (what a request "
        "waits for; work a compile defers is counted where it is done). Mask = one per-token mask call (ours `Matcher.fill_bitmask`, outlines-core "
        "`Guide.write_mask_into`, llguidance `fill_next_token_bitmask`: each fills a token bitmask), "
        "p50/p99 over every token of every instance of compiled schemas. Valid/invalid counts are over compiled "
        "schemas only.",
        markdown_table(headers, rows),
    ]
    ours = report.summaries.get("ours")
    if ours is not None and ours.warm_disk_p50_s is not None:
        parts.append(
            f"Ours warm compile: in-process p50 {format_seconds(ours.warm_memory_p50_s or float('nan'))} "
            f"(median {ours.warm_memory_ratio_p50:.0f}x faster than cold), from a fresh disk-cache load p50 "
            f"{format_seconds(ours.warm_disk_p50_s)} (median {ours.warm_disk_ratio_p50:.1f}x faster than cold)."
        )
    error_lines = []
    for name, s in report.summaries.items():
        if s.errors:
            listed = "; ".join(f"{label} ×{count}" for label, count in s.errors.items())
            error_lines.append(f"- {name}: {listed}")
        if s.valid_rejected_cases:
            shown = ", ".join(s.valid_rejected_cases[:12]) + (" …" if len(s.valid_rejected_cases) > 12 else "")
            error_lines.append(f"- {name} refused a valid instance on {len(s.valid_rejected_cases)} schema(s): {shown}")
    if error_lines:
        parts.append("Errors by type:\n\n" + "\n".join(error_lines))
    for name in ("ours-any", "ours"):
        refused = [o for o in report.outcomes.get(name, ()) if o.kind is not OutcomeKind.COMPILED]
        if refused:
            listed = "\n".join(f"- {o.case} ({report.valid_by_case.get(o.case, 0)} valid): {o.detail or o.error}"
                                for o in refused)
            parts.append(f"Every schema {name} refuses, with the reason it gives:\n\n{listed}")
            break
    parts.append("Targets:\n\n" + "\n".join(target_checks(report)))
    if plot:
        parts.append(f"![per-token mask time]({plot})")
    return "\n\n".join(parts)


_CLOCK_WORDS = {"wall": "wall-clock", "cpu": "thread CPU time"}


def _display_path(path: Path) -> str:
    try:
        return os.path.relpath(path, REPO_ROOT)
    except ValueError:
        return str(path)


def plot_masks(report: MaskBenchReport, path: Path) -> Path:
    """Per-token mask time distributions (log x) and compile-time CDFs (log x), one line per engine."""
    fig, (masks_ax, compile_ax) = figure(1, 2, figsize=(12, 4.5))
    all_ns = [
        np.concatenate([o.mask_ns for o in report.outcomes[e] if o.kind is OutcomeKind.COMPILED] or [np.zeros(0)])
        for e in report.engines
    ]
    positive = [ns[ns > 0] for ns in all_ns if ns.size]
    if positive and any(p.size for p in positive):
        low = max(min(float(p.min()) for p in positive if p.size), 1.0)
        high = max(float(p.max()) for p in positive if p.size)
        bins = np.logspace(np.log10(low * 1e-3), np.log10(high * 1e-3 * 1.01), 80)
        for engine, ns in zip(report.engines, all_ns):
            if ns.size:
                masks_ax.hist(ns * 1e-3, bins=bins, histtype="step", linewidth=1.5, label=f"{engine} (n={ns.size})")
    masks_ax.set_xscale("log")
    masks_ax.set_yscale("log")
    masks_ax.set_xlabel("per-token mask time (µs, log)")
    masks_ax.set_ylabel("tokens")
    masks_ax.set_title("Per-token mask time")
    masks_ax.legend()
    for engine in report.engines:
        times = np.sort([o.compile_s for o in report.outcomes[engine] if o.compile_s is not None])
        if times.size:
            attempted = len(report.outcomes[engine])
            compile_ax.step(times, np.arange(1, times.size + 1) / attempted, where="post", label=f"{engine} (of {attempted})")
    compile_ax.set_xscale("log")
    compile_ax.set_xlabel("cold compile time (s, log)")
    compile_ax.set_ylabel("fraction of attempted schemas compiled")
    compile_ax.set_title("Compile time CDF")
    compile_ax.legend()
    return save_figure(fig, path)


def _print_table(report: MaskBenchReport) -> None:
    headers = ["engine", "compiled", "errors", "valid acc", "invalid rej", "invalid acc", "compile p50/p99",
               "first mask p50/p99", "mask p50/p99"]  # fmt: skip
    rows = [
        [
            name, f"{s.compiled}/{s.n_schemas}", s.n_errors, f"{s.valid_accepted}/{s.valid_total}",
            s.invalid_rejected, s.invalid_accepted,
            f"{format_seconds(s.compile_p50_s)} / {format_seconds(s.compile_p99_s)}",
            f"{format_seconds(s.first_mask_p50_s)} / {format_seconds(s.first_mask_p99_s)}",
            f"{format_seconds(s.mask_p50_s)} / {format_seconds(s.mask_p99_s)}",
        ]  # fmt: skip
        for name, s in report.summaries.items()
    ]
    widths = [max(len(str(x)) for x in column) for column in zip(headers, *rows)]
    for row in [headers, *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)))
    for line in target_checks(report):
        print(line)


# -- command line ---------------------------------------------------------------------------------------------------


def _default_vocab() -> Path:
    try:
        from agent.models import model_path

        return model_path("llama3-vocab")
    except Exception:  # noqa: BLE001 - the store may be unavailable offline; fall back to the raw file
        if _FALLBACK_VOCAB.exists():
            return _FALLBACK_VOCAB
        raise


def main(argv: Sequence[str] | None = None) -> MaskBenchReport:
    """Parse options, run, print the table, update RESULTS.md and the plot."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="directory of MaskBench *.json")
    parser.add_argument("--limit", type=int, default=None, help="only the first N schemas (sorted by name)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per schema per engine")
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma-separated subset of " + ",".join(ENGINES))
    parser.add_argument("--jobs", type=int, default=2, help="worker processes at once (one engine each)")
    parser.add_argument("--clock", choices=sorted(_CLOCKS), default="wall", help="wall time, or thread CPU time")
    parser.add_argument(
        "--sample", action="append", default=[], metavar="ENGINE=N",
        help="run ENGINE on only N evenly spaced schemas (e.g. outlines=100 to fit a time budget); repeatable",
    )  # fmt: skip
    parser.add_argument("--vocab", type=Path, default=None, help="Llama-3 vocab GGUF (default: model store)")
    parser.add_argument("--out", type=Path, default=BENCHMARKS_DIR / "RESULTS.md", help="markdown file to update")
    parser.add_argument("--plot", type=Path, default=BENCHMARKS_DIR / "masks.png", help="PNG to write")
    parser.add_argument("--quiet", action="store_true", help="no per-schema progress lines")
    args = parser.parse_args(argv)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    samples = {}
    for item in args.sample:
        engine, _, count = item.partition("=")
        if not count.strip().isdigit():
            parser.error(f"--sample wants ENGINE=N, got {item!r}")
        samples[engine.strip()] = int(count)
    vocab_path = args.vocab or _default_vocab()
    corpus = args.corpus.resolve()
    print(f"tokenizing {corpus} with {vocab_path.name} ...", flush=True)
    cases = load_cases(corpus, vocab_path, limit=args.limit)
    print(f"{len(cases)} schemas, {sum(len(c.instances) for c in cases)} instances; engines {engines}", flush=True)
    report = run_benchmark(
        cases, engines=engines, vocab_path=vocab_path, timeout_s=args.timeout, jobs=args.jobs, clock=args.clock,
        samples=samples, progress=None if args.quiet else (lambda line: print(line, flush=True)),
    )  # fmt: skip
    print()
    _print_table(report)
    plot = plot_masks(report, args.plot)
    plot_link = os.path.relpath(plot, args.out.resolve().parent)
    write_section(args.out, HEADING, render_report(report, corpus=corpus, plot=plot_link))
    print(f"\nwrote {args.out} and {plot}")
    return report


if __name__ == "__main__":
    import bench_masks  # the importable module, so spawned workers and pickles agree on names

    bench_masks.main()
