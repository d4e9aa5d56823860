r"""Whether the blockwise backend may use PyTorch's fused CPU flash-attention kernel.

The kernel is ``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu`` (forward, returns
``(out, lse)``) and its ``loop_backward`` (gradients from a given out and lse). It is the kernel behind
SDPA on CPU, but the ops are private: their signatures and conventions may change between torch
releases without notice. So they are used only when

1. torch's version is one whose op signatures were checked (:data:`MIN_TORCH`), and
2. a one-time self-test at first use matches float64 attention computed here in plain PyTorch,
   forward and backward, on a small case with an additive mask, strided key/value windows, GQA
   and a fully masked row; and the conventions the fused paths rely on hold (the kernel returns
   out 0 for a fully masked row; the backward accepts a global out/lse).

Otherwise, or after :func:`set_enabled` ``(False)``, the blockwise backend runs its Python
tile loop (the same results within rounding). The self-test runs once per process and dtype.

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E head dim.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

import torch

__all__ = ["MIN_TORCH", "available", "set_enabled", "enabled", "forward_op", "backward_op"]

MIN_TORCH = (2, 3)  # the (out, lse) forward and the (grad_out, q, k, v, out, lse, ...) backward
_DTYPES = (torch.float32, torch.float64, torch.bfloat16)  # fp16 has no fast CPU path here: not used
_RESULTS: dict[torch.dtype, bool] = {}
_LOCK = threading.Lock()
_ENABLED = [True]


def _torch_version() -> tuple[int, int]:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def forward_op():
    """The private fused forward op (q, k, v, dropout_p, is_causal, *, attn_mask, scale) -> (out, lse)."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def backward_op():
    """The private fused backward op (dout, q, k, v, out, lse, dropout_p, is_causal, *, attn_mask, scale)."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


def set_enabled(flag: bool) -> None:
    """Process-wide switch: ``False`` makes the blockwise backend always run its Python tile loop."""
    if not isinstance(flag, bool):
        raise TypeError(f"flag must be a bool, got {type(flag).__name__}; pass True or False")
    _ENABLED[0] = flag


@contextlib.contextmanager
def enabled(flag: bool) -> Iterator[None]:
    """``with enabled(False):`` runs the code inside on the Python tile loop (process-wide)."""
    old = _ENABLED[0]
    set_enabled(flag)
    try:
        yield
    finally:
        _ENABLED[0] = old


def available(dtype: torch.dtype) -> bool:
    """True when the fused kernel may serve ``dtype`` inputs: switched on, a checked torch version,
    a supported dtype and a passed self-test (run here on first use for this dtype)."""
    if not _ENABLED[0] or dtype not in _DTYPES or _torch_version() < MIN_TORCH:
        return False
    if dtype not in _RESULTS:
        with _LOCK:
            if dtype not in _RESULTS:
                try:
                    # the test differentiates its reference: it must run under no_grad / inference_mode too
                    with torch.inference_mode(False), torch.enable_grad():
                        ok = _self_test(dtype)
                except Exception:  # noqa: BLE001 - any failure of a private op means: do not use it
                    ok = False
                _RESULTS[dtype] = ok
    return _RESULTS[dtype]


def _reference(q, k, v, allowed, scale):
    """float64 attention with GQA and a bool mask; fully masked rows give 0 (plain PyTorch)."""
    g = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    s = (q.double() @ k.transpose(-1, -2)) * scale
    s = s.masked_fill(~allowed, float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isneginf(m), 0.0, m)
    p = (s - m).exp()
    return (p / p.sum(-1, keepdim=True).clamp_min(1e-300)) @ v


def _self_test(dtype: torch.dtype) -> bool:
    """Run the ops once on a small case and compare with :func:`_reference` (see the module docstring)."""
    gen = torch.Generator().manual_seed(1234)
    B, H, Hkv, n, w, E, b = 1, 4, 2, 5, 11, 8, 6
    base_k = torch.randn(B, Hkv, b * (n - 1) + w, E, generator=gen, dtype=torch.float64)
    base_v = torch.randn(B, Hkv, b * (n - 1) + w, E, generator=gen, dtype=torch.float64)
    q64 = torch.randn(n, H, b, E, generator=gen, dtype=torch.float64)
    dout64 = torch.randn(n, H, b, E, generator=gen, dtype=torch.float64)
    q, bk, bv, dout = (t.to(dtype) for t in (q64, base_k, base_v, dout64))
    sk = bk.stride()
    # overlapping strided windows (n, Hkv, w, E), as the banded path uses them
    kw = bk.as_strided((n, Hkv, w, E), (b * sk[2], sk[1], sk[2], 1))
    vw = bv.as_strided((n, Hkv, w, E), (b * sk[2], sk[1], sk[2], 1))
    allowed = torch.ones(b, w, dtype=torch.bool).tril(w - b).triu(0)
    allowed[2] = False  # one fully masked row
    addmask = torch.zeros(b, w, dtype=dtype).masked_fill(~allowed, float("-inf"))
    scale = 0.37
    out, lse = forward_op()(q, kw, vw, attn_mask=addmask, scale=scale)
    q_r = q.double().requires_grad_()
    kw_r, vw_r = kw.double().contiguous().requires_grad_(), vw.double().contiguous().requires_grad_()
    ref = _reference(q_r, kw_r, vw_r, allowed, scale)
    (ref * dout.double()).sum().backward()  # an explicit grad tensor would import sympy
    tol = {torch.float64: 1e-10, torch.float32: 1e-4, torch.bfloat16: 5e-2}[dtype]
    if out.shape != ref.shape or lse.shape != ref.shape[:-1] or lse.dtype != (torch.float64 if dtype == torch.float64 else torch.float32):
        return False
    if not torch.equal(out[:, :, 2], torch.zeros_like(out[:, :, 2])):  # fully masked row: out 0
        return False
    if (out.double() - ref.detach()).abs().max() > tol:
        return False
    lse_safe = torch.where(torch.isneginf(lse) | (lse == 0) & ~allowed.any(-1), 0.0, lse)
    dq, dk, dv = backward_op()(dout, q, kw, vw, out, lse_safe, 0.0, False, attn_mask=addmask, scale=scale)
    grads = ((dq, q_r.grad), (dk, kw_r.grad), (dv, vw_r.grad))
    return all(a.shape == r.shape and bool(((a.double() - r).abs().max() <= tol * (1 + r.abs().max()))) for a, r in grads)
