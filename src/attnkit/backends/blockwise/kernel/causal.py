r"""Unmasked and causal calls on the fused kernel, with bottom-right alignment for L != S.

The kernel's ``is_causal`` is top-left: query i sees keys 0..i. attnkit's default causal mask is
bottom-right (the last query sits on the last key, as in decoding with a cache): query i sees keys
``0 .. i + off`` with ``off = S - L``. So

* keys after the last query's position (``align="top_left"`` with L < S) are never seen, so they
  are not passed to the kernel (whose causal tiles would read them: a NaN there would leak);
* ``off == 0`` (L == S, or ``align="top_left"``): one ``is_causal`` call;
* ``off > 0`` (L < S, a cached prefix): every query sees the first ``off`` keys (one unmasked call,
  the *prefix*) and, among the last L keys, the causal square (one ``is_causal`` call); the two
  partial results are merged by log-sum-exp (:func:`.merge.merge_into`), ``rows`` query rows
  at a time so the float32 temporaries stay small. In float32 a row's parts are computed relative
  to a row shift where their lse is large (:mod:`.merge`: above 16, the float32 lse's
  rounding would move the parts' relative weights): the square runs first, and where its lse is
  large it is the shift, passed to the prefix call as a (B, H, L, 1) float mask expanded over the
  keys, and the square runs again with it (one more square, about +14% for 2k queries after a 6k
  prefix; the kernel adds the mask to every score, a few percent); where only the prefix's is large
  and alike the square's, the prefix and the square run again. Other calls run as before;
* ``off < 0`` (L > S): the first ``-off`` queries see no key (out 0, lse -inf) and the rest form
  the causal square against all S keys;
* ``off > 0`` with ``L + off > S`` (not from a causal mask's alignment, but from the causal rows of
  a prefix-LM, :mod:`..routes.prefix_lm`): the rows at key position S - 1 or later see every key
  (one unmasked call), the rows before them are the case above.

The backward is :mod:`.causal_grad`, from the global out and lse.

Half precision: the kernel computes scores, the running max and sum and the output accumulator in
float32, but multiplies P by V with P rounded to the input dtype, exactly as SDPA on CPU does; the
error is therefore SDPA's own.

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E head dim (Ev = E).
"""

from __future__ import annotations

import torch

from .gate import forward_op
from .merge import merge_into, rows_to_shift

__all__ = ["dense_forward", "join_rows"]

_MERGE_ROWS = 2048  # query rows merged at a time (float32 temporaries of B·H·rows·E)


def dense_forward(q, k, v, scale: float, causal_off: int | None = None):
    """(out (B, H, L, E), lse (B, H, L)): unmasked when ``causal_off`` is None, else causal with
    query 0 at key position ``causal_off``."""
    op = forward_op()
    if causal_off is None:
        return op(q, k, v, scale=scale)
    L, S = q.shape[2], k.shape[2]
    if 0 <= causal_off and L + causal_off < S:  # keys past the last query's position: never seen, never read
        k, v = k[:, :, : L + causal_off], v[:, :, : L + causal_off]
    if causal_off == 0:
        return op(q, k, v, is_causal=True, scale=scale)
    if causal_off > 0 and L + causal_off > S:  # the last rows sit past the last key: they see every key
        return _past_the_keys(q, k, v, scale, causal_off)
    if causal_off < 0:  # L > S: the first -off queries see nothing
        skip = min(-causal_off, L)
        rest = op(q[:, :, skip:], k, v, is_causal=True, scale=scale) if skip < L else None
        return join_rows(q, v, skip, None, rest)
    prefix, square = (k[:, :, :causal_off], v[:, :, :causal_off]), (k[:, :, causal_off:], v[:, :, causal_off:])

    def shifted(c, n):  # the row shift as the kernel's float mask over n keys (no copy: stride 0)
        return (-c).to(q.dtype).expand(*q.shape[:3], n)

    # the square first: where its lse is large, it is the shift the prefix is computed relative to
    o2, l2 = op(q, *square, is_causal=True, scale=scale)
    c = rows_to_shift(l2)
    if c is None:
        out, lse = op(q, *prefix, scale=scale)
        c = rows_to_shift(lse, l2)  # a large prefix beside a small square
        if c is not None:
            out, lse = op(q, *prefix, attn_mask=shifted(c, causal_off), scale=scale)
    else:
        out, lse = op(q, *prefix, attn_mask=shifted(c, causal_off), scale=scale)
    if c is not None:  # the square again, relative to the shift (module docstring)
        o2, l2 = op(q, *square, is_causal=True, attn_mask=shifted(c, L), scale=scale)
    for r0 in range(0, L, _MERGE_ROWS):  # merged relative to the shift, which is added back last
        r = slice(r0, min(r0 + _MERGE_ROWS, L))
        merge_into(out[:, :, r], lse[:, :, r], o2[:, :, r], l2[:, :, r])
    return out, (lse if c is None else lse + c.squeeze(-1))


def _past_the_keys(q, k, v, scale: float, off: int):
    """:func:`dense_forward` for ``off > 0`` and ``L + off > S``: rows [m, L), m = S - off (at least
    0), see all S keys; rows [0, m) are causal, the last of them on the last key."""
    m = max(k.shape[2] - off, 0)
    first = dense_forward(q[:, :, :m], k, v, scale, off) if m > 0 else None
    return join_rows(q, v, m, first, forward_op()(q[:, :, m:], k, v, scale=scale))


def join_rows(q, v, r: int, first, rest):
    """(out (B, H, L, Ev) in q's dtype, lse (B, H, L), float32; float64 for float64) of the L query
    rows from two row ranges: [0, r) from ``first`` and [r, L) from ``rest``, each that range's
    (out, lse) or None where its rows see no key (out 0, lse -inf)."""
    L = q.shape[2]
    lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    out = torch.empty(*q.shape[:3], v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=lse_dtype, device=q.device)
    for rows, part in ((slice(0, r), first), (slice(r, L), rest)):
        if part is None:
            out[:, :, rows], lse[:, :, rows] = 0.0, float("-inf")
        else:
            out[:, :, rows], lse[:, :, rows] = part
    return out, lse
