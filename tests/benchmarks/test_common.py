"""benchmarks/_common.py: the RESULTS.md section writer, percentiles and formatting shared by every benchmark."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from _common import environment_lines, format_seconds, markdown_table, percentiles, write_section  # noqa: E402


def test_write_section_creates_the_file_with_a_title(tmp_path: Path) -> None:
    path = tmp_path / "RESULTS.md"
    write_section(path, "## A", "alpha")
    assert path.read_text(encoding="utf-8") == "# Benchmark results\n\n## A\n\nalpha\n"


def test_write_section_replaces_only_its_own_section(tmp_path: Path) -> None:
    path = tmp_path / "RESULTS.md"
    write_section(path, "## A", "alpha\n\n### A detail\n\nmore")
    write_section(path, "## B", "beta")
    write_section(path, "## A", "alpha 2")
    text = path.read_text(encoding="utf-8")
    assert text == "# Benchmark results\n\n## A\n\nalpha 2\n\n## B\n\nbeta\n"


def test_write_section_refuses_a_heading_without_hashes(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        write_section(tmp_path / "R.md", "Masks", "x")


def test_percentiles_interpolate_and_are_nan_when_empty() -> None:
    assert percentiles([1, 2, 3, 4, 5]) == (3.0, pytest.approx(4.96))
    assert all(math.isnan(v) for v in percentiles([]))


def test_format_seconds_picks_a_unit() -> None:
    assert format_seconds(1.5) == "1.5 s"
    assert format_seconds(0.0123) == "12.3 ms"
    assert format_seconds(41.2e-6) == "41.2 µs"
    assert format_seconds(5e-8) == "50 ns"
    assert format_seconds(float("nan")) == "—"


def test_markdown_table_has_a_separator_row() -> None:
    assert markdown_table(["a", "b"], [[1, 2]]) == "| a | b |\n|---|---|\n| 1 | 2 |"


def test_environment_lines_name_machine_versions_and_date() -> None:
    lines = environment_lines(["numpy"])
    assert lines[0].startswith("- Machine: ") and "cores" in lines[0]
    assert any(line.startswith("- Versions: numpy ") for line in lines)
    assert lines[-1].startswith("- Date: ")
