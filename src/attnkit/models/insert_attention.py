"""Insert an attention module after a named stage of any CNN — the "MHSA before a feature level"
pattern of detectors (e.g. YOLO variants that add self-attention on the P5 map for global context).

``insert_attention(model, "layer4", "mhsa", input_shape=(1, 3, 640, 640))`` replaces the submodule
``layer4`` by ``Sequential(layer4, MHSA2d(C))``. The channel count C is not asked for: a dry run
reads it from the stage's output. The dry run uses meta tensors (shapes only, no arithmetic, no
memory: a 640-pixel ResNet-50 pass costs microseconds) via ``torch.func.functional_call``, so the
model is neither copied nor moved; a model whose forward cannot run on meta tensors (data-dependent
control flow, ``.item()``) is dry-run once on CPU zeros instead. The run stops at the stage.

Shape legend: B batch, C channels, H height, W width.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import nn

from ..modules.create_attn import create_attn


class _StopDryRun(Exception):
    """Raised by the hook to end the dry run as soon as the stage's output is known."""


def stage_output_shape(model: nn.Module, name: str, input_shape: Sequence[int]) -> torch.Size:
    """The shape of submodule ``name``'s output for an input of ``input_shape`` (e.g. (1, 3, 224, 224))."""
    modules = dict(model.named_modules())
    if name not in modules or name == "":
        options = [n for n, _ in model.named_children()]
        raise ValueError(f"model has no submodule {name!r}; its top-level stages are {options} (dotted names reach deeper)")
    if not isinstance(input_shape, (tuple, list, torch.Size)) or not all(isinstance(n, int) and n > 0 for n in input_shape):
        raise ValueError(f"input_shape must be a tuple of positive ints such as (1, 3, 224, 224), got {input_shape!r}")
    seen: list[torch.Size] = []

    def hook(mod, args, out):
        if not isinstance(out, torch.Tensor) or out.dim() != 4:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(f"submodule {name!r} must output a feature map (B, C, H, W) to take attention after it, got {got}")
        seen.append(out.shape)
        raise _StopDryRun

    handle = modules[name].register_forward_hook(hook)
    was_training = model.training
    model.eval()  # BatchNorm must not update running stats during the dry run
    try:
        for device in ("meta", "cpu"):
            state = {k: torch.empty_like(t, device=device) if device == "meta" else t for k, t in _tensors(model)}
            dtype = next((t.dtype for _, t in _tensors(model) if t.is_floating_point()), torch.float32)
            x = torch.zeros(tuple(input_shape), device=device if device == "meta" else _device(model), dtype=dtype)
            try:
                with torch.no_grad():
                    torch.func.functional_call(model, state, (x,))
            except _StopDryRun:
                return seen[0]
            except ValueError:
                raise
            except Exception:  # noqa: BLE001 -- a forward that cannot run on meta: retry on real zeros
                if device == "cpu":
                    raise
        raise ValueError(f"the forward pass never reached submodule {name!r}; insert attention after a stage that forward() calls")
    finally:
        handle.remove()
        model.train(was_training)


def _tensors(model: nn.Module):
    yield from model.named_parameters()
    yield from model.named_buffers()


def _device(model: nn.Module) -> torch.device:
    return next((t.device for _, t in _tensors(model)), torch.device("cpu"))


def insert_attention(
    model: nn.Module,
    after: str,
    attn: str | Callable[[int], nn.Module],
    *,
    input_shape: Sequence[int],
    **attn_kwargs,
) -> nn.Module:
    """Put ``attn`` (a :func:`create_attn` name, or a callable ``channels -> module``) after submodule
    ``after``; returns the inserted attention module. The model is changed in place; the new module
    lives on the stage's device and dtype."""
    shape = stage_output_shape(model, after, input_shape)
    channels = shape[1]
    if isinstance(attn, str):
        module = create_attn(attn, channels, **attn_kwargs)
    elif callable(attn):
        if attn_kwargs:
            raise ValueError("keyword options only apply to a named attn; put them in your callable")
        module = attn(channels)
    else:
        raise TypeError(f"attn must be a name such as 'mhsa' or a callable channels -> nn.Module, got {type(attn).__name__}")
    stage = model.get_submodule(after)
    ref = next(iter(stage.parameters()), None)
    if ref is not None and ref.device.type != "meta":
        module = module.to(device=ref.device, dtype=ref.dtype if ref.is_floating_point() else None)
    parent_name, _, child = after.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, nn.Sequential(stage, module))
    return module


__all__ = ["insert_attention", "stage_output_shape"]
