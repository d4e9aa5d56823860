r"""Gradients of a banded fused call, from weights renormalised on the scores the backward computes.

The banded forward (:mod:`.band`) runs every block of queries against the window of keys
``[q0 + off - left, q1 - 1 + off + right]``, which holds *every* key those queries may see. So the
backward can rebuild each row's weights in full, from its own score GEMM, and renormalise them:

.. math::

    s = q k^\top, \qquad
    \tilde P_{ij} = m_{ij}\, e^{\mathrm{scale} \cdot s_{ij} - \mathrm{lse}_i}, \qquad
    r_i = \textstyle\sum_j \tilde P_{ij}, \qquad P_{ij} = \tilde P_{ij} / r_i,

with m the 0/1 mask and the forward's lse only as the shift (:math:`\mathrm{scale} \cdot s \le
\mathrm{lse}` up to rounding: nothing overflows). The weights then sum to 1 on exactly the scores
the gradients use, whatever the rounding of the forward's float32 lse or of its score GEMM.
PyTorch's private backward op, fed the forward's lse, does not renormalise: measured here, its
rows sum to :math:`1 \pm 5\cdot10^{-6}` on scores of magnitude ~50, up to 9x the reference's own
float32 error in dv. Then, as autograd's softmax backward does,

.. math::

    dP = dO\, v^\top, \quad D_i = \textstyle\sum_j P_{ij}\, dP_{ij} - d\mathrm{lse}_i, \quad
    dS = P \circ (dP - D), \quad dq = \mathrm{scale}\; dS\, k, \quad
    dk = \mathrm{scale}\; dS^\top q, \quad dv = P^\top dO,

with :math:`1/r` applied to dO's rows (:math:`\tilde P^\top (dO / r) = P^\top dO`) rather than to
the weights, and :math:`q k^\top` left unscaled as the reference computes it.

Interior blocks (every one holds b queries and sees the same (b, w) mask tile) run per (batch
row, query head) a group of blocks per ``bmm``, with the weights held key-major and dk, dv
accumulated by their own GEMMs (:mod:`.band_windows`, which derives the same gradients in
that layout).
The backward picks its own block height (:func:`backward_band`), independent of the forward's.
Edge blocks (windows clipped by the sequence ends) run one at a time on the clipped keys with the
mask evaluated there (:func:`rows_backward`). Everything is computed and accumulated in float32
(float64 for float64 inputs), so a bf16 call's gradients carry no half-precision sums. Rows with
no allowed key (lse :math:`-\infty`) get zero gradients.

Shape legend: B batch, H query heads, Hkv key/value heads (g = H / Hkv), L queries, S keys,
E head dim; b queries per block, w = b + left + right keys per window; N items of l rows against
s keys in :func:`rows_backward`.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import torch

from ....core import fresh_memory
from .band import KEY_ALIGN, Band, pad_keys_finite
from .band_windows import interior_grads

__all__ = ["band_grads", "backward_band", "rows_backward"]

# exp's argument floor: e^floor is a normal number (exp of -inf or of a denormal result is slow)
_EXP_FLOOR = {torch.float32: -86.0, torch.float64: -700.0}


class Buffers:
    """Work tensors of :func:`rows_backward`, one flat storage per name, grown on demand and reused
    by every ``bmm`` of a call (a fresh allocation per chunk costs page faults)."""

    _SHAPES = {"p": "nls", "ds": "nls", "rsum": "nl1", "d": "nl1",
               "on": "nlE", "dq": "nlE", "dk": "nsE", "dv": "nsE"}

    def __init__(self, dtype, device):
        self.dtype, self.device, self.store = dtype, device, {}

    def shaped(self, n: int, l: int, s: int, E: int) -> SimpleNamespace:
        """Views (n, l, s), (n, l, 1), (n, l, E) and (n, s, E) of the storage, by name."""
        dims = {"n": n, "l": l, "s": s, "E": E, "1": 1}
        views = {}
        for name, spec in self._SHAPES.items():
            shape = tuple(dims[c] for c in spec)
            size = shape[0] * shape[1] * shape[2]
            if self.store.get(name) is None or self.store[name].numel() < size:
                self.store[name] = torch.empty(size, dtype=self.dtype, device=self.device)
            views[name] = self.store[name][:size].view(shape)
        return SimpleNamespace(**views)


def rows_backward(qc, kc, vc, oc, nlc, dlc, drop, scale: float, need, buf: SimpleNamespace | None = None):
    """Gradients of complete rows. qc, oc (N, l, E); kc, vc (N, s, E); nlc (N, l, 1) minus the
    forward's lse (0 for rows with no allowed key); dlc (N, l, 1) or None; ``drop`` a list of
    (c0, (l, t) or (N, l, t) bool), True where a query may not see key c0 + c (keys in no piece
    are allowed), or None; ``buf`` work tensors (:meth:`Buffers.shaped`) or None. Returns
    dq (N, l, E), dk (N, s, E), dv (N, s, E) (None where ``need`` is False); with ``buf`` they are
    views of it, overwritten by the next call."""
    N, l, E = qc.shape
    if buf is None:
        buf = Buffers(qc.dtype, qc.device).shaped(N, l, kc.shape[1], E)
    lo = _EXP_FLOOR[qc.dtype]
    # q kᵀ unscaled, as the reference computes it: a scale folded into the GEMM (or into q) rounds
    # the scaled operand, an error correlated along the row that doubles dq's on large scores
    s = torch.bmm(qc, kc.transpose(1, 2), out=buf.p)
    s = torch.add(nlc, s, alpha=scale, out=s)  # scale · s - lse, one pass
    # exp of -inf or of an underflowing argument takes a slow path (several times a GEMM's cost):
    # the arguments are clamped to normal results, and the mask is applied after the exp, as a
    # select (masked entries are then exactly 0, whatever their clamped score)
    p = s.clamp_(lo, -lo).exp_()
    for c0, piece in drop or ():
        p[..., c0:c0 + piece.shape[-1]].masked_fill_(piece, 0.0)
    # the weights P = p / r are never formed: 1 / r goes into the (N, l, E) and (N, l, 1) factors
    inv = torch.sum(p, -1, keepdim=True, out=buf.rsum).reciprocal_()  # 1 / r
    inv = inv.masked_fill_(torch.isposinf(inv), 0.0)  # a row with no allowed key: p = 0 and 1 / r := 0
    on = torch.mul(oc, inv, out=buf.on)  # dO / r
    dv = torch.bmm(p.transpose(1, 2), on, out=buf.dv) if need[2] else None  # Pᵀ dO
    if not (need[0] or need[1]):
        return None, None, dv
    ds = torch.bmm(on, vc.transpose(1, 2), out=buf.ds).mul_(p)  # P ∘ dP
    d = torch.sum(ds, -1, keepdim=True, out=buf.d)  # D = rowsum(P ∘ dP)
    if dlc is not None:
        d = d.sub_(dlc)
    ds = ds.addcmul_(p, d.mul_(inv), value=-1.0)  # P ∘ (dP - D)
    dq = torch.bmm(ds, kc, out=buf.dq).mul_(scale) if need[0] else None
    dk = torch.bmm(ds.transpose(1, 2), qc, out=buf.dk).mul_(scale) if need[1] else None
    return dq, dk, dv


def backward_band(band: Band, k: torch.Tensor | None = None, v: torch.Tensor | None = None) -> Band:
    """The backward's own geometry for the forward's band: the same window, blocks of 64 queries
    (32 for windows under 128 keys). Blocks of 64 ran fastest here (one thread, window 256,
    n = 16k: 32 and 48 no faster, 128 about 10% slower): the backward's five GEMMs per block favour
    less wasted work over taller tiles. Given k and v, each interior window is padded to a multiple
    of :data:`.band.KEY_ALIGN` keys (at most an eighth more) when the padding keys are finite,
    as the forward does: 320 keys instead of 319 makes the windows of every
    :func:`.band_windows.interior_grads` residue class exactly adjacent, so dk and dv are
    added by one batched GEMM per class into contiguous keys, and the GEMMs run on 64-aligned sizes."""
    b = 32 if band.left + band.right + 1 < 128 else 64
    plain = Band(L=band.L, S=band.S, left=band.left, right=band.right, off=band.off, b=min(b, band.L))
    if k is None or v is None:
        return plain
    pad = -plain.w % KEY_ALIGN
    padded = dataclasses.replace(plain, pad=pad) if 0 < pad <= plain.w // 8 else plain
    return padded if padded.pad and pad_keys_finite(k, v, padded) else plain


def neg_shift(lse: torch.Tensor) -> torch.Tensor:
    """Minus the shift per row: -lse, with -inf (no allowed key) made 0 so exp(-inf + 0) = 0."""
    return torch.where(torch.isneginf(lse), 0.0, -lse)


def band_grads(dout, q, k, v, lse, dlse, mask, band: Band, scale: float, need):
    """(dq, dk, dv) in the inputs' dtypes (None where ``need`` is False) of a banded call, from
    dout (B, H, L, E) or None, the forward's lse (B, H, L) and dlse (B, H, L) or None."""
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    dout = torch.zeros(q.shape, dtype=q.dtype, device=q.device) if dout is None else dout
    nshift = neg_shift(lse.to(work))
    dlse = None if dlse is None else dlse.to(work)
    dq = fresh_memory.empty(q.shape, work, q.device) if need[0] else None
    # dv then dk as the slots of one (c, B, Hkv, S, E) accumulator, zeroed in one pass; huge pages
    # (fresh_memory) make the first touch of these tens of MiB cheaper
    c = int(need[1]) + int(need[2])
    kv = fresh_memory.empty((c,) + tuple(k.shape), work, k.device).zero_() if c else None
    dv = kv[0] if need[2] else None
    dk = kv[c - 1] if need[1] else None
    band = backward_band(band, k, v)
    b, w = band.b, band.w
    i0, i1 = band.interior
    if dq is not None:  # rows of no block (no key in range) keep 0; the others are written once
        dq[:, :, :i0 * b].zero_()
        dq[:, :, max(i1, i0) * b:].zero_()
    if i1 > i0:
        q0, k0 = i0 * b, band.start(i0)  # every interior block's (b, w) tile of the mask is the same
        drop = ~mask.evaluate((q0, q0 + b), (k0, k0 + w), band.L, band.S, device=q.device)[0, 0]
        interior_grads(dout, q, k, v, nshift, dlse, drop, band, scale, dq, kv, bool(need[1]), bool(need[2]))
    for q0, q1, k0, k1 in band.edges():
        _edge(dout, q, k, v, nshift, dlse, mask, band, scale, need, (q0, q1, k0, k1), (dq, dk, dv), work)
    return [None if t is None else t.to(x.dtype) for t, x in zip((dq, dk, dv), (q, k, v))]


