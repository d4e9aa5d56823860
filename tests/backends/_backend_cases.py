"""Shared set-up for the backend tests: small forced tiles, inputs, and the core's property-test
matrix of scores × masks × biases (``tests/core/_core_cases.py``) reused on longer, ragged shapes.

Lengths (L = 37, S = 45) are not multiples of the forced tile sizes (8 × 16), so ragged edge tiles,
skipped tiles, full tiles and partial tiles all occur in one call.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import torch

from attnkit.backends import tiling

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "core"))
from _core_cases import BIASES, MASKS, SCORES  # noqa: E402  (the core's matrix, one source of truth)

__all__ = ["BIASES", "MASKS", "SCORES", "tiles", "make_qkv"]


@contextlib.contextmanager
def tiles(block_q: int = 8, block_kv: int = 16):
    """Force tile sizes for the duration of a block, restoring the automatic choice afterwards."""
    tiling.set_tile_sizes(block_q, block_kv)
    try:
        yield
    finally:
        tiling.set_tile_sizes()


def make_qkv(B=2, H=4, Hkv=2, L=37, S=45, E=16, Ev=12, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, L, E, generator=g, dtype=dtype)
    k = torch.randn(B, Hkv, S, E, generator=g, dtype=dtype)
    v = torch.randn(B, Hkv, S, Ev, generator=g, dtype=dtype)
    return q, k, v
