"""Multi-head self-attention over the H×W positions of a feature map, with a 2-D relative position
bias that works at any resolution.

The block is the "global context" layer of BoTNet (Srinivas et al. 2021,
https://arxiv.org/abs/2101.11605) and of the detectors that put MHSA before a feature level: every
pixel attends to every pixel, N = H·W positions, through :class:`~attnkit.MultiHeadAttention` and
so through :func:`attnkit.attention` (auto backend, capture, reports)::

    s   = flatten(x)                                           (B, N, C)
    a_h = softmax(q_h k_hᵀ / √E + bias_h) v_h                  per head, (B, N, E), E = C / heads
    y   = x + reshape(W_o [a_1 … a_heads])                     (B, C, H, W)

The residual makes the module a drop-in like SE or CBAM (which also return the refined map), so
inserting it into a trained CNN starts close to the identity.

**The position bias — a choice.** BoTNet learns one embedding per relative offset of a fixed map
size, so its weights only fit that size. Here the bias is a *continuous* function of the offset, as
in Swin Transformer V2 (Liu et al. 2022, https://arxiv.org/abs/2111.09883, §3.3): a small MLP maps
log-spaced offsets to one scalar per head::

    Δ̂ = sign(Δ) · log2(1 + |Δ|) / 3,   Δ = (y_q − y_k, x_q − x_k) in pixels
    bias_h(q, k) = MLP(Δ̂_y, Δ̂_x)_h                           MLP: 2 → hidden → heads (ReLU)

Unlike Swin-V2 the offsets are not divided by a pretraining window size: an offset of d pixels gets
the same bias at every H×W, square or not, and larger maps only ask for offsets the MLP extrapolates
gently (log spacing). The MLP runs once per forward on the (2H−1)(2W−1) distinct offsets; the
(N, N) bias is never built by this module — the attention call gathers it per tile
(:class:`GridRelativeBias`), so the blockwise backend stays O(N) in memory.

Shape legend: B batch, C channels, H height, W width, N = H·W positions, E head dim.
"""

from __future__ import annotations

import torch
from torch import nn

from ..core.biases import ScoreModifier
from ..modules.multihead import MultiHeadAttention
from .gate import check_feature_map, require_positive_int


def log_offsets(n: int, *, device=None, dtype=None) -> torch.Tensor:
    """Offsets −(n−1)…n−1 mapped to sign(Δ)·log2(1+|Δ|)/3, shape (2n−1,)."""
    d = torch.arange(-(n - 1), n, device=device, dtype=dtype if dtype is not None else torch.float32)
    return torch.sign(d) * torch.log2(1 + d.abs()) / 3.0


class GridRelativeBias(ScoreModifier):
    """Additive bias ``table[h, y_q − y_k + H − 1, x_q − x_k + W − 1]`` for raster-order positions
    of an H×W grid; ``table`` is (heads, 2H−1, 2W−1)."""

    dims = frozenset({"h"})

    def __init__(self, table: torch.Tensor, height: int, width: int):
        super().__init__()
        self.table, self.height, self.width = table, height, width
        self.num_heads = table.shape[0]

    def bias_fn(self, L, S):
        H, W, t = self.height, self.width, self.table

        def fn(b, h, q, kv):
            dy = torch.div(q, W, rounding_mode="floor") - torch.div(kv, W, rounding_mode="floor") + (H - 1)
            dx = q % W - kv % W + (W - 1)
            if dy.dim() != 4 or dy.shape[:2] != (1, 1) or h.dim() != 4 or h.shape[0] * h.shape[2] * h.shape[3] != 1:
                return t[h, dy, dx]  # index shapes other than a tile grid's (vmap'd scalars, full grids)
            idx = dy * (2 * W - 1) + dx  # (1, 1, l, s): the bias reads the head only
            l, s = idx.shape[-2:]
            # index_select on one flat index, not t[h, dy, dx]: the backward (per tile, under autograd,
            # so the table's MLP gets its gradient) is then an index_add_, not a scatter over three
            # broadcast index tensors; the three-index gather and its index_put took 56% of the
            # 40×40 forward + backward
            # (h, (2H-1)(2W-1)): offset (dy, dx) at dy·(2W-1) + dx; viewed here, inside fn, so the view is
            # made under the grad mode of each evaluation (the backward's re-evaluation records it)
            rows = t.reshape(t.shape[0], -1).index_select(0, h.reshape(-1))
            return rows.index_select(1, idx.reshape(-1)).view(1, -1, l, s)  # (1, heads, l, s)

        return fn


