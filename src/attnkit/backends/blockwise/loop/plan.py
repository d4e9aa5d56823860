r"""The blockwise backend's per-call plan and per-tile evaluation, shared by its forward, backward and
weights passes.

* :class:`Plan` — shapes, tile sizes, the tile map (:mod:`attnkit.backends.tiling`), the score,
  bias and mask of one call, dropout seed and the work dtype of the softmax statistics.
* :class:`Tiles` — evaluates the mask, the bias and the scores on one tile (natural units; the
  exponentials are taken in base 2 after the shift, see :mod:`attnkit.core.online_softmax`), caching
  shift-invariant (causal, sliding-window) mask tiles, and draws the dropout keep-mask of a tile.
* ``q_tile``, ``tile_mask``, ``tile_order`` — one query tile in GQA layout, the skip/partial
  decision of one tile, and the order tiles are visited in (by diagonal for relative-position
  biases, so each bias tile is evaluated once per diagonal).

Shape legend: B batch, H query heads, Hkv key/value heads (GQA: query head h reads kv head
h // (H / Hkv)), g = H / Hkv, L queries, S keys, E query/key dim, Ev value dim; l, s: one tile's
query and key counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ....core.biases import ScoreModifier
from ....core.indices import index_grid
from ....core.masks import Mask, values_readable
from ....core.scores import Score
from ...tiling import FULL

__all__ = ["INF", "Plan", "Tiles", "q_tile", "tile_mask", "tile_order"]

INF = float("inf")


@dataclass
class Plan:
    """What the forward and backward share: shapes, tiles, and how to compute one score tile."""

    B: int
    H: int
    Hkv: int
    L: int
    S: int
    block_q: int
    block_kv: int
    codes: torch.Tensor  # (nq, nk) int8 tile codes
    scale: float
    score: Score | None  # None: q', k' are already in dot form
    bias: ScoreModifier | None
    mask: Mask | None
    dropout_p: float
    seed: int
    work: torch.dtype  # dtype of softmax statistics and accumulators
    qscale: float | None = None  # dot path: the scale the tiles apply to q' k'ᵀ (see exp_scale)
    kept: list[list[int]] = field(default_factory=list)  # non-empty key blocks per query block
    code_rows: list[list[int]] = field(default_factory=list)  # codes as Python ints (no tensor indexing per tile)

    @property
    def groups(self) -> int:
        return self.H // self.Hkv

    @property
    def general(self) -> bool:
        """Tiles need the score module or a non-additive modifier, not a plain q' k'ᵀ."""
        return self.score is not None or (self.bias is not None and not self.bias.additive)

    @property
    def exp_scale(self) -> float:
        """The factor between a score tile and natural units. A dot path with a positive scale leaves
        q' k'ᵀ unscaled (an additive bias goes in divided by the scale; the row max commutes with
        the scale) and the softmax applies the scale after the shift, ``exp(scale · (s - m))``
        (:func:`attnkit.core.online_softmax.exp_`), in the multiplication by log2 e it does anyway:
        the scores carry the GEMM's rounding and no rounding of a scaled q. Every other tile is in
        natural units (1)."""
        if self.qscale is not None and self.qscale > 0:
            return self.qscale
        return 1.0


class Tiles:
    """Per-call helpers that evaluate masks, biases and scores on one tile."""

    def __init__(self, plan: Plan):
        self.p = plan
        L, S = plan.L, plan.S
        self.mask_fn = plan.mask.predicate(L, S) if plan.mask is not None else None
        self.bias_fn = plan.bias.bias_fn(L, S) if plan.bias is not None and plan.bias.additive else None
        self.mod_fn = plan.bias.score_mod(L, S) if plan.bias is not None and not plan.bias.additive else None
        # a bias that says it depends only on (head, key − query) is evaluated once per tile diagonal
        self.toeplitz = self.bias_fn is not None and not plan.general and plan.bias.relative
        self.shift_invariant = plan.mask is not None and plan.mask.shift_invariant  # the mask says so
        self.mask_cache: dict[tuple[int, int, int], tuple[bool, torch.Tensor | None]] = {}

    def grid(self, obj_dims, q0, q1, k0, k1, device):
        p = self.p
        nb = p.B if "b" in obj_dims else 1
        nh = p.H if "h" in obj_dims else 1
        return index_grid((q0, q1), (k0, k1), batch=nb, heads=nh, device=device)

    def partial(self, q0, q1, k0, k1, device) -> tuple[bool, torch.Tensor | None]:
        """(skip, allowed-or-None) of a tile the mask left PARTIAL: evaluated, and classified when
        its values can be read (an empty one is skipped after all, a full one needs no mask)."""
        # shift-invariant masks (causal, windows) depend only on key − query: tiles repeat along diagonals
        key = (k0 - q0, q1 - q0, k1 - k0) if self.shift_invariant else None
        if key is not None and key in self.mask_cache:
            return self.mask_cache[key]
        g = self.grid(self.p.mask.dims, q0, q1, k0, k1, device)
        allowed = torch.as_tensor(self.mask_fn(g.b, g.h, g.q, g.kv), device=device)
        out = (False, allowed)
        if values_readable(allowed):
            if not bool(allowed.any()):
                out = (True, None)
            elif bool(allowed.all()):
                out = (False, None)
        if key is not None:
            if len(self.mask_cache) > 64:
                self.mask_cache.clear()
            self.mask_cache[key] = out
        return out

    def bias(self, q0, q1, k0, k1, device) -> torch.Tensor:
        g = self.grid(self.p.bias.dims, q0, q1, k0, k1, device)
        return torch.as_tensor(self.bias_fn(g.b, g.h, g.q, g.kv), device=device)

    def scores_nat(self, qt, kt, q0, q1, k0, k1) -> torch.Tensor:
        """Natural-unit scores (B, H, l, s) of the general path, differentiable (autograd)."""
        p = self.p
        B, H, l, s = p.B, p.H, q1 - q0, k1 - k0
        if p.score is not None:
            kx = kt.repeat_interleave(p.groups, dim=1) if p.groups > 1 else kt  # (B, H, s, E)
            sc = p.score(qt.reshape(B, H, l, -1), kx) * p.scale
        else:
            sc = (qt @ kt.transpose(-1, -2)).view(B, H, l, s) * p.scale
        sc = sc.to(p.work)
        if self.bias_fn is not None:
            sc = sc + self.bias(q0, q1, k0, k1, sc.device).to(p.work)
        elif self.mod_fn is not None:
            g = self.grid(p.bias.dims, q0, q1, k0, k1, sc.device)
            sc = self.mod_fn(sc, g.b, g.h, g.q, g.kv)
        return sc

    def scores(self, qt, kt, q0, q1, k0, k1, bias=None) -> torch.Tensor:
        """Scores (B, H, l, s) in the work dtype, in units of ``plan.exp_scale`` (natural units times
        1/exp_scale). ``bias``: this tile's additive bias in the work dtype (reused across a diagonal)."""
        p = self.p
        if p.general:
            return self.scores_nat(qt, kt, q0, q1, k0, k1)
        s = (qt @ kt.transpose(-1, -2)).view(p.B, p.H, q1 - q0, k1 - k0)  # (B, H, l, s)
        if s.dtype != p.work:
            s = s.to(p.work)
        if bias is None and self.bias_fn is not None:
            bias = self.bias(q0, q1, k0, k1, s.device).to(p.work)
        if p.exp_scale == 1.0 and p.scale != 1.0:  # a scale ≤ 0: the row max does not commute with it
            s = s.mul_(p.scale)
        if bias is not None:
            s = s.add_(bias, alpha=1.0 / p.exp_scale)
        return s

    def natural(self, s: torch.Tensor) -> torch.Tensor:
        """A tile of :meth:`scores` in natural units."""
        return s * self.p.exp_scale if self.p.exp_scale != 1.0 else s

    def keep(self, qi, ki, shape, device) -> torch.Tensor:
        """Dropout keep-mask (B, H, l, s) for tile (qi, ki), the same in forward and backward."""
        nk = self.p.codes.shape[1]
        gen = torch.Generator(device=device)
        gen.manual_seed((self.p.seed * 1_000_003 + qi * nk + ki) % (2**63 - 1))
        return torch.rand(shape, generator=gen, device=device) >= self.p.dropout_p


