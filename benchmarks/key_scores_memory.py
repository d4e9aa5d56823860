"""Peak memory of ``attention(..., return_key_scores=True)`` at n = 8k against the dense weights.

Each case runs in a fresh process (glibc's ``MALLOC_MMAP_THRESHOLD_=65536``, so freed buffers go
back to the system and the peak is not hidden by a reused arena; one thread). After q, k, v exist
the Linux peak-RSS counter is reset, one causal call runs, and ``VmHWM - VmRSS_before`` is the
extra memory it needed (:mod:`proc_memory`). Cases: the call alone, and the call with key scores.
The dense (B, H, n, n) float32 weights that eager attention would hand to H2O/SnapKV-style tools
are not built (they take 1 GiB here); their size is B·H·n²·4 bytes. The key scores are checked
against the column sums of those weights at n = 2k in ``tests/core/test_key_scores.py``.

Run:  PYTHONPATH=src python benchmarks/key_scores_memory.py [--n 8192 --heads 4 --dim 64]
Saves benchmarks/results/key_scores_memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from common import record, reset_peak, status_kib

RESULTS = Path(__file__).resolve().parent / "results" / "key_scores_memory.json"


def _one(case: str, n: int, heads: int, dim: int) -> dict:
    import torch

    import attnkit

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, heads, n, dim) for _ in range(3))
    exact = reset_peak()
    before = status_kib("VmRSS")
    t0 = time.perf_counter()
    res = attnkit.attention(q, k, v, mask=attnkit.masks.causal(), return_key_scores=case == "key_scores")
    seconds = time.perf_counter() - t0
    peak = status_kib("VmHWM") - before
    out = {"case": case, "peak_mib": peak / 1024, "seconds": seconds, "backend": res.report.backend, "peak_exact": exact}
    if res.key_scores is not None:
        out["key_scores_sum"] = float(res.key_scores.sum())  # = n: every row's weights sum to 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--case", default=None, help=argparse.SUPPRESS)  # set in the child process
    a = ap.parse_args()
    if a.case:
        print(json.dumps(_one(a.case, a.n, a.heads, a.dim)))
        return
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    rows = []
    for case in ("attention", "key_scores"):
        cmd = [sys.executable, __file__, "--case", case, "--n", str(a.n), "--heads", str(a.heads), "--dim", str(a.dim)]
        rows.append(json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout.splitlines()[-1]))
        print(rows[-1])
    dense_mib = a.heads * a.n * a.n * 4 / 2**20
    ks = next(r for r in rows if r["case"] == "key_scores")
    doc = {"n": a.n, "heads": a.heads, "dim": a.dim, "batch": 1, "causal": True, "threads": 1, "malloc_mmap_threshold": 65536,
           "dense_weights_mib": dense_mib, "rows": rows, "key_scores_peak_over_dense": ks["peak_mib"] / dense_mib,
           "machine": platform.processor() or platform.machine()}
    record(RESULTS, doc)
    print(f"dense weights {dense_mib:.0f} MiB; key scores peak {ks['peak_mib']:.1f} MiB = {doc['key_scores_peak_over_dense']:.3f} of dense")


if __name__ == "__main__":
    main()
