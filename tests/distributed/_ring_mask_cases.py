"""What each spawned rank runs for the ring tests with masks and biases (imported by spawned processes).

Every rank builds the same full float64 inputs from one seed, computes the single-device answer
with ``attnkit.attention(..., backend="reference")`` on the whole sequence (or takes a dense
reference mask the test computed from a definition), runs the ring on its shard with the same
``mask=`` / ``bias=``, gathers output and gradients back to full length and reports the largest
differences. In float64 both are exact to rounding, so the test asks for ~1e-10.
"""

from __future__ import annotations

import math

import torch

import attnkit
from attnkit.distributed import gather_sequence, ring_attention, shard_sequence


def _dense_reference(q, k, v, allowed, bias):
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if bias is not None:
        s = s + bias
    s = s.masked_fill(~allowed, float("-inf"))
    m = s.amax(-1, keepdim=True).nan_to_num(neginf=0.0)
    p = (s - m).exp()
    den = p.sum(-1, keepdim=True)
    return (p / den.clamp(min=1e-300)) @ v


def mask_parity_worker(rank: int, world_size: int, cases: list[dict]) -> dict[str, dict[str, float]]:
    out = {}
    for case in cases:
        g = torch.Generator().manual_seed(case.get("seed", 0))
        B, H, Hkv, L, E = case["B"], case["H"], case["Hkv"], case["L"], case["E"]
        full = {
            "q": torch.randn(B, H, L, E, generator=g, dtype=torch.float64),
            "k": torch.randn(B, Hkv, L, E, generator=g, dtype=torch.float64),
            "v": torch.randn(B, Hkv, L, E, generator=g, dtype=torch.float64),
            "dout": torch.randn(B, H, L, E, generator=g, dtype=torch.float64),
        }
        mask, bias, layout = case.get("mask"), case.get("bias"), case["layout"]
        q, k, v = (full[n].clone().requires_grad_() for n in "qkv")
        if case.get("dense") is not None:  # a reference mask the test wrote from the definition
            want = _dense_reference(q, k, v, case["dense"], None if bias is None else bias.materialize(L, L, batch=B, heads=H))
        else:
            want = attnkit.attention(q, k, v, mask=mask, bias=bias, backend="reference").out
        want_grads = {}
        if case.get("nan_chunk") is None:
            want.backward(full["dout"])
            want_grads = {n: t.grad for n, t in zip("qkv", (q, k, v))}
        if case.get("nan_chunk") is not None:  # the ring gets NaN values here: only skipped pairs keep rows finite
            a, b = case["nan_chunk"]
            full["v"][:, :, a:b] = float("nan")
        local = {n: shard_sequence(full[n], dim=2, layout=layout).detach() for n in ("q", "k", "v", "dout")}
        lq, lk, lv = (local[n].clone().requires_grad_() for n in "qkv")
        padded = lq.shape[2] * world_size != L
        res = ring_attention(lq, lk, lv, mask=mask, bias=bias, layout=layout, seq_len=L if padded else None)
        got = gather_sequence(res.out.detach(), dim=2, layout=layout, seq_len=L)
        row = {}
        if case.get("nan_chunk") is not None:
            rows = case["clean_rows"]  # queries whose mask never reaches the NaN chunk
            row["out"] = float((got[:, :, rows] - want.detach()[:, :, rows]).abs().max())  # NaN if any was read
        else:
            row["out"] = float((got - want.detach()).abs().max())
            res.out.backward(local["dout"])
            for n, t in zip("qkv", (lq, lk, lv)):
                gathered = gather_sequence(t.grad, dim=2, layout=layout, seq_len=L)
                row["d" + n] = float((gathered - want_grads[n]).abs().max())
        out[case["name"]] = row
    return out
