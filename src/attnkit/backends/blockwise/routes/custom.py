r"""Any other additive bias (custom functions, dense tensors, relative biases under other masks) on
the fused kernel, evaluated per query block and key chunk.

PyTorch's fused CPU flash kernel (:mod:`..kernel.gate`) takes a float mask that it adds to the scaled
scores inside its tiles. A bias that declares no structure (``biases.custom_bias(fn)``) has no
cheaper form than its values, so for every block of :data:`BLOCK` queries and every chunk of keys
the mask allows, the bias function is evaluated on that (l, s) index grid (through the bias's own
``bias_fn``, as the tile loop does), the mask is folded in as :math:`-\infty` by a select, and the
slab goes to the kernel as its float mask. The chunks of one query block are merged by
log-sum-exp in place into a float32 accumulator (float64 for float64), written once into the
preallocated output:

.. math::  \mathrm{lse} = \log(e^{\mathrm{lse}_1} + e^{\mathrm{lse}_2}),\quad
           o = e^{\mathrm{lse}_1 - \mathrm{lse}} o_1 + e^{\mathrm{lse}_2 - \mathrm{lse}} o_2 .

The kernel's float32 lse is rounded to an ulp of itself (6e-5 at |lse| ~ 1000), and the merge hands
that error to every weight, where the reference's weights are exact to eps times the scores' size.
So a row whose lse exceeds :data:`SHIFT_ABOVE` in magnitude is merged relative to a shift ``c``
(its first chunk's lse, that chunk recomputed): the mask is ``bias - c`` and each chunk's lse is
then small and exact to a few ulps of itself; the final lse is ``c`` plus the merged one.

Key chunks hold about :data:`CHUNK_ELEMS` bias elements (256 queries x 512 keys x 8 heads), so the
bias's temporaries and the kernel's mask stay in cache: at n = 8192 (H = 8, float32, one thread) a
log-distance bias took 0.4-0.5 s to evaluate in such chunks against 0.9-1.6 s in 256 x 8192 slabs,
and the kernel 1.5 s against 1.7 s reading a mask from memory (1.4 s in one call with a prebuilt
dense mask; one call per block with the bias written into a (256, 8192) slab, no merge, took
2.7 s in all against 1.9-2.0 s chunked). A chunk that needs no mask and no shift goes to the kernel
as the bias function returned it; others are written into a buffer reused by every chunk of the
call: where the allocator hands out fresh pages for every large block
(benchmarks/bias_and_small.py sets ``MALLOC_MMAP_THRESHOLD_``), each new temporary costs a page
fault per 4 KiB, and the bias function's own temporaries are then the larger part of its time.

Which keys a block reads: the mask's tile states on the (BLOCK x BLOCK) grid
(:meth:`attnkit.core.masks.Mask.tile_states`). Per query block, runs of consecutive FULL tiles go
to the kernel with the bias alone; runs of PARTIAL tiles take the mask's values on the chunk
(:mod:`..kernel.segment_masks`, cached per shape) selected in as -inf (``masked_fill_``, not an addition:
a NaN or inf the bias holds at a masked pair is dropped as the tile loop drops it); EMPTY tiles are
never read (causal: a block reads keys up to its last row only, the diagonal tile masked).

Semantics kept from the tile loop:

* rows with no allowed key in a chunk, by the mask or by a bias that is :math:`-\infty` on all of
  them: the kernel returns out 0 and lse exactly 0 there, so when an lse of 0 occurs the chunk's
  mask is read for rows with no finite entry (:func:`..kernel.merge.empty_rows_to_neginf` sets their
  lse to :math:`-\infty`, which the merge weighs 0);
* a NaN or :math:`+\infty` bias at an allowed pair makes its row NaN, in the kernel as in the tile
  loop, and the merge propagates it;
* inputs whose hidden rows could overflow (a 1e38 in a padding slot: ``inf - inf`` in the kernel)
  go to the tile loop, as on the relative route (:meth:`.base.BiasRoute.run`);
* float32 and float64 only (bf16 would round the bias to 8 bits in the kernel's mask); masks that
  read the head, explicit tile sizes, dropout and returned weights keep the tile loop.

Gradients: the relative route's autograd function (:class:`.relative._RelativeFunction`):
the tile loop's backward, fed the kernel's lse as the row shift, with the bias's trainable tensors
(:mod:`..loop.params`) as inputs, so they get gradients.

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E head dim (Ev = E);
l queries of a block, s keys of a chunk; nb = B or 1, nh = H or 1 (the bias's own extent).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ....core.identity_cache import SnapshotLRU
from ....core.indices import index_grid
from ....core.masks import values_readable
from ....core.tiles import EMPTY, FULL, TileGrid
from ....core import cost
from ..kernel.eligible import bias_kernel_eligible
from ..kernel.gate import forward_op
from ..kernel.merge import SHIFT_ABOVE, empty_rows_to_neginf
from ..kernel.tiles import BLOCK
from ..kernel.segments_cache import mask_key
from ..kernel.segment_masks import segment_masks
from .base import BiasRoute

__all__ = ["CustomRoute", "CUSTOM", "CustomPlan", "custom_forward", "chunk_keys", "CHUNK_ELEMS"]

CHUNK_ELEMS = 1 << 20  # bias elements per kernel call (4 MiB in float32)
_NEG_INF = float("-inf")


@dataclass(frozen=True)
class CustomPlan:
    """Per query block [q0, q1): its key runs (k0, k1, full), consecutive tiles of one state."""

    blocks: tuple[tuple[int, int, tuple[tuple[int, int, bool], ...]], ...]

    def pairs(self) -> int:
        """Query-key pairs the kernel computes (per batch row and head)."""
        return sum((q1 - q0) * (k1 - k0) for q0, q1, runs in self.blocks for k0, k1, _ in runs)


class CustomRoute(BiasRoute):
    """Any additive bias the relative route (before it in ``ROUTES``) did not take, under no mask or
    a mask that does not read the head."""

    name = "fused kernel per query block, custom bias evaluated per key chunk as its float mask"

    def applies(self, call) -> bool:
        return (call.mask is None or "h" not in call.mask.dims) and bias_kernel_eligible(call)

    def plan(self, call) -> CustomPlan | None:
        """The key runs per query block: all keys without a mask, else from the mask's tile states,
        cached per (mask, L, S); None when those cannot be read."""
        L, S, mask = call.L, call.S, call.mask
        if mask is None:
            return CustomPlan(tuple((q0, min(q0 + BLOCK, L), ((0, S, True),)) for q0 in range(0, L, BLOCK)))
        return _cached_runs(mask, L, S)

    def estimate(self, call) -> cost.Estimate | None:
        plan = self.plan(call)
        return None if plan is None else _custom_estimate(call, plan, self.name)

    def forward(self, call, plan: CustomPlan, q, k, v):
        return custom_forward(call, plan, q, k, v)


_CACHE = SnapshotLRU(lambda: 256)  # (mask, L, S) -> CustomPlan


def _cached_runs(mask, L: int, S: int) -> CustomPlan | None:
    """:func:`_runs` of ``mask``, kept per (mask, L, S) as :mod:`..kernel.segments_cache` keeps segments."""
    mkey, snap = mask_key(mask)
    key = None if mkey is None else (mkey, L, S)
    hit = None if key is None else _CACHE.get(key, snap)
    if hit is not None:
        return hit
    route = _runs(mask, L, S)
    if route is not None and key is not None:
        _CACHE.put(key, snap, route)
    return route


def _runs(mask, L: int, S: int) -> CustomPlan | None:
    """Runs of consecutive tiles of one state (FULL or PARTIAL) per query block of the
    (BLOCK x BLOCK) grid, or None when the tile states cannot be read (meta tensors, tracing)."""
    grid = TileGrid.uniform(L, S, BLOCK, BLOCK)
    codes = mask.tile_states(grid).expand(grid.shape)
    if not values_readable(codes):
        return None
    k_start, k_end = grid.k_start.tolist(), grid.k_end.tolist()
    blocks = []
    for (q0, q1), row in zip(zip(grid.q_start.tolist(), grid.q_end.tolist()), codes.tolist()):
        runs: list[list] = []  # [k0, k1, full]
        for ki, code in enumerate(row):
            if code == EMPTY:
                continue
            if runs and runs[-1][1] == k_start[ki] and runs[-1][2] == (code == FULL):
                runs[-1][1] = k_end[ki]
            else:
                runs.append([k_start[ki], k_end[ki], code == FULL])
        blocks.append((q0, q1, tuple(tuple(r) for r in runs)))
    return CustomPlan(tuple(blocks))


def chunk_keys(elems_per_key: int) -> int:
    """Keys per kernel call: about :data:`CHUNK_ELEMS` bias elements, a multiple of BLOCK (so a
    chunk of a run is whole tiles), at least BLOCK."""
    return max(BLOCK, CHUNK_ELEMS // max(elems_per_key, 1) // BLOCK * BLOCK)


def _chunks(runs, step: int, masks, q0: int, q1: int):
    """(k0, k1, segment mask or None) of every non-empty chunk of ``step`` keys of the runs."""
    for k0, k1, full in runs:
        for c0 in range(k0, k1, step):
            c1 = min(c0 + step, k1)
            seg = None if full else masks((q0, q1), (c0, c1))
            if seg is None or not seg.empty:
                yield c0, c1, seg


def _bias(bias_fn, nb: int, nh: int, q0: int, q1: int, k0: int, k1: int, device) -> torch.Tensor:
    g = index_grid((q0, q1), (k0, k1), batch=nb, heads=nh, device=device)
    return torch.as_tensor(bias_fn(g.b, g.h, g.q, g.kv), device=device)


def _fix_empty_rows(o, l2, slab) -> None:
    """In place: rows with no allowed key in this call get (0, -inf). The kernel gives such rows
    lse exactly 0, so the slab's row max is read only when an lse of 0 occurs."""
    if bool((l2 == 0).any()):
        live = ~torch.isneginf(slab.amax(-1))  # (B|1, H|1, l); NaN rows stay live (NaN, as the tile loop)
        empty_rows_to_neginf(o, l2, live.expand(o.shape[:3]))


