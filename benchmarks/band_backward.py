"""The band route's backward alone (window 256, n = 16k, fp32, one thread), optionally A/B against another checkout's.

Times, in one process and interleaved rep by rep (so both sides see the same machine load):

* ``forward_ms``: ``attnkit.attention(..., backend="blockwise")`` with a sliding window of 256 keys;
* ``backward_ms``: ``torch.autograd.grad`` of that call's output (the band route's backward);
* with ``--baseline-src DIR`` (the ``src`` folder of another checkout, e.g. a ``git worktree`` of
  an older commit): the same backward with that checkout's ``fused_band_grad.band_grads`` swapped
  into the route (``baseline_backward_ms``), the ratio of the medians, and the largest difference
  between the two sides' gradients.

Medians of ``--reps`` calls after one warm-up. The whole forward + backward against SDPA is
benchmarks/flex_race.py's job (its 16k row is the performance goal; SDPA with a dense mask runs
only at 4k there).

Run:  PYTHONPATH=src python benchmarks/band_backward.py [--n 16384] [--reps 5] [--baseline-src DIR]
Saves benchmarks/results/band_backward.json (with the 1-minute load average).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import torch

import attnkit
from attnkit import masks as M
from attnkit.backends.blockwise.routes import band as fused_function  # the band route's module

from common import record

RESULTS = Path(__file__).resolve().parent / "results"
B, H, E, WINDOW = 1, 8, 64, 256


def _baseline(src: str):
    """``band_grads`` of the checkout at ``src``, loaded as a sibling of this checkout's module."""
    path = Path(src) / "attnkit" / "backends" / "blockwise" / "kernel" / "band_grad.py"
    if not path.is_file():  # a checkout from before the routes/kernel/loop layout
        path = Path(src) / "attnkit" / "backends" / "blockwise" / "fused_band_grad.py"
    if not path.is_file():
        raise ValueError(f"--baseline-src must be a checkout's src folder holding {path.relative_to(src)}, got {src!r}")
    spec = importlib.util.spec_from_file_location("attnkit.backends.blockwise._baseline_band_grad", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.band_grads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--baseline-src", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, args.n, E, generator=g).requires_grad_() for _ in range(3))
    dout = torch.randn(B, H, args.n, E, generator=g)
    mask = M.sliding_window(WINDOW - 1, 0)
    sides = {"backward_ms": fused_function.band_grads}
    if args.baseline_src:
        sides["baseline_backward_ms"] = _baseline(args.baseline_src)
    times = {name: [] for name in ["forward_ms", *sides]}
    grads = {}
    for rep in range(args.reps + 1):  # rep 0 warms up
        t = time.perf_counter()
        res = attnkit.attention(q, k, v, mask=mask, backend="blockwise")
        fwd = time.perf_counter() - t
        if "banded windows" not in res.report.reason:
            raise RuntimeError(f"the call must take the band route, it took: {res.report.reason}")
        for name, fn in sides.items():
            fused_function.band_grads = fn
            try:
                t = time.perf_counter()
                grads[name] = torch.autograd.grad(res.out, (q, k, v), dout, retain_graph=True)
                if rep:
                    times[name].append((time.perf_counter() - t) * 1e3)
            finally:
                fused_function.band_grads = sides["backward_ms"]
        if rep:
            times["forward_ms"].append(fwd * 1e3)
    out = {"what": __doc__.splitlines()[0], "torch": torch.__version__, "threads": 1, "B": B, "H": H, "n": args.n,
           "E": E, "window": WINDOW, "dtype": "float32", "reps": args.reps, "loadavg_1min": os.getloadavg()[0],
           **{name: statistics.median(ts) for name, ts in times.items()}, "times_ms": times}
    if args.baseline_src:
        out["baseline_src"] = args.baseline_src
        git = subprocess.run(["git", "-C", args.baseline_src, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        out["baseline_commit"] = git.stdout.strip() or None
        out["backward_ratio_vs_baseline"] = out["backward_ms"] / out["baseline_backward_ms"]
        out["max_abs_grad_difference"] = max(float((a - b).abs().max()) for a, b in
                                             zip(grads["backward_ms"], grads["baseline_backward_ms"]))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "band_backward.json"
    record(path, out)
    print(json.dumps({k: (float(f"{x:.4g}") if isinstance(x, float) else x) for k, x in out.items() if k != "times_ms"}))
    print("saved", path)


if __name__ == "__main__":
    main()
