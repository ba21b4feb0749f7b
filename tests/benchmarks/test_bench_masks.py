"""Smoke tests of benchmarks/bench_masks.py on three small corpus schemas (structure and soundness, never timings).

The corpus lives next to the repository (``../shared/corpus/maskbench-dev``); these tests skip when it is absent.
They run real engines over the real Llama-3 vocabulary in worker processes, so they are marked ``model``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_masks  # noqa: E402
from _common import write_section  # noqa: E402
from bench_masks import Case, Instance, OutcomeKind, SchemaOutcome  # noqa: E402

SMOKE_SCHEMAS = ("Github_trivial---o6021", "Github_trivial---o47168", "Github_trivial---o69499")
"""Small schemas with both valid and invalid instances (string length, patternProperties, anyOf in items). The
first goes first: outlines-core, sampled down to one schema, compiles it in seconds (``patternProperties: .*``
takes it minutes)."""


@pytest.fixture(scope="module")
def vocab_path() -> Path:
    pytest.importorskip("llama_cpp")
    from agent.models import model_path

    return model_path("llama3-vocab")


@pytest.fixture(scope="module")
def smoke_cases(vocab_path: Path) -> list[Case]:
    if not all((bench_masks.DEFAULT_CORPUS / f"{name}.json").exists() for name in SMOKE_SCHEMAS):
        pytest.skip(f"MaskBench corpus not found at {bench_masks.DEFAULT_CORPUS}")
    by_name = {c.name: c for c in bench_masks.load_cases(bench_masks.DEFAULT_CORPUS, vocab_path, names=SMOKE_SCHEMAS)}
    return [by_name[name] for name in SMOKE_SCHEMAS]


@pytest.fixture(scope="module")
def smoke_report(smoke_cases: list[Case], vocab_path: Path) -> bench_masks.MaskBenchReport:
    pytest.importorskip("llguidance")
    pytest.importorskip("outlines_core")
    return bench_masks.run_benchmark(
        smoke_cases, engines=bench_masks.ENGINES, vocab_path=vocab_path, timeout_s=120, jobs=2,
        samples={"outlines": 1},
    )  # fmt: skip


@pytest.mark.model
def test_cases_hold_every_instance_tokenized_without_bos(smoke_cases: list[Case]) -> None:
    assert sorted(case.name for case in smoke_cases) == sorted(SMOKE_SCHEMAS)
    for case in smoke_cases:
        raw = json.loads((bench_masks.DEFAULT_CORPUS / f"{case.name}.json").read_text(encoding="utf-8"))
        assert len(case.instances) + case.n_untokenizable == len(raw["tests"])
        assert [i.valid for i in case.instances] == [t["valid"] for t in raw["tests"]]
        assert all(instance.token_ids and 128000 not in instance.token_ids for instance in case.instances)


@pytest.mark.model
def test_report_has_one_outcome_per_engine_and_attempted_schema(smoke_report, smoke_cases) -> None:
    names = tuple(case.name for case in smoke_cases)
    assert smoke_report.engines == bench_masks.ENGINES
    assert smoke_report.cases == names
    assert tuple(o.case for o in smoke_report.outcomes["ours"]) == names
    assert tuple(o.case for o in smoke_report.outcomes["llguidance"]) == names
    assert tuple(o.case for o in smoke_report.outcomes["outlines"]) == names[:1]  # sampled: 1 evenly spaced
    for engine, outcomes in smoke_report.outcomes.items():
        summary = smoke_report.summaries[engine]
        assert summary.n_schemas == len(outcomes)
        assert summary.compiled + summary.n_errors == summary.n_schemas
        assert summary.n_masks == sum(o.mask_ns.size for o in outcomes if o.kind is OutcomeKind.COMPILED)
        for outcome in outcomes:
            assert outcome.engine == engine
            if outcome.kind is OutcomeKind.COMPILED:
                assert outcome.compile_s is not None and outcome.compile_s > 0
                assert outcome.mask_ns.dtype == np.int64 and outcome.mask_ns.size > 0
                assert (outcome.mask_ns >= 0).all()
            else:
                assert outcome.error


@pytest.mark.model
def test_ours_accepts_every_valid_instance_of_the_schemas_it_compiled(smoke_report, smoke_cases) -> None:
    by_name = {case.name: case for case in smoke_cases}
    compiled = [o for o in smoke_report.outcomes["ours"] if o.kind is OutcomeKind.COMPILED]
    assert len(compiled) >= 2, [o.error for o in smoke_report.outcomes["ours"]]
    for outcome in compiled:
        case = by_name[outcome.case]
        assert outcome.valid_accepted == sum(i.valid for i in case.instances)
        assert outcome.valid_rejected == 0
        assert outcome.invalid_rejected + outcome.invalid_accepted == sum(not i.valid for i in case.instances)
        assert outcome.warm_memory_s is not None and outcome.warm_disk_s is not None
    ours = smoke_report.summaries["ours"]
    assert ours.valid_accepted == ours.valid_total > 0
    assert ours.valid_rejected_cases == ()


@pytest.mark.model
def test_rendered_section_names_every_engine_and_the_target_lines(smoke_report, tmp_path: Path) -> None:
    body = bench_masks.render_report(smoke_report, plot="masks.png")
    for engine in bench_masks.ENGINES:
        assert f"| {engine} |" in body
    assert "ours mask p50 ≤ llguidance: " in body
    assert "ours warm vs cold compile ≥ 20x: " in body
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n## Other\n\nkept\n", encoding="utf-8")
    write_section(results, bench_masks.HEADING, body)
    write_section(results, bench_masks.HEADING, body)
    text = results.read_text(encoding="utf-8")
    assert text.count(bench_masks.HEADING) == 1
    assert "## Other\n\nkept\n" in text


@pytest.mark.model
def test_plot_is_a_png(smoke_report, tmp_path: Path) -> None:
    path = bench_masks.plot_masks(smoke_report, tmp_path / "masks.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.model
def test_a_schema_past_the_timeout_is_counted_and_the_run_goes_on(smoke_cases, vocab_path: Path) -> None:
    # A zero timeout: the driver polls without waiting, so no schema can answer in time however fast it compiles
    # (1 ms used to be enough to time out; it no longer is for the small smoke schemas).
    report = bench_masks.run_benchmark(smoke_cases[:2], engines=("ours",), vocab_path=vocab_path, timeout_s=0)
    outcomes = report.outcomes["ours"]
    assert [o.kind for o in outcomes] == [OutcomeKind.TIMEOUT, OutcomeKind.TIMEOUT]
    assert report.summaries["ours"].errors == {"timeout (> 0 s)": 2}
    assert report.summaries["ours"].compiled == 0
    body = bench_masks.render_report(report)
    valid = [report.valid_by_case[case.name] for case in smoke_cases[:2]]
    assert f"- {smoke_cases[0].name} ({valid[0]} valid): timeout (> 0 s)" in body  # each refusal listed
    assert f"accepts ≥ 99.5 % of every valid instance of the corpus (a refused schema's count as refused): no " \
           f"(0/{sum(valid)}" in body


# -- pure helpers (no model) -----------------------------------------------------------------------------------------


def _outcome(case: str, kind: OutcomeKind = OutcomeKind.COMPILED, **fields) -> SchemaOutcome:
    return SchemaOutcome(engine="ours", case=case, kind=kind, **fields)


def test_spread_keeps_all_cases_or_an_evenly_spaced_subset_in_order() -> None:
    cases = [Case(name=f"c{i}", schema={}, instances=()) for i in range(10)]
    assert bench_masks._spread(cases, None) == cases
    assert bench_masks._spread(cases, 99) == cases
    assert [c.name for c in bench_masks._spread(cases, 3)] == ["c0", "c4", "c9"]
    assert bench_masks._spread(cases, 0) == []


def test_lanes_put_every_engine_in_exactly_one_lane() -> None:
    for jobs in (1, 2, 3, 8):
        lanes = bench_masks._lanes(bench_masks.ENGINES, jobs)
        assert len(lanes) == min(jobs, len(bench_masks.ENGINES))
        assert sorted(e for lane in lanes for e in lane) == sorted(bench_masks.ENGINES)
    assert ["outlines"] in bench_masks._lanes(bench_masks.ENGINES, 2)


def test_summary_counts_instances_only_over_compiled_schemas() -> None:
    outcomes = [
        _outcome("a", compile_s=1.0, valid_accepted=2, valid_rejected=1, invalid_rejected=3, invalid_accepted=1,
                 mask_ns=np.array([10, 20, 30], dtype=np.int64)),  # fmt: skip
        _outcome("b", OutcomeKind.COMPILE_ERROR, error="unsupported: uniqueItems"),
        _outcome("c", OutcomeKind.TIMEOUT, error="timeout (> 30 s)"),
    ]
    summary = bench_masks.summarize("ours", outcomes)
    assert (summary.n_schemas, summary.compiled, summary.n_errors) == (3, 1, 2)
    assert summary.errors == {"unsupported: uniqueItems": 1, "timeout (> 30 s)": 1}
    assert (summary.valid_accepted, summary.valid_total) == (2, 3)
    assert (summary.invalid_rejected, summary.invalid_accepted) == (3, 1)
    assert summary.valid_rejected_cases == ("a",)
    assert summary.n_masks == 3 and summary.mask_p50_s == pytest.approx(20e-9)


def test_load_cases_refuses_an_empty_corpus(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        bench_masks.load_cases(tmp_path, tmp_path / "missing.gguf")


def test_instance_and_case_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        Instance(True, (1,))  # type: ignore[misc]
