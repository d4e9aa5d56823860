r"""Relative-position biases (ALiBi, T5 buckets, Shaw) on the fused kernel, one call per query block.

PyTorch's fused CPU flash kernel (:mod:`..kernel.gate`) takes a float mask, added to the scaled scores
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
``key - query`` (padding, documents) take :mod:`.custom`, which evaluates the bias per key
chunk and hands it to the kernel as a float mask.

Exactness: the kernel computes ``q kᵀ · scale + slab`` in the input dtype and subtracts each row's
max over the whole row (all keys of the block's range in one call: no merge), as SDPA with a dense
float mask does; the shifted scores of far keys (ALiBi at distance 8k: -4,000) underflow to 0 as
they do in the float64 reference. Rows with no allowed key come back as out 0, lse 0 and are set to
lse :math:`-\infty` (:func:`..kernel.merge.empty_rows_to_neginf`). A bias whose offsets hold a
non-finite value and inputs whose hidden rows could overflow
(a 1e38 in a padding slot: inf - inf = NaN in the kernel) go to the tile loop (whose handling is
the reference's). Only float32 and float64: bf16 would round the bias to 8 bits in the kernel's mask.

Gradients: the tile loop's backward (:mod:`..loop.backward`), fed the kernel's lse as the row shift and
the row sums and the output recomputed with that shift (:func:`..kernel.lse_grads.lse_terms`, as the
*tiles* route (:mod:`.tiles`) does: the output for D = dO · O, which must match the
weights the backward rebuilds), with the bias's learned tables (T5, Shaw) as inputs, so they get
gradients; so a forward + backward gains only the forward's share.

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E head dim (Ev = E);
l queries per block, s keys of a block's range, N = L + S - 1 offsets.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ....core import cost
from ....core.indices import alignment_offset
from ....core.mask_kinds import CausalMask, SlidingWindowMask
from ..kernel.eligible import bias_kernel_eligible
from ..kernel.gate import forward_op
from ..kernel.merge import empty_rows_to_neginf
from .base import BiasRoute

__all__ = ["RelativeRoute", "RELATIVE", "RelativePlan", "relative_forward", "RELATIVE_BLOCK"]

RELATIVE_BLOCK = 512  # queries per call of a relative bias (the kernel is faster on long blocks; a causal
#   block computes l² / 2 masked pairs on its diagonal: 6% extra work at 8k)
_NEG_INF = float("-inf")


@dataclass
class RelativePlan:
    """How one call with a relative bias runs on the fused kernel: the block size, the blocks
    (q0, q1, k0, k1), the offsets' values ``g`` (H|1, N) and the rows with no allowed key."""

    l: int
    blocks: list[tuple[int, int, int, int]]
    g: torch.Tensor  # (H|1, N) contiguous: the bias at d = -(L-1) .. S-1, -inf where masked
    empty_rows: torch.Tensor | None = None  # (L,) bool: rows with no allowed key, or None when there are none


class RelativeRoute(BiasRoute):
    """A relative bias of at most the head (ALiBi, T5, Shaw and sums of them), under no mask or a
    mask of ``key - query`` alone (causal, windows): the condition is :meth:`applies`, nowhere else."""

    name = "fused kernel per query block, relative bias as a view of its offsets"

    def applies(self, call) -> bool:
        mask, bias = call.mask, call.bias
        if bias is None or not bias.relative or not bias.dims <= {"h"}:
            return False
        return (mask is None or (mask.shift_invariant and not mask.dims)) and bias_kernel_eligible(call)

    def plan(self, call) -> RelativePlan | None:
        """The offsets' values, blocks and empty rows; None (the next route) when a bias value is
        not finite. Not cached: the bias's values (a learned table) change between calls."""
        with torch.no_grad():  # a learned table's graph is not needed: the backward re-evaluates the bias
            return _relative_plan(call)

    def estimate(self, call) -> cost.Estimate:
        return _relative_estimate(call, self.name)

    def forward(self, call, plan: RelativePlan, q, k, v):
        return relative_forward(call, plan, q, k, v)


def _offsets(call) -> tuple[torch.Tensor, torch.Tensor]:
    """(q_idx, kv_idx) (N,) in range with kv_idx - q_idx = d for every d in [-(L-1), S-1]."""
    L, S = call.L, call.S
    d = torch.arange(-(L - 1), S, device=call.q.device)
    qi = (-d).clamp(min=0)
    return qi, qi + d


def _relative_plan(call) -> RelativePlan | None:
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
    return RelativePlan(l, blocks, g.contiguous(), empty_rows if bool(empty_rows.any()) else None)


def _relative_slab(g: torch.Tensor, L: int, q0: int, q1: int, k0: int, k1: int) -> torch.Tensor:
    """The (1, H|1, q1 - q0, k1 - k0) bias of block rows q1-1 .. q0 (reversed) and keys k0 .. k1-1:
    entry (r', j') is g[:, (k0 - q1 + L) + r' + j'], a view of g (H|1, N) with overlapping rows."""
    nh, N = g.shape
    return g.as_strided((1, nh, q1 - q0, k1 - k0), (nh * N, N, 1, 1), g.storage_offset() + k0 - q1 + L)


def relative_forward(call, route: RelativePlan, q, k, v) -> tuple[torch.Tensor, torch.Tensor]:
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


def _offset_range(mask, L: int, S: int) -> tuple[float, float]:
    """(lowest, highest) key - query offset ``mask`` allows, as far as its kind says (the full
    range for masks that do not declare it: an upper bound on the keys each block reads)."""
    lo, hi = -float("inf"), float("inf")
    if type(mask) is CausalMask:
        hi = alignment_offset(mask.align, L, S)
    elif type(mask) is SlidingWindowMask:
        off = alignment_offset(mask.align, L, S)
        lo = -float("inf") if mask.left is None else off - mask.left
        hi = float("inf") if mask.right is None else off + mask.right
    return lo, hi


def _relative_estimate(call, path: str) -> cost.Estimate:
    """Time and bytes of the route: one kernel call per block of RELATIVE_BLOCK queries against the
    keys its rows may see, at the rate ``fused_relative_flops`` (measured with the bias's view as
    the kernel's float mask), plus the bias evaluated once per offset (H · (L + S)). It needs no
    bias value: a bias holding a NaN or inf, or inputs that are not finite, send the call to
    another route when it runs."""
    B, H, _, L, S, E, Ev = cost.dims(call)
    l = min(RELATIVE_BLOCK, L)
    lo, hi = _offset_range(call.mask, L, S)
    computed, calls = 0, 0
    for q0 in range(0, L, l):
        q1 = min(q0 + l, L)
        k0, k1 = max(0, q0 + lo), min(S, q1 + hi)  # keys some row of the block may see
        if k1 > k0:
            computed += (q1 - q0) * int(k1 - k0)
            calls += 1
    n_off = H * (L + S - 1)  # the bias's values per offset, evaluated once
    time_s = cost.RATES["call_overhead_s"]["blockwise_fused"] + calls * cost.RATES["fused_call_overhead_s"]
    time_s += 2 * B * H * computed * (E + Ev) / cost.rate("fused_relative_flops", call.q.dtype)
    time_s += n_off * (cost.bias_ops(call.bias) + 2) / cost.RATES["elem_per_s"]
    # the output and lse, the offsets' values, and one block's flipped queries and output
    nbytes = B * H * L * Ev * call.q.element_size() + B * H * L * 4 + n_off * call.q.element_size()
    nbytes += 2 * B * H * l * Ev * call.q.element_size()
    return {"time_s": time_s, "bytes": float(nbytes), "path": path}


RELATIVE = RelativeRoute()
