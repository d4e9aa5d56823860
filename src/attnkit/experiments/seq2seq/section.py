"""The ``attnkit report`` section of the seq2seq experiment: a plain-language reading generated from
the numbers of ``results.json`` (nothing typed by hand), in English or Chinese, the per-bucket table
(mean ± std over seeds), the parameter table, the figures, and the published numbers for scale.

The reading answers the experiment's two questions:

1. **Does the fixed-vector model fall off with length while attention stays flat?** It compares
   each model's primary metric (exact match for dates, BLEU for text) on the shortest and the
   longest non-empty bucket, and calls the bottleneck "shown" only when the no-attention model's
   drop exceeds the largest attention model's drop by more than both seed spreads combined
   (and at least 5 points) — otherwise it says the effect did not show in this run.
2. **Does the Transformer beat the recurrent models at the same budget?** Overall primary metric
   of the Transformer against the best RNN, with the gap compared to the seed spread.

With committed runs (``results/seq2seq/*``: dates, dates-list, Bible and the synthetic copy,
reverse and transliteration tasks, handed in as ``full_results`` by the report, see
:mod:`attnkit.experiments.lab.committed`) the section opens with one verdict per run and a table
(:mod:`.overview`: the bottleneck, attention's gain at every length, or neither), the per-length
figure of the clearest run (:func:`.overview.lead_run`) and a "so what" read from the verdicts;
every committed run's own reading, tables and figures, the report's own smaller run and the
published numbers follow folded in ``<details>``. :data:`PAPERS` is the only hand-typed data: what
Bahdanau et al. and Luong et al. report, each with its table.

Shape legend: none (text and tables).
"""

from __future__ import annotations

from pathlib import Path

from ...page.html import details, esc, figure, so_what, table
from ...page.i18n import tr as _tr
from ...page.names import run_name
from ..lab.committed import describe_run
from ..lab.results import Section
from .overview import lead_run, takeaway, verdict, verdict_lines, verdict_table
from .plots import LABELS, LABELS_ZH, METRIC_LABELS, UNIT_ZH, finite

ATTENTION_MODELS = ("bahdanau", "luong")
WEAK_BLEU = 5.0  # below this no model translates: the run cannot support a claim
METRIC_ZH = {"exact_match": "完全匹配率", "char_accuracy": "字符准确率", "bleu": "BLEU", "chrf": "chrF"}

#: BLEU on large WMT'14 test sets, as the papers tabulate them — for scale, not comparable to our small runs.
PAPERS = [
    {"paper": ("Bahdanau et al. 2015, arXiv:1409.0473, Table 1 (WMT'14 En→Fr, all test sentences)",
               "Bahdanau 等 2015，arXiv:1409.0473，表 1（WMT'14 英→法，全部测试句子）"),
     "without": ("RNNencdec-50", 17.82), "with": (("RNNsearch-50 (additive attention)", "RNNsearch-50（加性注意力）"), 26.75)},
    {"paper": ("Bahdanau et al. 2015, Table 1, the \"-30\" models (trained on sentences of up to 30 words, tested on all)",
               "Bahdanau 等 2015，表 1，“-30” 模型（训练句子不超过 30 个词，在全部句子上测试）"),
     "without": ("RNNencdec-30", 13.93), "with": (("RNNsearch-30 (additive attention)", "RNNsearch-30（加性注意力）"), 21.50)},
    {"paper": ("Luong et al. 2015, arXiv:1508.04025, Table 1 (WMT'14 En→De newstest2014; abstract: +5.0 BLEU)",
               "Luong 等 2015，arXiv:1508.04025，表 1（WMT'14 英→德 newstest2014；摘要：+5.0 BLEU）"),
     "without": (("reverse + dropout, no attention", "源句反转 + dropout，无注意力"), 14.0),
     "with": (("local attention (general) + input feeding", "局部注意力（general 打分）+ 输入馈送"), 19.0)},
]


def _pair(x, lang: str) -> str:
    """A cell typed in both languages ``(en, zh)``, or a name that reads the same in both."""
    return (x[1] if lang == "zh" else x[0]) if isinstance(x, tuple) else x


def _label(name: str, lang: str) -> str:
    return (LABELS_ZH if lang == "zh" else LABELS).get(name, name)


def _fmt(d: dict, digits: int = 1) -> str:
    if not finite(d["mean"]):
        return "–"
    return f"{d['mean']:.{digits}f} ± {d['std']:.{digits}f}" if len(d.get("runs", [])) > 1 else f"{d['mean']:.{digits}f}"


