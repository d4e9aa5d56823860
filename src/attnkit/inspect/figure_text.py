"""The words the inspect figures print, in English (``lang="en"``) and simplified Chinese
(``lang="zh"``), and the font a Chinese figure is drawn with.

Every plotting function of :mod:`attnkit.inspect.plots` and :mod:`attnkit.inspect.vision` takes a
keyword-only ``lang`` (default ``"en"``). Its text comes from :data:`WORDS` through :func:`word`,
which names the valid languages when given another; the figure is built and saved inside
:func:`drawing_in`, which puts a CJK font (found by :func:`attnkit.page.figures.cjk_font`, e.g.
Debian's ``fonts-noto-cjk``) after DejaVu Sans for ``"zh"``, so Latin letters and digits keep their
usual font and Chinese characters get one that has them. Only ``matplotlib.rc_context`` is used:
the global settings are back as they were when the block ends, and no backend is chosen.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from typing import Iterator

LANGS = ("en", "zh")

WORDS = {
    "en": {
        "key": "key", "query": "query", "weight": "attention weight", "head": "head {}", "layer": "layer {}",
        "shared": "attention weight (all heads, one square-root colour scale)",
        # diagnostics
        "head_axis": "head", "layer_axis": "layer", "heads_count": "heads", "labels": "labels",
        "entropy_scale": "0 = all on one key, 1 = uniform",
        # vision
        "channel": "channel", "gate": "gate (sigmoid)", "spatial_gate": "spatial gate",
        "pixel_weight": "weight (uniform 1/{n} = {u:.3f})", "last_head": "last layer, head {}",
        "cls_weight": "class-token weight", "rollout_title": "rollout (all layers)", "rollout": "rollout",
        "query_n": "query {}", "prefix_mass": "prefix mass {:.3f}",
    },
    "zh": {
        "key": "键", "query": "查询", "weight": "注意力权重", "head": "第 {} 个头", "layer": "第 {} 层",
        "shared": "注意力权重（所有头共用一个平方根颜色刻度）",
        "head_axis": "头", "layer_axis": "层", "heads_count": "头的个数", "labels": "标签",
        "entropy_scale": "0 = 全在一个键上，1 = 均匀",
        "channel": "通道", "gate": "门控（sigmoid）", "spatial_gate": "空间门控",
        "pixel_weight": "权重（均匀时为 1/{n} = {u:.3f}）", "last_head": "最后一层，第 {} 个头",
        "cls_weight": "类别 token 的权重", "rollout_title": "注意力 rollout（所有层）", "rollout": "rollout 值",
        "query_n": "查询 {}", "prefix_mass": "前缀 token 上的权重 {:.3f}",
    },
}

#: Names of the diagnostics' head labels (:data:`attnkit.inspect.metrics.HEAD_LABELS`) per language.
LABEL_NAMES = {
    "en": {"dead": "dead", "uniform": "uniform", "positional-previous": "positional-previous",
           "positional-next": "positional-next", "positional-self": "positional-self", "content": "content"},
    "zh": {"dead": "停放型", "uniform": "均匀型", "positional-previous": "看前一个 token",
           "positional-next": "看后一个 token", "positional-self": "看自己", "content": "看内容"},
}

#: Titles of the diagnostics' metrics (:attr:`attnkit.inspect.metrics.HeadSummary.METRICS`) per language.
METRIC_NAMES = {
    "en": {"entropy": "normalised entropy"},
    "zh": {"entropy": "归一化熵", "max_weight": "最大权重", "distance": "平均距离（token）",
           "sink_mass": "第一个 token 上的权重", "previous_mass": "前一个 token 上的权重", "next_mass": "后一个 token 上的权重",
           "self_mass": "自身上的权重", "fixed_mass": "固定键上的权重", "special_mass": "[CLS]/[SEP] 上的权重",
           "learned_sink_mass": "学习的汇点上的权重"},
}


def check_lang(lang: str) -> str:
    """``lang`` itself when it is one of :data:`LANGS`; a ValueError naming them otherwise."""
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}; pass 'zh' for Chinese text, 'en' for English")
    return lang


def word(lang: str, key: str) -> str:
    """The figure text ``key`` of :data:`WORDS` in ``lang``."""
    return WORDS[check_lang(lang)][key]


def label_name(lang: str, label: str) -> str:
    """A head label's name in ``lang`` (the label itself when it has no entry)."""
    return LABEL_NAMES[check_lang(lang)].get(label, label)


def metric_name(lang: str, metric: str) -> str:
    """A diagnostics metric's title in ``lang`` (its name with spaces when it has no entry)."""
    return METRIC_NAMES[check_lang(lang)].get(metric, metric.replace("_", " "))


@contextlib.contextmanager
def drawing_in(lang: str) -> Iterator[None]:
    """Inside: text drawn gets the font of ``lang``. Build and save a figure in the block: matplotlib
    picks a text's font when the text is made (tick labels: when the figure is drawn)."""
    check_lang(lang)
    if lang == "en":
        yield
        return
    import matplotlib

    from attnkit.page.figures import cjk_font  # noqa: PLC0415 -- finds the font without touching pyplot

    family = cjk_font()
    if family is None:
        warnings.warn("lang='zh' but matplotlib finds no font covering Chinese, so its characters are drawn as boxes; "
                      "install one (Debian: apt-get install fonts-noto-cjk)", stacklevel=3)
        yield
        return
    with matplotlib.rc_context({"font.family": ["DejaVu Sans", family], "axes.unicode_minus": False}):
        yield


def in_language(plot):
    """``plot(..., lang=...)`` run inside :func:`drawing_in` of its ``lang`` (default ``"en"``)."""

    @functools.wraps(plot)
    def drawn(*args, lang: str = "en", **kwargs):
        with drawing_in(lang):
            return plot(*args, lang=lang, **kwargs)

    return drawn
