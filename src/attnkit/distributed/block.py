"""Block-local attention math for ring attention: one query block against one key/value block.

Plain PyTorch, no communication. The ring (``ring_attention.py``) calls these once per
(query chunk, key chunk) pair and merges the partial results by log-sum-exp, the same algebra as
FlashAttention (Dao et al., 2022, https://arxiv.org/abs/2205.14135) and Ring Attention
(Liu et al., 2023, https://arxiv.org/abs/2310.01889).

Shape legend
------------
B batch, Hkv key/value heads, G = H / Hkv query heads per key/value head (GQA; G = 1 is plain
multi-head), Lq query rows of the block, Lk key rows of the block, E query/key dim, Ev value dim.
Queries are grouped as ``(B, Hkv, G, Lq, E)`` so one key/value head serves its G query heads by
broadcasting, without copying K/V G times.

Forward of one block
--------------------
With scores ``S = scale * Q K^T`` (-inf where the mask forbids a pair), a block gives

    m = max_j S_ij,   l = sum_j exp(S_ij - m),   O_b = (exp(S - m) V) / l,   lse_b = m + log l.

A row whose keys are all masked has m = -inf. Using m directly would give exp(-inf - -inf) = NaN,
so the guard replaces such an m by 0: every exp(S_ij - 0) is then 0, l = 0, and the row's output
is defined as 0 and its lse as -inf ("this block contributes nothing").

Merging blocks by log-sum-exp
-----------------------------
Let block i give (O_i, lse_i) with lse_i = log sum_{j in block i} exp(S_j). The full-row
normaliser is lse = log sum_i exp(lse_i); computing it with a running max for stability,

    M   = max_i lse_i                          (0 if every lse_i is -inf)
    lse = M + log sum_i exp(lse_i - M)
    O   = sum_i exp(lse_i - lse) * O_i.

Exact, because O_i = sum_j exp(S_j - lse_i) V_j, so exp(lse_i - lse) O_i = sum_j exp(S_j - lse) V_j
and the sum over blocks is the softmax over the whole row. Two at a time (what the ring does as
blocks arrive): ``merge_partials`` keeps (O, lse) and folds in each new (O_b, lse_b).

Backward of one block (FlashAttention backward)
-----------------------------------------------
Given the *final* row lse and dO, probabilities are recomputed exactly as P = exp(S - lse) (no
renormalisation: the global lse already is the normaliser). With D = rowsum(dO ∘ O) (the same for
every block of the row, computed once):

    dV += P^T dO,   dP = dO V^T,   dS = P ∘ (dP - D),
    dQ += scale * dS K,   dK += scale * dS^T Q.

(dS = P ∘ (dP - D) is the softmax Jacobian-vector product: d softmax_i = P_i (dP_i - sum_j P_j dP_j)
and sum_j P_j dP_j = sum_j P_j (dO · V_j) = dO · O = D.) For GQA, dK and dV sum over the G query
heads that share a key/value head. Rows with lse = -inf get P = 0 through the same guard.
"""

from __future__ import annotations

import torch

from ..core import online_softmax

_NEG_INF = float("-inf")
# score elements one chunk of query rows may hold (2^21 fp32 = 8 MiB; smaller chunks also ran
# faster here, staying in cache): a block's (Lq, Lk) score
# matrix is never materialized whole, so a rank's peak memory grows linearly in its shard length
SCORE_ELEMENTS = 1 << 21


