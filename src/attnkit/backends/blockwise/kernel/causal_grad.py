r"""Gradients of a causal fused call, from weights renormalised on the scores the backward computes.

The causal forward (:mod:`.causal`) lets query ``i`` see keys ``0 .. i + off`` (``off`` from
the mask's alignment: ``S - L`` bottom-right, 0 top-left). A block of ``b`` queries starting at
``q0`` therefore sees the keys ``[0, q0 + b + off)``: all of them for every row except the last
``b``, where the causal triangle applies. Each block runs :func:`.band_grad.rows_backward`
on those keys, which rebuilds every row's weights from its own score GEMM and renormalises them
(the forward's lse is only the shift), then forms the softmax gradient with
:math:`D = \mathrm{rowsum}(P \circ dP)` as autograd does; see :mod:`.band_grad` for the
derivation and why (PyTorch's private backward op, fed the forward's float32 lse, does not
renormalise, and its weights are off by several times the reference's own float32 error on large
scores).

Per (batch row, key/value head) the ``g`` query heads that share it are stacked along the rows
(``g · b`` rows against one key range: no repeated keys). The block height ``b`` shrinks as the
rows grow so that a block's weights stay near :data:`ROW_ELEMS` elements (the full row must be in
memory to renormalise it); dq is written once per row, dk and dv are summed in float32 (float64
for float64 inputs) over the blocks.

Shape legend: B batch, H query heads, Hkv key/value heads (g = H / Hkv), L queries, S keys,
E head dim; b queries per block, s keys a block sees.
"""

from __future__ import annotations

import torch

from .band_grad import Buffers, neg_shift, rows_backward

__all__ = ["causal_grads", "add_causal_grads", "summed_grads", "ROW_ELEMS"]

ROW_ELEMS = 1 << 20  # weights per block (4 MiB in float32), bounding the rows per block
_MIN_ROWS, _MAX_ROWS = 16, 256


def _triangle(q0: int, q1: int, s: int, off: int, g: int, device) -> list[tuple[int, torch.Tensor]]:
    """[(c0, (g · b, s - c0) bool)], True where row r may not see key c0 + c (c0 + c > q0 + r + off), for
    the keys from c0 = clip(q0 + off, 0, s) on (every row of the block sees the keys before c0); the
    b rows repeated for the g query heads stacked along the rows."""
    c0 = min(max(q0 + off, 0), s)  # c0 = s when the block sees all s keys
    drop = torch.arange(c0, s, device=device)[None, :] > torch.arange(q0, q1, device=device)[:, None] + off
    return [(c0, drop.repeat(g, 1) if g > 1 else drop)]


def _blocks(L: int, S: int, off: int | None, g: int):
    """(q0, q1, s) per block: queries [q0, q1) see the keys [0, s) (s = 0: they see none)."""
    off = S if off is None else off
    q0 = 0
    while q0 < L:
        reach = max(min(q0 + _MAX_ROWS + off, S), 1)
        b = max(_MIN_ROWS, min(_MAX_ROWS, ROW_ELEMS // max(g * reach, 1)))
        q1 = min(q0 + b, L)
        yield q0, q1, max(0, min(q1 - 1 + off, S - 1) + 1)
        q0 = q1


def causal_grads(dout, q, k, v, lse, dlse, off: int | None, scale: float, need):
    """(dq, dk, dv) in the inputs' dtypes (None where ``need`` is False) of a causal call with query
    0 at key position ``off`` (None: unmasked, every query sees every key), from dout (B, H, L, E)
    or None, the forward's lse (B, H, L) and dlse (B, H, L) or None."""
    return summed_grads(dout, q, k, v, need, lambda d, grads: add_causal_grads(d, q, k, v, lse, dlse, off, scale, grads))


def summed_grads(dout, q, k, v, need, add):
    """(dq, dk, dv) in the inputs' dtypes (None where ``need`` is False): zeroed float32 buffers
    (float64 for float64 inputs) handed to ``add(dout, (dq, dk, dv))``, which writes or adds into
    them, then cast once; dout (B, H, L, E) or None (zeros)."""
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    dout = torch.zeros(q.shape, dtype=q.dtype, device=q.device) if dout is None else dout
    grads = [torch.zeros(t.shape, dtype=work, device=t.device) if n else None for t, n in zip((q, k, v), need)]
    add(dout, tuple(grads))
    return [None if t is None else t.to(x.dtype) for t, x in zip(grads, (q, k, v))]


def add_causal_grads(dout, q, k, v, lse, dlse, off: int | None, scale: float, grads) -> None:
    """The gradients of :func:`causal_grads` in the work dtype (float32; float64 for float64), into
    ``grads`` = (dq (B, H, L, E), dk, dv (B, Hkv, S, E)), each None where not needed: dq's rows
    are written (rows that see no key are left as they are), dk and dv are added to. dout is a tensor."""
    B, H, L, E = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    g = H // Hkv
    dq, dk, dv = grads
    need = tuple(t is not None for t in grads)
    blocks = [blk for blk in _blocks(L, S, off, g) if blk[2] > 0]
    if not blocks or not any(need):
        return
    work = next(t.dtype for t in grads if t is not None)
    nshift = neg_shift(lse.to(work))
    buf = Buffers(work, q.device)
    for q0, q1, s in blocks:
        b = q1 - q0
        drop = None if off is None else _triangle(q0, q1, s, off, g, q.device)
        bb = buf.shaped(1, g * b, s, E)
        for bi in range(B):
            for hk in range(Hkv):
                h = slice(hk * g, (hk + 1) * g)
                qc, oc = (t[bi, h, q0:q1].to(work).reshape(1, g * b, E) for t in (q, dout))
                kc, vc = (t[bi, hk, :s].to(work).unsqueeze(0) for t in (k, v))
                nlc = nshift[bi, h, q0:q1].reshape(1, g * b, 1)
                dlc = None if dlse is None else dlse[bi, h, q0:q1].to(work).reshape(1, g * b, 1)
                gq, gk, gv = rows_backward(qc, kc, vc, oc, nlc, dlc, drop, scale, need, bb)
                if gq is not None:
                    dq[bi, h, q0:q1] = gq.view(g, b, E)
                if gk is not None:
                    dk[bi, hk, :s] += gk[0]
                if gv is not None:
                    dv[bi, hk, :s] += gv[0]
