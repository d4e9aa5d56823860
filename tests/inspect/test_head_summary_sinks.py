"""classify_heads on weights of a model with attention sinks: rows summing to less than 1.

Weights come from a float64 softmax with one explicit extra column (the sink logit), dropped
afterwards, as :func:`attnkit.inspect.capture` records them for a model with sinks.
"""

from __future__ import annotations

import math

import torch

from attnkit.inspect.capture import capture
from attnkit.inspect.head_summary import classify_heads
from attnkit.modules.multihead import MultiHeadAttention


def _with_sink_column(scores: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """(B, H, L, S) scores, (H,) sink logits -> weights over the S keys of the (S + 1)-column softmax."""
    B, H, L, S = scores.shape
    full = torch.cat([scores, sinks.view(1, H, 1, 1).expand(B, H, L, 1)], -1)
    return torch.softmax(full, -1)[..., :S]


def _previous_token_scores(B, H, L, sharp=6.0):
    g = torch.Generator().manual_seed(0)
    s = torch.randn(B, H, L, L, generator=g, dtype=torch.float64) * 0.1
    idx = torch.arange(1, L)
    s[..., idx, idx - 1] += sharp
    return s.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf"))


def test_sink_share_is_reported_and_sink_parked_heads_are_dead():
    B, H, L = 2, 3, 12
    s = _previous_token_scores(B, H, L)
    # head 0: almost everything to the sink; head 1: 60 % to it; head 2: a negligible sink
    sinks = torch.tensor([12.0, 6.0 + math.log(1.5), -30.0], dtype=torch.float64)
    w = _with_sink_column(s, sinks)
    share = (1 - w.sum(-1)).mean((0, 2))  # (H,) the oracle's sink share, every row valid
    summary = classify_heads([w], key_mask=torch.ones(L, L, dtype=torch.bool).tril()[None, None])
    for h in range(H):
        assert math.isclose(summary[0, h].learned_sink_mass, float(share[h]), abs_tol=1e-12), h
    assert summary[0, 0].label == "dead" and "learned_sink_mass" in summary[0, 0].reason
    # 60 % on the sink: the head's rows still count, with their own numbers (weights over keys)
    assert summary[0, 1].label != "dead" and not math.isnan(summary[0, 1].previous_mass)
    assert 0.3 < summary[0, 1].previous_mass < 0.45
    assert summary[0, 2].label == "positional-previous"
    assert "learned_sink_mass" in summary.columns()


def test_plain_softmax_has_no_sink_column():
    w = torch.softmax(_previous_token_scores(1, 2, 8), -1).float()
    summary = classify_heads([w])
    assert all(s.learned_sink_mass is None for s in summary)
    assert "learned_sink_mass" not in summary.columns()


def test_classify_captured_module_with_sinks():
    """End to end: MultiHeadAttention(sinks=True), captured, then classified."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2, sinks=True).double()
    with torch.no_grad():
        mha.sinks.copy_(torch.tensor([20.0, -20.0], dtype=torch.float64))
    with capture(mha) as rec:
        mha(torch.randn(1, 10, 16, dtype=torch.float64), causal=True)
    summary = classify_heads(rec.attentions)
    assert summary[0, 0].label == "dead" and summary[0, 0].learned_sink_mass > 0.99
    assert summary[0, 1].learned_sink_mass < 1e-6
