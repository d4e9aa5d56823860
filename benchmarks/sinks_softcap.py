"""What attention sinks and logit soft-capping cost, against SDPA's plain causal attention in the same run.

Sinks are applied once per call from the backend's lse (``out · sigmoid(lse − sink)``,
:mod:`attnkit.core.sinks`), so their cost on a backend is the backend's plain cost plus O(B·H·L)
work; in training the lse gradient also has to flow back (on blockwise's fused route a gradient on
lse re-runs the tile loop). The cap is a score modifier (``cap · tanh(s / cap)``) that SDPA cannot
take, so it runs on the blockwise tile loop (or the reference). Timed per case, interleaved call by
call so that load on a shared machine hits every variant alike, medians of ``--runs`` calls:

* ``sdpa_plain``  — SDPA, causal, no sink, no cap: the baseline every ratio divides by;
* ``eager_sinks`` — the sink softmax as gpt-oss's eager code writes it in PyTorch (the (L, S + 1)
  logits with the sink concatenated, softmax, the column dropped): what a model runs without attnkit;
* ``auto_sinks``, ``blockwise_sinks``, ``blockwise_plain``, ``reference_sinks`` — attnkit with and without sinks;
* ``auto_softcap``, ``blockwise_softcap``, ``blockwise_alibi_softcap`` — soft-capping (cap 50) alone and after ALiBi.

``paired_ratio_to_sdpa_plain`` is the median over rounds of each round's time over SDPA's in the same
round, and ``sinks_over_plain_blockwise`` the same pairing of blockwise with and without sinks: on a
machine shared with other work, a slow stretch then slows both sides of a ratio.

B=1, H=8, E=64, float32, causal, one thread; forward (no grad) and forward+backward.

    OMP_NUM_THREADS=1 python benchmarks/sinks_softcap.py    # → benchmarks/results/sinks_softcap.json
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import attnkit
from attnkit import biases, masks
from common import record

RESULTS = Path(__file__).resolve().parent / "results"
B, H, E = 1, 8, 64


def eager_sinks(q, k, v, sinks):
    """gpt-oss's eager attention, causal: logits with the sink as one more column, softmax, column dropped."""
    L, S = q.shape[2], k.shape[2]
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (B, H, L, S)
    causal = torch.ones(L, S, dtype=torch.bool, device=q.device).tril(S - L)
    logits = logits.masked_fill(~causal, float("-inf"))
    col = sinks.view(1, -1, 1, 1).expand(q.shape[0], -1, L, 1)
    probs = torch.softmax(torch.cat([logits, col], -1), -1)[..., :-1]
    return probs @ v


def variants(q, k, v, sinks, n):
    causal = masks.causal()
    cap, alibi = biases.softcap(50.0), biases.ALiBi(H)
    out = {
        "sdpa_plain": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "eager_sinks": lambda: eager_sinks(q, k, v, sinks),
        "auto_sinks": lambda: attnkit.attention(q, k, v, mask=causal, sinks=sinks).out,
        "blockwise_sinks": lambda: attnkit.attention(q, k, v, mask=causal, sinks=sinks, backend="blockwise").out,
        "blockwise_plain": lambda: attnkit.attention(q, k, v, mask=causal, backend="blockwise").out,
        "auto_softcap": lambda: attnkit.attention(q, k, v, mask=causal, bias=cap).out,
        "blockwise_softcap": lambda: attnkit.attention(q, k, v, mask=causal, bias=cap, backend="blockwise").out,
        "blockwise_alibi_softcap": lambda: attnkit.attention(q, k, v, mask=causal, bias=[alibi, cap], backend="blockwise").out,
    }
    if n <= 2048:  # the reference materialises several (B, H, L, S) float32 tensors
        out["reference_sinks"] = lambda: attnkit.attention(q, k, v, mask=causal, sinks=sinks, backend="reference").out
    return out


def measure(n: int, backward: bool, runs: int) -> dict:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, n, E, generator=g).requires_grad_(backward) for _ in range(3))
    sinks = torch.randn(H, generator=g).requires_grad_(backward)
    fns = variants(q, k, v, sinks, n)
    chosen = {
        "auto_sinks": attnkit.attention(q, k, v, mask=masks.causal(), sinks=sinks).report.backend,
        "auto_softcap": attnkit.attention(q, k, v, mask=masks.causal(), bias=biases.softcap(50.0)).report.backend,
    }

    def call(f):
        if backward:
            f().sum().backward()
        else:
            with torch.no_grad():
                f()

    for f in fns.values():  # warm-up
        call(f)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(runs):
        for name, f in fns.items():
            t0 = time.perf_counter()
            call(f)
            times[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    base = med["sdpa_plain"]

    def paired(a: str, b: str) -> float:
        # the median over rounds of one round's a / b: load that lasts a round cancels out
        return statistics.median(x / y for x, y in zip(times[a], times[b]))

    return {
        "n": n, "pass": "fwd+bwd" if backward else "fwd", "runs": runs, "auto_chose": chosen,
        "median_ms": med, "ratio_to_sdpa_plain": {name: m / base for name, m in med.items()},
        "paired_ratio_to_sdpa_plain": {name: paired(name, "sdpa_plain") for name in times},
        "sinks_over_plain_blockwise": paired("blockwise_sinks", "blockwise_plain"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--runs", type=int, default=7, help="timed calls per variant and case")
    ap.add_argument("--out", type=Path, default=RESULTS / "sinks_softcap.json")
    a = ap.parse_args()
    torch.set_num_threads(1)
    rows = []
    for n in a.sizes:
        for backward in (False, True):
            r = measure(n, backward, a.runs)
            rows.append(r)
            print(f"n={n} {r['pass']}: " + ", ".join(f"{k} {v:.1f} ms ({r['paired_ratio_to_sdpa_plain'][k]:.2f}x)"
                                                   for k, v in r["median_ms"].items())
                  + f"; blockwise sinks/plain {r['sinks_over_plain_blockwise']:.3f}", flush=True)
    meta = {"torch": torch.__version__, "threads": 1, "dtype": "float32", "B": B, "H": H, "E": E, "mask": "causal",
            "machine": platform.machine(), "processor": platform.processor() or platform.machine()}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    record(a.out, {"meta": meta, "rows": rows})
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
