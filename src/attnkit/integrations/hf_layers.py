"""One Hugging Face attention layer as an attnkit module: :func:`from_hf_attention`.

The bridge in :mod:`attnkit.integrations.hf` runs a whole model's attention *calls* through
attnkit; this file takes one layer out of a model so it can be held, inspected and decoded with
on its own. The returned module computes the layer's maths from its own parts:

===========================  =================================================================
DeepseekV2/V3Attention       :class:`~attnkit.modules.latent_attention.MultiHeadLatentAttention`
                             (latent cache, absorbed decoding; interleaved rotary, YaRN mscale)
DiffLlamaAttention           :class:`~attnkit.modules.differential_attention.DifferentialAttention`
Qwen3NextAttention           :class:`~attnkit.modules.decoder_attention.DecoderAttention` with an
                             elementwise :class:`~attnkit.modules.gated_attention.OutputGate`
                             (the gate rows of q_proj), q/k norm, partial rotary
GptOssAttention              ``DecoderAttention`` with sinks (and a window on sliding layers)
Gemma2Attention              ``DecoderAttention`` with window, logit softcap, its own scale
Gemma3Attention              ``DecoderAttention`` with q/k norm, window, its own scale (its config's
                             ``attn_logit_softcapping`` is not applied by transformers, nor here)
Llama/Qwen3/MistralAttention ``DecoderAttention`` (Qwen3: q/k norm; Mistral: window)
===========================  =================================================================

**Weights are copied**, not shared: the new module owns fresh tensors (Qwen3-Next's fused
query-and-gate projection has to be split anyway), so training or editing one leaves the other
as it was. Copies keep the source's dtype and device.

The rotary table comes from the model's own ``*RotaryEmbedding`` class built from the layer's
config, so every ``rope_type`` with fixed frequencies (default, linear, YaRN, LLaMA-3) and
``partial_rotary_factor`` give the same angles and attention factor as the model; DeepSeek's
``rope_interleave`` selects the interleaved layout. Frequencies that change with the sequence
length (``dynamic``, ``longrope``) are refused with a ValueError.

Every returned module is causal and has ``forward(x, *, positions=None, cache=None,
need_weights=False) -> (out, weights | None)`` and ``new_cache()`` (with ``nbytes``).

Shape legend: x (B, L, D); positions (L,) or (B, L); out (B, L, D).
"""

from __future__ import annotations

import sys

import torch
from torch import nn

from ..modules.decoder_attention import DecoderAttention
from ..modules.differential_attention import DifferentialAttention
from ..modules.frequency_rotary import FrequencyRotary
from ..modules.gated_attention import OutputGate
from ..modules.latent_attention import MultiHeadLatentAttention
from ..modules.rms_norm import RMSNorm

STATIC_ROPE = ("default", "linear", "yarn", "llama3")


def _rotary(module: nn.Module, interleaved: bool = False) -> FrequencyRotary:
    """The layer's rotary table, from the ``<Model>RotaryEmbedding`` class next to its attention class."""
    cfg = module.config
    layer_type = getattr(module, "layer_type", None)
    params = getattr(cfg, "rope_parameters", None) or {}
    params = params.get(layer_type, params) if layer_type is not None else params
    kind = params.get("rope_type", "default")
    if kind not in STATIC_ROPE:
        raise ValueError(f"{type(module).__name__} uses rope_type={kind!r}, whose frequencies change with the sequence length; "
                         f"from_hf_attention supports {list(STATIC_ROPE)}")
    name = type(module).__name__.replace("Attention", "RotaryEmbedding")
    rope = getattr(sys.modules[type(module).__module__], name)(config=cfg)
    if layer_type is not None and hasattr(rope, f"{layer_type}_inv_freq"):
        inv, scaling = getattr(rope, f"{layer_type}_inv_freq"), getattr(rope, f"{layer_type}_attention_scaling")
    else:
        inv, scaling = rope.inv_freq, rope.attention_scaling
    return FrequencyRotary(inv, scaling=scaling, interleaved=interleaved)


def _norm_like(norm: nn.Module, offset: float) -> RMSNorm:
    """An attnkit RMSNorm with the same eps and a copy of the gain of a transformers RMSNorm."""
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6))
    w = norm.weight
    out = RMSNorm(w.shape[0], eps=eps, offset=offset, device=w.device, dtype=w.dtype)
    out.weight.data.copy_(w.detach())
    return out


def _copy(dst: nn.Linear, src: nn.Linear) -> None:
    dst.weight.data.copy_(src.weight.detach())
    if src.bias is not None:
        dst.bias.data.copy_(src.bias.detach())


def _like(src: nn.Linear) -> dict:
    return dict(device=src.weight.device, dtype=src.weight.dtype)


def _from_deepseek(module: nn.Module) -> MultiHeadLatentAttention:
    cfg = module.config
    interleaved = getattr(cfg, "rope_interleave", True)  # V2 always rotates adjacent pairs (complex multiply)
    mla = MultiHeadLatentAttention(
        cfg.hidden_size, module.num_heads, kv_lora_rank=cfg.kv_lora_rank, qk_nope_dim=cfg.qk_nope_head_dim,
        qk_rope_dim=cfg.qk_rope_head_dim, v_dim=cfg.v_head_dim, q_lora_rank=cfg.q_lora_rank,
        rotary=_rotary(module, interleaved), scale=module.scaling, bias=bool(cfg.attention_bias),
        eps=module.kv_a_layernorm.variance_epsilon, **_like(module.o_proj),
    )
    if cfg.q_lora_rank is None:
        _copy(mla.q_proj, module.q_proj)
    else:
        _copy(mla.q_proj[0], module.q_a_proj)
        mla.q_proj[1] = _norm_like(module.q_a_layernorm, 0)
        _copy(mla.q_proj[2], module.q_b_proj)
    _copy(mla.kv_a_proj, module.kv_a_proj_with_mqa)
    mla.kv_norm = _norm_like(module.kv_a_layernorm, 0)
    _copy(mla.kv_b_proj, module.kv_b_proj)
    _copy(mla.o_proj, module.o_proj)
    return mla


