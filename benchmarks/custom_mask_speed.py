"""A custom window predicate (a plain FlexAttention ``mask_mod``) against the built-in ``masks.sliding_window``.

The same causal window of ``W`` keys (``--windows``, default 256 and 1024), two ways, through ``attnkit.attention`` with backend ``auto``:

* ``builtin`` — ``mask=masks.sliding_window(left=W - 1)``: analytic tile states, a banded fused path;
* ``custom``  — ``mask=lambda b, h, q_idx, kv_idx: (kv_idx <= q_idx) & (q_idx - kv_idx < W)``, the same
  function object every call, as a model's layers reuse it: its tile map and the additive masks of
  its partly masked segments are evaluated once per shape and cached (:mod:`attnkit.core.tile_map`,
  :mod:`attnkit.backends.blockwise.kernel.segment_masks`), then its non-empty tiles run;
* ``sdpa``    — ``F.scaled_dot_product_attention`` with the dense bool mask built once (the yardstick).

Forward only (``torch.no_grad()``), B=1, H=8, E=64, fp32, one thread. The three variants are timed
interleaved, call by call, so load drift hits all alike; medians of ``--reps`` calls after one
warm-up each. ``custom_first_call_ms`` is one call with the caches cleared (the evaluation of the
predicate on the whole grid and of its partly masked segments' masks included). The 1- / 5- /
15-minute load averages are recorded before and after: the machine is shared, and a load above the
core count makes every number slower.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/custom_mask_speed.py [--before-src /tmp/before/src]
    # → benchmarks/results/custom_mask_speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import attnkit
from attnkit import masks
from common import interleaved_times, record

try:
    from attnkit.core import tile_map
except ImportError:  # an attnkit from before custom predicates had tile maps (--before-src)
    tile_map = None
try:
    from attnkit.backends.blockwise.kernel import segment_masks
except ImportError:
    try:  # the layout before routes/kernel/loop (--before-src)
        from attnkit.backends.blockwise import segment_masks
    except ImportError:  # an attnkit from before the fused tiles path cached its segment masks (--before-src)
        segment_masks = None

RESULTS = Path(__file__).resolve().parent / "results"
TARGET = 1.5  # the custom predicate must run within 1.5x of the built-in window


def measure(n: int, W: int, reps: int, sdpa: bool) -> dict:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 8, n, 64, generator=g) for _ in range(3))

    def window(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (q_idx - kv_idx < W)

    builtin = masks.sliding_window(left=W - 1)
    variants = {
        "builtin": lambda: attnkit.attention(q, k, v, mask=builtin),
        "custom": lambda: attnkit.attention(q, k, v, mask=window),
    }
    if sdpa:
        dense = builtin.materialize(n, n)  # (1, 1, n, n) bool, built once, outside the timing
        variants["sdpa"] = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=dense)
    with torch.no_grad():
        if tile_map is not None:
            tile_map.clear_cache()
        if segment_masks is not None:
            segment_masks.clear_cache()
        t0 = time.perf_counter()
        res_custom = variants["custom"]()
        first_ms = (time.perf_counter() - t0) * 1e3
        res_builtin = variants["builtin"]()
        max_diff = (res_custom.out - res_builtin.out).abs().max().item()
        reports = {"builtin": res_builtin.report.reason, "custom": res_custom.report.reason}
        times = {name: [s * 1e3 for s in t] for name, t in interleaved_times(variants, reps).items()}
    med = {name: statistics.median(t) for name, t in times.items()}
    ratio = med["custom"] / med["builtin"]
    row = {
        "n": n, "window": W, "median_ms": med, "times_ms": times,
        "custom_over_builtin": ratio, "within_target": ratio <= TARGET,
        "custom_first_call_ms": first_ms, "max_abs_diff_custom_vs_builtin": max_diff, "reports": reports,
    }
    if sdpa:
        row["speedup_vs_sdpa"] = {name: med["sdpa"] / med[name] for name in ("builtin", "custom")}
    print(f"n={n} W={W}: " + ", ".join(f"{name} {m:.1f} ms" for name, m in med.items())
          + f"; custom / builtin = {ratio:.3f}; first custom call {first_ms:.1f} ms")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--windows", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--no-sdpa", action="store_true", help="skip the dense-mask SDPA yardstick (it dominates the run time)")
    ap.add_argument("--out", type=Path, default=RESULTS / "custom_mask_speed.json")
    ap.add_argument("--before-src", type=Path, default=None,
                    help="the src/ folder of an earlier attnkit (git worktree add /tmp/before HEAD): the same cases are "
                         "measured there first, in a subprocess, without SDPA, and stored as 'before'")
    a = ap.parse_args()
    torch.set_num_threads(1)
    before = None
    if a.before_src is not None:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "before.json"
            env = {**os.environ, "PYTHONPATH": str(a.before_src), "OMP_NUM_THREADS": "1"}
            cmd = [sys.executable, __file__, "--n", str(a.n), "--reps", str(a.reps), "--no-sdpa", "--out", str(out), "--windows"]
            subprocess.run(cmd + [str(w) for w in a.windows], env=env, check=True)
            before = json.loads(out.read_text())
            before["src"] = str(a.before_src)
    load_before = os.getloadavg()
    rows = [measure(a.n, W, a.reps, not a.no_sdpa) for W in a.windows]
    res = {
        "what": "custom window predicate (plain mask_mod) vs masks.sliding_window, attnkit.attention backend auto, forward",
        "torch": torch.__version__, "threads": torch.get_num_threads(), "B": 1, "H": 8, "E": 64, "dtype": "float32",
        "reps": a.reps, "target": TARGET,
        "load_avg_before": list(load_before), "load_avg_after": list(os.getloadavg()), "cpu_count": os.cpu_count(),
        "tile_map_cache": tile_map.cache_info() if tile_map is not None else None,
        "segment_mask_cache": segment_masks.cache_info() if segment_masks is not None else None, "rows": rows,
    }
    if before is not None:
        res["before"] = before
    a.out.parent.mkdir(parents=True, exist_ok=True)
    record(a.out, res)
    print(f"load {load_before} -> {os.getloadavg()}; wrote {a.out}")


if __name__ == "__main__":
    main()