def _mask_of(r, c, seg, buf, shifted: bool, l: int, s: int):
    """The kernel's (l, s) float mask of one chunk: bias ``r`` minus the row shifts ``c`` (B, H, l, 1),
    the segment mask folded in as -inf (a select: a NaN or inf bias at a masked pair goes).
    Unshifted and unmasked, the bias function's own result when it has the dtype and shape (no copy)."""
    fold = seg is not None and seg.add is not None
    if not shifted and not fold and r.dtype == buf.dtype and r.dim() == 4 and r.shape[-2:] == (l, s) and r.stride(-1) == 1:
        return r
    slab = buf[:, :, :l, :s]
    torch.sub(r, c, out=slab) if shifted else slab.copy_(r)  # broadcast and cast as the tile loop's addition
    return slab.masked_fill_(~seg.allowed, _NEG_INF) if fold else slab


def _block(op, q, k, v, scale, chunks, bias_of, buf, work):
    """(out (B, H, l, Ev) in the work dtype, lse (B, H, l)) of one query block over its chunks,
    or (None, None) when it has none.

    The chunks are merged by log-sum-exp, and a float32 lse of a large logit (|lse| ~ 1000) is off by
    ulp(1000) ~ 6e-5, an error every weight of the merge would inherit (the reference's weights are
    exact to eps times the scores' size). So each row is merged relative to a shift ``c``,
    subtracted from its bias in every chunk: the kernel's lse is then relative to ``c`` and exact to
    a few ulps of itself. A row's shift moves (:func:`_moved_shifts`) when a chunk's lse relative to
    it exceeds :data:`SHIFT_ABOVE`: on its first finite lse of that size, and whenever a later chunk
    outweighs the rows' merged part by that much (its weight is then near 1 and its lse must be
    exact; fuzz with 5-key chunks: a stale first shift left lse of 264 for the third chunk and the
    output 3.7x its tolerance). The chunk is recomputed with the moved shift and the merged lse
    re-expressed relative to it. A chunk far below the merged part needs no move: its lse's rounding
    reaches the output only through its tiny weight. The shift need not be exact, the kernel
    subtracts its own row max."""
    B, H, l = q.shape[0], q.shape[1], q.shape[2]
    c = torch.zeros(B, H, l, 1, dtype=buf.dtype, device=q.device)
    known, shifted = torch.zeros(B, H, l, 1, dtype=torch.bool, device=q.device), False
    acc, acc_lse = None, None
    for k0, k1, seg in chunks:
        r = bias_of(k0, k1)
        kt, vt = k[:, :, k0:k1], v[:, :, k0:k1]
        attn = _mask_of(r, c, seg, buf, shifted, l, k1 - k0)
        o, l2 = op(q, kt, vt, attn_mask=attn, scale=scale)
        _fix_empty_rows(o, l2, attn)
        moved = _moved_shifts(c, l2, known)
        known |= torch.isfinite(l2).unsqueeze(-1)
        if moved is not None:  # recompute this chunk relative to the moved shifts
            if acc_lse is not None:  # the merged part, relative to the new shifts (c - moved exact in float64)
                acc_lse.add_((c.double() - moved.double()).squeeze(-1).to(acc_lse.dtype))
            c, shifted = moved, True
            attn = _mask_of(r, c, seg, buf, shifted, l, k1 - k0)
            o, l2 = op(q, kt, vt, attn_mask=attn, scale=scale)
            _fix_empty_rows(o, l2, attn)
        if acc is None:
            acc, acc_lse = (o if o.dtype == work else o.to(work)), l2
        else:
            _merge_in_place(acc, acc_lse, o, l2)
    if acc is None:
        return None, None
    return acc, (acc_lse + c.squeeze(-1).to(acc_lse.dtype)) if shifted else acc_lse


