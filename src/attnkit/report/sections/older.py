"""Prose section: the misconception "attention began with the Transformer", answered with this
report's own seq2seq run — the same RNN encoder-decoder with and without (Bahdanau 2014) attention,
next to a Transformer of the same parameter budget. It measures nothing: it reads the numbers of
the seq2seq experiment's section, earlier on the page. The other misconceptions are experiments of
their own (``attnkit.experiments.misconceptions``), each a section of its own.
"""

from __future__ import annotations

from ...experiments.lab.committed import committed_runs
from ...page.html import so_what, table
from ...page.i18n import tr
from ...page.names import run_name
from ...page.story import SectionContext
from ..experiment_section import load_results

ID = "misconception_older"
TITLE = ("Misconception: attention began with the Transformer", "误解：注意力始于 Transformer")
QUESTION = ("Was attention invented by the Transformer (2017)?", "注意力是 Transformer（2017）发明的吗？")
HOW_TO_READ = ("Rows compare the same RNN encoder-decoder without and with attention (Bahdanau et al., 2014) on this report's "
               "seq2seq run, next to a Transformer of the same size.",
               "表格在本报告的 seq2seq 运行上比较同一个 RNN 编码器-解码器有无注意力（Bahdanau 等，2014），以及同等规模的 Transformer。")
ORDER = 100  # its place in the report: after forecasting (90), before the other misconceptions (110-140); reads seq2seq (20)
LESSON = "02_scores_and_alignment"

LABELS = {"rnn": ("RNN, no attention (Sutskever et al. 2014)", "RNN，无注意力（Sutskever 等，2014）"),
          "bahdanau": ("RNN + additive attention (Bahdanau et al. 2014)", "RNN + 加性注意力（Bahdanau 等，2014）"),
          "luong": ("RNN + multiplicative attention (Luong et al. 2015)", "RNN + 乘性注意力（Luong 等，2015）"),
          "transformer": ("Transformer (Vaswani et al. 2017)", "Transformer（Vaswani 等，2017）")}


def _mean(x):
    return x["mean"] if isinstance(x, dict) else x


METRIC_LABELS = {"exact_match": ("exact match (%)", "完全匹配率（%）"), "bleu": ("BLEU", "BLEU"), "chrf": ("chrF", "chrF")}


def _gain_on_longest(res: dict) -> float:
    """Bahdanau's score minus the fixed-vector model's on the longest sources (-inf without both)."""
    models, metric = res["models"], res["metric_names"][0]
    if "rnn" not in models or "bahdanau" not in models:
        return float("-inf")
    return _mean(models["bahdanau"]["buckets"][-1]["metrics"][metric]) - _mean(models["rnn"]["buckets"][-1]["metrics"][metric])


def _source(ctx: SectionContext) -> tuple[dict, str | None, str | None] | None:
    """(results, committed run name or None, preset): the committed seq2seq run (trained to convergence,
    3 seeds) where attention gains most on the longest sources, when there is one, else the report's own
    quick run; None without either."""
    full = {n: r for n, r in committed_runs("seq2seq", ctx.committed_results).items() if _gain_on_longest(r) > float("-inf")}
    lead = max(full, key=lambda n: _gain_on_longest(full[n])) if full else None
    if lead is not None:
        return dict(full[lead]), lead, full[lead].meta.get("preset")
    doc = load_results(ctx.data.get("seq2seq"), ctx)
    return None if doc is None else (doc["results"], None, doc.get("preset"))


def _rows(ctx: SectionContext) -> dict:
    """The seq2seq numbers this section reads: per model, parameters and the first metric overall,
    on the shortest and on the longest sources ({"missing": True} without any)."""
    found = _source(ctx)
    if found is None:
        return {"missing": True}
    res, run, preset = found
    metric = res["metric_names"][0]
    rows = []
    for name, r in res["models"].items():
        buckets = r["buckets"]
        rows.append({"model": name, "params": r["params"], "overall": _mean(r["overall"][metric]),
                     "shortest": _mean(buckets[0]["metrics"][metric]), "longest": _mean(buckets[-1]["metrics"][metric])})
    stds = {n: r["overall"][metric].get("std", 0.0) for n, r in res["models"].items() if isinstance(r["overall"][metric], dict)}
    return {"metric": metric, "rows": rows, "preset": preset, "run": run, "std": stds}


