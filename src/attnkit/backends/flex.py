"""PyTorch's FlexAttention as an optional backend, built from attnkit's masks and biases.

FlexAttention (``torch.nn.attention.flex_attention``, https://pytorch.org/blog/flexattention/)
compiles a ``mask_mod`` and a ``score_mod`` into one fused kernel that skips the blocks a
``BlockMask`` marks empty. attnkit's objects already are those two functions:

* ``mask_mod`` — the mask's predicate ``call.mask.predicate(L, S)``;
* ``score_mod`` — the bias's ``call.bias.score_mod(L, S)`` (additive biases add themselves);
* the ``BlockMask`` — from the mask's own tile states on 128 × 128 tiles
  (:meth:`attnkit.core.masks.Mask.tile_states`): FULL tiles become FlexAttention's full blocks
  (no mask evaluated), PARTIAL ones its partial blocks, EMPTY ones are left out. Built-in masks
  answer analytically; a custom predicate's map is evaluated once per shape and cached
  (:mod:`attnkit.core.tile_map`), so no (L, S) mask is built here.

Dot-form scores (scaled dot, general, cosine) are turned into q'·k'ᵀ first (``Score.as_dot``).

Where it runs: torch with ``flex_attention`` and ``torch.compile`` (``torch.compiler`` able to
build for the device), CUDA for training, CPU for inference only (FlexAttention has no CPU
backward: ``supports`` declines a CPU call that needs gradients, with the reason). No dropout,
no returned weights. Fully masked rows give output 0 and lse −inf, as every attnkit backend; the
compiled CPU kernel returns no lse (torch 2.13), so there ``lse`` and the fully-masked-row count are None.

Opt-in: ``attnkit.backends.flex.enable()`` registers it as ``"flex"``; it is not registered on
import, since it compiles per shape (60 s for the first call at n = 16k on CPU, flex_race.json)
and declines every CPU call that needs gradients, which the other backends all serve.

When ``auto`` picks it: only where its estimate, from a measured rate, beats the others. On CPU
the measured rate is below blockwise's fused kernel (``benchmarks/results/flex_race.json``:
sliding window 256, n = 16k, fp32, one thread: compiled FlexAttention 1,368 ms, blockwise 753 ms),
so ``auto`` does not pick it there for speed (only, like any backend, when a memory budget fits
nothing else and its memory is the smallest). On CUDA it is measured (``benchmarks/flex_cuda.py``,
``benchmarks/results/flex_cuda.json``, H200, torch 2.11) faster than SDPA with a dense mask for a
256-key window at n = 16k (bf16 forward 0.89 vs 2.29 ms, forward + backward 1.65 vs 7.36 ms, fp32
forward 2.14 vs 19.9 ms) and slower for causal, ALiBi and a 1k-document custom predicate; but the
cost model holds CPU rates only, which the other backends' CUDA estimates reuse as relative weights,
so no estimate of its CUDA rate could be compared fairly with theirs: there its estimate is
infinite and ``auto`` never picks it. Ask for it by name:
``attnkit.attention(q, k, v, mask=..., backend="flex")``. The first call per shape compiles; each
new mask or score function compiles again, and torch's recompile limit (``torch._dynamo.config.recompile_limit``)
sends calls past it to FlexAttention's unfused eager path.

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E, Ev head dims;
nq, nk 128-row and 128-column tile counts.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import torch

from ..core import cost
from ..core.call import AttentionCall
from ..core.output import BackendResult
from ..core.tiles import EMPTY, FULL, PARTIAL, TileGrid
from .nonfinite import needs_exact, run_exact

__all__ = ["enable", "disable", "run", "supports", "estimate", "available", "block_mask", "BLOCK"]

BLOCK = 128  # FlexAttention's default sparse block size, rows and columns
# compiled FlexAttention's CPU forward rate, flops over the pairs of the tiles it computes:
# flex_race.json "window256_16k_fp32_fwd" (B=1, H=8, E=64, one thread) took 1,368 ms over
# 49.9 M (query, key) pairs in the non-empty 128 × 128 tiles of sliding_window(255, 0) ⇒ 9.3e9
_CPU_FLOPS = 9.3e9
_CALL_OVERHEAD_S = 200e-6  # assumed, not measured: the BlockMask from cached tile codes and the compiled call's guards

_COMPILED = None
_LOCK = threading.Lock()
_BLOCK_MASKS: OrderedDict[tuple, object] = OrderedDict()


def enable() -> None:
    """Register this backend as ``"flex"`` (lowest priority: ``auto`` weighs it on its estimate only)."""
    from ..core.registry import register

    register("flex", run, supports=supports, estimate=estimate, priority=-5)


def disable() -> None:
    """Unregister ``"flex"``."""
    from ..core.registry import unregister

    unregister("flex")


def available() -> str | None:
    """None when this torch has FlexAttention and torch.compile, else the reason it has not."""
    try:
        from torch.nn.attention.flex_attention import BlockMask, flex_attention  # noqa: F401
    except ImportError as err:
        return f"this torch ({torch.__version__}) has no torch.nn.attention.flex_attention ({err}); it needs torch >= 2.5"
    if not hasattr(torch, "compile"):
        return f"this torch ({torch.__version__}) has no torch.compile, which FlexAttention needs for a fused kernel"
    return None


def _needs_grad(call: AttentionCall) -> bool:
    params = [p for p in (call.bias.parameters() if call.bias is not None else ()) if p.requires_grad]
    params += [p for p in call.score.parameters() if p.requires_grad]
    return torch.is_grad_enabled() and (any(t.requires_grad for t in (call.q, call.k, call.v)) or bool(params))


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
    if dev == "cpu" and _needs_grad(call):  # last: the one reason torch.no_grad() removes
        return "FlexAttention has no CPU backward (inference only on CPU): call under torch.no_grad() or use blockwise for training"
    return None


def _tensor_elsewhere(mask, bias, device: torch.device) -> str | None:
    """The first tensor a mask or bias holds (a dense mask, document ids, ALiBi slopes, a learned
    table, a tensor a custom function captures) that is not on ``device``, named, or None."""
    from ..core.tile_map import captured_tensors

    def tensors(obj, name):
        if obj is None:
            return
        if isinstance(obj, torch.nn.Module):
            yield from ((f"{name}.{n}", t) for n, t in [*obj.named_parameters(), *obj.named_buffers()])
        for key, val in vars(obj).items():
            if isinstance(val, torch.Tensor) and not isinstance(obj, torch.nn.Module):
                yield f"{name}.{key}", val
        for fn_name in ("fn",):
            fn = getattr(obj, fn_name, None)
            if callable(fn):
                yield from ((f"a tensor captured by {name}'s function", t) for t in captured_tensors(fn))
        for i, part in enumerate(getattr(obj, "parts", ()) or ()):
            yield from tensors(part, f"{name} part {i}")
        yield from tensors(getattr(obj, "inner", None), f"{name} inner")

    for label, t in [*tensors(mask, "mask"), *tensors(bias, "bias")]:
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


def block_mask(mask, L: int, S: int, device: torch.device, codes: torch.Tensor | None = None):
    """FlexAttention's ``BlockMask`` for an attnkit ``mask`` from its tile states on BLOCK × BLOCK
    tiles (``codes``, (nq, nk), computed when not given; broadcast over batch rows and heads), with
    the mask's predicate as ``mask_mod`` for the partial blocks. None for no mask."""
    if mask is None:
        return None
    from torch.nn.attention.flex_attention import BlockMask

    if codes is None:
        grid = TileGrid.uniform(L, S, BLOCK, BLOCK)
        codes = mask.tile_states(grid).expand(grid.shape)
    cols = torch.arange(codes.shape[1]).expand_as(codes)

    def blocks(state: int) -> tuple[torch.Tensor, torch.Tensor]:
        sel = codes == state
        order = torch.argsort((~sel).to(torch.int8), dim=1, stable=True)  # the selected columns first, in order
        idx = torch.gather(cols, 1, order).to(torch.int32)
        return sel.sum(1).to(torch.int32)[None, None].to(device), idx[None, None].contiguous().to(device)

    partial_n, partial_idx = blocks(PARTIAL)
    full_n, full_idx = blocks(FULL)
    return BlockMask.from_kv_blocks(partial_n, partial_idx, full_n, full_idx, BLOCK_SIZE=BLOCK,
                                    mask_mod=mask.predicate(L, S), seq_lengths=(L, S))


