"""Broadcastable index grids for predicates and score modifiers.

A predicate ``(b, h, q_idx, kv_idx) -> bool`` is written once and evaluated on whole tensors by
broadcasting: ``b`` is (B', 1, 1, 1), ``h`` is (1, H', 1, 1), ``q_idx`` is (1, 1, l, 1) and
``kv_idx`` is (1, 1, 1, s), where B' and H' are 1 for objects that do not depend on them. This is
FlexAttention's calling convention without the compiler.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class IndexGrid(NamedTuple):
    b: torch.Tensor
    h: torch.Tensor
    q: torch.Tensor
    kv: torch.Tensor


def index_grid(
    q_range: tuple[int, int],
    kv_range: tuple[int, int],
    *,
    batch: int = 1,
    heads: int = 1,
    device: torch.device | str | None = None,
) -> IndexGrid:
    """Index tensors for queries ``q_range[0]:q_range[1]`` and keys ``kv_range[0]:kv_range[1]``."""
    dev = torch.device(device) if device is not None else torch.device("cpu")
    return IndexGrid(
        torch.arange(batch, device=dev).view(-1, 1, 1, 1),
        torch.arange(heads, device=dev).view(1, -1, 1, 1),
        torch.arange(q_range[0], q_range[1], device=dev).view(1, 1, -1, 1),
        torch.arange(kv_range[0], kv_range[1], device=dev).view(1, 1, 1, -1),
    )


def alignment_offset(align: str, L: int, S: int) -> int:
    """Absolute position of query 0 on the key axis.

    ``top_left`` (SDPA's ``is_causal``): query i sits at key position i.
    ``bottom_right`` (FlashAttention, decoding with a cache): the last query sits at the last key,
    so query i sits at ``i + S - L``.
    """
    return S - L if align == "bottom_right" else 0