class ContinuousPositionBias2d(nn.Module):
    """Swin-V2-style continuous relative position bias: ``forward(H, W)`` → (heads, 2H−1, 2W−1)."""

    def __init__(self, num_heads: int, hidden: int = 64, *, device=None, dtype=None):
        super().__init__()
        self.num_heads = require_positive_int("num_heads", num_heads)
        self.hidden = require_positive_int("hidden", hidden)
        kw = {"device": device, "dtype": dtype}
        self.mlp = nn.Sequential(nn.Linear(2, hidden, **kw), nn.ReLU(inplace=True), nn.Linear(hidden, num_heads, bias=False, **kw))

    def forward(self, height: int, width: int) -> torch.Tensor:
        p = self.mlp[0].weight
        dy = log_offsets(height, device=p.device, dtype=p.dtype)  # (2H-1,)
        dx = log_offsets(width, device=p.device, dtype=p.dtype)  # (2W-1,)
        coords = torch.stack(torch.meshgrid(dy, dx, indexing="ij"), dim=-1)  # (2H-1, 2W-1, 2)
        return self.mlp(coords).permute(2, 0, 1)  # (heads, 2H-1, 2W-1)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, hidden={self.hidden}"


_DEFAULT = object()


class MHSA2d(nn.Module):
    """``MHSA2d(channels, num_heads=4)``: (B, C, H, W) → (B, C, H, W), global self-attention plus
    the input.

    ``position``: the relative position bias — by default a :class:`ContinuousPositionBias2d` with
    64 hidden units; pass your own instance (another ``hidden``), or None for no position information (then the
    layer is permutation-equivariant over pixels). ``backend`` is handed to every attention call.
    """

    def __init__(
        self,
        channels: int,
        num_heads: int = 4,
        *,
        position=_DEFAULT,
        backend: str = "auto",
        device=None,
        dtype=None,
    ):
        super().__init__()
        require_positive_int("channels", channels)
        require_positive_int("num_heads", num_heads)
        if channels % num_heads:
            divisors = [h for h in range(1, min(channels, 16) + 1) if channels % h == 0]
            raise ValueError(f"channels must be divisible by num_heads, got channels={channels}, num_heads={num_heads}; use one of {divisors}")
        self.channels, self.num_heads = channels, num_heads
        self.attn = MultiHeadAttention(channels, num_heads, backend=backend, device=device, dtype=dtype)
        if position is _DEFAULT:
            position = ContinuousPositionBias2d(num_heads, device=device, dtype=dtype)
        elif position is not None and not isinstance(position, ContinuousPositionBias2d):
            raise TypeError(f"position must be a ContinuousPositionBias2d or None, got {type(position).__name__}")
        elif position is not None and position.num_heads != num_heads:
            raise ValueError(f"position was built for num_heads={position.num_heads} but this layer has num_heads={num_heads}")
        self.position = position

    def position_bias(self, height: int, width: int) -> GridRelativeBias | None:
        """The score modifier for an H×W map (None without a position bias)."""
        if self.position is None:
            return None
        return GridRelativeBias(self.position(height, width), height, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = check_feature_map(x, self.channels, "MHSA2d")
        B, C, H, W = x.shape
        seq = x.flatten(2).transpose(1, 2)  # (B, N, C), raster order: position n = y·W + x
        out, _ = self.attn(seq, bias=self.position_bias(H, W))  # (B, N, C)
        return x + out.transpose(1, 2).reshape(B, C, H, W)

    def extra_repr(self) -> str:
        return f"channels={self.channels}, num_heads={self.num_heads}, head_dim={self.channels // self.num_heads}"


__all__ = ["MHSA2d", "ContinuousPositionBias2d", "GridRelativeBias", "log_offsets"]
