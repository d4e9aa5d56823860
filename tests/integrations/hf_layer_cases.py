"""Tiny random Hugging Face attention layers (no downloads) and eager references for them.

Each case builds one attention module of a transformers 5.x model from ``AutoConfig.for_model``
with small widths, nudges every parameter (norm gains, sinks and λ vectors start at constants
that would hide a mistake), and :func:`hf_forward` runs it in eager mode with the model's own
rotary embedding and an explicit causal (and sliding-window) mask.
"""

from __future__ import annotations

import sys

import torch
import transformers as T

_LM = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, vocab_size=50,
           attention_bias=False, rms_norm_eps=1e-6)
_YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16,
         "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1}
_MLA = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=16, qk_nope_head_dim=8,
            qk_rope_head_dim=4, v_head_dim=6, max_position_embeddings=64, vocab_size=50)

# (id, model_type, config kwargs, layer index)
CASES = [
    ("deepseek_v3", "deepseek_v3", dict(_MLA, q_lora_rank=12, rope_interleave=True), 0),
    ("deepseek_v3_half_yarn", "deepseek_v3", dict(_MLA, q_lora_rank=None, rope_interleave=False, rope_parameters=_YARN), 0),
    ("deepseek_v3_wide", "deepseek_v3", dict(_MLA, hidden_size=48, num_attention_heads=6, num_key_value_heads=6,
                                             kv_lora_rank=24, qk_rope_head_dim=8, q_lora_rank=16), 0),
    ("deepseek_v3_bias", "deepseek_v3", dict(_MLA, q_lora_rank=12, attention_bias=True), 0),
    ("deepseek_v2", "deepseek_v2", dict(_MLA, q_lora_rank=None), 0),
    ("deepseek_v2_yarn", "deepseek_v2", dict(_MLA, q_lora_rank=12, rope_parameters=_YARN), 0),
    ("llama", "llama", dict(_LM), 0),
    ("llama_wide_llama3", "llama", dict(_LM, hidden_size=48, num_attention_heads=6, num_key_value_heads=3, rope_parameters={
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16}), 0),
    ("qwen3", "qwen3", dict(_LM, head_dim=8), 0),
    ("mistral_window", "mistral", dict(_LM, sliding_window=3), 0),
    ("qwen3_next_partial", "qwen3_next", dict(_LM, head_dim=8, partial_rotary_factor=0.5), 3),
    ("qwen3_next_bias", "qwen3_next", dict(_LM, head_dim=8, attention_bias=True), 3),
    ("diffllama", "diffllama", dict(_LM), 1),
    ("gpt_oss_sliding", "gpt_oss", dict(_LM, head_dim=8, sliding_window=3, layer_types=["sliding_attention", "full_attention"]), 0),
    ("gpt_oss_full", "gpt_oss", dict(_LM, head_dim=8, sliding_window=3, layer_types=["sliding_attention", "full_attention"]), 1),
    ("gemma3_sliding", "gemma3_text", dict(_LM, head_dim=8, sliding_window=3, query_pre_attn_scalar=12, attn_logit_softcapping=2.0,
                                           layer_types=["sliding_attention", "full_attention"]), 0),
    ("gemma2_softcap", "gemma2", dict(_LM, head_dim=8, sliding_window=3, query_pre_attn_scalar=12, attn_logit_softcapping=2.0,
                                      layer_types=["sliding_attention", "full_attention"]), 0),
    ("gemma3_full", "gemma3_text", dict(_LM, head_dim=8, sliding_window=3, query_pre_attn_scalar=12,
                                        layer_types=["sliding_attention", "full_attention"]), 1),
]
IDS = [c[0] for c in CASES]


def build(case) -> torch.nn.Module:
    """The case's attention module in eager mode, float32, every parameter nudged off its init."""
    _, model_type, kw, layer = case
    cfg = T.AutoConfig.for_model(model_type, **kw)
    cfg._attn_implementation = "eager"
    mod = sys.modules[T.AutoModel._model_mapping[type(cfg)].__module__]
    cls = next(v for k, v in vars(mod).items() if k.endswith("Attention") and k.lower().startswith(model_type.split("_text")[0].replace("_", "")))
    torch.manual_seed(0)
    module = cls(cfg, layer).eval()
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return module


def hf_forward(module, x: torch.Tensor) -> torch.Tensor:
    """The module's eager output for x (B, L, D) at positions 0..L-1, causal (and windowed when it slides)."""
    B, L, _ = x.shape
    mod = sys.modules[type(module).__module__]
    rope = getattr(mod, type(module).__name__.replace("Attention", "RotaryEmbedding"))(config=module.config)
    pos = torch.arange(L)[None].expand(B, L)
    layer_type = getattr(module, "layer_type", None)
    pe = rope(x, pos, layer_type) if hasattr(rope, "layer_types") else rope(x, pos)
    q, k = torch.arange(L)[:, None], torch.arange(L)[None, :]
    allowed = k <= q
    window = getattr(module, "sliding_window", getattr(module.config, "sliding_window", None))
    if window is not None:
        allowed = allowed & (q - k < window)
    mask = torch.zeros(L, L, dtype=x.dtype).masked_fill(~allowed, float("-inf"))[None, None]
    return module(hidden_states=x, position_embeddings=pe, attention_mask=mask)[0]
