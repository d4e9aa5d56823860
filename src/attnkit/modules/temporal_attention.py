"""Temporal attention: each decoder step weighs every past time step of an encoder.

Luong, Pham & Manning 2015, "Effective Approaches to Attention-based Neural Machine Translation",
https://arxiv.org/abs/1508.04025 (global attention, attention after the recurrent step), and
Bahdanau, Cho & Bengio 2015, https://arxiv.org/abs/1409.0473 (additive score), applied to time
series as in Qin et al. 2017, "A Dual-Stage Attention-Based RNN for Time Series Prediction",
https://arxiv.org/abs/1704.02971 (temporal attention over encoder hidden states).

For a query ``q_t`` (a decoder state) and encoder states ``h_1 .. h_S`` (one per past step)::

    e_ts  = score(W_q q_t, W_k h_s)          # any attnkit score: dot, scaled dot, general, additive, cosine
    a_ts  = softmax_s(e_ts)                   # one weight per past step; sum_s a_ts = 1
    c_t   = sum_s a_ts h_s                    # context: the states themselves, not a projection of them

The values are the unprojected states so that ``a_ts`` reads as "how much of past step s went into
the context of step t", which is what the attention-versus-lag plot shows.

Shape legend: B batch, L query steps (decoder steps), S past steps (encoder states), Dq query size,
Ds state size, E attention size (after W_q / W_k).
"""

from __future__ import annotations

import torch
from torch import nn

from ..core.call import attention
from ..core.checks import require_ndim, require_positive_int, require_tensor
from ..core.scores import AdditiveScore, GeneralScore, Score, as_score
from .memory_output import MemoryAttentionOutput

SCORE_NAMES = ("dot", "scaled_dot", "cosine", "general", "additive")


TemporalAttentionOutput = MemoryAttentionOutput  # context (B, L, Ds), weights (B, L, S): the shared type, by its older name


def make_score(score: str | Score | None, attn_dim: int) -> Score:
    """A score object by name; the learned ones (general, additive) are built for ``attn_dim``."""
    if isinstance(score, Score) or score is None:
        return as_score(score)
    if score == "general":
        return GeneralScore(attn_dim)
    if score == "additive":
        return AdditiveScore(attn_dim)
    if score in SCORE_NAMES:
        # cosine scores carry a learned temperature: a fresh object per module, not the shared default
        return type(as_score(score))() if score == "cosine" else as_score(score)
    raise ValueError(f"score must be one of {list(SCORE_NAMES)} or an attnkit Score, got {score!r}")


class TemporalAttention(nn.Module):
    """Attention of L query steps over S past states; returns the context and per-step weights.

    >>> att = TemporalAttention(query_dim=32, state_dim=32, score="additive")
    >>> out = att(torch.randn(4, 24, 32), torch.randn(4, 96, 32))
    >>> out.context.shape, out.weights.shape
    (torch.Size([4, 24, 32]), torch.Size([4, 24, 96]))
    """

    def __init__(
        self,
        query_dim: int,
        state_dim: int,
        attn_dim: int | None = None,
        *,
        score: str | Score | None = "scaled_dot",
        backend: str = "auto",
        device=None,
        dtype=None,
    ):
        super().__init__()
        self.query_dim = require_positive_int("query_dim", query_dim)
        self.state_dim = require_positive_int("state_dim", state_dim)
        self.attn_dim = require_positive_int("attn_dim", attn_dim if attn_dim is not None else state_dim)
        self.w_q = nn.Linear(query_dim, self.attn_dim, bias=False, device=device, dtype=dtype)
        self.w_k = nn.Linear(state_dim, self.attn_dim, bias=False, device=device, dtype=dtype)
        self.score = make_score(score, self.attn_dim)
        if dtype is not None or device is not None:
            self.score.to(device=device, dtype=dtype)
        self.backend = backend

    def forward(
        self, query: torch.Tensor, states: torch.Tensor, valid: torch.Tensor | None = None
    ) -> MemoryAttentionOutput:
        """query (B, L, Dq) or (B, Dq); states (B, S, Ds); valid (B, S) bool, True = a real past step.

        A query given as (B, Dq) (one decoder step) returns context (B, Ds) and weights (B, S).
        """
        require_tensor("query", query)
        require_tensor("states", states)
        single = query.dim() == 2
        if single:
            query = query.unsqueeze(1)
        require_ndim("query", query, 3, "(B, L, Dq)", "pass one decoder step as (B, Dq) or many as (B, L, Dq)")
        require_ndim("states", states, 3, "(B, S, Ds)", "stack the encoder outputs along dim 1")
        B, L, Dq = query.shape
        if Dq != self.query_dim:
            raise ValueError(f"query has size Dq={Dq} but this TemporalAttention was built with query_dim={self.query_dim}")
        if states.shape[0] != B or states.shape[2] != self.state_dim:
            raise ValueError(
                f"states must be (B={B}, S, Ds={self.state_dim}), got {tuple(states.shape)}; "
                "pass the encoder outputs of the same batch"
            )
        mask = None
        if valid is not None:
            require_tensor("valid", valid)
            if valid.dtype != torch.bool or valid.shape != states.shape[:2]:
                raise ValueError(
                    f"valid must be a bool tensor (B, S)={tuple(states.shape[:2])}, got {valid.dtype} "
                    f"{tuple(valid.shape)}; True marks a real past step"
                )
            mask = valid[:, None, None, :]  # (B, 1, 1, S): broadcast over the head and query axes
        q = self.w_q(query).unsqueeze(1)  # (B, 1, L, E): one head
        k = self.w_k(states).unsqueeze(1)  # (B, 1, S, E)
        v = states.unsqueeze(1)  # (B, 1, S, Ds)
        res = attention(q, k, v, score=self.score, mask=mask, backend=self.backend, return_weights=True)
        context, weights = res.out.squeeze(1), res.weights.squeeze(1)  # (B, L, Ds), (B, L, S)
        if single:
            return MemoryAttentionOutput(context.squeeze(1), weights.squeeze(1))
        return MemoryAttentionOutput(context, weights)

    def extra_repr(self) -> str:
        return f"query_dim={self.query_dim}, state_dim={self.state_dim}, attn_dim={self.attn_dim}, score={self.score.name}"