def _moved_shifts(c, l2, known):
    """The row shifts (B, H, l, 1) after a chunk whose lse relative to ``c`` is ``l2`` (B, H, l), or
    None when none moves: a row seen for the first time (``known`` False) moves by its lse when that
    exceeds :data:`SHIFT_ABOVE` in magnitude, a known row when its lse exceeds it (the chunk then
    outweighs the row's merged part, kept within a few units of ``c``, by about e^16 or more)."""
    l2 = l2.unsqueeze(-1)
    first = ~known & (l2.abs() > SHIFT_ABOVE)
    later = known & (l2 > SHIFT_ABOVE)
    move = (first | later) & torch.isfinite(l2)
    if not bool(move.any()):
        return None
    return torch.where(move, c + l2.to(c.dtype), c)


def _merge_in_place(acc, acc_lse, o, l2) -> None:
    """:func:`..kernel.merge.merge_into` without temporaries of the output's size (each would be fresh
    memory: a page fault per 4 KiB where large blocks are not recycled): ``o`` is scaled in place
    and added into ``acc``; rows empty in both parts stay (0, -inf); NaN propagates."""
    total = torch.logaddexp(acc_lse, l2)  # (B, H, l)
    shift = torch.where(torch.isneginf(total), 0.0, total)
    acc.mul_((acc_lse - shift).exp_().unsqueeze(-1)).add_(o.mul_((l2 - shift).exp_().unsqueeze(-1)))
    acc_lse.copy_(total)


