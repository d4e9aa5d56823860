r"""The blockwise forward: one online-softmax pass over the kept tiles (derivation in
:mod:`attnkit.backends.blockwise`).

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E query/key dim,
Ev value dim; l, s: one tile's query and key counts.
"""

from __future__ import annotations

import torch

from ....core import online_softmax
from .leaks import dead_filter, drop_dead
from .plan import INF, Plan, q_tile, Tiles, tile_mask, tile_order

__all__ = ["loop_forward"]


def loop_forward(plan: Plan, qx, kx, v):
    """Online-softmax forward. qx (B, H, L, E) is q' (dot form) or q; returns out (B, H, L, Ev),
    lse (B, H, L), and the row statistics lse is made of, the running max m (B, H, L) (-inf on
    empty rows; in the tiles' units, ``plan.exp_scale``) and the sum ell (B, H, L) (0 on empty
    rows), all in the work dtype (float32 for half inputs: the caller rounds the output, the
    backward's D = rowsum(dO·O) uses the unrounded one).

    The backward recomputes P = exp(s - m) / ell from the last two, not exp(s - lse): lse is one
    float32 number of magnitude |m| and is off by up to half an ulp of it (~|m|·6e-8), the same
    relative error in every recomputed weight of the row, whereas s - m is exact for the keys that
    carry the weight (Sterbenz), as in the reference's exp(s - max) / sum.

    The running max, sum and output of each query block are kept until its last tile — O(n), the
    size of the output — so tiles may be visited in any order. For relative-position biases (ALiBi, T5, Shaw) the bias
    of a tile depends only on its key-minus-query offset, so tiles are visited diagonal by diagonal
    and each bias tile is evaluated once per diagonal instead of once per tile."""
    B, H, L, Hkv = plan.B, plan.H, plan.L, plan.Hkv
    Ev = v.shape[-1]
    tiles = Tiles(plan)
    dev = v.device
    # per query block: running max, running sum (B, H, l, 1) and unnormalised output
    # (B, H, l, Ev), updated functionally (under torch.func.vmap a batched tile cannot be written
    # into an unbatched preallocated buffer)
    state: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = {}
    dead_cache: dict = {}
    bq, bk = plan.block_q, plan.block_kv
    reuse = tiles.toeplitz
    bias_key, bias_tile, q_key, qt = None, None, None, None
    for qi, ki in tile_order(plan, reuse):
        q0, q1 = qi * bq, min((qi + 1) * bq, L)
        k0, k1 = ki * bk, min((ki + 1) * bk, plan.S)
        l = q1 - q0
        skip, allowed = tile_mask(tiles, plan.code_rows[qi][ki], q0, q1, k0, k1, dev) if plan.mask is not None else (False, None)
        if skip:
            continue
        if q_key != qi:
            qt, q_key = q_tile(qx, plan, q0, q1), qi
        kt, vt = kx[:, :, k0:k1], v[:, :, k0:k1]
        live = dead_filter(allowed, Hkv, dead_cache) if allowed is not None else None
        if live is not None:  # masked keys may hold NaN/inf: they must not reach p @ v (0 * NaN)
            kt, vt = drop_dead(live, kt, vt)
        b2 = None
        if reuse:
            if bias_key != k0 - q0:  # a full-size tile: ragged edge tiles use its top-left corner
                bias_tile = tiles.bias(q0, q0 + bq, k0, k0 + bk, dev).to(plan.work)
                bias_key = k0 - q0
            b2 = bias_tile[..., :l, : k1 - k0]
        st = tiles.scores(qt, kt, q0, q1, k0, k1, bias=b2)  # (B, H, l, s)
        if allowed is not None:  # a select, not a product: NaN scores of masked pairs go too
            st = st.masked_fill_(~allowed, -INF)
        if qi in state:
            m, lsum, acc = state[qi]
        else:
            m = torch.full_like(st[..., :1], -INF)
            lsum, acc = torch.zeros_like(m), None
        # in place: the scores are not needed again
        m_new, _, pt, alpha = online_softmax.step(m, st, exp2=True, inplace=True, scale=plan.exp_scale)  # pt (B, H, l, s)
        lsum = lsum.mul_(alpha).add_(pt.sum(-1, keepdim=True))  # in place on this block's own state
        if plan.dropout_p > 0:
            pt = pt * tiles.keep(qi, ki, pt.shape, dev) / (1.0 - plan.dropout_p)
        pv = (pt.to(vt.dtype).view(B, Hkv, -1, k1 - k0) @ vt).view(B, H, l, Ev)  # from (B, Hkv, g·l, Ev)
        state[qi] = (m_new, lsum, pv if acc is None else acc.mul_(alpha).add_(pv))
    outs, lses, maxes, sums = [], [], [], []
    for qi in range(-(-L // bq)):
        l = min((qi + 1) * bq, L) - qi * bq
        if qi not in state:  # every tile of the block skipped: output 0, lse -inf, max -inf, sum 0
            outs.append(torch.zeros((B, H, l, Ev), dtype=plan.work, device=dev))
            lses.append(torch.full((B, H, l, 1), -INF, dtype=plan.work, device=dev))
            maxes.append(lses[-1])
            sums.append(torch.zeros((B, H, l, 1), dtype=plan.work, device=dev))
            continue
        m, lsum, acc = state.pop(qi)
        safe, lse = online_softmax.finish(m, lsum, scale=plan.exp_scale)
        outs.append(acc / safe)
        lses.append(lse)
        maxes.append(m)
        sums.append(lsum)
    return torch.cat(outs, 2), *(torch.cat(t, 2).squeeze(-1) for t in (lses, maxes, sums))
