r"""The Python tile loop: the blockwise algorithm (derived in :mod:`attnkit.backends.blockwise`) over
(bq, bk) tiles, for every call no fused route serves (:mod:`..routes`), and for calls that ask for
tile sizes.

This module builds the call's :class:`.plan.Plan` (tile codes from the mask, the work dtype, the
score's dot form, the bias's tensors that need gradients, the dropout seed) and runs
:class:`.function.BlockwiseFunction` on it; the dense weights come from :mod:`.weights` when asked.

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E query/key dim,
Ev value dim; bq, bk: one tile's query and key counts.
"""

from __future__ import annotations

import torch

from ....core.call import AttentionCall
from ....core.masks import from_cache_key
from ....core.output import BackendResult, materialized
from ...tiling import EMPTY, PARTIAL, default_tiles, tile_map
from .function import BlockwiseFunction, BlockwiseFunctionCtx
from .leaks import live_key_rows
from .params import bias_tensors
from .plan import Plan
from .weights import dense_weights

__all__ = ["run_tile_loop", "tile_codes", "tile_codes_of_key", "draw_seed", "PATH_NAME"]

PATH_NAME = "Python tile loop"

_HALF = (torch.float16, torch.bfloat16)


def _code_rows(mask, L: int, S: int, bq: int, bk: int) -> tuple[tuple[int, ...], ...]:
    """The tile codes as Python ints. They describe the mask's structure, never q, k, v; under
    torch.compile they are computed once while tracing and are a constant of the graph (reading a
    traced tensor with .tolist() would break it), like :func:`attnkit.core.options.current`."""
    if torch.compiler.is_compiling():
        from ....core import traced  # loads torch._dynamo, already loaded while tracing

        # the mask goes in as its cache_key (Python constants), not as the object: a mask built
        # inside the compiled function exists only as Dynamo's model of it, with no attributes
        # a Python call could read; data masks have no key and no readable values while tracing
        key = None if mask is None else mask.cache_key
        return traced.constant(tile_codes_of_key, mask is None, key, L, S, bq, bk)
    return tile_codes(mask, L, S, bq, bk)


def tile_codes(mask, L: int, S: int, bq: int, bk: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(row) for row in tile_map(mask, L, S, bq, bk).tolist())


def tile_codes_of_key(no_mask: bool, key, L: int, S: int, bq: int, bk: int) -> tuple[tuple[int, ...], ...]:
    """:func:`tile_codes` of the mask a cache_key rebuilds; every tile PARTIAL (evaluated: always
    correct) for a mask without a key of a built-in kind."""
    mask = None if no_mask else from_cache_key(key)
    if mask is None and not no_mask:
        nq, nk = -(-L // bq), -(-S // bk)
        return ((int(PARTIAL),) * nk,) * nq
    return tile_codes(mask, L, S, bq, bk)


def _dropout_seed() -> int:
    """The per-call dropout seed (:func:`draw_seed`); under torch.compile it is drawn outside the
    graph, and with ``fullgraph=True`` that is an error naming the reason
    (:mod:`attnkit.backends.blockwise.loop.traced`)."""
    if torch.compiler.is_compiling():
        from .traced import dropout_seed  # loads torch._dynamo, already loaded while tracing

        return dropout_seed()
    return draw_seed()


def draw_seed() -> int:
    """The per-call dropout seed from torch's default generator (``torch.manual_seed`` reproduces it).
    An int, not a tensor: every tile's keep-mask comes from a generator seeded with it, in the
    forward and again in the backward. Reading it is a host sync."""
    return int(torch.randint(0, 2**62, (1,)).item())


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def run_tile_loop(call: AttentionCall, block_q: int | None, block_kv: int | None, seed: int | None) -> BackendResult:
    """The call on the tile loop, with tiles of ``block_q`` x ``block_kv`` (None: the defaults of
    :func:`attnkit.backends.tiling.default_tiles`) and dropout ``seed`` (None: drawn)."""
    q, k, v = call.q, call.k, call.v
    B, H, L, E = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    dbq, dbk = default_tiles(call.mask, L, S, q.dtype, q.device)
    bq, bk = min(block_q or dbq, L), min(block_kv or dbk, S)
    for name, val in (("block_q", bq), ("block_kv", bk)):
        if isinstance(val, bool) or not isinstance(val, int) or val <= 0:
            raise ValueError(f"{name} must be a positive int, got {val!r}")
    code_rows = _code_rows(call.mask, L, S, bq, bk)
    codes = torch.tensor(code_rows, dtype=torch.int8)  # (nq, nk)
    kept = [[ki for ki, c in enumerate(row) if c != EMPTY] for row in code_rows]
    work = _work_dtype(q.dtype)
    kv = v
    if q.dtype in _HALF:
        # scores, running max/sum, the output accumulator and the backward's D in float32, as the
        # reference computes: a bf16 score of ~100 is off by up to 0.25. The float32 copies are
        # O(n) (2x the inputs); autograd casts their gradients back to the half dtype.
        q, k, kv = q.float(), k.float(), v.float()
    qk = call.score.as_dot(q, k)
    if qk is not None and qk[1] is not k and call.mask is not None:
        # k is transformed before the tiles see it (cosine): zero dead keys first, or the
        # transform's backward turns their NaN into NaN gradients (0 · NaN)
        live = live_key_rows(call.mask, code_rows, B, H, Hkv, L, S, bq, bk, q.device)
        qk = call.score.as_dot(q, torch.where(live, k, 0.0))
    bias_general = call.bias is not None and not call.bias.additive
    qscale = None
    if qk is None:  # additive score: q and k go in raw, the score module runs per tile
        qx, kx, score = q, k, call.score
        params = [p for p in call.score.parameters() if p.requires_grad]
    else:
        qx, kx = qk
        score = None
        params = []
        if not bias_general:  # the tiles scale q'k'ᵀ (plan.exp_scale), no scaled copy of q
            qscale = call.scale
    params += bias_tensors(call)
    if call.dropout_p > 0 and seed is None:
        seed = _dropout_seed()
    plan = Plan(
        B, H, Hkv, L, S, bq, bk, codes, call.scale, score, call.bias, call.mask,
        call.dropout_p, seed or 0, work, qscale, kept,
    )
    plan.code_rows = code_rows
    fn = BlockwiseFunctionCtx if torch.compiler.is_compiling() else BlockwiseFunction
    out, lse, _, _ = fn.apply(plan, qx, kx, kv, *params)  # (row max, row sum) are the backward's
    out = out.to(v.dtype)
    weights, mats = None, []
    if call.return_weights:
        weights = dense_weights(plan, qx, kx, lse).to(v.dtype)
        mats.append(materialized("weights", weights))
    # a tensor, not int(): reading it would break torch.compile graphs and torch.func.vmap
    return BackendResult(out, weights, lse, torch.isneginf(lse).sum(), mats, route=PATH_NAME)
