"""A cost model for backends: estimated time and extra memory of one attention call.

``auto`` dispatch (:mod:`attnkit.core.dispatch`) asks each backend that supports a call for
``{"time_s": .., "bytes": ..}`` and picks the fastest whose bytes fit the memory budget. The model
is a roofline-style sum of a few terms, each a count times a rate measured on this 2-core CPU
(``../shared/PERF-NOTES.md`` and ``benchmarks/results/attention*.json``):

* GEMM work: ``2·B·H·(E + Ev)`` flops per attended (query, key) pair that a backend actually
  computes — all L·S pairs for SDPA with an explicit mask (it never skips), the 512-tile causal
  fraction for SDPA's ``is_causal``, and the fraction of tiles the mask keeps for blockwise;
* element-wise passes over computed score elements (softmax, masking, bias evaluation), whose
  count depends on the bias kind (ALiBi: a few ops; T5: a bucket log per element);
* building the dense mask / bias SDPA needs (the user would build it too: one evaluation per
  element of the (B|1, H|1, L, S) tensor, plus writing it);
* a fixed cost per Python-level tile for blockwise (why it loses below ~1k tokens).

Bytes are the extra memory a backend allocates beyond its inputs and output: dense score, mask
and bias tensors (O(L·S)) for reference and SDPA, accumulators and a few tiles (O(n)) for
blockwise. Estimates are cheap (no tensor of size L·S is touched): masks with analytic tile states
(causal, window, prefix, padding, documents) cost one small tensor expression.

Shape legend: B batch, H heads, Hkv kv heads, L queries, S keys, E/Ev head dims.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .call import AttentionCall

# rates measured on the 2-core CPU (torch 2.13 cpu); other devices reuse them as relative weights
RATES = {
    # attention flops per second (GEMM + softmax together), by backend and dtype
    "sdpa_flops": {torch.float32: 115e9, torch.bfloat16: 140e9, torch.float16: 4e9, torch.float64: 40e9},
    "blockwise_flops": {torch.float32: 85e9, torch.bfloat16: 150e9, torch.float16: 4e9, torch.float64: 35e9},
    "reference_flops": {torch.float32: 110e9, torch.bfloat16: 110e9, torch.float16: 110e9, torch.float64: 40e9},
    "elem_per_s": 1.2e9,  # one element-wise op over one fp32 element
    "tile_overhead_s": 40e-6,  # Python and dispatch cost of one blockwise tile
    "call_overhead_s": {"sdpa": 30e-6, "blockwise": 300e-6, "reference": 100e-6},
}

# element-wise ops per score element to evaluate a bias or mask on it (count of tensor passes)
_BIAS_OPS = {"ALiBi": 4.0, "T5RelativeBias": 14.0, "RelativePositionBias": 6.0, "TensorBias": 2.0}
_MASK_OPS = 3.0
_SOFTMAX_OPS = {"sdpa": 0.0, "blockwise": 0.0, "reference": 6.0}  # passes not already in the flops rate


def _dims(call: "AttentionCall") -> tuple[int, int, int, int, int, int, int]:
    B, H, L, E = call.q.shape
    return B, H, call.k.shape[1], L, call.S, E, call.v.shape[-1]


def _bias_ops(bias) -> float:
    if bias is None:
        return 0.0
    parts = getattr(bias, "parts", None)
    if parts is not None:
        return sum(_bias_ops(p) for p in parts)
    return _BIAS_OPS.get(type(bias).__name__, 8.0)


def _relative(bias) -> bool:
    parts = getattr(bias, "parts", None)
    if parts is not None:
        return all(_relative(p) for p in parts)
    return type(bias).__name__ in ("ALiBi", "T5RelativeBias", "RelativePositionBias") and bias.additive


def _extent(obj, B: int, H: int, L: int, S: int) -> int:
    """Elements of the dense (B|1, H|1, L, S) tensor a mask or bias materializes to."""
    dims = getattr(obj, "dims", frozenset())
    return (B if "b" in dims else 1) * (H if "h" in dims else 1) * L * S


def _rate(key: str, dtype: torch.dtype) -> float:
    return RATES[key].get(dtype, RATES[key][torch.float32])


def _general_factor(call: "AttentionCall") -> float:
    """Scores with no dot form run per tile through their module (additive: a (l, s, A) tanh)."""
    from .scores import Score

    if type(call.score).as_dot is Score.as_dot:
        A = getattr(getattr(call.score, "w_q", None), "out_features", call.q.shape[-1])
        return 1.0 + 3.0 * A  # elementwise passes over an (l, s, A) tensor per score element
    return 0.0


def estimate_sdpa(call: "AttentionCall") -> dict[str, float]:
    from ..backends.sdpa import _uses_is_causal
    from ..backends.tiling import kept_fraction

    B, H, Hkv, L, S, E, Ev = _dims(call)
    dt = call.q.dtype
    pairs = B * H * L * S
    elem = RATES["elem_per_s"]
    es = call.q.element_size()
    nbytes = 0.0
    time_s = RATES["call_overhead_s"]["sdpa"]
    if call.mask is not None and _uses_is_causal(call):
        kept, _ = kept_fraction(call.mask, L, S, 512, 512)  # its kernel skips only whole 512-key tiles
        time_s += 2 * pairs * (E + Ev) * kept / _rate("sdpa_flops", dt)
    else:
        time_s += 2 * pairs * (E + Ev) / _rate("sdpa_flops", dt)
        if call.mask is not None:
            n = _extent(call.mask, B, H, L, S)
            time_s += n * (_MASK_OPS + 2) / elem  # evaluate the predicate, find empty rows
            nbytes += n  # one bool per element
        if call.bias is not None:
            n = max(_extent(call.bias, B, H, L, S), _extent(call.mask, B, H, L, S) if call.mask is not None else 0)
            time_s += n * (_bias_ops(call.bias) + 3) / elem  # build, fold mask in, scan for empty rows
            nbytes += 2 * n * es  # the bias and its masked copy
        if call.mask is not None or call.bias is not None:
            time_s += pairs * 1.0 / elem  # the kernel reads the dense mask for every score
    nbytes += B * H * L * Ev * es  # output
    return {"time_s": time_s, "bytes": float(nbytes)}


def estimate_blockwise(call: "AttentionCall") -> dict[str, float]:
    from ..backends.tiling import default_tiles, kept_fraction

    B, H, Hkv, L, S, E, Ev = _dims(call)
    dt = call.q.dtype
    bq, bk = default_tiles(call.mask, L, S, dt, call.q.device)
    kept, evaluated = kept_fraction(call.mask, L, S, bq, bk)
    pairs = B * H * L * S
    elem = RATES["elem_per_s"]
    n_tiles = math.ceil(L / bq) * math.ceil(S / bk) * kept + math.ceil(L / bq)
    time_s = RATES["call_overhead_s"]["blockwise"] + n_tiles * RATES["tile_overhead_s"]
    time_s += 2 * pairs * (E + Ev) * kept / _rate("blockwise_flops", dt)
    bias_ops = _bias_ops(call.bias)
    if call.bias is not None and _relative(call.bias):
        # relative-position biases are evaluated once per tile diagonal, not once per tile
        nq, nk = math.ceil(L / bq), math.ceil(S / bk)
        bias_ops *= min(1.0, (nq + nk) / max(nq * nk * kept, 1.0))
    time_s += pairs * kept * (_SOFTMAX_OPS["blockwise"] + bias_ops + _general_factor(call)) / elem
    if call.mask is not None:
        time_s += _extent(call.mask, B, H, L, S) * evaluated * _MASK_OPS / elem
    if call.dropout_p > 0:
        time_s += pairs * kept * 4 / elem
    # accumulators (B, H, l, Ev + 2) per query block, the output, and a handful of (B, H, l, s) tiles
    tile_bytes = 6 * B * H * bq * bk * 4
    nbytes = B * H * L * Ev * call.q.element_size() + B * H * bq * (Ev + 2) * 4 + B * H * L * 4 + tile_bytes
    if call.return_weights:
        nbytes += pairs * 8
    return {"time_s": time_s, "bytes": float(nbytes)}


def estimate_reference(call: "AttentionCall") -> dict[str, float]:
    B, H, Hkv, L, S, E, Ev = _dims(call)
    dt = call.q.dtype
    pairs = B * H * L * S
    elem = RATES["elem_per_s"]
    time_s = RATES["call_overhead_s"]["reference"] + 2 * pairs * (E + Ev) / _rate("reference_flops", dt)
    time_s += pairs * (_SOFTMAX_OPS["reference"] + _bias_ops(call.bias) + _general_factor(call)) / elem
    nbytes = 4.0 * pairs * 4  # scores, exp, weights, mask fill: each (B, H, L, S) fp32
    if call.mask is not None:
        time_s += _extent(call.mask, B, H, L, S) * _MASK_OPS / elem
        nbytes += _extent(call.mask, B, H, L, S)
    if Hkv != H:
        nbytes += 2 * B * H * S * (E + Ev) * 4  # repeated k and v
    nbytes += B * H * L * Ev * call.q.element_size()
    return {"time_s": time_s, "bytes": float(nbytes)}
