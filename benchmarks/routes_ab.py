"""Every blockwise route on this tree against the same route on an earlier checkout, interleaved.

One case per route (which path the blockwise backend takes for it, and which backend and path
``auto`` picks), float32, one thread, B=1, H=4, E=64, L = S = ``--n`` (the cached-prefix case:
L = n / 4): no mask (*dense*), causal, causal after a cached prefix, a sliding window of 128 keys
(*band*), a prefix-LM with n / 4 prefix keys, four documents (*tiles*), ALiBi under a causal mask
(*relative*), a log-distance custom bias (*custom*) and dropout 0.1 (the tile loop).

Each code runs in its own process (``PYTHONPATH`` = its src/; two attnkit versions cannot share
one), ``--rounds`` times, alternating which code goes first, so load drift on a shared machine
hits both alike; a worker times every case, forward and forward + backward, one warm-up then the
median of ``--reps`` calls. Per case and round, ``ratio = this tree / before``; the file keeps the
median ratio over rounds with its spread (min, max), each code's median milliseconds, and the
paths. Verdict per case: ``same path, estimate and choice`` when both codes ran the same blockwise
path, estimated the same blockwise time, bytes and path (what ``auto`` weighs) and ``auto`` chose
the same backend and path.

Run:  OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/routes_ab.py --before-src /path/to/old/src
      [--n 1024] [--rounds 6] [--reps 3]
Saves benchmarks/results/routes_refactor_verdicts.json (``--out FILE`` to keep another run apart).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: the shared helpers
from common import cpu_flags, record, time_calls  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
B, H, E = 1, 4, 64
CASES = ("dense", "causal", "causal_cached", "window", "prefix_lm", "document", "alibi_causal", "custom_bias", "dropout")


def _case(name: str, n: int):
    """(L, mask, bias, dropout_p) of a case."""
    import torch

    from attnkit import biases, masks as M

    slopes = torch.linspace(0.05, 0.5, H)

    def log_distance(b, h, q, kv):
        return -slopes[h] * torch.log1p((q - kv).abs().float())

    return {
        "dense": (n, None, None, 0.0),
        "causal": (n, M.causal(), None, 0.0),
        "causal_cached": (n // 4, M.causal(), None, 0.0),
        "window": (n, M.sliding_window(127, 0), None, 0.0),
        "prefix_lm": (n, M.prefix_lm(n // 4), None, 0.0),
        "document": (n, M.document((torch.arange(n) * 4 // n).unsqueeze(0)), None, 0.0),
        "alibi_causal": (n, M.causal(), biases.ALiBi(H), 0.0),
        "custom_bias": (n, None, biases.custom_bias(log_distance, depends_on=("h",)), 0.0),
        "dropout": (n, None, None, 0.1),
    }[name]


def _median_ms(fn, reps: int) -> float:
    fn()  # warm-up (the kernel's self-test, caches)
    return statistics.median(time_calls(fn, reps, "cpu"))


def worker(n: int, reps: int) -> dict:
    """Times and paths of every case on the attnkit this process imports."""
    import torch

    import attnkit
    from attnkit.backends import blockwise
    from attnkit.core.call import make_call

    torch.set_num_threads(1)
    rows = {}
    for name in CASES:
        L, mask, bias, p = _case(name, n)
        g = torch.Generator().manual_seed(0)
        q = torch.randn(B, H, L, E, generator=g)
        k, v = (torch.randn(B, H, n, E, generator=g) for _ in range(2))
        dout = torch.randn(B, H, L, E, generator=g)
        kw = dict(mask=mask, bias=bias, dropout_p=p)
        res = attnkit.attention(q, k, v, backend="blockwise", **kw)
        auto = attnkit.attention(q, k, v, **kw).report
        est = blockwise.estimate(make_call(q, k, v, **kw))  # what auto weighs for blockwise

        def fwd():
            return attnkit.attention(q, k, v, backend="blockwise", **kw)

        def fwdbwd():
            leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
            out = attnkit.attention(*leaves, backend="blockwise", **kw).out
            torch.autograd.grad(out, leaves, dout)

        rows[name] = {"path": res.report.reason.split("ran: ")[-1], "auto": f"{auto.backend}: {auto.reason.split('ran: ')[-1]}",
                      "estimate": f"{est['path']}: {est['time_s'] * 1e3:.4g} ms, {est['bytes'] / 2**20:.4g} MiB",
                      "forward_ms": _median_ms(fwd, reps), "forward_backward_ms": _median_ms(fwdbwd, reps)}
    return rows


def _run_worker(src: str, n: int, reps: int) -> dict:
    env = {**os.environ, "PYTHONPATH": src, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, __file__, "--worker", "--n", str(n), "--reps", str(reps)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _summary(runs: dict[str, list[dict]]) -> dict:
    """Per case: median ms per code, median ratio (this tree / before) over rounds with its range, verdict."""
    rows = {}
    for name in CASES:
        now, before = [r[name] for r in runs["this tree"]], [r[name] for r in runs["before"]]
        row = {key + tail: r[0][key] for key in ("path", "auto", "estimate") for tail, r in (("", now), ("_before", before))}
        for what in ("forward_ms", "forward_backward_ms"):
            ratios = [a[what] / b[what] for a, b in zip(now, before)]
            row[what] = statistics.median(a[what] for a in now)
            row[what + "_before"] = statistics.median(b[what] for b in before)
            row[what.replace("_ms", "_ratio")] = statistics.median(ratios)
            row[what.replace("_ms", "_ratio_range")] = [min(ratios), max(ratios)]
        same = all(row[key] == row[key + "_before"] for key in ("path", "auto", "estimate"))
        row["verdict"] = "same path, estimate and choice" if same else "changed"
        rows[name] = row
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before-src", help="src/ of the earlier checkout")
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=RESULTS / "routes_refactor_verdicts.json")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.n, args.reps)))
        return
    if not args.before_src or not (Path(args.before_src) / "attnkit").is_dir():
        raise SystemExit(f"--before-src must be a src/ folder holding attnkit/, got {args.before_src!r}")
    codes = {"this tree": str(ROOT / "src"), "before": args.before_src}
    runs: dict[str, list[dict]] = {c: [] for c in codes}
    load = [os.getloadavg()[0]]
    for r in range(args.rounds):
        order = list(codes) if r % 2 == 0 else list(reversed(codes))  # alternate which code goes first
        for code in order:
            runs[code].append(_run_worker(codes[code], args.n, args.reps))
        load.append(os.getloadavg()[0])
        print(f"round {r + 1}/{args.rounds} done, load {load[-1]:.1f}", flush=True)
    rows = _summary(runs)
    for name, row in rows.items():
        print(f"{name:14s} {row['verdict']:9s} fwd {row['forward_ratio']:.2f} fwd+bwd {row['forward_backward_ratio']:.2f}  {row['path']}")
    record(args.out, {"what": __doc__.splitlines()[0], "B": B, "H": H, "E": E, "n": args.n, "dtype": "float32",
                      "threads": 1, "rounds": args.rounds, "reps": args.reps, "before_src": args.before_src,
                      "loadavg_1min": load, "cpu": cpu_flags(), "rows": rows, "runs": runs})


if __name__ == "__main__":
    main()
