"""Decoding tests use tiny tensors: one intra-op thread is faster than two spinning on a shared
2-core machine (a test took 3.5 s with 2 threads under load, 0.05 s with 1)."""

import pytest


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Every decoding test on one intra-op thread (the shared fixture in tests/conftest.py)."""
