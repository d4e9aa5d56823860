"""Input checks shared by the attention call and the modules.

Every check raises ``ValueError``/``TypeError`` naming the argument, what was expected, what came,
and the fix, because a user staring at a shape error deep inside a matmul learns nothing.
"""

from __future__ import annotations

import math
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


def require_positive_scale(scale: Any) -> float | None:
    if scale is None:
        return None
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a positive float or None, got {type(scale).__name__}")
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a positive finite float (e.g. 1/sqrt(E)), got {scale}")
    return float(scale)


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


def broadcastable(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """True when ``shape`` broadcasts to ``target`` without changing ``target``."""
    if len(shape) > len(target):
        return False
    for a, t in zip(reversed(shape), reversed(target)):
        if a not in (1, t):
            return False
    return True
