"""Ring attention's exact path for NaN and inf inputs: gather the sequence, compute the reference.

The ring skips pairs of chunks its mask empties, and its per-block softmax puts NaN in other
gradient entries than softmax attention's definition does; so a NaN in one rank's shard would show
up elsewhere (or not at all: a NaN value that a causal mask hides from earlier rows reaches them
as ``0 · NaN`` in :func:`attnkit.attention`'s reference, never in a skipped block). Ring attention
promises the result of ``attention`` on the gathered sequence, NaN included, so:

* every rank checks its own shards in O(Lr) (:func:`local_nonfinite`: float sums, as
  :mod:`attnkit.backends.nonfinite` does) and the flag rides along in the shape check's
  ``all_gather`` (one collective the ring makes anyway), so all ranks agree on the path;
* when any rank's inputs hold a NaN or inf, every rank all-gathers q, k and v, computes the
  reference on the whole sequence (in query-row chunks, :func:`attnkit.backends.reference.run_in_row_chunks`)
  and keeps its own rows; the backward all-gathers the output gradient and differentiates the
  same graph. O(L) memory per rank for the gathered inputs and W-fold redundant work: the price of
  a call whose inputs already hold NaN or inf, never paid by finite ones.

Shape legend (per rank): B batch, H query heads, Hkv key/value heads, Lr shard length, L true
sequence length (``seq_len``), E head dim, Ev value dim, W ranks.
"""

from __future__ import annotations

import torch

from ..backends import reference
from ..backends.nonfinite import all_finite, dense_bias_unsafe
from ..core.call import make_call
from .comm import all_gather_tensor
from .layout import rank_chunks

__all__ = ["local_nonfinite", "gathered_reference"]


def local_nonfinite(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias) -> bool:
    """True when this rank's shards (padding already zeroed) or a dense bias hold a NaN or inf."""
    return not (all_finite(q) and all_finite(k) and all_finite(v)) or dense_bias_unsafe(bias)


def _positions(layout: str, rank: int, world_size: int, chunk_len: int, device) -> torch.Tensor:
    """(Lr,) global positions of a rank's shard rows."""
    return torch.cat([torch.arange(c * chunk_len, (c + 1) * chunk_len, device=device) for c in rank_chunks(layout, rank, world_size)])


def _gather(t: torch.Tensor, cfg, chunk_len: int, what: str) -> torch.Tensor:
    """(B, *, L, D) the whole unpadded sequence in global order, from every rank's (B, *, Lr, D) shard."""
    parts = all_gather_tensor(t, cfg.group, cfg.timeout, f"ring_attention exact path: {what}")
    full = t.new_empty(t.shape[:2] + (cfg.world_size * t.shape[2], t.shape[3]))
    for r, part in enumerate(parts):
        full[:, :, _positions(cfg.layout, r, cfg.world_size, chunk_len, t.device)] = part
    return full[:, :, : cfg.seq_len]


class _GatheredReference(torch.autograd.Function):
    """out (B, H, Lr, Ev): this rank's rows of the reference on the gathered sequence (0 on padding)."""

    @staticmethod
    def forward(ctx, q, k, v, cfg, chunk_len):
        qg, kg, vg = (_gather(t, cfg, chunk_len, n).requires_grad_() for t, n in ((q, "q"), (k, "k"), (v, "v")))
        with torch.enable_grad():
            # q and k come in already transformed by the score's dot form, so the plain dot product
            # with the ring's scale is the call's score
            call = make_call(qg, kg, vg, score="dot", mask=cfg.mask, bias=cfg.bias, scale=cfg.scale)
            out_all = reference.run_in_row_chunks(call).out  # (B, H, L, Ev)
        pos = _positions(cfg.layout, cfg.rank, cfg.world_size, chunk_len, q.device)
        keep = pos < cfg.seq_len
        ctx.graph = (qg, kg, vg, out_all)
        ctx.cfg, ctx.chunk_len, ctx.pos, ctx.keep = cfg, chunk_len, pos, keep
        return _local_rows(out_all.detach(), pos, keep)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out):
        qg, kg, vg, out_all = ctx.graph
        cfg, pos, keep = ctx.cfg, ctx.pos, ctx.keep
        d_all = _gather(d_out, cfg, ctx.chunk_len, "output gradient")
        dq, dk, dv = torch.autograd.grad(out_all, (qg, kg, vg), d_all.to(out_all.dtype))
        ctx.graph = None
        return _local_rows(dq, pos, keep), _local_rows(dk, pos, keep), _local_rows(dv, pos, keep), None, None


def _local_rows(full: torch.Tensor, pos: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """(B, *, Lr, D) rows of ``full`` (B, *, L, D) at this rank's positions; padding rows are 0."""
    rows = full[:, :, pos.clamp(max=full.shape[2] - 1)]
    return torch.where(keep.view(-1, 1), rows, torch.zeros((), dtype=rows.dtype))


def gathered_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cfg, chunk_len: int) -> torch.Tensor:
    """Ring attention's result on inputs holding NaN or inf: see the module docstring."""
    return _GatheredReference.apply(q, k, v, cfg, chunk_len)
