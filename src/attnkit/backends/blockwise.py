r"""The blockwise backend: FlashAttention's algorithm in plain PyTorch, exact, O(n) memory, any device.

FlashAttention — Dao et al. 2022, https://arxiv.org/abs/2205.14135; FlashAttention-2 (loop order,
deferred normalisation) — Dao 2023, https://arxiv.org/abs/2307.08691; the online softmax —
Milakov & Gimelshein 2018, https://arxiv.org/abs/1805.02867.

Derivation
----------
For one query row with scores :math:`s_j` (score · scale + bias, :math:`-\infty` where masked) the
output is :math:`o = \sum_j e^{s_j} v_j / \sum_j e^{s_j}`. Split the keys into tiles
:math:`T_1, T_2, \dots` and keep three running quantities after tile :math:`t`:

* the running max :math:`m_t = \max(m_{t-1}, \max_{j \in T_t} s_j)` (so no exponent is positive),
* the running sum :math:`\ell_t = e^{m_{t-1} - m_t}\,\ell_{t-1} + \sum_{j \in T_t} e^{s_j - m_t}`,
* the unnormalised output :math:`a_t = e^{m_{t-1} - m_t}\,a_{t-1} + \sum_{j \in T_t} e^{s_j - m_t} v_j`.

Rescaling by :math:`e^{m_{t-1} - m_t}` moves the previous partial sums to the new reference max, so
after the last tile :math:`o = a / \ell` and :math:`\mathrm{lse} = m + \log \ell` exactly — only
(l, Ev) accumulators per query block ever exist, never the (L, S) matrix. Two partial results over
disjoint key sets merge the same way (log-sum-exp merge):
:math:`\mathrm{lse} = \log(e^{\mathrm{lse}_1} + e^{\mathrm{lse}_2})`,
:math:`o = e^{\mathrm{lse}_1 - \mathrm{lse}} o_1 + e^{\mathrm{lse}_2 - \mathrm{lse}} o_2`.

Everything is computed in base 2: scores are multiplied by :math:`\log_2 e` (folded into q for the dot
score) and ``exp2`` replaces ``exp``, since :math:`e^{x} = 2^{x \log_2 e}`. On this CPU fp32 ``exp`` is
10–30× slower for inputs below −87 (masked or ALiBi-shifted scores); ``exp2`` has no such slow path
(../shared/PERF-NOTES.md: ALiBi at 4k, 1,053 → 435 ms). The returned ``lse`` is in natural units.

Fully masked rows: the max is :math:`-\infty`; it is replaced by 0 before exponentiating, so
:math:`e^{-\infty - 0} = 0`, :math:`\ell = 0`, the output is 0 (divide by 1 where :math:`\ell = 0`) and
:math:`\mathrm{lse} = -\infty`. Never NaN, in the output or the gradients.

Backward via the stored LSE. With :math:`P_{ij} = e^{s_{ij} - \mathrm{lse}_i}` recomputed per tile
from the saved ``lse`` (no second online pass is needed, the normalisation is known), and
:math:`dP_{ij} = dO_i \cdot v_j`:

* :math:`dV_j = \sum_i P_{ij}\, dO_i`,
* :math:`dS_{ij} = P_{ij} (dP_{ij} - D_i)` with :math:`D_i = \sum_j P_{ij} dP_{ij} = dO_i \cdot O_i`
  (one row-wise dot product on saved tensors),
* :math:`dq_i = \mathrm{scale} \sum_j dS_{ij} k_j`, :math:`dk_j = \mathrm{scale} \sum_i dS_{ij} q_i`,
* a gradient flowing into ``lse`` adds :math:`P_{ij}\, d\mathrm{lse}_i` to :math:`dS_{ij}`
  (:math:`\partial\,\mathrm{lse}_i / \partial s_{ij} = P_{ij}`); this is what makes returned weights
  differentiable.

For fully masked rows the saved lse is :math:`-\infty`; the backward uses :math:`+\infty` there, so
:math:`P = 2^{-\infty - \infty} = 0`. Saved tensors are q, k, v, out and lse: O(n) training memory.
Scores with no dot form (additive), general score modifiers and biases with learned parameters are
differentiated per tile by autograd on the recomputed tile, with their parameters as inputs of the
``autograd.Function``.

Dropout (on the normalised weights, as the reference does) draws one keep-mask per tile from a
generator seeded by ``(seed, tile)``; the seed is drawn from torch's default generator, so
``torch.manual_seed`` makes it reproducible and the backward regenerates the same masks. With
dropout :math:`dV_j = \sum_i \tilde P_{ij} dO_i`, :math:`dS_{ij} = P_{ij}(Z_{ij} dP_{ij}/(1-p) - D_i)`,
where :math:`\tilde P = P Z / (1-p)` and still :math:`D_i = dO_i \cdot O_i`.

This file holds the forward, the backward and the entry point; the call's plan and per-tile
evaluation are in :mod:`.tile_plan`, the discovery of bias tensors that need gradients in
:mod:`.tile_params`, and the optional dense-weights pass in :mod:`.tile_weights`.

Shape legend: B batch, H query heads, Hkv key/value heads (GQA: query head h reads kv head
h // (H / Hkv)), L queries, S keys, E query/key dim, Ev value dim; l, s: one tile's query and key
counts.
"""

