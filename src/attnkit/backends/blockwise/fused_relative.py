r"""Relative-position biases (ALiBi, T5 buckets, Shaw) on the fused kernel, one call per query block.

PyTorch's fused CPU flash kernel (:mod:`.fused_gate`) takes a float mask, added to the scaled scores
inside its tiles; so a block of ``l`` queries against its keys is one call with the block's (l, s)
bias slab as that mask.

*Relative biases* (``bias.relative``: ALiBi, T5, Shaw and sums of them) depend only on the head and
``d = key - query``: :math:`\mathrm{bias}_h(i, j) = g_h(j - i)`, so :math:`g` is evaluated once, on
the ``N = L + S - 1`` offsets (through the bias's own function, at in-range (query, key) pairs),
into a vector ``g`` (H, N). Every block's slab is then a *view* of it: with the block's rows taken
in reverse order (row ``r' = q1 - 1 - i``), the bias of (r', key ``k0 + j'``) is
:math:`g_h(k_0 - q_1 + 1 + r' + j')`, an index that grows by one along both r' and j', so the slab
is ``g.as_strided((1, H, l, s), (., N, 1, 1))`` (rows overlapping, last dim contiguous), which the
kernel reads as its mask with no copy. The block's queries are flipped before the call and its
output rows flipped back (O(l · E) copies); no (l, S) bias is ever materialised, and memory is
O(H · (L + S)). A mask that depends only on ``key - query`` (``mask.shift_invariant``: causal,
sliding windows) is a function of ``d`` too: it is folded into ``g`` as :math:`-\infty`, and each
block's key range is cut to the keys some row of it may see (causal: the kernel never reads keys
past the diagonal block).

Other additive biases (custom functions, dense tensors) and masks that are not a function of
``key - query`` (padding, documents) take :mod:`.fused_custom`, which evaluates the bias per key
chunk and hands it to the kernel as a float mask.

Exactness: the kernel computes ``q kᵀ · scale + slab`` in the input dtype and subtracts each row's
max over the whole row (all keys of the block's range in one call: no merge), as SDPA with a dense
float mask does; the shifted scores of far keys (ALiBi at distance 8k: -4,000) underflow to 0 as
they do in the float64 reference. Rows with no allowed key come back as out 0, lse 0 and are set to
lse :math:`-\infty` (:func:`.fused_merge.empty_rows_to_neginf`). A bias whose offsets hold a
non-finite value and inputs whose hidden rows could overflow
(a 1e38 in a padding slot: inf - inf = NaN in the kernel) go to the tile loop (whose handling is
the reference's). Only float32 and float64: bf16 would round the bias to 8 bits in the kernel's mask.

Gradients: the tile loop's backward (:mod:`.backward`), fed the kernel's lse as the row shift and
the row sums and the output recomputed with that shift (:func:`.fused_grad.lse_terms`, as the
*tiles* route of :mod:`.fused_function` does: the output for D = dO · O, which must match the
weights the backward rebuilds), with the bias's learned tables (T5, Shaw) as inputs, so they get
gradients; so a forward + backward gains only the forward's share.

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E head dim (Ev = E);
l queries per block, s keys of a block's range, N = L + S - 1 offsets.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...core.options import current as current_options
from ...core.output import BackendResult
from ..sdpa import kernel_layout
from ..sdpa_mask_cache import dead_keys_inert
from .fused_gate import available, forward_op
from .fused_grad import lse_terms, tile_plan
from .fused_merge import empty_rows_to_neginf
from .function import _fail_when_differentiated
from .backward import _backward
from .params import bias_tensors

__all__ = ["RelativeRoute", "relative_route_of", "run_relative", "PATH_NAME", "RELATIVE_BLOCK"]

PATH_NAME = "fused kernel per query block, relative bias as a view of its offsets"
RELATIVE_BLOCK = 512  # queries per call of a relative bias (the kernel is faster on long blocks; a causal
#   block computes l² / 2 masked pairs on its diagonal: 6% extra work at 8k)
_NEG_INF = float("-inf")


@dataclass
class RelativeRoute:
    """How one call with a relative bias runs on the fused kernel: the block size, the blocks
    (q0, q1, k0, k1), the offsets' values ``g`` (H|1, N) and the rows with no allowed key."""

    l: int
    blocks: list[tuple[int, int, int, int]]
    g: torch.Tensor  # (H|1, N) contiguous: the bias at d = -(L-1) .. S-1, -inf where masked
    empty_rows: torch.Tensor | None = None  # (L,) bool: rows with no allowed key, or None when there are none


