"""NaN and inf inputs: every exact backend gives the reference's result, forward and gradients.

The reference (:mod:`attnkit.backends.reference`) defines what a NaN or inf in q, k, v does: a NaN
query row gives a NaN output row; a NaN key seen by a query makes that query's row NaN; a NaN value
reaches every row of its head that may see any key as ``weight · NaN``, ``0 · NaN`` included (a causal mask does not hide
it from earlier rows, as in every peer library); keys no query of a head may see (padding, unused
cache slots) are zeroed first and never leak. Fast kernels differ:

* CPU's fused SDPA op returns 0, not NaN, for an unmasked query row holding a NaN (seen with
  torch 2.13), so ``sdpa`` and ``auto`` hid in the forward what the gradients showed;
* kernels skip key tiles a causal mask hides, so ``0 · NaN`` never reaches earlier rows there, and
  their gradients put NaN in other places than the reference's.

So before the kernel, :func:`needs_exact` checks the inputs in O(n): a float32 (float64 for float64
inputs) sum of each of q, k and v, which is NaN or ±inf exactly when an element is (or, harmlessly,
when a finite sum overflows past ~3e38: that call then takes the exact path too). A dense bias
tensor (a user's float tensor) is summed the same way; a NaN or +inf there counts, -inf is a mask
and keeps the fast path. Biases computed from positions (ALiBi's slopes, T5's and Shaw's learned
tables) are checked through their own tensors, O(parameters): any NaN or inf there may reach every
row, so it sends the call to the exact path without looking closer. Only
when a sum is not finite does it look closer: a non-finite q or dense bias, or a non-finite key or
value row that some query of its head may see, sends the call to :func:`run_exact`, the reference's
own computation in query-row chunks (O(L·S) time like the kernel, O(rows·S) memory). Calls whose
inputs are finite pay three sums (benchmarks/results/reliability_cost.json).

A planned call on CPU's fused op without gradients (:mod:`attnkit.backends.sdpa_plan`) reads the
kernel's result instead, where a self-test at first use proved it equivalent
(:mod:`attnkit.backends.nonfinite_result`): a NaN or inf in q, or in a key some row sees, leaves a
NaN, ±inf or exactly-0 log-sum-exp on that row; one in v reaches ``out`` as ``0 · NaN`` wherever the
kernel multiplies every key into every row (not under ``is_causal``, whose v is still summed). A
suspicious result runs the input check above, so it ends exactly as before.

Not checked where no value can be read: under ``torch.compile`` (a data-dependent branch would
break the graph), inside ``torch.func`` transforms and on ``meta`` tensors; there the kernel's own
NaN handling stands.

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys.
"""

from __future__ import annotations

import math

import torch

from ..core.call import AttentionCall
from ..core.output import BackendResult
from . import reference

__all__ = ["needs_exact", "run_exact", "all_finite", "inputs_finite", "squares_if_finite", "dense_bias_unsafe", "computed_bias_unsafe"]


def _readable(t: torch.Tensor) -> bool:
    if t.device.type == "meta" or torch.compiler.is_compiling():
        return False
    return not torch._C._functorch.is_functorch_wrapped_tensor(t)


def _sum_dtype(t: torch.Tensor) -> torch.dtype:
    # bfloat16 has float32's range, so its own sum overflows where a float32 one would, and it skips a
    # cast of every element (about 7x faster on CPU); float16 (max 65504) would overflow on ordinary
    # inputs and send them to the slow exact path, so it is summed in float32
    if t.dtype in (torch.float64, torch.bfloat16):
        return t.dtype
    return torch.float32


def _sums_finite(ts: tuple[torch.Tensor, ...]) -> bool:
    """True when every tensor's sum is finite (see :func:`all_finite`), read with one host sync:
    the sums are read as Python floats (one ``tolist``), which costs fewer tensor ops than testing
    them on the device (about 10 µs instead of 17 µs for three small tensors on CPU)."""
    sums = [_plain_sum(t) for t in ts]
    if len({x.dtype for x in sums}) > 1:
        sums = [x.double() for x in sums]
    return all(math.isfinite(x) for x in torch.stack(sums).tolist())


