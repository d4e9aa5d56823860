"""MHSA2d forward + backward: time and peak memory at the feature-map sizes of a 640-pixel detector
input — 20×20 (P5, stride 32), 40×40 (P4), 80×80 (P3) — attnkit's ``auto`` backend (and
``blockwise`` by name) against a naive softmax implementation with the same weights.

What is compared, per size, each in a fresh subprocess so one measurement's allocations cannot hide
another's:

* ``auto`` / ``blockwise``: :class:`attnkit.modules.mhsa2d.MHSA2d` as it runs in a model — the
  relative position bias handed to :func:`attnkit.attention` as a score modifier evaluated per tile;
* ``naive``: the same layer written the way a detector's MHSA block usually is — the (heads, N, N)
  bias gathered densely, ``q kᵀ/√E + bias``, ``torch.softmax``, ``@ v`` (N = H·W; the score matrix
  grows as N² = 2.6k² → 41M entries per head at 80×80).

Memory on CPU is the resident-set peak above the inputs (``/proc/self/clear_refs`` reset, then
``VmHWM``, as in :mod:`attnkit.bench`); on CUDA ``torch.cuda.max_memory_allocated`` above the inputs;
``peak_mib`` is the second call's at the size (the one a training step repeats), ``first_peak_mib``
and ``first_ms`` the first call's, which includes once-per-process costs.
Time: the median of ``--runs`` calls after those two. Numbers from a loaded machine are
meaningless; run it alone.

Run:  PYTHONPATH=src python benchmarks/vision_cost.py [--sizes 20,40,80] [--channels 256 --heads 8]
      [--runs 5] [--device cpu|cuda] [--out benchmarks/results/vision_cost.json]

Shape legend: B batch (1), C channels, H×W map, N = H·W, E = C / heads.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from common import record

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "modules"))
RESULTS = Path(__file__).resolve().parent / "results" / "vision_cost.json"
IMPLS = ("auto", "blockwise", "naive")


def naive_forward(m, x: torch.Tensor) -> torch.Tensor:
    """MHSA2d's math with a dense (heads, N, N) bias gathered from the table and a materialised softmax."""
    from _mhsa2d_reference import plain_mhsa  # the tests' independent reference: one copy of the math

    H, W = x.shape[-2:]
    table = m.position(H, W)  # (nh, 2H-1, 2W-1)
    ys, xs = torch.meshgrid(torch.arange(H, device=x.device), torch.arange(W, device=x.device), indexing="ij")
    ys, xs = ys.flatten(), xs.flatten()
    bias = table[:, ys[:, None] - ys[None] + H - 1, xs[:, None] - xs[None] + W - 1]  # (nh, N, N)
    return plain_mhsa(m, x, bias)


def worker(spec: dict) -> dict:
    from attnkit.bench.harness import peak_rss, reset_peak_rss
    from attnkit.modules.mhsa2d import MHSA2d

    dev = torch.device(spec["device"])
    torch.manual_seed(0)
    impl = spec["impl"]
    m = MHSA2d(spec["channels"], spec["heads"], backend="auto" if impl == "naive" else impl).to(dev)
    chosen = []

    def call(x):
        if x.grad is not None:
            x.grad = None
        if impl == "naive":
            y = naive_forward(m, x)
        else:
            import attnkit.core.hooks as hooks

            h = hooks.add_observer(lambda c, out: chosen.append(out.report.backend))
            try:
                y = m(x)
            finally:
                h.remove()
        y.sum().backward()
        if dev.type == "cuda":
            torch.cuda.synchronize()

    call(torch.randn(1, spec["channels"], 4, 4, device=dev, requires_grad=True))  # load kernels before measuring
    x = torch.randn(1, spec["channels"], spec["size"], spec["size"], device=dev, requires_grad=True)

    def measured() -> tuple[float, int]:
        """(seconds, peak bytes above the memory held before) of one call on x."""
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        else:
            base = reset_peak_rss()
        t0 = time.perf_counter()
        call(x)
        return time.perf_counter() - t0, (torch.cuda.max_memory_allocated() if dev.type == "cuda" else peak_rss()) - base

    # the first call at this size pays once-per-process costs the 4×4 call did not reach (on auto, the
    # blockwise backward's first nested autograd pass, ~35 MiB of heap kept at 40×40): reported apart,
    # and the peak is the next call's, the one every later training step repeats
    first, first_peak = measured()
    _, peak = measured()
    times = []
    for _ in range(spec["runs"]):
        t0 = time.perf_counter()
        call(x)
        times.append(time.perf_counter() - t0)
    return {**spec, "median_ms": statistics.median(times) * 1e3, "times_ms": [t * 1e3 for t in times], "first_ms": first * 1e3,
            "peak_mib": peak / 2**20, "first_peak_mib": first_peak / 2**20, "backend": chosen[-1] if chosen else "naive (torch.softmax)",
            "threads": torch.get_num_threads()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="20,40,80", help="feature-map sides (H = W)")
    p.add_argument("--channels", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(json.loads(a.worker))))
        return 0
    rows = []
    for size in (int(s) for s in a.sizes.split(",")):
        for impl in IMPLS:
            spec = {"size": size, "impl": impl, "channels": a.channels, "heads": a.heads, "runs": a.runs, "device": a.device}
            r = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True)
            if r.returncode:
                row = {**spec, "error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"}
            else:
                row = json.loads(r.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"{size}x{size} {impl:9s} " + (f"{row['median_ms']:9.1f} ms  {row['peak_mib']:8.1f} MiB  ({row['backend']})"
                                                 if "error" not in row else f"failed: {row['error']}"), flush=True)
    doc = {"benchmark": "MHSA2d forward+backward", "env": {"torch": torch.__version__, "python": platform.python_version(),
                                                            "machine": platform.machine(), "device": a.device}, "rows": rows}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    record(out, doc)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