def _ends(res: dict, metric: str) -> tuple[dict, dict, dict, dict] | None:
    """(first bucket, its metric, last bucket, its metric) over the non-empty buckets."""
    full = [b for b in res["buckets"] if b["count"] > 0 and finite(b["metrics"][metric]["mean"])]
    if len(full) < 2:
        return None
    return full[0], full[0]["metrics"][metric], full[-1], full[-1]["metrics"][metric]


def _range(b: dict, unit: str, lang: str = "en") -> str:
    lo, hi = b["range"]
    if lang == "zh":
        u = UNIT_ZH.get(unit, unit)
        return f"{lo}–{hi} {u}" if hi < 1000 else f"超过 {lo - 1} {u}"
    return f"{lo}–{hi} {unit}" if hi < 1000 else f"over {lo - 1} {unit}"


def _change(drop: float, lang: str = "en") -> str:
    if abs(drop) < 0.05:
        return _tr(lang, "no change", "没有变化")
    if drop > 0:
        return _tr(lang, f"a fall of {drop:.1f} points", f"下降 {drop:.1f} 个点")
    return _tr(lang, f"a rise of {-drop:.1f} points", f"上升 {-drop:.1f} 个点")


COLLAPSED = 0.9  # mean largest alignment weight at or above which an attention model is called collapsed


def reading(results: dict, lang: str = "en") -> list[str]:
    """Plain-language paragraphs in ``lang`` ("en" or "zh"), every number taken from ``results``."""
    models, metric = results["models"], results["metric_names"][0]
    mname, unit = METRIC_LABELS.get(metric, metric).replace(" (%)", ""), results["length_unit"]
    if lang == "zh":
        mname = METRIC_ZH.get(metric, metric)
    drops = {}
    for name, res in models.items():
        ends = _ends(res, metric)
        if ends is None:
            continue
        b0, m0, b1, m1 = ends
        drops[name] = (m0["mean"] - m1["mean"], m0["std"] + m1["std"], b0, b1, m0, m1)
    out = _bottleneck(models, metric, mname, unit, drops, lang) if "rnn" in drops else []
    out += _transformer_verdict(models, metric, mname, lang)
    weak = _weak_run(models, metric, lang)
    return [weak, *out] if weak else out


