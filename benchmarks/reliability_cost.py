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

``--backward`` measures the float32 backward instead (:mod:`attnkit.backends.sdpa_flash` reruns it in
float64 when ``max |lse| > LSE_EXACT_ABOVE``), forward + backward of ``attnkit.attention`` per call:

* ``ordinary_s`` — q, k, v ~ N(0, 1): |lse| of a few units, no float64 rerun;
* ``mid_s``      — q ~ N(0, 5²): |lse| of 24-27 at n = 256-1024, under the threshold, no rerun
  (``mid_over_ordinary``; such calls reran in float64 while the threshold was 16);
* ``large_s``    — q ~ N(0, 30²): |lse| in the hundreds, the float64 rerun runs;
* ``large_fused_s`` — the same inputs with the rerun switched off (the fused op's own backward).

``rerun_over_ordinary`` = large_s / ordinary_s is what a call with the rerun costs next to an
ordinary one of the same shape; ``rerun_over_fused`` = large_s / large_fused_s compares it with
the fused op's own backward on the same inputs. ``--accuracy`` adds, per
range of max |lse|, the worst error over the fuzz tolerance (2× the float32 reference's error
against float64 + 16 ulps) of the fused backward with no rerun: where the threshold comes from.

    OMP_NUM_THREADS=1 python benchmarks/reliability_cost.py --backward --accuracy --sizes 256 512 1024   # → ..._backward.json
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
from pathlib import Path
from typing import Callable

import torch

import attnkit
from attnkit.backends import sdpa_flash
from attnkit.backends.nonfinite import needs_exact
from attnkit.backends.sdpa import kernel_layout
from attnkit.core.call import make_call
from common import interleaved_times, record

RESULTS = Path(__file__).resolve().parent / "results"
B, H, E = 1, 8, 64


def _runs_for(n: int, runs: int) -> int:
    return max(3, runs if n <= 1024 else runs // 4 if n <= 4096 else 3)


def interleaved_medians(variants: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median seconds of each variant over ``repeats`` rounds after one warm-up call each
    (:func:`timing.interleaved_times`: load drift on a shared machine hits all alike)."""
    return {name: statistics.median(t) for name, t in interleaved_times(variants, repeats).items()}


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
        row = {"n": n, "runs": _runs_for(n, runs), **interleaved_medians(variants, _runs_for(n, runs))}
    row["check_over_sdpa"] = row["check_s"] / row["sdpa_s"]
    row["copy_over_sdpa"] = row["copy_s"] / row["sdpa_s"]
    row["strided_over_contiguous"] = row["strided_sdpa_s"] / row["sdpa_s"]
    row["check_ns_per_element"] = row["check_s"] / (3 * B * H * n * E) * 1e9
    return row


def _slope(xs: list[float], ys: list[float]) -> float:
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.mean(lx), statistics.mean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def measure_backward(n: int, runs: int) -> dict:
    g = torch.Generator().manual_seed(0)
    q, k, v, d = (torch.randn(B, H, n, E, generator=g) for _ in range(4))

    def step(q_scale: float, rerun: bool):
        def f():
            sdpa_flash.LSE_EXACT_ABOVE = default if rerun else math.inf
            qq, kk, vv = (t.detach().requires_grad_() for t in (q * q_scale, k, v))
            attnkit.attention(qq, kk, vv, backend="sdpa").out.backward(d)
        return f

    default = sdpa_flash.LSE_EXACT_ABOVE
    # q x 5: max |lse| of 24-27 at n = 256-1024, under the threshold (no rerun); q x 30: |lse| ~ 150, rerun
    variants = {"ordinary_s": step(1.0, True), "mid_s": step(5.0, True), "large_s": step(30.0, True),
                "large_fused_s": step(30.0, False)}
    try:
        row = {"n": n, "runs": _runs_for(n, runs), **interleaved_medians(variants, _runs_for(n, runs))}
    finally:
        sdpa_flash.LSE_EXACT_ABOVE = default
    with torch.no_grad():
        lse = {s: float(attnkit.attention(q * s, k, v, backend="sdpa").lse.abs().max()) for s in (1.0, 5.0, 30.0)}
    row["max_abs_lse_ordinary"], row["max_abs_lse_mid"], row["max_abs_lse_large"] = lse[1.0], lse[5.0], lse[30.0]
    row["mid_over_ordinary"] = row["mid_s"] / row["ordinary_s"]
    row["rerun_over_fused"] = row["large_s"] / row["large_fused_s"]
    row["rerun_over_ordinary"] = row["large_s"] / row["ordinary_s"]
    return row


def accuracy_by_lse(seeds: int = 60) -> dict:
    """Worst error / fuzz tolerance of dq, dk, dv per power-of-two range of max |lse|, fused
    backward with no float64 rerun. Calls: B=1, H=2, L=16, S in 4..63, E=8, a N(0,1) + offset bias."""
    eps = torch.finfo(torch.float32).eps
    default, sdpa_flash.LSE_EXACT_ABOVE = sdpa_flash.LSE_EXACT_ABOVE, math.inf
    worst: dict[int, float] = {}
    count: dict[int, int] = {}
    try:
        for seed in range(seeds):
            for off in (0, 4, 8, 12, 16, 24, 32, 48, 64):
                g = torch.Generator().manual_seed(seed)
                L, S, e = 16, int(torch.randint(4, 64, (1,), generator=g)), 8
                q = torch.randn(1, 2, L, e, generator=g) * (1 + seed % 4)
                k, v, d = torch.randn(1, 2, S, e, generator=g), torch.randn(1, 2, S, e, generator=g), torch.randn(1, 2, L, e, generator=g)
                bias = torch.randn(L, S, generator=g) + off
                grads = {}
                for name, dt in (("sdpa", torch.float32), ("ref32", torch.float32), ("truth", torch.float64)):
                    qq, kk, vv = (t.to(dt).requires_grad_() for t in (q, k, v))
                    if name == "sdpa":
                        res = attnkit.attention(qq, kk, vv, backend="sdpa", bias=bias)
                        out, lse = res.out, float(res.lse.detach().abs().max())
                    else:  # the plain softmax, written out
                        out = torch.softmax(qq @ kk.transpose(-1, -2) * e ** -0.5 + bias.to(dt), -1) @ vv
                    grads[name] = torch.autograd.grad((out * d.to(dt)).sum(), (qq, kk, vv))
                ratio = 0.0
                for a, r, t in zip(grads["sdpa"], grads["ref32"], grads["truth"]):
                    tol = 2 * float((r.double() - t).abs().max()) + 16 * eps * max(1.0, float(t.abs().max()))
                    ratio = max(ratio, float((a.double() - t).abs().max()) / tol)
                b = 2 ** math.floor(math.log2(lse)) if lse >= 1 else 0
                worst[b], count[b] = max(worst.get(b, 0.0), ratio), count.get(b, 0) + 1
    finally:
        sdpa_flash.LSE_EXACT_ABOVE = default
    return {f"[{b}, {2 * b if b else 1})": {"calls": count[b], "worst_error_over_tolerance": worst[b]} for b in sorted(worst)}


def main_backward(args) -> None:
    rows = []
    for n in args.sizes:
        row = measure_backward(n, args.runs)
        rows.append(row)
        print(f"n={n:5d}  ordinary {row['ordinary_s'] * 1e3:8.2f} ms  large+rerun {row['large_s'] * 1e3:8.2f} ms  "
              f"large fused {row['large_fused_s'] * 1e3:8.2f} ms  rerun/fused {row['rerun_over_fused']:.2f}  "
              f"mid (|lse| {row['max_abs_lse_mid']:.0f})/ordinary {row['mid_over_ordinary']:.2f}  "
              f"rerun/ordinary {row['rerun_over_ordinary']:.2f}", flush=True)
    result = {
        "what": "forward + backward of attnkit.attention(backend='sdpa'), float32: the float64 backward rerun at large |lse| vs the fused op's own backward",
        "shape": {"B": B, "H": H, "E": E, "L": "n", "S": "n"},
        "dtype": "float32", "threads": torch.get_num_threads(), "torch": torch.__version__,
        "lse_exact_above": sdpa_flash.LSE_EXACT_ABOVE,
        "statistic": "median of interleaved repeats",
        "loadavg_1min": os.getloadavg()[0],
        "rows": rows,
    }
    if args.accuracy:
        result["accuracy_by_max_abs_lse"] = accuracy_by_lse()
        for rng, r in result["accuracy_by_max_abs_lse"].items():
            print(f"max|lse| in {rng}: {r['calls']} calls, worst error/tolerance {r['worst_error_over_tolerance']:.2f}")
    out = args.out if args.out != RESULTS / "reliability_cost.json" else RESULTS / "reliability_cost_backward.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    record(out, result, indent=2)
    print(f"wrote {out}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096, 8192])
    p.add_argument("--runs", type=int, default=21, help="repeats per variant at n <= 1024 (fewer above)")
    p.add_argument("--out", type=Path, default=RESULTS / "reliability_cost.json")
    p.add_argument("--backward", action="store_true", help="time the float32 backward's float64 rerun instead")
    p.add_argument("--accuracy", action="store_true", help="with --backward: the fused backward's error by |lse| range")
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.backward:
        return main_backward(args)
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
        "loadavg_1min": os.getloadavg()[0],
        "rows": rows,
        "check_exponent": _slope(ns, [r["check_s"] for r in rows]),
        "copy_exponent": _slope(ns, [r["copy_s"] for r in rows]),
        "sdpa_exponent": _slope(ns, [r["sdpa_s"] for r in rows]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record(args.out, result, indent=2)
    print(f"exponents (log time vs log n): check {result['check_exponent']:.2f}, copy {result['copy_exponent']:.2f}, "
          f"sdpa {result['sdpa_exponent']:.2f}; wrote {args.out}")


if __name__ == "__main__":
    main()
