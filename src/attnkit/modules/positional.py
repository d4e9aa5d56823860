"""Absolute positional encodings added to token embeddings: sinusoidal and learned.

Vaswani et al. 2017, https://arxiv.org/abs/1706.03762 §3.5. Attention is permutation-invariant,
so a Transformer learns word order only from position information mixed into its inputs. The
paper adds, to the (scaled) embedding of the token at position p,

    PE(p, 2i)   = sin(p / 10000^(2i/D))
    PE(p, 2i+1) = cos(p / 10000^(2i/D))

a fixed table whose every dimension is a sinusoid of a different wavelength (2π … 10000·2π), so
``PE(p + k)`` is a linear function of ``PE(p)`` for any offset k. The paper reports that learned
position embeddings (one trained vector per position, as in BERT and GPT) "produced nearly
identical results"; both are here, with one interface. The third choice, rotary embeddings
(Su et al. 2021), rotates queries and keys inside attention instead — see
:class:`~attnkit.modules.rotary.RotaryEmbedding`.

Both modules map positions to encodings (they do not add them), so a decoder stepping through a
KV cache asks for exactly the position of its new token: ``pe(torch.tensor([t]))``. A position
outside the table is an error, never a silent wrap-around.

Shape legend: positions (L,) or (B, L) integer; output (L, D) or (B, L, D); D model width.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..core.checks import require_positive_int, require_tensor


class _PositionTable(nn.Module):
    def __init__(self, dim: int, max_len: int):
        super().__init__()
        self.dim = require_positive_int("dim", dim)
        self.max_len = require_positive_int("max_len", max_len)

    def _check(self, positions: torch.Tensor) -> torch.Tensor:
        require_tensor("positions", positions)
        if positions.is_floating_point() or positions.dtype == torch.bool or positions.dim() not in (1, 2):
            raise TypeError(f"positions must be an integer tensor (L,) or (B, L), got {positions.dtype} shape {tuple(positions.shape)}")
        if positions.numel():
            lo, hi = int(positions.min()), int(positions.max())
            if lo < 0 or hi >= self.max_len:
                raise ValueError(
                    f"positions must lie in [0, max_len={self.max_len}), got [{lo}, {hi}]; build {type(self).__name__} with max_len > {hi}"
                )
        return positions.long()

    def extra_repr(self) -> str:
        return f"dim={self.dim}, max_len={self.max_len}"


class SinusoidalPositionalEncoding(_PositionTable):
    """The fixed sin/cos table of the Transformer paper; no parameters."""

    def __init__(self, dim: int, max_len: int = 4096, *, base: float = 10000.0, device=None, dtype=None):
        super().__init__(dim, max_len)
        pos = torch.arange(max_len, dtype=torch.float64, device=device)[:, None]  # (P, 1)
        # float64 angles: p / 10000^(2i/D) loses digits in float32 at large p
        inv_freq = torch.exp(-math.log(base) * torch.arange(0, dim, 2, dtype=torch.float64, device=device) / dim)  # (ceil(D/2),)
        table = torch.zeros(max_len, dim, dtype=torch.float64, device=device)
        table[:, 0::2] = torch.sin(pos * inv_freq)
        table[:, 1::2] = torch.cos(pos * inv_freq[: dim // 2])
        self.register_buffer("table", table.to(dtype or torch.get_default_dtype()), persistent=False)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return self.table[self._check(positions).to(self.table.device)]


class LearnedPositionalEncoding(_PositionTable):
    """One trained vector per position (BERT/GPT style), initialised N(0, 0.02)."""

    def __init__(self, dim: int, max_len: int = 1024, *, device=None, dtype=None):
        super().__init__(dim, max_len)
        self.embedding = nn.Embedding(max_len, dim, device=device, dtype=dtype)
        nn.init.normal_(self.embedding.weight, std=0.02)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return self.embedding(self._check(positions).to(self.embedding.weight.device))


ENCODINGS = {"sinusoidal": SinusoidalPositionalEncoding, "learned": LearnedPositionalEncoding}


def make_positional_encoding(kind: str, dim: int, max_len: int, **kwargs) -> _PositionTable | None:
    """String factory: ``"sinusoidal"``, ``"learned"``, or ``"rotary"``/``"none"`` (None: nothing is added)."""
    if kind in ("rotary", "none"):
        return None
    if kind not in ENCODINGS:
        raise ValueError(f"position must be one of {[*ENCODINGS, 'rotary', 'none']}, got {kind!r}")
    return ENCODINGS[kind](dim, max_len, **kwargs)
