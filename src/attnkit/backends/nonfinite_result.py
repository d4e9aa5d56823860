"""NaN and inf found in the fused kernel's result instead of its inputs, where that is proven safe.

:func:`attnkit.backends.nonfinite.needs_exact` reads every element of q, k and v before the kernel
(three sums); for a small call whose tensors do not fit in cache the sums cost an eighth of the
kernel, because the kernel then reads all three again. The kernel's own result (``out`` (B, H, L, E)
and ``lse`` (B, H, L)) is smaller and was just written, so it is cheaper to read. What it shows:

* a NaN or inf in a query row, or in a key some row sees, gives that row a NaN score or a score of
  ±inf; the row's log-sum-exp is then NaN, ±inf, or exactly 0 (the kernel treats a row whose scores
  are all -inf as fully masked and reports lse 0). A finite, non-zero lse on every row therefore
  means every score the kernel used was finite, except keys whose score is -inf next to finite ones,
  which weigh exactly 0 in both the kernel and the reference;
* a NaN or inf in a value row reaches ``out`` as ``p · v``, ``0 · NaN`` included, only where the
  kernel multiplies that row by every query row. Without ``is_causal`` it does: every key tile of
  every query block is computed and masked keys get weight exactly 0. With ``is_causal`` it skips
  the tiles above the diagonal, so v is still summed on its own there (one sum instead of three).

So ``lse`` all finite and non-zero, and ``out``'s sum finite (with ``is_causal``: v's sum, as
finite scores and values give a finite ``out``), mean the result is the reference's
(:mod:`attnkit.backends.nonfinite`'s semantics). Any other result is *suspicious* and the caller runs
exactly what it ran before this check (the input sums, then the exact path or the kernel's result),
so false alarms (an lse that is 0 on finite inputs, a finite sum that overflows) only cost time.

Both facts are properties of a private kernel (``_scaled_dot_product_flash_attention_for_cpu``),
seen with torch 2.13, not promises. :func:`trusted` therefore runs a self-test once per dtype and
causal mode on first use: NaN, +inf and -inf placed in q, k or v, first, middle and last rows,
with no mask, causal, window, key-padding and document masks, sizes that split the kernel's query and
key blocks; each result is compared with a float64 computation of the reference's semantics. If the
check ever passes a result that differs from the reference, that mode keeps the input sums. The
cases of one size and mask run as one batch, so the test costs the first planned call of a mode
about 0.17 s (float32; 0.04 s with ``is_causal``) on one thread here, once per process.

Shape legend: B batch, H heads, L queries, S keys, E head dim.
"""

from __future__ import annotations

import math
import threading

import torch

__all__ = ["trusted", "result_suspicious", "lse_suspicious", "v_suspicious", "reset"]

_FLASH_OP = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
_DTYPES = (torch.float32, torch.float64)  # the dtypes the self-test covers; others keep the input sums
_TRUST: dict[tuple[torch.dtype, bool], bool] = {}
_LOCK = threading.Lock()


def result_suspicious(out: torch.Tensor, lse: torch.Tensor) -> bool:
    """True unless ``out``'s sum is finite and every ``lse`` entry is finite and non-zero.

    ``lse / lse`` is 1 exactly where lse is finite and non-zero, NaN elsewhere (0/0, inf/inf, NaN),
    so its sum is finite exactly when every entry passes. Two host reads, not one of the two sums
    added: on a small call the addition's dispatch costs more than the second read."""
    return not (math.isfinite(out.sum().item()) and math.isfinite(lse.div(lse).sum().item()))


def lse_suspicious(lse: torch.Tensor) -> bool:
    """True unless every ``lse`` entry is finite and non-zero: with ``is_causal``, whose v is summed
    on its own, finite scores and finite values leave ``out`` finite, so lse alone is read."""
    return not math.isfinite(lse.div(lse).sum().item())


def v_suspicious(v: torch.Tensor) -> bool:
    """True when v's sum is not finite: a NaN or inf in v (or, harmlessly, a sum past the dtype's range)."""
    return not math.isfinite(v.sum().item())


def trusted(dtype: torch.dtype, is_causal: bool) -> bool:
    """True when the result check may replace the input sums for this dtype and causal mode: the
    self-test (run once per pair, on first use) saw no case the check would pass wrongly."""
    key = (dtype, is_causal)
    ok = _TRUST.get(key)
    if ok is None:
        with _LOCK:
            ok = _TRUST.get(key)
            if ok is None:
                ok = dtype in _DTYPES and _FLASH_OP is not None and _self_test(dtype, is_causal)
                _TRUST[key] = ok
    return ok


