r"""Gradients of a band's interior blocks: key-major weights, dk and dv accumulated by their GEMMs.

Every interior block of a banded call (:mod:`.band`) holds ``b`` queries and sees the same
``w``-key window pattern, one (b, w) mask tile. The gradients are those of
:func:`.band_grad.rows_backward` (weights rebuilt from the backward's own score GEMM and
renormalised; the forward's lse is only the shift), computed in a layout chosen for speed (one
thread, window 256, n = 16k, fp32; A/B timings interleaved in one process):

* **key-major weights.** The weights are held as :math:`\tilde P^\top` (n, w, b), from the GEMM
  :math:`k q^\top`: that GEMM (and :math:`v\, dO^\top`, of the same shapes) ran 1.28x as fast
  as its query-major form, :math:`\tilde P^\top dO` 1.06x, :math:`dS\, k` 0.88x (one thread,
  b = 64, w = 319, ``bmm`` alone);
  row sums become sums over dim 1, which PyTorch vectorises along the rows (0.87x the time of
  the query-major layout: benchmarks/results/band_backward.json);
* **dk and dv accumulated in place.** The (w, E) windows of consecutive blocks overlap by
  ``w - b`` keys, but blocks ``R = ceil(w / b)`` apart never do. So the blocks of a group are
  split into R residue classes, and each class's :math:`\tilde P^\top o` (or :math:`dS'^\top q`)
  is one ``baddbmm_`` into its own keys of the accumulator: no (n, w, E) product is written and
  added back. When the window is padded to a multiple of 64 keys (:func:`.band_grad.backward_band`:
  320 keys for a 256-key window, the padding key masked for every query) a class's windows are
  exactly adjacent, its accumulator view is contiguous, and PyTorch runs it as one batched GEMM
  (2.5% faster than the write-and-add-back layout at 319 keys, 0.0 to 1e-7 apart);
* **the scale folded into a small factor.** :math:`\mathrm{scale} \cdot dS` is formed from
  :math:`\mathrm{scale} \cdot dO / r` (an (n, b, E) factor), so neither dq nor dk is rescaled;
  the mask is a 0/1 multiply on the key rows that hold a masked entry (the first and last ``b``),
  after the exponential.

With :math:`o_i = dO_i / r_i` and :math:`o'_i = \mathrm{scale}\; o_i`:

.. math::

    \tilde P^\top = \exp(\mathrm{scale}\; k q^\top - \mathrm{lse}) \circ m^\top, \quad
    r_i = \textstyle\sum_j \tilde P^\top_{ji}, \quad
    dv \mathrel{+}= \tilde P^\top o, \quad
    T = \tilde P^\top \circ (v\, o'^\top), \quad
    D'_i = \textstyle\sum_j T_{ji} - \mathrm{scale}\; d\mathrm{lse}_i, \quad
    dS'^\top = T - \tilde P^\top \circ D' / r,

    dq = dS'\, k, \qquad dk \mathrel{+}= dS'^\top q.

Every key of an interior window is seen by some query of its block, so on the fused routes (where
a non-finite key or value some query sees sends the call to the reference's computation) the
window's k and v are finite, and the multiply that zeroes a masked weight meets no NaN; the
padding keys, seen by no query of the block, are used only when they are finite
(:func:`.band.pad_keys_finite`).

Shape legend: B batch, H query heads, Hkv key/value heads (g = H / Hkv), L queries, S keys,
E head dim; n blocks per GEMM (nb interior blocks per head), b queries per block, w keys per
window; c the accumulator's slots (dv, dk).
"""

from __future__ import annotations

import torch

__all__ = ["interior_grads", "GEMM_ELEMS"]

GEMM_ELEMS = 1 << 18  # weights per GEMM (1 MiB in float32: the weights stay in cache)
# exp's argument floor: e^floor is a normal number (exp of -inf or of a denormal result is slow)
_EXP_FLOOR = {torch.float32: -86.0, torch.float64: -700.0}


def _keep_rows(drop_t: torch.Tensor, dtype) -> list[tuple[int, torch.Tensor]]:
    """(w, b) bool, True where key row r may not be seen by query c -> [(r0, keep (rows, b) 0/1)]
    over the runs of key rows that hold a True (a band's: its first and last b rows)."""
    rows = drop_t.any(1).tolist()
    out, r = [], 0
    while r < len(rows):
        if not rows[r]:
            r += 1
            continue
        r1 = r
        while r1 < len(rows) and rows[r1]:
            r1 += 1
        out.append((r, (~drop_t[r:r1]).to(dtype)))
        r = r1
    return out


def _win(x: torch.Tensor, bi: int, h: int, start: int, n: int, rows: int, step: int) -> torch.Tensor:
    """(n, rows, D) view of x (B, heads, N, D): item j is x[bi, h, start + j·step : + rows]."""
    sB, sH, sN, sD = x.stride()
    return x.as_strided((n, rows, x.shape[3]), (step * sN, sN, sD), x.storage_offset() + bi * sB + h * sH + start * sN)


def _cols(x: torch.Tensor, bi: int, h: int, start: int, n: int, b: int, step: int) -> torch.Tensor:
    """(n, 1, b) view of x (B, heads, N): item j is x[bi, h, start + j·step : + b]."""
    sB, sH, sN = x.stride()
    return x.as_strided((n, 1, b), (step * sN, 0, sN), x.storage_offset() + bi * sB + h * sH + start * sN)


