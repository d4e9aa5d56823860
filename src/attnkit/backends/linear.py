r"""Linear (kernelized) attention: an approximation of softmax attention in O(n) time and memory.

* elu + 1 feature map — Katharopoulos et al. 2020, "Transformers are RNNs",
  https://arxiv.org/abs/2006.16236.
* positive orthogonal random features (FAVOR+) — Choromanski et al. 2021, "Rethinking Attention
  with Performers", https://arxiv.org/abs/2009.14794.

Derivation
----------
Softmax attention is :math:`o_i = \sum_j \kappa(q_i, k_j) v_j / \sum_j \kappa(q_i, k_j)` with the
kernel :math:`\kappa(q, k) = e^{q \cdot k \cdot \mathrm{scale}}`. Replace the kernel by a dot product
of feature maps, :math:`\kappa(q, k) \approx \phi(q) \cdot \phi(k)` with :math:`\phi: \mathbb{R}^E \to
\mathbb{R}^F_{>0}`. Associativity then removes the (L, S) matrix:

.. math:: o_i = \frac{\phi(q_i)^\top \sum_j \phi(k_j) v_j^\top}{\phi(q_i)^\top \sum_j \phi(k_j)}
              = \frac{\phi(q_i)^\top U}{\phi(q_i)^\top z},\quad U = \Phi_K^\top V \in \mathbb{R}^{F \times Ev},
              \ z = \Phi_K^\top \mathbf{1}

— O((L + S)·F·Ev) work instead of O(L·S·E). Causal attention needs prefix sums
:math:`U_i = \sum_{j \le i} \phi(k_j) v_j^\top`. Holding every :math:`U_i` costs O(n·F·Ev), so positions
are cut into chunks of C: within a chunk the causal part is the small quadratic form
:math:`(\Phi_Q \Phi_K^\top \odot \mathrm{tril})\,V` (C × C per chunk), and across chunks the exclusive
prefix sum (``cumsum``) of the per-chunk :math:`\Phi_{K,c}^\top V_c` carries the earlier keys. Total
O(n·(C + F)·Ev) time, O((n/C)·F·Ev) memory.

Feature maps: ``"elu"`` is :math:`\phi(x) = \mathrm{elu}(x) + 1` (Katharopoulos; a different kernel,
not an estimate of :math:`e^{q\cdot k}`). ``"favor"`` is Performer's positive random features
:math:`\phi(x) = e^{W x - \lVert x \rVert^2 / 2} / \sqrt{F}` with orthogonal Gaussian rows of W,
an unbiased estimate of :math:`e^{x \cdot y}`; q and k are each multiplied by
:math:`\sqrt{\mathrm{scale}}` first so the estimate targets :math:`e^{q \cdot k\,\mathrm{scale}}`.
A per-row (queries) and global (keys) max is subtracted in the exponent for stability; both cancel
in the ratio.

Neither is softmax attention: the report marks this backend approximate and ``auto`` never picks
it. Serves dot-form scores with no mask or a causal mask with L == S; no bias, weights or dropout
(they need the (L, S) scores linear attention never forms).

Shape legend: B batch, H heads, Hkv kv heads (GQA: head h reads kv head h // (H / Hkv)), L queries,
S keys, E head dim, Ev value dim, F features, C chunk length.
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F

from ..core.call import AttentionCall, make_call
from ..core.checks import require_choice, require_positive_int
from ..core.masks import CausalMask, as_mask
from ..core.output import AttentionOutput, BackendResult, Report

__all__ = ["linear_attention", "elu_features", "favor_features", "orthogonal_gaussian", "run", "run_favor", "supports"]

FEATURE_MAPS = ("elu", "favor")
_EPS = 1e-6


def elu_features(x: torch.Tensor) -> torch.Tensor:
    """φ(x) = elu(x) + 1 > 0, elementwise: (..., E) → (..., E)."""
    return F.elu(x) + 1.0


def orthogonal_gaussian(num_features: int, dim: int, *, seed: int = 0, dtype=torch.float32, device=None) -> torch.Tensor:
    """(F, E) matrix of blocks of orthogonal rows, each row rescaled to a chi(E)-distributed norm,
    so every row is marginally N(0, I) while rows within a block are exactly orthogonal."""
    g = torch.Generator().manual_seed(seed)
    blocks = []
    for _ in range(math.ceil(num_features / dim)):
        qm, _ = torch.linalg.qr(torch.randn(dim, dim, generator=g, dtype=torch.float64))
        blocks.append(qm.T)
    w = torch.cat(blocks)[:num_features]
    norms = torch.randn(num_features, dim, generator=g, dtype=torch.float64).norm(dim=1, keepdim=True)
    return (w * norms).to(dtype=dtype, device=device)


def favor_features(x: torch.Tensor, w: torch.Tensor, *, is_query: bool) -> torch.Tensor:
    """Positive random features (..., E) → (..., F): exp(w·x − |x|²/2 − stabiliser) / sqrt(F)."""
    proj = x @ w.T  # (..., F)
    sq = 0.5 * x.square().sum(-1, keepdim=True)
    # the stabiliser must be constant across keys (it cancels in the ratio only then); per row for queries
    stab = proj.amax(-1, keepdim=True) if is_query else proj.amax().reshape((1,) * proj.dim())
    return torch.exp(proj - sq - stab.detach()) / math.sqrt(w.shape[0])


def _features(q, k, feature_map, scale, num_features, seed):
    if feature_map == "elu":
        return elu_features(q), elu_features(k)
    r = math.sqrt(scale)
    w = orthogonal_gaussian(num_features, q.shape[-1], seed=seed, dtype=q.dtype, device=q.device)
    return favor_features(q * r, w, is_query=True), favor_features(k * r, w, is_query=False)


def linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask=None,
    bias=None,
    score=None,
    dropout_p: float = 0.0,
    return_weights: bool = False,
    scale: float | None = None,
    feature_map: str = "elu",
    num_features: int = 256,
    seed: int = 0,
    chunk: int = 64,
    causal: bool | None = None,
) -> AttentionOutput:
    """Kernelized attention with :func:`attnkit.attention`'s vocabulary; returns :class:`AttentionOutput`
    (``.out`` (B, H, L, Ev); no weights or lse; the report marks it approximate).

    q (B, H, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev). ``mask``: None or ``masks.causal()`` with
    L == S (query i sees keys 0..i). ``score``: any score with a dot-product form. ``bias``,
    ``dropout_p > 0`` and ``return_weights=True`` need the (L, S) scores linear attention never forms,
    so they raise ``ValueError``. ``scale`` (default 1/sqrt(E)) matters only for ``"favor"``;
    ``num_features`` and ``seed`` fix its random projection; ``chunk`` is the causal chunk length C.
    ``causal=True`` is the deprecated spelling of ``mask=masks.causal()``.
    """
    if causal is not None:
        warnings.warn("linear_attention(causal=...) is deprecated; pass mask=attnkit.masks.causal()", DeprecationWarning, stacklevel=2)
        if causal:
            mask = CausalMask() if mask is None else as_mask(mask) & CausalMask()
    call = make_call(q, k, v, score=score, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p, return_weights=return_weights)
    why = supports(call)
    if why is not None:
        raise ValueError(f"linear_attention cannot serve this call: {why}")
    name = "linear" if feature_map == "elu" else "linear_favor"
    out = _run(call, feature_map, num_features=num_features, seed=seed, chunk=chunk).out
    return AttentionOutput(out, None, None, Report(name, "called directly (linear_attention)", exact=False))


def _linear(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    feature_map: str,
    scale: float,
    num_features: int = 256,
    seed: int = 0,
    chunk: int = 64,
) -> torch.Tensor:
    """The kernel: q (B, H, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev) → (B, H, L, Ev)."""
    require_choice("feature_map", feature_map, FEATURE_MAPS)
    require_positive_int("num_features", num_features)
    require_positive_int("chunk", chunk)
    B, H, L, E = q.shape
    Hkv, S, Ev = k.shape[1], k.shape[2], v.shape[-1]
    if H % Hkv:
        raise ValueError(f"q heads H must be a multiple of k/v heads Hkv, got H={H} and Hkv={Hkv}")
    if causal and L != S:
        raise ValueError(f"causal linear attention needs L == S, got L={L}, S={S}; use the blockwise backend for decoding")
    g = H // Hkv
    dt = q.dtype
    work = torch.float64 if dt == torch.float64 else torch.float32  # features in fp32 for half inputs
    fq, fk = _features(q.to(work), k.to(work), feature_map, scale, num_features, seed)  # (B, H, L, F), (B, Hkv, S, F)
    vv = v.to(work)
    fq = fq.view(B, Hkv, g, L, -1)  # (B, Hkv, g, L, F): query heads grouped by the kv head they read
    if not causal:
        U = fk.transpose(-1, -2) @ vv  # (B, Hkv, F, Ev)
        z = fk.sum(-2)  # (B, Hkv, F)
        num = fq @ U.unsqueeze(2)  # (B, Hkv, g, L, Ev)
        den = (fq @ z[:, :, None, :, None]).squeeze(-1)  # (B, Hkv, g, L)
    else:
        C = min(chunk, L)
        nc = math.ceil(L / C)
        pad = nc * C - L  # padded keys sit after every real query, so causality already hides them
        fq = F.pad(fq, (0, 0, 0, pad)).view(B, Hkv, g, nc, C, -1)  # (B, Hkv, g, nc, C, F)
        fk = F.pad(fk, (0, 0, 0, pad)).view(B, Hkv, nc, C, -1)  # (B, Hkv, nc, C, F)
        vc = F.pad(vv, (0, 0, 0, pad)).view(B, Hkv, nc, C, Ev)  # (B, Hkv, nc, C, Ev)
        U = fk.transpose(-1, -2) @ vc  # (B, Hkv, nc, F, Ev) per chunk
        z = fk.sum(-2)  # (B, Hkv, nc, F)
        U_prev = U.cumsum(2) - U  # exclusive prefix: keys of earlier chunks only
        z_prev = z.cumsum(2) - z
        A = (fq @ fk.unsqueeze(2).transpose(-1, -2)).tril()  # (B, Hkv, g, nc, C, C), causal within chunk
        num = fq @ U_prev.unsqueeze(2) + A @ vc.unsqueeze(2)  # (B, Hkv, g, nc, C, Ev)
        den = (fq @ z_prev[:, :, None, :, :, None]).squeeze(-1) + A.sum(-1)  # (B, Hkv, g, nc, C)
        num = num.reshape(B, Hkv, g, nc * C, Ev)[..., :L, :]
        den = den.reshape(B, Hkv, g, nc * C)[..., :L]
    out = num / den.clamp(min=_EPS).unsqueeze(-1)
    return out.reshape(B, H, L, Ev).to(dt)


def supports(call: AttentionCall) -> str | None:
    if call.return_weights:
        return "linear attention never forms the (L, S) weights (return_weights=True); use reference or blockwise"
    if not call.score.dot_form:
        return f"score {call.score.name!r} has no dot-product form, which kernelized attention needs"
    if call.bias is not None:
        return "linear attention cannot apply a bias or score modifier (it never forms the (L, S) scores)"
    if call.dropout_p > 0:
        return "linear attention has no attention weights to drop out (dropout_p > 0)"
    if call.mask is not None:
        if not isinstance(call.mask, CausalMask):
            return f"linear attention supports no mask or a causal mask, got {call.mask!r}"
        if call.L != call.S:
            return f"causal linear attention needs L == S, got L={call.L}, S={call.S}"
    return None


def _run(call: AttentionCall, feature_map: str, **kw) -> BackendResult:
    q, k = call.score.as_dot(call.q, call.k)
    out = _linear(q, k, call.v, causal=call.mask is not None, feature_map=feature_map, scale=call.scale, **kw)
    return BackendResult(out, None, None, 0, [])


def run(call: AttentionCall) -> BackendResult:
    """The ``linear`` backend: elu + 1 features."""
    return _run(call, "elu")


def run_favor(call: AttentionCall) -> BackendResult:
    """The ``linear_favor`` backend: 256 positive orthogonal random features (seed 0)."""
    return _run(call, "favor")
