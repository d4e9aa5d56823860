"""attnkit on a CUDA GPU against PyTorch's SDPA and compiled FlexAttention, same run, same inputs.

The CPU race (``flex_race.py``) asks whether attnkit's exact masked attention keeps up with the
fused kernels on a CPU; this script asks the same where a CUDA device exists. Per case and
implementation:

* time: warm-up calls (for FlexAttention the first one compiles; its time is reported apart as
  ``first_call_ms``), then the median of ``--reps`` calls timed with CUDA events;
* memory: ``torch.cuda.max_memory_allocated`` during one call minus what was allocated before it
  (the inputs and, for fwd+bwd, nothing else kept), in MiB;
* error: the largest absolute difference from a float32 SDPA run with the same dense mask or bias
  (built once, outside the timed calls), beside SDPA's own error in the case's dtype, so a fast
  wrong answer cannot hide.

Implementations: ``sdpa_mask`` (dense bool mask or float bias), ``sdpa_causal`` (``is_causal``,
causal cases with L == S), ``flex`` (``torch.compile(flex_attention)`` with ``create_block_mask``
and, for ALiBi, a ``score_mod``), ``attnkit_auto`` (its choice among the registered backends,
attnkit's ``flex`` included on a CUDA machine) and ``attnkit_blockwise``. Timer: ``common.time_calls``.

Run:  PYTHONPATH=src python benchmarks/gpu_race.py [--quick] [--reps 10] [--out PATH] [--budget-s 420]
Saves benchmarks/results/gpu_race.json by default, row by row, so a run cut short keeps its rows.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: the shared helpers
from common import first_call, record, time_calls  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
B, H, E = 1, 8, 64
WINDOW = 256
DOC = 1024  # document length of the document-mask case

# case: (mask kind, L, S, dtype, mode, implementations); the first implementation is the ratio baseline
CASES = {
    "window256_16k_bf16_fwd": ("window", 16384, 16384, "bfloat16", "fwd",
                               ["sdpa_mask", "flex", "attnkit_auto", "attnkit_blockwise"]),
    "window256_16k_bf16_fwdbwd": ("window", 16384, 16384, "bfloat16", "fwdbwd",
                                  ["sdpa_mask", "flex", "attnkit_auto", "attnkit_blockwise"]),
    "window256_16k_fp32_fwd": ("window", 16384, 16384, "float32", "fwd",
                               ["sdpa_mask", "flex", "attnkit_auto", "attnkit_blockwise"]),
    "causal_8k_bf16_fwdbwd": ("causal", 8192, 8192, "bfloat16", "fwdbwd",
                              ["sdpa_causal", "flex", "attnkit_auto", "attnkit_blockwise"]),
    "causal_prefix_2k_8k_bf16_fwd": ("causal", 2048, 8192, "bfloat16", "fwd",
                                     ["sdpa_mask", "flex", "attnkit_auto", "attnkit_blockwise"]),
    "document1k_16k_bf16_fwd": ("document", 16384, 16384, "bfloat16", "fwd",
                                ["sdpa_mask", "flex", "attnkit_auto", "attnkit_blockwise"]),
    "alibi_8k_bf16_fwd": ("alibi", 8192, 8192, "bfloat16", "fwd",
                          ["sdpa_mask", "flex", "attnkit_auto", "attnkit_blockwise"]),
}


def _attnkit_mask_bias(kind: str, L: int, S: int, device):
    from attnkit import biases as Bi
    from attnkit import masks as M

    if kind == "window":
        return M.sliding_window(WINDOW - 1, 0), None
    if kind == "causal":
        return M.causal(), None  # bottom-right: a query sees the cached prefix
    if kind == "document":
        ids = torch.arange(L, device=device) // DOC
        return M.document(ids), None
    if kind == "alibi":
        return M.causal(), Bi.ALiBi(H)
    raise ValueError(f"kind must be window, causal, document or alibi, got {kind!r}")


def _flex_mods(kind: str, L: int, S: int, device):
    """(mask_mod, score_mod) for FlexAttention, written from the same definitions as attnkit's."""
    off = S - L
    if kind == "window":
        def mask_mod(b, h, qi, ki):
            return (ki <= qi + off) & (ki >= qi + off - (WINDOW - 1))
        return mask_mod, None
    if kind in ("causal", "alibi"):
        def mask_mod(b, h, qi, ki):
            return ki <= qi + off
        if kind == "causal":
            return mask_mod, None
        from attnkit import biases as Bi
        slopes = Bi.alibi_slopes(H).to(device)

        def score_mod(score, b, h, qi, ki):
            return score + slopes[h] * (ki - qi - off).to(score.dtype)
        return mask_mod, score_mod
    ids = torch.arange(L, device=device) // DOC

    def mask_mod(b, h, qi, ki):
        return ids[qi] == ids[ki]
    return mask_mod, None


