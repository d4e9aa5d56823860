"""Figures of ``attnkit experiment seq2seq``, drawn from the results dict alone (so ``attnkit
report`` could redraw them from ``results.json``):

* ``metric_vs_length.png`` — the Bahdanau et al. 2015 Fig. 2 shape: each metric against the
  source-length bucket, one line per model (mean over seeds) with error bars of ± one standard
  deviation over seeds and the band from the lowest to the highest seed shaded; the models are
  nudged apart along x so that bars of models with equal scores stay visible; bucket counts
  under the x labels;
* ``alignments_{model}.png`` — heatmaps of the alignment matrices of a few test sentences, source
  tokens on the x axis and output tokens on the y axis (Bahdanau et al. Fig. 3);
* ``training_curves.png`` — training and validation loss per epoch, one line per model and seed.

Shape legend: a heatmap is (T output tokens, S source tokens).
"""

from __future__ import annotations

import math

import numpy as np

COLORS = {"rnn": "#7f7f7f", "bahdanau": "#1f77b4", "luong": "#2ca02c", "transformer": "#d62728"}
LABELS = {"rnn": "RNN, no attention", "bahdanau": "RNN + Bahdanau", "luong": "RNN + Luong", "transformer": "Transformer"}
METRIC_LABELS = {"exact_match": "exact match (%)", "char_accuracy": "character accuracy (%)", "bleu": "BLEU", "chrf": "chrF"}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bucket_labels(results: dict) -> list[str]:
    first = next(iter(results["models"].values()))
    labels = []
    for b in first["buckets"]:
        lo, hi = b["range"]
        labels.append(f"{lo}–{hi}\n(n={b['count']})" if hi < 1000 else f">{lo - 1}\n(n={b['count']})")
    return labels


def metric_vs_length(ctx, results: dict, relpath: str = "metric_vs_length.png") -> None:
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
            ax.errorbar(xs, mean, yerr=std, fmt="o-", capsize=4, elinewidth=1.4, color=COLORS.get(name),
                        label=f"{LABELS.get(name, name)} ({res['params']:,} params)")
            if runs.shape[1] > 1:
                ax.fill_between(xs, runs.min(1), runs.max(1), color=COLORS.get(name), alpha=0.15, linewidth=0)
        ax.set_xticks(x, labels, fontsize=8)
        ax.set_xlabel(f"source length ({results['length_unit']})")
        ax.set_ylabel(METRIC_LABELS.get(m, m))
        ax.set_ylim(0, 102 if m in ("exact_match", "char_accuracy") else None)  # from 0: gaps read at their true size
        ax.grid(alpha=0.3)
    seeds = len(next(iter(results["models"].values()))["overall"][metrics[0]]["runs"])
    axes[0][0].legend(fontsize=8, loc="lower left")
    fig.suptitle(f"{results['data']['name']}: score by source length (mean of {seeds} seed(s); bars = ± std, band = min–max over seeds)")
    fig.tight_layout()
    ctx.save_figure(fig, relpath)


def alignment_heatmaps(ctx, name: str, examples: list[dict], relpath: str) -> None:
    if not examples:
        return
    plt = _plt()
    widths = [max(4.0, 0.16 * len(e["source"]) + 1.5) for e in examples]
    height = max(3.0, 0.2 * max(len(e["output"]) for e in examples) + 1.8)
    fig, axes = plt.subplots(1, len(examples), figsize=(sum(widths), height), gridspec_kw={"width_ratios": widths}, squeeze=False)
    for ax, ex in zip(axes[0], examples):
        w = np.array(ex["weights"])  # (T, S)
        ax.imshow(w, cmap="Greys", vmin=0, vmax=1, aspect="auto")
        ax.set_xticks(range(len(ex["source"])), [_show(t) for t in ex["source"]], rotation=90, fontsize=7)
        ax.set_yticks(range(len(ex["output"])), [_show(t) for t in ex["output"]], fontsize=7)
        ax.set_xlabel("source tokens")
        ax.set_ylabel("output tokens")
    fig.suptitle(f"{LABELS.get(name, name)}: alignment (attention weight of each output token over the source)")
    fig.tight_layout()
    ctx.save_figure(fig, relpath)


def _show(token: str) -> str:
    return {" ": "␣", "</s>": "EOS"}.get(token, token.replace("▁", "␣"))


def training_curves(ctx, results: dict, relpath: str = "training_curves.png") -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), squeeze=False)
    for name, res in results["models"].items():
        for s, hist in enumerate(res["history"]):
            ep = [r["epoch"] for r in hist]
            kw = {"color": COLORS.get(name), "alpha": 0.9 if s == 0 else 0.45, "label": LABELS.get(name, name) if s == 0 else None}
            axes[0][0].plot(ep, [r["train_loss"] for r in hist], **kw)
            if hist and "val_loss" in hist[0]:
                axes[0][1].plot(ep, [r["val_loss"] for r in hist], **kw)
    for ax, title in zip(axes[0], ("training loss", "validation loss")):
        ax.set_title(f"{title} (token cross-entropy)")
        ax.set_xlabel("epoch")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    ctx.save_figure(fig, relpath)


def finite(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
