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

Shape legend: B batch, H query heads, Hkv key/value heads (GQA: query head h reads kv head
h // (H / Hkv)), L queries, S keys, E query/key dim, Ev value dim; l, s: one tile's query and key
counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..core.biases import (
    ALiBi,
    CustomBias,
    RelativePositionBias,
    ScoreMod,
    ScoreModifier,
    SumOfModifiers,
    T5RelativeBias,
    TensorBias,
)
from ..core.call import AttentionCall
from ..core.indices import index_grid
from ..core.masks import CausalMask, Mask, SlidingWindowMask
from ..core.output import BackendResult, materialized
from ..core.scores import Score
from .tiling import EMPTY, FULL, UNKNOWN, default_tiles, set_tile_sizes, tile_map

__all__ = ["blockwise_attention", "run", "supports", "set_tile_sizes"]

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
_INF = float("inf")


@dataclass
class _Plan:
    """What the forward and backward share: shapes, tiles, and how to compute one score tile."""

    B: int
    H: int
    Hkv: int
    L: int
    S: int
    block_q: int
    block_kv: int
    codes: torch.Tensor  # (nq, nk) int8 tile codes
    scale: float
    score: Score | None  # None: q', k' are already in dot form
    bias: ScoreModifier | None
    mask: Mask | None
    dropout_p: float
    seed: int
    work: torch.dtype  # dtype of softmax statistics and accumulators
    n_params: int
    qscale: float | None = None  # dot path: scale·log2 e applied to each query tile (no scaled copy of q)
    kept: list[list[int]] = field(default_factory=list)  # non-empty key blocks per query block
    code_rows: list[list[int]] = field(default_factory=list)  # codes as Python ints (no tensor indexing per tile)

    @property
    def groups(self) -> int:
        return self.H // self.Hkv

    @property
    def general(self) -> bool:
        """Tiles need the score module or a non-additive modifier, not a plain q' k'ᵀ."""
        return self.score is not None or (self.bias is not None and not self.bias.additive)


def _bias_params(bias: ScoreModifier | None) -> list[torch.Tensor]:
    """Tensors of a bias that may want gradients: module parameters and dense tensor biases."""
    if bias is None:
        return []
    out = [p for p in bias.parameters() if p.requires_grad]
    mods = bias.parts if isinstance(bias, SumOfModifiers) else [bias]
    out += [m.t for m in mods if isinstance(m, TensorBias) and m.t.requires_grad]
    for m in mods:
        if isinstance(m, (CustomBias, ScoreMod)):
            out += [t for t in _captured_tensors(m.fn) if not any(t is o for o in out)]
    return out


def _captured_tensors(fn) -> list[torch.Tensor]:
    """Trainable tensors a user's bias/score function reads from outside (closure cells, defaults,
    globals it names, a bound module). The backward recomputes tiles and can only hand gradients to tensors it was given as
    inputs of the autograd Function, so these must be found here, or their gradients would be lost."""
    found: list[torch.Tensor] = []
    cells = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ()) if _has_contents(c)]
    code, glob = getattr(fn, "__code__", None), getattr(fn, "__globals__", {})
    named = [glob[n] for n in (code.co_names if code is not None else ()) if n in glob]
    objs = cells + named + list(getattr(fn, "__defaults__", None) or ()) + [getattr(fn, "__self__", None)]
    for o in objs:
        if isinstance(o, torch.Tensor) and o.requires_grad:
            found.append(o)
        elif isinstance(o, torch.nn.Module):
            found += [p for p in o.parameters() if p.requires_grad]
    return found