def render(ctx: SectionContext, lang: str) -> str:
    data = _rows(ctx)
    if data.get("missing"):
        return "<p class='note'>" + tr(lang, "No seq2seq results in this report: run <code>attnkit experiment seq2seq</code>.",
                                       "本报告没有 seq2seq 结果：请运行 <code>attnkit experiment seq2seq</code>。") + "</p>"
    by = {r["model"]: r for r in data["rows"]}
    m = METRIC_LABELS.get(data["metric"], (data["metric"],) * 2)[lang == "zh"]
    where = (tr(lang, f"In the committed run on {run_name(data['run'], lang)} (3 seeds, trained to convergence)",
                f"在已提交的{run_name(data['run'], lang)}运行中（3 个种子，训练至收敛）") if data["run"] else
             tr(lang, f"In this report's own run ({data['preset']} preset)", f"在本报告自己的运行中（{data['preset']} 配置）"))
    html = ""
    if "rnn" in by and "bahdanau" in by:
        a, b = by["rnn"], by["bahdanau"]
        html += "<p>" + tr(
            lang,
            f"{where}, the recurrent model without attention scored {a['overall']:.1f} ({m}) overall and "
            f"{a['longest']:.1f} on the longest sources; the same recurrent model with Bahdanau's attention — published in 2014, three "
            f"years before the Transformer — scored {b['overall']:.1f} and {b['longest']:.1f}. Attention was invented to fix the RNN "
            "encoder-decoder's fixed-vector bottleneck; the Transformer later kept attention and dropped the recurrence.",
            f"{where}，没有注意力的循环模型总体得分 {a['overall']:.1f}（{m}），在最长的源序列上为 {a['longest']:.1f}；"
            f"同一个循环模型加上 Bahdanau 注意力（发表于 2014 年，比 Transformer 早三年）得分 {b['overall']:.1f} 和 {b['longest']:.1f}。"
            "注意力最初是为了解决 RNN 编码器-解码器的固定向量瓶颈而发明的；Transformer 后来保留了注意力，去掉了循环。",
        ) + "</p>"
    html += table([tr(lang, "model (year)", "模型（年份）"), tr(lang, "parameters", "参数量"), tr(lang, f"{m}, all", f"{m}，全部"),
                   tr(lang, f"{m}, shortest sources", f"{m}，最短源序列"), tr(lang, f"{m}, longest sources", f"{m}，最长源序列")],
                  [[LABELS.get(r["model"], (r["model"],) * 2)[lang == "zh"], f"{r['params']:,}", f"{r['overall']:.1f}", f"{r['shortest']:.1f}",
                    f"{r['longest']:.1f}"] for r in data["rows"]])
    html += _transformer_caveat(by, data, lang)
    return html + so_what(lang, tr(
        lang,
        "Attention is older than the Transformer: it was added to recurrent translators in 2014 so the decoder could look back at "
        "every source word instead of one fixed summary vector. The Transformer (2017) kept that idea and dropped the recurrence.",
        "注意力比 Transformer 更早：2014 年它被加进循环神经网络翻译模型，让解码器可以回看每一个源词，而不是只看一个固定的摘要向量。"
        "Transformer（2017）保留了这个想法，去掉了循环结构。"))


def _transformer_caveat(by: dict, data: dict, lang: str) -> str:
    """When the Transformer of this run scores below a recurrent model, say so and why it is no verdict on it."""
    t = by.get("transformer")
    below = [n for n in ("rnn", "bahdanau", "luong") if n in by and t is not None and t["overall"] < by[n]["overall"]]
    if not below:
        return ""
    names = ("、" if lang == "zh" else ", ").join(LABELS[n][lang == "zh"] for n in below)
    std = data["std"].get("transformer", 0.0)
    return "<p class='notice'>" + tr(
        lang,
        f"Read the Transformer's row with care: it scores {t['overall']:.1f} ± {std:.1f}, below {names}, at this small budget "
        "(about 60,000 parameters, a few thousand training pairs). A Transformer must learn word order from its position codes "
        "alone and is the data-hungrier model; this row says attention was there before the Transformer, not that the "
        "Transformer is worse.",
        f"请谨慎看 Transformer 这一行：在这个小预算下（约 60,000 个参数，几千个训练句对），它得分 {t['overall']:.1f} ± {std:.1f}，低于{names}。"
        "Transformer 只能靠位置编码学会词序，是更需要数据的模型；这一行说明的是注意力早于 Transformer，而不是 Transformer 更差。") + "</p>"


def summary(ctx: SectionContext, lang: str):
    data = _rows(ctx)
    if data.get("missing"):
        return None
    by = {r["model"]: r for r in data["rows"]}
    if "rnn" not in by or "bahdanau" not in by:
        return None
    return (tr(lang, f"longest sources: RNN {by['rnn']['longest']:.1f} vs RNN+attention (2014) {by['bahdanau']['longest']:.1f}",
               f"最长源序列：RNN {by['rnn']['longest']:.1f}，RNN+注意力（2014）{by['bahdanau']['longest']:.1f}"),
            tr(lang, "attention predates the Transformer", "注意力早于 Transformer"))
