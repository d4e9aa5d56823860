r"""The blockwise backend's fused paths: which calls they serve, and their autograd function.

A call runs on PyTorch's fused CPU flash kernel (:mod:`.fused_gate`) instead of the Python tile
loop when all of these hold, else the tile loop runs (same results within rounding):

* the kernel passed its self-test for the dtype (float32, float64, bfloat16) and is enabled;
* CPU tensors, eager mode (not while ``torch.compile`` traces, not inside ``torch.func``);
* the plain (scaled) dot score, no bias, no dropout, no returned weights, E == Ev;
* no explicit tile sizes (``block_q`` / ``block_kv`` arguments or ``attnkit.options``): asking
  for tiles asks for the tile loop;
* the mask is none (*dense*: one call), causal (*causal*: :mod:`.fused_causal`, bottom-right
  alignment by a prefix call merged by log-sum-exp), a sliding window bounded on both sides
  (*band*: :mod:`.fused_band`), a prefix-LM with one prefix length (*prefix_lm*:
  :mod:`.fused_prefix_lm`, the prefix rows unmasked and the others causal), or any other mask that
  does not depend on the head and whose tile states can be read (*tiles*: :mod:`.fused_tiles`:
  documents, chunks, per-row prefixes, padding, ...).

Half precision (bf16): the kernel keeps scores, the running max and sum and the output accumulator
in float32, but multiplies P by V with P rounded to bf16, as SDPA does on CPU; so the fused path's
error is SDPA's own (the tile loop's is smaller: it upcasts everything). Gradients that several
calls contribute to (overlapping windows, segments) are summed in float32.

Gradients, without repeating the forward:

* band, causal, prefix-LM and dense (:mod:`.fused_band_grad`, :mod:`.fused_causal_grad`): every query block
  runs against all the keys its rows may see, so each row's weights are rebuilt from the
  backward's own score GEMM and renormalised (the forward's lse is only the shift), and the
  softmax gradient is formed with :math:`D = \mathrm{rowsum}(P \circ dP)` as autograd does, in
  float32 (float64 for float64 inputs) whatever the input dtype; a gradient flowing into the
  returned ``lse`` adds :math:`P \, d\mathrm{lse}` to dS. PyTorch's private backward op is not
  used there: fed the forward's float32 lse, its weights do not sum to 1 on its own scores
  (rows off by ~5e-6 on scores of magnitude ~50: up to 9x the reference's own float32 error in
  dv), and it sums half gradients in half (80x in bf16 dq);
* tiles (a row's keys spread over several segments): below float64, each block's rows against
  the whole span of its segments, weights rebuilt and renormalised as on the band's edges
  (:mod:`.fused_tiles_grad`), where the span is mostly allowed pairs, k and v are finite and the
  work tensors stay bounded; otherwise, and for a gradient into ``lse`` on float64 inputs, the
  tile loop's backward runs once (:mod:`.fused_grad`), fed the kernel's lse as the row shift and
  the row sums recomputed with that shift; in float64 without a gradient into ``lse``, the
  backward op per segment fed the global out and lse.

Double backward (``create_graph=True``) re-runs the call on the tile loop under autograd, which
then serves or refuses it with its own error.

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E head dim.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch

from ...core.indices import alignment_offset
from ...core.mask_kinds import CausalMask, SlidingWindowMask
from ...core.options import current as current_options
from ...core.output import BackendResult
from ..tiling import default_tiles
from .fused_band import Band, band_forward, band_of
from .fused_band_grad import band_grads
from .fused_causal_grad import causal_grads
from .fused_causal import dense_forward
from .fused_gate import available
from .fused_grad import kernel_lse_grads
from .fused_prefix_lm import prefix_lm_forward, prefix_lm_grads, prefix_lm_of
from .fused_tiles import Segments, tiles_backward, tiles_forward
from .fused_tiles_grad import span_grads
from .route_cache import cached_segments

__all__ = ["FusedRoute", "route_of", "run_fused", "PATH_NAMES"]

PATH_NAMES = {
    "dense": "fused kernel, one call",
    "causal": "fused kernel, causal (prefix + is_causal square, lse merge)",
    "band": "fused kernel, banded windows per query block",
    "prefix_lm": "fused kernel, prefix-LM (prefix rows unmasked, the others causal)",
    "tiles": "fused kernel per query block on the mask's non-empty tiles, lse merge",
}


@dataclass(frozen=True)
class FusedRoute:
    """How one call runs on the fused kernel: ``kind`` in :data:`PATH_NAMES`, the softmax scale,
    the mask, and the band (kind "band"), the causal offset (kinds "causal" and "prefix_lm") and
    the prefix length (kind "prefix_lm")."""

    kind: str
    scale: float
    mask: object = None
    band: Band | None = None
    causal_off: int | None = None
    segments: Segments | None = None
    prefix: int | None = None

    def forward(self, q, k, v):
        if self.kind == "band":
            return band_forward(q, k, v, self.mask, self.band, self.scale)
        if self.kind == "prefix_lm":
            return prefix_lm_forward(q, k, v, self.scale, self.causal_off, self.prefix)
        if self.kind == "tiles":
            return tiles_forward(q, k, v, self.mask, self.segments, self.scale)
        return dense_forward(q, k, v, self.scale, self.causal_off)

    def backward(self, dout, q, k, v, out, lse, dlse, need):
        """(dq, dk, dv) in the inputs' dtypes, None where ``need`` is False; dout (B, H, L, E) or
        dlse (B, H, L) may be None (see the module docstring for which method serves which kind)."""
        if self.kind == "band":
            return band_grads(dout, q, k, v, lse, dlse, self.mask, self.band, self.scale, need)
        if self.kind == "prefix_lm":
            return prefix_lm_grads(dout, q, k, v, lse, dlse, self.causal_off, self.prefix, self.scale, need)
        if self.kind != "tiles":  # dense (causal_off None) or causal
            return causal_grads(dout, q, k, v, lse, dlse, self.causal_off, self.scale, need)
        if q.dtype != torch.float64:  # complete rows per block where that serves the call (..fused_tiles_grad)
            grads = span_grads(dout, q, k, v, lse, dlse, self.mask, self.segments, self.scale, need)
            if grads is not None:
                return grads
        if dlse is not None or q.dtype != torch.float64:  # the tile loop's backward, fed the kernel's lse
            return kernel_lse_grads(q, k, v, lse, dout, dlse, need, self.mask, self.scale)
        grads = tiles_backward(dout.contiguous(), q, k, v, out, lse, self.mask, self.segments, self.scale)
        return [g if n else None for g, n in zip(grads, need)]


def _wrapped(*ts: torch.Tensor) -> bool:
    return any(torch._C._functorch.is_functorch_wrapped_tensor(t) for t in ts)


def route_of(call, block_q: int | None = None, block_kv: int | None = None) -> FusedRoute | None:
    """The fused route of a call, or None when the tile loop must serve it (see the module docstring)."""
    q, k, v = call.q, call.k, call.v
    if block_q is not None or block_kv is not None:
        return None
    if q.device.type != "cpu" or torch.compiler.is_compiling() or _wrapped(q, k, v):
        return None
    if not getattr(call.score, "identity_dot", False) or call.bias is not None or call.dropout_p > 0 or call.return_weights:
        return None
    if q.shape[-1] != v.shape[-1] or q.shape[0] == 0:
        return None
    opts = current_options()
    if opts.block_q is not None or opts.block_kv is not None or not available(q.dtype):
        return None
    L, S = q.shape[2], k.shape[2]
    mask = call.mask
    # the kernel's is_causal path returns NaN for scale <= 0 (torch 2.13, CPU): such masks take
    # their tiles' additive masks instead (the "tiles" route), which are exact for any scale
    causal_ok = call.scale > 0
    if mask is None:
        route = FusedRoute("dense", call.scale)
    elif type(mask) is CausalMask and causal_ok:
        route = FusedRoute("causal", call.scale, mask, causal_off=alignment_offset(mask.align, L, S))
    elif type(mask) is SlidingWindowMask and (band := band_of(mask, L, S)) is not None:
        route = FusedRoute("band", call.scale, mask, band=band)
    elif causal_ok and (plm := prefix_lm_of(mask, L, S)) is not None:
        route = FusedRoute("prefix_lm", call.scale, mask, causal_off=plm[0], prefix=plm[1])
    elif "h" not in mask.dims and (segs := cached_segments(mask, L, S)) is not None:  # cached per (mask, L, S)
        route = FusedRoute("tiles", call.scale, mask, segments=segs)
    else:
        return None
    return route


def _lastdim_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


class _FusedFunction(torch.autograd.Function):
    """(route, python, q, k, v) -> (out in q's dtype, lse in natural units, float32/float64)."""

    @staticmethod
    def forward(ctx, route: FusedRoute, python: Callable, q, k, v):
        qc, kc, vc = (_lastdim_contiguous(t) for t in (q, k, v))
        out, lse = route.forward(qc, kc, vc)
        ctx.route, ctx.python = route, python
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        need = ctx.needs_input_grad[2:5]
        if torch.is_grad_enabled():  # double backward: the tile loop under autograd serves or refuses it
            return (None, None, *_tile_loop_grads(ctx.python, q, k, v, dout, dlse, need))
        if dout is None and dlse is None:
            return None, None, None, None, None
        qc, kc, vc = (_lastdim_contiguous(t) for t in (q, k, v))
        do = None if dout is None else _lastdim_contiguous(dout)
        return None, None, *ctx.route.backward(do, qc, kc, vc, out, lse, dlse, need)


def _tile_loop_grads(python: Callable, q, k, v, dout, dlse, need):
    """Gradients by re-running the call on the tile loop under autograd (double backward only)."""
    create_graph = torch.is_grad_enabled()
    with torch.enable_grad():
        out, lse = python(q, k, v)
        outs, grads = [], []
        for t, g in ((out, dout), (lse, dlse)):
            if g is not None:
                outs.append(t)
                grads.append(g.to(t.dtype))
        inputs = [t for t, n in zip((q, k, v), need) if n]
        got = iter(torch.autograd.grad(outs, inputs, grads, create_graph=create_graph, allow_unused=True) if inputs and outs else ())
    res = [next(got) if n and outs else None for n in need]
    return [None if g is None else g.to(t.dtype) for g, t in zip(res, (q, k, v))]


def run_fused(call, route: FusedRoute, tile_loop: Callable) -> BackendResult:
    """Run ``call`` on ``route``. ``tile_loop(call, block_q, block_kv, seed)`` is the blockwise tile
    loop, re-run under autograd only for double backward."""

    def python(q, k, v):
        bq, bk = default_tiles(call.mask, call.q.shape[2], call.k.shape[2], call.q.dtype, call.q.device)
        res = tile_loop(dataclasses.replace(call, q=q, k=k, v=v), bq, bk, None)  # explicit tiles: the tile loop
        return res.out, res.lse

    out, lse = _FusedFunction.apply(route, python, call.q, call.k, call.v)
    return BackendResult(out, None, lse, torch.isneginf(lse).sum(), [], route=PATH_NAMES[route.kind])
