"""attnkit as a Hugging Face ``transformers`` attention implementation.

transformers (≥ 4.48) looks every attention function up in one registry,
``AttentionInterface`` (https://huggingface.co/docs/transformers/attention_interface), with the
signature ``fn(module, query, key, value, attention_mask, scaling=, dropout=, **kwargs) ->
(attn_output (B, L, H, Ev), attn_weights (B, H, L, S) | None)``, and builds the mask for a name
through a second registry, ``AttentionMaskInterface``. :func:`register` puts attnkit in both, so::

    import attnkit.integrations.hf as akhf
    akhf.register()                                   # name "attnkit", backend "auto"
    model = AutoModel.from_pretrained(path, attn_implementation="attnkit")

runs every attention call of the model through :func:`attnkit.attention` (auto dispatch,
fully-masked-row safety, the capture hook) with no change to the model code.

How Hugging Face's mask arrives and what attnkit makes of it (attnkit's polarity is True = may attend):

* ``None`` — no mask; if the module is causal (``is_causal`` kwarg or ``module.is_causal``) and
  L > 1, a bottom-right causal mask (HF only leaves it out when L == S, where top-left is the same).
* bool (B|1, 1|H, L, S), True = attend — the mask we register (``sdpa_mask``) builds this; used as is,
  or as a (B, S) key-padding mask when every row is the same (cheaper, tile-skippable).
* float, additive — masked entries are ``-inf`` or the dtype's most negative value (HF's fill
  ``torch.finfo(dtype).min``); they become mask entries, never added as huge numbers, and the rest is
  an additive bias (dropped when it is all zeros). A fully masked row therefore gives zeros, not the
  uniform average HF's eager path produces.

``output_attentions=True`` makes the call return weights (a weight-returning backend runs); to see
weights while the model keeps its fused backend, use :func:`attnkit.inspect.capture`.

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E / Ev head dims.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from ..core import biases as Bi
from ..core import hooks
from ..core import masks as M
from ..core.call import attention

DEFAULT_NAME = "attnkit"


def convert_hf_mask(attention_mask: torch.Tensor | None, S: int) -> tuple[M.Mask | None, Bi.ScoreModifier | None]:
    """Hugging Face 4-D mask → (attnkit Mask or None, additive bias or None). See the module docstring."""
    if attention_mask is None:
        return None, None
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 4:
        raise ValueError(
            f"attention_mask from transformers must be a 4-D (B, 1|H, L, S) tensor or None, got "
            f"{tuple(getattr(attention_mask, 'shape', ())) or type(attention_mask).__name__}; register attnkit "
            "with attnkit.integrations.hf.register() so transformers builds the mask attnkit expects"
        )
    am = attention_mask[..., :S]  # HF may hand a mask built for a longer static cache
    if am.dtype == torch.bool:
        allowed = am
        bias = None
    elif am.is_floating_point():
        allowed = ~(torch.isneginf(am) | (am <= torch.finfo(am.dtype).min))
        values = torch.where(allowed, am, torch.zeros_like(am))
        bias = Bi.TensorBias(values) if bool(values.any()) else None
    else:
        raise TypeError(f"attention_mask must be bool (True = attend) or additive float, got {am.dtype}")
    if bool(allowed.all()):
        return None, bias
    if allowed.shape[1] == 1 and bool((allowed == allowed[:, :, :1]).all()):
        return M.KeyPaddingMask(allowed[:, 0, 0, :].contiguous()), bias  # same row everywhere: key padding
    return M.TensorMask(allowed), bias


def _softcap_mod(cap: float) -> Bi.ScoreModifier:
    # Gemma-2 style soft-capping, applied like HF eager: after scaling, before the mask
    return Bi.ScoreMod(lambda score, b, h, q, kv: torch.tanh(score / cap) * cap)


def make_attention_forward(backend: str = "auto") -> Callable:
    """An ``AttentionInterface`` function that runs attnkit with ``backend``."""

    def attnkit_attention_forward(
        module: nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        scaling: float | None = None,
        dropout: float = 0.0,
        is_causal: bool | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """query (B, H, L, E), key (B, Hkv, S, E), value (B, Hkv, S, Ev) → ((B, L, H, Ev), weights | None)."""
        if kwargs.get("s_aux") is not None:
            raise ValueError("attention sinks (s_aux) are not supported by the attnkit integration; use attn_implementation='eager'")
        if kwargs.get("sliding_window") is not None and attention_mask is None and query.shape[2] > 1:
            raise ValueError(
                "sliding_window without a mask: register attnkit with attnkit.integrations.hf.register() so "
                "transformers builds the window mask"
            )
        L, S = query.shape[2], key.shape[2]
        mask, bias = convert_hf_mask(attention_mask, S)
        causal = is_causal if is_causal is not None else getattr(module, "is_causal", False)
        if mask is None and attention_mask is None and causal and L > 1:
            mask = M.causal("bottom_right")
        mods = []
        softcap = kwargs.get("softcap")
        if softcap is not None:
            mods.append(_softcap_mod(float(softcap)))
        pos_bias = kwargs.get("position_bias")
        if pos_bias is not None:
            mods.append(Bi.TensorBias(pos_bias[..., :S]))
        if bias is not None:
            mods.append(bias)
        want = bool(kwargs.get("output_attentions", False))
        with hooks.scope(module):  # lets attnkit.inspect.capture name the layer
            res = attention(
                query, key, value,
                mask=mask,
                bias=mods if len(mods) > 1 else (mods[0] if mods else None),
                scale=scaling,
                dropout_p=dropout if module.training else 0.0,
                backend=backend,
                return_weights=want,
            )
        return res.out.transpose(1, 2).contiguous(), res.weights  # (B, L, H, Ev)

    attnkit_attention_forward.__qualname__ = f"attnkit_attention_forward[{backend}]"
    return attnkit_attention_forward


def register(name: str = DEFAULT_NAME, backend: str = "auto") -> str:
    """Register attnkit in transformers' attention and mask interfaces; returns ``name``.

    Use the name as ``attn_implementation=name`` (``from_pretrained``, or ``model.set_attn_implementation``).
    ``backend`` forces one attnkit backend for that name (``"auto"`` dispatches per call).
    """
    try:
        from transformers import AttentionInterface
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(f"the Hugging Face integration needs transformers >= 4.48 (AttentionInterface); {e}") from None
    try:  # transformers >= 4.53 builds masks per implementation; older versions hand an additive float mask
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError:  # pragma: no cover - depends on the environment
        AttentionMaskInterface = sdpa_mask = None
    if not isinstance(name, str) or not name or name in {"eager", "sdpa", "flex_attention"} or name.startswith("flash_attention"):
        raise ValueError(f"name must be a new non-empty string (not a built-in transformers implementation), got {name!r}")
    if not isinstance(backend, str):
        raise TypeError(f"backend must be 'auto' or a registered attnkit backend name, got {type(backend).__name__}")
    if backend != "auto":
        from ..core import registry

        registry.get(backend)  # raises ValueError listing the valid names
    AttentionInterface.register(name, make_attention_forward(backend))
    # sdpa_mask: a bool mask with True = attend, or None when no mask is needed (is_causal / no padding)
    if AttentionMaskInterface is not None:
        AttentionMaskInterface.register(name, sdpa_mask)
    return name