def _cached_block_mask(mask, L: int, S: int, device: torch.device):
    """:func:`block_mask`, kept per shape and device: for masks with a ``cache_key`` (causal,
    windows, chunks) under that key, for custom predicates under their cached tile map (the same
    tensor object while the predicate and its captured tensors are unchanged)."""
    if mask is None:
        return None
    grid = TileGrid.uniform(L, S, BLOCK, BLOCK)
    codes = None
    if mask.cache_key is not None:
        key, anchor = (mask.cache_key, L, S, str(device)), None
    else:
        codes = mask.tile_states(grid)
        key, anchor = ("tile map", id(codes), L, S, str(device)), codes  # valid while that tensor is the cached map
    with _LOCK:
        hit = _BLOCK_MASKS.get(key)
        if hit is not None and hit[0] is anchor:
            _BLOCK_MASKS.move_to_end(key)
            return hit[1]
    bm = block_mask(mask, L, S, device, None if codes is None else codes.expand(grid.shape))
    with _LOCK:
        _BLOCK_MASKS[key] = (anchor, bm)
        while len(_BLOCK_MASKS) > 32:
            _BLOCK_MASKS.popitem(last=False)
    return bm


def run(call: AttentionCall) -> BackendResult:
    if needs_exact(call):  # NaN/inf in q, k or v: the reference's result (..nonfinite)
        return run_exact(call)
    from torch.nn.attention.flex_attention import AuxRequest

    q, k, v = call.q, call.k, call.v
    L, S = q.shape[2], k.shape[2]
    qd, kd = call.score.as_dot(q, k)
    score_mod = call.bias.score_mod(L, S) if call.bias is not None else None
    bm = _cached_block_mask(call.mask, L, S, q.device)
    args = (qd.contiguous(), kd.contiguous(), v.contiguous())
    kw = dict(score_mod=score_mod, block_mask=bm, scale=call.scale, enable_gqa=call.groups > 1)
    if q.device.type == "cpu":  # the compiled CPU kernel returns no lse (torch 2.13: "return_lse is not supported yet")
        out = _compiled()(*args, **kw)
        return BackendResult(out.to(v.dtype), None, None, None, [])
    out, aux = _compiled()(*args, **kw, return_aux=AuxRequest(lse=True))
    return BackendResult(out.to(v.dtype), None, aux.lse, torch.isneginf(aux.lse).sum(), [])


def estimate(call: AttentionCall) -> cost.Estimate:
    """CPU: time from the measured rate over the pairs of non-empty 128 × 128 tiles, and the output
    and lse as memory (flex_race.json measured the output's 32.0 MiB as its whole peak). Other
    devices: infinite (no rate comparable with the other backends' there), so ``auto`` never picks it on them."""
    B, H, _, L, S, E, Ev = cost.dims(call)
    if call.q.device.type != "cpu":
        why = f"compiled FlexAttention (no rate comparable with the others on {call.q.device.type})"
        return {"time_s": float("inf"), "bytes": float("inf"), "path": why}
    from ..core.tiles import kept_fraction

    kept, _ = kept_fraction(call.mask, L, S, BLOCK, BLOCK)
    pairs = B * H * L * S * kept
    time_s = _CALL_OVERHEAD_S + 2 * pairs * (E + Ev) / _CPU_FLOPS
    time_s += pairs * cost.bias_ops(call.bias) / cost.RATES["elem_per_s"]
    nbytes = B * H * L * (Ev * call.q.element_size() + 4)  # output and lse
    return {"time_s": time_s, "bytes": float(nbytes), "path": "compiled FlexAttention"}
