"""bf16/fp16 vs float32 attention throughput of sdpa and blockwise, measured in one run.

The cost model's rates (:data:`attnkit.core.cost.RATES`) are per backend and dtype. After the
blockwise half-precision fix (float32 scores and statistics, so float32 GEMMs) its bf16 rate
changes; this script measures, interleaved in one process, the forward time of B=1, H=8, E=64
attention at n = 4096 (dense and causal) for both backends and both dtypes, and reports the
bf16/float32 (and fp16/float32 with ``--dtypes float32,bfloat16,float16``) throughput ratio per
backend. Ratios, not absolute rates, are what carry over from a loaded machine: the half-precision
rate of a backend in :data:`attnkit.core.cost.RATES` is its float32 rate times this ratio.

    python benchmarks/bf16_rates.py --label after --threads 1 --out benchmarks/results/bf16_rates.json
    python benchmarks/bf16_rates.py --label half_rates --dtypes float32,bfloat16,float16
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

import attnkit
from attnkit import masks as M
from attnkit.core import cost

from common import record

B, H, E = 1, 8, 64


def _flops(n: int, causal: bool) -> float:
    f = 4.0 * B * H * n * n * E  # q kᵀ and p v, 2 flops per multiply-add
    return f / 2 if causal else f


def measure(n: int = 4096, runs: int = 5, dtypes: tuple = (torch.float32, torch.bfloat16)) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    base = [torch.randn(B, H, n, E, generator=g) for _ in range(3)]
    cases = [
        (backend, dt, causal)
        for causal in (False, True)
        for dt in dtypes
        for backend in ("sdpa", "blockwise")
    ]
    times: dict[tuple, list[float]] = {c: [] for c in cases}
    for _ in range(runs + 1):  # the first round warms up and is dropped
        for c in cases:  # interleaved: load changes hit every case alike
            backend, dt, causal = c
            q, k, v = (t.to(dt) for t in base)
            t0 = time.perf_counter()
            attnkit.attention(q, k, v, mask=M.causal() if causal else None, backend=backend)
            times[c].append(time.perf_counter() - t0)
    rows = []
    for (backend, dt, causal), ts in times.items():
        med = statistics.median(ts[1:])
        rows.append({
            "backend": backend, "dtype": str(dt).replace("torch.", ""), "mask": "causal" if causal else "none",
            "n": n, "median_ms": med * 1e3, "times_ms": [t * 1e3 for t in ts[1:]],
            "gflops": _flops(n, causal) / med / 1e9,
        })
    return rows


def ratios(rows: list[dict], half: str = "bfloat16") -> dict:
    """``half`` / float32 throughput per backend and mask, and its mean per backend."""
    by = {(r["backend"], r["dtype"], r["mask"]): r["gflops"] for r in rows}
    out: dict = {}
    for backend in ("sdpa", "blockwise"):
        per = {m: by[(backend, half, m)] / by[(backend, "float32", m)] for m in ("none", "causal")}
        out[backend] = {**per, "mean": statistics.mean(per.values())}
    return out


def winners(rows: list[dict]) -> dict:
    """Per dtype and mask: the faster backend and its speed over the other (what auto should pick)."""
    by = {(r["dtype"], r["mask"], r["backend"]): r["median_ms"] for r in rows}
    out: dict = {}
    for dt, m in sorted({(d, m) for d, m, _ in by}):
        sd, bw = by[(dt, m, "sdpa")], by[(dt, m, "blockwise")]
        out[f"{dt}/{m}"] = {"faster": "sdpa" if sd < bw else "blockwise", "by": max(sd, bw) / min(sd, bw)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--label", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated; float32 first (the ratios' base)")
    ap.add_argument("--out", default="benchmarks/results/bf16_rates.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    dtypes = tuple(getattr(torch, d) for d in args.dtypes.split(","))
    halves = [str(d).replace("torch.", "") for d in dtypes if d is not torch.float32]
    rows = measure(args.n, dtypes=dtypes)
    path = Path(args.out)
    data = json.loads(path.read_text()) if path.exists() else {}
    data.setdefault("meta", {}).update({
        "shape": {"B": B, "H": H, "E": E, "n": args.n}, "torch": torch.__version__,
        "platform": platform.platform(), "cpus": os.cpu_count(),
        # what SDPA's half-precision speed depends on (attnkit.core.cost reads the same flags)
        "cpu_features": {"amx": cost.cpu_has("amx"), "fp16": cost.cpu_has("fp16")},
    })
    data[args.label] = {
        "attnkit_file": attnkit.__file__, "threads": torch.get_num_threads(),
        "load_avg_at_end": os.getloadavg(), "rows": rows,
        **{f"{'bf16' if h == 'bfloat16' else 'fp16'}_over_fp32": ratios(rows, h) for h in halves},
        "faster": winners(rows),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    record(path, data)
    for r in rows:
        print(args.label, r["backend"], r["dtype"], r["mask"], f"{r['median_ms']:.1f} ms", f"{r['gflops']:.1f} GFLOP/s")
    for h in halves:
        print(args.label, f"{h}/float32 throughput:", json.dumps(ratios(rows, h)))
    print(args.label, "faster:", json.dumps(winners(rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
