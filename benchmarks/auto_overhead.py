"""Why ``auto`` can trail SDPA by a few percent at n = 1k: its fixed per-call cost, measured.

``auto`` runs the same SDPA kernel; what it adds per call is validation, the cost model and the
report (a constant, independent of n). This script measures that constant at tiny n, where the
kernel costs almost nothing, and then ``auto`` vs a direct ``F.scaled_dot_product_attention`` at
n = 1,024 (fp32, B=1, H=8, E=64), interleaved call by call so load drift on a shared machine
cancels. Medians of ``--runs`` calls.

    python benchmarks/auto_overhead.py        # → benchmarks/results/auto_overhead.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import attnkit
from attnkit import masks

RESULTS = Path(__file__).resolve().parent / "results"


def interleaved(n: int, causal: bool, runs: int) -> dict:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 8, n, 64, generator=g) for _ in range(3))
    mask = masks.causal() if causal else None
    auto_t, sdpa_t = [], []
    for _ in range(3):  # warm-up
        attnkit.attention(q, k, v, mask=mask)
        F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    for _ in range(runs):
        t0 = time.perf_counter()
        attnkit.attention(q, k, v, mask=mask)
        t1 = time.perf_counter()
        F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        t2 = time.perf_counter()
        auto_t.append(t1 - t0)
        sdpa_t.append(t2 - t1)
    a, s = statistics.median(auto_t) * 1e3, statistics.median(sdpa_t) * 1e3
    return {"n": n, "causal": causal, "auto_ms": a, "sdpa_ms": s, "auto_over_sdpa": a / s, "overhead_ms": a - s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=41)
    ap.add_argument("--out", type=Path, default=RESULTS / "auto_overhead.json")
    a = ap.parse_args()
    rows = [interleaved(n, c, a.runs) for n in (16, 64, 1024, 2048) for c in (False, True)]
    for r in rows:
        print(f"n={r['n']:5d} causal={r['causal']!s:5} auto {r['auto_ms']:8.3f} ms  sdpa {r['sdpa_ms']:8.3f} ms  "
              f"ratio {r['auto_over_sdpa']:.3f}  overhead {r['overhead_ms'] * 1e3:7.1f} µs")
    res = {"torch": torch.__version__, "threads": torch.get_num_threads(), "runs": a.runs, "rows": rows}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