def reset() -> None:
    """Forget the self-tests' verdicts (tests)."""
    with _LOCK:
        _TRUST.clear()


def _masks(n: int) -> dict[str, torch.Tensor | None]:
    """(n, n) bool masks (True = may attend) the self-test runs without ``is_causal``."""
    i = torch.arange(n)
    causal = i[None, :] <= i[:, None]
    window = causal & (i[:, None] - i[None, :] < 48)
    padding = (i < n - n // 4)[None, :].expand(n, n)  # the last quarter of the keys: dead
    doc = (i * 4 // n)
    document = (doc[:, None] == doc[None, :]) & causal
    return {"none": None, "causal": causal, "window": window, "padding": padding, "document": document}


def _reference(q, k, v, allowed: torch.Tensor, scale: float) -> torch.Tensor:
    """The reference's output (N, n, E) in float64 for N cases q, k, v (N, n, E): dead keys (seen by
    no query) zeroed first; a value's NaN or inf reaches every row that sees a key, as
    ``weight · v`` (``0 · NaN`` included)."""
    q, k, v = q.double(), k.double(), v.double()
    dead = ~allowed.any(0)  # (S,)
    k = k.masked_fill(dead[:, None], 0.0)
    v = v.masked_fill(dead[:, None], 0.0)
    s = (q @ k.transpose(-1, -2)) * scale
    s = s.masked_fill(~allowed, float("-inf"))
    return torch.softmax(s, -1) @ v


def _cases_ok(q, k, v, mask, is_causal: bool, dtype: torch.dtype) -> bool:
    """False when the check would pass a result that is not the reference's, for any of the N
    cases q, k, v (N, n, E) float64. The N cases go through the kernel as one batch (each batch
    item is computed on its own); the check runs on each item's own result."""
    n, scale = q.shape[1], q.shape[-1] ** -0.5
    allowed = torch.ones(n, n, dtype=torch.bool).tril() if is_causal else (
        torch.ones(n, n, dtype=torch.bool) if mask is None else mask)
    attn_mask = None
    if mask is not None:
        attn_mask = torch.zeros(n, n, dtype=dtype).masked_fill(~mask, float("-inf"))
    q4, k4, v4 = (t[:, None].to(dtype) for t in (q, k, v))  # (N, 1, n, E)
    out, lse = _FLASH_OP(q4, k4, v4, 0.0, is_causal, attn_mask=attn_mask, scale=scale)
    # a suspicious item makes the caller fall back to the input sums, correct whatever the kernel did
    passed = [i for i in range(q.shape[0]) if not (
        (v_suspicious(v4[i:i + 1]) or lse_suspicious(lse[i:i + 1])) if is_causal
        else result_suspicious(out[i:i + 1], lse[i:i + 1]))]
    if not passed:
        return True
    ref = _reference(q[passed], k[passed], v[passed], allowed, scale)  # (P, n, E)
    got = out[passed, 0].double()
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    return bool(torch.isfinite(ref).all()) and torch.allclose(got, ref, rtol=tol, atol=tol)


def _self_test(dtype: torch.dtype, is_causal: bool) -> bool:
    """Every placement of the catalogue (module docstring) either looks suspicious or matches the
    float64 reference. Sizes 64 / 128 / 512 / 640 cross the kernel's query block sizes (32, 64, 256
    rows by L) and its 512-key blocks; per size and mask, the clean case and every placement run as
    one batch."""
    gen = torch.Generator().manual_seed(0)
    bad_values = (float("nan"), float("inf"), float("-inf"))
    for n in (64, 128, 512, 640):
        masks = {"is_causal": None} if is_causal else _masks(n)
        for name, mask in masks.items():
            base = [torch.randn(n, 8, generator=gen, dtype=torch.float64) for _ in range(3)]
            cases = [base]
            if name == "padding":  # dead keys far too large: a masked score that overflows must not pass
                for big in (1e30, 3e38):
                    k = base[1].clone()
                    k[n - 1] = big
                    cases.append([base[0], k, base[2]])
            for which in (0, 1, 2):
                for row in (0, n // 2 + 1, n - 1):
                    for val in bad_values:
                        ts = [t.clone() for t in base]
                        ts[which][row, 3] = val
                        cases.append(ts)
            if not _cases_ok(*(torch.stack(c) for c in zip(*cases)), mask, is_causal, dtype):
                return False
    return True
