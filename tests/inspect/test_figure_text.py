"""Every inspect plot in English (the default) and Chinese (``lang="zh"``): the Chinese figure's
titles, axes, colour bars and legends are Chinese and every glyph is found in a font (matplotlib warns
"Glyph ... missing from font" otherwise), the English one has no Chinese, the data drawn is the same
in both, ``lang`` is keyword-only, a bad ``lang`` is one clear error, and matplotlib's global settings
are left as they were."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("matplotlib")

from attnkit.inspect.metrics import classify_heads  # noqa: E402
from attnkit.inspect.plots import plot_diagnostics, plot_head, plot_heads_grid, plot_patch_map  # noqa: E402
from attnkit.inspect.vision import plot_channel_gates, plot_pixel_attention, plot_spatial_gate, plot_vit_attention  # noqa: E402
from attnkit.page.figures import cjk_font  # noqa: E402

CJK = re.compile(r"[\u3400-\u9fff]")
MISSING_GLYPH = ".*missing from font"


def _weights(*shape: int) -> torch.Tensor:
    return torch.softmax(torch.randn(*shape, generator=torch.Generator().manual_seed(0)), -1)


def _rand(*shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(1))


def _summary():
    w = _weights(1, 3, 6, 6)
    w[:, 0] = 0
    w[:, 0, :, 0] = 1  # a dead head
    return classify_heads([w, w])


PLOTS = {  # name -> draw(lang): every plotting function of attnkit.inspect, on small made-up weights
    "plot_head": lambda lang: plot_head(_weights(4, 4), ["a", "b", "c", "d"], lang=lang),
    "plot_heads_grid": lambda lang: plot_heads_grid([_weights(1, 2, 4, 4)], lang=lang),
    "plot_diagnostics": lambda lang: plot_diagnostics(_summary(), lang=lang),
    "plot_patch_map": lambda lang: plot_patch_map(_weights(5), (2, 2), num_prefix_tokens=1, title="x", lang=lang),
    "plot_channel_gates": lambda lang: plot_channel_gates(_rand(2, 6), labels=["a", "b"], lang=lang),
    "plot_spatial_gate": lambda lang: plot_spatial_gate(_rand(3, 3), _rand(6, 6), lang=lang),
    "plot_pixel_attention": lambda lang: plot_pixel_attention(_weights(2, 9, 9), (3, 3), (1, 1), _rand(6, 6), lang=lang),
    "plot_vit_attention": lambda lang: plot_vit_attention([_weights(1, 2, 5, 5)] * 2, (2, 2), _rand(8, 8), lang=lang),
}


def _text_artists(fig) -> list:
    """Every non-empty text artist on the figure: titles, axis labels, colour bars, legends, ticks."""
    fig.canvas.draw()  # tick labels are made when the figure is drawn
    return [t for t in fig.findobj(lambda a: hasattr(a, "get_text") and hasattr(a, "get_fontname")) if t.get_text()]


def _texts(fig) -> list[str]:
    return [t.get_text() for t in _text_artists(fig)]


def _images(fig) -> list[np.ndarray]:
    """The data drawn: every image's array and the heights of the bars."""
    bars = [np.array([p.get_height() for p in ax.patches if hasattr(p, "get_height")]) for ax in fig.axes if ax.patches]
    return [np.asarray(im.get_array(), dtype=float) for ax in fig.axes for im in ax.get_images()] + bars


@pytest.mark.parametrize("name", PLOTS)
def test_english_by_default_and_lang_en_is_the_same_figure(name):
    fig, same = PLOTS[name]("en"), PLOTS[name]("en")
    texts = _texts(fig)
    assert texts and not any(CJK.search(t) for t in texts), texts
    assert _texts(same) == texts


@pytest.mark.skipif(cjk_font() is None, reason="no CJK font on this machine (apt-get install fonts-noto-cjk)")
@pytest.mark.parametrize("name", PLOTS)
def test_chinese_text_in_a_font_that_has_it_and_the_same_data(name, tmp_path):
    import matplotlib

    before = dict(matplotlib.rcParams)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=MISSING_GLYPH)
        zh = PLOTS[name]("zh")
        zh.savefig(tmp_path / "zh.png", dpi=40)  # every glyph drawn: a missing one is an error here
    chinese = [t for t in _texts(zh) if CJK.search(t)]
    assert chinese, _texts(zh)
    fonts = {t.get_text(): t.get_fontproperties().get_family() for t in _text_artists(zh) if CJK.search(t.get_text())}
    assert all(cjk_font() in f for f in fonts.values()), fonts  # each Chinese text asks for the CJK font
    en = PLOTS[name]("en")
    assert len(_images(zh)) == len(_images(en)) > 0
    for a, b in zip(_images(zh), _images(en)):
        np.testing.assert_array_equal(a, b)  # only the words change
    assert {k: v for k, v in matplotlib.rcParams.items() if k in before} == before  # no global setting left changed


def test_the_diagnostics_labels_and_axes_are_translated():
    if cjk_font() is None:
        pytest.skip("no CJK font on this machine (apt-get install fonts-noto-cjk)")
    fig = plot_diagnostics(_summary(), lang="zh")
    left, bar = fig.axes[0], fig.axes[1]
    assert (left.get_xlabel(), left.get_ylabel(), left.get_title()) == ("头", "层", "归一化熵")
    ticks = [t.get_text() for t in bar.get_yticklabels()]
    assert ticks[0] == "D  停放型" and ticks[-1] == "C  看内容"
    assert [t.get_text() for t in left.texts] == [t.get_text() for t in plot_diagnostics(_summary()).axes[0].texts]  # same letters


def test_lang_is_keyword_only_and_a_bad_one_is_a_clear_error():
    with pytest.raises(ValueError, match="lang must be one of en, zh, got 'fr'"):
        plot_pixel_attention(_weights(2, 9, 9), (3, 3), (1, 1), lang="fr")
    with pytest.raises(ValueError, match="lang must be one of en, zh"):
        plot_diagnostics(_summary(), lang="cn")
    import inspect

    for plot in (plot_head, plot_heads_grid, plot_diagnostics, plot_patch_map, plot_channel_gates, plot_spatial_gate,
                 plot_pixel_attention, plot_vit_attention):
        lang = inspect.signature(plot).parameters["lang"]
        assert (lang.kind, lang.default) == (inspect.Parameter.KEYWORD_ONLY, "en"), plot.__name__
