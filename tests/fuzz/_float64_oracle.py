"""An independent attention oracle for the differential fuzz, written from the definitions.

It imports nothing of attnkit and shares no code with ``tests/numpy_reference.py``: masks and biases
are described by plain specs (dicts of ints, lists and NumPy arrays, built by
``tests/fuzz/_fuzz_cases.py``) and turned into dense (B, H, L, S) arrays here, one definition each.
Computation is float64 torch so autograd gives the exact-ish dq, dk, dv; the same code run in
float32 is the fuzz's "same-dtype reference" baseline (flash-attention's tolerance rule).

Attention (Vaswani et al. 2017, https://arxiv.org/abs/1706.03762)::

    s[b, h, i, j] = score(q[b, h, i], k[b, h // g, j]) * scale      g = H / Hkv (GQA/MQA)
    s = modifiers(s)             additive biases and score_mods, applied in order
    p[b, h, i, :] = softmax over the allowed j; p = 0 where masked, all-zero rows when none allowed
    o[b, h, i] = sum_j p[b, h, i, j] v[b, h // g, j]

Non-finite inputs (NaN, ±inf) follow from the formula, evaluated over allowed pairs only: a score
of a masked pair is -inf whatever q, k or a bias hold there, and a masked pair adds nothing to the
output (not ``0 · v``), so a NaN a row may not see never reaches it; a row whose allowed scores hold
a NaN (from q, k or a bias) is NaN (its max and every weight are); a NaN value entry v[j, e] makes
column e NaN in every row of that head that may see any key (``0 · NaN`` reaches rows the mask hides
key j from, as in every peer), unless no row of the head may see key j (a dead key: padding, unused
cache slots, which never leaks); a row with no allowed key is 0 (and its gradients 0).

Positions: query i sits at key position ``i + off`` with ``off = S - L`` for ``bottom_right``
alignment (FlashAttention, decoding) and ``off = 0`` for ``top_left`` (SDPA's ``is_causal``).

Masks (True = may attend): causal ``j <= i + off``; sliding window ``i + off - left <= j <=
i + off + right`` (None = unbounded); padding: key j of sequence b is real iff ``j < len_b`` (right)
or ``j >= S - len_b`` (left); document: same id; prefix-LM ``j < prefix_b or causal``; a user
predicate ``j % every != 0``; combinations with and / or / not. Biases: ALiBi (Press et al. 2022,
https://arxiv.org/abs/2108.12409) with the paper's slopes, ``-m_h |pos_q - pos_k|``; T5 buckets
(Raffel et al. 2020, https://arxiv.org/abs/1910.10683) as in the T5 / Hugging Face code; Shaw et
al. 2018 (https://arxiv.org/abs/1803.02155) clipped distance ``clip(pos_k - pos_q, ±max)``;
soft-capping ``cap · tanh(s / cap)`` (Gemma 2); a user bias ``slope · (i - j)`` of raw indices.
Scores: dot and scaled dot (Luong 2015 / Vaswani 2017), general ``qᵀ W k``, additive
``vᵀ tanh(W_q q + W_k k + b)`` (Bahdanau 2015), cosine ``τ q·k / (|q| |k|)`` with norms clamped
at eps (Swin v2).

Shape legend: q (B, H, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev), masks/biases (B, H, L, S).
"""

from __future__ import annotations

import math

import numpy as np
import torch


# masks -------------------------------------------------------------------------------------------
def _offset(align: str, L: int, S: int) -> int:
    return S - L if align == "bottom_right" else 0


