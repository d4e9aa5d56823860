"""PyTorch's FlexAttention as an optional backend, built from attnkit's masks and biases.

FlexAttention (``torch.nn.attention.flex_attention``, https://pytorch.org/blog/flexattention/)
compiles a ``mask_mod`` and a ``score_mod`` into one fused kernel that skips the blocks a
``BlockMask`` marks empty. attnkit's objects already are those two functions:

* ``mask_mod`` — the mask's predicate ``call.mask.predicate(L, S)``;
* ``score_mod`` — the bias's ``call.bias.score_mod(L, S)`` (additive biases add themselves);
* the ``BlockMask`` (:mod:`.flex_blocks`) — from the mask's own tile states on 128 × 128 tiles
  (:meth:`attnkit.core.masks.Mask.tile_states`): FULL tiles become FlexAttention's full blocks
  (no mask evaluated), PARTIAL ones its partial blocks, EMPTY ones are left out. Built-in masks
  answer analytically; a custom predicate's map is evaluated once per shape and cached
  (:mod:`attnkit.core.tile_map`), so no (L, S) mask is built here.

Dot-form scores (scaled dot, general, cosine) are turned into q'·k'ᵀ first (``Score.as_dot``).

Where it runs: torch with ``flex_attention`` and ``torch.compile`` (``torch.compiler`` able to
build for the device), CUDA for training, CPU for inference only (FlexAttention has no CPU
backward: ``supports`` declines a CPU call that needs gradients, with the reason; a call needs
them when q, k, v, the score's parameters or any tensor the bias reaches requires grad, a user's
function's captured tensors included, so none is run without its gradient). No dropout,
no returned weights. Fully masked rows give output 0 and lse −inf, as every attnkit backend; the
compiled CPU kernel returns no lse (torch 2.13), so there ``lse`` and the fully-masked-row count are
None, and CPU calls with attention sinks (which need the lse) are declined.

Registered as ``"flex"`` on ``import attnkit`` where this torch has FlexAttention and a CUDA device
is present (:func:`default_enabled`; found without importing it: ``torch.nn.attention.flex_attention``
and the compiler load only when it first runs); ``disable()`` unregisters it, ``enable()`` registers
it (on a CPU-only machine too, where ``auto`` weighs it and passes it over as slower).

When ``auto`` picks it: only where its estimate, from measured rates, beats the others
(:func:`estimate`, the rates in :mod:`attnkit.core.cost`, ``flex_*``):

* CPU: compiled FlexAttention measured slower than blockwise's fused kernel in every case of the
  CPU race (``benchmarks/results/flex_race.json``: a 256-key window, 1k documents, 1k chunks and a
  prefix-LM at n = 16k, float32, one thread), so its rate there is below blockwise's and ``auto``
  passes it over for those. Where blockwise has no fused kernel, a bias on the Python tile loop,
  it can win: ``flex_cpu_quick.json`` (``flex_cuda.py`` run on the CPU, n = 1024, bf16 inference)
  measured causal + ALiBi at 17.5 ms for flex against 66.0 ms for ``auto`` without it, and ``auto``
  with it picked flex. CPU training never runs it (no CPU backward).
* CUDA (H200, torch 2.11, ``benchmarks/flex_cuda.py`` → ``flex_cuda.json``, against SDPA given the
  dense mask): faster for a 256-key window at n = 16k (bf16 forward 0.89 vs 2.29 ms, forward +
  backward 1.65 vs 7.36 ms, fp32 forward 2.14 vs 19.9 ms), slower for causal (0.90 vs 0.24 ms, SDPA's
  ``is_causal`` kernel), causal + ALiBi (0.99 vs 0.61 ms) and a custom 1k-document predicate (5.11
  vs 2.26 ms, where ``auto`` without flex measured 5.52 ms). Its estimate reproduces those times
  within 0.9x to 1.6x (``tests/core/test_cost_device.py``): the rate over the non-empty tiles, the
  host time of a call (0.9 ms, the kernel overlapping its later part; 4.2 ms more for a mask without
  a cache key), and the compile. Against SDPA's route in attnkit, which builds the mask or bias per
  call (a bias in float32, for accuracy: the 0.61 ms of SDPA given a prebuilt bf16 ALiBi bias is not
  a route attnkit's sdpa backend takes), it picks flex for the windows and for causal + ALiBi, not
  for causal or the custom predicate (a near tie, within ``auto``'s 1.1x margin).

The compile (2.5 s on the H200, 1.9 s on the CPU: first call minus the median call) is **amortised**:
each call is charged ``compile_s / AMORTISED_CALLS`` (10,000 calls of one compiled shape, a
training run or a serving loop at one length). Charged whole on the first call instead, it would
lose every first call, so ``auto`` would never compile it and never reach the fast calls. A shape
past torch's recompile limit (``torch._dynamo.config.recompile_limit``, 8 by default) would run
FlexAttention's unfused eager path, which materialises the scores: once this process has compiled
that many shapes, a new one is estimated infinite (never picked). Ask for it by name with
``attnkit.attention(q, k, v, mask=..., backend="flex")``. Estimates are of the forward pass, as
every backend's.

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E, Ev head dims;
nq, nk 128-row and 128-column tile counts.
"""

