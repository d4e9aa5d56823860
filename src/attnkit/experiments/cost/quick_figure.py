"""The quick backend benchmark's figure, drawn from its JSON (``attention_quick.json`` of
``attnkit bench --quick``) in English or Chinese, so that both pages show it in their language.

Two panels side by side: median time and peak memory above the inputs, one bar per (call, backend),
both on a log scale (the backends differ by more than ten times where a mask must be built densely).
Backends skipped for a call (their dense tensors would not fit) have no bar.

Rows of the JSON: ``{"mask", "bias", "dtype", "n", "mode", "backend", "median_ms", "peak_mib", ...}``;
rows with ``"skipped"`` and no ``median_ms`` are left out.
"""

from __future__ import annotations

from ...page.figures import WIDTH_IN, _plt, pick

BACKEND_ORDER = ("sdpa", "blockwise", "reference", "linear", "flex")
_CALL_ZH = {"none": "无", "causal": "因果", "alibi": "ALiBi", "t5": "T5", "sliding256": "滑动窗口 256", "padding": "填充",
            "document": "文档", "window": "窗口"}


def call_name(mask_bias: str, lang: str) -> str:
    """A benchmark call's ``mask/bias`` (e.g. ``sliding256/none``) in ``lang`` (``滑动窗口 256/无``)."""
    if lang != "zh":
        return mask_bias
    return "/".join(_CALL_ZH.get(part, part) for part in mask_bias.split("/"))


def _call_label(row: dict, lang: str, varied: set[str]) -> str:
    """``mask/bias`` of a row, plus the dtype, n and mode when they vary across the rows."""
    label = call_name(f"{row['mask']}/{row['bias']}", lang)
    extra = [str(row.get("dtype")).replace("float", "fp")[:4] if "dtype" in varied else "",
             f"n={row.get('n')}" if "n" in varied else "", ("f+b" if row.get("mode") == "fwdbwd" else "") if "mode" in varied else ""]
    return label + "".join(f"\n{e}" for e in extra if e)


def quick_figure(result: dict, lang: str = "en"):
    """Median time and peak memory per (call, backend) of the quick benchmark ``result``; returns the figure."""
    plt = _plt()
    rows = [r for r in result["rows"] if "median_ms" in r]
    if not rows:
        raise ValueError("quick_figure: result['rows'] holds no measured row (none has 'median_ms'); "
                         "pass the JSON of a finished `attnkit bench --quick` run")
    varied = {k for k in ("dtype", "n", "mode") if len({r.get(k) for r in rows}) > 1}
    groups: dict[str, dict[str, dict]] = {}
    for r in rows:
        groups.setdefault(_call_label(r, lang, varied), {})[r["backend"]] = r
    keys = list(groups)
    backends = [b for b in BACKEND_ORDER if any(b in g for g in groups.values())]
    backends += sorted({b for g in groups.values() for b in g} - set(backends))
    w = 0.8 / max(len(backends), 1)
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH_IN, 4.6), constrained_layout=True)
    panels = (("median_ms", pick(lang, "median time (ms, log scale; lower is better)", "中位时间（毫秒，对数刻度；越低越好）")),
              ("peak_mib", pick(lang, "peak memory above the inputs (MiB, log scale)", "超出输入的峰值内存（MiB，对数刻度）")))
    for ax, (key, title) in zip(axes, panels):
        for j, be in enumerate(backends):
            xs = [i + (j - (len(backends) - 1) / 2) * w for i, k in enumerate(keys) if be in groups[k]]
            ax.bar(xs, [max(groups[k][be][key], 0.1) for k in keys if be in groups[k]], w, label=be, color=f"C{j}")
        ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xticks(range(len(keys)), keys, fontsize=9)
        ax.set_xlabel(pick(lang, "mask/bias of the call", "调用的掩码/偏置"))
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8, title=pick(lang, "backend", "后端"), title_fontsize=8)
    shape, machine = result.get("shape", {}), result.get("machine", {})
    setting = [f"{k}={shape[k]}" for k in ("B", "H", "E") if k in shape]
    setting += [f"{k}={rows[0][k]}" for k in ("n", "dtype") if k not in varied and k in rows[0]]
    where = (pick(lang, f"torch {machine['torch']}, {machine['cpus']} CPUs", f"torch {machine['torch']}，{machine['cpus']} 个 CPU 核")
             if {"torch", "cpus"} <= machine.keys() else "")
    head = pick(lang, "attnkit attention backends, quick benchmark", "attnkit 注意力后端的快速基准测试")
    sep = pick(lang, "; ", "；")
    fig.suptitle(head + pick(lang, ": ", "：") + sep.join(p for p in (" ".join(setting), where) if p), fontsize=10)
    return fig
