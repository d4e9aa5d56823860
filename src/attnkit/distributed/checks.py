"""Input checks for ring attention: local ones first, then agreement across ranks.

Part of the ring attention implementation (Liu et al., 2023, https://arxiv.org/abs/2310.01889).
Local checks need no communication and raise ``TypeError``/``ValueError`` naming the argument,
what came and the fix. Some mistakes are only visible across ranks -- above all a shard length
that differs between ranks, which would otherwise deadlock the ring or silently mis-align
positions -- so every rank all-gathers its shapes and options before the ring starts and, on a
mismatch, *every* rank raises the same ``ValueError`` listing each rank's value.
"""

from __future__ import annotations

import math
from datetime import timedelta

import torch
import torch.distributed as dist

from .comm import all_gather_rows
from .layout import LAYOUTS, check_layout, chunks_per_rank


def check_local(q: object, k: object, v: object, causal: object, scale: object, layout: object, seq_len: object) -> None:
    """Checks that need no communication (the same on every rank for well-formed calls)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, heads, Lr, dim) -- the local shard -- got shape {tuple(x.shape)}")
        if not x.is_floating_point():
            raise TypeError(f"{name} must be floating point, got {x.dtype}; cast it with {name}.float()")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}; cast them to one")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    (B, H, L, E), (Bk, Hkv, Lk, Ek), (Bv, Hv, Lv, _) = q.shape, k.shape, v.shape
    if not (B == Bk == Bv):
        raise ValueError(f"batch sizes differ: q has B={B}, k has B={Bk}, v has B={Bv}")
    if not (L == Lk == Lv):
        raise ValueError(
            f"q, k, v shards must have the same local length, got Lr={L}, {Lk}, {Lv}; "
            "shard all three with shard_sequence(..., layout=same)"
        )
    if E != Ek:
        raise ValueError(f"q and k must share the last dim E, got q E={E} and k E={Ek}")
    if Hkv != Hv:
        raise ValueError(f"k and v must have the same number of heads, got {Hkv} and {Hv}")
    if Hkv == 0 or H % Hkv:
        raise ValueError(f"query heads must be a multiple of key/value heads for GQA, got H={H} and Hkv={Hkv}")
    if L == 0:
        raise ValueError("the local shard is empty (Lr=0); every rank needs at least one position per chunk")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    bad_scale = isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0
    if scale is not None and bad_scale:
        raise ValueError(f"scale must be a positive finite float or None (None means 1/sqrt(E)), got {scale!r}")
    check_layout(layout)
    if L % chunks_per_rank(layout):
        raise ValueError(
            f"layout='zigzag' shards hold 2 chunks, so the local length must be even, got Lr={L}; "
            "shard the full sequence with shard_sequence(..., layout='zigzag'), which pads as needed"
        )
    if seq_len is not None and (isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len <= 0):
        raise ValueError(f"seq_len must be a positive int (the unpadded total length) or None, got {seq_len!r}")


_FIELDS = ("B", "H", "Hkv", "Lr", "E", "Ev", "causal", "layout", "seq_len")


def _show(field: str, value: int) -> str:
    """Decode one all-gathered integer back into what the user passed."""
    if field == "layout":
        return repr(LAYOUTS[value])
    if field == "causal":
        return str(bool(value))
    if field == "seq_len" and value < 0:
        return "None"
    return str(value)


def check_agreement(row: list[int], group: dist.ProcessGroup, timeout: timedelta | None, device: torch.device) -> torch.Tensor:
    """All-gather every rank's shapes and flags; raise the same ValueError everywhere on a mismatch.
    Entries past the checked fields ride along unchecked (per-rank facts, such as whether its inputs
    are finite); the gathered (W, len(row)) rows are returned."""
    rows = all_gather_rows(torch.tensor(row, dtype=torch.int64, device=device), group, timeout, "ring_attention shape check")
    mismatched = [i for i in range(len(_FIELDS)) if not bool((rows[:, i] == rows[0, i]).all())]
    if mismatched:
        detail = "; ".join(
            f"{_FIELDS[i]}: " + ", ".join(f"rank {r}={_show(_FIELDS[i], int(rows[r, i]))}" for r in range(rows.shape[0]))
            for i in mismatched
        )
        raise ValueError(
            f"ring_attention needs the same shapes and options on every rank, but they differ ({detail}). "
            "Shard every rank's sequence with shard_sequence(x, dim=2, layout=...) so all shards have the same "
            "length Lr, and pass the same causal/layout/seq_len everywhere"
        )
    return rows
