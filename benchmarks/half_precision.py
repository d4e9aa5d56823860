"""Half-precision accuracy of each exact backend against a float64 reference.

Inputs: q, k, v ~ N(0, 10²), E = 64, L = S = 256 (logits q·k/√E have std ≈ 100), plus a
random output gradient. For each backend and dtype (bf16, fp16) it records the forward max abs
error of ``out`` and the backward max abs errors of dq, dk, dv, all against the ``reference``
backend run in float64 on the same (rounded) inputs. A second case is one query over one key:
the softmax is then constant 1, so dq and dk must be exactly 0; it records max |dq| and |dk|.

Usage (``--label`` names the column, so the same script measures before and after a change)::

    OMP_NUM_THREADS=1 python benchmarks/half_precision.py --label after \
        --out benchmarks/results/half_precision.json

The JSON maps label → backend → dtype → errors; an existing file is updated, other labels kept.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch

import attnkit

from common import record

BACKENDS = ("reference", "sdpa", "blockwise")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _grads(q, k, v, dout, backend, mask=None, bias=None):
    """out and (dq, dk, dv) of one backend, all returned in float64."""
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out = attnkit.attention(q, k, v, mask=mask, bias=bias, backend=backend).out
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout.to(out.dtype))
    return out.double(), (dq.double(), dk.double(), dv.double())


def _max(t: torch.Tensor) -> float:
    return float(t.detach().abs().max())


def measure(std: float = 10.0, E: int = 64, n: int = 256, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    B, H = 1, 4
    q0 = torch.randn(B, H, n, E, generator=g) * std
    k0 = torch.randn(B, H, n, E, generator=g) * std
    v0 = torch.randn(B, H, n, E, generator=g) * std
    dout0 = torch.randn(B, H, n, E, generator=g)
    q1, k1, v1 = (torch.randn(B, H, 1, E, generator=g) * std for _ in range(3))
    dout1 = torch.randn(B, H, 1, E, generator=g)
    res: dict = {}
    for name, dt in DTYPES.items():
        # the float64 truth is computed on the rounded half inputs: only the backend's arithmetic is measured
        q, k, v = (t.to(dt) for t in (q0, k0, v0))
        ref_out, ref_g = _grads(q.double(), k.double(), v.double(), dout0.to(dt).double(), "reference")
        for backend in BACKENDS:
            row = res.setdefault(backend, {})
            try:
                out, gr = _grads(q, k, v, dout0.to(dt), backend)
                one_q, one_k, one_v = (t.to(dt) for t in (q1, k1, v1))
                _, g1 = _grads(one_q, one_k, one_v, dout1.to(dt), backend)
            except Exception as e:  # a backend that refuses the dtype is recorded, not fatal
                row[name] = {"error": f"{type(e).__name__}: {e}"}
                continue
            # ALiBi (a bias built in the half dtype once moved sdpa's bf16 outputs by 0.1)
            alibi = attnkit.biases.ALiBi(H)
            ref_a, ref_ag = _grads(q.double(), k.double(), v.double(), dout0.to(dt).double(), "reference", bias=alibi)
            out_a, ga = _grads(q, k, v, dout0.to(dt), backend, bias=alibi)
            # at std 1 the output's own rounding is small, so a bias rounded to half shows (issue: 0.10 vs 0.007)
            q_s, k_s, v_s = (t.to(dt) for t in (q0 / std, k0 / std, v0 / std))
            ref_s, _ = _grads(q_s.double(), k_s.double(), v_s.double(), dout0.to(dt).double(), "reference", bias=alibi)
            out_s, _ = _grads(q_s, k_s, v_s, dout0.to(dt), backend, bias=alibi)
            row[name] = {
                "alibi_std1_forward_max_abs_err": _max(out_s - ref_s),
                "alibi_forward_max_abs_err": _max(out_a - ref_a),
                "alibi_dq_max_abs_err": _max(ga[0] - ref_ag[0]),
                "forward_max_abs_err": _max(out - ref_out),
                "dq_max_abs_err": _max(gr[0] - ref_g[0]),
                "dk_max_abs_err": _max(gr[1] - ref_g[1]),
                "dv_max_abs_err": _max(gr[2] - ref_g[2]),
                "one_key_max_abs_dq": _max(g1[0]),
                "one_key_max_abs_dk": _max(g1[1]),
            }
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--label", required=True, help="column name, e.g. before / after")
    ap.add_argument("--out", default="benchmarks/results/half_precision.json")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    res = measure(seed=args.seed)
    path = Path(args.out)
    data = json.loads(path.read_text()) if path.exists() else {}
    data.setdefault("meta", {}).update(
        {
            "inputs": "q,k,v ~ N(0, 10^2), E=64, L=S=256, B=1, H=4; one-key case L=S=1; truth: reference in float64 on the rounded inputs",
            "torch": torch.__version__,
            "platform": platform.platform(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "seed": args.seed,
        }
    )
    data[args.label] = {"attnkit_file": attnkit.__file__, "time_s": round(time.perf_counter() - t0, 1), "errors": res}
    path.parent.mkdir(parents=True, exist_ok=True)
    record(path, data)
    for backend, rows in res.items():
        for dt, r in rows.items():
            print(args.label, backend, dt, {k: (round(x, 5) if isinstance(x, float) else x) for k, x in r.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
