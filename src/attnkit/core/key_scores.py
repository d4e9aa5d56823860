"""Per-key attention scores in O(n) memory: the column sums of the attention weights.

H2O (Zhang et al. 2023, https://arxiv.org/abs/2306.14048) and SnapKV (Li et al. 2024,
https://arxiv.org/abs/2404.14469) decide which cached keys to keep by how much attention each key
receives, summed over the queries:

    key_scores[b, h, j] = Σ_i P[b, h, i, j],   P[b, h, i, j] = exp(s_ij − lse_i)  (0 where masked),

with ``s_ij`` the scaled, biased score and ``lse_i = log Σ_j exp(s_ij)`` the row's log-sum-exp
(``log(Σ_j exp(s_ij) + exp(sink))`` with an attention sink). Fused kernels never form P, so tools
that need it fall back to eager attention and an (L, S) matrix. But once ``lse`` is known, every
entry of P is one exponential of its own score: a **second pass over tiles** of (query block × key
block) recomputes the scores, exponentiates them against the final ``lse`` and adds each tile's
column sums to a (B, H, S) accumulator. Memory is one tile plus O(L + S) per (batch, head); the
flops are those of one more forward's ``QKᵀ``, less the tiles the mask proves empty (half of them
for causal) — and a tile it proves full skips evaluating the mask. The result is exact in the flash-attention sense:
the same expression as the dense weights, summed in a different order.

When the backend returned no ``lse`` (or returned it without the sink), a first pass over the same
tiles computes it with a running maximum (``lse = m + log Σ exp(s − m)``, merged across key tiles
by ``logaddexp``).

Shape legend: q (B, H, L, E), k (B, Hkv, S, E); lse (B, H, L); key scores (B, H, S).
"""

from __future__ import annotations

import torch

from .tiles import EMPTY, FULL, TileGrid

TILE_ELEMENTS = 1 << 20  # score elements per tile (B·H·rows·cols): 4 MiB in float32


def key_scores(call, lse: torch.Tensor | None) -> torch.Tensor:
    """Σ over query rows of the call's attention weights, (B, H, S), in float32 (float64 for float64).
    ``lse`` (B, H, L): the row log-sum-exps the output was normalised with (sink included), or None."""
    work = torch.float64 if call.q.dtype == torch.float64 else torch.float32
    B, H, L, _ = call.q.shape
    S = call.S
    rows, cols = _tile(B * H, L, S)
    states = _states(call, rows, cols)
    if lse is None:
        lse = _lse(call, rows, cols, work, states)
    lse = lse.to(work)
    out = torch.zeros(B, H, S, dtype=work, device=call.q.device)
    for i, r0 in enumerate(range(0, L, rows)):
        r1 = min(L, r0 + rows)
        row_lse = lse[:, :, r0:r1, None]  # (B, H, l, 1)
        dead = torch.isneginf(row_lse)  # a fully masked row gives no weight to anything
        for j, c0 in enumerate(range(0, S, cols)):
            if states[i][j] == EMPTY:
                continue  # no pair of the tile may attend: nothing to add (causal: half the tiles)
            c1 = min(S, c0 + cols)
            s = _scores(call, r0, r1, c0, c1, work, states[i][j] == FULL)  # (B, H, l, s), -inf where masked
            p = torch.exp(s - row_lse).masked_fill(dead, 0.0)
            out[:, :, c0:c1] += p.sum(2)
    return out


def _states(call, rows: int, cols: int) -> list[list[int]]:
    """EMPTY / FULL / PARTIAL of every (query block, key block) tile, from the mask's own proof."""
    grid = TileGrid.uniform(call.L, call.S, rows, cols)
    if call.mask is None:
        return [[FULL] * grid.shape[1] for _ in range(grid.shape[0])]
    return call.mask.tile_states(grid).tolist()


def _tile(bh: int, L: int, S: int) -> tuple[int, int]:
    cols = min(S, 1024)
    rows = max(1, min(L, TILE_ELEMENTS // max(1, bh * cols)))
    return rows, cols


def _scores(call, r0: int, r1: int, c0: int, c1: int, work, full: bool = False) -> torch.Tensor:
    """Scaled, biased, masked scores of one tile (B, H, r1-r0, c1-c0), -inf where masked."""
    g = call.groups
    q = call.q[:, :, r0:r1].to(work)
    k = call.k[:, :, c0:c1].to(work)
    if g > 1:
        k = k.repeat_interleave(g, dim=1)  # one tile of keys per query head: O(tile) memory
    s = call.score(q, k) * call.scale
    L, S = call.L, call.S
    if call.bias is not None:
        s = call.bias.apply(s, (r0, r1), (c0, c1), L, S)
    if call.mask is not None and not full:
        allowed = call.mask.evaluate((r0, r1), (c0, c1), L, S, batch=q.shape[0], heads=q.shape[1], device=q.device)
        s = s.masked_fill(~allowed, float("-inf"))
    return s


def _lse(call, rows: int, cols: int, work, states) -> torch.Tensor:
    """First pass: each row's log-sum-exp over all keys (and the sink), (B, H, L)."""
    B, H, L, _ = call.q.shape
    lse = torch.full((B, H, L), float("-inf"), dtype=work, device=call.q.device)
    for i, r0 in enumerate(range(0, L, rows)):
        r1 = min(L, r0 + rows)
        for j, c0 in enumerate(range(0, call.S, cols)):
            if states[i][j] == EMPTY:
                continue
            part = torch.logsumexp(_scores(call, r0, r1, c0, min(call.S, c0 + cols), work, states[i][j] == FULL), -1)
            lse[:, :, r0:r1] = torch.logaddexp(lse[:, :, r0:r1], part)
    if call.sinks is not None:
        lse = torch.logaddexp(lse, call.sinks.to(work).expand(B, H, L))
    return lse