def allowed(spec: dict | None, B: int, H: int, L: int, S: int) -> np.ndarray:
    """Dense bool (B, H, L, S); True = may attend. ``spec`` None = everything allowed."""
    if spec is None:
        return np.ones((B, H, L, S), dtype=bool)
    kind = spec["kind"]
    i = np.arange(L)[:, None]
    j = np.arange(S)[None, :]
    if kind == "and":
        return allowed(spec["a"], B, H, L, S) & allowed(spec["b"], B, H, L, S)
    if kind == "or":
        return allowed(spec["a"], B, H, L, S) | allowed(spec["b"], B, H, L, S)
    if kind == "not":
        return ~allowed(spec["a"], B, H, L, S)
    out = np.zeros((B, H, L, S), dtype=bool)
    if kind == "causal":
        out[:] = j <= i + _offset(spec["align"], L, S)
    elif kind == "window":
        p = i + _offset(spec["align"], L, S)
        ok = np.ones((L, S), dtype=bool)
        if spec["left"] is not None:
            ok &= j >= p - spec["left"]
        if spec["right"] is not None:
            ok &= j <= p + spec["right"]
        out[:] = ok
    elif kind == "padding":
        for b, n in enumerate(spec["lengths"]):
            real = (np.arange(S) < n) if spec["side"] == "right" else (np.arange(S) >= S - n)
            out[b] = real[None, None, :]
    elif kind == "document":
        kv_ids, q_ids = np.asarray(spec["kv_ids"]), np.asarray(spec["q_ids"])
        for b in range(B):
            kv = kv_ids[b if kv_ids.shape[0] > 1 else 0]
            qi = q_ids[b if q_ids.shape[0] > 1 else 0]
            out[b] = qi[:, None] == kv[None, :]
    elif kind == "prefix_lm":
        prefix = spec["prefix"]
        causal_ok = j <= i + _offset(spec["align"], L, S)
        for b in range(B):
            n = prefix[b] if isinstance(prefix, list) else prefix
            out[b] = (j < n) | causal_ok
    elif kind == "tensor":
        out[:] = np.broadcast_to(np.asarray(spec["data"], dtype=bool), (B, H, L, S))
    elif kind == "mod":  # a user predicate: key index not divisible by `every`
        out[:] = (j % spec["every"]) != 0
    else:
        raise ValueError(f"unknown mask kind {kind!r}")
    return out


