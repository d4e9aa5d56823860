"""NaN/inf placements shared by tests/core/test_nan_paths.py and its ring-attention ranks.

A plain module (not a test file) so the spawned gloo ranks can import the worker by name.
Shape legend: B batch, H heads, L queries, S keys, E head dim.
"""

from __future__ import annotations

import itertools

import torch

from attnkit import masks as M

NAN, INF = float("nan"), float("inf")
VALUES = {"nan": NAN, "+inf": INF, "-inf": -INF}


def make_inputs(L, S, place, value, seed=0):
    """q (2, 2, L, 8), k, v (2, 2, S, 8) and a dense bias (2, 2, L, S) when place is "bias", with
    ``value`` written once into the tensor named by ``place``."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = torch.randn(2, 2, L, 8, generator=g), torch.randn(2, 2, S, 8, generator=g), torch.randn(2, 2, S, 8, generator=g)
    bias = torch.randn(2, 2, L, S, generator=g) * 0.1 if place == "bias" else None
    # (batch 0, head 1): row 2 / key 3 are live under every mask here, and the causal masks hide key 3 from rows before it
    # "v_late": a value in the last shard of a 2-rank ring, which rank 0's causal queries skip entirely
    target = {"q": (q, (0, 1, 2, 3)), "k": (k, (0, 1, 3, 1)), "v": (v, (0, 1, 3, 1)), "v_late": (v, (0, 1, S - 2, 1)),
              "bias": (bias, (0, 1, 2, 1))}[place]
    target[0][target[1]] = value
    return q, k, v, bias


def ring_cases() -> list[dict]:
    """Placements x values x masks x layouts; the last two have an uneven length (padded inside)."""
    cases = []
    for place, value, causal, layout in itertools.product(("q", "k", "v"), ("nan", "+inf"), (False, True), ("contiguous", "zigzag")):
        cases.append(dict(place=place, value=value, causal=causal, layout=layout, L=8))
    cases.append(dict(place="v_late", value="nan", causal=True, layout="contiguous", L=8))  # in a skipped pair
    cases.append(dict(place="v", value="nan", causal=True, layout="zigzag", L=7))  # padded to 8 inside
    cases.append(dict(place="q", value="-inf", causal=True, layout="contiguous", L=7))
    return cases


def ring_nan_worker(rank: int, world_size: int, cases: list[dict]) -> dict | None:
    """Each rank: shard the case's inputs, run ring attention forward and backward, gather the
    output and gradients to full length; rank 0 returns {case index: [out, dq, dk, dv]} as numpy arrays."""
    from attnkit.distributed import gather_sequence, ring_attention, shard_sequence

    results = {}
    for i, c in enumerate(cases):
        L, layout = c["L"], c["layout"]
        q, k, v, _ = make_inputs(L, L, c["place"], VALUES[c["value"]])
        dout = torch.randn(q.shape[:3] + (v.shape[-1],), generator=torch.Generator().manual_seed(9))
        local = {n: shard_sequence(t, dim=2, layout=layout) for n, t in (("q", q), ("k", k), ("v", v), ("dout", dout))}
        qs, ks, vs = (local[n].detach().requires_grad_() for n in "qkv")
        padded = qs.shape[2] * world_size != L
        out = ring_attention(qs, ks, vs, mask=M.causal() if c["causal"] else None, layout=layout,
                             seq_len=L if padded else None, timeout=60).out
        out.backward(local["dout"])
        # numpy arrays travel by value (a torch tensor in the result queue is shared through a file
        # descriptor that the rank's hard exit closes)
        results[i] = [gather_sequence(t, dim=2, layout=layout)[:, :, :L].numpy() for t in (out.detach(), qs.grad, ks.grad, vs.grad)]
    return results if rank == 0 else None
