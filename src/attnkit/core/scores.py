"""Scoring functions: how a query and a key become one number before the softmax.

* dot — Luong et al. 2015 "dot", https://arxiv.org/abs/1508.04025: ``q·k``.
* scaled dot — Vaswani et al. 2017, https://arxiv.org/abs/1706.03762: ``q·k / sqrt(E)`` (default).
* general — Luong et al. 2015 "general": ``qᵀ W k`` with a learned W (E, E).
* additive — Bahdanau et al. 2015, https://arxiv.org/abs/1409.0473: ``vᵀ tanh(W_q q + W_k k)``.
* cosine — Swin v2 style, https://arxiv.org/abs/2111.09883: ``τ · cos(q, k)`` with a learned τ.

A score maps q (B, H, L, E) and k (B, H, S, E) to scores (B, H, L, S) and works on any tile of
queries and keys. Scores that are a dot product after transforming q and k say so through
:meth:`Score.as_dot`, which lets fused dot-product kernels serve them.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .checks import require_positive_int


class Score(nn.Module):
    name = "score"

    def default_scale(self, head_dim: int) -> float:
        return 1.0

    @property
    def dot_form(self) -> bool:
        """Does :meth:`as_dot` give a dot-product form (so fused q·kᵀ kernels can serve it)?
        True for every subclass that overrides ``as_dot``."""
        return type(self).as_dot is not Score.as_dot

    def cost_per_element(self, head_dim: int) -> float:
        """Element-wise tensor passes per score element beyond a q·kᵀ product, for the cost model.
        A dot form costs none (its transform of q and k is O(L·E), not O(L·S)); a score without one
        runs its module per tile, assumed to be a few passes over a (l, s, head_dim) tensor."""
        return 0.0 if self.dot_form else 1.0 + 3.0 * head_dim

    #: ``as_dot`` returns q and k unchanged (plain q·kᵀ): a half-precision kernel may take them as they
    #: are; any other transform (normalising, a weight matrix) is rounded in half unless computed in float32
    identity_dot: bool = False

    def as_dot(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(q', k') with ``score(q, k) == q' k'ᵀ``, or None when no such form exists."""
        return None

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        qk = self.as_dot(q, k)
        if qk is None:  # pragma: no cover - subclasses without a dot form override forward
            raise NotImplementedError
        return qk[0] @ qk[1].transpose(-2, -1)

    def check_head_dim(self, head_dim: int) -> None:
        """Raise if this score was built for another head dimension."""


class DotScore(Score):
    name = "dot"
    identity_dot = True

    def as_dot(self, q, k):
        return q, k


class ScaledDotScore(DotScore):
    name = "scaled_dot"

    def default_scale(self, head_dim):
        return 1.0 / math.sqrt(head_dim)


class GeneralScore(Score):
    """``qᵀ W k``; W is (E, E), shared by all heads, or (H, E, E) with ``num_heads``."""

    name = "general"

    def __init__(self, head_dim: int, *, num_heads: int | None = None, device=None, dtype=None):
        super().__init__()
        self.head_dim = require_positive_int("head_dim", head_dim)
        shape = (head_dim, head_dim) if num_heads is None else (require_positive_int("num_heads", num_heads), head_dim, head_dim)
        # identity + noise: starts as the dot score, so an untrained model behaves sensibly
        w = torch.eye(head_dim, device=device, dtype=dtype).expand(shape).clone()
        self.weight = nn.Parameter(w + 0.02 * torch.randn(shape, device=device, dtype=dtype))

    def check_head_dim(self, head_dim):
        if head_dim != self.head_dim:
            raise ValueError(f"GeneralScore was built for head_dim={self.head_dim} but q has E={head_dim}; build GeneralScore({head_dim})")

    def as_dot(self, q, k):
        w = self.weight.to(q.dtype)
        if w.dim() == 3:
            if w.shape[0] != q.shape[1]:
                raise ValueError(f"GeneralScore has num_heads={w.shape[0]} but q has H={q.shape[1]}")
            w = w.unsqueeze(0)  # (1, H, E, E)
        return q @ w, k


