"""The forecast experiment's report section and summary row, in English or Chinese.

Every number in the prose is formatted from a results dict (the run's JSON); the only numbers typed
in are the published ones in :data:`attnkit.experiments.forecast.plots.PUBLISHED`, each with its
source, input length and the convention it was measured under.

With committed ``--full`` runs (``results/forecast/<run>/results.json``, handed in as
``full_results`` = ``{run name: Results}`` by the report, see :mod:`attnkit.experiments.lab.committed`)
their readings come first — 3 seeds on every window say more than the report's own quick run —
and the quick run follows as a smaller replication; without one the quick run is read.
"""

from __future__ import annotations

from pathlib import Path

from ...page.html import details, esc, figure, so_what, table
from ...page.i18n import tr
from ...page.names import run_name
from ...page.significance import compare, rule_sentence
from ..lab.committed import describe_run
from ..lab.results import Section
from .plots import lag_rhythm, published_for


ATTENTION_MODELS = ("lstm_attention", "transformer", "patch_transformer")
SAME_KIND = {"PatchTST": "patch_transformer", "DLinear": "dlinear"}  # published model -> ours of the same design

# the convention under which both the published ETTh1 numbers and ours are measured (English, Chinese)
CONVENTION = (
    "Convention (ours and the published ETTh1 numbers): all 7 ETTh1 columns in and out (features M), the "
    "12/4/4-month train/validation/test split, a z-score per column fitted on the training months, MSE and MAE "
    "averaged over the scaled columns of every test window. Input lengths differ between papers and are given "
    "per row; PatchTST (and our patch_transformer) also normalise each input window inside the model.",
    "约定（我们的数字与论文中的 ETTh1 数字相同）：ETTh1 的全部 7 列既作输入也作输出（features M），"
    "按 12/4/4 个月划分训练/验证/测试集，每列用训练月份拟合的 z-score 标准化，MSE 与 MAE 在每个测试窗口的"
    "标准化列上取平均。各论文的输入长度不同，逐行列出；PatchTST（以及我们的 patch_transformer）还在模型内部"
    "对每个输入窗口做实例归一化。",
)


def _pm(d: dict, key: str) -> str:
    m = d.get(key)
    return "" if m is None else f"{m['mean']:.4f} ± {m['std']:.4f}"


def _verdict(a: dict, b: dict, seeds: int) -> str:
    """'better' / 'worse' / 'within' / 'one seed' for b against a (lower MSE is better)."""
    label, _ = compare(a["mean"] - b["mean"], a["std"], b["std"], seeds)  # the page's 2σ rule
    return {"helped": "better", "hurt": "worse", "no clear difference": "within"}.get(label, label)


def _lstm_sentence(models: dict, lang: str) -> str:
    a, b = models["lstm"]["mse"], models["lstm_attention"]["mse"]
    diff = a["mean"] - b["mean"]
    seeds = min(models["lstm"]["seeds"], models["lstm_attention"]["seeds"])
    noise = compare(diff, a["std"], b["std"], seeds)[1]  # the 2σ bar
    rel = f"{100 * abs(diff) / a['mean']:.1f} %"
    nums = tr(lang, f"MSE {a['mean']:.4f} without, {b['mean']:.4f} with ({rel} {'lower' if diff > 0 else 'higher'})",
              f"不加注意力 MSE {a['mean']:.4f}，加注意力 {b['mean']:.4f}（{'低' if diff > 0 else '高'} {rel}）")
    v = _verdict(a, b, seeds)
    if v == "one seed":  # "helped" needs a spread to beat: one seed can only say "not shown"
        return tr(lang, f"Temporal attention did not clearly help the LSTM: {nums}; with one seed there is no seed-to-seed "
                        "spread to judge the difference against (run --seeds 3).",
                  f"时间注意力没有明显帮助 LSTM：{nums}；只有一个种子，没有种子间的离散程度可以用来判断这个差异（请用 --seeds 3）。")
    if v == "within":
        return tr(lang, f"Temporal attention did not clearly help the LSTM: {nums}; the difference is within 2σ of the seed "
                        f"spread (2σ = {noise:.4f}). " + rule_sentence(lang),
                  f"时间注意力没有明显帮助 LSTM：{nums}；差异在种子离散的 2σ 之内（2σ = {noise:.4f}）。" + rule_sentence(lang))
    if v == "better":
        return tr(lang, f"Temporal attention helped the LSTM: {nums}, beyond 2σ of the seed spread (2σ = {noise:.4f}). " + rule_sentence(lang),
                  f"时间注意力帮助了 LSTM：{nums}，超出了种子离散的 2σ（2σ = {noise:.4f}）。" + rule_sentence(lang))
    return tr(lang, f"Temporal attention did not help the LSTM here, it hurt: {nums}, beyond 2σ of the seed spread "
                    f"(2σ = {noise:.4f}). " + rule_sentence(lang),
              f"时间注意力在这里没有帮助 LSTM，反而更差：{nums}，超出了种子离散的 2σ（2σ = {noise:.4f}）。" + rule_sentence(lang))


