"""Hostile-input suite configuration: the fast/slow split under the ``fuzz`` hypothesis profile.

Profiles
    default (CI)  each boundary runs a few hundred examples (see ``hostile_kit.budget``); the whole directory runs
                  in a few minutes: ``pytest tests/hostile``.
    ``fuzz``      thousands of examples per boundary, no deadline: ``make fuzz`` (``pytest -m slow
                  --hypothesis-profile=fuzz``) or ``HYPOTHESIS_PROFILE=fuzz pytest tests/hostile -m slow``.

Long variants are marked ``@pytest.mark.slow``. Run without a ``-m`` expression and without the fuzz profile,
this directory deselects them, so the plain ``pytest tests/hostile`` stays fast.

The profiles themselves (``fuzz``, ``hostile-ci``) are registered by the root ``tests/conftest.py``: pytest
applies ``--hypothesis-profile`` before it imports this sub-directory conftest, so a run from the repository root
(``make fuzz``) could not find a profile registered only here.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from tests.conftest import FUZZ_EXAMPLES  # noqa: F401  (re-exported: the documented knob)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect this directory's ``slow`` tests unless a marker expression or the fuzz profile asks for them."""
    if config.getoption("-m") or settings.get_current_profile_name() == "fuzz":
        return
    here = os.path.dirname(__file__)
    keep, drop = [], []
    for item in items:
        (drop if item.get_closest_marker("slow") and str(item.path).startswith(here) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
