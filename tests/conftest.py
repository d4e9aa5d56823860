"""Shared test set-up: reproducible Hypothesis, deterministic torch, the tests folder on sys.path.

Hypothesis runs derandomized (a fixed seed derived from each test) with no deadline, so CI on two
slow cores is reproducible and never flakes on timing. ``HYPOTHESIS_PROFILE=dev`` explores with
fresh random examples locally; ``=thorough`` runs ten times more.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

# helpers (numpy_reference.py here, _core_cases.py, _ring_cases.py, ... in subfolders) are plain modules: the
# tests folder has no __init__.py, and test files share basenames across folders (tests/core/test_masks.py)
_TESTS = Path(__file__).resolve().parent
for _d in [_TESTS, *sorted(p for p in _TESTS.iterdir() if p.is_dir() and not p.name.startswith(('.', '__')))]:
    sys.path.insert(0, str(_d))  # --import-mode=importlib adds no folder itself: helpers (_core_cases, ...) are found here

# --inference-mode: every test's body under torch.inference_mode() (tests/_inference_mode.py)
pytest_plugins = ["_inference_mode"]

# under pytest-xdist (-n 2 on 2 cores) each worker gets one intra-op thread: two workers with two
# OpenMP threads each oversubscribe the cores and tiny ops then wait milliseconds on spinning threads
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

try:
    from hypothesis import HealthCheck, settings

    _common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    settings.register_profile("ci", derandomize=True, database=None, print_blob=True, **_common)
    settings.register_profile("dev", derandomize=False, **_common)
    settings.register_profile("thorough", derandomize=False, max_examples=2000, **_common)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
except ImportError:  # hypothesis is a dev extra; the tests that need it importorskip it
    pass


@pytest.fixture
def one_thread():
    """One intra-op thread for the test, the caller's count restored after: tiny ops on a shared
    machine otherwise spend their time waiting on each other's threads (about 10x slower here), and
    some comparisons need one thread to be bit-exact. Use with ``pytest.mark.usefixtures``."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(autouse=True)
def _seed_torch():
    """Every test starts from the same RNG state, whatever ran before it on this worker."""
    torch.manual_seed(0)
    yield


def pytest_terminal_summary(terminalreporter):
    """One line per thing this machine lacks (a browser, a data file), however many tests it covers:
    the skips whose reason says ``enable with:``, followed by the command that enables them."""
    reasons: dict[str, None] = {}  # ordered, one entry per distinct reason
    for rep in terminalreporter.stats.get("skipped", []):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        reason = reason.removeprefix("Skipped: ")
        if "enable with:" in reason:
            reasons[reason] = None
    if reasons:
        terminalreporter.section("not tested on this machine", sep="-", bold=False)
        for reason in reasons:
            terminalreporter.write_line(reason)


@pytest.fixture
def fresh_call_caches():
    """Empty per-signature caches (validation and backend choice, the sdpa backend's plans, its
    prepared masks) before and after the test, so a hit or a miss is the test's own doing. Use with
    ``pytest.mark.usefixtures``."""
    from attnkit.backends import sdpa_mask_cache, sdpa_plan
    from attnkit.core import call_cache

    call_cache.clear()
    sdpa_plan.clear_plans()
    sdpa_mask_cache.clear()
    yield
    call_cache.clear()
    sdpa_plan.clear_plans()
