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
fully-masked-row safety, the capture hook) with no change to the model code. A model whose
attention layers never call that registry (Bloom, GPT-Neo, DeBERTa, …) is refused at load with a
ValueError instead of running wrong (:mod:`attnkit.integrations.hf_routing`).

How Hugging Face's mask arrives and what attnkit makes of it (attnkit's polarity is True = may attend):

* ``None`` — no mask; if the module is causal (``is_causal`` kwarg or ``module.is_causal``) and
  L > 1, a bottom-right causal mask (HF only leaves it out when L == S, where top-left is the same);
  with a ``sliding_window`` kwarg, that window (HF leaves the mask out when the window cannot bind).
* bool (B|1, 1|H, L, S), True = attend — the mask we register (``sdpa_mask``) builds this; used as is,
  or as a (B, S) key-padding mask when every row is the same (cheaper, tile-skippable).
* float, additive — masked entries are ``-inf`` or the dtype's most negative value (HF's fill
  ``torch.finfo(dtype).min``); they become mask entries, never added as huge numbers, and the rest is
  an additive bias (dropped when it is all zeros). A fully masked row therefore gives zeros, not the
  uniform average HF's eager implementation produces.

Attention sinks (gpt-oss's ``s_aux``, Inkling-2's ``sinks``: one more logit per query and head, with
a zero value) go to :func:`attnkit.attention` as ``sinks=`` (:mod:`attnkit.core.sinks`): forward and
gradients, the sinks' own included, on every backend whose log-sum-exp is differentiable (``auto``
picks one). Any other argument a model's own ``eager_attention_forward`` reads and attnkit does not
implement raises a ValueError rather than being dropped.

``output_attentions=True`` — passed down, collected by transformers' ``@capture_outputs`` hooks, or
given to a layer that keeps it (Falcon), read by forward hooks on that layer — makes the call return
weights, as eager does (a weight-returning backend runs; :mod:`attnkit.integrations.hf_weights`); to
see weights while the model keeps its fused backend, use :func:`attnkit.inspect.capture`.

Padding-free batches (``DataCollatorWithFlattening``'s ``cu_seq_lens_q/k``, or ``position_ids`` that
restart) run per sequence through :func:`attnkit.core.varlen.varlen_attention`
(:mod:`attnkit.integrations.hf_packed`): no score between two packed sequences is computed.

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E / Ev head dims.
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Callable

import torch
from torch import nn

from ..core import biases as Bi
from ..core import hooks
from ..core import masks as M
from ..core.call import attention
from . import hf_packed, hf_weights
from .hf_layers import from_hf_attention  # noqa: F401  (one layer out of a model, as an attnkit module)
from .hf_sink_cache import SinkCache  # noqa: F401  (StreamingLLM's cache as a transformers Cache)

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