def _make(kind, L, S, dtype, impl, device):
    """fn(q, k, v) -> out, for one implementation; dense masks and block masks are built here, once."""
    import attnkit

    mask, bias = _attnkit_mask_bias(kind, L, S, device)
    if impl == "attnkit_auto":
        return lambda q, k, v: attnkit.attention(q, k, v, mask=mask, bias=bias).out
    if impl == "attnkit_blockwise":
        return lambda q, k, v: attnkit.attention(q, k, v, mask=mask, bias=bias, backend="blockwise").out
    if impl == "sdpa_causal":
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if impl == "sdpa_mask":
        dense = _dense(kind, L, S, dtype, device)
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=dense)
    if impl == "flex":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        mask_mod, score_mod = _flex_mods(kind, L, S, device)
        bm = create_block_mask(mask_mod, None, None, L, S, device=device)
        compiled = torch.compile(flex_attention)
        return lambda q, k, v: compiled(q, k, v, score_mod=score_mod, block_mask=bm)
    raise ValueError(f"impl must be one of the implementations in CASES, got {impl!r}")


def _dense(kind, L, S, dtype, device):
    """The case's mask (bool) or mask + bias (float, -inf where masked) as one dense (1|H, L, S) tensor."""
    mask, bias = _attnkit_mask_bias(kind, L, S, device)
    allowed = mask.materialize(L, S, batch=B, heads=H, device=device)
    if bias is None:
        return allowed
    values = bias.materialize(L, S, batch=B, heads=H, device=device, dtype=dtype)
    return values.masked_fill(~allowed, float("-inf"))


def run_case(case: str, reps: int, quick: bool, device) -> list[dict]:
    kind, L, S, dt, mode, impls = CASES[case]
    if quick:
        L, S = max(256, L // 16), max(256, S // 16)
    dtype = getattr(torch, dt)
    g = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(B, H, L, E, device=device, generator=g)
    k = torch.randn(B, H, S, E, device=device, generator=g)
    v = torch.randn(B, H, S, E, device=device, generator=g)
    dense32 = _dense(kind, L, S, torch.float32, device)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=dense32)  # float32 yardstick
    q, k, v = (t.to(dtype).requires_grad_(mode == "fwdbwd") for t in (q, k, v))
    dout = torch.randn_like(want).to(dtype)
    rows, baseline = [], None
    for impl in impls:
        row = {"case": case, "impl": impl, "kind": kind, "L": L, "S": S, "dtype": dt, "mode": mode}
        try:
            fn = _make(kind, L, S, dtype, impl, device)

            def call():
                out = fn(q, k, v)
                if mode == "fwdbwd":
                    out.backward(dout)
                    for t in (q, k, v):
                        t.grad = None
                return out

            with torch.no_grad() if mode == "fwd" else torch.enable_grad():
                row["first_call_ms"], out = first_call(call, device)
                row["max_abs_err_vs_fp32_sdpa"] = float((out.float() - want).abs().nan_to_num(math.inf).max())
                call()  # second warm-up
                times = time_calls(call, reps, device)
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
                call()
                torch.cuda.synchronize()
                row["peak_above_inputs_mib"] = (torch.cuda.max_memory_allocated() - before) / 2**20
            row["median_ms"] = statistics.median(times)
            row["times_ms"] = times
            if baseline is None:
                baseline = row["median_ms"]
            row["speedup_vs_" + impls[0]] = baseline / row["median_ms"]
        except Exception as e:  # a case an implementation cannot run is a finding, not a crash
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "times_ms"}), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="sizes / 16, for a smoke run")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--only", nargs="*", default=None, help="case names to run (default: all)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting cases after this many seconds")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_race needs a CUDA device (torch.cuda.is_available() is False); the CPU race is flex_race.py")
    device = torch.device("cuda")
    out = args.out or RESULTS / ("gpu_race_quick.json" if args.quick else "gpu_race.json")
    doc = {
        "what": "attnkit vs SDPA and compiled FlexAttention on one CUDA GPU; medians of CUDA-event timings.",
        "torch": torch.__version__, "device": torch.cuda.get_device_name(0), "B": B, "H": H, "E": E,
        "window": WINDOW, "document_length": DOC, "reps": args.reps, "quick": args.quick, "rows": [],
    }
    start = time.perf_counter()
    for case in args.only or list(CASES):
        if time.perf_counter() - start > args.budget_s:
            doc.setdefault("skipped_for_time", []).append(case)
            continue
        doc["rows"].extend(run_case(case, args.reps, args.quick, device))
        doc["seconds"] = time.perf_counter() - start
        out.parent.mkdir(parents=True, exist_ok=True)
        record(out, doc)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
