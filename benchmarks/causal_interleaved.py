"""Causal attention: ``attnkit.attention`` (backend ``auto``) against SDPA ``is_causal``, interleaved.

Both calls run the same fused kernel at these sizes, so what is measured is attnkit's own cost (the
choice of backend and the exactness checks) against run-to-run spread. Timing the two in separate
processes minutes apart (as ``flex_race.py`` does, for its memory figures) lets load drift decide
the ratio; here they alternate call by call in one process, so drift hits both alike. One thread,
fp32, B=1, H=8, E=64, L = S = n; one warm-up pair, then the median of ``--reps`` pairs.
``ratio = sdpa / auto`` (the goal: at least 0.97). Each row records the path ``auto`` reported,
the largest difference between the two outputs and the 1-minute load average.

Run:  PYTHONPATH=src python benchmarks/causal_interleaved.py [--n 4096 8192] [--reps 9]
Saves benchmarks/results/causal_interleaved.json (``--out FILE``: another machine's run, kept apart).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: the shared helpers
from common import cpu_flags, interleaved_times, record  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
B, H, E = 1, 8, 64


def _pairs(n: int, reps: int) -> dict:
    import torch
    import torch.nn.functional as F

    import attnkit
    from attnkit import masks

    g = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(B, H, n, E, generator=g) for _ in range(3))
    mask = masks.causal()
    last = {}  # each variant's latest result: the path auto reported, and the two outputs compared

    def auto():
        last["auto"] = attnkit.attention(q, k, v, mask=mask)

    def sdpa():
        last["sdpa"] = F.scaled_dot_product_attention(q, k, v, is_causal=True)

    t = interleaved_times({"auto": auto, "sdpa": sdpa}, reps)
    auto_ms, sdpa_ms = ([s * 1e3 for s in t[name]] for name in ("auto", "sdpa"))
    a, s = last["auto"], last["sdpa"]
    auto_med, sdpa_med = statistics.median(auto_ms), statistics.median(sdpa_ms)
    return {"case": f"causal_{n // 1024}k_fp32_fwd", "n": n, "reps": reps, "auto_ms": auto_med, "sdpa_causal_ms": sdpa_med,
            "ratio": sdpa_med / auto_med, "auto_times_ms": auto_ms, "sdpa_times_ms": sdpa_ms,
            "path": f"{a.report.backend}: {a.report.reason}",
            "max_abs_diff": (a.out - s).abs().max().item(), "loadavg_1min": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> dict:
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="+", default=[4096, 8192])
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--out", type=Path, default=RESULTS / "causal_interleaved.json",
                   help="where to save (another machine's run: its own file)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for n in args.n:
        rows.append(_pairs(n, args.reps))
        r = rows[-1]
        print(f"n={n}: auto {r['auto_ms']:.1f} ms, SDPA is_causal {r['sdpa_causal_ms']:.1f} ms, ratio {r['ratio']:.3f} "
              f"(load {r['loadavg_1min']:.2f}; {r['path']})")
    out = {"what": __doc__.splitlines()[0], "torch": torch.__version__, "threads": 1, "B": B, "H": H, "E": E,
           "cpu": cpu_flags(), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record(args.out, out)
    return out


if __name__ == "__main__":
    main()
