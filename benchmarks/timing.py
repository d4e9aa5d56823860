"""The timers the benchmarks share: how long one call takes (the CUDA benchmarks, ``gpu_race.py`` and
``flex_cuda.py``), and several calls timed in turn on the CPU (:func:`interleaved_times`).

A CUDA call returns before its kernels finish, so a wall clock around it measures the launch, not
the work. On CUDA each call is bracketed by two CUDA events recorded on the current stream and read
after ``torch.cuda.synchronize()``: the GPU's own clock from the first event to the second, the
host time spent launching included (a host-bound call shows up as such). On any other device the
wall clock (``time.perf_counter``) around the call, which there runs to completion.

    first_ms, out = first_call(fn, device)   # compiles, autotuning, caches: reported apart
    fn()                                     # a second warm-up
    times = time_calls(fn, reps, device)     # milliseconds of each call; report their median

    times = interleaved_times({"auto": f, "sdpa": g}, rounds)   # seconds per call, per variant
"""

from __future__ import annotations

import time
from typing import Callable

import torch

__all__ = ["first_call", "time_calls", "interleaved_times"]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def first_call(fn: Callable[[], object], device: torch.device | str) -> tuple[float, object]:
    """(wall-clock milliseconds, result) of one call of ``fn`` through to the end of its work (the
    device synchronized before and after): a first call's compile and warm-up included."""
    device = torch.device(device)
    _sync(device)
    t0 = time.perf_counter()
    out = fn()
    _sync(device)
    return (time.perf_counter() - t0) * 1e3, out


def time_calls(fn: Callable[[], object], reps: int, device: torch.device | str) -> list[float]:
    """Milliseconds of each of ``reps`` calls of ``fn``: CUDA events around each call on CUDA, the
    wall clock elsewhere. Warm ``fn`` up first (:func:`first_call` and one more call)."""
    if reps < 1:
        raise ValueError(f"reps must be at least 1, got {reps}; pass the number of timed calls")
    device = torch.device(device)
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def interleaved_times(variants: dict[str, Callable[[], object]], rounds: int, warmup: int = 1) -> dict[str, list[float]]:
    """Wall-clock seconds of each variant's calls over ``rounds`` rounds, each round calling every
    variant once in turn, so load drift on a shared machine hits all alike; ``warmup`` untimed rounds
    first (caches, first-call paths). CPU only: no device is synchronized."""
    for _ in range(warmup):
        for f in variants.values():
            f()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, f in variants.items():
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
    return times
