"""Cut a full sequence into this rank's shard, and gather the shards back into the full sequence.

The companions of ring attention (Liu et al., 2023, https://arxiv.org/abs/2310.01889): the input to
:func:`~attnkit.distributed.ring_attention` is the local shard in a given layout
(``"contiguous"`` or ``"zigzag"``, see ``layout.py``), and its output comes back in the same
layout, so :func:`gather_sequence` with the same layout undoes :func:`shard_sequence`.

Lengths that do not divide evenly are **padded internally**: :func:`shard_sequence` zero-pads the
sequence at its end to the next multiple of the chunk count (W chunks for contiguous, 2W for
zigzag), ``ring_attention(..., seq_len=L)`` masks the padded positions out (padded keys are seen by
no query, padded queries output 0), and ``gather_sequence(..., seq_len=L)`` trims the padding off.

Shape legend: any tensor with the sequence along ``dim``; L the true length, Lp the padded length
(a multiple of the chunk count), Lr = Lp / W the per-rank shard length.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .comm import all_gather_rows, all_gather_tensor, check_timeout, resolve_group
from .layout import check_layout, chunk_order, chunks_per_rank, num_chunks, padded_length, rank_chunks


def _check_dim(name: str, x: object, dim: object) -> int:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"dim must be an int (the sequence dimension, e.g. dim=2 for (B, H, L, E)), got {type(dim).__name__}")
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim must be in [{-x.dim()}, {x.dim()}) for {name} of shape {tuple(x.shape)}, got {dim}")
    return dim % x.dim()


def shard_sequence(
    x: torch.Tensor, *, dim: int, group: dist.ProcessGroup | None = None, layout: str = "contiguous"
) -> torch.Tensor:
    """This rank's shard of the full sequence ``x`` (same on every rank), in ``layout``.

    ``x`` has length L along ``dim``; it is zero-padded at the end to Lp = the next multiple of the
    chunk count, and the result has length Lp / W along ``dim``. Pass ``seq_len=L`` to
    ``ring_attention`` and ``gather_sequence`` when L was not a multiple (the padding is then
    masked and trimmed). Purely local slicing: no communication, differentiable.
    """
    dim = _check_dim("x", x, dim)
    check_layout(layout)
    group = resolve_group(group)
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    length = x.size(dim)
    if length == 0:
        raise ValueError(f"x has length 0 along dim={dim} (shape {tuple(x.shape)}); there is nothing to shard")
    padded = padded_length(length, layout, world_size)
    if padded > length:  # pad at the end; the ring masks positions >= the true length
        pad_shape = list(x.shape)
        pad_shape[dim] = padded - length
        x = torch.cat([x, x.new_zeros(pad_shape)], dim=dim)
    chunk_len = padded // num_chunks(layout, world_size)
    pieces = [x.narrow(dim, c * chunk_len, chunk_len) for c in rank_chunks(layout, rank, world_size)]
    return torch.cat(pieces, dim=dim)


def gather_sequence(
    x_local: torch.Tensor,
    *,
    dim: int,
    group: dist.ProcessGroup | None = None,
    layout: str = "contiguous",
    seq_len: int | None = None,
    timeout: float | None = None,
) -> torch.Tensor:
    """The full sequence from every rank's shard: ``all_gather``, then undo ``layout``.

    ``x_local`` has the per-rank shard length Lr along ``dim`` (equal on every rank); the result
    has length ``seq_len`` (default W * Lr, i.e. no padding to trim) and is the same on every rank.
    Not differentiable (``all_gather`` is not autograd-aware): use it for outputs and checks.
    """
    dim = _check_dim("x_local", x_local, dim)
    check_layout(layout)
    wait_for = check_timeout(timeout)
    group = resolve_group(group)
    world_size = dist.get_world_size(group)
    shapes = all_gather_rows(
        torch.tensor(list(x_local.shape), dtype=torch.int64, device=x_local.device), group, wait_for, "gather_sequence"
    )
    if not bool((shapes == shapes[0]).all()):
        per_rank = ", ".join(f"rank {r}: {tuple(s.tolist())}" for r, s in enumerate(shapes))
        raise ValueError(f"gather_sequence needs the same x_local shape on every rank, got {per_rank}")
    local_len = x_local.size(dim)
    cpr = chunks_per_rank(layout)
    if local_len % cpr:
        raise ValueError(
            f"layout='zigzag' shards hold 2 chunks, so x_local's length along dim={dim} must be even, got {local_len}"
        )
    total = local_len * world_size
    if seq_len is None:
        seq_len = total
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or not 0 < seq_len <= total:
        raise ValueError(f"seq_len must be an int in [1, W * Lr = {total}] (the unpadded length), got {seq_len!r}")
    shards = all_gather_tensor(x_local, group, wait_for, "gather_sequence")
    chunk_len = local_len // cpr
    chunks = [c for shard in shards for c in shard.split(chunk_len, dim=dim)]  # in chunk_order
    by_index = [chunk for _, chunk in sorted(zip(chunk_order(layout, world_size), chunks, strict=True), key=lambda p: p[0])]
    return torch.cat(by_index, dim=dim).narrow(dim, 0, seq_len)
