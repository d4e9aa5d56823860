"""The forecast experiment's figures, published reference numbers, and report section.

* :func:`attention_by_lag` — ``lstm_attention``'s weights averaged over test windows, read by lag:
  decoder step t (row T_in + t) attending to input step s has lag ``T_in + t - s``, so a weight
  concentrated at lag 48 on half-hourly data means "look at the same time yesterday".
* :func:`forecast_figure`, :func:`attention_figure` — a run's figures, each saved in English and, in
  ``zh/``, Chinese; :func:`forecast_curves` — the forecast figure's numbers, stored in ``results.json``;
  :func:`run_figures` — the ones ``results.json`` holds the numbers of, drawn again by
  ``python -m attnkit.experiments.redraw_zh``;
* :data:`PUBLISHED` — ETTh1 multivariate MSE/MAE (scaled, standard split) as the papers publish them.
* :func:`section` / :func:`reading` — the tables and the plain-language reading (English or Chinese),
  written in :mod:`.section`.

Shape legend: N windows, T_in input length, T_out horizon.
"""

from __future__ import annotations

import numpy as np
import torch

from ...page.figures import draw_both, pick

# (data, features, input_len, horizon) -> rows; numbers exactly as the cited tables state them
PUBLISHED = {
    ("ETTh1", "M", None, 24): [
        {"model": "Informer", "input_len": "searched", "mse": 0.577, "mae": 0.549,
         "source": "Zhou et al. 2021, Informer, arXiv:2012.07436, Table 2 (multivariate)"},
    ],
    ("ETTh1", "M", 336, 96): [
        {"model": "PatchTST/42", "input_len": 336, "mse": 0.375, "mae": 0.399,
         "source": "Nie et al. 2023, PatchTST, arXiv:2211.14730, Table 3"},
        {"model": "DLinear", "input_len": 336, "mse": 0.375, "mae": 0.399,
         "source": "Zeng et al. 2023, DLinear, arXiv:2205.13504, Table 2 (as quoted by PatchTST Table 3)"},
        {"model": "PatchTST/64", "input_len": 512, "mse": 0.370, "mae": 0.400,
         "source": "Nie et al. 2023, PatchTST, arXiv:2211.14730, Table 3"},
    ],
    ("ETTh1", "M", 96, 96): [
        {"model": "PatchTST", "input_len": 96, "mse": 0.414, "mae": None,
         "source": "input-96 re-runs in later benchmark tables, a secondary quotation; not checked against a primary table here, MAE not quoted"},
        {"model": "DLinear", "input_len": 96, "mse": 0.386, "mae": None,
         "source": "input-96 re-runs in later benchmark tables, a secondary quotation; not checked against a primary table here, MAE not quoted"},
    ],
}


def published_for(data: str, features: str, input_len: int, horizon: int) -> list[dict]:
    """Published rows for this data set and setting (Informer's input length was searched)."""
    return PUBLISHED.get((data, features, input_len, horizon), []) + PUBLISHED.get((data, features, None, horizon), [])