from __future__ import annotations

import importlib.util
import sys
import threading

import torch

from ..core import cost
from ..core.call import AttentionCall
from ..core.output import BackendResult
from ..core.reachable import grad_tensors
from .flex_blocks import BLOCK, cached_block_mask, held_tensors, block_mask
from .nonfinite import needs_exact, run_exact

__all__ = ["enable", "disable", "default_enabled", "run", "supports", "estimate", "available", "block_mask", "BLOCK",
           "AMORTISED_CALLS"]

AMORTISED_CALLS = 10_000  # calls of one compiled shape its compile time is spread over (module docstring)
_DEFAULT_RECOMPILE_LIMIT = 8  # torch._dynamo.config.recompile_limit's default, read without importing Dynamo

_COMPILED = None
_LOCK = threading.Lock()
_COMPILED_KEYS: set[tuple] = set()  # the shapes this process has run (and so compiled)
_AVAILABLE: list[str | None] = []  # available()'s answer, found once


def enable() -> None:
    """Register this backend as ``"flex"`` (lowest priority: ``auto`` weighs it on its estimate only)."""
    from ..core.registry import register

    register("flex", run, supports=supports, estimate=estimate, priority=-5)


def default_enabled() -> bool:
    """Whether ``import attnkit`` registers it: where this torch has FlexAttention and a CUDA device is
    present (``torch.cuda.is_available()``, which creates no CUDA context). On a CPU-only machine its
    estimate loses every case measured (the module docstring), so registering it would change no
    choice of ``auto``, yet every caller that tries each registered backend (forced loops, parity
    tests) would compile it per shape, seconds each: there it is opt-in."""
    return available() is None and torch.cuda.is_available()


def disable() -> None:
    """Unregister ``"flex"``."""
    from ..core.registry import unregister

    unregister("flex")


def available() -> str | None:
    """None when this torch has FlexAttention and torch.compile, else the reason it has not. Found
    from the module's spec, not by importing it (eager calls ask on every dispatch), and kept."""
    if not _AVAILABLE:
        try:
            found = importlib.util.find_spec("torch.nn.attention.flex_attention") is not None
        except ImportError:  # no torch.nn.attention package at all
            found = False
        if not found:
            why = f"this torch ({torch.__version__}) has no torch.nn.attention.flex_attention; it needs torch >= 2.5"
        elif not hasattr(torch, "compile"):
            why = f"this torch ({torch.__version__}) has no torch.compile, which FlexAttention needs for a fused kernel"
        else:
            why = None
        _AVAILABLE.append(why)
    return _AVAILABLE[0]


