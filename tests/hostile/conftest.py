"""Hostile-input suite configuration: the ``fuzz`` hypothesis profile and the fast/slow split.

Profiles
    default (CI)  each boundary runs a few hundred examples (see ``hostile_kit.budget``); the whole directory runs
                  in a few minutes: ``pytest tests/hostile``.
    ``fuzz``      thousands of examples per boundary, no deadline: ``make fuzz`` (``pytest -m slow
                  --hypothesis-profile=fuzz``) or ``HYPOTHESIS_PROFILE=fuzz pytest tests/hostile -m slow``.

Long variants are marked ``@pytest.mark.slow``. Run without a ``-m`` expression and without the fuzz profile,
this directory deselects them, so the plain ``pytest tests/hostile`` stays fast.

Note: pytest only imports this conftest early (before ``--hypothesis-profile`` is applied) when ``tests/hostile``
is on the command line. A run from the repository root (``make fuzz``) needs the profile registered by the root
``tests/conftest.py`` too (it can simply ``import`` the registration below); see docs/limits.md.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

FUZZ_EXAMPLES = 3000
"""Examples per boundary under the ``fuzz`` profile (each slow test may scale it)."""

_SUPPRESSED = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
               HealthCheck.large_base_example]

settings.register_profile("fuzz", max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=_SUPPRESSED,
                          print_blob=True)
settings.register_profile("hostile-ci", deadline=None, suppress_health_check=_SUPPRESSED, print_blob=True)

if os.environ.get("HYPOTHESIS_PROFILE"):
    settings.load_profile(os.environ["HYPOTHESIS_PROFILE"])


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