@torch.no_grad()
def attention_by_lag(model, data, lags_of_interest: dict[str, int], max_windows: int = 512, device=None) -> dict:
    """Average weight per (decoder step, input step) and per lag over up to ``max_windows`` test windows."""
    model = getattr(model, "module", model)
    model.eval()
    idx = np.linspace(0, len(data.test) - 1, min(max_windows, len(data.test))).astype(int)
    dev = device or next(model.parameters()).device
    total = None
    for chunk in np.array_split(idx, max(1, len(idx) // 128)):
        past, known, _ = (torch.stack(t) for t in zip(*(data.test[int(i)] for i in chunk)))
        _, w = model.forecast_with_weights(past.to(dev), known.to(dev) if known.shape[-1] else None)
        s = w.double().sum(0).cpu()  # (T_out, T_in)
        total = s if total is None else total + s
    heat = total / len(idx)  # rows sum to 1
    T_out, T_in = heat.shape
    lag = T_in + torch.arange(T_out)[:, None] - torch.arange(T_in)[None, :]  # (T_out, T_in), lag >= 1
    n_lags = T_in + T_out - 1
    by_lag = torch.zeros(n_lags + 1, dtype=torch.float64).index_add_(0, lag.flatten(), heat.flatten())
    count = torch.zeros(n_lags + 1, dtype=torch.float64).index_add_(0, lag.flatten(), torch.ones(lag.numel(), dtype=torch.float64))
    mean_by_lag = (by_lag / count.clamp(min=1))[1:]  # index 0 is lag 1
    median = float(mean_by_lag.median())
    lags = {}
    for name, L in lags_of_interest.items():
        if 1 <= L <= n_lags:
            wgt = float(mean_by_lag[L - 1])
            lags[name] = {"lag": L, "weight": wgt, "ratio_to_median": wgt / median if median > 0 else None}
    top = torch.topk(mean_by_lag, k=min(5, n_lags)).indices + 1
    return {
        "windows": int(len(idx)), "uniform_weight": 1.0 / T_in, "median_weight": median,
        "mean_weight_by_lag": [round(float(x), 6) for x in mean_by_lag], "top_lags": top.tolist(),
        "lags_of_interest": lags, "heatmap": [[round(float(x), 5) for x in row] for row in heat],
    }


def lag_rhythm(mean_weight_by_lag, lags_of_interest: dict | None = None) -> dict:
    """Read a weight-by-lag profile (index i is lag i + 1) the way its plot is read: its dominant
    period, the peaks, and where each lag of interest sits among its neighbours.

    The period is the median spacing of the profile's peaks (local maxima); ``autocorr`` is the
    profile's autocorrelation (mean removed) at that shift: near 1 a clean rhythm, below ~0.3 none.
    A lag of interest L is compared with lags within half a period (or L/2 without a rhythm) of it."""
    b = np.asarray(mean_weight_by_lag, dtype=np.float64)
    n = len(b)
    x = b - b.mean()
    denom = float((x * x).sum())
    peaks = [i + 1 for i in range(1, n - 1) if b[i] > b[i - 1] and b[i] >= b[i + 1]]  # lags of the local maxima
    period = int(round(float(np.median(np.diff(peaks))))) if len(peaks) >= 3 else None
    if period is not None and not 1 <= period < n:
        period = None
    strength = float((x[:-period] * x[period:]).sum()) / denom if period and denom > 0 else 0.0
    med = float(np.median(b))
    near = {}
    for name, d in (lags_of_interest or {}).items():
        L = d["lag"] if isinstance(d, dict) else int(d)
        if not 1 <= L <= n:
            continue
        half = max(1, (period if period and strength >= 0.3 else L) // 2)
        lo, hi = max(1, L - half), min(n, L + half)
        seg = b[lo - 1 : hi]
        lmin, lmax = lo + int(seg.argmin()), lo + int(seg.argmax())
        span = float(seg.max() - seg.min())
        near[name] = {"lag": L, "weight": float(b[L - 1]), "from": lo, "to": hi, "min": float(seg.min()), "min_lag": lmin,
                      "max": float(seg.max()), "max_lag": lmax, "position": float((b[L - 1] - seg.min()) / span) if span > 0 else 0.5}
    return {"period": period, "autocorr": strength, "peak_lags": peaks, "median": med, "neighbours": near}


def attention_figure(att: dict, lang: str = "en"):
    """The LSTM's temporal attention: the (forecast step, input step) mean weights, and the weight by
    lag with the uniform level and the lags of interest marked (in ``lang``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = lambda en, zh: zh if lang == "zh" else en  # noqa: E731
    heat = np.array(att["heatmap"])
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [1.1, 1]}, constrained_layout=True)
    im = a1.imshow(heat, aspect="auto", cmap="viridis")
    a1.set(xlabel=t("input step s (oldest → newest)", "输入步 s（最早 → 最新）"), ylabel=t("forecast step t", "预测步 t"),
           title=t("lstm_attention: mean weight", "lstm_attention：平均权重"))
    fig.colorbar(im, ax=a1, label=t("mean attention weight", "平均注意力权重"))
    by_lag = np.array(att["mean_weight_by_lag"])
    a2.plot(np.arange(1, len(by_lag) + 1), by_lag, lw=1)
    a2.axhline(att["uniform_weight"], color="grey", ls=":", label=t("uniform 1/T_in", "均匀 1/T_in"))
    names = {"daily": "日", "weekly": "周"}
    for name, d in att["lags_of_interest"].items():
        a2.axvline(d["lag"], color="tab:red", ls="--", lw=0.8)
        # x in data units, y as a fraction of the axes: the label stays inside whatever the weights' range
        a2.text(d["lag"], 0.97, f" {t(name, names.get(name, name))} ({d['lag']})", color="tab:red", fontsize=8, va="top",
                transform=a2.get_xaxis_transform())
    a2.set(xlabel=t("lag (forecast step − input step)", "滞后（预测步 − 输入步）"), ylabel=t("mean attention weight", "平均注意力权重"),
           title=t("attention versus lag", "注意力与滞后"))
    a2.legend(fontsize=8)
    return fig


def save_attention_plot(ctx, att: dict, relpath: str) -> None:
    """:func:`attention_figure` saved in the run's folder, in English and (``zh/``) Chinese."""
    draw_both(ctx.save_figure, relpath, lambda lang: attention_figure(att, lang))


def _rounded(values) -> list[float]:
    """Five significant digits: the curves' JSON stays small, far below a line's width on the figure."""
    return [float(f"{float(v):.5g}") for v in values]


def forecast_curves(data, preds: dict[str, torch.Tensor], idx: list[int]) -> dict:
    """What :func:`forecast_figure` draws, JSON-able, in original units: the plotted channel's name
    and, per test window of ``idx``, its last ``min(T_in, 3·T_out)`` input steps, the truth and each
    model's forecast over the horizon; ``preds[model]``: (len(idx), T_out, C_out), scaled.
    Stored in ``results.json`` so that a finished run's figure can be drawn again in another language."""
    ch = len(data.targets) - 1  # the last forecast channel: the target column by convention
    windows = []
    for j, i in enumerate(idx):
        past, _, target = data.test[i]
        T_in, T_out = past.shape[0], target.shape[0]
        show = min(T_in, 3 * T_out)
        windows.append({
            "index": int(i), "history": _rounded(data.to_original(past[-show:, data.targets])[:, ch]),
            "truth": _rounded(data.to_original(target)[:, ch]),
            "models": {m: _rounded(data.to_original(p[j])[:, ch]) for m, p in preds.items()},
        })
    return {"channel": data.target_names[ch], "windows": windows}


def forecast_figure(curves: dict, lang: str = "en"):
    """History, truth and each model's forecast of the plotted channel (original units) in a few test
    windows, from :func:`forecast_curves`' dict; one panel per window."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wins = curves["windows"]
    fig, axes = plt.subplots(len(wins), 1, figsize=(12, 3.2 * len(wins)), squeeze=False, constrained_layout=True)
    styles = ["-", "--", "-.", ":"]
    markers = ["o", "s", "^", "D", "v", "P", "X"]
    for ax, win in zip(axes[:, 0], wins):
        hist, truth = win["history"], win["truth"]
        T_out = len(truth)
        ax.plot(np.arange(-len(hist), 0), hist, color="black", lw=1, label=pick(lang, "history", "历史"))
        ax.axvspan(-0.5, T_out - 0.5, color="#f3f3f3", zorder=0)  # the forecast horizon, shaded
        ax.plot(np.arange(T_out), truth, color="black", lw=2.5, label=pick(lang, "truth", "真实值"))
        for k, (model, p) in enumerate(win["models"].items()):  # one colour, dash and marker each
            ax.plot(np.arange(T_out), p, lw=1.3, color=f"C{k}", ls=styles[k % len(styles)], marker=markers[k % len(markers)],
                    markevery=max(1, T_out // 6), ms=4, label=model)
        ax.set(ylabel=curves["channel"], title=pick(lang, f"test window {win['index']}", f"测试窗口 {win['index']}"))
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 5), fontsize=9, frameon=False)
    axes[-1, 0].set_xlabel(pick(lang, "steps relative to the forecast origin (shaded: the forecast horizon)",
                                "相对预测起点的步数（阴影：预测区间）"))
    return fig


def save_forecast_plot(ctx, curves: dict, relpath: str) -> None:
    """:func:`forecast_figure` saved in the run's folder, in English and (``zh/``) Chinese."""
    draw_both(ctx.save_figure, relpath, lambda lang: forecast_figure(curves, lang))


def run_figures(results: dict) -> list[tuple[str, object]]:
    """``(file name, draw(lang) -> figure)`` of the figures of a run that its ``results`` dict holds
    the numbers of: the attention figures (``settings[key]["attention"]``) and the forecast curves
    (``settings[key]["curves"]``, stored by runs of this version; older runs hold no predictions)."""
    out = []
    for key, st in results.get("settings", {}).items():
        if (st.get("curves") or {}).get("windows"):
            out.append((f"forecast_{key}.png", lambda lang, c=st["curves"]: forecast_figure(c, lang)))
        if (st.get("attention") or {}).get("heatmap"):
            out.append((f"attention_lag_{key}.png", lambda lang, att=st["attention"]: attention_figure(att, lang)))
    return out


def reading(setting: dict, data_name: str, lang: str = "en") -> list[str]:
    """Plain-language sentences from one setting's numbers (see :mod:`.section`)."""
    from .section import reading as _reading

    return _reading(setting, data_name, lang)


def section(results: dict, out_dir, lang: str = "en", full_results: dict | None = None):
    """The report section: committed ``--full`` runs first, then this run (see :mod:`.section`)."""
    from .section import section as _section

    return _section(results, out_dir, lang, full_results=full_results)
