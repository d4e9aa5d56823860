"""Vision Transformer built from attnkit's :class:`~attnkit.MultiHeadAttention`.

Dosovitskiy et al., "An Image is Worth 16x16 Words: Transformers for Image Recognition at Scale",
ICLR 2021, https://arxiv.org/abs/2010.11929 (§3.1, Eq. 1–4)::

    z_0 = [x_cls; patch(x) W_p] + E_pos               patch: P×P conv, stride P → (B, N, D)
    z'_l = z_{l-1} + MHA(LN(z_{l-1}))                 pre-LN blocks
    z_l  = z'_l + MLP(LN(z'_l))                       MLP: D → r·D → D, GELU
    y    = head(LN(z_L)[:, 0])                        the class token's output

Positions: ``"learned"`` (the paper; one vector per patch of the training grid, bicubically
interpolated to a new grid as in §3.2 "fine-tuning at higher resolution") or ``"sinusoidal"``
(fixed 2-D sin-cos, MAE-style: half the channels encode the row, half the column; recomputed for
any grid, so nothing is interpolated). ViT-B/16 at 224 with 1,000 classes has 86,567,656 parameters.

Attention weights are never stored: use :func:`attnkit.inspect.capture` (the blocks'
``MultiHeadAttention`` modules are its layers) and :func:`attnkit.inspect.attention_rollout`.

Shape legend: B batch, C image channels, H×W image, P patch size, h×w patch grid, N = h·w patches,
T = N + 1 tokens, D embedding dim, K classes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..modules.gate import require_positive_int
from ..modules.multihead import MultiHeadAttention

POSITIONS = ("learned", "sinusoidal")


def sincos_2d(h: int, w: int, dim: int, *, device=None, dtype=torch.float32) -> torch.Tensor:
    """Fixed 2-D sin-cos positions (h·w, D): D/2 channels for the row, D/2 for the column."""
    if dim % 4:
        raise ValueError(f"sinusoidal 2-D positions need dim divisible by 4, got dim={dim}")
    omega = 1.0 / 10000 ** (torch.arange(dim // 4, device=device, dtype=torch.float64) / (dim // 4))
    ys, xs = torch.meshgrid(torch.arange(h, device=device, dtype=torch.float64), torch.arange(w, device=device, dtype=torch.float64), indexing="ij")
    parts = []
    for coord in (ys.reshape(-1), xs.reshape(-1)):
        angle = coord[:, None] * omega[None]  # (N, D/4)
        parts += [angle.sin(), angle.cos()]
    return torch.cat(parts, dim=1).to(dtype)  # (N, D)


class PatchEmbed(nn.Module):
    """P×P non-overlapping patches → D-dim tokens: (B, C, H, W) → (B, N, D), grid (h, w)."""

    def __init__(self, patch_size: int, in_chans: int, dim: int):
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_chans, dim, patch_size, patch_size)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        B, C, H, W = x.shape
        P = self.patch_size
        if H % P or W % P:
            raise ValueError(f"image size {H}x{W} is not a multiple of patch_size={P}; resize or pad to multiples of {P}")
        x = self.proj(x)  # (B, D, h, w)
        return x.flatten(2).transpose(1, 2), (H // P, W // P)  # (B, N, D)


class Block(nn.Module):
    """Pre-LN Transformer encoder block."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float, dropout: float):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = MultiHeadAttention(dim, num_heads, dropout=dropout)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, dim), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))[0]  # (B, T, D)
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    """``VisionTransformer(image_size=224, patch_size=16, ...)``: (B, C, H, W) → logits (B, K).

    ``image_size`` fixes the learned position grid; other sizes (multiples of ``patch_size``,
    non-square too) interpolate it. ``position``: ``"learned"`` or ``"sinusoidal"``.
    """

    def __init__(
        self,
        image_size: int | tuple[int, int] = 224,
        patch_size: int = 16,
        *,
        in_chans: int = 3,
        num_classes: int = 1000,
        dim: int = 768,
        depth: int = 12,
        num_heads: int = 12,
        mlp_ratio: float = 4.0,
        dropout: float = 0.0,
        position: str = "learned",
    ):
        super().__init__()
        size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
        for name, v in (("patch_size", patch_size), ("in_chans", in_chans), ("num_classes", num_classes),
                        ("dim", dim), ("depth", depth), ("num_heads", num_heads), *zip(("image_size",) * 2, size)):
            require_positive_int(name, v)
        if size[0] % patch_size or size[1] % patch_size:
            raise ValueError(f"image_size {size} must be a multiple of patch_size={patch_size}")
        if not mlp_ratio > 0:
            raise ValueError(f"mlp_ratio must be positive, got {mlp_ratio!r}")
        if position not in POSITIONS:
            raise ValueError(f"position must be one of {POSITIONS}, got {position!r}")
        self.grid = (size[0] // patch_size, size[1] // patch_size)
        self.dim, self.position = dim, position
        self.patch_embed = PatchEmbed(patch_size, in_chans, dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        if position == "learned":
            self.pos_embed = nn.Parameter(torch.empty(1, 1 + self.grid[0] * self.grid[1], dim))
            nn.init.trunc_normal_(self.pos_embed, std=0.02)
        else:
            sincos_2d(1, 1, dim)  # checks dim % 4 now, not at the first forward
            self.pos_embed = None
        self.pos_drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(dim, num_heads, mlp_ratio, dropout) for _ in range(depth))
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)
        nn.init.trunc_normal_(self.cls_token, std=0.02)

    @property
    def num_prefix_tokens(self) -> int:
        return 1

    def positions(self, grid: tuple[int, int]) -> torch.Tensor:
        """(1, T, D) position embeddings for an h×w patch grid (class token first)."""
        h, w = grid
        if self.pos_embed is None:
            patch = sincos_2d(h, w, self.dim, device=self.cls_token.device, dtype=self.cls_token.dtype)[None]
            return torch.cat([torch.zeros_like(self.cls_token), patch], dim=1)
        cls_pos, patch = self.pos_embed[:, :1], self.pos_embed[:, 1:]
        if (h, w) != self.grid:
            gh, gw = self.grid
            patch = patch.reshape(1, gh, gw, self.dim).permute(0, 3, 1, 2)  # (1, D, gh, gw)
            # bicubic in float32 (not implemented for half on CPU); align_corners=False as timm does
            patch = F.interpolate(patch.float(), size=(h, w), mode="bicubic", align_corners=False).to(self.pos_embed.dtype)
            patch = patch.permute(0, 2, 3, 1).reshape(1, h * w, self.dim)
        return torch.cat([cls_pos, patch], dim=1)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) → normalised tokens (B, T, D)."""
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            raise ValueError(f"VisionTransformer expects images (B, C, H, W), got {tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
        if x.shape[1] != self.patch_embed.proj.in_channels:
            raise ValueError(f"expected {self.patch_embed.proj.in_channels} image channels, got C={x.shape[1]}; build with in_chans={x.shape[1]}")
        tokens, grid = self.patch_embed(x)  # (B, N, D)
        cls = self.cls_token.expand(tokens.shape[0], -1, -1)
        z = self.pos_drop(torch.cat([cls, tokens], dim=1) + self.positions(grid))  # (B, T, D)
        for blk in self.blocks:
            z = blk(z)
        return self.norm(z)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.forward_features(x)[:, 0])


def vit_b16(**kw) -> VisionTransformer:
    """ViT-Base/16: D=768, 12 layers, 12 heads, MLP 3072 (86,567,656 parameters at 224, 1000 classes)."""
    return VisionTransformer(kw.pop("image_size", 224), 16, dim=768, depth=12, num_heads=12, **kw)


def vit_tiny(image_size: int = 28, patch_size: int = 7, **kw) -> VisionTransformer:
    """A ViT sized for 28×28 grayscale images (a 4×4 grid of 7×7 patches)."""
    kw.setdefault("in_chans", 1)
    kw.setdefault("num_classes", 10)
    return VisionTransformer(image_size, patch_size, **{"dim": 64, "depth": 4, "num_heads": 4, "mlp_ratio": 2.0, **kw})


__all__ = ["VisionTransformer", "PatchEmbed", "Block", "sincos_2d", "vit_b16", "vit_tiny"]