def _linear_sentence(models: dict, lang: str) -> str | None:
    """Did any attention model beat the linear model on the input window? Said plainly either way."""
    att = [n for n in ATTENTION_MODELS if n in models]
    if "dlinear" not in models or not att:
        return None
    best = min(att, key=lambda n: models[n]["mse"]["mean"])
    a, b = models["dlinear"]["mse"], models[best]["mse"]
    v = _verdict(a, b, min(models["dlinear"]["seeds"], models[best]["seeds"]))
    nums = f"{best} {b['mean']:.4f} ± {b['std']:.4f}, dlinear {a['mean']:.4f} ± {a['std']:.4f}"
    if v == "better":
        return tr(lang, f"The best attention model beat the linear model by more than 2σ of the seed spread: {nums}.",
                  f"最好的注意力模型以超出种子离散 2σ 的幅度胜过了线性模型：{nums}。")
    return tr(lang, f"Attention did not beat the linear model here: the best attention model is {nums} "
                    f"({'within 2σ of the seed spread' if v == 'within' else 'one seed: no spread' if v == 'one seed' else 'worse, by more than 2σ'}); "
                    f"{_n_params(models, best)}.",
              f"注意力在这里没有胜过线性模型：最好的注意力模型为 {nums}"
              f"（{'差异在种子离散的 2σ 之内' if v == 'within' else '只有一个种子，无离散程度' if v == 'one seed' else '更差，且超出 2σ'}）；"
              f"{_n_params(models, best, 'zh')}。")


def _n_params(models: dict, best: str, lang: str = "en") -> str:
    """The attention model's size against the linear model's, in parameters: a count, not the run's training time,
    which a machine shared with other jobs stretches by its load."""
    p, q = int(models[best]["params"]["mean"]), int(models["dlinear"]["params"]["mean"])
    return tr(lang, f"it has {p:,} parameters against the linear model's {q:,}",
              f"它有 {p:,} 个参数（线性模型 {q:,} 个）")


_LAG_ZH = {"daily": "日", "weekly": "周"}


def _list(values, lang: str) -> str:
    """Numbers as words read them: "9, 33 and 57" (not a Python list)."""
    v = [str(x) for x in values]
    if len(v) < 2:
        return "".join(v)
    return "、".join(v) if lang == "zh" else ", ".join(v[:-1]) + " and " + v[-1]


