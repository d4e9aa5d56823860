"""Perplexity against position over a long stream, one policy at a time, and the sink measurement.

* :func:`stepwise_nll` — one character per step through :meth:`.model.CharLM.step` with one
  :class:`.policies.KeptKV` per layer: (B, T-1) negative log-likelihoods of characters 1..T-1, the
  bytes held at the end, and the original positions layer 0 / head 0 / stream 0 kept at each step.
* :func:`recompute_nll` — the window-with-recompute baseline: the prediction at step t re-reads
  the last ``w`` characters from scratch at positions 0..w-1 (O(T·w²) work, no cache at all).
* :func:`binned` — mean NLL per bin of positions, and :func:`sink_share` — how much attention
  each layer puts on the first position, against what a uniform causal row would put there.

Shape legend: streams (B, T) ids; NLL (B, T-1); attention maps (B, H, L, L).
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from .policies import KeptKV, Policy


@torch.inference_mode()
def stepwise_nll(model, streams: torch.Tensor, policy: Policy, *, obs: int = 1, trace_steps: int = 0) -> dict:
    B, T = streams.shape
    kept = [KeptKV(policy, obs) for _ in model.blocks]
    nll = torch.empty(B, T - 1)
    trace, peak = [], 0
    for t in range(T - 1):
        logits = model.step(streams[:, t], kept)  # (B, V)
        nll[:, t] = F.cross_entropy(logits.float(), streams[:, t + 1], reduction="none")
        if t < trace_steps:
            trace.append(kept[0].pos[0, 0].tolist())
        peak = max(peak, kept[0].k.shape[2])
    return {"nll": nll, "nbytes": sum(c.nbytes for c in kept), "max_kept": peak, "trace": trace}


@torch.inference_mode()
def recompute_nll(model, streams: torch.Tensor, w: int, chunk: int = 256) -> torch.Tensor:
    """(B, T-1) NLL when step t reads streams[:, max(0, t-w+1): t+1] fresh (positions from 0)."""
    B, T = streams.shape
    nll = torch.empty(B, T - 1)
    head = min(w, T - 1)
    logits = model(streams[:, :head])  # steps t < w see the whole prefix: one causal pass
    nll[:, :head] = F.cross_entropy(logits.float().transpose(1, 2), streams[:, 1: head + 1], reduction="none")
    if T - 1 > head:
        wins = streams[:, : T - 1].unfold(1, w, 1)[:, 1:]  # (B, T-w, w): the window ending at step t = w..T-2
        flat = wins.reshape(-1, w)
        last = torch.cat([model(flat[i: i + chunk])[:, -1] for i in range(0, len(flat), chunk)])  # (B·(T-w), V)
        nll[:, head:] = F.cross_entropy(last.float(), streams[:, w + 1:].reshape(-1), reduction="none").view(B, -1)
    return nll


def binned(nll: torch.Tensor, bin_size: int) -> list[float]:
    """Mean NLL (nats) over streams and over each bin of ``bin_size`` consecutive steps."""
    m = nll.mean(0)
    return [float(m[i: i + bin_size].mean()) for i in range(0, len(m), bin_size)]


@torch.inference_mode()
def sink_share(model, windows: torch.Tensor, skip: int = 8) -> dict:
    """Per layer: the mean weight queries at positions ≥ ``skip`` put on position 0, against the
    1/(i+1) a uniform causal row would put there; and the mean (L, L) map of each layer."""
    _, maps = model(windows, return_weights=True)
    L = windows.shape[1]
    uniform = float((1.0 / torch.arange(skip + 1, L + 1, dtype=torch.float64)).mean())
    out = {"uniform_first": uniform, "layers": [], "maps": []}
    for w in maps:  # (B, H, L, L)
        first = w[:, :, skip:, 0]  # (B, H, L-skip)
        out["layers"].append({"first_mean": float(first.mean()), "per_head": first.mean((0, 2)).tolist()})
        out["maps"].append(w.mean((0, 1)).tolist())
    return out


def perplexity(nll_nats: float) -> float:
    return math.exp(nll_nats)