# biases ------------------------------------------------------------------------------------------
def alibi_slopes(n: int) -> list[float]:
    """Press et al.'s get_slopes: 2^(-8/n) geometric for n a power of two; otherwise the slopes of
    the closest lower power of two, then every other slope of twice that."""

    def power_of_2(m: int) -> list[float]:
        start = 2.0 ** (-(2.0 ** -(math.log2(m) - 3)))
        return [start * start**i for i in range(m)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + alibi_slopes(2 * closest)[0::2][: n - closest]


def t5_bucket(relative_position: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> torch.Tensor:
    """T5's ``_relative_position_bucket`` (mesh-tensorflow / Hugging Face), relative = pos_k - pos_q.
    The log is taken in float32 as those implementations do, so bucket edges match checkpoints."""
    ret = torch.zeros_like(relative_position)
    n = -relative_position
    if bidirectional:
        num_buckets //= 2
        ret = ret + (n < 0).long() * num_buckets
        n = n.abs()
    else:
        n = torch.maximum(n, torch.zeros_like(n))
    max_exact = num_buckets // 2
    is_small = n < max_exact
    val_if_large = max_exact + (
        torch.log(n.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).to(torch.long)
    val_if_large = torch.minimum(val_if_large, torch.full_like(val_if_large, num_buckets - 1))
    return ret + torch.where(is_small, n, val_if_large)


def _rel(align: str, L: int, S: int) -> np.ndarray:
    """pos_k - pos_q, (L, S)."""
    return np.arange(S)[None, :] - (np.arange(L)[:, None] + _offset(align, L, S))


def additive_bias(spec: dict, B: int, H: int, L: int, S: int) -> np.ndarray:
    """Dense float64 (B, H, L, S) of one additive bias spec."""
    kind = spec["kind"]
    out = np.zeros((B, H, L, S))
    if kind == "alibi":
        m = np.asarray(alibi_slopes(H))
        out[:] = -m[None, :, None, None] * np.abs(_rel(spec["align"], L, S))[None, None]
    elif kind == "t5":
        rel = torch.from_numpy(_rel(spec["align"], L, S)).long()
        bucket = t5_bucket(rel, spec["bidirectional"], spec["num_buckets"], spec["max_distance"]).numpy()
        table = np.asarray(spec["table"], dtype=np.float64)  # (num_buckets, H)
        out[:] = np.transpose(table[bucket], (2, 0, 1))[None]
    elif kind == "shaw":
        md = spec["max_distance"]
        rel = np.clip(_rel(spec["align"], L, S), -md, md)
        table = np.asarray(spec["table"], dtype=np.float64)  # (2 md + 1, H)
        out[:] = np.transpose(table[rel + md], (2, 0, 1))[None]
    elif kind == "tensor":
        out[:] = np.broadcast_to(np.asarray(spec["data"], dtype=np.float64), (B, H, L, S))
    elif kind == "custom":  # a user function of the raw indices (no alignment): slope · (i - j)
        out[:] = spec["slope"] * (np.arange(L)[:, None] - np.arange(S)[None, :])
    else:
        raise ValueError(f"unknown additive bias kind {kind!r}")
    return out


# scores ------------------------------------------------------------------------------------------
def scores(spec: dict, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Unscaled scores (B, H, L, S) from q (B, H, L, E) and k already expanded to H heads."""
    kind = spec["kind"]
    dt = q.dtype
    if kind in ("dot", "scaled_dot"):
        return torch.einsum("bhle,bhse->bhls", q, k)
    if kind == "dot_reduced":  # products, then a sum reduction: no GEMM
        return (q[..., :, None, :] * k[..., None, :, :]).sum(-1)
    if kind == "general_reduced":
        w = torch.as_tensor(spec["w"], dtype=dt)
        qw = q @ w if w.dim() == 2 else torch.einsum("bhle,hef->bhlf", q, w)
        return (qw[..., :, None, :] * k[..., None, :, :]).sum(-1)
    if kind == "dot_fma":  # what a GEMM microkernel does per entry: one fused multiply-add per e, in index order
        return _fma_dot(q, k)
    if kind == "dot_flipped":  # the same dot product from the other GEMM, summed over E in reverse
        return (k.flip(-1) @ q.flip(-1).transpose(-1, -2)).transpose(-1, -2)
    if kind in ("general", "general_flipped"):
        w = torch.as_tensor(spec["w"], dtype=dt)
        if kind == "general_flipped":  # q (W kᵀ) instead of (q W) kᵀ
            kw = torch.einsum("ef,bhsf->bhse", w, k) if w.dim() == 2 else torch.einsum("hef,bhsf->bhse", w, k)
            return (kw.flip(-1) @ q.flip(-1).transpose(-1, -2)).transpose(-1, -2)
        if w.dim() == 2:
            return torch.einsum("bhle,ef,bhsf->bhls", q, w, k)
        return torch.einsum("bhle,hef,bhsf->bhls", q, w, k)
    if kind == "additive":
        wq, wk = torch.as_tensor(spec["w_q"], dtype=dt), torch.as_tensor(spec["w_k"], dtype=dt)
        bk, vv = torch.as_tensor(spec["b_k"], dtype=dt), torch.as_tensor(spec["v"], dtype=dt)
        hq = torch.einsum("bhle,ae->bhla", q, wq)
        hk = torch.einsum("bhse,ae->bhsa", k, wk) + bk
        return torch.einsum("bhlsa,a->bhls", torch.tanh(hq[:, :, :, None, :] + hk[:, :, None, :, :]), vv.reshape(-1))
    if kind == "cosine":
        eps = spec["eps"]
        qn = q / torch.linalg.vector_norm(q, dim=-1, keepdim=True).clamp(min=eps)
        kn = k / torch.linalg.vector_norm(k, dim=-1, keepdim=True).clamp(min=eps)
        return spec["tau"] * torch.einsum("bhle,bhse->bhls", qn, kn)
    raise ValueError(f"unknown score kind {kind!r}")


def _fma_dot(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """q kᵀ accumulated over E in index order with one rounding per step (a fused multiply-add):
    the product of two values of q's dtype is exact one precision up, the running sum is rounded
    back each step. In float64 this is the plain dot product; in float32 it is the order of MKL's
    and oneDNN's microkernels, which at |scores| in the hundreds rounds several ulps away from a
    pairwise sum. q (B, H, L, E), k (B, H, S, E) -> (B, H, L, S)."""
    if q.dtype != torch.float32:
        return torch.einsum("bhle,bhse->bhls", q, k)
    acc = torch.zeros(q.shape[:-1] + (k.shape[-2],), dtype=torch.float32)
    for e in range(q.shape[-1]):
        prod = q[..., e, None].double() * k[..., e].double().unsqueeze(-2)  # exact: 24 + 24 bits < 53
        acc = (acc.double() + prod).float()
    return acc


# attention ---------------------------------------------------------------------------------------
def attention(q, k, v, *, score: dict, scale: float, mask: dict | None, biases: list[dict], dtype=torch.float64,
              stats: dict | None = None, order: int = 0):
    """Output (B, H, L, Ev) in ``dtype``, differentiable in q, k, v (which may require grad).
    ``stats``, if given, receives ``max_logit``: the largest |logit| among allowed pairs.
    ``order`` 1 evaluates the same formula in another equally valid float order: a dot score as
    (k · (scale q)ᵀ)ᵀ summed over E in reverse instead of (q kᵀ) · scale (another GEMM, the scale
    rounded into q), a general one as q (W kᵀ) instead of (q W) kᵀ, and the output as (vᵀ pᵀ)ᵀ;
    ``order`` 2 forms the products and sums them with a reduction instead of a GEMM, for scores
    and output; ``order`` 3 accumulates a dot score over E in index order with one rounding per
    fused multiply-add (``_fma_dot``; other scores as order 0). In float64 all agree to ~1e-16; in float32 each is one sample of the rounding any
    float32 implementation carries (``_fuzz_judge`` takes the largest)."""
    B, H, L, _ = q.shape
    S = k.shape[2]
    g = H // k.shape[1]
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    kx, vx = torch.repeat_interleave(k, g, dim=1), torch.repeat_interleave(v, g, dim=1)
    if order == 1 and score["kind"] in ("dot", "scaled_dot"):
        s = _pairwise_scores({"kind": "dot_flipped"}, q * scale, kx)
    elif order == 1 and score["kind"] == "general":
        s = _pairwise_scores({**score, "kind": "general_flipped"}, q, kx) * scale
    elif order == 2 and score["kind"] in ("dot", "scaled_dot", "general"):
        s = _pairwise_scores({**score, "kind": "general_reduced" if score["kind"] == "general" else "dot_reduced"}, q, kx) * scale
    elif order == 3 and score["kind"] in ("dot", "scaled_dot"):
        s = _pairwise_scores({"kind": "dot_fma"}, q, kx) * scale
    else:
        s = _pairwise_scores(score, q, kx) * scale
    for spec in biases:  # in order: additive ones add, soft-capping squashes what came before
        if spec["kind"] == "softcap":
            s = spec["cap"] * torch.tanh(s / spec["cap"])
        else:
            s = s + torch.from_numpy(additive_bias(spec, B, H, L, S)).to(dtype)
    ok = torch.from_numpy(allowed(mask, B, H, L, S))
    if stats is not None:
        stats["max_logit"] = float(torch.where(ok, s.detach().abs(), torch.zeros_like(s)).max()) if s.numel() else 0.0
    s = torch.where(ok, s, torch.full_like(s, -math.inf))
    # softmax over allowed keys only; rows with no allowed key are all zero (attnkit's convention)
    row_max = torch.where(ok.any(-1, keepdim=True), s.amax(-1, keepdim=True), torch.zeros_like(s[..., :1])).detach()
    e = torch.where(ok, torch.exp(s - row_max), torch.zeros_like(s))
    z = e.sum(-1, keepdim=True)
    # masked pairs weigh exactly 0 even in a NaN row (0 / NaN would be NaN and reach dv of keys it may not see)
    p = torch.where(ok, e / torch.where(z != 0, z, torch.ones_like(z)), torch.zeros_like(s))
    out = _weighted_values(p, vx, ok)
    if order == 1 and bool(torch.isfinite(vx.detach()).all()):
        out = (vx.transpose(-1, -2) @ p.transpose(-1, -2)).transpose(-1, -2)
    elif order == 2 and bool(torch.isfinite(vx.detach()).all()):
        out = (p[..., None] * vx[:, :, None, :, :]).sum(-2)
    return out


def _pairwise_scores(spec: dict, q: torch.Tensor, kx: torch.Tensor) -> torch.Tensor:
    """``scores`` where a non-finite entry of query row i or key row j reaches score (i, j) only.

    A matmul's gradient mixes every pair (dq_i = sum_j ds_ij k_j: 0 · NaN from a masked NaN key is
    NaN), so the scores are computed from q and k with their non-finite rows zeroed, and the
    pairs touching such a row take their true (non-finite) value straight through: the forward sees
    it, and its gradient flows into the zeroed computation — NaN where the pair is allowed (its row
    is NaN), 0 where it is masked. Without non-finite inputs this is ``scores``."""
    bad_q = ~torch.isfinite(q.detach()).all(-1)  # (B, H, L)
    bad_k = ~torch.isfinite(kx.detach()).all(-1)  # (B, H, S)
    if not bool(bad_q.any() or bad_k.any()):
        return scores(spec, q, kx)
    clean = scores(spec, torch.where(bad_q[..., None], 0.0, q), torch.where(bad_k[..., None], 0.0, kx))
    true = scores(spec, q.detach(), kx.detach())
    pair = bad_q[..., :, None] | bad_k[..., None, :]
    return torch.where(pair, clean + (true - clean).detach(), clean)


def _weighted_values(p: torch.Tensor, vx: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
    """sum over allowed j of p[..., i, j] v[..., j, :]: p @ v, except that a non-finite value row
    reaches only the queries allowed to see it (``0 · NaN`` would be NaN). p, ok (B, H, L, S); vx (B, H, S, Ev)."""
    bad = (~torch.isfinite(vx.detach()).all(-1)).any(dim=(0, 1))  # (S,) keys holding a non-finite value
    if not bool(bad.any()):
        return p @ vx
    j = torch.nonzero(bad).flatten()
    clean = torch.where(bad[None, None, :, None], torch.zeros_like(vx), vx)
    okj = ok[..., j]  # (B, H, L, J)
    zero = torch.zeros((), dtype=vx.dtype)
    # select before multiplying, so neither the product nor its gradient sees 0 · NaN on masked pairs
    vj = torch.where(okj[..., None], vx[:, :, None, j], zero)  # (B, H, L, J, Ev)
    pj = torch.where(okj, p[..., j], zero)[..., None]  # (B, H, L, J, 1)
    # a value a row may not see still reaches it as 0 · v when another row of its head sees that key
    # (attnkit's documented semantics, as in every peer: a causal mask does not hide a NaN value from
    # earlier rows); keys no row of the head sees are dead and rows that see nothing are 0
    live = okj.any(-2, keepdim=True)  # (B, H, 1, J)
    hidden = live & ~okj & ok.any(-1, keepdim=True)  # (B, H, L, J)
    vh = torch.where(hidden[..., None], vx.detach()[:, :, None, j] * zero, zero)  # 0 · v: NaN where v is not finite
    return p @ clean + (pj * vj).sum(-2) + vh.sum(-2)


def dead_keys(mask: dict | None, B: int, H: int, Hkv: int, L: int, S: int) -> np.ndarray:
    """bool (B, Hkv, S): keys no query of any head sharing that kv head may attend — what a program
    may leave garbage in (padding, unused cache slots) without changing any output or gradient."""
    ok = allowed(mask, B, H, L, S).reshape(B, Hkv, H // Hkv, L, S)
    return ~ok.any(axis=(2, 3))
