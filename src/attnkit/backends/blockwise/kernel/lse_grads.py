r"""Gradients of a tiles-route fused call below float64: the tile loop's backward, fed the kernel's lse.

Used where a row's keys are spread over several kernel calls (the *tiles* route of
:mod:`..routes`: documents, chunks, prefix-LM, ...) and the blocks' key spans do not serve
(:mod:`.tiles_grad`); the band, causal and dense routes renormalise complete rows instead
(:mod:`.band_grad`). The fused forward returns out and a
float32 lse. The kernel's own backward
op rebuilds the weights from that rounded lse with a fast exp and sums half gradients in half, which
the differential fuzz measured beyond the flash-attention rule; the tile loop's backward
(:mod:`..loop.backward`) is within it, but needs the row statistics it recomputes the weights from: a
shift m and a sum ell with :math:`P_{ij} = e^{s_{ij} - m_i} / \ell_i`. The kernel does not hand out
its row max, so here

* the shift is the kernel's lse, :math:`m_i = \mathrm{lse}_i` (in the tiles' units). A float32 lse
  is off from the true one by up to half an ulp of :math:`|\mathrm{lse}_i|`, a relative error that
  every weight of the row would inherit in :math:`e^{s - \mathrm{lse}}`;
* so the sum is recomputed with that very shift, :math:`\ell_i = \sum_j e^{s_{ij} - m_i}`, and
  :math:`e^{s_{ij} - m_i} / \ell_i` sums to 1 exactly as the reference's :math:`e^{s - \max}/\sum`:
  the shift's rounding cancels. Since :math:`s_{ij} \le \mathrm{lse}_i`, nothing overflows;
* and the output is recomputed in the same pass (the score GEMM, the exponential and P·V over the
  kept tiles, no rescaling), from those weights: the backward's :math:`D = \mathrm{rowsum}(dO \circ O)`
  must match the weights it rebuilds. The kernel's own output differs by its rounding (and a half
  output by bf16's), which D would hand to every dS: with a dense bias at logits of std 10, dq at
  1.5x the float32 reference's error (fuzz seed 5, full budget, case 5855).

:func:`lse_terms` gives (m, ell, out); the bias routes' backward (:mod:`..routes.relative`) uses it too.

Then the tile loop's backward runs once with (m, ell): the forward is not repeated. Fully masked
rows (lse :math:`-\infty`) get m :math:`-\infty` and ell 0, the backward's empty-row convention.

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E head dim; l, s one
tile's query and key counts.
"""

from __future__ import annotations

import torch

from ....core import online_softmax
from ...tiling import EMPTY, default_tiles, tile_map
from ..loop.backward import loop_backward
from ..loop.leaks import dead_filter, drop_dead
from ..loop.plan import INF, Plan, q_tile, Tiles, tile_mask

__all__ = ["kernel_lse_grads", "lse_terms", "tile_plan"]


def tile_plan(q, k, mask, scale: float, bias=None) -> Plan:
    """The tile loop's plan of a dot-product call (no dropout; an additive ``bias`` or None) at its
    default tiles, for a backward from the fused kernel's lse."""
    B, H, L, _ = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    bq, bk = default_tiles(mask, L, S, q.dtype, q.device)
    bq, bk = min(bq, L), min(bk, S)
    code_rows = tuple(tuple(row) for row in tile_map(mask, L, S, bq, bk).tolist())
    kept = [[ki for ki, c in enumerate(row) if c != EMPTY] for row in code_rows]
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    plan = Plan(B, H, Hkv, L, S, bq, bk, torch.tensor(code_rows, dtype=torch.int8), scale, None, bias, mask,
                 0.0, 0, work, scale, kept)
    plan.code_rows = code_rows
    return plan


def _row_sums(plan: Plan, qx, kx, m, v=None):
    """ell (B, H, L) = sum over kept keys of exp(exp_scale · (s - m)), m (B, H, L) in the tiles' units;
    with ``v`` (B, Hkv, S, Ev) in the work dtype, also the output (B, H, L, Ev) sum(P v) / ell."""
    B, H, L = plan.B, plan.H, plan.L
    acc = None if v is None else torch.zeros(B, H, L, v.shape[-1], dtype=plan.work, device=qx.device)
    tiles = Tiles(plan)
    bq, bk = plan.block_q, plan.block_kv
    shift = torch.where(torch.isneginf(m), INF, m).unsqueeze(-1)  # (B, H, L, 1): empty rows give 0
    ell = torch.zeros(B, H, L, 1, dtype=plan.work, device=qx.device)
    dead_cache: dict = {}
    for qi, kblocks in enumerate(plan.kept):
        q0, q1 = qi * bq, min((qi + 1) * bq, L)
        qt = q_tile(qx, plan, q0, q1)
        for ki in kblocks:
            k0, k1 = ki * bk, min((ki + 1) * bk, plan.S)
            skip, allowed = tile_mask(tiles, plan.code_rows[qi][ki], q0, q1, k0, k1, qx.device) if plan.mask is not None else (False, None)
            if skip:
                continue
            kt, vt = kx[:, :, k0:k1], (None if v is None else v[:, :, k0:k1])
            live = dead_filter(allowed, plan.Hkv, dead_cache) if allowed is not None else None
            if live is not None:
                kt, vt = drop_dead(live, kt, kt if vt is None else vt)
            st = tiles.scores(qt, kt, q0, q1, k0, k1)  # (B, H, l, s)
            if allowed is not None:
                st = st.masked_fill_(~allowed, -INF)
            pt = online_softmax.exp_(st.sub_(shift[:, :, q0:q1]), plan.exp_scale)
            ell[:, :, q0:q1] += pt.sum(-1, keepdim=True)
            if acc is not None:  # (B, Hkv, g·l, s) @ (B, Hkv, s, Ev) -> (B, H, l, Ev)
                acc[:, :, q0:q1] += (pt.view(B, plan.Hkv, -1, k1 - k0) @ vt).view(B, H, q1 - q0, -1)
    if acc is None:
        return ell.squeeze(-1)
    return ell.squeeze(-1), acc / torch.where(ell > 0, ell, 1.0)


def lse_terms(plan: Plan, qx, kx, vx, lse):
    """(m, ell, out) of the module docstring from the fused kernel's ``lse`` (B, H, L, natural
    units): the shift m in the tiles' units, the row sums ell (B, H, L) and the output (B, H, L, Ev)
    recomputed with it; qx, kx, vx in the plan's work dtype."""
    m = lse.to(plan.work) / plan.exp_scale  # the tiles' units (scores of q·kᵀ before the scale)
    ell, out = _row_sums(plan, qx, kx, m, vx)
    return m, ell, out


def kernel_lse_grads(q, k, v, lse, dout, dlse, need, mask, scale: float):
    """(dq, dk, dv) in the inputs' dtypes (None where ``need`` is False) of a plain dot-product call
    with ``mask``, from the fused forward's ``lse`` (B, H, L, natural units)."""
    plan = tile_plan(q, k, mask, scale)
    w = plan.work
    qx, kx, vx = (t.to(w) for t in (q, k, v))
    with torch.no_grad():
        m, ell, out = lse_terms(plan, qx, kx, vx, lse)
        dout = torch.zeros(out.shape, dtype=w) if dout is None else dout.to(w)
        dq, dk, dv, _ = loop_backward(plan, qx, kx, vx, out, m, ell, dout.contiguous(), dlse, [], need)
    return [g.to(t.dtype) if n else None for g, n, t in zip((dq, dk, dv), need, (q, k, v))]

