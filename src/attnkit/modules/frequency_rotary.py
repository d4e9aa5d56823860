"""Rotary embedding from an explicit frequency table: scaled (YaRN, linear, LLaMA-3), partial, either layout.

:class:`~attnkit.modules.rotary.RotaryEmbedding` builds its frequencies from one ``base``
(``θ_i = base^(-2i/E)``, Su et al. 2021, https://arxiv.org/abs/2104.09864). Long-context models
change those frequencies: YaRN (Peng et al. 2023, https://arxiv.org/abs/2309.00071 §3) stretches
the low ones and multiplies cos and sin by an "attention factor" ``m``; linear interpolation
divides all of them by a factor; LLaMA-3 rescales a band. Every one of these is still a rotation
of plane i by ``p · θ_i`` (times ``m``), so this class takes the finished table ``θ`` (``inv_freq``,
length R/2) and the factor ``m`` and does the rest:

* **partial rotary**: only the first R = 2·len(inv_freq) coordinates of a head rotate, the other
  E − R pass through unchanged (Qwen3-Next, Phi, GPT-NeoX use R < E);
* **layout**: ``interleaved=False`` pairs ``(x_i, x_{i+R/2})`` (rotate half), ``interleaved=True``
  pairs ``(x_{2i}, x_{2i+1})`` (DeepSeek's MLA, GPT-J). A layout is a fixed permutation of the
  coordinates applied to queries and keys alike, so it changes which stored weights pair up, never
  a dot product between a rotated query and a rotated key.

Because ``m`` multiplies both q and k, it scales every rotary logit by m²: YaRN's temperature.

Angles ``p · θ_i`` are computed in float64 per call (the table is small) and cast to the input's dtype.

Shape legend: x (B, H, L, E); positions (L,) or (B, L); inv_freq (R/2,).
"""

from __future__ import annotations

import torch
from torch import nn

from ..core.checks import require_tensor


class FrequencyRotary(nn.Module):
    """Rotate the first ``2 · len(inv_freq)`` coordinates of (B, H, L, E) heads at absolute positions.

    >>> rope = FrequencyRotary(1.0 / 10000 ** (torch.arange(0, 64, 2) / 64))   # plain RoPE, R = 64
    >>> q = rope(q, positions)
    """

    def __init__(self, inv_freq: torch.Tensor, *, scaling: float = 1.0, interleaved: bool = False):
        super().__init__()
        require_tensor("inv_freq", inv_freq)
        if inv_freq.dim() != 1 or inv_freq.numel() == 0 or not inv_freq.is_floating_point():
            raise ValueError(f"inv_freq must be a non-empty 1-D float tensor of R/2 frequencies, got {inv_freq.dtype} shape {tuple(inv_freq.shape)}")
        self.register_buffer("inv_freq", inv_freq.detach().to(torch.float64), persistent=False)
        self.scaling, self.interleaved = float(scaling), bool(interleaved)
        self.rotary_dim = 2 * inv_freq.numel()

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, H, L, E) rotated at ``positions`` (L,) or (B, L) (default 0..L-1); same shape and dtype."""
        require_tensor("x", x)
        if x.dim() != 4 or x.shape[-1] < self.rotary_dim:
            raise ValueError(f"x must be (B, H, L, E >= {self.rotary_dim}) for this rotary table, got shape {tuple(x.shape)}")
        L = x.shape[2]
        if positions is None:
            positions = torch.arange(L, device=x.device)
        if positions.shape[-1] != L or positions.dim() not in (1, 2) or positions.is_floating_point():
            raise ValueError(f"positions must be an integer (L,)=({L},) or (B, L) tensor, got {positions.dtype} shape {tuple(positions.shape)}")
        angles = positions.to(self.inv_freq.device, torch.float64)[..., None] * self.inv_freq  # (L|B,L, R/2)
        cos = (angles.cos() * self.scaling).to(device=x.device, dtype=x.dtype)
        sin = (angles.sin() * self.scaling).to(device=x.device, dtype=x.dtype)
        if cos.dim() == 3:
            cos, sin = cos[:, None], sin[:, None]  # (B, 1, L, R/2): shared by the heads
        rot, rest = x[..., : self.rotary_dim], x[..., self.rotary_dim:]
        if self.interleaved:
            x1, x2 = rot[..., 0::2], rot[..., 1::2]
            out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
        else:
            x1, x2 = rot.chunk(2, dim=-1)
            out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        return torch.cat((out, rest), dim=-1) if rest.shape[-1] else out

    def extra_repr(self) -> str:
        return f"rotary_dim={self.rotary_dim}, scaling={self.scaling:g}, interleaved={self.interleaved}"