def _bottleneck(models: dict, metric: str, mname: str, unit: str, drops: dict, lang: str) -> list[str]:
    """The fixed-vector model's fall with source length, against the attention models' (Bahdanau's Fig. 2).
    ``drops``: per model (fall, seed spread, shortest bucket, longest bucket, its metric there, ...)."""
    out = []
    d, spread, b0, b1, m0, m1 = drops["rnn"]
    fall_en = f"a fall of {d:.1f} points." if d >= 0.05 else "no fall." if d > -0.05 else f"no fall ({-d:.1f} points higher)."
    fall_zh = f"下降了 {d:.1f} 个点。" if d >= 0.05 else "没有下降。" if d > -0.05 else f"没有下降（反而高 {-d:.1f} 个点）。"
    out.append(_tr(
        lang,
        f"Without attention (one fixed vector for the whole source), {mname} is {m0['mean']:.1f} on the shortest sources "
        f"({_range(b0, unit)}) and {m1['mean']:.1f} on the longest ({_range(b1, unit)}): " + fall_en,
        f"没有注意力时（整个源序列被压成一个固定向量），{mname}在最短的源序列（{_range(b0, unit, lang)}）上是 {m0['mean']:.1f}，"
        f"在最长的（{_range(b1, unit, lang)}）上是 {m1['mean']:.1f}：" + fall_zh))
    att = [n for n in ATTENTION_MODELS if n in drops]
    if att:
        sep = "；" if lang == "zh" else "; "
        parts = [_tr(lang, f"{LABELS[n]} goes from {drops[n][4]['mean']:.1f} to {drops[n][5]['mean']:.1f} ({_change(drops[n][0])})",
                     f"{_label(n, lang)} 从 {drops[n][4]['mean']:.1f} 到 {drops[n][5]['mean']:.1f}（{_change(drops[n][0], lang)}）")
                 for n in att]
        out.append(_tr(lang, "With attention, " + sep.join(parts) + ".", "有注意力时，" + sep.join(parts) + "。"))
        keep = {n: 100 * drops[n][5]["mean"] / drops[n][4]["mean"] for n in ("rnn", *att) if drops[n][4]["mean"] > 0}
        if "rnn" in keep and len(keep) > 1:  # the fall as a share: readable when all scores are low (BLEU on a hard task)
            rest = sep.join(_tr(lang, f"{LABELS[n]} {keep[n]:.0f} %", f"{_label(n, lang)} {keep[n]:.0f} %") for n in att if n in keep)
            out.append(_tr(lang, f"Against each model's own score on the shortest sources, the fixed-vector model keeps {keep['rnn']:.0f} % "
                                 f"of it on the longest; {rest}.",
                           f"以各模型在最短源序列上的得分为基准，固定向量模型在最长的源序列上保留了 {keep['rnn']:.0f} %；{rest}。"))
        overall = sep.join(f"{_label(n, lang)} {models[n]['overall'][metric]['mean']:.1f}" for n in att)
        rnn_all = models["rnn"]["overall"][metric]["mean"]
        out.append(_tr(lang, f"Over the whole test set the fixed-vector model scores {rnn_all:.1f}; {overall}.",
                       f"在整个测试集上，固定向量模型得分 {rnn_all:.1f}；{overall}。"))
        # a saturated attention (one-hot rows) explains a weak translation model; in an exact-match task (dates,
        # copy, transliteration) one source token per output is the right alignment, so there it says nothing
        for n in att if metric == "bleu" else ():
            focus = models[n].get("attention_focus")
            if focus and focus["max_weight"]["mean"] >= COLLAPSED:
                mw, ne = focus["max_weight"]["mean"], focus["normalized_entropy"]["mean"]
                out.append(_tr(
                    lang,
                    f"{LABELS[n]}'s attention is nearly one-hot: on average {mw:.2f} of each row's weight sits on a single source "
                    f"token (normalised entropy {ne:.2f}, where 1 is uniform). A softmax that saturated passes almost no gradient "
                    f"back to its score, so this alignment has largely stopped learning where to look.",
                    f"{_label(n, lang)} 的注意力几乎是独热的：平均每行 {mw:.2f} 的权重落在同一个源词元上（归一化熵 {ne:.2f}，1 为均匀），"
                    f"饱和的 softmax 几乎不把梯度传回打分，所以这个对齐基本上已经学不动该看哪里了。"))
        worst = max(att, key=lambda n: drops[n][0])
        margin = drops["rnn"][0] - drops[worst][0]
        noise = drops["rnn"][1] + drops[worst][1]
        seeds = len(models["rnn"]["overall"][metric].get("runs", [])) or 1
        if margin > max(5.0, noise):
            spread = _tr(lang, f"beyond the seed spread ({noise:.1f} points)" if seeds > 1 else
                         "from one seed only (no spread to compare with; run --seeds 3)",
                         f"超出了种子间的离散程度（{noise:.1f} 个点）" if seeds > 1 else "但只有一个种子（没有离散程度可比；请用 --seeds 3）")
            out.append(_tr(
                lang,
                f"The bottleneck shows: the fixed-vector model loses {margin:.1f} points more with length than the attention "
                f"model that loses most ({LABELS[worst]}), {spread} — the shape of Bahdanau et al.'s Fig. 2.",
                f"瓶颈出现了：随着长度增加，固定向量模型比下降最多的注意力模型（{_label(worst, lang)}）多损失 {margin:.1f} 个点，"
                f"{spread}——正是 Bahdanau 等人图 2 的形状。"))
        else:
            out.append(_tr(
                lang,
                f"In this run the bottleneck does not show clearly: the fixed-vector model's fall minus the attention models' is "
                f"{margin:+.1f} points, within the seed spread or under 5 points.",
                f"在这次运行中瓶颈没有明显出现：固定向量模型的下降减去注意力模型的下降为 {margin:+.1f} 个点，在种子离散范围之内或不到 5 个点。"))
            out.append(_why_no_bottleneck(models, metric, mname, att, lang))
    return out


