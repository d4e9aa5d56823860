"""Where each piece of a sharded sequence lives: the contiguous and zigzag layouts.

Ring attention (Liu, Zaharia & Abbeel, "Ring Attention with Blockwise Transformers for
Near-Infinite Context", 2023, https://arxiv.org/abs/2310.01889) shards a sequence along its length
across ``W`` ranks. How the positions are dealt out decides how evenly causal attention's work is
spread; this module is the pure bookkeeping for that (no communication, no tensors but indices).

Chunks
------
A padded sequence of length ``N = n_chunks * C`` is cut into ``n_chunks`` chunks of ``C``
positions; chunk ``c`` holds global positions ``[c*C, (c+1)*C)``.

* ``"contiguous"``: ``n_chunks = W``; rank ``r`` holds chunk ``r``.
* ``"zigzag"``: ``n_chunks = 2W``; rank ``r`` holds chunks ``r`` and ``2W-1-r`` (in that order),
  the layout of the Llama-3 context-parallel recipe and of zhuzilin/ring-flash-attention.

Why zigzag: under a causal mask, query chunk ``i`` sees key chunk ``j`` fully when ``i > j``, on
its diagonal when ``i == j`` and not at all when ``i < j``. With contiguous chunks rank ``W-1``
sees every earlier chunk while rank 0 sees only its own diagonal, so the last rank does ``W`` times
the work of the first. Pairing an early chunk with its mirror image gives every rank
``r + (2W-1-r) = 2W-1`` "chunk-rows" of visible keys, exactly balanced: for a block from rank
``s != r``, either the whole local query shard sees the first half of the remote keys (``s < r``) or
the second half of the local queries sees all remote keys (``s > r``) -- always ``2 C^2`` scores.

Padding
-------
A sequence whose length ``L`` is not a multiple of ``n_chunks`` is padded at its end to the next
multiple (see :func:`padded_length`); padded positions are ``>= L`` and are masked out by
position (:func:`pair_kind`), so they never influence real positions.
"""

from __future__ import annotations

from enum import Enum

LAYOUTS = ("contiguous", "zigzag")


class PairKind(Enum):
    """How a (query chunk, key chunk) pair is computed."""

    SKIP = "skip"  # no query in the chunk may see any key in the chunk
    FULL = "full"  # every query sees every key: no mask needed
    MASKED = "masked"  # causal diagonal and/or padding: mask by global position


def check_layout(layout: object) -> str:
    """Return ``layout`` if it is a known layout name, else raise listing the valid ones."""
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    return layout


def chunks_per_rank(layout: str) -> int:
    """1 for contiguous, 2 for zigzag."""
    return 2 if check_layout(layout) == "zigzag" else 1


def num_chunks(layout: str, world_size: int) -> int:
    """Total number of equal chunks the (padded) sequence is cut into."""
    return chunks_per_rank(layout) * world_size


def rank_chunks(layout: str, rank: int, world_size: int) -> tuple[int, ...]:
    """Global chunk indices held by ``rank``, in the order they are concatenated locally."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    if check_layout(layout) == "zigzag":
        return (rank, 2 * world_size - 1 - rank)
    return (rank,)


def chunk_order(layout: str, world_size: int) -> list[int]:
    """Global chunk indices in the order an ``all_gather`` of the shards lays them out."""
    return [c for r in range(world_size) for c in rank_chunks(layout, r, world_size)]


def padded_length(length: int, layout: str, world_size: int) -> int:
    """Smallest multiple of the chunk count that is ``>= length``."""
    n = num_chunks(layout, world_size)
    return -(-length // n) * n


def pair_kind(q_chunk: int, k_chunk: int, chunk_len: int, *, causal: bool, seq_len: int) -> PairKind:
    """Classify one (query chunk, key chunk) pair of global chunk indices.

    ``seq_len`` is the true (unpadded) sequence length; positions ``>= seq_len`` are padding.
    """
    q_start, k_start = q_chunk * chunk_len, k_chunk * chunk_len
    if q_start >= seq_len or k_start >= seq_len:  # the whole chunk is padding
        return PairKind.SKIP
    if causal and q_chunk < k_chunk:  # every key is in every query's future
        return PairKind.SKIP
    touches_pad = max(q_start, k_start) + chunk_len > seq_len
    if (causal and q_chunk == k_chunk) or touches_pad:
        return PairKind.MASKED
    return PairKind.FULL
