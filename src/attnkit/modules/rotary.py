"""Rotary position embedding (RoPE) as a transform of queries and keys.

Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding",
https://arxiv.org/abs/2104.09864 §3.2–3.4.

Split the head dimension E into E/2 planes and rotate plane i of the vector at absolute position
p by the angle ``p · θ_i`` with ``θ_i = base^(-2i/E)``. Writing a plane as a complex number
``z_i = x_{2i} + j x_{2i+1}``, RoPE is ``z_i ↦ z_i · e^{j p θ_i}``, so for a query at position m
and a key at n

    Re Σ_i q_i e^{j m θ_i} · conj(k_i e^{j n θ_i}) = Re Σ_i q_i conj(k_i) e^{j (m - n) θ_i}:

the dot product depends on the positions only through ``m - n``. That is why RoPE needs no change
for a KV cache: keys are rotated once, at their own absolute position, when they enter the cache,
and a new query is rotated at its position; only the positions must be right (offset by the
number of tokens already cached, per sequence when prompts have different lengths).

Two layouts pair the E coordinates into planes differently (both are the same rotation up to a
fixed permutation of coordinates):

* ``interleaved=False`` (GPT-NeoX / LLaMA "rotate half"): plane i is ``(x_i, x_{i + E/2})``;
* ``interleaved=True`` (the paper, GPT-J): plane i is ``(x_{2i}, x_{2i+1})``.

The cos/sin table covers positions ``0 .. max_positions - 1`` and is computed in float64 (angles
``p · θ`` lose digits in float32 at large p), then cast to the input's dtype per call. A position
outside the table is an error, never a silent wrap-around.

Shape legend: x (B, H, L, E); positions (L,) shared by the batch or (B, L) per sequence.
"""

from __future__ import annotations

import torch
from torch import nn

from ..core.checks import require_positive_int, require_tensor


class RotaryEmbedding(nn.Module):
    """Rotate (B, H, L, E) queries/keys by their absolute positions.

    >>> rope = RotaryEmbedding(64, max_positions=2048)
    >>> q = rope(q, positions)          # positions (L,) or (B, L)
    """

    def __init__(
        self,
        head_dim: int,
        *,
        max_positions: int = 4096,
        base: float = 10000.0,
        interleaved: bool = False,
        device=None,
    ):
        super().__init__()
        require_positive_int("head_dim", head_dim)
        require_positive_int("max_positions", max_positions)
        if head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embedding (it rotates pairs of coordinates), got {head_dim}")
        if isinstance(base, bool) or not isinstance(base, (int, float)) or base <= 1:
            raise ValueError(f"base must be a number > 1 (10000 in the paper), got {base!r}")
        self.head_dim, self.max_positions, self.base, self.interleaved = head_dim, max_positions, float(base), bool(interleaved)
        half = head_dim // 2
        theta = self.base ** (-torch.arange(half, dtype=torch.float64, device=device) * 2.0 / head_dim)  # (E/2,)
        angles = torch.arange(max_positions, dtype=torch.float64, device=device)[:, None] * theta[None, :]  # (P, E/2)
        # float64 tables: float32 loses ~1e-4 rad at p ~ 4k; the per-call cast is on a (B, L, E/2) slice only
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def check_positions(self, positions: torch.Tensor, L: int, B: int | None = None) -> torch.Tensor:
        """Validate ``positions`` for a sequence of L tokens; returns it as a long tensor."""
        require_tensor("positions", positions)
        if positions.is_floating_point() or positions.dtype == torch.bool:
            raise TypeError(f"positions must be an integer tensor, got {positions.dtype}; build it with torch.arange or .long()")
        if positions.dim() not in (1, 2) or positions.shape[-1] != L or (positions.dim() == 2 and B is not None and positions.shape[0] not in (1, B)):
            want = f"(L,)=({L},) or (B, L)=({B}, {L})" if B is not None else f"(L,)=({L},) or (B, {L})"
            raise ValueError(f"positions must have shape {want}, got {tuple(positions.shape)}")
        # values are checked in eager mode only: a traced graph (torch.compile / torch.export) cannot
        # branch on them, and meta tensors have none; out-of-table indices still fail in the lookup
        if positions.numel() and positions.device.type != "meta" and not torch.compiler.is_compiling():
            lo, hi = (int(t) for t in torch.aminmax(positions))
            if lo < 0:
                raise ValueError(f"positions must be >= 0, got a minimum of {lo}")
            if hi >= self.max_positions:
                raise ValueError(
                    f"position {hi} is beyond the rotary table (max_positions={self.max_positions}, positions 0..{self.max_positions - 1}); "
                    f"build RotaryEmbedding with max_positions > {hi}"
                )
        return positions.long()

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, H, L, E) rotated at ``positions`` (L,) or (B, L); same shape and dtype.

        ``positions=None`` means 0..L-1: a slice of the tables, checked from shapes alone (so
        ``torch.export`` / ``torch.compile`` and the meta device see no data-dependent check)."""
        self._check_x("x", x)
        if positions is None:
            return self._rotate(x, *self._first_angles(x))
        return self._rotate(x, *self._angles(x, positions))

    def _first_angles(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        L = x.shape[2]
        if L > self.max_positions:
            raise ValueError(f"{L} positions exceed the rotary table (max_positions={self.max_positions}); build RotaryEmbedding with max_positions >= {L}")
        cos = self.cos[:L].to(device=x.device, dtype=x.dtype)  # (L, E/2)
        sin = self.sin[:L].to(device=x.device, dtype=x.dtype)
        return cos, sin

    def rotate_qk(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate q (B, H, L, E) and k (B, Hkv, L, E) at the same positions (one lookup, one check)."""
        self._check_x("q", q)
        self._check_x("k", k)
        if k.shape[2] != q.shape[2] or k.shape[0] != q.shape[0]:
            raise ValueError(f"rotate_qk needs q and k with the same B and L, got q {tuple(q.shape)} and k {tuple(k.shape)}")
        cos, sin = self._angles(q, positions)
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin)

    def _check_x(self, name: str, x: torch.Tensor) -> None:
        require_tensor(name, x)
        if x.dim() != 4 or x.shape[-1] != self.head_dim:
            raise ValueError(f"{name} must be (B, H, L, E={self.head_dim}), got shape {tuple(x.shape)}; build RotaryEmbedding with head_dim={name}.shape[-1]")

    def _angles(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, H, L, E = x.shape
        pos = self.check_positions(positions, L, B).to(self.cos.device)
        cos = self.cos[pos].to(device=x.device, dtype=x.dtype)  # (L, E/2) or (B, L, E/2)
        sin = self.sin[pos].to(device=x.device, dtype=x.dtype)
        if cos.dim() == 3:
            cos, sin = cos[:, None], sin[:, None]  # (B, 1, L, E/2): one angle per sequence, shared by heads
        return cos, sin

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        E = x.shape[-1]
        if self.interleaved:
            x1, x2 = x[..., 0::2], x[..., 1::2]
            return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
        half = E // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, max_positions={self.max_positions}, base={self.base:g}, interleaved={self.interleaved}"