def _eligible(call, block_q, block_kv) -> bool:
    q, k, v = call.q, call.k, call.v
    bias = call.bias
    if block_q is not None or block_kv is not None or bias is None or not bias.additive:
        return False
    if q.device.type != "cpu" or torch.compiler.is_compiling():
        return False
    if any(torch._C._functorch.is_functorch_wrapped_tensor(t) for t in (q, k, v)):
        return False
    if not getattr(call.score, "identity_dot", False) or call.dropout_p > 0 or call.return_weights:
        return False
    if q.dtype not in (torch.float32, torch.float64) or q.shape[-1] != v.shape[-1] or q.shape[0] == 0:
        return False
    opts = current_options()
    if opts.block_q is not None or opts.block_kv is not None:
        return False
    return available(q.dtype)


def relative_route_of(call, block_q: int | None = None, block_kv: int | None = None) -> RelativeRoute | None:
    """The fused route of a call with a relative bias, or None when the tile loop must serve it."""
    if not _eligible(call, block_q, block_kv):
        return None
    mask, bias = call.mask, call.bias
    if not (bias.relative and bias.dims <= {"h"}) or not (mask is None or (mask.shift_invariant and not mask.dims)):
        return None
    with torch.no_grad():  # a learned table's graph is not needed: the backward re-evaluates the bias
        return _relative_route(call)


def _offsets(call) -> tuple[torch.Tensor, torch.Tensor]:
    """(q_idx, kv_idx) (N,) in range with kv_idx - q_idx = d for every d in [-(L-1), S-1]."""
    L, S = call.L, call.S
    d = torch.arange(-(L - 1), S, device=call.q.device)
    qi = (-d).clamp(min=0)
    return qi, qi + d


def _relative_route(call) -> RelativeRoute | None:
    """Blocks, row emptiness and offset values of a relative bias (and a mask of key - query only)."""
    B, H, L, _ = call.q.shape
    S, dev, dt = call.S, call.q.device, call.q.dtype
    qi, kv = _offsets(call)  # (N,)
    b0 = torch.zeros(1, 1, 1, 1, dtype=torch.long, device=dev)
    h = torch.arange(H, device=dev).view(1, -1, 1, 1)
    g = torch.as_tensor(call.bias.bias_fn(L, S)(b0, h, qi.view(1, 1, 1, -1), kv.view(1, 1, 1, -1)), device=dev)
    g = g.to(dt).reshape(-1, g.shape[-1])  # (H|1, N)
    if not bool(torch.isfinite(g).all()):
        return None  # the tile loop's (the reference's) handling of infinite and NaN bias values
    if call.mask is not None:
        allowed = torch.as_tensor(call.mask.predicate(L, S)(b0, h[:, :1], qi.view(1, 1, 1, -1), kv.view(1, 1, 1, -1)))
        allowed = allowed.expand(1, 1, 1, L + S - 1).reshape(-1)  # (N,) over d = -(L-1) .. S-1
        g = g.masked_fill(~allowed, _NEG_INF)
    else:
        allowed = torch.ones(L + S - 1, dtype=torch.bool, device=dev)
    d_ok = torch.nonzero(allowed).flatten()
    # a row i sees some key iff an allowed d lies in [-i, S-1-i]: prefix counts over d
    cum = torch.nn.functional.pad(allowed.long().cumsum(0), (1, 0))  # (N + 1,)
    i = torch.arange(L, device=dev)
    empty_rows = (cum[S + L - 1 - i] - cum[L - 1 - i]) == 0  # (L,)
    l = min(RELATIVE_BLOCK, L)
    blocks = []
    if d_ok.numel():
        dmin, dmax = int(d_ok[0]) - (L - 1), int(d_ok[-1]) - (L - 1)
        for q0 in range(0, L, l):
            q1 = min(q0 + l, L)
            k0, k1 = max(0, q0 + dmin), min(S, q1 - 1 + dmax + 1)
            if k1 > k0:
                blocks.append((q0, q1, k0, k1))
    return RelativeRoute(l, blocks, g.contiguous(), empty_rows if bool(empty_rows.any()) else None)


