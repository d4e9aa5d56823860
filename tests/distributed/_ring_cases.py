"""What each spawned rank runs for the ring-attention tests (imported by the spawned processes).

The reference is written out here independently of ``attnkit``: plain ``softmax(QK^T / sqrt(E))V``
on the *full* (gathered) sequence, in float64. Every rank builds the same full inputs from one seed,
runs the ring on its shard, gathers the outputs and gradients back to full length, and reports
errors against the float64 reference next to the error of the same reference computed in the
ring's own dtype -- the test then asks the ring to be within a small multiple of that.
"""

from __future__ import annotations

import math
import os
import time

import torch

import attnkit
from attnkit.distributed import RingCommError, RingTimeoutError, gather_sequence, ring_attention, shard_sequence
from attnkit.distributed import comm as ring_comm


def reference_attention(q, k, v, *, causal: bool) -> torch.Tensor:
    """Plain softmax attention, GQA by repeating K/V heads. q (B, H, L, E), k/v (B, Hkv, L, *)."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        L = q.shape[2]
        future = torch.ones(L, L, dtype=torch.bool).triu(1)
        s = s.masked_fill(future, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def _reference_with_grads(inputs: dict, dtype: torch.dtype, causal: bool) -> dict[str, torch.Tensor]:
    q, k, v = (inputs[n].to(dtype, copy=True).requires_grad_() for n in "qkv")
    out = reference_attention(q, k, v, causal=causal)
    out.backward(inputs["dout"].to(dtype))
    return {"out": out.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}


def make_inputs(seed: int, B: int, H: int, Hkv: int, L: int, E: int, Ev: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "q": torch.randn(B, H, L, E, generator=g, dtype=torch.float64),
        "k": torch.randn(B, Hkv, L, E, generator=g, dtype=torch.float64),
        "v": torch.randn(B, Hkv, L, Ev, generator=g, dtype=torch.float64),
        "dout": torch.randn(B, H, L, Ev, generator=g, dtype=torch.float64),
    }


def _ring_with_grads(inputs: dict, case: dict, dtype: torch.dtype, group=None) -> dict[str, torch.Tensor]:
    """Shard, run the ring forward and backward, gather everything back to full (unpadded) length."""
    layout, L = case["layout"], case["L"]
    local = {n: shard_sequence(_with_padding(inputs[n].to(dtype), case, group) if n != "dout" else inputs[n].to(dtype),
                               dim=2, group=group, layout=layout) for n in ("q", "k", "v", "dout")}
    q, k, v = (local[n].detach().requires_grad_() for n in "qkv")
    padded = q.shape[2] * torch.distributed.get_world_size(group) != L
    mask = attnkit.masks.causal() if case["causal"] else None
    out = ring_attention(q, k, v, group=group, mask=mask, layout=layout, seq_len=L if padded else None).out
    out.backward(local["dout"])
    result = {}
    for name, t in (("out", out.detach()), ("dq", q.grad), ("dk", k.grad), ("dv", v.grad)):
        full = gather_sequence(t, dim=2, group=group, layout=layout)  # padded length
        result[name] = full[:, :, :L]
        result[name + "_pad"] = full[:, :, L:]  # must be exactly zero
    return result


def _with_padding(x: torch.Tensor, case: dict, group) -> torch.Tensor:
    """x (B, H, L, D) padded by the caller to the ring's length with ``case["hostile"]`` (NaN, inf,
    1e38: what a reused buffer may hold), instead of shard_sequence's zeros; unchanged without it."""
    if case.get("hostile") is None:
        return x
    from attnkit.distributed import padded_length

    Lp = padded_length(x.shape[2], case["layout"], torch.distributed.get_world_size(group))
    fill = x.new_full(x.shape[:2] + (Lp - x.shape[2],) + x.shape[3:], case["hostile"])
    return torch.cat([x, fill], dim=2)


def _max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item()