def lag_sentence(att: dict, lang: str = "en") -> str:
    """What the attention-versus-lag plot shows, from the numbers it is drawn from: the rhythm of the
    profile (period between its peaks) and, for each lag of interest, its weight against its
    neighbours. "Stands out": at least 1.5x the median lag's weight and in the upper half of its
    neighbours' range (a flat profile gives 1.0x; a lag in a trough of the rhythm sits in the lower half)."""
    rh = lag_rhythm(att["mean_weight_by_lag"], att.get("lags_of_interest"))
    peaks_en, peaks_zh = _list(rh["peak_lags"][:8], "en"), _list(rh["peak_lags"][:8], "zh")
    top_en, top_zh = _list(att["top_lags"], "en"), _list(att["top_lags"], "zh")
    named = {d["lag"]: n for n, d in att.get("lags_of_interest", {}).items()}
    if rh["period"] and rh["autocorr"] >= 0.3:
        n = next((named[L] for L in (rh["period"] - 1, rh["period"], rh["period"] + 1) if L in named), None)
        first = tr(lang, f"the weight rises and falls with a period of {rh['period']} steps (autocorrelation {rh['autocorr']:.2f} at "
                         f"that shift; peaks at lags {peaks_en})" + (f", the {n} period" if n else ""),
                   f"权重以 {rh['period']} 步为周期起伏（该间隔处的自相关为 {rh['autocorr']:.2f}；峰值位于滞后 {peaks_zh}）"
                   + (f"，即{_LAG_ZH.get(n, n)}周期" if n else ""))
    else:
        first = tr(lang, f"the weight has no regular rhythm (autocorrelation {rh['autocorr']:.2f} at the typical peak spacing)",
                   f"权重没有规律的周期（典型峰间距处的自相关为 {rh['autocorr']:.2f}）")
    parts = [first]
    for name, d in att.get("lags_of_interest", {}).items():
        nb = rh["neighbours"].get(name)
        if nb is None or d.get("ratio_to_median") is None:
            continue
        up = d["ratio_to_median"] >= 1.5 and nb["position"] >= 0.5
        where_en = "near the top of" if nb["position"] >= 0.8 else "near the bottom of" if nb["position"] <= 0.2 else "in the middle of"
        where_zh = "接近最高" if nb["position"] >= 0.8 else "接近最低" if nb["position"] <= 0.2 else "居中"
        parts.append(tr(lang,
                        f"the {name} lag {nb['lag']} itself {'stands out' if up else 'does not stand out'}: {nb['weight']:.4f}, "
                        f"{d['ratio_to_median']:.1f}× the median lag's weight, {where_en} its neighbours (lags {nb['from']}–{nb['to']} "
                        f"run from {nb['min']:.4f} at lag {nb['min_lag']} to {nb['max']:.4f} at lag {nb['max_lag']})",
                        f"{_LAG_ZH.get(name, name)}滞后 {nb['lag']} 本身{'突出' if up else '不突出'}：权重 {nb['weight']:.4f}，"
                        f"是滞后权重中位数的 {d['ratio_to_median']:.1f} 倍，在相邻滞后中{where_zh}（滞后 {nb['from']}–{nb['to']} "
                        f"从滞后 {nb['min_lag']} 的 {nb['min']:.4f} 到滞后 {nb['max_lag']} 的 {nb['max']:.4f}）"))
    return flatness(att, lang) + tr(lang, " Attention versus lag — " + "; ".join(parts) + f"; uniform would be {att['uniform_weight']:.4f}; "
                                          f"the five heaviest lags are {top_en}.",
                                    "注意力与滞后 —— " + "；".join(parts) + f"；均匀分布时为 {att['uniform_weight']:.4f}；"
                                    f"权重最大的五个滞后是 {top_zh}。")


FLAT = 2.0  # the heaviest lag under this many times the uniform weight: the profile is called nearly uniform


def flatness(att: dict, lang: str) -> str:
    """One plain sentence first: whether the attention chooses lags at all (its heaviest lag against a uniform spread)."""
    w, u = att["mean_weight_by_lag"], att["uniform_weight"]
    lo, hi = min(w), max(w)
    if hi < FLAT * u:
        return tr(lang, f"The attention is nearly uniform: every lag gets between {lo:.4f} and {hi:.4f} of the weight, around the "
                        f"{u:.4f} that spreading it evenly would give, so this model barely chooses which past steps to read and "
                        "the ups and downs below are small.",
                  f"注意力几乎是均匀的：每个滞后得到的权重都在 {lo:.4f} 到 {hi:.4f} 之间，围绕平均分配时的 {u:.4f}，"
                  "所以这个模型几乎没有挑选要读哪些过去的时间步，下面说的起伏都很小。")
    return tr(lang, f"The attention chooses: its heaviest lag gets {hi / u:.1f}× the weight of an even spread ({hi:.4f} against {u:.4f}).",
              f"注意力在挑选：权重最大的滞后是平均分配时的 {hi / u:.1f} 倍（{hi:.4f} 对 {u:.4f}）。")