def _relative_slab(g: torch.Tensor, L: int, q0: int, q1: int, k0: int, k1: int) -> torch.Tensor:
    """The (1, H|1, q1 - q0, k1 - k0) bias of block rows q1-1 .. q0 (reversed) and keys k0 .. k1-1:
    entry (r', j') is g[:, (k0 - q1 + L) + r' + j'], a view of g (H|1, N) with overlapping rows."""
    nh, N = g.shape
    return g.as_strided((1, nh, q1 - q0, k1 - k0), (nh * N, N, 1, 1), g.storage_offset() + k0 - q1 + L)


def relative_forward(call, route: RelativeRoute, q, k, v) -> tuple[torch.Tensor, torch.Tensor]:
    """out (B, H, L, E) in q's dtype and lse (B, H, L) (float32; float64 for float64) of the call."""
    B, H, L, E = q.shape
    lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    out = torch.zeros(B, H, L, v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.full((B, H, L), _NEG_INF, dtype=lse_dtype, device=q.device)
    op = forward_op()
    for q0, q1, k0, k1 in route.blocks:
        m = _relative_slab(route.g, L, q0, q1, k0, k1)  # rows reversed: the slab is a view of g
        o, l2 = op(q[:, :, q0:q1].flip(2), k[:, :, k0:k1], v[:, :, k0:k1], attn_mask=m, scale=call.scale)
        o, l2 = o.flip(2), l2.flip(2)
        if route.empty_rows is not None and bool(route.empty_rows[q0:q1].any()):
            empty_rows_to_neginf(o, l2, ~route.empty_rows[q0:q1].expand(o.shape[:3]))
        out[:, :, q0:q1] = o
        lse[:, :, q0:q1] = l2
    return out, lse


class _RelativeFunction(torch.autograd.Function):
    """(call, route, forward, q, k, v, *params) -> (out, lse), ``forward(call, route, q, k, v)`` the
    route's fused forward (this module's, or :mod:`.fused_custom`'s); the backward is the tile loop's."""

    @staticmethod
    def forward(ctx, call, route, forward, q, k, v, *params):
        qc, kc, vc = (kernel_layout(t) for t in (q, k, v))  # strides the fused op reads right
        out, lse = forward(call, route, qc, kc, vc)
        ctx.call = call
        ctx.save_for_backward(q, k, v, lse, *params)  # the backward recomputes out (.fused_grad.lse_terms)
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, lse, *params = ctx.saved_tensors
        need = ctx.needs_input_grad[3:6]  # after call, route, forward
        if dout is None and dlse is None:
            return (None,) * (6 + len(params))
        plan = tile_plan(q, k, ctx.call.mask, ctx.call.scale, ctx.call.bias)  # float32 or float64 inputs: their dtype
        create_graph = torch.is_grad_enabled()
        with torch.no_grad():
            m, ell, out = lse_terms(plan, q, k, v, lse)
            dout = torch.zeros_like(out) if dout is None else dout
            dq, dk, dv, dparams = _backward(plan, q, k, v, out, m, ell, dout.contiguous(), dlse, params, need)
        grads = (dq if need[0] else None, dk if need[1] else None, dv if need[2] else None,
                 *[None if g is None else g.to(p.dtype) for g, p in zip(dparams, params)])
        if create_graph:
            grads = _fail_when_differentiated(grads, (q, k, v, dout, dlse, *params))
        return (None, None, None, *grads)


def run_bias_route(call, route, forward, path: str, tile_loop):
    """Run ``call`` on a fused bias route (``forward``, named ``path`` in the report);
    ``tile_loop(call)`` serves it instead when an input is not provably harmless where the mask hides
    it (:func:`attnkit.backends.sdpa_mask_cache.dead_keys_inert`: every value finite and every
    |q·k| · scale far below overflow)."""
    if not dead_keys_inert(call, call.q, call.k, call.v):
        # a huge or infinite value in a key or query row the mask hides would meet the kernel's -inf
        # as inf - inf = NaN; the tile loop zeroes such rows first (:mod:`.leaks`)
        return tile_loop(call)
    params = bias_tensors(call)
    out, lse = _RelativeFunction.apply(call, route, forward, call.q, call.k, call.v, *params)
    return BackendResult(out, None, lse, torch.isneginf(lse).sum(), [], route=path)


def run_relative(call, route: RelativeRoute, tile_loop):
    """Run ``call`` on ``route`` (:func:`run_bias_route`)."""
    return run_bias_route(call, route, relative_forward, PATH_NAME, tile_loop)