from __future__ import annotations

import torch

from ..core.call import AttentionCall
from ..core.output import BackendResult, materialized
from .tile_params import _bias_params
from .tile_plan import _INF, LN2, LOG2E, _Plan, _q_tile, _Tiles, _tile_mask, _tile_order
from .tile_weights import _weights
from .tiling import EMPTY, default_tiles, set_tile_sizes, tile_map

__all__ = ["blockwise_attention", "run", "supports", "set_tile_sizes"]


def _forward(plan: _Plan, qx, kx, v):
    """Online-softmax forward. qx (B, H, L, E) is q' (dot form) or q; returns out (B, H, L, Ev)
    in v's dtype and lse2 (B, H, L) in base 2 (work dtype).

    The running max, sum and output live in (B, H, L, ·) buffers — O(n), the size of the output —
    so tiles may be visited in any order. For relative-position biases (ALiBi, T5, Shaw) the bias
    of a tile depends only on its key-minus-query offset, so tiles are visited diagonal by diagonal
    and each bias tile is evaluated once per diagonal instead of once per tile."""
    B, H, L, Hkv = plan.B, plan.H, plan.L, plan.Hkv
    Ev = v.shape[-1]
    tiles = _Tiles(plan)
    dev = v.device
    m_all = torch.full((B, H, L, 1), -_INF, dtype=plan.work, device=dev)  # running max (base 2)
    l_all = torch.zeros((B, H, L, 1), dtype=plan.work, device=dev)  # running sum
    acc_all = torch.zeros((B, H, L, Ev), dtype=plan.work, device=dev)  # unnormalised output
    bq, bk = plan.block_q, plan.block_kv
    reuse = tiles.toeplitz
    bias_key, bias_tile, q_key, qt = None, None, None, None
    for qi, ki in _tile_order(plan, reuse):
        q0, q1 = qi * bq, min((qi + 1) * bq, L)
        k0, k1 = ki * bk, min((ki + 1) * bk, plan.S)
        l = q1 - q0
        skip, allowed = _tile_mask(tiles, plan.code_rows[qi][ki], q0, q1, k0, k1, dev) if plan.mask is not None else (False, None)
        if skip:
            continue
        if q_key != qi:
            qt, q_key = _q_tile(qx, plan, q0, q1), qi
        b2 = None
        if reuse:
            if bias_key != k0 - q0:  # a full-size tile: ragged edge tiles use its top-left corner
                bias_tile = tiles.bias(q0, q0 + bq, k0, k0 + bk, dev).to(plan.work) * LOG2E
                bias_key = k0 - q0
            b2 = bias_tile[..., :l, : k1 - k0]
        s2 = tiles.scores2(qt, kx[:, :, k0:k1], q0, q1, k0, k1, bias2=b2)  # (B, H, l, s)
        if allowed is not None:
            s2 = s2.masked_fill_(~allowed, -_INF)
        m, lsum, acc = m_all[:, :, q0:q1], l_all[:, :, q0:q1], acc_all[:, :, q0:q1]
        m_new = torch.maximum(m, s2.amax(-1, keepdim=True))
        # guard: a row with nothing allowed so far keeps max -inf; use 0 so exp2(-inf - 0) = 0
        m_use = torch.where(torch.isneginf(m_new), 0.0, m_new)
        # in place: the scores are not needed again. (Mixed-dtype variants that skip the fp32 copy
        # of half tiles — sub with promotion, exp2 into a bf16 out= — measured 2x slower here.)
        pt = s2.sub_(m_use).exp2_()  # (B, H, l, s)
        alpha = (m - m_use).exp2_()  # rescales earlier partial sums to the new max
        lsum.mul_(alpha).add_(pt.sum(-1, keepdim=True))
        if plan.dropout_p > 0:
            pt = pt * tiles.keep(qi, ki, pt.shape, dev) / (1.0 - plan.dropout_p)
        pv = pt.to(v.dtype).view(B, Hkv, -1, k1 - k0) @ v[:, :, k0:k1]  # (B, Hkv, g·l, Ev)
        acc.mul_(alpha).add_(pv.view(B, H, l, Ev))
        m.copy_(m_new)
    nonempty = l_all > 0
    safe = torch.where(nonempty, l_all, 1.0)
    out = acc_all.div_(safe).to(v.dtype)  # in place: no second (B, H, L, Ev) buffer at the peak
    lse2 = torch.where(nonempty, m_all + torch.log2(safe), -_INF).squeeze(-1)
    return out, lse2


