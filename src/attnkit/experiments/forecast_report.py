"""The forecast experiment's figures, published reference numbers, and report section.

* :func:`attention_by_lag` — ``lstm_attention``'s weights averaged over test windows, read by lag:
  decoder step t (row T_in + t) attending to input step s has lag ``T_in + t - s``, so a weight
  concentrated at lag 48 on half-hourly data means "look at the same time yesterday".
* :data:`PUBLISHED` — ETTh1 multivariate MSE/MAE (scaled, standard split) as the papers publish them.
* :func:`section` — tables built from results.json and a plain-language reading generated from the
  numbers, including the sentence saying whether attention helped.

Shape legend: N windows, T_in input length, T_out horizon.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

# (data, features, input_len, horizon) -> rows; numbers exactly as the papers (and issue 11) state them
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
         "source": "input-96 re-run as quoted in issue 11 (later benchmark tables); MAE not quoted"},
        {"model": "DLinear", "input_len": 96, "mse": 0.386, "mae": None,
         "source": "input-96 re-run as quoted in issue 11 (later benchmark tables); MAE not quoted"},
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


def save_attention_plot(ctx, att: dict, relpath: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heat = np.array(att["heatmap"])
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [1.1, 1]})
    im = a1.imshow(heat, aspect="auto", cmap="viridis")
    a1.set(xlabel="input step s (oldest → newest)", ylabel="forecast step t", title="lstm_attention: mean weight")
    fig.colorbar(im, ax=a1)
    by_lag = np.array(att["mean_weight_by_lag"])
    a2.plot(np.arange(1, len(by_lag) + 1), by_lag, lw=1)
    a2.axhline(att["uniform_weight"], color="grey", ls=":", label="uniform 1/T_in")
    for name, d in att["lags_of_interest"].items():
        a2.axvline(d["lag"], color="tab:red", ls="--", lw=0.8)
        a2.text(d["lag"], a2.get_ylim()[1] * 0.95, f" {name} ({d['lag']})", color="tab:red", fontsize=8, va="top")
    a2.set(xlabel="lag (forecast step − input step)", ylabel="mean attention weight", title="attention versus lag")
    a2.legend(fontsize=8)
    fig.tight_layout()
    ctx.save_figure(fig, relpath)


def save_forecast_plot(ctx, data, preds: dict[str, torch.Tensor], idx: list[int], relpath: str) -> None:
    """History, truth and each model's forecast of the plotted channel (original units), a few windows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ch = len(data.targets) - 1  # the last forecast channel: the target column by convention
    name = data.target_names[ch]
    fig, axes = plt.subplots(len(idx), 1, figsize=(12, 3.2 * len(idx)), squeeze=False)
    for ax, i in zip(axes[:, 0], idx):
        past, _, target = data.test[i]
        T_in, T_out = past.shape[0], target.shape[0]
        show = min(T_in, 3 * T_out)
        hist = data.to_original(past[-show:, data.targets])[:, ch].numpy()
        ax.plot(np.arange(-show, 0), hist, color="black", lw=1, label="history")
        ax.plot(np.arange(T_out), data.to_original(target)[:, ch].numpy(), color="black", lw=2, label="truth")
        for model, p in preds.items():  # p: (len(idx), T_out, C_out), scaled
            ax.plot(np.arange(T_out), data.to_original(p[idx.index(i)])[:, ch].numpy(), lw=1, label=model)
        ax.set(ylabel=name, title=f"test window {i}")
    axes[0, 0].legend(fontsize=7, ncol=4)
    axes[-1, 0].set_xlabel("steps relative to the forecast origin")
    fig.tight_layout()
    ctx.save_figure(fig, relpath)


def _pm(d: dict, key: str) -> str:
    m = d.get(key)
    return "" if m is None else f"{m['mean']:.4f} ± {m['std']:.4f}"


