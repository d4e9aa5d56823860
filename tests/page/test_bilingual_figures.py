"""Figures in both languages (:mod:`attnkit.page.figures`) and how the page picks one
(:func:`attnkit.page.html.figure`): the Chinese copy is drawn apart, with a CJK font, and the
Chinese page falls back to the English figure with a visible note when there is none."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from attnkit.page import figures as F  # noqa: E402
from attnkit.page.html import details, figure, so_what  # noqa: E402


def _draw(lang: str):
    plt = F._plt()
    fig, ax = plt.subplots(figsize=(F.WIDTH_IN, 2))
    ax.set_title(F.pick(lang, "weights", "权重"))
    return fig


def test_the_chinese_copy_is_drawn_apart_with_a_cjk_font(tmp_path):
    if F.cjk_font() is None:
        pytest.skip("no CJK font on this machine (apt-get install fonts-noto-cjk)")
    en, zh = F.save_both(tmp_path / "a.png", _draw)
    assert (en, zh) == (tmp_path / "a.png", tmp_path / "zh" / "a.png") and zh.read_bytes() != en.read_bytes()
    assert 'data-figure-lang="zh"' in figure(en, "a", "zh") and "figure-en" not in figure(en, "a", "zh")
    assert 'data-figure-lang="en"' in figure(en, "a", "en")


def test_without_a_font_only_english_is_drawn_and_the_chinese_page_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(F, "cjk_font", lambda: None)
    assert F.save_both(tmp_path / "a.png", _draw) == [tmp_path / "a.png"]
    assert not (tmp_path / "zh").exists()
    html = figure(tmp_path / "a.png", "a", "zh")
    assert 'data-figure-lang="en"' in html and 'class="note figure-en"' in html and "fonts-noto-cjk" in html
    assert "figure-en" not in figure(tmp_path / "a.png", "a", "en")  # the English page needs no note


def test_a_cjk_font_found_is_one_matplotlib_can_draw_chinese_with(tmp_path):
    family = F.cjk_font()
    if family is None:
        pytest.skip("no CJK font on this machine")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Glyph ... missing from font(s)" would be a warning
        with F.language("zh"):
            F.save(_draw("zh"), tmp_path / "zh.png")


def test_details_and_so_what():
    assert details("More", "") == ""  # nothing to fold: no empty box
    assert details("More <code>x</code>", "<p>b</p>") == "<details><summary>More <code>x</code></summary><p>b</p></details>"
    assert so_what("zh", "t").startswith('<div class="sowhat"><b>这说明什么:</b>')
