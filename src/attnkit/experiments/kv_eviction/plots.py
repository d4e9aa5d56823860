"""The figures of ``kv_eviction``, drawn from its results in English or Chinese.

* :func:`curves_figure` — log perplexity against position (StreamingLLM's Figure 3 shape): one
  line per policy at the headline budget, mean over seeds with a ±1 std band, the training
  context marked;
* :func:`kept_figure` — which original positions each policy keeps at each step (layer 0, head 0);
* :func:`sink_figure` — the mean attention map of each layer, and the weight on position 0
  against a uniform causal row;
* :func:`tradeoff_figure` — last-bin perplexity against the bytes the cache holds, every budget.
"""

from __future__ import annotations

import math

from ...page.figures import WIDTH_IN, _plt, pick

ORDER = ("dense", "window", "sink_window", "window_recompute", "h2o", "snapkv", "quantized8", "quantized4")
NAMES = {"dense": ("dense (everything)", "稠密（全部保留）"), "window": ("window only", "仅窗口"),
         "sink_window": ("sinks + window", "汇点 + 窗口"), "window_recompute": ("window, recomputed", "窗口重算"),
         "h2o": ("H2O", "H2O"), "snapkv": ("SnapKV", "SnapKV"), "quantized8": ("sinks + window, 8-bit", "汇点 + 窗口，8 位"),
         "quantized4": ("sinks + window, 4-bit", "汇点 + 窗口，4 位")}
STYLE = {"dense": ("k", "-"), "window": ("C3", "-"), "sink_window": ("C0", "-"), "window_recompute": ("C2", "--"),
         "h2o": ("C1", "-"), "snapkv": ("C4", "-"), "quantized8": ("C5", ":"), "quantized4": ("C6", ":")}


def name(policy: str, lang: str) -> str:
    en, zh = NAMES[policy]
    return pick(lang, en, zh)


def curves_figure(r: dict, lang: str = "en"):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 4.2), constrained_layout=True)
    b, bs = str(r["headline_budget"]), r["bin_size"]
    for p in ORDER:
        row = r["policies"][p].get("all") or r["policies"][p].get(b)
        if row is None:
            continue
        mean, std = row["curve_nats"]["mean"], row["curve_nats"]["std"]
        x = [bs * (i + 0.5) for i in range(len(mean))]
        color, ls = STYLE[p]
        ax.plot(x, [m / math.log(2) for m in mean], ls, color=color, label=name(p, lang), linewidth=1.4)
        ax.fill_between(x, [(m - s) / math.log(2) for m, s in zip(mean, std)], [(m + s) / math.log(2) for m, s in zip(mean, std)],
                        color=color, alpha=0.15, linewidth=0)
    ax.axvline(r["context"], color="grey", linestyle="--", linewidth=1)
    ax.text(r["context"], ax.get_ylim()[1], pick(lang, " training context", " 训练上下文"), va="top", fontsize=8, color="grey")
    ax.set_yscale("log")
    from matplotlib.ticker import FormatStrFormatter

    for axis in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):  # "2", "3", not "2×10⁰"
        axis(FormatStrFormatter("%g"))
    ax.set_xlabel(pick(lang, "position in the stream (characters)", "在文本流中的位置（字符）"))
    ax.set_ylabel(pick(lang, "bits per character (log scale)", "每字符比特数（对数坐标）"))
    seeds = f"{r['n_seeds']} seeds" if r["n_seeds"] > 1 else "1 seed"
    ax.set_title(pick(lang, f"cache budget {b} tokens, mean of {seeds} ± std",
                      f"缓存预算 {b} 个 token，{r['n_seeds']} 个种子的均值 ± 标准差"), fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))  # outside: no curve or label hides behind it
    return fig


def kept_figure(r: dict, lang: str = "en"):
    plt = _plt()
    shown = [p for p in ("window", "sink_window", "h2o", "snapkv") if p in r["trace"]]
    fig, axes = plt.subplots(1, len(shown), figsize=(WIDTH_IN, 3.4), sharey=True, constrained_layout=True)
    for ax, p in zip(axes, shown):
        xs, ys = [], []
        for t, kept in enumerate(r["trace"][p]):
            xs += [t] * len(kept)
            ys += kept
        ax.scatter(xs, ys, s=0.6, color=STYLE[p][0], marker="s", linewidths=0)
        ax.set_title(name(p, lang), fontsize=9)
        ax.set_xlabel(pick(lang, "step", "步"))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(pick(lang, "original position kept", "被保留的原始位置"))
    fig.suptitle(pick(lang, f"kept positions over time, budget {r['headline_budget']} (layer 0, head 0)",
                      f"随时间被保留的位置，预算 {r['headline_budget']}（第 0 层，第 0 个头）"), fontsize=10)
    return fig


def sink_figure(r: dict, lang: str = "en"):
    plt = _plt()
    s = r["sink"]
    maps = s["maps_seed0"]
    fig, axes = plt.subplots(1, len(maps) + 1, figsize=(WIDTH_IN, 3.2), constrained_layout=True)
    im = None
    for i, (ax, m) in enumerate(zip(axes, maps)):
        # one fixed 0-1 scale for every layer, so a brighter column in one layer is brighter in the others
        im = ax.imshow([[v ** 0.5 for v in row] for row in m], cmap="viridis", aspect="auto", vmin=0, vmax=1)
        ax.set_title(pick(lang, f"layer {i} (√weight)", f"第 {i} 层（√权重）"), fontsize=9)
        ax.set_xlabel(pick(lang, "key position", "键位置"))
    axes[0].set_ylabel(pick(lang, "query position", "查询位置"))
    fig.colorbar(im, ax=list(axes[:-1]), shrink=0.8, label=pick(lang, "√weight (square-root scale)", "√权重（平方根刻度）"))
    ax = axes[-1]
    layers = range(len(maps))
    ax.bar(layers, s["first_mean"], yerr=s["first_std"], color="C0", label=pick(lang, "model", "模型"))
    ax.axhline(s["uniform_first"], color="C3", linestyle="--", label=pick(lang, "uniform row", "均匀分布"))
    ax.set_xticks(list(layers))
    ax.set_xlabel(pick(lang, "layer", "层"))
    ax.set_title(pick(lang, "weight on position 0", "位置 0 上的权重"), fontsize=9)
    ax.legend(fontsize=7)
    return fig


def tradeoff_figure(r: dict, lang: str = "en"):
    """Last-bin perplexity against bytes held, every evicting or quantized policy and budget (dense,
    which outgrows the training context, is left out: its perplexity is in the table)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(WIDTH_IN * 0.7, 3.8), constrained_layout=True)
    for p in ORDER[1:]:
        rows = r["policies"][p]
        pts = sorted((v["nbytes"], v["last_bin_ppl"]["mean"], v["last_bin_ppl"]["std"]) for v in rows.values())
        color, ls = STYLE[p]
        ax.errorbar([x / 1024 for x, _, _ in pts], [y for _, y, _ in pts], yerr=[e for _, _, e in pts], linestyle=ls, marker="o",
                    color=color, label=name(p, lang), markersize=4, capsize=2)
    ax.set_xscale("log")
    ax.set_xlabel(pick(lang, "cache size at the end (KiB, all layers, 1 stream)", "结束时缓存大小（KiB，全部层，单条流）"))
    ax.set_ylabel(pick(lang, "perplexity, last bin", "最后一个区间的困惑度"))
    ax.set_title(pick(lang, f"dense (not shown): {r['perplexity_last_bin']['dense']:.1f}", f"稠密（未画出）：{r['perplexity_last_bin']['dense']:.1f}"), fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    return fig