def reading(setting: dict, data_name: str, lang: str = "en") -> list[str]:
    """Plain-language sentences generated from one setting's numbers, in ``lang``."""
    models = setting["models"]
    out = []
    ranked = sorted(models, key=lambda n: models[n]["mse"]["mean"])
    if ranked:
        out.append(tr(lang, f"Lowest test MSE (scaled): {ranked[0]} ({_pm(models[ranked[0]], 'mse')}); order: {', '.join(ranked)}.",
                      f"测试 MSE（标准化）最低的是 {ranked[0]}（{_pm(models[ranked[0]], 'mse')}）；排序：{'、'.join(ranked)}。"))
    if "lstm" in models and "lstm_attention" in models:
        out.append(_lstm_sentence(models, lang))
    if all("params" in m for m in models.values()):
        s = _linear_sentence(models, lang)
        if s:
            out.append(s)
    for base in ("seasonal_naive", "naive"):
        if base in models:
            beat = [n for n in models if models[n]["mse"]["mean"] < models[base]["mse"]["mean"] and n != base]
            out.append(tr(lang, f"{len(beat)} of {len(models) - 1} models beat {base} (MSE {models[base]['mse']['mean']:.4f}).",
                          f"{len(models) - 1} 个模型中有 {len(beat)} 个胜过 {base}（MSE {models[base]['mse']['mean']:.4f}）。"))
            break
    att = setting.get("attention")
    if att:
        out.append(lag_sentence(att, lang))
    if setting.get("published") and models:
        best_name = min(models, key=lambda n: models[n]["mse"]["mean"])
        best = models[best_name]
        for row in setting["published"]:
            gap = best["mse"]["mean"] - row["mse"]
            below = gap < 0
            line = tr(lang, f"Published {row['model']} (input {row['input_len']}): MSE {row['mse']:.3f}; our best, {best_name}, "
                            f"{best['mse']['mean']:.4f} is {'below' if below else 'above'} it by {abs(gap):.4f}",
                      f"论文中的 {row['model']}（输入 {row['input_len']}）：MSE {row['mse']:.3f}；我们最好的 {best_name} 为 "
                      f"{best['mse']['mean']:.4f}，比它{'低' if below else '高'} {abs(gap):.4f}")
            if row.get("mae") is not None and "mae" in best:
                mgap = best["mae"]["mean"] - row["mae"]
                line += tr(lang, f" (MAE {best['mae']['mean']:.4f} vs {row['mae']:.3f}: {'below' if mgap < 0 else 'above'} by {abs(mgap):.4f})",
                           f"（MAE {best['mae']['mean']:.4f} 对 {row['mae']:.3f}：{'低' if mgap < 0 else '高'} {abs(mgap):.4f}）")
            same = SAME_KIND.get(row["model"].split("/")[0])
            if same in models and same != best_name:  # like for like: the published model against ours of its kind
                g = models[same]["mse"]["mean"] - row["mse"]
                line += tr(lang, f"; our {same}, {models[same]['mse']['mean']:.4f}, is {'below' if g < 0 else 'above'} it by {abs(g):.4f}",
                           f"；我们的 {same} 为 {models[same]['mse']['mean']:.4f}，比它{'低' if g < 0 else '高'} {abs(g):.4f}")
            out.append(line + tr(lang, ".", "。"))
    return out


POLICY = {"strict": ("every window lies inside one split", "每个窗口完全落在同一个划分内"),
          "standard": ("as the published code: a test window's input may start in the previous split",
                       "与论文代码相同：测试窗口的输入可以从上一个划分开始")}


def _data_line(data: dict, lang: str) -> str:
    """The data set in one sentence: its name, where it comes from (a file's name, never a machine's path) and its size."""
    src = str(data.get("source") or "")
    if src.startswith(("/", ".", "~")) or "\\" in src:
        src = Path(src).name
    return tr(lang, f"<p>Data: {esc(data.get('name'))} ({esc(src)}), {data.get('rows'):,} rows. MSE/MAE on the scaled "
                    "test split (the published tables' convention); the scaler was fitted on the training rows only and early "
                    "stopping read the validation split only.</p>",
              f"<p>数据：{esc(data.get('name'))}（{esc(src)}），{data.get('rows'):,} 行。MSE/MAE 在标准化后的测试集上"
              "计算（与论文表格的约定相同）；标准化只用训练行拟合，早停只读验证集。</p>")


def _setting_title(st: dict, lang: str) -> str:
    w = st["windows"]
    pol = POLICY.get(w["policy"], (w["policy"], w["policy"]))[lang == "zh"]
    return tr(lang, f"input {st['input_len']} steps, forecast {st['horizon']} steps ({w['train']:,} training / {w['test']:,} test windows; {pol})",
              f"输入 {st['input_len']} 步，预测 {st['horizon']} 步（{w['train']:,} 个训练窗口 / {w['test']:,} 个测试窗口；{pol}）")


