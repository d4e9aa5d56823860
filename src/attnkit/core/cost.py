"""The cost model's shared parts: measured rates, counts every backend's estimate uses, and the ranking.

``auto`` dispatch (:mod:`attnkit.core.dispatch`) asks each backend that supports a call for
``{"time_s": .., "bytes": ..}`` (the backend's own ``estimate``, next to its ``run``) and
:func:`rank` picks the fastest whose bytes fit the memory budget. Every estimate is a
roofline-style sum of a few terms, each a count times a rate measured on this 2-core CPU
(``benchmarks/results/attention*.json``):

* GEMM work: ``2·B·H·(E + Ev)`` flops per attended (query, key) pair the backend computes;
* element-wise passes over computed score elements (softmax, masking, bias and score
  evaluation) — how many, the bias and score say themselves (``cost_per_element``);
* building dense masks / biases where a backend needs them (:func:`extent` elements each);
* fixed Python costs per call and per tile.

Bytes are the extra memory a backend allocates beyond its inputs and output. Estimates must be
cheap: no tensor of size L·S is touched (tile maps come from :func:`attnkit.core.tiles.kept_fraction`).
This module names no backend's code; the per-backend rates below are a table the estimates read.

Shape legend: B batch, H heads, Hkv kv heads, L queries, S keys, E/Ev head dims.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Callable, Sequence

import torch

if TYPE_CHECKING:
    from .call import AttentionCall
    from .registry import Backend


def cpu_has(probe: str) -> bool:
    """Whether this CPU has the half-precision kernel ``probe`` names: ``"amx"`` (AMX tiles, SDPA's
    fast bf16) or ``"fp16"`` (oneDNN fp16). :data:`RATES` reads both once, at import."""
    probes = {"amx": lambda: torch.cpu._is_amx_tile_supported(),
              "fp16": lambda: torch.ops.mkldnn._is_mkldnn_fp16_supported()}
    if probe not in probes:
        raise ValueError(f"probe must be one of {sorted(probes)}, got {probe!r}")
    try:
        return bool(probes[probe]())
    except (AttributeError, RuntimeError):  # an older torch or a build without oneDNN: no fast path
        return False


# SDPA's half-precision speed is the CPU's: with AMX tiles its bf16 kernel runs 2.76x its float32
# rate, with AVX512-FP16 its fp16 kernel 0.95x (benchmarks/results/bf16_rates.json "half_rates",
# n = 4096, 1 thread); without them, the rates of an earlier CPU that lacked both are kept (fp16 had
# no native kernel there), not re-measured since
HAS_AMX = cpu_has("amx")  # read once: SDPA's bf16 rate and the banded route's bf16 geometry depend on it
_SDPA_BF16 = 2.76 * 115e9 if HAS_AMX else 140e9
_SDPA_FP16 = 0.95 * 115e9 if cpu_has("fp16") else 4e9

# rates measured on the 2-core CPU (torch 2.13 cpu); a CUDA device overrides some below
_CPU_RATES = {
    # attention flops per second (GEMM + softmax together), by backend and dtype
    "sdpa_flops": {torch.float32: 115e9, torch.bfloat16: _SDPA_BF16, torch.float16: _SDPA_FP16, torch.float64: 40e9},
    # blockwise upcasts bf16/fp16 to float32 scores and GEMMs (the half-precision fix), so on any CPU its
    # half rates are ~its float32 rate: bf16 1.02x, fp16 1.04x (benchmarks/results/bf16_rates.json "half_rates")
    "blockwise_flops": {torch.float32: 85e9, torch.bfloat16: 1.02 * 85e9, torch.float16: 1.04 * 85e9, torch.float64: 35e9},
    "reference_flops": {torch.float32: 110e9, torch.bfloat16: 110e9, torch.float16: 110e9, torch.float64: 40e9},
    # blockwise on PyTorch's fused CPU kernel: unmasked and causal calls are SDPA's own kernel, so its
    # rates; banded windows run (64 x (64 + window)) tiles with a shared additive mask, ~0.6x that
    # rate in float32 and, with AMX, ~1.4x float32 in bf16 (benchmarks/flex_race.py, 1 thread); without
    # AMX bf16 took 1.03x the float32 time on the same geometry (bf16_window_amd_epyc.json); flops
    # counted over the pairs the kernel computes (the band's 64 + window keys per query)
    "fused_flops": {torch.float32: 115e9, torch.bfloat16: _SDPA_BF16, torch.float64: 40e9},
    "fused_band_flops": {torch.float32: 70e9, torch.bfloat16: 100e9 if HAS_AMX else 70e9 / 1.03, torch.float64: 25e9},
    # a relative bias (ALiBi, T5) on the fused kernel per 512-query block, its values a strided view as the
    # kernel's float mask: flops over the pairs the blocks compute, benchmarks/results/bias_and_small.json
    # (n = 8k, float32, 1 thread) ALiBi 81 / 77 and T5 96 / 97 GFLOP/s unmasked / causal, the median;
    # float64 not measured: float32's scaled by the fused kernel's float64 / float32 ratio (40 / 115)
    "fused_relative_flops": {torch.float32: 88e9, torch.float64: 88e9 * 40 / 115},
    "fused_call_overhead_s": 25e-6,  # one fused kernel call, its views and the copy of its result
    "elem_per_s": 1.2e9,  # one element-wise op over one fp32 element
    "tile_overhead_s": 40e-6,  # Python and dispatch cost of one blockwise tile
    "call_overhead_s": {"sdpa": 30e-6, "blockwise": 300e-6, "blockwise_fused": 80e-6, "reference": 100e-6},
    # compiled FlexAttention (the optional flex backend), flops over the pairs of its non-empty 128 x 128
    # tiles: benchmarks/results/flex_race.json (1 thread, float32 forward, n = 16k, load average 1.0-1.4)
    # ran it at 36.6, 38.3, 35.5 and 39.9 GFLOP/s (window 256, 1k documents, 1k chunks, prefix-LM), 1.5x
    # to 2.3x slower than blockwise's fused kernel; the median. Half precision not raced: float32's is used
    "flex_flops": {torch.float32: 37e9},
    # host time per call before the kernel runs and after it is launched (overlapping it on a GPU);
    # assumed, not measured on CPU: the BlockMask lookup and the compiled call's guards
    "flex_host_before_s": 200e-6,
    "flex_host_after_s": 0.0,
    "flex_uncached_mask_s": 0.0,  # not measured on CPU (see the CUDA table)
    # first call minus the median call, flex_race.json: 1.80 to 1.90 s over the four cases
    "flex_compile_s": 1.9,
}

# What differs on a CUDA device, measured on one H200 with torch 2.11 (benchmarks/gpu_race.py,
# benchmarks/results/gpu_race.json): SDPA's kernels run ~1,000x the CPU's rate (dense-mask window,
# n=16k: 2.9 ms bf16, 20.7 ms fp32; is_causal n=8k bf16 forward+backward 0.8 ms), while every
# blockwise tile costs ~260 us of kernel launches whatever the mask (509 tiles in 134 ms, 192 in 52
# ms, 124 in 41 ms), so reading the CPU table there made auto pick the tile loop at 40x SDPA's time
_CUDA_RATES = {
    "sdpa_flops": {torch.float32: 2.6e13, torch.bfloat16: 1.9e14, torch.float16: 1.9e14, torch.float64: 1e13},
    "blockwise_flops": {torch.float32: 2e13, torch.bfloat16: 5e13, torch.float16: 5e13, torch.float64: 5e12},
    "reference_flops": {torch.float32: 1e13, torch.bfloat16: 3e13, torch.float16: 3e13, torch.float64: 3e12},
    "elem_per_s": 1.5e12,  # a bool or half element read and written at ~4 TB/s
    "tile_overhead_s": 250e-6,
    # compiled FlexAttention on the H200, forward flops over the pairs of its non-empty 128 x 128 tiles:
    # gpu_race.json (FlexAttention called directly) bf16 window 94, document 88, causal prefix 85 TFLOP/s
    # (the median; causal + ALiBi 89 TFLOP/s too), fp32 window 9.1 TFLOP/s (fp16 not measured: bf16's)
    "flex_flops": {torch.float32: 9.1e12, torch.bfloat16: 88e12, torch.float16: 88e12},
    # attnkit's flex backend is host-bound for short kernels: flex_cuda.json's bf16 window n = 16k took
    # 0.894 ms where the kernel alone took 0.136 ms (gpu_race.json); fp32 2.140 ms vs 1.410 ms. Split
    # into host time before the kernel and after its launch (overlapping it), fitted to flex_cuda.json's
    # four forward cases with built-in masks: within 0.9x to 1.6x of each (tests/core/test_cost_device.py)
    "flex_host_before_s": 0.35e-3,
    "flex_host_after_s": 0.55e-3,
    # a mask without a cache key (custom predicates, documents) is looked up and checked per call:
    # flex_cuda.json's custom 1k-document predicate took 5.11 ms where the terms above give 0.90 ms
    "flex_uncached_mask_s": 4.2e-3,
    "flex_compile_s": 2.5,  # first call minus the median, flex_cuda.json: 2.1 to 5.6 s, 2.5 s the median of six
}
_DEVICE_RATES = {"cuda": _CUDA_RATES}
_DEVICE: ContextVar[str] = ContextVar("attnkit_cost_device", default="cpu")


class _Rates(Mapping):
    """:data:`RATES` as the estimates read it: the table of the device being estimated for
    (:func:`on_device`), falling back to the CPU's measured rates for what a device does not override."""

    def __getitem__(self, key: str):
        table = _DEVICE_RATES.get(_DEVICE.get())
        return table[key] if table is not None and key in table else _CPU_RATES[key]

    def __iter__(self):
        return iter(_CPU_RATES)

    def __len__(self) -> int:
        return len(_CPU_RATES)