def _backward(plan: _Plan, qx, kx, v, out, lse2, dout, dlse, params, need):
    """Recompute each tile's probabilities from the saved lse and accumulate dq', dk', dv, d(params)."""
    B, H, L, S, Hkv = plan.B, plan.H, plan.L, plan.S, plan.Hkv
    Ev = v.shape[-1]
    w = plan.work
    tiles = _Tiles(plan)
    bq, bk = plan.block_q, plan.block_kv
    dq = torch.zeros(qx.shape, dtype=w, device=v.device)  # (B, H, L, E)
    dk = torch.zeros(kx.shape, dtype=w, device=v.device)  # (B, Hkv, S, E)
    dv = torch.zeros(v.shape, dtype=w, device=v.device)  # (B, Hkv, S, Ev)
    # None until a tile produces a gradient: a parameter the bias never touches (e.g. the rest of a
    # module whose bound method is the bias) gets None, as autograd would give it, not zeros
    dparams: list[torch.Tensor | None] = [None] * len(params)
    # D_i = dO_i · O_i; a gradient on lse enters as -dlse (dS = P (dP - D + dlse))
    D = (dout.to(w) * out.to(w)).sum(-1, keepdim=True)  # (B, H, L, 1)
    if dlse is not None:
        D = D - dlse.to(w).unsqueeze(-1)
    lse_b = torch.where(torch.isneginf(lse2), _INF, lse2).unsqueeze(-1)  # P = 0 on fully masked rows
    for qi, kblocks in enumerate(plan.kept):
        q0, q1 = qi * bq, min((qi + 1) * bq, L)
        l = q1 - q0
        qt = _q_tile(qx, plan, q0, q1)
        dot = dout[:, :, q0:q1]  # (B, H, l, Ev)
        dot_g = dot.reshape(B, Hkv, -1, Ev)  # (B, Hkv, g·l, Ev)
        dot_w = dot_g.to(w)
        dq_t = torch.zeros((B, Hkv, qt.shape[2], qx.shape[-1]), dtype=w, device=v.device)
        for ki in kblocks:
            k0, k1 = ki * bk, min((ki + 1) * bk, S)
            skip, allowed = _tile_mask(tiles, plan.code_rows[qi][ki], q0, q1, k0, k1, v.device) if plan.mask is not None else (False, None)
            if skip:
                continue
            kt, vt = kx[:, :, k0:k1], v[:, :, k0:k1]
            graph = None
            if plan.general or params:
                with torch.enable_grad():
                    leaves = [qt.detach().requires_grad_(need[0]), kt.detach().requires_grad_(need[1])]
                    pl = [p for p in params]
                    if plan.general:
                        s_nat = tiles.scores_nat(leaves[0], leaves[1], q0, q1, k0, k1)
                    else:  # dot path with a learned additive bias: only the bias needs autograd
                        s_nat = tiles.bias(q0, q1, k0, k1, v.device).to(w).expand(B, H, l, k1 - k0)
                    graph = (s_nat, leaves, pl)
                s2 = s_nat.detach() * LOG2E if plan.general else tiles.scores2(qt, kt, q0, q1, k0, k1)
            else:
                s2 = tiles.scores2(qt, kt, q0, q1, k0, k1)
            if s2.dtype != w:
                s2 = s2.to(w)  # half tiles come back in their input dtype; recompute P in fp32
            if allowed is not None:
                s2 = s2.masked_fill_(~allowed, -_INF)
            pt = s2.sub_(lse_b[:, :, q0:q1]).exp2_()  # (B, H, l, s) = P
            keep = tiles.keep(qi, ki, pt.shape, v.device) if plan.dropout_p > 0 else None
            pd = pt * keep / (1.0 - plan.dropout_p) if keep is not None else pt
            if need[2]:
                dv[:, :, k0:k1] += pd.view(B, Hkv, -1, k1 - k0).transpose(-1, -2) @ dot_w
            dp = (dot_g @ vt.transpose(-1, -2)).view(B, H, l, k1 - k0).to(w)  # (B, H, l, s)
            if keep is not None:
                dp = dp * keep / (1.0 - plan.dropout_p)
            ds = pt.mul_(dp.sub_(D[:, :, q0:q1]))  # dL/ds, natural-unit scores (B, H, l, s)
            if graph is not None:
                s_nat, leaves, pl = graph
                wants = [x for x, n in zip(leaves, need[:2]) if n] if plan.general else []
                grads = torch.autograd.grad(s_nat, wants + pl, ds, allow_unused=True) if s_nat.requires_grad else ()
                it = iter(grads)
                if plan.general and grads:
                    if need[0]:
                        g0 = next(it)
                        if g0 is not None:
                            dq_t += g0.to(w)
                    if need[1]:
                        g1 = next(it)
                        if g1 is not None:
                            dk[:, :, k0:k1] += g1.to(w)
                for i in range(len(pl) if grads else 0):
                    gp = next(it)
                    if gp is not None:
                        dparams[i] = gp if dparams[i] is None else dparams[i] + gp
                if plan.general:
                    continue
            ds_g = ds.view(B, Hkv, -1, k1 - k0)  # (B, Hkv, g·l, s)
            if need[0]:
                dq_t += (ds_g.to(kt.dtype) @ kt).to(w)
            if need[1]:
                dk[:, :, k0:k1] += (ds_g.transpose(-1, -2).to(qt.dtype) @ qt).to(w)
        dq[:, :, q0:q1] = dq_t.view(B, H, l, -1)
    if not plan.general:
        # dot path: tiles use qt = q'·scale·log2 e and s = qt k'ᵀ / log2 e, so
        # dL/dq' = dS k' · scale and dL/dk' = dSᵀ qt / log2 e
        dq.mul_(plan.scale)
        dk.mul_(1.0 / LOG2E)
    return dq, dk, dv, dparams