def inputs_finite(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """True when q, k and v hold no NaN or inf (their sums are finite; see :func:`all_finite`); the
    caller has made sure their values can be read (not ``meta``, not traced, not under torch.func)."""
    if q.dtype in _OWN_SUM and not (q.requires_grad or k.requires_grad or v.requires_grad):
        # the common case in as few tensor ops as it takes: three sums, each read on the host
        return math.isfinite(q.sum().item()) and math.isfinite(k.sum().item()) and math.isfinite(v.sum().item())
    return _sums_finite((q, k, v))


def _plain_sum(t: torch.Tensor) -> torch.Tensor:
    """``t``'s sum in :func:`_sum_dtype`, outside autograd, with no more tensor ops than needed."""
    if t.requires_grad:
        t = t.detach()
    return t.sum() if t.dtype in _OWN_SUM else t.sum(dtype=_sum_dtype(t))


_OWN_SUM = (torch.float32, torch.float64, torch.bfloat16)  # summed in their own dtype (_sum_dtype)


def squares_if_finite(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> list[float] | None:
    """[Σq², Σk², Σv²] as Python floats (one host sync) when all three are finite, else None.

    A finite sum of squares proves every element finite (a NaN or inf squares to NaN or inf, and
    squares cannot cancel), so a call without a bias whose three sums are finite needs no exact
    path; the sums also bound every score (:func:`attnkit.backends.sdpa_mask_cache.dead_keys_inert`).
    None also when a finite tensor's squares overflow (|x| above ~1.8e19 in float32): the caller
    then runs the full check (:func:`needs_exact`). Contiguous float32 / float64 tensors only: one
    BLAS dot product each."""
    sq = torch.stack([torch.dot(t.detach().view(-1), t.detach().view(-1)) for t in (q, k, v)]).tolist()
    return sq if all(math.isfinite(x) for x in sq) else None


def all_finite(t: torch.Tensor) -> bool:
    """True when every element of ``t`` is finite: one reduction, no O(n) temporary. A finite
    tensor whose sum overflows (|sum| > ~3e38 in float32) reads as not finite."""
    return bool(torch.isfinite(t.detach().sum(dtype=_sum_dtype(t))))


def _bad_rows(t: torch.Tensor) -> torch.Tensor:
    """(B, Hkv, S) True for rows holding a NaN or inf; t (B, Hkv, S, D)."""
    return ~torch.isfinite(t.detach().sum(-1, dtype=_sum_dtype(t)))


def _dense_bias_tensors(bias) -> list[torch.Tensor]:
    """The readable float tensors of the dense biases in ``bias`` (a score modifier or None)."""
    out = []
    for leaf in bias.leaves() if bias is not None else ():
        t = getattr(leaf, "t", None)
        if isinstance(t, torch.Tensor) and t.is_floating_point() and _readable(t):
            out.append(t.detach())
    return out


def _nan_or_posinf(t: torch.Tensor) -> torch.Tensor:
    return torch.isnan(t) | torch.isposinf(t)


def dense_bias_unsafe(bias) -> bool:
    """True when a dense bias tensor in ``bias`` (a score modifier or None) may hold a NaN or +inf
    (its sum is NaN or +inf). -inf entries are a mask written as a bias, which the kernels handle as
    the reference does; they keep the fast path."""
    return any(bool(_nan_or_posinf(t.sum(dtype=_sum_dtype(t)))) for t in _dense_bias_tensors(bias))


def computed_bias_unsafe(bias) -> bool:
    """True when a bias computed from positions (not a dense tensor) holds a NaN or inf in one of its
    own tensors (ALiBi's slopes, a T5 or Shaw table): one sum per tensor, O(parameters)."""
    for leaf in bias.leaves() if bias is not None else ():
        dense = getattr(leaf, "t", None)
        for t in (*leaf.parameters(recurse=False), *leaf.buffers(recurse=False)):
            if t is not dense and t.is_floating_point() and _readable(t) and not all_finite(t):
                return True
    return False


def needs_exact(call: AttentionCall) -> bool:
    """True when an input holds a NaN or inf that can change the result: any in q; in a key or value
    row that some query of its head may see; a NaN or +inf in a dense bias entry some query may use.
    O(B·H·(L + S)·E) (plus the dense bias's own size) on finite inputs; the dense mask is built only
    for a call whose keys, values or bias are not finite, to tell dead slots from live ones."""
    q, k, v = call.q, call.k, call.v
    if not (_readable(q) and _readable(k) and _readable(v)):
        return False
    if computed_bias_unsafe(call.bias):
        return True
    if _sums_finite((q, k, v)) and not dense_bias_unsafe(call.bias):
        return False  # the common case, in one reduction per tensor and one host sync
    if not all_finite(q):
        return True
    bias_bad = dense_bias_unsafe(call.bias)
    kv_bad = not (all_finite(k) and all_finite(v))
    if not (bias_bad or kv_bad):
        return False
    if call.mask is None:
        return True  # every key and every bias entry is used by some query
    B, H = q.shape[:2]
    allowed = call.mask.materialize(call.L, call.S, batch=B, heads=H, device=q.device)  # (B|1, H|1, L, S)
    if bias_bad and any(bool((_nan_or_posinf(t) & allowed).any()) for t in _dense_bias_tensors(call.bias)):
        return True
    if not kv_bad:
        return False
    bad = _bad_rows(k) | _bad_rows(v)  # (B, Hkv, S)
    seen = allowed.any(-2)  # (B|1, H|1, S): keys some query of the head may see
    if seen.shape[1] > 1:  # a kv head's row is seen when any query head reading it sees it
        seen = seen.reshape(seen.shape[0], k.shape[1], -1, seen.shape[-1]).any(2)
    return bool((bad & seen).any())


EXACT_ROUTE = "the reference's computation in row chunks (an input holds NaN or inf that some query may see)"


def run_exact(call: AttentionCall) -> BackendResult:
    """The reference's result for ``call`` (its NaN, inf and gradients), rows in chunks."""
    res = reference.run_in_row_chunks(call)
    res.route = EXACT_ROUTE
    return res