def _edge(dout, q, k, v, nshift, dlse, mask, band: Band, scale, need, box, grads, work) -> None:
    """One edge block (q0, q1, k0, k1), all batch rows and heads in one ``bmm``, into ``grads``."""
    q0, q1, k0, k1 = box
    B, H, _, E = q.shape
    g = H // k.shape[1]
    l, s = q1 - q0, k1 - k0
    allowed = mask.evaluate((q0, q1), (k0, k1), band.L, band.S, device=q.device)[0, 0]  # (l, s)
    qc, oc = (t[:, :, q0:q1].to(work).reshape(B * H, l, E) for t in (q, dout))
    kc, vc = (t[:, :, k0:k1].to(work).repeat_interleave(g, 1).reshape(B * H, s, E) for t in (k, v))
    nlc = nshift[:, :, q0:q1].reshape(B * H, l, 1)
    dlc = None if dlse is None else dlse[:, :, q0:q1].reshape(B * H, l, 1)
    gq, gk, gv = rows_backward(qc, kc, vc, oc, nlc, dlc, [(0, ~allowed)], scale, need)
    dq, dk, dv = grads
    if gq is not None:
        dq[:, :, q0:q1] = gq.view(B, H, l, E)
    for acc, part in ((dk, gk), (dv, gv)):
        if part is not None:  # the g query heads of a kv head summed
            acc[:, :, k0:k1] += part.view(B, H // g, g, s, E).sum(2)
