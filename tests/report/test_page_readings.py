"""Sentences the page uses to read a figure, held to the numbers they read.

Each reading is a function of its numbers; these tests feed it both sides of the line it draws and
check the words on each side, in English and in Chinese.
"""

from __future__ import annotations

import pytest

from attnkit.experiments.head_split.experiment import _sweep_sentence
from attnkit.experiments.seq2seq.plots import alignment_figure
from attnkit.experiments.vision.section import spatial_meaning


@pytest.mark.parametrize("lang, not_mask, partly", [("en", "not an object mask", "partly like an object mask"),
                                                     ("zh", "不是物体掩码", "部分起到了物体掩码的作用")])
def test_the_spatial_gate_is_read_by_which_side_passes_more(lang, not_mask, partly):
    background_wins = spatial_meaning({"on_object": 0.45, "on_background": 0.66}, "garment", "衣物", lang)
    object_wins = spatial_meaning({"on_object": 0.70, "on_background": 0.30}, "garment", "衣物", lang)
    assert not_mask in background_wins and not_mask not in object_wins
    assert partly in object_wins and partly not in background_wins


def _sweep(accs: list[tuple[int, float, float]]) -> dict:
    return {"dim": 64, "seeds": 3, "source": "committed run",
            "sweep": [{"head_dim": e, "acc_mean": m, "acc_std": s} for e, m, s in accs]}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_head_size_rule_is_squared_with_the_sweep(lang):
    """The 64-128 rule is always named; a gap within 2x the spread neither confirms nor refutes it, a
    gap beyond it where small heads win says the rule is about large models."""
    within = _sweep_sentence(_sweep([(2, 0.91, 0.02), (64, 0.90, 0.02)]), None, lang)
    beyond = _sweep_sentence(_sweep([(2, 0.95, 0.005), (64, 0.80, 0.005)]), None, lang)
    for text in (within, beyond):
        assert "64–128" in text
    if lang == "en":
        assert "neither confirms nor refutes" in within and "neither confirms" not in beyond
        assert "not a law" in beyond
    else:
        assert "既不能证实也不能否定" in within and "既不能证实" not in beyond


@pytest.mark.parametrize("lang, words", [("en", ("last decoder layer", "heads")), ("zh", ("解码器最后一层", "各头"))])
def test_the_transformer_map_says_which_layer_and_heads(lang, words):
    example = {"source": list("abc"), "output": list("xy"), "weights": [[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]]}
    fig = alignment_figure("transformer", [example], lang)
    try:
        title = fig._suptitle.get_text()
        assert all(w in title for w in words)
        assert len(fig.axes) == 2  # one map and one colour bar
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