RATES = _Rates()


@contextmanager
def on_device(device: torch.device | str):
    """Estimates inside this block read ``device``'s rates (its type: ``"cpu"``, ``"cuda"``, ...)."""
    token = _DEVICE.set(torch.device(device).type)
    try:
        yield
    finally:
        _DEVICE.reset(token)


def current_device() -> str:
    """The device type whose rates estimates read here (:func:`on_device`)."""
    return _DEVICE.get()


MASK_OPS = 3.0  # element-wise passes to evaluate a mask predicate on one element

# {"time_s": seconds, "bytes": extra bytes}, and optionally "path": which of a backend's routes
# the estimate is for (the report names it)
Estimate = dict[str, float | str]

MARGIN = 1.10  # a less preferred backend must be estimated this many times faster to be chosen


def dims(call: "AttentionCall") -> tuple[int, int, int, int, int, int, int]:
    """(B, H, Hkv, L, S, E, Ev) of a call."""
    B, H, L, E = call.q.shape
    _, Hkv, S, Ev = call.v.shape
    return B, H, Hkv, L, S, E, Ev


def rate(key: str, dtype: torch.dtype) -> float:
    """A per-dtype rate from :data:`RATES` (float32's for dtypes not measured)."""
    r = RATES[key]
    return r.get(dtype) or r[torch.float32]


