"""Spawn a small gloo process group from a test, run a function on every rank, collect the results.

Each rank is a fresh ``spawn`` process (the way torchrun starts them: no forked CUDA/OpenMP state)
with one thread. The rendezvous store lives in the test process on a port the OS chose (port 0),
so concurrent tests never race for a "free" port. A rank returns a picklable value or raises; the
traceback comes back to the test as text so the failure is readable in pytest's output.
"""

from __future__ import annotations

import os
import queue as queue_mod
import time
import traceback
from datetime import timedelta

import torch.distributed as dist
import torch.multiprocessing as mp

STORE_TIMEOUT = timedelta(seconds=60)


def _entry(rank: int, world_size: int, port: int, fn, args: tuple, results) -> None:
    import torch

    torch.set_num_threads(1)
    try:
        store = dist.TCPStore("127.0.0.1", port, world_size, is_master=False, timeout=STORE_TIMEOUT)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=STORE_TIMEOUT)
        results.put((rank, True, fn(rank, world_size, *args)))
    except BaseException:  # report everything, including assertion errors, to the test process
        results.put((rank, False, traceback.format_exc()))
    results.close()
    results.join_thread()  # make sure the result is flushed before the hard exit below
    # Hard exit: destroy_process_group() may block on peers that a fault test killed on purpose.
    os._exit(0)


def run_ranks(fn, world_size: int, *args, timeout: float = 120.0, allow_missing: tuple[int, ...] = ()) -> dict[int, object]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` gloo ranks; return {rank: result}.

    A rank that raised makes this raise with its traceback. Ranks in ``allow_missing`` may exit
    without a result (fault tests kill them on purpose). Processes still alive after ``timeout``
    seconds are killed and the test fails.
    """
    ctx = mp.get_context("spawn")
    store = dist.TCPStore("127.0.0.1", 0, world_size + 1, is_master=True, timeout=STORE_TIMEOUT, wait_for_workers=False)
    results = ctx.Queue()
    saved = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")  # inherited by the children at start
    try:
        procs = [
            ctx.Process(target=_entry, args=(r, world_size, store.port, fn, args, results), daemon=True)
            for r in range(world_size)
        ]
        for p in procs:
            p.start()
    finally:
        for k, val in saved.items():
            if val is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = val
    out: dict[int, object] = {}
    errors: dict[int, str] = {}
    required = set(range(world_size)) - set(allow_missing)
    deadline = time.monotonic() + timeout
    try:
        while not required <= set(out) | set(errors):
            if all(not p.is_alive() for p in procs) and results.empty():
                break  # everyone exited; nothing more will come
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                rank, ok, value = results.get(timeout=min(remaining, 0.5))
            except queue_mod.Empty:
                continue
            (out if ok else errors)[rank] = value
    finally:
        for rank, p in enumerate(procs):
            reported = rank in out or rank in errors
            p.join(timeout=5.0 if reported else 0.5)  # reporters exit at once; a hung victim never does
            if p.is_alive():
                p.kill()  # only our own children, by handle
                p.join()
        del store
    if errors:
        raise AssertionError("\n".join(f"rank {r} failed:\n{tb}" for r, tb in sorted(errors.items())))
    missing = sorted(set(range(world_size)) - set(out) - set(allow_missing))
    if missing:
        raise AssertionError(f"ranks {missing} returned no result within {timeout} s (hung or crashed)")
    return out
