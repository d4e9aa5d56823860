"""attnkit.modules: attention layers as ``torch.nn.Module`` s, one concept per file.

The public names below load their file on first use (``attnkit.modules.CBAM``), so importing
attnkit stays light; ``from attnkit.modules.cbam import CBAM`` works as well.

=======================  =====================================================================
text / sequences         MultiHeadAttention, RotaryEmbedding, TransformerEncoderLayer,
                         TransformerDecoderLayer, SinusoidalPositionalEncoding,
                         LearnedPositionalEncoding
today's decoder layers   MultiHeadLatentAttention, LatentCache, DecoderAttention, OutputGate,
                         DifferentialAttention, FrequencyRotary, RMSNorm
RNN seq2seq              BahdanauAttention, LuongAttention, make_seq2seq_attention
vision (B, C, H, W)      SqueezeExcite, ECA, CBAM, ChannelAttention, SpatialAttention, MHSA2d,
                         create_attn
time series              TemporalAttention
query over memory        MemoryAttentionOutput, what seq2seq and temporal attention return
KV caches                DynamicCache, StaticCache, SlidingWindowCache, CrossAttentionCache
=======================  =====================================================================
"""

from __future__ import annotations

from .._lazy import lazy_exports

# public name -> the file that defines it (one concept per file)
_EXPORTS = {
    "MultiHeadAttention": "multihead",
    "RotaryEmbedding": "rotary",
    "TransformerEncoderLayer": "transformer_layers",
    "TransformerDecoderLayer": "transformer_layers",
    "SinusoidalPositionalEncoding": "positional",
    "LearnedPositionalEncoding": "positional",
    "make_positional_encoding": "positional",
    "BahdanauAttention": "seq2seq_attention",
    "LuongAttention": "seq2seq_attention",
    "make_seq2seq_attention": "seq2seq_attention",
    "SqueezeExcite": "squeeze_excite",
    "ECA": "eca",
    "eca_kernel_size": "eca",
    "CBAM": "cbam",
    "ChannelAttention": "cbam",
    "SpatialAttention": "cbam",
    "MHSA2d": "mhsa2d",
    "create_attn": "create_attn",
    "TemporalAttention": "temporal_attention",
    "MemoryAttentionOutput": "memory_output",
    "DynamicCache": "cache_kinds",
    "StaticCache": "cache_kinds",
    "SlidingWindowCache": "cache_kinds",
    "CrossAttentionCache": "cache_kinds",
    "mha_from_torch": "torch_interop",
    "MultiHeadLatentAttention": "latent_attention",
    "LatentCache": "latent_cache",
    "DecoderAttention": "decoder_attention",
    "OutputGate": "gated_attention",
    "DifferentialAttention": "differential_attention",
    "FrequencyRotary": "frequency_rotary",
    "RMSNorm": "rms_norm",
    "mha_to_torch": "torch_interop",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