def _why_no_bottleneck(models: dict, metric: str, mname: str, att: list[str], lang: str) -> str:
    """Why this run cannot show the bottleneck: the task fits one vector, no model translates, or too little training."""
    floor = min(b["metrics"][metric]["mean"] for b in models["rnn"]["buckets"] if b["count"] > 0)
    rest_rnn = [b["metrics"][metric]["mean"] for b in models["rnn"]["buckets"][1:] if b["count"] > 0] or [floor]
    gain = max(models[n]["overall"][metric]["mean"] for n in att) - models["rnn"]["overall"][metric]["mean"]
    if metric in ("exact_match", "char_accuracy") and floor >= 95.0:
        return _tr(
            lang,
            f"The fixed-vector model scores {floor:.1f} or more on every length bucket: trained this long, one vector holds "
            f"what this task needs (a date is a handful of fields), so at these lengths there is little left for attention "
            f"to rescue. Attention's gain here is {gain:+.1f} points overall, "
            f"not a curve that stays flat while the other falls.",
            f"固定向量模型在每个长度区间上都达到 {floor:.1f} 或更高：训练到这个程度，一个向量就装得下这个任务所需的信息"
            f"（一个日期只有几个字段），所以在这些长度上注意力几乎没有可以挽救的东西。这里注意力带来的只是总体上 "
            f"{gain:+.1f} 个点，而不是一条保持平坦、另一条下降的曲线。")
    elif metric == "bleu" and max(rest_rnn) < 10.0:
        # a model that barely translates sits near the score of generic output at every length: no room to fall
        lo, hi = min(rest_rnn), max(rest_rnn)
        return _tr(
            lang,
            f"Beyond its shortest sources the fixed-vector model scores between {lo:.1f} and {hi:.1f} {mname} at every "
            f"length: it translates too little for its score to have room to fall. The bottleneck needs a fixed-vector "
            f"model that translates short sources well (Bahdanau et al.'s RNNencdec-50, with 1,000 hidden units, scored "
            f"17.8 BLEU overall); a larger model than this budget allows is needed to tell.",
            f"除了最短的源序列，固定向量模型在每个长度上的{mname}都在 {lo:.1f} 到 {hi:.1f} 之间：它几乎没有学会翻译，"
            f"得分没有下降的余地。瓶颈要在一个能把短句译好的固定向量模型上才看得出来（Bahdanau 等人的 RNNencdec-50 有 1,000 个"
            f"隐藏单元，总体 17.8 BLEU）；需要比这个参数预算更大的模型才能判断。")
    else:
        return _tr(lang, "Longer training or longer sources are needed to tell.", "需要更长的训练或更长的源序列才能判断。")


def _transformer_verdict(models: dict, metric: str, mname: str, lang: str) -> list[str]:
    """The Transformer against the best recurrent model, and whether it was still learning."""
    out = []
    tr = models.get("transformer")
    rnns = {n: models[n] for n in ("rnn", *ATTENTION_MODELS) if n in models}
    if tr and rnns:
        best = max(rnns, key=lambda n: rnns[n]["overall"][metric]["mean"])
        t, r = tr["overall"][metric], rnns[best]["overall"][metric]
        gap = t["mean"] - r["mean"]
        bar = max(1.0, t["std"] + r["std"])  # a point, or the seed spread if larger
        k = 0 if gap > bar else 1 if -gap > bar else 2
        verdict = ("ahead of", "behind", "level with (within a point or the seed spread)")[k]
        verdict_zh = ("领先", "落后", "持平（差距在 1 个点或种子离散范围之内）")[k]
        out.append(_tr(
            lang,
            f"Overall, the Transformer scores {t['mean']:.1f} {mname} and the best recurrent model ({LABELS[best]}) {r['mean']:.1f}: "
            f"the Transformer is {verdict} it by {abs(gap):.1f} points at {tr['params']:,} versus {rnns[best]['params']:,} parameters.",
            f"总体上，Transformer 的{mname}为 {t['mean']:.1f}，最好的循环模型（{_label(best, lang)}）为 {r['mean']:.1f}："
            f"在 {tr['params']:,} 对 {rnns[best]['params']:,} 个参数下，Transformer {verdict_zh}，差 {abs(gap):.1f} 个点。"))
        hist = [h for h in tr.get("history", []) if h and all("val_loss" in e for e in h)]
        if k != 0 and hist and all(h[-1]["val_loss"] <= min(e["val_loss"] for e in h) for h in hist):
            out.append(_tr(
                lang,
                f"The Transformer's validation loss was still falling at its last epoch in every seed ({len(hist)} of {len(hist)}): "
                "it is under-trained at this number of epochs, so this gap is not a verdict on the architecture.",
                f"Transformer 的验证损失在每个种子（{len(hist)} 个中的 {len(hist)} 个）的最后一个 epoch 仍在下降：在这个 epoch 数下它还没有"
                "训练充分，所以这个差距不是对架构的结论。"))
    return out