class AdditiveScore(Score):
    """``vᵀ tanh(W_q q + W_k k)`` with hidden size A. Costs (B, H, l, s, A) memory per tile."""

    name = "additive"

    def __init__(self, head_dim: int, hidden_dim: int | None = None, *, key_dim: int | None = None, device=None, dtype=None):
        super().__init__()
        self.head_dim = require_positive_int("head_dim", head_dim)
        hidden = require_positive_int("hidden_dim", hidden_dim or head_dim)
        kd = key_dim or head_dim
        self.w_q = nn.Linear(head_dim, hidden, bias=False, device=device, dtype=dtype)
        self.w_k = nn.Linear(kd, hidden, bias=True, device=device, dtype=dtype)
        self.v = nn.Linear(hidden, 1, bias=False, device=device, dtype=dtype)

    def check_head_dim(self, head_dim):
        if head_dim != self.head_dim:
            raise ValueError(f"AdditiveScore was built for head_dim={self.head_dim} but q has E={head_dim}; build AdditiveScore({head_dim})")

    def cost_per_element(self, head_dim):
        # add, tanh and the v-projection over an (l, s, A) tensor per score element
        return 1.0 + 3.0 * self.w_q.out_features

    def forward(self, q, k):
        return self.projected()(self.project_queries(q), self.project_keys(k))

    def project_queries(self, q: torch.Tensor) -> torch.Tensor:
        """W_q q: (..., L, E) → (..., L, A)."""
        return nn.functional.linear(q, self.w_q.weight.to(q.dtype))

    def project_keys(self, k: torch.Tensor) -> torch.Tensor:
        """W_k k + b: (..., S, E_k) → (..., S, A). A decoder that queries the same keys at every
        step projects them once with this (Bahdanau et al. 2015, App. A.1.2: "U_a h_j can be
        pre-computed") and scores with :meth:`projected`, instead of S·E·A work per step."""
        return nn.functional.linear(k, self.w_k.weight.to(k.dtype), self.w_k.bias.to(k.dtype))

    def projected(self) -> Score:
        """The score ``vᵀ tanh(q' + k')`` on queries and keys already projected by this score
        (same v; gradients reach W_q, W_k through the projections the caller made)."""
        view = self.__dict__.get("_projected")
        if view is None:
            view = _ProjectedAdditiveScore(self)
            self.__dict__["_projected"] = view  # a plain attribute: the parent owns the weights, no second registration
        return view


class _ProjectedAdditiveScore(Score):
    """``vᵀ tanh(q' + k')`` over q' (B, H, L, A), k' (B, H, S, A) → (B, H, L, S), using a parent's v."""

    name = "additive"

    def __init__(self, parent: AdditiveScore):
        super().__init__()
        self.__dict__["_parent"] = parent  # not a submodule (see AdditiveScore.projected)

    def check_head_dim(self, head_dim):
        if head_dim != self._parent.v.in_features:
            raise ValueError(f"projected additive score expects q and k projected to A={self._parent.v.in_features}, got E={head_dim}; "
                             "pass AdditiveScore.project_queries(q) and project_keys(k)")

    def forward(self, q, k):
        hidden = torch.tanh(q.unsqueeze(-2) + k.unsqueeze(-3))  # (B, H, L, S, A)
        return nn.functional.linear(hidden, self._parent.v.weight.to(q.dtype)).squeeze(-1)  # (B, H, L, S)


class CosineScore(Score):
    """``τ · cos(q, k)``; τ = exp(log_tau) learned, initialised to ``init_temperature``."""

    name = "cosine"

    def __init__(self, init_temperature: float = 10.0, *, learnable: bool = True, eps: float = 1e-6):
        super().__init__()
        if not init_temperature > 0:
            raise ValueError(f"init_temperature must be > 0, got {init_temperature}")
        t = torch.tensor(math.log(init_temperature))
        self.log_tau = nn.Parameter(t) if learnable else nn.Parameter(t, requires_grad=False)
        self.eps = eps

    def as_dot(self, q, k):
        tau = self.log_tau.exp().to(q.dtype)
        qn = q / q.norm(dim=-1, keepdim=True).clamp(min=self.eps)
        kn = k / k.norm(dim=-1, keepdim=True).clamp(min=self.eps)
        return qn * tau, kn


SCORES_BY_NAME = {"dot": DotScore, "scaled_dot": ScaledDotScore, "cosine": CosineScore}
LEARNED_SCORES = {"general": "GeneralScore(head_dim)", "additive": "AdditiveScore(head_dim)"}


def as_score(score: object) -> Score:
    """Normalise what users pass as ``score=``: None (scaled dot), a name, or a Score."""
    if score is None:
        return _DEFAULT
    if isinstance(score, Score):
        return score
    if isinstance(score, str):
        if score in SCORES_BY_NAME:
            return _NAMED[score]
        if score in LEARNED_SCORES:
            raise ValueError(
                f"score={score!r} has learned weights; create attnkit.scores.{LEARNED_SCORES[score]} once "
                "(e.g. in your module's __init__) and pass the object"
            )
        raise ValueError(f"score must be one of {sorted(SCORES_BY_NAME) + sorted(LEARNED_SCORES)} or a Score, got {score!r}")
    raise TypeError(f"score must be None, a name or an attnkit Score, got {type(score).__name__}")


_DEFAULT = ScaledDotScore()
_NAMED = {"dot": DotScore(), "scaled_dot": _DEFAULT, "cosine": CosineScore(learnable=False)}