def parity_worker(rank: int, world_size: int, cases: list[dict], subgroup_size: int) -> dict:
    """Run every case; also the shard/gather round trip, a sub-group ring and a shape mismatch."""
    report: dict = {}
    for case in cases:
        inputs = make_inputs(case["seed"], case["B"], case["H"], case["Hkv"], case["L"], case["E"], case["Ev"])
        inputs["q"] = inputs["q"] * case.get("q_std", 1.0)  # larger logits: |lse| of tens
        dtype = case.get("dtype", torch.float32)
        ref64 = _reference_with_grads(inputs, torch.float64, case["causal"])
        ref_same = _reference_with_grads(inputs, dtype, case["causal"])  # the reference's own error in dtype
        ring = _ring_with_grads(inputs, case, dtype)
        report[case["name"]] = {
            name: {
                "ring": _max_err(ring[name], ref64[name]),
                "reference": _max_err(ref_same[name], ref64[name]),
                "pad_abs_max": ring[name + "_pad"].abs().max().item() if ring[name + "_pad"].numel() else 0.0,
                "finite": bool(torch.isfinite(ring[name]).all()),
            }
            for name in ("out", "dq", "dk", "dv")
        }

    # Round trip of the helpers alone, both layouts, an uneven length, another dim.
    x = torch.arange(2 * (6 * world_size + 5), dtype=torch.float32).reshape(2, -1)
    for layout in ("contiguous", "zigzag"):
        shard = shard_sequence(x, dim=1, layout=layout)
        back = gather_sequence(shard, dim=1, layout=layout, seq_len=x.shape[1])
        report[f"roundtrip_{layout}"] = bool(torch.equal(back, x))

    # The group argument: a ring over a sub-group (singletons when subgroup_size is 1).
    groups = [torch.distributed.new_group(list(range(s, s + subgroup_size))) for s in range(0, world_size, subgroup_size)]
    mine = groups[rank // subgroup_size]
    case = dict(cases[0], layout="zigzag", causal=True, L=4 * subgroup_size)
    inputs = make_inputs(7, case["B"], case["H"], case["Hkv"], case["L"], case["E"], case["Ev"])
    ring = _ring_with_grads(inputs, case, torch.float64, group=mine)  # float64: agreement to ~1e-15
    ref64 = _reference_with_grads(inputs, torch.float64, True)
    report["subgroup"] = max(_max_err(ring[n], ref64[n]) for n in ("out", "dq", "dk", "dv"))

    # Shard length differing between ranks: every rank must raise the same clear ValueError.
    Lr = 4 + 2 * (rank == world_size - 1)
    q = torch.randn(1, 2, Lr, 4)
    try:
        ring_attention(q, q, q, timeout=10)
        report["mismatch"] = "no error"
    except ValueError as e:
        report["mismatch"] = str(e)
    return report


def fault_worker(rank: int, world_size: int, victim: int, mode: str, timeout: float) -> dict:
    """The victim rank completes ring step 0 and then dies (``mode="exit"``) or hangs ("hang").

    Every other rank must raise a RingCommError (RingTimeoutError for a timeout) within ``timeout``.
    """
    if rank == victim:
        original_wait = ring_comm.PendingExchange.wait

        def wait_then_fail(self):
            received = original_wait(self)
            if mode == "exit":
                os._exit(0)
            time.sleep(60)  # hang: the test kills this process
            return received

        ring_comm.PendingExchange.wait = wait_then_fail
    torch.manual_seed(0)
    q = torch.randn(1, 2, 64, 8)
    start = time.monotonic()
    try:
        ring_attention(q, q, q, mask=attnkit.masks.causal(), layout="zigzag", timeout=timeout)
    except RingCommError as e:
        elapsed = time.monotonic() - start
        return {"error": type(e).__name__, "is_timeout": isinstance(e, RingTimeoutError), "elapsed": elapsed, "message": str(e)}
    return {"error": None, "elapsed": time.monotonic() - start}
