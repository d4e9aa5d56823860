"""Decoding tests use tiny tensors: one intra-op thread is faster than two spinning on a shared
2-core machine (a test took 3.5 s with 2 threads under load, 0.05 s with 1)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