def custom_forward(call, route: CustomPlan, q, k, v) -> tuple[torch.Tensor, torch.Tensor]:
    """out (B, H, L, Ev) in q's dtype and lse (B, H, L) (float32; float64 for float64) of the call."""
    B, H, L, _ = q.shape
    S = k.shape[2]
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    out = torch.zeros(B, H, L, v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.full((B, H, L), _NEG_INF, dtype=work, device=q.device)
    bias, mask = call.bias, call.mask
    bias_fn = bias.bias_fn(L, S)
    nb, nh = (B if "b" in bias.dims else 1), (H if "h" in bias.dims else 1)
    masks = None if mask is None else segment_masks(mask, L, S, batch=B, kv_heads=k.shape[1], dtype=q.dtype, device=q.device)
    step = chunk_keys(B * H * min(BLOCK, L))  # the shifted mask is (B, H, l, s)
    buf = torch.empty(B, H, min(BLOCK, L), min(step, S), dtype=q.dtype, device=q.device)  # reused by every chunk
    op = forward_op()
    for q0, q1, runs in route.blocks:
        chunks = _chunks(runs, step, masks, q0, q1)
        bias_of = lambda k0, k1, q0=q0, q1=q1: _bias(bias_fn, nb, nh, q0, q1, k0, k1, q.device)  # noqa: E731
        o, l2 = _block(op, q[:, :, q0:q1], k, v, call.scale, chunks, bias_of, buf, work)
        if o is not None:
            out[:, :, q0:q1] = o
            lse[:, :, q0:q1] = l2
    return out, lse


# element-wise passes over a bias chunk of :data:`CHUNK_ELEMS` run this many times faster than
# ``elem_per_s`` (whole-tensor passes): a log-distance custom bias (cost_per_element 8) at
# n = 8192, H = 8 evaluated its 537 M elements in 1.1-1.3 s (benchmarks/bias_and_small.py's allocator)
_CHUNK_ELEM_SPEEDUP = 3.0


def _custom_estimate(call, plan: CustomPlan, path: str) -> cost.Estimate:
    """Time and bytes of the route: the kernel over the pairs the mask's non-empty tiles hold at
    ``fused_relative_flops`` (a float mask read per pair), one call per key chunk, the bias
    evaluated on every computed pair (at its own batch and head extent) and one pass writing the
    (B, H) mask; memory: the output, lse and one chunk buffer."""
    B, H, _, L, S, E, Ev = cost.dims(call)
    bias = call.bias
    nb, nh = (B if "b" in bias.dims else 1), (H if "h" in bias.dims else 1)
    step = chunk_keys(B * H * min(BLOCK, L))
    calls = sum(-(-(k1 - k0) // step) for _, _, runs in plan.blocks for k0, k1, _ in runs)
    pairs = plan.pairs()
    time_s = cost.RATES["call_overhead_s"]["blockwise_fused"] + calls * cost.RATES["fused_call_overhead_s"]
    time_s += 2 * B * H * pairs * (E + Ev) / cost.rate("fused_relative_flops", call.q.dtype)
    time_s += (nb * nh * cost.bias_ops(bias) + B * H) * pairs / (_CHUNK_ELEM_SPEEDUP * cost.RATES["elem_per_s"])
    nbytes = B * H * L * Ev * call.q.element_size() + B * H * L * 4
    nbytes += B * H * min(BLOCK, L) * min(step, S) * call.q.element_size()
    return {"time_s": time_s, "bytes": float(nbytes), "path": path}


CUSTOM = CustomRoute()
