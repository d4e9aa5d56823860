"""Input checks shared by the attention call and the modules.

Every check raises ``ValueError``/``TypeError`` naming the argument, what was expected, what came,
and the fix, because a user staring at a shape error deep inside a matmul learns nothing.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch


def require_tensor(name: str, x: Any) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}; convert it with torch.as_tensor({name})")
    return x


def require_ndim(name: str, x: torch.Tensor, ndim: int, legend: str, hint: str = "") -> None:
    if x.dim() != ndim:
        extra = f"; {hint}" if hint else ""
        raise ValueError(f"{name} must have {ndim} dims {legend}, got shape {tuple(x.shape)}{extra}")


def require_floating(name: str, x: torch.Tensor) -> None:
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}; cast it with {name}.float()")


def require_finite_scale(scale: Any) -> float | None:
    """A real finite number (zero and negative scales allowed, as in SDPA), or None for the default."""
    if scale is None:
        return None
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a finite real number or None (default 1/sqrt(E)), got {type(scale).__name__} ({scale!r})")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}; pass None for the default 1/sqrt(E)")
    return float(scale)


def require_bool(name: str, x: Any) -> bool:
    if not isinstance(x, bool):
        raise TypeError(f"{name} must be True or False, got {type(x).__name__} ({x!r}); a string like 'no' would read as True")
    return x


def require_dense_rank(name: str, t: Any) -> None:
    """Dense masks and biases are 2-D (L, S) or 4-D (B|1, H|1, L, S). Other ranks are refused: a 3-D
    tensor reads two ways ((B, L, S) or (H, L, S); a (B, 1, S) padding mask with B == H was once
    silently taken as per-head), and the error names the converters that say what is meant."""
    if not isinstance(t, torch.Tensor) or t.dim() in (2, 4):
        return
    why = (
        "a 3-D tensor is ambiguous (is the first axis B or H?): add the axes explicitly, t[:, None] for (B, L, S) "
        "or t[None] for (H, L, S)" if t.dim() == 3 else "reshape it to (L, S) or (B|1, H|1, L, S)"
    )
    raise ValueError(
        f"{name} tensor must have 2 dims (L, S) or 4 dims (B|1, H|1, L, S), got shape {tuple(t.shape)}; {why}; for "
        "per-sequence key padding use attnkit.masks.padding_mask(lengths, S), attnkit.masks.from_attention_mask(am) "
        "(Hugging Face (B, S), 1 = keep) or attnkit.masks.from_key_padding_mask(kpm) (torch (B, S), True = ignore)"
    )


def require_unambiguous_2d_mask(t: Any, B: int, L: int) -> None:
    """A 2-D mask tensor is read as (L, S). When the batch size equals the query length (B == L > 1)
    it could as well be a (B, S) per-sequence padding mask, and reading it as (L, S) would be silently
    wrong for that user: refused, as 3-D masks are, with the two spellings that say which is meant."""
    if not isinstance(t, torch.Tensor) or t.dim() != 2 or not (t.shape[0] == B == L) or B == 1:
        return
    raise ValueError(
        f"mask of shape {tuple(t.shape)} is ambiguous: q has B={B} and L={L}, so a 2-D mask reads as (L, S) (one mask for "
        f"every sequence) or as (B, S) (per-sequence key padding); say which: mask[None, None] gives (1, 1, L, S), "
        f"mask[:, None, None] gives (B, 1, 1, S) for padding (or build it with attnkit.masks.padding_mask(lengths, S) / "
        f"attnkit.masks.from_key_padding_mask(kpm))"
    )


_DATA_ATTRS = ("t", "valid", "kv_ids", "q_ids", "prefix")  # the tensors masks and dense biases hold


def require_real_data(name: str, obj: Any, device: torch.device) -> None:
    """A mask or bias (``name``) used with real (non-``meta``) q, k, v must not hold ``meta`` tensors:
    they have shapes but no values, so any backend would fail deep inside a copy. Walks combined
    masks and summed biases. Skipped while ``torch.compile`` traces (Dynamo owns the objects then)."""
    if obj is None or device.type == "meta" or torch.compiler.is_compiling():
        return
    stack = [obj]
    while stack:
        o = stack.pop()
        stack += list(getattr(o, "parts", ()) or ()) + [i for i in (getattr(o, "inner", None),) if i is not None]
        held = [getattr(o, a, None) for a in _DATA_ATTRS]
        if isinstance(o, torch.nn.Module):
            held += list(o.parameters(recurse=False)) + list(o.buffers(recurse=False))
        for t in held:
            if isinstance(t, torch.Tensor) and t.device.type == "meta":
                raise ValueError(
                    f"{name} holds a tensor on the meta device (shape {tuple(t.shape)}, in {type(o).__name__}) but q, k, v are on "
                    f"{device}; a meta tensor has shapes but no values: build the {name} from real data on {device}, or pass "
                    "q, k, v on the meta device too for a shape-only run"
                )


def require_probability(name: str, p: Any) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        raise TypeError(f"{name} must be a float in [0, 1), got {type(p).__name__}")
    if not 0.0 <= p < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {p}; use 0.0 to disable dropout")
    return float(p)


def require_positive_int(name: str, n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{name} must be a positive int, got {type(n).__name__} ({n!r})")
    if n <= 0:
        raise ValueError(f"{name} must be a positive int, got {n}")
    return n


def require_choice(name: str, value: Any, valid: list[str] | tuple[str, ...]) -> str:
    if value not in valid:
        raise ValueError(f"{name} must be one of {sorted(valid)}, got {value!r}")
    return value
