r"""Recompute one attention call's weights, or its per-row summaries, from the call itself.

:func:`attnkit.inspect.capture` records beside a model's fast backend: it gets the finished
:class:`~attnkit.core.call.AttentionCall` (q, k, score, mask, bias, scale, sinks) and recomputes
from it what it was asked to keep. Two ways, one semantics:

* :func:`dense_weights` -- the (B, H, L, S) weights, from the reference backend;
* :func:`tiled_row_summaries` -- a :class:`~attnkit.inspect.row_summary.RowSummary` per row,
  tile by tile, without the (L, S) matrix.

Both apply every part of the call that shapes the softmax: the score, the scale, the bias (additive
biases and score modifiers such as soft-capping, :mod:`attnkit.core.softcap`, in the order the
backends apply them), the mask, and the attention sinks (:mod:`attnkit.core.sinks`).

Sinks
-----
With a sink logit :math:`\sigma` the softmax has one more column, whose value is the zero vector:

.. math::

    p_{ij} = \frac{e^{s_{ij}}}{\sum_{j'} e^{s_{ij'}} + e^{\sigma}} = e^{s_{ij} - \mathrm{lse}'_i},
    \qquad \mathrm{lse}'_i = \operatorname{logaddexp}(\mathrm{lse}_i, \sigma),
    \qquad \sum_j p_{ij} = \operatorname{sigmoid}(\mathrm{lse}_i - \sigma) < 1.

So the weights returned here (and the summaries) cover the S keys only; the sink's share
:math:`1 - \sum_j p_{ij}` is left out of them, not spread over the keys. In a summary that means:
``mass`` is :math:`\sum_j p_{ij}` (the sink's share is ``1 - mass``); ``entropy`` is
:math:`-\sum_j p_{ij} \log p_{ij}` over the keys (the sink column's own term is not in it);
``max_weight``, ``topk_weights``, ``distance`` and ``sink_mass`` are sums or maxima over keys of
the same :math:`p_{ij}`. ``sink_mass`` is the mass on the *key positions* ``sink_positions``
(a BOS token), not the learned sink. A fully masked row puts everything on the sink: its
summary is all zeros, as without sinks.

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E head dim,
l / s the queries / keys of one tile, k top-k.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace

import torch
from torch import Tensor

from ..core import sinks as _sinks
from ..core.tiles import TileGrid, TileState
from .row_summary import RowSummary, RowSummaryAccumulator

__all__ = ["TILE_ELEMENTS", "dense_weights", "tiled_row_summaries", "pick_heads"]

#: Default cap on the elements of one score tile of the tiled summary pass.
TILE_ELEMENTS = 2**21


def dense_weights(call) -> Tensor:
    """The call's weights (B, H, L, S) from the reference backend, without dropout.

    With sinks (``call.sinks``) each row is scaled by ``sigmoid(lse - sink)``, as
    :func:`attnkit.attention` scales the weights it returns: the row then sums to that factor,
    below 1 (see the module docstring)."""
    from ..backends import reference

    res = reference.run(replace(call, return_weights=True, dropout_p=0.0))
    if call.sinks is None:
        return res.weights
    return _sinks.apply(res.out, res.weights, res.lse, call.sinks)[1]  # (B, H, L, S)


def _sink_rows(call, q0: int, q1: int, dtype: torch.dtype) -> Tensor | None:
    """The call's sink logits for query rows q0..q1, (B|1, H, l), or None without sinks."""
    if call.sinks is None:
        return None
    s = call.sinks.detach().to(dtype)  # (B|1, H, L|1)
    return s if s.shape[-1] == 1 else s[..., q0:q1]