class _BlockwiseFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, plan: _Plan, qx, kx, v, *params):
        out, lse2 = _forward(plan, qx, kx, v)
        ctx.plan = plan
        ctx.save_for_backward(qx, kx, v, out, lse2, *params)
        ctx.set_materialize_grads(False)
        return out, lse2 * LN2

    @staticmethod
    def backward(ctx, dout, dlse):
        plan = ctx.plan
        qx, kx, v, out, lse2, *params = ctx.saved_tensors
        need = ctx.needs_input_grad[1:4]
        if dout is None:
            dout = torch.zeros_like(out)
        dq, dk, dv, dparams = _backward(plan, qx, kx, v, out, lse2, dout.contiguous(), dlse, params, need)
        return (
            None,
            dq.to(qx.dtype) if need[0] else None,
            dk.to(kx.dtype) if need[1] else None,
            dv.to(v.dtype) if need[2] else None,
            *[None if g is None else g.to(p.dtype) for g, p in zip(dparams, params)],
        )


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def blockwise_attention(
    call: AttentionCall,
    *,
    block_q: int | None = None,
    block_kv: int | None = None,
    seed: int | None = None,
) -> BackendResult:
    """Run blockwise attention on a validated call; tile sizes default per mask/dtype/device
    (:func:`attnkit.backends.tiling.default_tiles`); ``seed`` fixes dropout (default: drawn from
    torch's generator)."""
    q, k, v = call.q, call.k, call.v
    B, H, L, E = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    dbq, dbk = default_tiles(call.mask, L, S, q.dtype, q.device)
    bq, bk = min(block_q or dbq, L), min(block_kv or dbk, S)
    for name, val in (("block_q", bq), ("block_kv", bk)):
        if isinstance(val, bool) or not isinstance(val, int) or val <= 0:
            raise ValueError(f"{name} must be a positive int, got {val!r}")
    codes = tile_map(call.mask, L, S, bq, bk)
    nonempty = codes != EMPTY
    kept = [torch.nonzero(row).flatten().tolist() for row in nonempty]
    work = _work_dtype(q.dtype)
    qk = call.score.as_dot(q, k)
    bias_general = call.bias is not None and not call.bias.additive
    qscale = None
    if qk is None:  # additive score: q and k go in raw, the score module runs per tile
        qx, kx, score = q, k, call.score
        params = [p for p in call.score.parameters() if p.requires_grad]
    else:
        qx, kx = qk
        score = None
        params = []
        if not bias_general:  # fold scale·log2 e into each query tile instead of every score tile
            qscale = call.scale * LOG2E
    params += _bias_params(call.bias)
    if call.dropout_p > 0 and seed is None:
        seed = int(torch.randint(0, 2**62, (1,)).item())
    plan = _Plan(
        B, H, Hkv, L, S, bq, bk, codes, call.scale, score, call.bias, call.mask,
        call.dropout_p, seed or 0, work, len(params), qscale, kept,
    )
    plan.code_rows = codes.tolist()
    out, lse = _BlockwiseFunction.apply(plan, qx, kx, v, *params)
    weights, mats = None, []
    if call.return_weights:
        weights = _weights(plan, qx, kx, lse).to(q.dtype)
        mats.append(materialized("weights", weights))
    return BackendResult(out, weights, lse, int(torch.isneginf(lse).sum()), mats)


def run(call: AttentionCall) -> BackendResult:
    return blockwise_attention(call)


def supports(call: AttentionCall) -> str | None:
    return None
