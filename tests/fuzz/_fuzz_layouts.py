"""Memory layouts for the differential fuzz: the same values, other strides.

A backend must give the same result for a tensor whatever its strides; the bugs this catches are
kernels that assume a unit-stride last dim, a contiguous (B, H) prefix, or no stride-0 dims. Each
layout takes a contiguous tensor and returns a view with equal values (``torch.equal``) whose
storage is laid out differently:

* ``contiguous`` — as built;
* ``sliced_last`` — every other column of a twice-as-wide buffer: last-dim stride 2 (a slice of a
  fused qkv projection);
* ``transposed`` — stored (B, L, H, E) and viewed (B, H, L, E), the layout of ``x.view(B, L, H,
  E).transpose(1, 2)`` in every multi-head module;
* ``channels_last`` — ``torch.channels_last`` storage order (B, L, E, H): the head dim innermost;
* ``strided_batch`` / ``strided_head`` — every other batch entry / head of a buffer twice as big:
  non-contiguous batch or head dims;
* ``expand`` — stride 0: a tensor whose batch entries (else heads) are equal viewed as one entry
  ``expand``-ed (a key/value shared across the batch, or a size-1 dim with stride 0).

Shape legend: t (B, H, L, E) for q, k, v; (L, S) or (B, H, L, S) for a dense bias.
"""

from __future__ import annotations

import torch

LAYOUTS = ("contiguous", "sliced_last", "transposed", "channels_last", "strided_batch", "strided_head", "expand")


def view_as(t: torch.Tensor, layout: str) -> torch.Tensor:
    """``t`` (contiguous, any values) re-laid-out as ``layout``; equal values, other strides. A layout
    that does not apply to this tensor (rank 2, or an expand of unequal entries) is the nearest one
    that does (documented per branch), so a drawn case never has to be skipped."""
    if layout == "contiguous":
        return t
    if layout == "sliced_last":
        wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
        wide[..., ::2] = t
        return wide[..., ::2]
    if t.dim() != 4:  # a 2-D bias: the transpose of a (S, L) buffer stands for every other layout
        return t.t().contiguous().t()
    if layout == "transposed":
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    if layout == "channels_last":
        return t.contiguous(memory_format=torch.channels_last)
    if layout in ("strided_batch", "strided_head"):
        dim = 0 if layout == "strided_batch" else 1
        shape = list(t.shape)
        shape[dim] *= 2
        big = torch.zeros(shape, dtype=t.dtype)
        idx = [slice(None)] * 4
        idx[dim] = slice(None, None, 2)
        big[tuple(idx)] = t
        return big[tuple(idx)]
    if layout == "expand":
        for dim in (0, 1):
            first = t.narrow(dim, 0, 1)
            if torch.equal(t, first.expand_as(t)) or t.shape[dim] == 1:
                # equal entries (or a single one): one stored entry, stride 0 along dim
                return torch.as_strided(first.contiguous(), t.shape, _stride0(first.contiguous(), dim))
        return t.transpose(1, 2).contiguous().transpose(1, 2)  # unequal entries: no stride 0 possible
    raise ValueError(f"unknown layout {layout!r}; expected one of {LAYOUTS}")


def draw_layout(rng) -> dict | None:
    """One case's layouts of q, k, v and a dense bias; None (all contiguous) in half the cases."""
    if rng.random() < 0.5:
        return None
    return {n: rng.choice(LAYOUTS) for n in ("q", "k", "v", "bias")}


def _stride0(t: torch.Tensor, dim: int) -> tuple[int, ...]:
    st = list(t.stride())
    st[dim] = 0
    return tuple(st)


def share_entries(t: torch.Tensor) -> torch.Tensor:
    """``t`` with every batch entry equal to the first (so ``expand`` can give it stride 0 along the
    batch); unchanged when B is 1."""
    return t[:1].expand_as(t).clone() if t.shape[0] > 1 else t


def leaf(t: torch.Tensor) -> torch.Tensor:
    """A view of ``t``'s storage that autograd treats as a leaf (``.grad`` lands on it with its shape)."""
    return t.detach().requires_grad_()