def _needs_grad(call: AttentionCall) -> bool:
    """Whether the call records a backward: q, k or v, the score's parameters, or any tensor that
    requires grad the bias reaches — its parameters, or what a user's function reads through a
    closure, a list, a dict, a ``functools.partial``, a bound object or a helper
    (:func:`attnkit.core.reachable.grad_tensors`), which ``bias.parameters()`` alone does not list."""
    if not torch.is_grad_enabled():
        return False
    if any(t.requires_grad for t in (call.q, call.k, call.v)) or any(p.requires_grad for p in call.score.parameters()):
        return True
    return call.bias is not None and bool(grad_tensors(call.bias))


def supports(call: AttentionCall) -> str | None:
    why = available()
    if why is not None:
        return why
    dev = call.q.device.type
    if dev not in ("cpu", "cuda"):
        return f"FlexAttention compiles for CPU and CUDA, got device {dev!r}; use blockwise"
    if torch.compiler.is_compiling():
        return "inside a torch.compile'd function; call FlexAttention there directly or use blockwise"
    if call.return_weights:
        return "FlexAttention does not return attention weights (return_weights=True); reference or blockwise can"
    if call.dropout_p > 0:
        return f"FlexAttention has no dropout (dropout_p={call.dropout_p}); blockwise has"
    if not call.score.dot_form:
        return f"score {call.score.name!r} has no dot-product form (FlexAttention computes q·kᵀ, then score_mod)"
    if call.q.dtype == torch.float64 and dev == "cuda":
        return "FlexAttention's CUDA kernel does not take float64; use float32 or blockwise"
    where = _tensor_elsewhere(call.mask, call.bias, call.q.device)
    if where is not None:
        return (f"{where} is on another device than q ({call.q.device}); FlexAttention's compiled mask_mod / score_mod "
                f"cannot copy between devices: build or move it there first (bias.to(device), ids.to(device))")
    if dev == "cpu" and call.sinks is not None:
        return ("FlexAttention's compiled CPU kernel returns no log-sum-exp, which attention sinks need "
                "(sigmoid(lse - sink)); use blockwise or reference for calls with sinks on CPU")
    if dev == "cpu" and _needs_grad(call):  # last: the one reason torch.no_grad() removes
        return "FlexAttention has no CPU backward (inference only on CPU): call under torch.no_grad() or use blockwise for training"
    return None


def _tensor_elsewhere(mask, bias, device: torch.device) -> str | None:
    """The first tensor a mask or bias holds that is not on ``device``, named, or None."""
    for label, t in [*held_tensors(mask, "mask"), *held_tensors(bias, "bias")]:
        if t.device != device and t.dim() > 0:  # a 0-d tensor is a scalar: moved freely
            return label
    return None


def _compiled():
    global _COMPILED
    with _LOCK:
        if _COMPILED is None:
            from torch.nn.attention.flex_attention import flex_attention

            _COMPILED = torch.compile(flex_attention, dynamic=False)
        return _COMPILED


def run(call: AttentionCall) -> BackendResult:
    if needs_exact(call):  # NaN/inf in q, k or v: the reference's result (..nonfinite)
        return run_exact(call)
    from torch.nn.attention.flex_attention import AuxRequest

    q, k, v = call.q, call.k, call.v
    L, S = q.shape[2], k.shape[2]
    qd, kd = call.score.as_dot(q, k)
    score_mod = call.bias.score_mod(L, S) if call.bias is not None else None
    bm = cached_block_mask(call.mask, L, S, q.device)
    args = (qd.contiguous(), kd.contiguous(), v.contiguous())
    kw = dict(score_mod=score_mod, block_mask=bm, scale=call.scale, enable_gqa=call.groups > 1)
    with _LOCK:
        _COMPILED_KEYS.add(_compile_key(call))
    if q.device.type == "cpu":  # the compiled CPU kernel returns no lse (torch 2.13: "return_lse is not supported yet")
        # supports() let only calls that record no backward through; FlexAttention still refuses a q, k or v
        # that requires grad on CPU under torch.no_grad() or inference mode ("does not support backward on
        # CPU"), so it gets them detached: the same values, and no graph was to be recorded anyway
        out = _compiled()(*(t.detach() for t in args), **kw)
        return BackendResult(out.to(v.dtype), None, None, None, [])
    out, aux = _compiled()(*args, **kw, return_aux=AuxRequest(lse=True))
    return BackendResult(out.to(v.dtype), None, aux.lse, torch.isneginf(aux.lse).sum(), [])