def _weak_run(models: dict, metric: str, lang: str) -> str | None:
    """A warning first when no model learned to translate (BLEU under WEAK_BLEU), else None."""
    top = max((m["overall"][metric]["mean"] for m in models.values() if finite(m["overall"][metric]["mean"])), default=None)
    if metric == "bleu" and top is not None and top < WEAK_BLEU:
        return _tr(
            lang,
            f"Read this run with care: the best model reaches only {top:.1f} BLEU (under {WEAK_BLEU:.0f}), so none of the models has "
            "learned to translate yet — this run is too short to say anything about the bottleneck or about the Transformer; "
            "the differences below are between models that all fail.",
            f"请谨慎解读这次运行：最好的模型也只有 {top:.1f} BLEU（低于 {WEAK_BLEU:.0f}），也就是说还没有任何模型学会翻译——这次运行太短，"
            "既不能说明瓶颈，也不能说明 Transformer 的优劣；下面的差异只是几个都失败了的模型之间的差异。")
    return None


def published_html(lang: str = "en") -> str:
    """What the papers report, without and with attention, for scale (large WMT data, not our task)."""
    rows = []
    for p in PAPERS:
        (n0, b0), (n1, b1) = p["without"], p["with"]
        rows.append([_pair(n0, lang), f"{b0:.2f}", _pair(n1, lang), f"{b1:.2f}", f"{b1 - b0:+.2f}", _pair(p["paper"], lang)])
    head = (["无注意力", "BLEU", "有注意力", "BLEU", "提升", "出处"] if lang == "zh" else
            ["without attention", "BLEU", "with attention", "BLEU", "gain", "source"])
    return "<p>" + _tr(lang, "Published, for scale (not our numbers): the same comparison on WMT'14 news translation with "
                             "millions of sentence pairs and models 100× larger.",
                       "论文数据，仅作参照（不是我们的数字）：同样的比较，在 WMT'14 新闻翻译上，数百万个句对，模型大 100 倍。") + "</p>" + table(head, rows)


def stalled_warning(results: dict, lang: str = "en") -> str | None:
    """The warning box's text when the progress guard flagged models (see lab/progress.py), else None."""
    prog = results.get("progress") or {}
    stalled = [n for n in prog.get("stalled", []) if n in results["models"]]
    if not stalled:
        return None
    parts = []
    for n in stalled:
        bad = next(r for r in prog["models"][n] if not r["ok"])
        best = "–" if bad["best"] is None else f"{bad['best']:.2f}"
        parts.append(_tr(lang, f"{LABELS.get(n, n)} (best validation loss {best} nats/token against {bad['baseline']:.2f} for "
                               f"predicting token frequencies alone)",
                         f"{_label(n, lang)}（最佳验证损失 {best} nats/词元，而只按词元频率预测的损失是 {bad['baseline']:.2f}）"))
    every = len(stalled) == len(results["models"])
    frac = prog.get("stall_fraction", 0.8)
    return _tr(
        lang,
        f"Training made no meaningful progress for {'; '.join(parts)}: a best validation loss above {frac} × the loss of "
        "predicting each target token from its frequency means the model has not learned to use the source. "
        + ("No model learned, so this run gets no reading: its tables and figures below show models that failed, not a result. "
           if every else "Those models' scores below are not a result. ")
        + "Train longer, lower the learning rate, or check the data and its tokenization.",
        f"以下模型的训练没有取得有意义的进展：{'；'.join(parts)}。最佳验证损失高于只按频率预测每个目标词元的损失的 {frac} 倍，"
        "说明模型还没有学会利用源序列。"
        + ("没有任何模型学会，所以这次运行不给出解读：下面的表格和图只显示失败的模型，不是结果。" if every else "这些模型下面的得分不能当作结果。")
        + "请训练更久、降低学习率，或检查数据及其分词方式。")


