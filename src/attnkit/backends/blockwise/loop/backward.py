r"""The blockwise backward: recompute each tile's probabilities from the saved lse and accumulate
dq, dk, dv and the gradients of learned score/bias parameters (derivation in
:mod:`attnkit.backends.blockwise`).

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E query/key dim,
Ev value dim; l, s: one tile's query and key counts.
"""

from __future__ import annotations

import torch

from ....core import online_softmax
from .leaks import dead_filter, drop_dead
from .params import check_tile
from .plan import INF, Plan, q_tile, Tiles, tile_mask

__all__ = ["loop_backward"]


def loop_backward(plan: Plan, qx, kx, v, out, m, ell, dout, dlse, params, need):
    """Recompute each tile's probabilities from the saved row max m and sum ell, both (B, H, L),
    and accumulate dq', dk', dv, d(params).

    P = exp(s - m) / ell: the shift by the row max is exact where the weight is (see
    :func:`.forward.loop_forward`), and the 1/ell is folded into dO and D per query row
    (dS = exp(s - m) ∘ (dO/ell · vᵀ - D/ell), dV = exp(s - m)ᵀ dO/ell), so the tile costs no
    extra pass for it."""
    B, H, L, S, Hkv = plan.B, plan.H, plan.L, plan.S, plan.Hkv
    Ev = v.shape[-1]
    w = plan.work
    tiles = Tiles(plan)
    bq, bk = plan.block_q, plan.block_kv
    # gradients per block, summed functionally (no in-place writes into a preallocated buffer:
    # under torch.func.vmap a batched tile cannot be added into an unbatched zeros buffer)
    dq_parts: list[torch.Tensor | None] = [None] * len(plan.kept)  # (B, Hkv, g·l, E) per query block
    dk_parts: dict[int, torch.Tensor] = {}  # (B, Hkv, s, E) per key block
    dv_parts: dict[int, torch.Tensor] = {}  # (B, Hkv, s, Ev) per key block
    dead_cache: dict = {}
    # None until a tile produces a gradient: a parameter the bias never touches (e.g. the rest of a
    # module whose bound method is the bias) gets None, as autograd would give it, not zeros
    dparams: list[torch.Tensor | None] = [None] * len(params)
    qx, shift, inv_ell, D = _row_terms(qx, out, m, ell, dout, dlse, w)
    for qi, kblocks in enumerate(plan.kept):
        q0, q1 = qi * bq, min((qi + 1) * bq, L)
        l = q1 - q0
        qt = q_tile(qx, plan, q0, q1)
        dot = dout[:, :, q0:q1] * inv_ell[:, :, q0:q1].to(dout.dtype)  # (B, H, l, Ev): dO / ell
        dot_g = dot.reshape(B, Hkv, -1, Ev)  # (B, Hkv, g·l, Ev)
        dot_w = dot_g.to(w)
        dq_t = None
        for ki in kblocks:
            k0, k1 = ki * bk, min((ki + 1) * bk, S)
            skip, allowed = tile_mask(tiles, plan.code_rows[qi][ki], q0, q1, k0, k1, v.device) if plan.mask is not None else (False, None)
            if skip:
                continue
            kt, vt = kx[:, :, k0:k1], v[:, :, k0:k1]
            live = dead_filter(allowed, Hkv, dead_cache) if allowed is not None else None
            if live is not None:  # as in the forward: dead keys' NaN/inf must not reach dS k, dO vᵀ
                kt, vt = drop_dead(live, kt, vt)
            st, graph = _tile_scores(plan, tiles, qt, kt, q0, q1, k0, k1, params, need, v.device)
            if allowed is not None:  # a select: NaN scores of masked pairs go too
                st = st.masked_fill_(~allowed, -INF)
            pt = online_softmax.exp_(st.sub_(shift[:, :, q0:q1]), plan.exp_scale)  # (B, H, l, s) = P · ell
            keep = tiles.keep(qi, ki, pt.shape, v.device) if plan.dropout_p > 0 else None
            pd = pt * keep / (1.0 - plan.dropout_p) if keep is not None else pt
            if need[2]:
                _add(dv_parts, ki, pd.view(B, Hkv, -1, k1 - k0).transpose(-1, -2) @ dot_w)
            dp = (dot_g @ vt.transpose(-1, -2)).view(B, H, l, k1 - k0).to(w)  # (B, H, l, s)
            if keep is not None:
                dp = dp * keep / (1.0 - plan.dropout_p)
            ds = pt.mul_(dp.sub_(D[:, :, q0:q1]))  # dL/ds = P (dP - D), natural-unit scores (B, H, l, s)
            if graph is not None:
                dq_t = _graph_grads(graph, ds, plan.general, need, w, dq_t, dk_parts, ki, dparams)
                if plan.general:
                    continue
            ds_g = ds.view(B, Hkv, -1, k1 - k0)  # (B, Hkv, g·l, s)
            if need[0]:
                dq_t = _sum(dq_t, (ds_g.to(kt.dtype) @ kt).to(w))
            if need[1]:
                _add(dk_parts, ki, (ds_g.transpose(-1, -2).to(qt.dtype) @ qt).to(w))
        if dq_t is not None:
            dq_parts[qi] = dq_t.view(B, H, l, -1)
    dq = _blocks(dq_parts, qx, 2, bq, w)  # (B, H, L, E)
    dk = _blocks([dk_parts.get(i) for i in range(-(-S // bk))], kx, 2, bk, w)  # (B, Hkv, S, E)
    dv = _blocks([dv_parts.get(i) for i in range(-(-S // bk))], v, 2, bk, w)  # (B, Hkv, S, Ev)
    if not plan.general:
        # dot path: s = scale · q' k'ᵀ (+ bias), so dL/dq' = scale · dS k' and dL/dk' = scale · dSᵀ q'
        dq = dq * plan.scale
        dk = dk * plan.scale
    return dq, dk, dv, dparams


def _row_terms(qx, out, m, ell, dout, dlse, w: torch.dtype):
    """The per-query-row terms every tile of a row shares: q' with fully masked rows zeroed
    (B, H, L, E), and the shift, 1/ell and D/ell, each (B, H, L, 1) in the work dtype ``w``."""
    # D_i = dO_i · O_i; a gradient on lse enters as -dlse (dS = P (dP - D + dlse))
    D = (dout.to(w) * out.to(w)).sum(-1, keepdim=True)  # (B, H, L, 1)
    if dlse is not None:
        D = D - dlse.to(w).unsqueeze(-1)
    # fully masked rows (m = -inf, ell = 0): shift by +inf and scale by 0, so P = 0 and no NaN;
    # their query rows may hold anything (never seen): zeroed, or dK = dSᵀ q would be 0 · NaN
    empty = torch.isneginf(m).unsqueeze(-1)  # (B, H, L, 1)
    shift = torch.where(empty, INF, m.unsqueeze(-1))  # (B, H, L, 1)
    qx = torch.where(empty, 0.0, qx)
    inv_ell = torch.where(ell != 0, 1.0 / torch.where(ell != 0, ell, 1.0), 0.0).unsqueeze(-1)  # (B, H, L, 1)
    D = D * inv_ell
    return qx, shift, inv_ell, D


def _tile_scores(plan: Plan, tiles: Tiles, qt, kt, q0: int, q1: int, k0: int, k1: int, params, need, device):
    """One tile's scores (B, H, l, s) recomputed in the work dtype, and the autograd graph
    ``(s_nat, leaves, params)`` to pull dS through when the score is general or the bias has
    parameters (else None). ``qt`` is (B, Hkv, g·l, E), ``kt`` (B, Hkv, s, E)."""
    w = plan.work
    graph = None
    if plan.general or params:
        with torch.enable_grad():
            leaves = [qt.detach().requires_grad_(need[0]), kt.detach().requires_grad_(need[1])]
            pl = [p for p in params]
            if plan.general:
                s_nat = tiles.scores_nat(leaves[0], leaves[1], q0, q1, k0, k1)
            else:  # dot path with a learned additive bias: only the bias needs autograd
                s_nat = tiles.bias(q0, q1, k0, k1, device).to(w)  # (B|1, H|1, l, s)
            if s_nat.requires_grad:
                check_tile(s_nat, leaves + pl)  # a trainable tensor this tile reads must be an input
            graph = (s_nat.expand(plan.B, plan.H, q1 - q0, k1 - k0), leaves, pl)
        # the dot path's scores add the bias just evaluated, not a second evaluation of it
        st = s_nat.detach().clone() if plan.general else tiles.scores(qt, kt, q0, q1, k0, k1, bias=s_nat.detach())
    else:
        st = tiles.scores(qt, kt, q0, q1, k0, k1)
    if st.dtype != w:
        st = st.to(w)  # half tiles come back in their input dtype; recompute P in fp32
    return st, graph


def _graph_grads(graph, ds, general: bool, need, w: torch.dtype, dq_t, dk_parts: dict, ki: int, dparams: list):
    """Pull the tile's dS (B, H, l, s) through its autograd graph: on the general path dq' (added to
    and returned as the query block's sum ``dq_t``) and dk' (added to ``dk_parts[ki]``); the bias
    parameters' gradients are added to ``dparams`` in place."""
    s_nat, leaves, pl = graph
    wants = [x for x, n in zip(leaves, need[:2]) if n] if general else []
    grads = torch.autograd.grad(s_nat, wants + pl, ds, allow_unused=True) if s_nat.requires_grad else ()
    it = iter(grads)
    if general and grads:
        if need[0]:
            g0 = next(it)
            if g0 is not None:
                dq_t = _sum(dq_t, g0.to(w))
        if need[1]:
            g1 = next(it)
            if g1 is not None:
                _add(dk_parts, ki, g1.to(w))
    for i in range(len(pl) if grads else 0):
        gp = next(it)
        if gp is not None:
            dparams[i] = gp if dparams[i] is None else dparams[i] + gp
    return dq_t


def _sum(a: torch.Tensor | None, b: torch.Tensor) -> torch.Tensor:
    return b if a is None else a + b


def _add(parts: dict[int, torch.Tensor], i: int, g: torch.Tensor) -> None:
    parts[i] = _sum(parts.get(i), g)


def _blocks(parts: list, like: torch.Tensor, dim: int, block: int, dtype: torch.dtype) -> torch.Tensor:
    """Concatenate per-block gradients along ``dim``; blocks no tile touched are zeros."""
    n = like.shape[dim]
    full = []
    for i, t in enumerate(parts):
        if t is None:
            shape = list(like.shape)
            shape[dim] = min((i + 1) * block, n) - i * block
            t = torch.zeros(shape, dtype=dtype, device=like.device)
        full.append(t)
    return torch.cat(full, dim) if full else torch.zeros(like.shape, dtype=dtype, device=like.device)