def reading(setting: dict, data_name: str) -> list[str]:
    """Plain-language sentences generated from one setting's numbers."""
    models = setting["models"]
    out = []
    ranked = sorted(models, key=lambda n: models[n]["mse"]["mean"])
    if ranked:
        out.append(f"Lowest test MSE (scaled): {ranked[0]} ({_pm(models[ranked[0]], 'mse')}); "
                   f"order: {', '.join(ranked)}.")
    if "lstm" in models and "lstm_attention" in models:
        a, b = models["lstm"]["mse"], models["lstm_attention"]["mse"]
        diff, noise = a["mean"] - b["mean"], max(a["std"], b["std"])
        seeds = min(models["lstm"]["seeds"], models["lstm_attention"]["seeds"])
        pct = f"{100 * abs(diff) / a['mean']:.1f} % {'lower' if diff > 0 else 'higher'}"
        nums = f"MSE {a['mean']:.4f} without, {b['mean']:.4f} with ({pct})"
        if seeds < 2:  # "helped" needs a spread to beat: one seed can only say "not shown"
            out.append(f"Temporal attention did not clearly help the LSTM: {nums}; with one seed there is no "
                       "seed-to-seed spread to judge the difference against (run --seeds 3).")
        elif abs(diff) <= noise:
            out.append(f"Temporal attention did not clearly help the LSTM: {nums}; the difference is within the "
                       f"seed-to-seed spread (std up to {noise:.4f}).")
        elif diff > 0:
            out.append(f"Temporal attention helped the LSTM: {nums}, beyond the seed-to-seed spread (std up to {noise:.4f}).")
        else:
            out.append(f"Temporal attention did not help the LSTM here, it hurt: {nums}, beyond the seed-to-seed "
                       f"spread (std up to {noise:.4f}).")
    for base in ("seasonal_naive", "naive"):
        if base in models:
            beat = [n for n in models if models[n]["mse"]["mean"] < models[base]["mse"]["mean"] and n != base]
            out.append(f"{len(beat)} of {len(models) - 1} models beat {base} (MSE {models[base]['mse']['mean']:.4f}).")
            break
    att = setting.get("attention")
    if att:
        # "stands out": at least 1.5x the weight of the median lag (a flat profile gives 1.0x)
        parts = [f"the {n} lag {d['lag']} {'stands out' if d['ratio_to_median'] >= 1.5 else 'does not stand out'} "
                 f"({d['weight']:.4f}, {d['ratio_to_median']:.1f}× the median lag's weight)"
                 for n, d in att["lags_of_interest"].items() if d.get("ratio_to_median") is not None]
        out.append("Attention versus lag — " + "; ".join(parts) + f"; uniform would be {att['uniform_weight']:.4f}; "
                   f"the five heaviest lags are {att['top_lags']}.")
    if setting.get("published") and models:
        best_name = min(models, key=lambda n: models[n]["mse"]["mean"])
        best = models[best_name]
        for row in setting["published"]:
            gap = best["mse"]["mean"] - row["mse"]
            line = (f"Published {row['model']} (input {row['input_len']}): MSE {row['mse']}; our best, {best_name}, "
                    f"{best['mse']['mean']:.4f} is {'below' if gap < 0 else 'above'} it by {abs(gap):.4f}")
            if row.get("mae") is not None and "mae" in best:
                mgap = best["mae"]["mean"] - row["mae"]
                line += f" (MAE {best['mae']['mean']:.4f} vs {row['mae']}: {'below' if mgap < 0 else 'above'} by {abs(mgap):.4f})"
            out.append(line + ".")
    return out


def section(results: dict, out_dir, lang: str = "en"):
    from ..report.html import esc, png_img, table
    from .registry import Section

    run_dir = Path(getattr(results, "run_dir", out_dir))
    data = results.get("data", {})
    html = [f"<p>Data: {esc(data.get('name'))} ({esc(data.get('source'))}), {data.get('rows')} rows. "
            "MSE/MAE on the scaled test split (the published tables' convention); the scaler was fitted on the "
            "training rows only and early stopping read the validation split only.</p>"]
    for key, st in results.get("settings", {}).items():
        html.append(f"<h3>input {st['input_len']}, horizon {st['horizon']}, features {esc(st['features'])} "
                    f"({st['windows']['test']} test windows, policy {esc(st['windows']['policy'])})</h3>")
        orig = [k for k in next(iter(st["models"].values()), {}) if k.startswith("mse_orig")]
        rows = [[n, m["seeds"], _pm(m, "mse"), _pm(m, "mae"), *(_pm(m, k) for k in orig),
                 int(m["params"]["mean"]), f"{m['train_s']['mean']:.1f}"] for n, m in st["models"].items()]
        html.append(table(["model", "seeds", "MSE", "MAE", *orig, "params", "train s"], rows))
        if st.get("published"):
            html.append(table(["published model", "input", "MSE", "MAE", "source"],
                              [[r["model"], r["input_len"], r["mse"], r["mae"] if r["mae"] is not None else "—", r["source"]]
                               for r in st["published"]]))
        html.append("<ul>" + "".join(f"<li>{esc(s)}</li>" for s in reading(st, data.get("name", ""))) + "</ul>")
        for img in (f"forecast_{key}.png", f"attention_lag_{key}.png"):
            if (run_dir / img).is_file():
                html.append(png_img(run_dir / img, img))
    return Section("Forecasting: LSTM, LSTM + temporal attention, Transformers and baselines", "\n".join(html))