def _run_html(results, run_dir: Path, lang: str, fold: bool = False, teach: tuple[str, ...] = ()) -> str:
    """Reading, per-bucket tables, size/time table, example outputs and the figures of one run
    (a warning box first when the progress guard flagged models, and no reading when none learned).
    ``fold``: only the reading, the primary metric's table and the per-length figure in the main flow.
    ``teach``: the figure files to keep visible when this run is folded (see :func:`attnkit.page.html.details`)."""
    metrics, unit = results["metric_names"], results["length_unit"]
    warn = stalled_warning(results, lang)
    html = [f"<div class='notice'>{esc(warn)}</div>"] if warn else []
    if not (warn and len(results["progress"]["stalled"]) == len(results["models"])):  # a reading of failed models misleads
        html += [f"<p>{esc(p)}</p>" for p in reading(results, lang)]
    first = next(iter(results["models"].values()))
    name_col, all_col = _tr(lang, "model", "模型"), _tr(lang, "all", "全部")
    header = [name_col, _tr(lang, "params", "参数量")] + [_range(b, unit, lang) + f" (n={b['count']})" for b in first["buckets"]] + [all_col]
    for m in metrics:
        rows = [[_label(n, lang), f"{r['params']:,}"] + [_fmt(b["metrics"][m]) for b in r["buckets"]] + [_fmt(r["overall"][m])]
                for n, r in results["models"].items()]
        title = _tr(lang, f"<b>{esc(METRIC_LABELS.get(m, m))}</b> by source length (mean ± std over seeds)",
                    f"按源序列长度的<b>{esc(METRIC_ZH.get(m, m))}</b>（多个种子的均值 ± 标准差）")
        html.append(f"<p>{title}</p>" + table(header, rows))
    main, html = html, []
    rows = [[_label(n, lang), r["width"], f"{r['params']:,}", f"{100 * (r['params'] / results['budget'] - 1):+.1f} %",
             _fmt(r["train_time_s"], 0), ", ".join(str(e) for e in r.get("epochs", []))] for n, r in results["models"].items()]
    html.append(table([name_col] + (["宽度", "参数量", "相对预算", "训练时间（秒，共用机器）", "各种子的 epoch 数"] if lang == "zh" else
                                    ["width", "parameters", "vs budget", "training time (s, shared machine)", "epochs per seed"]), rows))
    if results.get("examples"):
        names = list(results["models"])
        rows = [[e["source"], e["reference"]] + [e.get(n, "") for n in names] for e in results["examples"]]
        html.append("<p>" + _tr(lang, "Test sentences (greedy outputs of the first seed):", "测试句子（第一个种子的贪心解码输出）：") + "</p>"
                    + _samples([_tr(lang, "source", "源"), _tr(lang, "reference", "参考")] + [_label(n, lang) for n in names], rows))
    html.append(f"<p class='note'>{esc(data_line(results.get('data'), lang))}</p>")
    if results.get("sizing"):
        sz = {**results["sizing"], **(results["sizing"].get("kept_from_config") or {})}  # what was used, --set values included
        html.append("<p class='note'>" + esc(_tr(
            lang, f"Sized to the data (--quick): {sz['params']:,} parameters, batch {sz['batch_size']}, {sz['epochs']} epochs at most, "
                  f"learning rate {sz['lr']:g}, from {sz['pairs']:,} training pairs ({sz['target_tokens']:,} target tokens).",
            f"按数据确定规模（--quick）：{sz['params']:,} 个参数，批大小 {sz['batch_size']}，最多 {sz['epochs']} 个 epoch，"
            f"学习率 {sz['lr']:g}；依据是 {sz['pairs']:,} 个训练句对（{sz['target_tokens']:,} 个目标词元）。")) + "</p>")
    figs = [figure(run_dir / img, alt, lang, teach=img in teach) for img, alt in _figures(results["models"], lang) if (run_dir / img).is_file()]
    if not fold:
        return "\n".join(main + html + figs)
    n_main = len(main) - len(metrics) + 1  # the warning and reading, and the primary metric's table
    curve = figs[:1] if (run_dir / "metric_vs_length.png").is_file() else []
    rest = main[n_main:] + html + figs[len(curve):]
    return "\n".join(main[:n_main] + curve + [details(esc(_tr(lang, "Every table, test sentence and figure of this run",
                                                                 "这次运行的全部表格、测试句子与图")), "\n".join(rest))])


