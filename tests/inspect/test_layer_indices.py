"""Real layer indices end to end: ``capture(model, layers=[0, 5])`` then classify_heads, the plots
and the viewer all say layers 0 and 5 — not 0 and 1 (a newcomer's rough edge)."""

from __future__ import annotations

import json
import re

import pytest
import torch
from torch import nn

import attnkit
from attnkit.inspect import classify_heads, save_html
from attnkit.modules.multihead import MultiHeadAttention


class _Stack(nn.Module):
    """Six self-attention layers, each a residual MultiHeadAttention (E = 16, H = 2)."""

    def __init__(self, n: int = 6):
        super().__init__()
        self.layers = nn.ModuleList(MultiHeadAttention(16, 2) for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x)[0]  # (output, weights)
        return x


def _record(layers):
    torch.manual_seed(0)
    model = _Stack().eval()
    with attnkit.inspect.capture(model, layers=layers) as rec, torch.no_grad():
        model(torch.randn(1, 7, 16))
    return rec


def test_capture_attentions_carry_the_real_layer_indices():
    rec = _record([0, 5])
    assert len(rec.attentions) == 2
    assert rec.attentions.layers == (0, 5)
    assert rec.summaries.layers == (0, 5)
    assert rec.layers == [0, 5]


def test_classify_heads_labels_rows_with_the_captured_layers():
    summary = classify_heads(_record([0, 5]).attentions)
    assert sorted({s.layer for s in summary}) == [0, 5]
    assert summary.layers == [0, 5] and summary.num_layers == 2
    assert summary[5, 1].layer == 5
    with pytest.raises(KeyError):
        summary[1, 0]
    assert len(summary.labels()) == 2 and summary.metric("entropy").shape == (2, 2)
    assert [r["layer"] for r in summary.to_rows()] == [0, 0, 5, 5]


def test_classify_heads_plain_lists_still_count_from_zero_and_accept_explicit_layers():
    w = torch.softmax(torch.randn(2, 1, 2, 5, 5), -1)
    assert [s.layer for s in classify_heads(list(w))] == [0, 0, 1, 1]
    assert [s.layer for s in classify_heads(list(w), layers=[3, 9])] == [3, 3, 9, 9]
    with pytest.raises(ValueError, match="one index per layer"):
        classify_heads(list(w), layers=[3])


def test_save_html_names_the_real_layers(tmp_path):
    rec = _record([0, 5])
    summary = classify_heads(rec.attentions)
    page = save_html(tmp_path / "a.html", rec.attentions, diagnostics=summary).read_text()
    data = json.loads(re.search(r'<script type="application/json" id="ak-data">(.*?)</script>', page, re.S).group(1))
    assert data["layer_ids"] == [0, 5]
    li = data["diagnostics"]["columns"].index("layer")
    assert sorted({row[li] for row in data["diagnostics"]["rows"]}) == [0, 5]


def test_plots_label_the_real_layers(tmp_path):
    pytest.importorskip("matplotlib")
    from attnkit.inspect import plot_diagnostics, plot_heads_grid

    rec = _record([0, 5])
    fig = plot_heads_grid(rec.attentions)
    ylabels = [ax.get_ylabel() for ax in fig.axes if ax.get_ylabel().startswith("layer")]  # not the colour bar's
    assert ylabels == ["layer 0", "layer 5"]
    fig = plot_diagnostics(classify_heads(rec.attentions))
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["0", "5"]