def _main_table(st: dict, lang: str) -> str:
    rows = [[n, m["seeds"], _pm(m, "mse"), _pm(m, "mae"), f"{int(m['params']['mean']):,}"] for n, m in st["models"].items()]
    return table(["模型", "种子数", "MSE（均值 ± 标准差）", "MAE（均值 ± 标准差）", "参数量"] if lang == "zh" else
                 ["model", "seeds", "MSE (mean ± std)", "MAE (mean ± std)", "params"], rows)


def _full_table(st: dict, lang: str) -> str:
    orig = [k for k in next(iter(st["models"].values()), {}) if k.startswith(("mse_orig", "mae_orig"))]
    rows = [[n, m["seeds"], _pm(m, "mse"), _pm(m, "mae"), *(_pm(m, k) for k in orig), int(m["params"]["mean"]),
             f"{m['train_s']['mean']:.1f}", f"{m['epochs']['mean']:.1f}" if "epochs" in m else "—"] for n, m in st["models"].items()]
    cols = [k.replace("mse_orig[", "MSE ").replace("mae_orig[", "MAE ").rstrip("]") for k in orig]
    head = (["模型", "种子数", "MSE", "MAE", *cols, "参数量", "训练秒数（共用机器）", "epoch 数"] if lang == "zh" else
            ["model", "seeds", "MSE", "MAE", *cols, "params", "train s (shared machine)", "epochs"])
    note = tr(lang, "Columns named after a data column (e.g. MSE OT) are that column's error in its original units, before scaling.",
              "以数据列命名的列（如 MSE OT）是该列在原始单位下（标准化之前）的误差。") if orig else ""
    return table(head, rows) + (f"<p class='note'>{esc(note)}</p>" if note else "")


def _images(run_dir: Path, key: str, st: dict, lang: str, dest: Path | None = None) -> str:
    """The run's forecast and attention figures, each drawn again from the numbers in both languages
    under ``dest`` (beside the page) when given and the run stored them, else the run's own."""
    from ...page.figures import save_both
    from .plots import attention_figure, forecast_figure

    curve = run_dir / f"forecast_{key}.png"
    if dest is not None and (st.get("curves") or {}).get("windows"):
        curve = save_both(dest / curve.name, lambda lg: forecast_figure(st["curves"], lg))[0]
    html = figure(curve, curve.name, lang) if curve.is_file() else ""
    lag = run_dir / f"attention_lag_{key}.png"
    if dest is not None and (st.get("attention") or {}).get("heatmap"):
        lag = save_both(dest / lag.name, lambda lg: attention_figure(st["attention"], lg))[0]
    return html + (figure(lag, lag.name, lang) if lag.is_file() else "")


def settings_html(results: dict, run_dir: Path, lang: str, dest: Path | None = None) -> str:
    """Per setting: the full table (original-unit columns included), the published rows, the reading and the
    figures (attention figures drawn again in both languages under ``dest`` when given)."""
    html = [_data_line(results.get("data", {}), lang)]
    for key, st in results.get("settings", {}).items():
        html.append("<h4>" + esc(_setting_title(st, lang)) + "</h4>" + _full_table(st, lang))
        if st.get("published"):
            html.append(_published_table(st, lang, results.get("data", {}).get("name", "")))
        html.append("<ul>" + "".join(f"<li>{esc(s)}</li>" for s in reading(st, results.get("data", {}).get("name", ""), lang)) + "</ul>")
        html.append(_images(run_dir, key, st, lang, dest))
    return "\n".join(html)


_SOURCE_ZH = {"input-96 re-runs in later benchmark tables, a secondary quotation; not checked against a primary table here, MAE not quoted":
              "后来的基准表格中输入长度 96 的重跑结果，属二手引用；此处未与原始表格核对，未引用 MAE"}


def _source(text: str, lang: str) -> str:
    return _SOURCE_ZH.get(text, text) if lang == "zh" else text


