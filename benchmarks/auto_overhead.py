"""``auto``'s fixed cost per call: what dispatch adds on top of the backend it picks, measured.

``auto`` runs the same SDPA kernel a user would call; what it adds per call is validation
(``make_call``), asking every backend whether it supports the call and what it would cost, and the
report. That is a constant, independent of n, so it is measured at tiny shapes (B=1, H=8, E=64,
n = 16 and 64, fp32, one thread) where the kernel itself costs ~10 µs. Three variants are timed
interleaved, call by call, so load drift on a shared machine hits all three alike:

* ``auto``   — ``attnkit.attention(q, k, v, mask=...)``;
* ``forced`` — ``attnkit.attention(..., backend=<the backend auto chose>)``: validation + report, no cost model;
* ``direct`` — the chosen backend's kernel called directly (``F.scaled_dot_product_attention``);
* ``auto_first`` — ``auto`` as a call of a new signature: the per-signature caches
  (:mod:`attnkit.core.call_cache`, the sdpa backend's plans) are emptied before each timed call.

Every variant repeats one signature, as a model's layers do, so ``auto`` and ``forced`` reuse the
validation and the choice of the first call (:mod:`attnkit.core.call_cache`) and pay per call only
what depends on the values (the NaN/inf check) and the kernel. ``overhead_us`` = median(auto) −
median(direct) is the fixed cost of auto's choice, bounded at ≤ 50 µs; ``dispatch_us`` =
median(auto) − median(forced) is the share of the cost model and reasons on a repeated signature;
``first_call_us`` = median(auto_first) − median(direct) the cost when nothing is reused.
Medians of ``--runs`` calls per variant.

Once per process, the first call without gradients in float32 or float64 (per causal mode) also
runs the self-test that lets the sdpa plans check the kernel's result instead of its inputs
(:mod:`attnkit.backends.nonfinite_result`); ``result_check_self_test_s`` times each, first thing.

    OMP_NUM_THREADS=1 python benchmarks/auto_overhead.py   # → benchmarks/results/auto_overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import attnkit
from attnkit import masks
from attnkit.backends import nonfinite_result, sdpa_plan
from attnkit.core import call_cache

from common import record

RESULTS = Path(__file__).resolve().parent / "results"
LIMIT_US = 50.0  # the bound on auto's fixed overhead per call


def measure(n: int, causal: bool, runs: int) -> dict:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 8, n, 64, generator=g) for _ in range(3))
    mask = masks.causal() if causal else None
    chosen = attnkit.attention(q, k, v, mask=mask).report.backend
    if chosen != "sdpa":  # the direct variant below is SDPA's kernel; anything else would compare unlike work
        raise RuntimeError(f"auto chose {chosen!r} for n={n}, expected 'sdpa' at tiny shapes")
    def first():
        call_cache.clear()
        sdpa_plan.clear_plans()

    variants = {
        "auto": lambda: attnkit.attention(q, k, v, mask=mask),
        "forced": lambda: attnkit.attention(q, k, v, mask=mask, backend=chosen),
        "direct": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        "auto_first": lambda: attnkit.attention(q, k, v, mask=mask),
    }
    setup = {"auto_first": first}  # run before the timer starts
    # after it: the entries of auto and forced, emptied by setup, restored untimed
    teardown = {"auto_first": lambda: (variants["auto"](), variants["forced"]())}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(50):  # warm-up: caches, allocator, lazy imports
        for f in variants.values():
            f()
    for _ in range(runs):
        for name, f in variants.items():
            if name in setup:
                setup[name]()
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
            if name in teardown:
                teardown[name]()
    med = {name: statistics.median(t) * 1e6 for name, t in times.items()}
    return {
        "n": n, "causal": causal, "backend": chosen,
        "auto_us": med["auto"], "forced_us": med["forced"], "direct_us": med["direct"],
        "overhead_us": med["auto"] - med["direct"], "dispatch_us": med["auto"] - med["forced"],
        "auto_first_us": med["auto_first"], "first_call_us": med["auto_first"] - med["direct"],
        "loadavg_1min": os.getloadavg()[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3001, help="timed calls per variant and case")
    ap.add_argument("--out", type=Path, default=RESULTS / "auto_overhead.json")
    ap.add_argument("--label", default="", help="free text stored with the result (e.g. the commit measured)")
    ap.add_argument("--before", type=Path, default=None,
                    help="an earlier result JSON of this script (e.g. before a change) to store alongside, as 'before'")
    a = ap.parse_args()
    torch.set_num_threads(1)
    self_test = {}
    for dtype in (torch.float32, torch.float64):
        for causal in (False, True):
            nonfinite_result.reset()
            t0 = time.perf_counter()
            nonfinite_result.trusted(dtype, causal)
            self_test[f"{str(dtype).removeprefix('torch.')}{'_causal' if causal else ''}"] = time.perf_counter() - t0
    print("result-check self-test, once per process: " + ", ".join(f"{k} {v:.3f} s" for k, v in self_test.items()))
    rows = [measure(n, c, a.runs) for n in (16, 64) for c in (False, True)]
    for r in rows:
        print(f"n={r['n']:3d} causal={r['causal']!s:5} auto {r['auto_us']:6.1f} µs  forced {r['forced_us']:6.1f} µs  "
              f"direct {r['direct_us']:6.1f} µs  overhead {r['overhead_us']:5.1f} µs  dispatch {r['dispatch_us']:5.1f} µs  "
              f"first call {r['first_call_us']:5.1f} µs")
    worst = max(r["overhead_us"] for r in rows)
    res = {
        "torch": torch.__version__, "threads": torch.get_num_threads(), "runs": a.runs, "label": a.label,
        "limit_us": LIMIT_US, "max_overhead_us": worst, "within_limit": worst <= LIMIT_US,
        "loadavg_1min": os.getloadavg()[0], "result_check_self_test_s": self_test, "rows": rows,
    }
    if a.before is not None:
        before = json.loads(a.before.read_text())
        res["before"] = {k: before[k] for k in ("label", "threads", "runs", "max_overhead_us", "rows") if k in before}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    record(a.out, res)
    print(f"max overhead {worst:.1f} µs (limit {LIMIT_US:.0f}); wrote {a.out}")


if __name__ == "__main__":
    main()