def _has_contents(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # an empty cell (a variable not yet assigned when fn was made)
        return False
    return True


def _relative(bias: ScoreModifier) -> bool:
    """Biases that are a function of (head, key position − query position) only."""
    if isinstance(bias, SumOfModifiers):
        return all(_relative(p) for p in bias.parts)
    return type(bias) in (ALiBi, T5RelativeBias, RelativePositionBias)


class _Tiles:
    """Per-call helpers that evaluate masks, biases and scores on one tile."""

    def __init__(self, plan: _Plan):
        self.p = plan
        L, S = plan.L, plan.S
        self.mask_fn = plan.mask.predicate(L, S) if plan.mask is not None else None
        self.bias_fn = plan.bias.bias_fn(L, S) if plan.bias is not None and plan.bias.additive else None
        self.mod_fn = plan.bias.score_mod(L, S) if plan.bias is not None and not plan.bias.additive else None
        self.toeplitz = self.bias_fn is not None and not plan.general and _relative(plan.bias)
        self.shift_invariant = type(plan.mask) in (CausalMask, SlidingWindowMask)
        self.mask_cache: dict[tuple[int, int, int], torch.Tensor] = {}

    def grid(self, obj_dims, q0, q1, k0, k1, device):
        p = self.p
        nb = p.B if "b" in obj_dims else 1
        nh = p.H if "h" in obj_dims else 1
        return index_grid((q0, q1), (k0, k1), batch=nb, heads=nh, device=device)

    def allowed(self, q0, q1, k0, k1, device) -> torch.Tensor:
        # causal and window masks depend only on key − query: partial tiles repeat along diagonals
        key = (k0 - q0, q1 - q0, k1 - k0) if self.shift_invariant else None
        if key is not None and key in self.mask_cache:
            return self.mask_cache[key]
        g = self.grid(self.p.mask.dims, q0, q1, k0, k1, device)
        out = torch.as_tensor(self.mask_fn(g.b, g.h, g.q, g.kv), device=device)
        if key is not None:
            if len(self.mask_cache) > 64:
                self.mask_cache.clear()
            self.mask_cache[key] = out
        return out

    def bias(self, q0, q1, k0, k1, device) -> torch.Tensor:
        g = self.grid(self.p.bias.dims, q0, q1, k0, k1, device)
        return torch.as_tensor(self.bias_fn(g.b, g.h, g.q, g.kv), device=device)

    def scores_nat(self, qt, kt, q0, q1, k0, k1) -> torch.Tensor:
        """Natural-unit scores (B, H, l, s) of the general path, differentiable (autograd)."""
        p = self.p
        B, H, l, s = p.B, p.H, q1 - q0, k1 - k0
        if p.score is not None:
            kx = kt.repeat_interleave(p.groups, dim=1) if p.groups > 1 else kt  # (B, H, s, E)
            sc = p.score(qt.reshape(B, H, l, -1), kx) * p.scale
        else:
            sc = (qt @ kt.transpose(-1, -2)).view(B, H, l, s) * p.scale
        sc = sc.to(p.work)
        if self.bias_fn is not None:
            sc = sc + self.bias(q0, q1, k0, k1, sc.device).to(p.work)
        elif self.mod_fn is not None:
            g = self.grid(p.bias.dims, q0, q1, k0, k1, sc.device)
            sc = self.mod_fn(sc, g.b, g.h, g.q, g.kv)
        return sc

    def scores2(self, qt, kt, q0, q1, k0, k1, bias2=None) -> torch.Tensor:
        """Base-2 scores (B, H, l, s) in the work dtype; for the dot path q' is pre-scaled by scale·log2 e.
        ``bias2``: this tile's additive bias already in base 2 (reused across a diagonal)."""
        p = self.p
        if p.general:
            return self.scores_nat(qt, kt, q0, q1, k0, k1) * LOG2E
        s2 = (qt @ kt.transpose(-1, -2)).view(p.B, p.H, q1 - q0, k1 - k0)  # (B, H, l, s)
        if s2.dtype != p.work:
            s2 = s2.to(p.work)
        if bias2 is not None:
            s2 = s2.add_(bias2)
        elif self.bias_fn is not None:
            s2 = s2.add_(self.bias(q0, q1, k0, k1, s2.device).to(p.work), alpha=LOG2E)
        return s2

    def keep(self, qi, ki, shape, device) -> torch.Tensor:
        """Dropout keep-mask (B, H, l, s) for tile (qi, ki), the same in forward and backward."""
        nk = self.p.codes.shape[1]
        gen = torch.Generator(device=device)
        gen.manual_seed((self.p.seed * 1_000_003 + qi * nk + ki) % (2**63 - 1))
        return torch.rand(shape, generator=gen, device=device) >= self.p.dropout_p


def _q_tile(qx: torch.Tensor, plan: _Plan, q0: int, q1: int) -> torch.Tensor:
    """Query tile as (B, Hkv, g·l, E): the g query heads sharing a kv head stacked along rows, so one
    GEMM against the kv head serves them all without repeating k."""
    B, Hkv, g = plan.B, plan.Hkv, plan.groups
    t = qx[:, :, q0:q1]  # (B, H, l, E)
    if plan.qscale is not None:
        t = t * plan.qscale  # a tile-sized copy; scaling all of q would hold a second (B, H, L, E)
    if g == 1:
        return t
    return t.reshape(B, Hkv, g * (q1 - q0), qx.shape[-1])


def _tile_mask(tiles: _Tiles, code: int, q0, q1, k0, k1, device):
    """(skip, allowed-or-None) for one tile; UNKNOWN tiles are evaluated and classified here."""
    if code == FULL:
        return False, None
    allowed = tiles.allowed(q0, q1, k0, k1, device)
    if code == UNKNOWN:
        if not bool(allowed.any()):
            return True, None
        if bool(allowed.all()):
            return False, None
    return False, allowed


def _tile_order(plan: _Plan, diagonal: bool) -> list[tuple[int, int]]:
    """Non-empty tiles, row by row, or grouped by key-minus-query offset for a reusable bias tile."""
    pairs = [(qi, ki) for qi, ks in enumerate(plan.kept) for ki in ks]
    if diagonal:
        pairs.sort(key=lambda t: (t[1] * plan.block_kv - t[0] * plan.block_q, t[0]))
    return pairs


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
    dparams = [torch.zeros_like(p) for p in params]
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
                        dparams[i] += gp
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
            *[g.to(p.dtype) for g, p in zip(dparams, params)],
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


def _weights(plan: _Plan, qx, kx, lse) -> torch.Tensor:
    """Second pass: weights (B, H, L, S) = exp(s - lse) per tile, differentiable through s and the
    Function's lse output. Costs the (L, S) memory the caller asked for."""
    tiles = _Tiles(plan)
    B, H, L, S = plan.B, plan.H, plan.L, plan.S
    bq, bk = plan.block_q, plan.block_kv
    lse_safe = torch.where(torch.isneginf(lse), 0.0, lse).unsqueeze(-1)
    rows = []
    for qi in range(plan.codes.shape[0]):
        q0, q1 = qi * bq, min((qi + 1) * bq, L)
        qt = _q_tile(qx, plan, q0, q1)
        row = []
        for ki in range(plan.codes.shape[1]):
            k0, k1 = ki * bk, min((ki + 1) * bk, S)
            code = plan.code_rows[qi][ki]
            skip, allowed = (code == EMPTY, None) if code == EMPTY else (
                _tile_mask(tiles, code, q0, q1, k0, k1, qx.device) if plan.mask is not None else (False, None)
            )
            if skip:
                row.append(torch.zeros(B, H, q1 - q0, k1 - k0, dtype=plan.work, device=qx.device))
                continue
            s_nat = tiles.scores2(qt, kx[:, :, k0:k1], q0, q1, k0, k1).to(plan.work) * LN2 if not plan.general else tiles.scores_nat(
                qt, kx[:, :, k0:k1], q0, q1, k0, k1
            )
            if allowed is not None:
                s_nat = s_nat.masked_fill(~allowed, -_INF)
            row.append(torch.exp(s_nat - lse_safe[:, :, q0:q1]))
        rows.append(torch.cat(row, dim=-1))
    return torch.cat(rows, dim=2)


def run(call: AttentionCall) -> BackendResult:
    return blockwise_attention(call)


def supports(call: AttentionCall) -> str | None:
    return None