def q_tile(qx: torch.Tensor, plan: Plan, q0: int, q1: int) -> torch.Tensor:
    """Query tile as (B, Hkv, g·l, E): the g query heads sharing a kv head stacked along rows, so one
    GEMM against the kv head serves them all without repeating k."""
    B, Hkv, g = plan.B, plan.Hkv, plan.groups
    t = qx[:, :, q0:q1]  # (B, H, l, E)
    if g > 1:
        t = t.reshape(B, Hkv, g * (q1 - q0), qx.shape[-1])
    # contiguous, whatever q's strides: the backward recomputes P = exp(s - m) with the forward's row
    # max m, so its score GEMM must round exactly as the forward's (a strided and a contiguous
    # operand take different kernels: weights off by eps·|s|)
    return t.contiguous()


def tile_mask(tiles: Tiles, code: int, q0, q1, k0, k1, device):
    """(skip, allowed-or-None) for one tile: FULL tiles need no mask, PARTIAL ones are evaluated."""
    if code == FULL:
        return False, None
    return tiles.partial(q0, q1, k0, k1, device)


def tile_order(plan: Plan, diagonal: bool) -> list[tuple[int, int]]:
    """Non-empty tiles, row by row, or grouped by key-minus-query offset for a reusable bias tile."""
    pairs = [(qi, ki) for qi, ks in enumerate(plan.kept) for ki in ks]
    if diagonal:
        pairs.sort(key=lambda t: (t[1] * plan.block_kv - t[0] * plan.block_q, t[0]))
    return pairs
