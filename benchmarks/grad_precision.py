"""Float32 gradient precision of attention sinks and of T5's relative-bias table, per backend, as a
ratio to a plain float32 softmax's own error (both against the same computation in float64).

    PYTHONPATH=src python benchmarks/grad_precision.py --label after

Plain softmax: the dense scores (plus the sink as one more column with a zero value, or plus the
materialized T5 bias) through ``softmax`` by autograd, in float32. Ratios per seed (3 seeds for
sinks, 6 for T5) and summed over seeds; merged into benchmarks/results/grad_precision.json under
``--label`` (run it with another checkout on PYTHONPATH for a "before").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import attnkit
from attnkit import biases, masks
from common import record

BACKENDS = ("reference", "sdpa", "blockwise", "auto")
OUT = Path(__file__).parent / "results" / "grad_precision.json"


def _plain_sinks(q, k, v, sinks, dout):
    sc = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5  # (B, H, L, S)
    col = sinks.view(1, -1, 1, 1).expand(*sc.shape[:-1], 1)
    w = torch.cat([sc, col], -1).softmax(-1)[..., :-1]
    return torch.autograd.grad(((w @ v) * dout).sum(), sinks)[0]


def _sink_grad(backend, q, k, v, sinks, dout):
    out = attnkit.attention(q, k, v, sinks=sinks, backend=backend).out
    return torch.autograd.grad((out * dout).sum(), sinks)[0]


def sinks_rows(seeds: int = 3) -> list[dict]:
    rows = []
    for sink in (-30.0, -20.0, -10.0, 0.0, 5.0):
        for seed in range(seeds):
            g = torch.Generator().manual_seed(seed)
            q, k, v = (torch.randn(1, 2, 32, 16, generator=g, dtype=torch.float64) for _ in range(3))
            s = sink + torch.randn(2, generator=g, dtype=torch.float64)
            dout = torch.randn(1, 2, 32, 16, generator=g, dtype=torch.float64)
            exact = _plain_sinks(q, k, v, s.clone().requires_grad_(), dout)
            f32 = [t.float() for t in (q, k, v)]
            plain = float((_plain_sinks(*f32, s.float().requires_grad_(), dout.float()).double() - exact).abs().max())
            row = {"sink": sink, "seed": seed, "plain_error": plain}
            for be in BACKENDS:
                got = _sink_grad(be, *f32, s.float().requires_grad_(), dout.float()).double()
                row[be] = float((got - exact).abs().max())
            rows.append(row)
    return rows


def _t5_grad(bias, q, k, v, dout, backend, dtype):
    bias.to(dtype)
    bias.table.grad = None
    if backend == "plain":
        sc = (q.to(dtype) @ k.to(dtype).transpose(-1, -2)) * q.shape[-1] ** -0.5
        sc = sc + bias.materialize(q.shape[2], k.shape[2], dtype=dtype)
        sc = sc.masked_fill(~masks.causal().materialize(q.shape[2], k.shape[2]), float("-inf"))
        out = sc.softmax(-1) @ v.to(dtype)
    else:
        out = attnkit.attention(q.to(dtype), k.to(dtype), v.to(dtype), bias=bias, mask=masks.causal(), backend=backend).out
    (out * dout.to(dtype)).sum().backward()
    grad = bias.table.grad.double().clone()
    bias.double()
    return grad


def t5_rows(seeds: int = 6) -> list[dict]:
    rows = []
    for std in (0.02, 3.0, 10.0):
        for seed in range(seeds):
            torch.manual_seed(seed)
            bias = biases.T5RelativeBias(4, dtype=torch.float64)
            with torch.no_grad():
                bias.table.normal_(0, std)
            g = torch.Generator().manual_seed(seed)
            q, k, v, dout = (torch.randn(1, 4, 128, 32, generator=g, dtype=torch.float64) for _ in range(4))
            exact = _t5_grad(bias, q, k, v, dout, "plain", torch.float64)
            row = {"table_std": std, "seed": seed,
                   "plain_error": float((_t5_grad(bias, q, k, v, dout, "plain", torch.float32) - exact).abs().max())}
            for be in BACKENDS:
                row[be] = float((_t5_grad(bias, q, k, v, dout, be, torch.float32) - exact).abs().max())
            rows.append(row)
    return rows


def summary(rows: list[dict], key: str) -> dict:
    """Per setting and backend: the largest single-seed ratio and the ratio of the seed sums."""
    out = {}
    for val in sorted({r[key] for r in rows}):
        part = [r for r in rows if r[key] == val]
        plain = sum(r["plain_error"] for r in part)
        out[str(val)] = {be: {"max_seed_ratio": max(r[be] / r["plain_error"] for r in part),
                              "summed_ratio": sum(r[be] for r in part) / plain} for be in BACKENDS}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    sinks, t5 = sinks_rows(), t5_rows()
    result = {"sinks": {"by_sink": summary(sinks, "sink"), "rows": sinks},
              "t5_table": {"by_table_std": summary(t5, "table_std"), "rows": t5}}
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    data[args.label] = result
    record(OUT, data)
    for name, part in (("sinks", result["sinks"]["by_sink"]), ("t5", result["t5_table"]["by_table_std"])):
        for val, per in part.items():
            cells = "  ".join(f"{be} {d['max_seed_ratio']:.1f}/{d['summed_ratio']:.1f}" for be, d in per.items())
            print(f"{args.label} {name} {val}: (max seed / summed ratio) {cells}")


if __name__ == "__main__":
    main()
