"""Shared plumbing for every benchmark script: the environment header, percentiles, tables, RESULTS.md, plots.

Owns how a benchmark *reports* (what machine, which versions, when; one markdown section per benchmark in
``benchmarks/RESULTS.md``, replaced in place on a rerun; PNG plots rendered headless). Refuses to measure
anything itself: each ``bench_*.py`` times its own work and hands numbers here.

    bench_*.py ──numbers──► percentiles / markdown_table ──► write_section(RESULTS.md, heading, body)
                     └────► figure() ... save_figure(fig, benchmarks/*.png)
"""

from __future__ import annotations

import datetime as _datetime
import fcntl
import importlib.metadata
import os
import platform
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "BENCHMARKS_DIR",
    "REPO_ROOT",
    "cpu_model",
    "environment_lines",
    "format_seconds",
    "figure",
    "markdown_table",
    "package_version",
    "percentiles",
    "save_figure",
    "write_section",
]

BENCHMARKS_DIR = Path(__file__).resolve().parent
"""The ``benchmarks/`` directory (RESULTS.md and the plots live here)."""
REPO_ROOT = BENCHMARKS_DIR.parent
"""The repository root."""


# -- environment ----------------------------------------------------------------------------------------------------


def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo (falls back to `platform.processor()`)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / (1024 * 1024)
    except (OSError, ValueError, IndexError):
        pass
    return None


def package_version(name: str) -> str:
    """Installed distribution version, or ``"not installed"``."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def environment_lines(packages: Iterable[str] = ()) -> list[str]:
    """Markdown bullet lines naming the machine, Python and package versions, and the date (UTC)."""
    memory = _memory_gib()
    machine = f"{cpu_model()}, {_usable_cores()} usable cores"
    if memory is not None:
        machine += f", {memory:.0f} GiB RAM"
    versions = ", ".join(f"{name} {package_version(name)}" for name in packages)
    now = _datetime.datetime.now(_datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"- Machine: {machine} ({platform.system()} {platform.release()})",
        f"- Python: {platform.python_version()} ({platform.python_implementation()})",
    ]
    if versions:
        lines.append(f"- Versions: {versions}")
    lines.append(f"- Date: {now}")
    return lines


# -- numbers --------------------------------------------------------------------------------------------------------


def percentiles(values: Sequence[float] | np.ndarray, qs: Sequence[float] = (50, 99)) -> tuple[float, ...]:
    """The ``qs`` percentiles (linear interpolation) of ``values``; NaN for each when there are none."""
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        return tuple(float("nan") for _ in qs)
    return tuple(float(v) for v in np.percentile(array, list(qs)))


def format_seconds(seconds: float) -> str:
    """A duration with a unit that keeps 3 significant digits (``"41.2 µs"``, ``"1.30 s"``); ``"—"`` for NaN."""
    if seconds != seconds:  # NaN
        return "—"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub-flavoured markdown table (cells rendered with ``str``)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


# -- RESULTS.md -----------------------------------------------------------------------------------------------------


def write_section(path: Path | str, heading: str, body: str) -> None:
    """Put ``heading`` + ``body`` into the markdown file, replacing a previous section with the same heading.

    ``heading`` is a full heading line such as ``"## Masks: ..."``. The section runs until the next heading of the
    same or a higher level; other sections are kept byte for byte. A missing file is created with a title. The
    read-modify-write holds an exclusive ``flock`` on the file, so benchmarks finishing together don't drop sections.
    """
    path = Path(path)
    heading = heading.strip()
    level = len(heading) - len(heading.lstrip("#"))
    if level == 0:
        raise ValueError(f"heading must start with '#': {heading!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        text = handle.read() or "# Benchmark results\n"
        new = _replace_section(text, heading, level, f"{heading}\n\n{body.strip()}\n")
        handle.seek(0)
        handle.truncate()
        handle.write(new)


def _replace_section(text: str, heading: str, level: int, section: str) -> str:
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == heading), None)
    if start is None:
        new = text.rstrip("\n") + "\n\n" + section
    else:
        boundary = re.compile(r"^#{1,%d} " % level)
        end = next((i for i in range(start + 1, len(lines)) if boundary.match(lines[i])), len(lines))
        tail = "".join(lines[end:])
        new = "".join(lines[:start]) + section + ("\n" + tail if tail else "")
    return new


# -- plots ----------------------------------------------------------------------------------------------------------


def figure(*args: Any, **kwargs: Any) -> Any:
    """``matplotlib.pyplot.subplots(...)`` on the headless Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)


def save_figure(fig: Any, path: Path | str) -> Path:
    """Write ``fig`` as a PNG and close it; the path written."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)
    return path