def _compile_key(call: AttentionCall) -> tuple:
    """What makes the compiled function compile again (``dynamic=False``): shapes, dtype, device,
    gradients and the kinds of mask and score function it traces. An approximation of Dynamo's guards."""
    mask = call.mask
    kind = None if mask is None else (mask.cache_key or type(mask).__name__)  # a window's width is traced as a constant
    bias = None if call.bias is None else type(call.bias).__name__
    return (tuple(call.q.shape), tuple(call.k.shape), tuple(call.v.shape), call.q.dtype, call.q.device.type,
            kind, bias, _needs_grad(call))


def _recompile_limit() -> int:
    dynamo = sys.modules.get("torch._dynamo")  # loaded once anything has compiled; never imported here
    if dynamo is None:
        return _DEFAULT_RECOMPILE_LIMIT
    cfg = dynamo.config
    return int(getattr(cfg, "recompile_limit", getattr(cfg, "cache_size_limit", _DEFAULT_RECOMPILE_LIMIT)))


def estimate(call: AttentionCall) -> cost.Estimate:
    """Time and extra bytes of :func:`run` on the device whose rates :mod:`attnkit.core.cost` reads
    (:func:`attnkit.core.cost.on_device`): the measured rate ``flex_flops`` over the pairs of the
    non-empty 128 × 128 tiles (the bias's passes over them counted as flops: it runs in the kernel),
    host time before the kernel (more for masks without a cache key, looked up and checked per call),
    then the longer of the kernel and the host time after its launch (which a GPU kernel overlaps;
    on CPU it is 0), and the compile amortised over :data:`AMORTISED_CALLS` calls. Bytes: the
    output and the lse (flex_race.json and gpu_race.json measured them as its whole peak: 32.0 MiB
    fp32, 17 MiB bf16, n = 16k, H = 8). Infinite for a new shape once the recompile limit's worth of
    shapes has compiled."""
    B, H, _, L, S, E, Ev = cost.dims(call)
    if len(_COMPILED_KEYS) >= _recompile_limit() and _compile_key(call) not in _COMPILED_KEYS:
        why = (f"compiled FlexAttention: this process has compiled {len(_COMPILED_KEYS)} shapes, torch's recompile "
               "limit; a new one would run its unfused eager path")
        return {"time_s": float("inf"), "bytes": float("inf"), "path": why}
    from ..core.tiles import kept_fraction

    kept, _ = kept_fraction(call.mask, L, S, BLOCK, BLOCK)
    pairs = B * H * L * S * kept
    flops = cost.rate("flex_flops", call.q.dtype)
    # the bias is computed inside the fused kernel, on scores in registers: its passes count as flops
    kernel_s = pairs * (2 * (E + Ev) + cost.bias_ops(call.bias)) / flops
    before = cost.RATES["flex_host_before_s"]
    if call.mask is not None and call.mask.cache_key is None:
        before += cost.RATES["flex_uncached_mask_s"]
    compile_s = cost.RATES["flex_compile_s"]
    time_s = before + max(cost.RATES["flex_host_after_s"], kernel_s) + compile_s / AMORTISED_CALLS
    nbytes = B * H * L * (Ev * call.q.element_size() + 4)  # output and lse
    path = (f"compiled FlexAttention: {kept:.1%} of its 128 x 128 tiles computed at {flops / 1e12:.3g} TFLOP/s "
            f"({kernel_s * 1e3:.2f} ms), {before * 1e3:.2f} ms host time before it, "
            f"{compile_s:.1f} s compile amortised over {AMORTISED_CALLS:,} calls")
    return {"time_s": time_s, "bytes": float(nbytes), "path": path}
