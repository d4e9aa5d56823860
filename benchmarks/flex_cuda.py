"""attnkit's optional ``flex`` backend on a CUDA GPU: correct (forward and backward) and how fast,
against SDPA in the same run.

Parity (small shapes, float32 and bfloat16, GQA): the flex backend's output and gradients against the
float64 reference backend, beside the error of the reference backend run in the same dtype (the
reference's own error), for a causal mask, a sliding window, a custom document predicate that
captures its ids, ALiBi and a softcap score_mod.

Speed (B=1, H=8, E=64): per case, ``flex`` (``attnkit.attention(..., backend="flex")``: compiled
FlexAttention built from attnkit's mask and bias), ``sdpa`` (``F.scaled_dot_product_attention`` with
the dense mask or bias built once outside the timing, or ``is_causal``), ``attnkit_sdpa``
(``backend="sdpa"``: attnkit's SDPA route, which builds the mask or bias per call, in float32 for
a bias), ``auto`` (what ``attnkit.attention`` picks without flex registered) and ``auto_with_flex``
(what it picks with flex registered, as on a CUDA machine by default). Warm-up calls first
(FlexAttention's first call compiles: ``first_call_ms``), then the median of ``--reps`` calls timed
with CUDA events (``common.time_calls``); ``speedup_vs_sdpa`` = median(sdpa) / median(impl).

    PYTHONPATH=src python benchmarks/flex_cuda.py [--quick] [--reps 10]   # → benchmarks/results/flex_cuda.json

Without a GPU it runs on the CPU (forward only, flex compiled for CPU inference): with ``--quick``,
n = 2048 / 1024, ``--out benchmarks/results/flex_cpu_quick.json`` is the CPU check of ``auto``'s
choice with flex registered.
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

import attnkit
from attnkit import biases, masks
from attnkit.backends import flex

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: the shared helpers
from common import first_call, record, time_calls  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def _doc_mask(n: int, doc: int, dev):
    ids = (torch.arange(n, device=dev) // doc)  # (n,) document ids, captured by the predicate

    def same_doc(b, h, q_idx, kv_idx):
        return ids[q_idx] == ids[kv_idx]

    return same_doc


def _softcap(score, b, h, q_idx, kv_idx):
    return 20.0 * torch.tanh(score / 20.0)


def parity(dev, dtypes, backward: bool) -> list[dict]:
    rows = []
    g = torch.Generator().manual_seed(0)
    B, H, Hkv, L, E = 2, 8, 2, 384, 64
    cases = {
        "causal": (masks.causal(), None),
        "window_alibi": (masks.sliding_window(left=100), biases.ALiBi(H).to(dev)),
        "custom_doc_softcap": (_doc_mask(L, 96, dev), _softcap),
    }
    base = [torch.randn(B, h, L, E, generator=g, dtype=torch.float64) for h in (H, Hkv, Hkv)]
    dout = torch.randn(B, H, L, E, generator=g, dtype=torch.float64).to(dev)
    for name, (mask, bias) in cases.items():
        for dt in dtypes:
            def run(backend, dtype, grad):
                qkv = [t.to(dev, dtype).requires_grad_(grad) for t in base]
                with torch.set_grad_enabled(grad):
                    out = attnkit.attention(*qkv, mask=mask, bias=bias, backend=backend).out
                    if grad:
                        out.backward(dout.to(dtype))
                return out.detach().double(), [t.grad.double() for t in qkv] if grad else []

            truth, tgrads = run("reference", torch.float64, backward)
            got, grads = run("flex", dt, backward)
            ref, rgrads = run("reference", dt, backward)
            err = lambda a, b: (a - b).abs().max().item()  # noqa: E731
            row = {"case": name, "dtype": str(dt).replace("torch.", ""), "out_err": err(got, truth), "reference_out_err": err(ref, truth)}
            for n_, a, r, t in zip("qkv", grads, rgrads, tgrads):
                row[f"d{n_}_err"], row[f"reference_d{n_}_err"] = err(a, t), err(r, t)
            rows.append(row)
            print(row)
    return rows


def _time(fn, reps: int, dev) -> tuple[float, float, list[float]]:
    first, _ = first_call(fn, dev)
    fn()  # a second warm-up
    times = time_calls(fn, reps, dev)
    return statistics.median(times), first, times


def speed(dev, quick: bool, reps: int) -> list[dict]:
    n16, n8 = (2048, 1024) if quick else (16384, 8192)
    cases = [  # name, n, dtype, mode, mask, bias, sdpa kind
        ("window256_bf16_fwd", n16, torch.bfloat16, "fwd", masks.sliding_window(left=255), None),
        ("window256_bf16_fwdbwd", n16, torch.bfloat16, "fwdbwd", masks.sliding_window(left=255), None),
        ("window256_fp32_fwd", n16, torch.float32, "fwd", masks.sliding_window(left=255), None),
        ("custom_doc1k_bf16_fwd", n16, torch.bfloat16, "fwd", "doc", None),
        ("causal_bf16_fwd", n8, torch.bfloat16, "fwd", masks.causal(), None),
        ("alibi_causal_bf16_fwd", n8, torch.bfloat16, "fwd", masks.causal(), biases.ALiBi(8)),
    ]
    rows = []
    for name, n, dt, mode, mask, bias in cases:
        if mode == "fwdbwd" and dev.type != "cuda":
            continue
        if mask == "doc":
            mask = _doc_mask(n, 1024, dev)
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, 8, n, 64, generator=g).to(dev, dt).requires_grad_(mode == "fwdbwd") for _ in range(3))
        m = masks.as_mask(mask)
        if isinstance(m, masks.CausalMask) and bias is None:
            sdpa_kw = {"is_causal": True}
        else:
            allowed = m.materialize(n, n, device=dev)
            add = torch.zeros(1, 1, n, n, device=dev, dtype=dt).masked_fill_(~allowed, float("-inf"))
            if bias is not None:
                add = add + bias.to(dev).materialize(n, n, device=dev, dtype=dt)
            sdpa_kw = {"attn_mask": add}
        bias_dev = bias.to(dev) if bias is not None else None

        def step(f):
            def go():
                out = f()
                if mode == "fwdbwd":
                    out.sum().backward()
            return go

        impls = {
            "sdpa": step(lambda: F.scaled_dot_product_attention(q, k, v, **sdpa_kw)),
            "flex": step(lambda: attnkit.attention(q, k, v, mask=mask, bias=bias_dev, backend="flex").out),
            "attnkit_sdpa": step(lambda: attnkit.attention(q, k, v, mask=mask, bias=bias_dev, backend="sdpa").out),
            "auto": step(lambda: attnkit.attention(q, k, v, mask=mask, bias=bias_dev).out),
            "auto_with_flex": step(lambda: attnkit.attention(q, k, v, mask=mask, bias=bias_dev).out),
        }
        with torch.set_grad_enabled(mode == "fwdbwd"):
            flex.disable()
            auto_choice = attnkit.attention(q, k, v, mask=mask, bias=bias_dev).report
            flex.enable()
            with_flex = attnkit.attention(q, k, v, mask=mask, bias=bias_dev).report
            res = {}
            for impl, fn in impls.items():
                if impl == "auto":
                    flex.disable()
                med, first, times = _time(fn, reps, dev)
                flex.enable()
                res[impl] = {"median_ms": med, "first_call_ms": first, "times_ms": times}
        row = {"case": name, "n": n, "dtype": str(dt).replace("torch.", ""), "mode": mode,
               "auto_without_flex": auto_choice.backend, "auto_with_flex_choice": with_flex.backend,
               "auto_with_flex_reason": with_flex.reason}
        for impl, r in res.items():
            row[impl] = {**r, "speedup_vs_sdpa": res["sdpa"]["median_ms"] / r["median_ms"]}
        rows.append(row)
        print(name, {impl: round(r["median_ms"], 3) for impl, r in res.items()}, "auto:", auto_choice.backend,
              "with flex:", with_flex.backend)
        del sdpa_kw
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", type=Path, default=RESULTS / "flex_cuda.json")
    a = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    # every case compiles FlexAttention anew (another mask_mod / score_mod / shape); the default limit
    # of recompiles per function would send the later cases to FlexAttention's unfused eager path
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.accumulated_recompile_limit = 256
    flex.enable()
    res = {"what": __doc__.split("\n")[0], "torch": torch.__version__,
           "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu", "B": 1, "H": 8, "E": 64,
           "reps": a.reps, "quick": a.quick}
    t0 = time.perf_counter()
    res["parity"] = parity(dev, (torch.float32, torch.bfloat16) if dev.type == "cuda" else (torch.float32,), dev.type == "cuda")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    record(a.out, res)
    res["speed"] = speed(dev, a.quick, a.reps)
    res["seconds"] = time.perf_counter() - t0
    res["loadavg_1min"] = os.getloadavg()[0]  # a shared machine: how busy it was
    record(a.out, res)
    print(f"wrote {a.out} in {res['seconds']:.0f} s")


if __name__ == "__main__":
    main()