def _published_table(st: dict, lang: str, data_name: str = "") -> str:
    # the citations as this version states them (a run stores the ones of its day); the same numbers
    current = {(r["model"], r["input_len"], r["mse"]): r["source"]
               for r in published_for(data_name, st.get("features", "M"), st["input_len"], st["horizon"])}
    rows = [[r["model"], r["input_len"], r["mse"], r["mae"] if r["mae"] is not None else "—",
             _source(current.get((r["model"], r["input_len"], r["mse"]), r["source"]), lang)] for r in st["published"]]
    return (table(["论文中的模型", "输入长度", "MSE", "MAE", "出处"] if lang == "zh" else ["published model", "input length", "MSE", "MAE", "source"], rows)
            + f"<p class='note'>{esc(tr(lang, *CONVENTION))}</p>")


def _stands_out(st: dict) -> int:
    """How many named lags (daily, weekly) of a setting's attention stand out (see :func:`lag_sentence`)."""
    att = st.get("attention") or {}
    rh = lag_rhythm(att["mean_weight_by_lag"], att.get("lags_of_interest")) if att else {"neighbours": {}}
    return sum(1 for n, d in att.get("lags_of_interest", {}).items()
               if (d.get("ratio_to_median") or 0) >= 1.5 and rh["neighbours"].get(n, {}).get("position", 0) >= 0.5)


def _lead(results, full_results: dict | None):
    """The run and setting the section leads with: the committed run whose attention shows its named
    lags most plainly (the figure that can teach how to read a lag plot), else the first committed
    run, else this run."""
    if full_results:
        name = max(full_results, key=lambda n: _stands_out(next(iter(full_results[n]["settings"].values()))))
        run = full_results[name]
        return name, run, Path(run.run_dir)
    return None, results, Path(getattr(results, "run_dir", "."))


def _so_what(st: dict, lang: str) -> str:
    models = st["models"]
    lstm = _verdict(models["lstm"]["mse"], models["lstm_attention"]["mse"], min(models["lstm"]["seeds"], models["lstm_attention"]["seeds"])) \
        if "lstm" in models and "lstm_attention" in models else None
    first = (tr(lang, "Temporal attention helped the LSTM here. ", "这里时间注意力帮助了 LSTM。") if lstm == "better" else
             tr(lang, "Temporal attention did not make the LSTM clearly better here. ", "这里时间注意力没有让 LSTM 明显变好。") if lstm else "")
    return so_what(lang, first + tr(
        lang,
        "In forecasting, attention has to earn its cost against simple baselines: a linear model over the input window and "
        "\"repeat the last day\" are strong on series with a daily rhythm. The lag plot shows which past steps the attention "
        "weighs, which is a description of the model, not proof that those steps cause the forecast.",
        "在预测任务中，注意力必须在简单基线面前证明它值得付出的代价：对输入窗口做线性回归、以及“重复前一天”，"
        "在有日周期的序列上都很强。滞后图显示注意力给哪些过去的时间步更大的权重，这是对模型的描述，而不是这些时间步决定了预测的证明。"))


def _glance(runs: list[tuple[str, dict]], lang: str) -> str:
    """One row per (run, setting): the best model and the LSTM with and without attention."""
    rows = []
    for name, res in runs:
        for key, st in res.get("settings", {}).items():
            ms = st["models"]
            best = min(ms, key=lambda n: ms[n]["mse"]["mean"])
            rows.append([run_name(name, lang) if name else tr(lang, "this report's run", "本报告的运行"), res.get("data", {}).get("name", ""), key,
                         f"{best} {ms[best]['mse']['mean']:.4f}", _pm(ms["lstm"], "mse") if "lstm" in ms else "—",
                         _pm(ms["lstm_attention"], "mse") if "lstm_attention" in ms else "—",
                         _pm(ms["dlinear"], "mse") if "dlinear" in ms else "—"])
    return table([tr(lang, "run", "运行"), tr(lang, "data", "数据"), tr(lang, "setting (in/out steps)", "设置（输入/预测步数）"),
                  tr(lang, "lowest MSE", "最低 MSE"), "LSTM", tr(lang, "LSTM + attention", "LSTM + 注意力"), "DLinear"], rows)


