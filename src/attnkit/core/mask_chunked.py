"""Chunked attention (Llama 4's local layers): queries attend causally within fixed chunks of C tokens.

Meta AI, "The Llama 4 herd" (2025), https://ai.meta.com/blog/llama-4-multimodal-intelligence/ and
the reference code's ``chunked_attention_mask``: the sequence is cut into chunks of ``C`` positions,
``[0, C), [C, 2C), ...``; the query at position ``p`` may attend key position ``k`` when

    k <= p   and   floor(k / C) == floor(p / C),

i.e. causal attention that restarts at every chunk boundary. Unlike a sliding window (which slides
with the query), the visible span is 1 key at a chunk's first position and C at its last.

This file is the whole mask kind: the predicate, its tile logic for every backend (blockwise and
ring skip what it empties) and the properties caches need. Shape legend: L queries, S keys.
"""

from __future__ import annotations

import torch

from .checks import require_choice
from .indices import alignment_offset
from .mask_base import ALIGNS, Mask
from .tiles import TileGrid


def _chunk_of(pos, size: int):
    """Chunk index of (possibly negative, for top-left alignment with L > S) positions."""
    return torch.div(pos, size, rounding_mode="floor")


class ChunkedMask(Mask):
    """Query at absolute position p may attend keys k with k <= p in the same chunk of ``chunk_size``.

    ``align`` places the L queries against the S keys as for :func:`~attnkit.core.masks.causal`
    (``"bottom_right"``: the last query is the last key's position, as in decoding).
    """

    def __init__(self, chunk_size: int, align: str = "bottom_right"):
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size <= 0:
            raise ValueError(f"chunk_size must be a positive int (tokens per chunk, e.g. 8192 in Llama 4), got {chunk_size!r}")
        self.chunk_size = chunk_size
        self.align = require_choice("align", align, ALIGNS)

    def predicate(self, L, S):
        off, C = alignment_offset(self.align, L, S), self.chunk_size
        return lambda b, h, q, kv: (kv <= q + off) & (_chunk_of(kv, C) == _chunk_of(q + off, C))

    def tile_states(self, grid: TileGrid) -> torch.Tensor:
        """Empty when every key is after every query, or the tile's key chunks and query chunks do
        not meet; full when all keys are at or before the first query and one chunk holds them all."""
        off, C = alignment_offset(self.align, grid.L, grid.S), self.chunk_size
        p0, p1 = grid.q_first + off, grid.q_last + off  # (nq, 1) first / last query position
        c_p0, c_p1 = _chunk_of(p0, C), _chunk_of(p1, C)
        c_k0, c_k1 = _chunk_of(grid.k_first, C), _chunk_of(grid.k_last, C)  # (1, nk)
        empty = (grid.k_first > p1) | (c_k1 < c_p0) | (c_k0 > c_p1)
        full = (grid.k_last <= p0) & (c_k0 == c_p1) & (c_k1 == c_p0)
        return grid.states(full, empty)

    positional = True  # a function of query and key positions only: right under KV caches

    @property
    def band_width(self):
        return self.chunk_size  # a query sees at most its chunk: offsets in [-(C - 1), 0]

    @property
    def cache_key(self):
        return ("chunked", self.chunk_size, self.align)

    def __repr__(self):
        return f"chunked(chunk_size={self.chunk_size}, align={self.align!r})"


def chunked(chunk_size: int, align: str = "bottom_right") -> Mask:
    """Llama-4-style chunked causal attention: ``attention(q, k, v, mask=chunked(8192))``."""
    return ChunkedMask(chunk_size, align)
