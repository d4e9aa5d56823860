"""A context manager that runs small models (the misconception experiments, the report's own
runs and timings) with a fixed torch thread count.

Why: on a shared 2-core machine two threads per process made a tiny model's training step 50×
slower (179 ms against 3.5 ms with one thread, measured); the quick presets therefore use one
thread, and ``threads: None`` (the full presets) leaves torch's setting alone.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch


@contextmanager
def threads(n: int | None):
    if n is None:
        yield
        return
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"threads must be a positive int or None (leave torch's setting), got {n!r}")
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