def extent(obj, B: int, H: int, L: int, S: int) -> int:
    """Elements of the dense (B|1, H|1, L, S) tensor a mask or bias materializes to."""
    d = getattr(obj, "dims", ())
    return (B if "b" in d else 1) * (H if "h" in d else 1) * L * S


def bias_ops(bias) -> float:
    """Element-wise passes per score element to evaluate ``bias`` (0 without one)."""
    return 0.0 if bias is None else float(bias.cost_per_element)


def relative_bias(bias) -> bool:
    """An additive bias that depends only on (head, key − query): evaluable once per tile diagonal."""
    return bias is not None and bias.additive and bias.relative


def score_ops(call: "AttentionCall") -> float:
    """Element-wise passes per score element the score adds beyond q·kᵀ (0 for dot forms)."""
    return float(call.score.cost_per_element(call.q.shape[-1]))


def describe(e: Estimate) -> str:
    path = f"; path: {e['path']}" if "path" in e else ""
    return f"{e['time_s'] * 1e3:.2f} ms, {mib(e['bytes'])}{path}"


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def rank(
    candidates: Sequence["Backend"], estimates: dict[str, Estimate], budget: int | None
) -> tuple["Backend", Callable[[], tuple[str, dict[str, str]]]]:
    """Pick one of ``candidates`` (most preferred first); return it and a function giving the
    reason and a reason per candidate passed over (built only when the report is read).

    Backends with an estimate compete on it: those whose bytes fit ``budget`` (all when None),
    the fastest wins unless a more preferred one is within :data:`MARGIN` of it (model error must
    not trade SDPA's fused kernel for a near-tie); when none fits, the smallest memory wins.
    Backends without an estimate cannot be compared on cost, so they are ranked by priority
    against that winner: one preferred over it wins, the others are passed over. Without any
    estimate that is plain priority order."""
    timed = [b for b in candidates if b.name in estimates]
    untimed = [b for b in candidates if b.name not in estimates]
    if not timed:
        best = candidates[0]
        return best, lambda: ("most preferred backend that supports the call", {
            b.name: f"supported, but {best.name} is preferred" for b in candidates[1:]
        })
    fitting = [b for b in timed if budget is None or estimates[b.name]["bytes"] <= budget]
    if fitting:
        fastest = min(estimates[b.name]["time_s"] for b in fitting)
        near = [b for b in fitting if estimates[b.name]["time_s"] <= fastest * MARGIN]
        winner = max(near, key=lambda b: (b.priority, -estimates[b.name]["time_s"]))
    else:
        winner = min(timed, key=lambda b: (estimates[b.name]["bytes"], estimates[b.name]["time_s"]))
    above = [b for b in untimed if b.priority > winner.priority]
    best = above[0] if above else winner  # candidates come most preferred first

    def explain() -> tuple[str, dict[str, str]]:
        if best is not winner:
            why = f"most preferred backend that supports the call (no cost estimate; the cost model's choice was {winner.name})"
        elif not fitting:
            why = f"nothing fits memory budget {mib(budget)}; smallest estimated memory ({describe(estimates[best.name])})"
        elif len(timed) == 1:
            why = f"the only supporting backend with a cost estimate ({describe(estimates[best.name])})"
        elif estimates[best.name]["time_s"] > fastest:
            why = f"preferred and within {MARGIN:.2f}x of the fastest estimate ({describe(estimates[best.name])})"
        else:
            why = f"lowest estimated time ({describe(estimates[best.name])})"
        if fitting and budget is not None and best is winner:
            why += f" within memory budget {mib(budget)}"
        rejected = {}
        for b in candidates:
            if b is best:
                continue
            if b.name not in estimates:
                rejected[b.name] = f"supported, no cost estimate, and {best.name} is preferred"
                continue
            e = estimates[b.name]
            over = budget is not None and e["bytes"] > budget
            rejected[b.name] = f"estimated {describe(e)}" + (
                " (over memory budget)" if over else f" ({best.name} is preferred)" if best is not winner else " (slower)"
            )
        return why, rejected

    return best, explain