class _Work:
    """The GEMMs' work tensors, allocated once per call for the largest group of blocks and sliced."""

    def __init__(self, n: int, b: int, w: int, E: int, dtype, device):
        self.pt = torch.empty(n, w, b, dtype=dtype, device=device)
        self.ds = torch.empty(n, w, b, dtype=dtype, device=device)
        self.r = torch.empty(n, 1, b, dtype=dtype, device=device)
        self.d = torch.empty(n, 1, b, dtype=dtype, device=device)
        self.on = torch.empty(n, b, E, dtype=dtype, device=device)


def interior_grads(dout, q, k, v, nshift, dlse, drop, band, scale: float, dq, kv, has_dk: bool, has_dv: bool) -> None:
    """Add the interior blocks' gradients into dq (B, H, L, E) (or None; its interior rows are
    overwritten) and ``kv`` (c, B, Hkv, S, E) (or None): dv in slot 0 when ``has_dv``, then dk when
    ``has_dk``. All in the work dtype. dout, q (B, H, L, E); k, v (B, Hkv, S, E); nshift (B, H, L) minus the forward's lse
    (work dtype); dlse (B, H, L) or None; ``drop`` the (b, w) bool tile of every interior block,
    True where the query may not see the key."""
    B, H, _, E = q.shape
    g = H // k.shape[1]
    work = nshift.dtype
    b, w = band.b, band.w
    i0, i1 = band.interior
    nb = i1 - i0
    per = max(1, min(GEMM_ELEMS // (b * w), nb))
    keep = _keep_rows(drop.T, work)
    lo = _EXP_FLOOR[work]
    buf = _Work(per, b, w, E, work, q.device)
    R = -(-w // b)  # windows R blocks apart never overlap: each GEMM of one residue class adds into its own keys
    st0, qs0 = band.start(i0), i0 * b
    for bi in range(B):
        for h in range(H):
            hk = h // g
            # every interior block's views, once per head: (nb, b, E) rows, (nb, w, E) overlapping
            # windows, of the head in the work dtype (no copy when the dtypes agree)
            qa, oa = (_win(t[bi:bi + 1, h:h + 1].to(work), 0, 0, qs0, nb, b, b) for t in (q, dout))
            ka, va = (_win(t[bi:bi + 1, hk:hk + 1].to(work), 0, 0, st0, nb, w, b) for t in (k, v))
            nla = _cols(nshift, bi, h, qs0, nb, b, b)
            dla = None if dlse is None else _cols(dlse, bi, h, qs0, nb, b, b)
            dqa = None if dq is None else dq[bi, h, qs0:qs0 + nb * b].view(nb, b, E)  # dq is contiguous
            dva = kv[0] if has_dv else None
            dka = kv[int(has_dv)] if has_dk else None
            for j in range(0, nb, per):
                n = min(per, nb - j)
                blk = slice(j, j + n)
                qc, kc, vc = qa[blk], ka[blk], va[blk]
                # (q kᵀ)ᵀ unscaled, as the reference computes it; then scale · s - lse in one pass
                pt = torch.bmm(kc, qc.transpose(1, 2), out=buf.pt[:n])  # (n, w, b)
                pt = torch.add(nla[blk], pt, alpha=scale, out=pt)
                # clamped to normal results (exp's slow path), the mask applied after the exp
                pt = pt.clamp_(lo, -lo).exp_()
                for r0, kp in keep:
                    pt[:, r0:r0 + kp.shape[0]].mul_(kp)
                inv = torch.sum(pt, 1, keepdim=True, out=buf.r[:n]).reciprocal_()  # (n, 1, b): 1 / r
                on = torch.mul(oa[blk], inv.view(n, b, 1), out=buf.on[:n])  # dO / r
                if has_dv:
                    _accumulate(dva, bi, hk, st0 + j * b, pt, on, b, R)  # dv += P̃ᵀ (dO / r)
                if dqa is None and not has_dk:
                    continue
                ds = torch.bmm(vc, on.mul_(scale).transpose(1, 2), out=buf.ds[:n]).mul_(pt)  # scale · P ∘ dP
                d = torch.sum(ds, 1, keepdim=True, out=buf.d[:n])  # scale · D
                if dla is not None:
                    d = d.sub_(dla[blk], alpha=scale)
                ds = ds.addcmul_(pt, d.mul_(inv), value=-1.0)  # scale · dSᵀ
                if dqa is not None:
                    torch.bmm(ds.transpose(1, 2), kc, out=dqa[blk])
                if has_dk:
                    _accumulate(dka, bi, hk, st0 + j * b, ds, qc, b, R)  # dk += dS'ᵀ q


def _accumulate(acc: torch.Tensor, bi: int, h: int, start: int, a: torch.Tensor, x: torch.Tensor, b: int, R: int) -> None:
    """acc[bi, h, window of block i] += a[i] @ x[i] for the n blocks of a group: a (n, w, b), x (n, b, E),
    acc (B, heads, S, E), block i's window starting at key ``start + i·b``. Blocks R apart have
    disjoint windows (R·b >= w), so each residue class is one in-place GEMM into its own keys
    (beta = 1), and no (n, w, E) product is written and added back."""
    n, w = a.shape[0], a.shape[1]
    for r in range(min(R, n)):
        cnt = len(range(r, n, R))
        _win(acc, bi, h, start + r * b, cnt, w, R * b).baddbmm_(a[r::R], x[r::R])