def _tile_scores(call, q: Tensor, kx: Tensor, rows: tuple[int, int], cols: tuple[int, int], state: TileState, work) -> Tensor:
    """Scores of one tile (B, H, l, s), as the reference backend forms them: score · scale, then the
    bias (additive parts, then score modifiers such as soft-capping), then -inf where masked."""
    (q0, q1), (k0, k1) = rows, cols
    B, H, L, _ = q.shape
    S = kx.shape[2]
    s = call.score(q[:, :, q0:q1].to(work), kx[:, :, k0:k1].to(work)) * call.scale  # (B, H, l, s)
    if call.bias is not None:
        s = call.bias.apply(s, rows, cols, L, S)
    if state is TileState.PARTIAL:
        allowed = call.mask.evaluate(rows, cols, L, S, batch=B, heads=H, device=q.device)
        s = s.masked_fill(~allowed, float("-inf"))
    return s.expand(B, H, q1 - q0, k1 - k0)


def tiled_row_summaries(
    call,
    *,
    k: int = 5,
    sink_positions: int | Sequence[int] = 0,
    tile_elements: int = TILE_ELEMENTS,
    kv_block: int = 512,
) -> RowSummary:
    """Per-row summaries of a call's attention without forming its (L, S) weights.

    Scores are computed one (query block × key block) tile at a time -- score, scale, bias and mask
    exactly as the reference backend applies them -- and folded into a
    :class:`RowSummaryAccumulator` per query block; tiles the mask proves empty are skipped. With
    sinks, each block is finalised with ``lse' = logaddexp(lse, sink)``, so the summaries describe
    the weights :func:`dense_weights` returns (rows summing to ``sigmoid(lse - sink)``; see the
    module docstring for what the summaries do with the sink's share). Half inputs are computed in
    float32. Distances use query position i + S − L. Key blocks have ``kv_block`` keys; query blocks
    as many rows as keep a tile under ``tile_elements``.
    """
    q = call.q
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    kx, _ = call.expanded_kv()  # (B, H, S, E): query head h reads kv head h // groups
    B, H, L, _ = q.shape
    S = kx.shape[2]
    kv_block = min(S, kv_block)
    q_block = max(1, min(L, tile_elements // max(1, B * H * kv_block)))
    parts = []
    # the mask's own tile states for the whole grid, once (EMPTY tiles skipped, FULL ones unmasked)
    codes = None if call.mask is None else call.mask.tile_states(TileGrid.uniform(L, S, q_block, kv_block)).tolist()
    for q0 in range(0, L, q_block):
        q1 = min(L, q0 + q_block)
        acc = RowSummaryAccumulator(k, sink_positions=sink_positions, offset=q0 + S - L)
        folded = False
        for k0 in range(0, S, kv_block):
            k1 = min(S, k0 + kv_block)
            state = TileState.FULL if codes is None else TileState(codes[q0 // q_block][k0 // kv_block])
            if state is TileState.EMPTY:
                continue
            acc.update(k0, _tile_scores(call, q, kx, (q0, q1), (k0, k1), state, work))
            folded = True
        if not folded:  # every key masked for this block: rows summarise to zeros
            acc.update(0, torch.full((B, H, q1 - q0, 1), float("-inf"), dtype=work, device=q.device))
        sink = _sink_rows(call, q0, q1, work)
        # the sink joins each row's denominator: p_ij = exp(s_ij - logaddexp(lse_i, sink))
        lse = None if sink is None else torch.logaddexp(acc.logsumexp(), sink)  # (B, H, l)
        parts.append(acc.finalize(lse))
    return RowSummary(**{f.name: torch.cat([getattr(p, f.name) for p in parts], dim=2) for f in fields(RowSummary)})


def pick_heads(summary: RowSummary, heads: list[int], H: int) -> RowSummary:
    """The rows of ``summary`` (fields (B, H, L[, k])) for the query heads ``heads`` only."""
    if heads == list(range(H)):
        return summary
    idx = torch.tensor(heads, device=summary.entropy.device)
    return RowSummary(**{f.name: getattr(summary, f.name).index_select(1, idx) for f in fields(RowSummary)})
