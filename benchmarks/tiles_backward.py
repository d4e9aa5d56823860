"""The tiles route's backward (documents, chunks, prefix-LM) from complete rows vs the tile loop's.

One process, one thread, fp32, B=1, H=8, E=64. Per mask, the forward + backward of
``attnkit.attention(..., backend="blockwise")`` (the fused tiles route) with its backward

* ``span`` — complete rows per query block (:mod:`attnkit.backends.blockwise.kernel.tiles_grad`);
* ``tile_loop`` — the tile loop's backward fed the kernel's lse (:mod:`attnkit.backends.blockwise.kernel.lse_grads`),
  what ran before, selected by making ``span_grads`` decline;

timed interleaved round by round (load drift hits both alike; medians of ``--reps`` rounds after a
warm-up round), the forward and the backward apart, and the largest difference between the two
paths' gradients. SDPA with the dense bool mask (forward + backward) is timed beside them at
``--n`` (its mask alone is n² bytes), as the rival a user would otherwise reach for.

Run:  PYTHONPATH=src python benchmarks/tiles_backward.py [--n 8192] [--reps 3]
Saves benchmarks/results/tiles_backward.json (with the 1-minute load average and the CPU's flags).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: the shared helpers
from common import cpu_flags, record  # noqa: E402

import attnkit  # noqa: E402
from attnkit import masks as M  # noqa: E402
from attnkit.backends.blockwise.routes import tiles as fused_function  # noqa: E402  (the tiles route's module)

RESULTS = Path(__file__).resolve().parent / "results"
B, H, E = 1, 8, 64


def _masks(n: int) -> dict:
    return {"document_8": M.document((torch.arange(n) * 8 // n).unsqueeze(0)),
            "chunked_1024": M.chunked(1024),
            "prefix_lm_half": M.prefix_lm(n // 2)}


def _step(q, k, v, dout, mask, sink: dict):
    """Forward then backward; their milliseconds and the gradients go into ``sink``."""
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    t0 = time.perf_counter()
    out = attnkit.attention(*leaves, mask=mask, backend="blockwise").out
    t1 = time.perf_counter()
    grads = torch.autograd.grad(out, leaves, dout)
    t2 = time.perf_counter()
    sink.setdefault("fwd", []).append((t1 - t0) * 1e3)
    sink.setdefault("bwd", []).append((t2 - t1) * 1e3)
    sink["grads"] = grads


def _sdpa_step(q, k, v, dout, dense, sink: dict):
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    t0 = time.perf_counter()
    out = F.scaled_dot_product_attention(*leaves, attn_mask=dense)
    t1 = time.perf_counter()
    torch.autograd.grad(out, leaves, dout)
    t2 = time.perf_counter()
    sink.setdefault("fwd", []).append((t1 - t0) * 1e3)
    sink.setdefault("bwd", []).append((t2 - t1) * 1e3)


def run(n: int, reps: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    q, k, v, dout = (torch.randn(B, H, n, E, generator=g) for _ in range(4))
    real = fused_function.span_grads
    rows = []
    for name, mask in _masks(n).items():
        sinks = {"span": {}, "tile_loop": {}, "sdpa_dense_mask": {}}
        dense = mask.materialize(n, n)  # (1, 1, n, n) bool, built once outside the timed calls
        for rnd in range(reps + 1):  # round 0 warms up
            for impl, sink in sinks.items():
                if impl == "sdpa_dense_mask":
                    _sdpa_step(q, k, v, dout, dense, sink)
                    continue
                fused_function.span_grads = real if impl == "span" else (lambda *a, **kw: None)
                try:
                    _step(q, k, v, dout, mask, sink)
                finally:
                    fused_function.span_grads = real
            if rnd == 0:
                for sink in sinks.values():
                    sink["fwd"].clear()
                    sink["bwd"].clear()
        diff = max(float((a - b).abs().max()) for a, b in zip(sinks["span"]["grads"], sinks["tile_loop"]["grads"]))
        for impl, sink in sinks.items():
            row = {"mask": name, "n": n, "impl": impl, "reps": reps,
                   "fwd_ms": statistics.median(sink["fwd"]), "bwd_ms": statistics.median(sink["bwd"]),
                   "fwd_times_ms": sink["fwd"], "bwd_times_ms": sink["bwd"], "loadavg_1min": os.getloadavg()[0]}
            row["fwd_bwd_ms"] = row["fwd_ms"] + row["bwd_ms"]
            if impl == "span":
                row["max_grad_diff_vs_tile_loop"] = diff
            rows.append(row)
            print(f"{name} {impl}: fwd {row['fwd_ms']:.0f} ms, bwd {row['bwd_ms']:.0f} ms", flush=True)
        base = next(r for r in rows if r["mask"] == name and r["impl"] == "tile_loop")
        for r in rows:
            if r["mask"] == name:
                r["bwd_speedup_vs_tile_loop"] = base["bwd_ms"] / r["bwd_ms"]
                r["fwd_bwd_speedup_vs_tile_loop"] = base["fwd_bwd_ms"] / r["fwd_bwd_ms"]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS / "tiles_backward.json")
    a = ap.parse_args()
    torch.set_num_threads(1)
    rows = run(a.n, a.reps)
    res = {"what": __doc__.splitlines()[0], "torch": torch.__version__, "threads": 1, "B": B, "H": H, "E": E,
           "cpu": cpu_flags(), "loadavg_at_save": os.getloadavg()[0], "rows": rows}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    record(a.out, res)
    print("saved", a.out)


if __name__ == "__main__":
    main()
