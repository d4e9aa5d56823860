"""Prefix-LM on the fused kernel: its own route against the per-block tile route, interleaved.

The blockwise backend serves a prefix-LM mask with one prefix length by
:mod:`attnkit.backends.blockwise.routes.prefix_lm` (the prefix rows in one unmasked call, the other
rows as one causal call); before that route, such a mask took the tile route
(:mod:`attnkit.backends.blockwise.kernel.tiles`: 256-query blocks, a FULL and a masked segment each,
merged by log-sum-exp), which still serves prefixes given per batch row. Both are timed here on the
same inputs, call by call in turn in one process (``timing.interleaved_times``), forward
(``torch.no_grad``) and forward + backward; the tile route is reached by switching the prefix-LM
route off for its calls. Each row records the max |difference| between the two outputs, the time
per allowed (query, key) pair and the speed-up. One thread, fp32, B=1, H=8, E=64, L = S = n,
prefix 1,024 keys (as ``flex_race.py``'s prefix-LM case).

Run:  OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/prefix_lm_route.py [--n 4096 16384] [--reps 3] [--out FILE]
Saves benchmarks/results/prefix_lm_route.json (``--out FILE``: another machine's run, kept apart).
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
B, H, E, PREFIX = 1, 8, 64, 1024


def _row(n: int, mode: str, reps: int) -> dict:
    import torch

    import attnkit
    from attnkit import masks
    from attnkit.backends.blockwise.routes import prefix_lm as fused_function  # the prefix-LM route's module

    route_of = fused_function.prefix_lm_of
    g = torch.Generator().manual_seed(n)
    back = mode == "fwdbwd"
    q, k, v = (torch.randn(B, H, n, E, generator=g).requires_grad_(back) for _ in range(3))
    dout = torch.randn(B, H, n, E, generator=g)
    mask = masks.prefix_lm(PREFIX)
    reasons = {}

    def call(name):
        def run():
            fused_function.prefix_lm_of = route_of if name == "prefix_lm_route" else (lambda *a: None)
            try:
                with torch.enable_grad() if back else torch.no_grad():
                    res = attnkit.attention(q, k, v, mask=mask, backend="blockwise")
                    if back:
                        torch.autograd.grad(res.out, (q, k, v), dout)
            finally:
                fused_function.prefix_lm_of = route_of
            reasons[name] = res.report.reason
            return res.out.detach()
        return run

    variants = {name: call(name) for name in ("prefix_lm_route", "tile_route")}
    diff = float((variants["prefix_lm_route"]() - variants["tile_route"]()).abs().max())
    times = interleaved_times(variants, reps)
    med = {name: statistics.median(ts) * 1e3 for name, ts in times.items()}
    pairs = sum(min(max(PREFIX, i + 1), n) for i in range(n)) * B * H  # row i sees keys [0, max(PREFIX, i + 1))
    return {"n": n, "mode": mode, "reps": reps, "median_ms": med,
            "times_ms": {name: [t * 1e3 for t in ts] for name, ts in times.items()},
            "ns_per_pair": {name: ms * 1e6 / pairs for name, ms in med.items()},
            "speedup": med["tile_route"] / med["prefix_lm_route"], "max_abs_diff": diff,
            "paths": reasons, "loadavg_1min": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> dict:
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="+", default=[4096, 16384])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", type=Path, default=RESULTS / "prefix_lm_route.json")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for n in args.n:
        for mode in ("fwd", "fwdbwd"):
            rows.append(_row(n, mode, args.reps))
            r = rows[-1]
            print(f"n={n} {mode}: prefix-LM route {r['median_ms']['prefix_lm_route']:.0f} ms, tile route "
                  f"{r['median_ms']['tile_route']:.0f} ms, {r['speedup']:.2f}x (load {r['loadavg_1min']:.2f})", flush=True)
    out = {"what": __doc__.splitlines()[0], "torch": torch.__version__, "threads": 1, "B": B, "H": H, "E": E,
           "prefix": PREFIX, "cpu": cpu_flags(), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record(args.out, out)
    return out


if __name__ == "__main__":
    main()