def alignments_html(run, name: str, lang: str) -> str:
    """The lead run's alignment maps in the main flow — what the seq2seq article is about: where each
    output token looked in the source — Bahdanau's first, then the Transformer's cross-attention."""
    run_dir = Path(run.run_dir)
    order = [m for m in ("bahdanau", "transformer", "luong") if (run_dir / f"alignments_{m}.png").is_file()]
    if not order:
        return ""
    dates = str((run.get("data") or {}).get("name", "")).startswith("dates") or name.startswith("dates")
    intro = "<p>" + _tr(
        lang,
        f"Where the decoder looked ({run_name(name, lang)}, test sentences, first seed). Each row is one output token, each column "
        "a source token; a dark cell is a large attention weight, and each row sums to 1. " + (
            "The dark cells follow the source field that each output character copies — the date's digits, read in the order "
            "the output needs them" if dates else "The dark cells follow the source words each output word translates") +
        " — which is what an alignment is: a soft, learned pointer into the source, recomputed at every output step.",
        f"解码器看向哪里（{run_name(name, lang)}，测试句子，第一个种子）。每一行是一个输出词元，每一列是一个源词元；格子越黑，注意力权重越大，"
        "每行之和为 1。" + ("黑格沿着每个输出字符所复制的源字段走——日期的各位数字，按输出需要的顺序读出" if dates else
                           "黑格沿着每个输出词所翻译的源词走") +
        "——这就是对齐：一个指向源序列的、软的、学出来的指针，在每个输出步重新计算。") + "</p>"
    alts = {"bahdanau": ("RNN + Bahdanau: additive attention over the encoder states", "RNN + Bahdanau：对编码器状态的加性注意力"),
            "luong": ("RNN + Luong: multiplicative attention over the encoder states", "RNN + Luong：对编码器状态的乘性注意力"),
            "transformer": ("Transformer: cross-attention of the last decoder layer over the encoder, mean over heads",
                            "Transformer：解码器最后一层对编码器的交叉注意力（各头平均）")}
    figs = "".join(f'<figure class="taught">{figure(run_dir / f"alignments_{m}.png", _tr(lang, *alts[m]), lang)}'
                   f"<figcaption>{esc(_tr(lang, *alts[m]))}</figcaption></figure>" for m in order)
    return intro + figs


def _samples(header: list[str], rows: list[list[str]]) -> str:
    """A table of test sentences and model outputs, each cell shown as typed (``<code>``: data, not prose)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td><code>{esc(c)}</code></td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figures(models, lang: str) -> list[tuple[str, str]]:
    """(file, alt text) of a run's figures, the per-length curves first."""
    figs = [("metric_vs_length.png", _tr(lang, "score by source length, per model (the run named above)", "各模型按源序列长度的得分（上面所指的运行）")),
            ("training_curves.png", _tr(lang, "training and validation loss", "训练与验证损失"))]
    return figs + [(f"alignments_{n}.png", _tr(lang, f"alignments of {LABELS.get(n, n)}", f"{_label(n, lang)} 的对齐")) for n in models]


def data_line(data, lang: str = "en") -> str:
    """The data set in one plain sentence: its name, where it comes from (a file's name, never a machine's path),
    how it was split and its train / validation / test sizes."""
    data = data if isinstance(data, dict) else {"name": str(data or "?")}
    src = str(data.get("source") or "")
    if src.startswith(("/", ".", "~", "runs/")) or "\\" in src or "/" in src and src.endswith(".tsv"):
        src = Path(src).name
    sizes = [f"{data[k]:,}" for k in ("train", "valid", "test") if isinstance(data.get(k), int)]
    size = " / ".join(sizes)
    split = data.get("split")
    return _tr(lang, f"Data: {data.get('name', '?')}" + (f" ({src})" if src else "") + (f", split by {split}" if split else "")
                     + (f"; {size} train / validation / test pairs" if len(sizes) == 3 else "") + ".",
               f"数据：{data.get('name', '?')}" + (f"（{src}）" if src else "") + (f"，按 {split} 划分" if split else "")
               + (f"；训练 / 验证 / 测试句对 {size}" if len(sizes) == 3 else "") + "。")


def _committed_html(full_results: dict, lang: str) -> list[str]:
    """Each committed run, folded: what it is, its reading, tables, test sentences and figures."""
    parts = []
    lead = lead_run(full_results)
    for name, run in full_results.items():
        head = _tr(lang, "Every table and figure of ", "全部表格与图：") + run_name(name, lang, html=True)
        teach = () if name == lead else ("metric_vs_length.png",)  # the lead's figures are in the main flow already
        body = f"<p class='note'>{esc(describe_run(name, run, lang))}.</p>" + _run_html(run, Path(run.run_dir), lang, teach=teach)
        parts.append(details(head, body))
    return parts


