"""The typical calls whose ``auto`` dispatch the cost section shows (backend that ran, and why)."""

from __future__ import annotations

import torch

from ...core import biases, masks, scores


def _example_calls(L: int = 64) -> list[tuple[str, dict]]:
    torch.manual_seed(0)
    return [
        ("plain", {}),
        ("causal (L == S)", {"mask": masks.causal()}),
        ("padding (lengths 40, 64)", {"mask": masks.padding_mask([40, 64], L)}),
        ("sliding window 16", {"mask": masks.sliding_window(left=15, right=0)}),
        ("document ids", {"mask": masks.document(torch.arange(L) // 20)}),
        ("ALiBi bias", {"bias": biases.ALiBi(4)}),
        ("causal + T5 bias", {"mask": masks.causal(), "bias": biases.T5RelativeBias(4, bidirectional=False)}),
        ("additive (Bahdanau) score", {"score": scores.AdditiveScore(16)}),
        ("weights requested", {"mask": masks.causal(), "return_weights": True}),
    ]
