"""Figures of ``attnkit experiment seq2seq``, drawn from the results dict alone, in English or
Chinese (``lang``), so that the Chinese copy of a committed run can be drawn again from its
``results.json`` (:func:`run_figures`, used by ``python -m attnkit.experiments.redraw_zh``):

* ``metric_vs_length.png`` — the Bahdanau et al. 2015 Fig. 2 shape: each metric against the
  source-length bucket, one line per model (mean over seeds) with error bars of ± one standard
  deviation over seeds and the band from the lowest to the highest seed shaded; the models are
  nudged apart along x so that bars of models with equal scores stay visible; bucket counts
  under the x labels;
* ``alignments_{model}.png`` — heatmaps of the alignment matrices of a few test sentences, source
  tokens on the x axis and output tokens on the y axis (Bahdanau et al. Fig. 3), wrapped into rows
  at the page's width with one colour bar; the Transformer's is named as what it is, the
  cross-attention of its last decoder layer averaged over heads; the matrices are stored in
  ``results["alignments"]``;
* ``training_curves.png`` — training and validation loss per epoch, one line per model and seed.

A run saves each figure twice (:func:`attnkit.page.figures.draw_both`): the English file, and its
Chinese copy in ``zh/`` beside it when a CJK font is installed.

Shape legend: a heatmap is (T output tokens, S source tokens).
"""

from __future__ import annotations

import math

import numpy as np

from ...page.figures import draw_both, pick

COLORS = {"rnn": "#7f7f7f", "bahdanau": "#1f77b4", "luong": "#2ca02c", "transformer": "#d62728"}
LABELS = {"rnn": "RNN, no attention", "bahdanau": "RNN + Bahdanau", "luong": "RNN + Luong", "transformer": "Transformer"}
LABELS_ZH = {"rnn": "RNN（无注意力）", "bahdanau": "RNN + Bahdanau", "luong": "RNN + Luong", "transformer": "Transformer"}
METRIC_LABELS = {"exact_match": "exact match (%)", "char_accuracy": "character accuracy (%)", "bleu": "BLEU", "chrf": "chrF"}
METRIC_LABELS_ZH = {"exact_match": "完全匹配率（%）", "char_accuracy": "字符准确率（%）", "bleu": "BLEU", "chrf": "chrF"}
UNIT_ZH = {"characters": "个字符", "words": "个词", "tokens": "个 token"}  # "3–5 个字符": a count of units
UNIT_AXIS_ZH = {"characters": "字符数", "words": "词数", "tokens": "token 数"}  # an axis: "源序列长度（字符数）"
FIGURES = ("metric_vs_length.png", "training_curves.png")  # plus alignments_{model}.png per model with alignments


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _label(name: str, lang: str) -> str:
    return (LABELS_ZH if lang == "zh" else LABELS).get(name, name)


def bucket_labels(results: dict) -> list[str]:
    first = next(iter(results["models"].values()))
    labels = []
    for b in first["buckets"]:
        lo, hi = b["range"]
        labels.append(f"{lo}–{hi}\n(n={b['count']})" if hi < 1000 else f">{lo - 1}\n(n={b['count']})")
    return labels


def metric_vs_length_figure(results: dict, lang: str = "en"):
    """Each metric against the source-length bucket, one line per model (see the module docstring)."""
    plt = _plt()
    metrics = results["metric_names"]
    fig, axes = plt.subplots(1, len(metrics), figsize=(6 * len(metrics), 4.2), squeeze=False)
    labels = bucket_labels(results)
    x = np.arange(len(labels))
    names = list(results["models"])
    for ax, m in zip(axes[0], metrics):
        for k, name in enumerate(names):
            res = results["models"][name]
            runs = np.array([b["metrics"][m]["runs"] for b in res["buckets"]], dtype=float)  # (buckets, seeds)
            mean = runs.mean(1)
            std = np.array([b["metrics"][m]["std"] for b in res["buckets"]], dtype=float)  # the tables' ± (results.json)
            xs = x + 0.06 * (k - (len(names) - 1) / 2)  # nudged apart: equal scores would hide each other's bars
            label = pick(lang, f"{LABELS.get(name, name)} ({res['params']:,} params)",
                         f"{_label(name, lang)}，{res['params']:,} 个参数")
            ax.errorbar(xs, mean, yerr=std, fmt="o-", capsize=4, elinewidth=1.4, color=COLORS.get(name), label=label)
            if runs.shape[1] > 1:
                ax.fill_between(xs, runs.min(1), runs.max(1), color=COLORS.get(name), alpha=0.15, linewidth=0)
        ax.set_xticks(x, labels, fontsize=8)
        unit = results["length_unit"]
        ax.set_xlabel(pick(lang, f"source length ({unit})", f"源序列长度（{UNIT_AXIS_ZH.get(unit, unit)}）"))
        ax.set_ylabel((METRIC_LABELS_ZH if lang == "zh" else METRIC_LABELS).get(m, m))
        ax.set_ylim(0, 102 if m in ("exact_match", "char_accuracy") else None)  # from 0: gaps read at their true size
        ax.grid(alpha=0.3)
    seeds = len(next(iter(results["models"].values()))["overall"][metrics[0]]["runs"])
    axes[0][0].legend(fontsize=8, loc="lower left")
    name = results["data"]["name"]
    fig.suptitle(pick(lang, f"{name}: score by source length (mean of {seeds} seed(s); bars = ± std, band = min–max over seeds)",
                      f"{name}：按源序列长度的得分（{seeds} 个种子的均值；误差棒 = ± 标准差，阴影 = 各种子的最小–最大值）"))
    fig.tight_layout()
    return fig