def _own_so_what(results: dict, lang: str) -> str:
    """The "so what" of a section with no committed run: this run's verdict, read with its size in mind."""
    v = verdict(results)
    if v is not None and v["kind"] == "bottleneck":
        return _tr(lang, "Here the model without attention falls with source length while attention holds: that is the bottleneck "
                         "attention was invented to remove, one fixed vector for a source of any length.",
                   "这里没有注意力的模型随源序列变长而下降，而注意力模型保持住了：这正是注意力被发明出来要消除的瓶颈——"
                   "无论源序列多长都只有一个固定向量。")
    return _tr(lang, "This small run alone does not show the bottleneck plainly (see its reading): the fixed vector only runs out "
                     "when the sources outgrow it, which takes longer sources, more training and several seeds to see.",
               "单靠这次小规模运行看不清瓶颈（见它的解读）：只有当源序列长到一个固定向量装不下时，瓶颈才会出现，"
               "要看到它需要更长的源序列、更多训练和多个种子。")


def section(results, out_dir, lang: str = "en", full_results: dict | None = None):
    """The report section. With committed runs: the verdict table, the clearest run's per-length figure and
    its sentence, the "so what", then every run folded (other verdicts, each committed run, this report's
    own run, the published numbers). Without: this run's reading, its first table and figure, the rest folded."""
    run_dir = Path(getattr(results, "run_dir", out_dir))
    lead = lead_run(full_results)
    parts = []
    if lead is not None:
        run = full_results[lead]
        parts.append(verdict_table(full_results, lang))
        parts.append("".join(f"<p>{esc(x)}</p>" for x in verdict_lines({lead: run}, lang)))
        img = Path(run.run_dir) / "metric_vs_length.png"
        if img.is_file():
            parts.append(figure(img, _tr(lang, f"{run_name(lead, lang)}: score by source length, per model", f"{run_name(lead, lang)}：各模型按源序列长度的得分"), lang))
        parts.append(alignments_html(run, lead, lang))
        parts.append(so_what(lang, esc(takeaway(full_results, lang))))
        others = verdict_lines(full_results, lang, skip=(lead,))
        if others:
            parts.append(details(esc(_tr(lang, "What each other run shows, in a sentence", "其他每次运行说明了什么（各一句）")),
                                 "".join(f"<p>{esc(x)}</p>" for x in others)))
        parts += _committed_html(full_results, lang)
        own = "<p>" + _tr(lang, "A smaller replication, run now (fewer pairs and epochs, one seed, so noisier): read the claims "
                                "above from the committed runs.",
                          "现在运行的一个较小规模的重复实验（句对和 epoch 更少，只有一个种子，因此噪声更大）：结论请以上面已提交的运行为准。") + "</p>"
        parts.append(details(esc(_tr(lang, "This report’s own run", "本报告自己的运行")), own + _run_html(results, run_dir, lang)))
    else:
        parts.append(_run_html(results, run_dir, lang, fold=True))
        parts.append(so_what(lang, esc(_own_so_what(results, lang))))
    parts.append(details(esc(_tr(lang, "Published numbers, for scale", "论文中的数字（仅作参照）")), published_html(lang)))
    return Section(_tr(lang, "Seq2seq: the fixed-vector bottleneck versus attention", "Seq2seq：固定向量瓶颈与注意力"),
                   "\n".join(p for p in parts if p))


def summary_row(results: dict, lang: str = "en", full_results: dict | None = None) -> tuple[str, str] | None:
    """The closing summary table's row, short: the lead committed run's scores on its longest sources
    (the bottleneck in one line) when there are committed runs, else this run's overall scores."""
    lead = lead_run(full_results)
    r = full_results[lead] if lead is not None else results
    metric, models = r["metric_names"][0], r["models"]
    if "rnn" not in models or "bahdanau" not in models:
        return None
    m_name = (METRIC_ZH if lang == "zh" else {k: v.replace(" (%)", " %") for k, v in METRIC_LABELS.items()}).get(metric, metric)
    ends = {n: _ends(models[n], metric) for n in ("rnn", "bahdanau", "transformer") if n in models}
    cell = {n: "–" if e is None else f"{e[3]['mean']:.1f}" for n, e in ends.items()}
    where = run_name(lead, lang) if lead is not None else _tr(lang, "this report's run", "本报告的运行")
    measured = _tr(lang, f"{where}, {m_name} on the longest sources: no attention {cell['rnn']}, Bahdanau {cell['bahdanau']}"
                         + (f", Transformer {cell['transformer']}" if "transformer" in cell else ""),
                   f"{where}，最长源序列上的{m_name}：无注意力 {cell['rnn']}，Bahdanau {cell['bahdanau']}"
                   + (f"，Transformer {cell['transformer']}" if "transformer" in cell else ""))
    return (measured, _tr(lang, "attention removes the fixed-vector bottleneck where the fixed vector is too small",
                          "当固定向量不够用时，注意力消除了这个瓶颈"))