def _window_mask(window: object, causal: bool) -> M.Mask:
    """transformers' ``sliding_window`` w as an attnkit mask: causal, the last w keys
    (``kv > q - w``); bidirectional (ModernBERT), ``|q - kv| < w``."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(
            f"sliding_window from transformers must be a positive int, got {window!r}; load this model with "
            "attn_implementation='eager' and report the architecture to attnkit"
        )
    return M.sliding_window(left=window - 1, right=0 if causal else window - 1)


def _softcap_mod(cap: float) -> Bi.ScoreModifier:
    # Gemma-2 style soft-capping (attnkit.biases.softcap), applied like HF eager: after scaling, before the mask
    return Bi.softcap(cap)


# what attnkit_attention_forward does something with; anything else a model's own eager function reads is
# a semantic it would silently drop
_HANDLED = frozenset({"module", "query", "key", "value", "attention_mask", "scaling", "dropout", "is_causal",
                      "softcap", "sliding_window", "position_bias", "output_attentions", "sinks", "s_aux"})


@functools.lru_cache(maxsize=None)
def _eager_only_args(module_cls: type) -> frozenset[str]:
    """Named arguments of the ``eager_attention_forward`` next to ``module_cls`` that attnkit does not handle."""
    fn = getattr(sys.modules.get(module_cls.__module__), "eager_attention_forward", None)
    try:
        params = inspect.signature(fn).parameters if callable(fn) else {}
    except (TypeError, ValueError):  # pragma: no cover - builtins or odd callables
        return frozenset()
    named = {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return frozenset(named - _HANDLED)


def _reject_unhandled(module: nn.Module, kwargs: dict) -> None:
    """Raise when the model passes something its eager attention uses and attnkit would ignore."""
    extra = [n for n in sorted(_eager_only_args(type(module))) if kwargs.get(n) is not None]
    if extra:
        raise ValueError(
            f"{type(module).__name__} passes {extra} to its attention function; the attnkit integration does not "
            "implement that and would silently leave it out. Load this model with "
            "attn_implementation='eager' or 'sdpa'."
        )


def _sink_logits(sink: torch.Tensor, B: int, H: int, L: int) -> torch.Tensor:
    """Attention-sink logits as attnkit's ``sinks=`` takes them: gpt-oss passes ``s_aux`` (H,), kept as is,
    Inkling-2 ``sinks`` (B, H, L, 1), given as (B|1, H, L|1)."""
    if sink.dim() == 1 and sink.shape[0] == H:
        return sink
    if sink.dim() == 4 and (sink.shape[1], sink.shape[3]) == (H, 1) and sink.shape[0] in (1, B) and sink.shape[2] in (1, L):
        return sink[..., 0]
    raise ValueError(
        f"attention sinks must be (H,) = ({H},) or (B|1, H, L|1, 1) = ({B}|1, {H}, {L}|1, 1), got {tuple(sink.shape)}; "
        "load this model with attn_implementation='eager' and report the architecture to attnkit"
    )


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
        _reject_unhandled(module, kwargs)
        offsets = hf_packed.packed_offsets(query, key, attention_mask, kwargs)
        if offsets is not None:  # a padding-free batch: attention per packed sequence (see hf_packed)
            causal = is_causal if is_causal is not None else getattr(module, "is_causal", False)
            return hf_packed.packed_forward(
                module, query, key, value, offsets, scaling=scaling, dropout=dropout, causal=causal, kwargs=kwargs, backend=backend,
            )
        L, S = query.shape[2], key.shape[2]
        mask, bias = convert_hf_mask(attention_mask, S)
        causal = is_causal if is_causal is not None else getattr(module, "is_causal", False)
        window = kwargs.get("sliding_window")
        if attention_mask is None and window is not None:
            # transformers leaves the mask out when the window cannot bind (S < window, no padding), as for
            # sdpa; applying the window anyway is then a no-op, and right if a caller left it out otherwise
            mask = _window_mask(window, causal)
        elif mask is None and attention_mask is None and causal and L > 1:
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
        want = hf_weights.wants_weights(kwargs)
        sink = kwargs.get("s_aux") if kwargs.get("s_aux") is not None else kwargs.get("sinks")
        if sink is not None:
            sink = _sink_logits(sink, query.shape[0], query.shape[1], L)
        with hooks.scope(module):  # lets attnkit.inspect.capture name the layer
            res = attention(
                query, key, value,
                mask=mask,
                # in eager's order (the cap, then position bias, then the mask's values): not a list,
                # which would move the cap after the additive parts
                bias=Bi.SumOfModifiers(mods) if len(mods) > 1 else (mods[0] if mods else None),
                scale=scaling,
                dropout_p=dropout if module.training else 0.0,
                backend=backend,
                return_weights=want,
                sinks=sink,
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
    # transformers dispatches on substrings ("sdpa" in name runs its sdpa checks, "flash"/"flex" likewise)
    if not isinstance(name, str) or not name or any(w in name for w in ("eager", "sdpa", "flex", "flash", "paged|")):
        raise ValueError(
            f"name must be a new non-empty string without 'eager', 'sdpa', 'flex', 'flash' or 'paged|' (transformers "
            f"gives those substrings their own meaning), got {name!r}"
        )
    if not isinstance(backend, str):
        raise TypeError(f"backend must be 'auto' or a registered attnkit backend name, got {type(backend).__name__}")
    if backend != "auto":
        from ..core import registry

        registry.get(backend)  # raises ValueError listing the valid names
    from . import hf_routing

    hf_routing.install(name)  # models that would ignore the name fail at load (see hf_routing)
    AttentionInterface.register(name, make_attention_forward(backend))
    # sdpa_mask: a bool mask with True = attend, or None when no mask is needed (is_causal / no padding)
    if AttentionMaskInterface is not None:
        AttentionMaskInterface.register(name, sdpa_mask)
    return name
