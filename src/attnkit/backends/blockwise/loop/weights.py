r"""The blockwise backend's optional second pass: dense attention weights, tile by tile.

Asked for with ``return_weights=True``. After the forward has produced the per-row log-sum-exp,
each weight is :math:`P_{ij} = e^{s_{ij} - \mathrm{lse}_i}` (see the derivation in
:mod:`attnkit.backends.blockwise`), so the weights are recomputed one tile at a time and
concatenated, with no second online softmax. The result is differentiable through the scores and
through the ``lse`` output of the autograd Function. It costs the (L, S) memory the caller asked
for; the forward itself never holds it.

Shape legend: B batch, H query heads, L queries, S keys; weights (B, H, L, S), lse (B, H, L).
"""

from __future__ import annotations

import torch

from .plan import INF, Plan, q_tile, Tiles, tile_mask
from ...tiling import EMPTY

__all__ = ["dense_weights"]


def dense_weights(plan: Plan, qx, kx, lse) -> torch.Tensor:
    """Second pass: weights (B, H, L, S) = exp(s - lse) per tile, differentiable through s and the
    Function's lse output. Costs the (L, S) memory the caller asked for."""
    tiles = Tiles(plan)
    B, H, L, S = plan.B, plan.H, plan.L, plan.S
    bq, bk = plan.block_q, plan.block_kv
    lse_safe = torch.where(torch.isneginf(lse), 0.0, lse).unsqueeze(-1)
    rows = []
    for qi in range(plan.codes.shape[0]):
        q0, q1 = qi * bq, min((qi + 1) * bq, L)
        qt = q_tile(qx, plan, q0, q1)
        row = []
        for ki in range(plan.codes.shape[1]):
            k0, k1 = ki * bk, min((ki + 1) * bk, S)
            code = plan.code_rows[qi][ki]
            skip, allowed = (code == EMPTY, None) if code == EMPTY else (
                tile_mask(tiles, code, q0, q1, k0, k1, qx.device) if plan.mask is not None else (False, None)
            )
            if skip:
                row.append(torch.zeros(B, H, q1 - q0, k1 - k0, dtype=plan.work, device=qx.device))
                continue
            s_nat = tiles.natural(tiles.scores(qt, kx[:, :, k0:k1], q0, q1, k0, k1))
            if allowed is not None:
                s_nat = s_nat.masked_fill(~allowed, -INF)
            row.append(torch.exp(s_nat - lse_safe[:, :, q0:q1]))
        rows.append(torch.cat(row, dim=-1))
    return torch.cat(rows, dim=2)