def _decoder_kwargs(module: nn.Module, offset: float) -> dict:
    """What the LLaMA-like layers share: widths, bias, rotary, scale, window, q/k norms."""
    cfg = module.config
    kw = dict(kv_heads=cfg.num_key_value_heads, head_dim=module.head_dim, bias=module.q_proj.bias is not None,
              rotary=_rotary(module), scale=module.scaling, window=_window(module), **_like(module.o_proj))
    if getattr(module, "q_norm", None) is not None:
        kw.update(q_norm=_norm_like(module.q_norm, offset), k_norm=_norm_like(module.k_norm, offset))
    return kw


def _window(module: nn.Module) -> int | None:
    """The layer's sliding window: its own attribute (per-layer types), else Mistral's config-wide one."""
    if hasattr(module, "sliding_window"):
        return module.sliding_window
    return getattr(module.config, "sliding_window", None) if type(module).__name__ == "MistralAttention" else None


def _copy_qkvo(layer: DecoderAttention, module: nn.Module) -> DecoderAttention:
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        _copy(getattr(layer, name), getattr(module, name))
    return layer


def _from_llama_like(module: nn.Module, offset: float = 0.0, **extra) -> DecoderAttention:
    if not getattr(module, "is_causal", True):
        raise ValueError(f"{type(module).__name__} is bidirectional here (use_bidirectional_attention); from_hf_attention builds causal layers only")
    layer = DecoderAttention(module.config.hidden_size, module.config.num_attention_heads, **_decoder_kwargs(module, offset), **extra)
    if layer.sinks is not None:
        layer.sinks.data.copy_(module.sinks.detach())
    return _copy_qkvo(layer, module)


def _from_qwen3_next(module: nn.Module) -> DecoderAttention:
    cfg = module.config
    H, E = cfg.num_attention_heads, module.head_dim
    gate = OutputGate(cfg.hidden_size, H, E, kind="elementwise", bias=module.q_proj.bias is not None, **_like(module.o_proj))
    layer = DecoderAttention(cfg.hidden_size, H, gate=gate, **_decoder_kwargs(module, 1.0))
    for name in ("k_proj", "v_proj", "o_proj"):
        _copy(getattr(layer, name), getattr(module, name))
    # q_proj rows are per head [query (E) | gate (E)]: split them into the query and the gate projections
    w = module.q_proj.weight.detach().view(H, 2, E, -1)
    layer.q_proj.weight.data.copy_(w[:, 0].reshape(H * E, -1))
    gate.proj.weight.data.copy_(w[:, 1].reshape(H * E, -1))
    if module.q_proj.bias is not None:
        b = module.q_proj.bias.detach().view(H, 2, E)
        layer.q_proj.bias.data.copy_(b[:, 0].reshape(-1))
        gate.proj.bias.data.copy_(b[:, 1].reshape(-1))
    return layer


def _from_diffllama(module: nn.Module) -> DifferentialAttention:
    cfg = module.config
    kw = _decoder_kwargs(module, 0.0)
    layer = DifferentialAttention(cfg.hidden_size, cfg.num_attention_heads, depth=0, eps=module.groupnorm.eps, **kw)
    layer.lambda_init = module.lambda_init  # DiffLlama's own λ_init(layer_idx)
    for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
        getattr(layer, name).data.copy_(getattr(module, name).detach())
    return _copy_qkvo(layer, module)


_CONVERTERS = {
    "DeepseekV2Attention": _from_deepseek,
    "DeepseekV3Attention": _from_deepseek,
    "DiffLlamaAttention": _from_diffllama,
    "Qwen3NextAttention": _from_qwen3_next,
    "GptOssAttention": lambda m: _from_llama_like(m, sinks=True),
    "Gemma2Attention": lambda m: _from_llama_like(m, 1.0, softcap=m.attn_logit_softcapping),
    # Gemma 3 keeps attn_logit_softcapping in its config but its attention never applies it
    "Gemma3Attention": lambda m: _from_llama_like(m, 1.0),
    "LlamaAttention": _from_llama_like,
    "Qwen3Attention": _from_llama_like,
    "MistralAttention": _from_llama_like,
}
SUPPORTED = tuple(_CONVERTERS)


def from_hf_attention(module: nn.Module) -> nn.Module:
    """The attnkit module computing what the Hugging Face attention ``module`` computes, with copies of its weights.

    >>> layer = from_hf_attention(model.model.layers[0].self_attn)
    >>> cache = layer.new_cache()
    >>> out, _ = layer(x, cache=cache)            # x (B, L, D)
    """
    name = type(module).__name__
    if name not in _CONVERTERS:
        raise TypeError(f"from_hf_attention does not know {name}; supported: {', '.join(SUPPORTED)}")
    with torch.no_grad():
        return _CONVERTERS[name](module)