def row_chunks(q: torch.Tensor, lk: int, budget: int | None = None) -> list[tuple[int, int]]:
    """(start, stop) query-row ranges of q (B, Hkv, G, Lq, E) whose (.., rows, lk) scores fit ``budget``."""
    B, Hkv, G, Lq, _ = q.shape
    per_row = max(B * Hkv * G * lk, 1)
    rows = max(16, (budget or SCORE_ELEMENTS) // per_row)
    return [(i, min(i + rows, Lq)) for i in range(0, Lq, rows)]


def accum_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulate in float32 at least (float64 inputs stay float64): softmax in low precision drifts."""
    return torch.promote_types(dtype, torch.float32)


# The row lse's dtype, whatever the inputs'. A float32 lse is rounded to an ulp of itself (2e-6 at
# |lse| ~ 30), an error every weight the merges and the backward's exp(S - lse) rebuild from it
# inherit, one per row, where the reference's weights are off by eps times the scores' size: the
# ring's dv came out 6x the float32 reference's own error at logits of std 8. The lse is one value
# per row; the scores stay in the accumulation dtype (minus_lse).
LSE_DTYPE = torch.float64


def minus_lse(s: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """In place ``s - lse`` for scores s (..., Lk) and a float64 lse (...): the lse split into its
    rounding to s's dtype and the remainder, subtracted in turn, so where a weight matters (s near
    the lse) ``s - hi`` is exact and the remainder moves it by its own tiny size. -inf rows: 0."""
    hi = online_softmax.guard(lse).to(s.dtype)
    lo = torch.where(torch.isfinite(lse), lse - hi.to(lse.dtype), 0.0).to(s.dtype)
    return s.sub_(hi.unsqueeze(-1)).sub_(lo.unsqueeze(-1))


def group_queries(q: torch.Tensor, num_kv_heads: int) -> torch.Tensor:
    """(B, H, L, E) -> (B, Hkv, G, L, E), query head h = kv_head * G + g (as in SDPA's enable_gqa)."""
    B, H, L, E = q.shape
    return q.reshape(B, num_kv_heads, H // num_kv_heads, L, E)


def block_mask(q_pos: torch.Tensor, k_pos: torch.Tensor, *, causal: bool, seq_len: int) -> torch.Tensor:
    """Boolean (Lq, Lk) mask, True = may attend, from global positions.

    Positions ``>= seq_len`` are padding: a padded key is seen by no one and a padded query sees
    nothing (its output is 0, so it also sends no gradient anywhere).
    """
    allowed = (q_pos[:, None] < seq_len) & (k_pos[None, :] < seq_len)  # (Lq, Lk)
    if causal:
        allowed = allowed & (k_pos[None, :] <= q_pos[:, None])
    return allowed


def _scores(q_scaled: torch.Tensor, k: torch.Tensor, allowed: torch.Tensor | None, bias: torch.Tensor | None = None) -> torch.Tensor:
    # q_scaled = scale * q (B, Hkv, G, Lq, E), k (B, Hkv, Lk, E) -> (B, Hkv, G, Lq, Lk).
    # Scaling q (Lq x E) instead of the scores (Lq x Lk) saves one score-sized temporary; the
    # score tensor is fresh, so the mask is applied in place. Memory per block: the score matrix.
    s = torch.matmul(q_scaled, k.unsqueeze(2).transpose(-1, -2))
    if bias is not None:  # an additive position bias (B|1, Hkv|1, G|1, Lq, Lk), natural units
        s.add_(bias.to(s.dtype))
    if allowed is not None:
        s.masked_fill_(~allowed, _NEG_INF)
    return s


def block_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float, allowed: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Partial attention of a query block over one key/value block, in chunks of query rows
    (:func:`row_chunks`); shapes and results as :func:`_block_forward_dense`."""
    chunks = row_chunks(q, k.shape[-2])
    if len(chunks) == 1:
        return _block_forward_dense(q, k, v, scale=scale, allowed=allowed, bias=bias)
    parts = [_block_forward_dense(q[..., a:b, :], k, v, scale=scale, allowed=_rows(allowed, a, b), bias=_rows(bias, a, b))
             for a, b in chunks]
    return torch.cat([o for o, _ in parts], dim=-2), torch.cat([l for _, l in parts], dim=-1)


def _rows(t: torch.Tensor | None, a: int, b: int) -> torch.Tensor | None:
    """Query rows a:b of a (.., Lq, Lk) mask or bias."""
    return None if t is None else t[..., a:b, :]


def _block_forward_dense(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float, allowed: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Partial attention of a query block over one key/value block.

    q (B, Hkv, G, Lq, E), k (B, Hkv, Lk, E), v (B, Hkv, Lk, Ev), ``allowed`` (Lq, Lk) or None.
    Returns ``(out, lse)``: out (B, Hkv, G, Lq, Ev) in the accumulation dtype and lse (B, Hkv, G,
    Lq) in :data:`LSE_DTYPE`; fully masked rows give out = 0 and lse = -inf.
    """
    acc = accum_dtype(q.dtype)
    q, k, v = q.to(acc), k.to(acc), v.to(acc)
    s = _scores(q * scale, k, allowed, bias)
    # one online-softmax step from an empty row; p: unnormalised probabilities, in place of the scores
    m0 = torch.full(s.shape[:-1] + (1,), _NEG_INF, dtype=s.dtype, device=s.device)
    m, _, p, _ = online_softmax.step(m0, s, inplace=True)  # m (B, Hkv, G, Lq, 1)
    # m + log(sum) in LSE_DTYPE, never rounded to float32; 0-sum rows divide by 1
    safe_sum, lse = online_softmax.finish(m.to(LSE_DTYPE), p.sum(dim=-1, keepdim=True).to(LSE_DTYPE))
    out = torch.matmul(p, v.unsqueeze(2)) / safe_sum.to(acc)
    return out, lse.squeeze(-1)


def merge_partials(
    out: torch.Tensor, lse: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fold block result (out_b, lse_b) into running (out, lse); see the module docstring.

    out/out_b (..., Lq, Ev), lse/lse_b (..., Lq). Rows where both lse are -inf stay (0, -inf).
    """
    return online_softmax.merge(out, lse, out_b, lse_b)  # weights in the lse's float64, applied in out's dtype


def block_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    d_out: torch.Tensor,
    lse: torch.Tensor,
    delta: torch.Tensor,
    *,
    scale: float,
    allowed: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of one block pair in chunks of query rows (:func:`row_chunks`): dq per chunk,
    dk and dv summed over chunks. Shapes and results as :func:`_block_backward_dense`."""
    chunks = row_chunks(q, k.shape[-2])
    if len(chunks) == 1:
        return _block_backward_dense(q, k, v, d_out, lse, delta, scale=scale, allowed=allowed, bias=bias)
    dqs, dk, dv = [], None, None
    for a, b in chunks:
        dq_c, dk_c, dv_c = _block_backward_dense(
            q[..., a:b, :], k, v, d_out[..., a:b, :], lse[..., a:b], delta[..., a:b],
            scale=scale, allowed=_rows(allowed, a, b), bias=_rows(bias, a, b),
        )
        dqs.append(dq_c)
        dk, dv = (dk_c, dv_c) if dk is None else (dk.add_(dk_c), dv.add_(dv_c))
    return torch.cat(dqs, dim=-2), dk, dv


def _block_backward_dense(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    d_out: torch.Tensor,
    lse: torch.Tensor,
    delta: torch.Tensor,
    *,
    scale: float,
    allowed: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradient contributions of one (query block, key/value block) pair.

    q (B, Hkv, G, Lq, E), k (B, Hkv, Lk, E), v (B, Hkv, Lk, Ev), d_out (B, Hkv, G, Lq, Ev),
    lse and delta = rowsum(dO ∘ O) (B, Hkv, G, Lq) -- lse is the *final* row lse, not the block's.
    Returns ``(dq, dk, dv)``: dq (B, Hkv, G, Lq, E), dk (B, Hkv, Lk, E), dv (B, Hkv, Lk, Ev),
    in the accumulation dtype; dk and dv are already summed over the G query heads.
    """
    acc = accum_dtype(q.dtype)
    q, k, v, d_out = q.to(acc), k.to(acc), v.to(acc), d_out.to(acc)
    q_scaled = q * scale
    p = minus_lse(_scores(q_scaled, k, allowed, bias), lse).exp_()  # (B, Hkv, G, Lq, Lk); 0 where masked
    dv = torch.matmul(p.transpose(-1, -2), d_out).sum(dim=2)  # (B, Hkv, Lk, Ev)
    dp = torch.matmul(d_out, v.unsqueeze(2).transpose(-1, -2))  # (B, Hkv, G, Lq, Lk)
    ds = dp.sub_(delta.unsqueeze(-1)).mul_(p)  # P ∘ (dP - D), in place of dP
    del p, dp
    dq = torch.matmul(ds, k.unsqueeze(2)) * scale  # (B, Hkv, G, Lq, E)
    dk = torch.matmul(ds.transpose(-1, -2), q_scaled).sum(dim=2)  # (B, Hkv, Lk, E); scale via q_scaled
    return dq, dk, dv