def section(results, out_dir, lang: str = "en", full_results: dict | None = None):
    run_dir = Path(getattr(results, "run_dir", out_dir))
    name, lead, lead_dir = _lead(results, full_results)
    key, st = next(iter(lead["settings"].items()))
    data = lead.get("data", {})
    parts = []
    if name:
        parts.append(f"<p class='note'>{esc(describe_run(name, lead, lang))}.</p>")
    parts.append(_data_line(data, lang))
    parts.append("<p><b>" + esc(_setting_title(st, lang)) + ".</b> " + " ".join(esc(x) for x in reading(st, data.get("name", ""), lang)
                                                                              if not (x.startswith(("Published", "论文中")) or "Attention versus lag" in x or "注意力与滞后" in x)) + "</p>")
    parts.append(_main_table(st, lang))
    figs = Path(out_dir) / "figures" / "forecast"
    parts.append(_images(lead_dir, key, st, lang, figs / (name or "report-run")))
    if st.get("attention"):
        parts.append("<p>" + esc(lag_sentence(st["attention"], lang)) + "</p>")
    if "lstm" in st["models"] and "lstm_attention" in st["models"]:
        parts.append(_so_what(st, lang))
    else:
        parts.append(so_what(lang, tr(lang, "Attention has to earn its cost against simple baselines.", "注意力必须在简单基线面前证明它值得付出的代价。")))
    for n, r in (full_results or {}).items():
        parts.append(details(tr(lang, "Every model, column and figure of ", "全部模型、列与图：") + run_name(n, lang, html=True),
                             f"<p class='note'>{esc(describe_run(n, r, lang))}.</p>" + settings_html(r, Path(r.run_dir), lang, figs / n)))
    if full_results:
        own = "<p>" + tr(lang, "A smaller replication, run now (fewer windows, epochs and seeds, so noisier): read the claims above from the committed runs.",
                         "现在运行的一个较小规模的重复实验（窗口、epoch 和种子更少，因此噪声更大）：结论请以上面已提交的运行为准。") + "</p>"
        parts.append(details(tr(lang, "This report’s own run", "本报告自己的运行"), own + settings_html(results, run_dir, lang, figs / "report-run")))
    runs = [(n, r) for n, r in (full_results or {}).items()] + [("", results)]
    parts.append(details(tr(lang, "Every run and setting at a glance", "所有运行与设置一览"), _glance(runs, lang)))
    title = tr(lang, "Forecasting: LSTM, LSTM + temporal attention, Transformers and baselines",
               "预测：LSTM、带时间注意力的 LSTM、Transformer 与基线")
    return Section(title, "\n".join(p for p in parts if p))


def summary_row(results: dict, lang: str = "en", full_results: dict | None = None) -> tuple[str, str]:
    """The closing summary table's row: each committed run's last setting when there are any, else this run's."""
    runs = {name: r for name, r in (full_results or {}).items()} or {"": results}
    measured, verdicts = [], []
    for name, r in runs.items():
        setting, s = list(r["settings"].items())[-1]
        ms = s["models"]
        best = min(ms, key=lambda n: ms[n]["mse"]["mean"])
        line = f"{name + ' ' if name else ''}{setting}" + tr(lang, ": ", "：") + tr(lang, f"best {best} {ms[best]['mse']['mean']:.3f}",
                                                                 f"最好 {best} {ms[best]['mse']['mean']:.3f}")
        if "lstm" in ms and "lstm_attention" in ms:
            line += tr(lang, f", LSTM {ms['lstm']['mse']['mean']:.3f} vs +attention {ms['lstm_attention']['mse']['mean']:.3f}",
                       f"，LSTM {ms['lstm']['mse']['mean']:.3f}，加注意力 {ms['lstm_attention']['mse']['mean']:.3f}")
            seeds = min(ms["lstm"]["seeds"], ms["lstm_attention"]["seeds"])
            verdicts.append(_verdict(ms["lstm"]["mse"], ms["lstm_attention"]["mse"], seeds))
        measured.append(line)
    helped = verdicts.count("better")
    judged = len([v for v in verdicts if v != "one seed"])
    if not judged:
        meaning = tr(lang, "one seed: no verdict on temporal attention; run ≥ 3 seeds", "只有一个种子：对时间注意力无结论；至少要跑 3 个种子")
    else:
        meaning = tr(lang, f"temporal attention helped the LSTM beyond the seed spread in {helped} of {judged} runs; "
                           "attention must beat the simple baselines to earn its cost",
                     f"在 {judged} 次运行中，时间注意力有 {helped} 次超出种子离散范围地帮助了 LSTM；注意力必须胜过简单基线才值得它的成本")
    return tr(lang, "; ".join(measured), "；".join(measured)), meaning