WHOSE = {"transformer": ("cross-attention of the last decoder layer, mean over its heads",
                         "解码器最后一层的交叉注意力，各头取平均"),
         "bahdanau": ("additive (Bahdanau) attention of the decoder over the encoder states",
                      "解码器对编码器状态的加性（Bahdanau）注意力"),
         "luong": ("multiplicative (Luong) attention of the decoder over the encoder states",
                   "解码器对编码器状态的乘性（Luong）注意力")}


def _grid(examples: list[dict]) -> int:
    """Panels per row: three short sentences side by side, one long sentence per row (each panel's
    tick labels stay at least a character wide at the page's 1,000 px)."""
    longest = max(len(e["source"]) for e in examples)
    return max(1, min(len(examples), 3 if longest <= 20 else 2 if longest <= 40 else 1))


def alignment_figure(name: str, examples: list[dict], lang: str = "en"):
    """One heatmap per example ``{"source": [S tokens], "output": [T tokens], "weights": (T, S)}``,
    wrapped into rows at the page's width (never one wide strip), one colour bar for all (weight 0-1)."""
    plt = _plt()
    cols = _grid(examples)
    rows = math.ceil(len(examples) / cols)
    row_h = min(6.0, max(2.4, 0.16 * max(len(e["output"]) for e in examples) + 1.3))  # long outputs: 10 px rows at most
    fig, axes = plt.subplots(rows, cols, figsize=(10.0, row_h * rows + 0.8), squeeze=False, constrained_layout=True)
    im = None
    for ax, ex in zip(axes.flat, examples):
        w = np.array(ex["weights"])  # (T, S)
        im = ax.imshow(w, cmap="Greys", vmin=0, vmax=1, aspect="auto", interpolation="nearest")
        size = 9 if cols * len(ex["source"]) <= 60 else 7
        ax.set_xticks(range(len(ex["source"])), [_show(t) for t in ex["source"]], rotation=90, fontsize=size)
        ax.set_yticks(range(len(ex["output"])), [_show(t) for t in ex["output"]], fontsize=size)
        ax.set_xlabel(pick(lang, "source tokens", "源词元"))
        ax.set_ylabel(pick(lang, "output tokens", "输出词元"))
    for ax in list(axes.flat)[len(examples):]:
        ax.set_visible(False)
    fig.colorbar(im, ax=axes.ravel().tolist(), label=pick(lang, "attention weight (row sums to 1)", "注意力权重（每行和为 1）"),
                 shrink=min(0.8, 2.5 / rows))
    en, zh = WHOSE.get(name, ("attention over the source", "对源序列的注意力"))
    fig.suptitle(pick(lang, f"{LABELS.get(name, name)}: {en}", f"{_label(name, lang)}：{zh}"))
    return fig


def _show(token: str) -> str:
    return {" ": "␣", "</s>": "EOS"}.get(token, token.replace("▁", "␣"))


def training_curves_figure(results: dict, lang: str = "en"):
    """Training and validation loss per epoch, one line per model and seed (later seeds fainter)."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), squeeze=False)
    for name, res in results["models"].items():
        for s, hist in enumerate(res["history"]):
            ep = [r["epoch"] for r in hist]
            kw = {"color": COLORS.get(name), "alpha": 0.9 if s == 0 else 0.45, "label": _label(name, lang) if s == 0 else None}
            axes[0][0].plot(ep, [r["train_loss"] for r in hist], **kw)
            if hist and "val_loss" in hist[0]:
                axes[0][1].plot(ep, [r["val_loss"] for r in hist], **kw)
    titles = (pick(lang, "training loss (token cross-entropy)", "训练损失（词元交叉熵）"),
              pick(lang, "validation loss (token cross-entropy)", "验证损失（词元交叉熵）"))
    for ax, title in zip(axes[0], titles):
        ax.set_title(title)
        ax.set_xlabel("epoch")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def metric_vs_length(ctx, results: dict, relpath: str = "metric_vs_length.png") -> None:
    """:func:`metric_vs_length_figure` saved in the run's folder, in English and (``zh/``) Chinese."""
    draw_both(ctx.save_figure, relpath, lambda lang: metric_vs_length_figure(results, lang))


def alignment_heatmaps(ctx, name: str, examples: list[dict], relpath: str) -> None:
    """:func:`alignment_figure` saved in the run's folder, in English and (``zh/``) Chinese; nothing without examples."""
    if examples:
        draw_both(ctx.save_figure, relpath, lambda lang: alignment_figure(name, examples, lang))


def training_curves(ctx, results: dict, relpath: str = "training_curves.png") -> None:
    """:func:`training_curves_figure` saved in the run's folder, in English and (``zh/``) Chinese."""
    draw_both(ctx.save_figure, relpath, lambda lang: training_curves_figure(results, lang))


def run_figures(results: dict) -> list[tuple[str, object]]:
    """``(file name, draw(lang) -> figure)`` of every figure of a run that its ``results`` dict
    holds the numbers of, for drawing a finished run's figures again (``attnkit.experiments.redraw_zh``);
    the alignment maps need ``results["alignments"]``."""
    figs = [("metric_vs_length.png", lambda lang: metric_vs_length_figure(results, lang)),
            ("training_curves.png", lambda lang: training_curves_figure(results, lang))]
    return figs + [(f"alignments_{n}.png", lambda lang, n=n, al=al: alignment_figure(n, al, lang))
                   for n, al in (results.get("alignments") or {}).items() if al]


def finite(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
