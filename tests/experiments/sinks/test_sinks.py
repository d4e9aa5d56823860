"""The sinks section's numbers: where each layer's weight goes, checked on weights built by hand
(their answer known), and the section's reading of an eviction that moves the words."""

from __future__ import annotations

import torch

from attnkit.experiments.sinks.experiment import render, where_weight_goes


def test_where_the_weight_goes_on_hand_built_weights():
    # two texts padded to L = 5 (lengths 5 and 3); every real query puts 0.6 on key 0 and the rest evenly
    w = torch.zeros(2, 2, 5, 5)  # (B, H, L, L)
    for i, n in enumerate((5, 3)):
        w[i, :, :n, :n] = 0.4 / (n - 1)
        w[i, :, :n, 0] = 0.6
    (row,) = where_weight_goes((w,), [5, 3])
    assert row["first"] == torch.tensor(0.6).item()
    assert abs(row["last"] - (0.4 / 4 + 0.4 / 2) / 2) < 1e-7
    assert abs(row["uniform"] - (1 / 5 + 1 / 3) / 2) < 1e-12


def test_the_reading_quotes_the_sink_and_the_eviction(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.figure(figsize=(10, 3.8)).savefig(tmp_path / "sinks.png", dpi=100)
    data = {"layers": [{"layer": 0, "first": 0.1, "last": 0.05, "uniform": 0.05}, {"layer": 1, "first": 0.5, "last": 0.02, "uniform": 0.04}],
            "eviction": {"sink": 0.32, "middle": 0.008}, "texts": 4, "source": "four plain sentences", "figure": "sinks.png"}
    en, zh = render(data, tmp_path, "en"), render(data, tmp_path, "zh")
    assert "In layer 2 a query gives position 0 ([CLS]) 0.50" in en and "12× the uniform share" in en
    assert "0.3200" in en and "0.0080" in en and "40.0× as far" in en
    assert "第 2 层" in zh and "40.0 倍" in zh
