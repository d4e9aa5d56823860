"""What the two reliability guards of the ``sdpa`` backend cost, next to the SDPA call they guard.

* the layout copy: CPU's fused op reads the head dim as unit-stride, so q, k, v whose last dim is
  strided are copied first (:func:`attnkit.backends.sdpa.kernel_layout`); measured on q, k and v
  stored transposed (``x.transpose(-1, -2)`` of a (B, H, E, n) tensor), the worst case (3 full copies);
* the NaN check: every call sums q, k and v once (:func:`attnkit.backends.nonfinite.needs_exact`)
  so that NaN/inf inputs get the reference's result; measured on finite inputs, the common case.

Both are O(n) per call; the SDPA call is O(n²). For B=1, H=8, E=64 and L = S = n in 256..8192,
fp32, one thread, each piece is timed interleaved (call by call, so load drift on a shared machine
hits all alike) and the median of ``--runs`` repeats is kept:

* ``sdpa_s``  — ``attnkit.attention(q, k, v, backend="sdpa")`` on contiguous inputs (check included);
* ``check_s`` — ``needs_exact(call)`` alone;
* ``copy_s``  — ``kernel_layout`` of the three transposed-storage tensors alone;
* ``strided_sdpa_s`` — ``attnkit.attention`` on the transposed-storage inputs (copy and check included).

Ratios are against ``sdpa_s`` of the same run. ``check_exponent`` / ``copy_exponent`` /
``sdpa_exponent`` are least-squares slopes of log(time) on log(n): ~1 is linear, ~2 quadratic.

    OMP_NUM_THREADS=1 python benchmarks/reliability_cost.py   # → benchmarks/results/reliability_cost.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import torch

import attnkit
from attnkit.backends.nonfinite import needs_exact
from attnkit.backends.sdpa import kernel_layout
from attnkit.core.call import make_call

RESULTS = Path(__file__).resolve().parent / "results"
B, H, E = 1, 8, 64


def _runs_for(n: int, runs: int) -> int:
    return max(3, runs if n <= 1024 else runs // 4 if n <= 4096 else 3)


def measure(n: int, runs: int) -> dict:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, n, E, generator=g) for _ in range(3))
    qt, kt, vt = (torch.randn(B, H, E, n, generator=g).transpose(-1, -2) for _ in range(3))  # head dim stride n
    call = make_call(q, k, v)
    assert not needs_exact(call)
    variants = {
        "sdpa_s": lambda: attnkit.attention(q, k, v, backend="sdpa"),
        "check_s": lambda: needs_exact(call),
        "copy_s": lambda: (kernel_layout(qt), kernel_layout(kt), kernel_layout(vt)),
        "strided_sdpa_s": lambda: attnkit.attention(qt, kt, vt, backend="sdpa"),
    }
    with torch.no_grad():
        for f in variants.values():  # warm-up
            f()
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(_runs_for(n, runs)):
            for name, f in variants.items():
                t0 = time.perf_counter()
                f()
                times[name].append(time.perf_counter() - t0)
    row = {"n": n, "runs": _runs_for(n, runs), **{name: statistics.median(t) for name, t in times.items()}}
    row["check_over_sdpa"] = row["check_s"] / row["sdpa_s"]
    row["copy_over_sdpa"] = row["copy_s"] / row["sdpa_s"]
    row["strided_over_contiguous"] = row["strided_sdpa_s"] / row["sdpa_s"]
    row["check_ns_per_element"] = row["check_s"] / (3 * B * H * n * E) * 1e9
    return row


def _slope(xs: list[float], ys: list[float]) -> float:
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.mean(lx), statistics.mean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096, 8192])
    p.add_argument("--runs", type=int, default=21, help="repeats per variant at n <= 1024 (fewer above)")
    p.add_argument("--out", type=Path, default=RESULTS / "reliability_cost.json")
    args = p.parse_args()
    torch.set_num_threads(1)
    rows = []
    for n in args.sizes:
        row = measure(n, args.runs)
        rows.append(row)
        print(f"n={n:5d}  sdpa {row['sdpa_s'] * 1e3:9.2f} ms  check {row['check_s'] * 1e6:8.1f} µs "
              f"({row['check_over_sdpa']:.2%})  copy {row['copy_s'] * 1e6:8.1f} µs ({row['copy_over_sdpa']:.2%})  "
              f"strided/contiguous {row['strided_over_contiguous']:.3f}", flush=True)
    ns = [r["n"] for r in rows]
    result = {
        "what": "cost of sdpa's layout copy (3 transposed-storage inputs) and NaN check (finite inputs) vs the sdpa call",
        "shape": {"B": B, "H": H, "E": E, "L": "n", "S": "n"},
        "dtype": "float32",
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "statistic": "median of interleaved repeats",
        "rows": rows,
        "check_exponent": _slope(ns, [r["check_s"] for r in rows]),
        "copy_exponent": _slope(ns, [r["copy_s"] for r in rows]),
        "sdpa_exponent": _slope(ns, [r["sdpa_s"] for r in rows]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"exponents (log time vs log n): check {result['check_exponent']:.2f}, copy {result['copy_exponent']:.2f}, "
          f"sdpa {result['sdpa_exponent']:.2f}; wrote {args.out}")


if __name__ == "__main__":
    main()
