"""attnkit.distributed: context-parallel (ring) attention over ``torch.distributed``.

Ring Attention (Liu et al., 2023, https://arxiv.org/abs/2310.01889): each rank holds a shard of the
sequence; key/value shards travel around the ring of ranks while every rank attends its queries to
each block and merges the partial results by log-sum-exp. Runs on gloo (CPU) and NCCL (GPU)
unchanged; see docs/distributed.md.

    out_local = ring_attention(q_local, k_local, v_local, mask=attnkit.masks.causal(), layout="zigzag").out
"""

from .comm import RingCommError, RingTimeoutError
from .layout import LAYOUTS, padded_length
from .ring_attention import ring_attention
from .sharding import gather_sequence, shard_sequence

__all__ = [
    "LAYOUTS",
    "RingCommError",
    "RingTimeoutError",
    "gather_sequence",
    "padded_length",
    "ring_attention",
    "shard_sequence",
]
