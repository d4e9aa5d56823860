"""The opening of the seq2seq report section: what each committed run shows, in one sentence and one
table row, generated from its ``results.json`` (en and zh; no number is typed by hand).

Each committed run gets one verdict, from its primary metric (exact match, or BLEU for text) in the
shortest and the longest non-empty source-length bucket, comparing the fixed-vector model (``rnn``)
with the better attention model (Bahdanau or Luong, the higher overall):

* ``"bottleneck"`` — the fixed-vector model falls with length by more than the attention model,
  by more than 5 points and more than the four seed spreads (std) added together: the shape of
  Bahdanau et al. 2015's Fig. 2 (https://arxiv.org/abs/1409.0473);
* ``"fits"`` — the fixed-vector model scores 95 % exact match or more in every bucket: one vector
  holds what the task needs at these lengths;
* ``"every_length"`` — no growing gap, but the attention model is above the fixed-vector model in
  every bucket by more than a point and the two seed spreads: attention's gain at every length
  (what the Bible runs show at their budget);
* ``"weak"`` — no model reaches :data:`~.section.WEAK_BLEU` BLEU: the run is too short to say;
* ``"unclear"`` — none of these.

A run with a Transformer that falls with length where the attention model holds gets a sentence
saying why a small-data Transformer does (:func:`transformer_note`).

Shape legend: none (text and tables).
"""

from __future__ import annotations

from ...page.html import esc, table
from ...page.i18n import tr as _tr
from .plots import LABELS, METRIC_LABELS, finite

ATTENTION = ("bahdanau", "luong")
MODELS = ("rnn", "bahdanau", "luong", "transformer")
LABELS_ZH = {"rnn": "RNN（无注意力）", "bahdanau": "RNN + Bahdanau", "luong": "RNN + Luong", "transformer": "Transformer"}
METRIC_ZH = {"exact_match": "完全匹配率", "bleu": "BLEU", "chrf": "chrF"}
UNIT_ZH = {"characters": "个字符", "words": "个词", "tokens": "个 token"}
MIN_FALL = 5.0  # points: a smaller difference in falls is not called a bottleneck
FITS = 95.0  # exact match in every bucket at or above which one vector holds the task
WEAK_BLEU = 5.0  # the same bar as the section's warning: below it no model translates


def _ends(res: dict, metric: str) -> tuple[dict, dict] | None:
    """(shortest, longest) non-empty buckets with a finite score."""
    full = [b for b in res["buckets"] if b["count"] > 0 and finite(b["metrics"][metric]["mean"])]
    return (full[0], full[-1]) if len(full) >= 2 else None


def _range(b: dict, unit: str, lang: str) -> str:
    lo, hi = b["range"]
    if lang == "zh":
        u = UNIT_ZH.get(unit, unit)
        return f"{lo}–{hi} {u}" if hi < 1000 else f"超过 {lo - 1} {u}"
    return f"{lo}–{hi} {unit}" if hi < 1000 else f"over {lo - 1} {unit}"


def verdict(results: dict) -> dict | None:
    """The run's verdict and the numbers its sentence quotes; None without ``rnn`` and an attention model."""
    models, metric = results["models"], results["metric_names"][0]
    att = [n for n in ATTENTION if n in models]
    if "rnn" not in models or not att:
        return None
    best = max(att, key=lambda n: models[n]["overall"][metric]["mean"])
    ends_r, ends_a = _ends(models["rnn"], metric), _ends(models[best], metric)
    if ends_r is None or ends_a is None:
        return None
    (r0, r1), (a0, a1) = [[b["metrics"][metric] for b in e] for e in (ends_r, ends_a)]
    rnn_fall, att_fall = r0["mean"] - r1["mean"], a0["mean"] - a1["mean"]
    noise = r0["std"] + r1["std"] + a0["std"] + a1["std"]
    pairs = [(ra["metrics"][metric], rb["metrics"][metric]) for ra, rb in zip(models["rnn"]["buckets"], models[best]["buckets"])
             if ra["count"] > 0 and finite(ra["metrics"][metric]["mean"]) and finite(rb["metrics"][metric]["mean"])]
    gaps = [b["mean"] - a["mean"] for a, b in pairs]
    top = max(m["overall"][metric]["mean"] for m in models.values())
    if metric == "bleu" and top < WEAK_BLEU:
        kind = "weak"
    elif rnn_fall - att_fall > max(MIN_FALL, noise):
        kind = "bottleneck"
    elif metric == "exact_match" and all(a["mean"] >= FITS for a, _ in pairs):
        kind = "fits"  # a gain of a point or two over a model that already solves the task is not the story
    elif all(g > max(1.0, a["std"] + b["std"]) for g, (a, b) in zip(gaps, pairs)):
        kind = "every_length"
    else:
        kind = "unclear"
    return {"kind": kind, "metric": metric, "best": best, "rnn": (r0, r1), "att": (a0, a1), "gaps": (min(gaps), max(gaps)),
            "buckets": ends_r, "unit": results["length_unit"], "top": top,
            "seeds": len(models["rnn"]["overall"][metric].get("runs", [])) or 1}


def sentence(name: str, results: dict, lang: str = "en") -> str | None:
    """One plain sentence saying what the run ``name`` shows, every number from ``results``."""
    v = verdict(results)
    if v is None:
        return None
    zh = lang == "zh"
    m = (METRIC_ZH if zh else {k: x.replace(" (%)", "") for k, x in METRIC_LABELS.items()}).get(v["metric"], v["metric"])
    b0, b1 = (_range(b, v["unit"], lang) for b in v["buckets"])
    (r0, r1), (a0, a1) = v["rnn"], v["att"]
    best = (LABELS_ZH if zh else LABELS)[v["best"]]
    nums = _tr(lang, f"without attention {r0['mean']:.1f} on {b0} and {r1['mean']:.1f} on {b1}; {best} {a0['mean']:.1f} and {a1['mean']:.1f}; "
                     f"{v['seeds']} seed(s)",
               f"无注意力时在 {b0} 上 {r0['mean']:.1f}、在 {b1} 上 {r1['mean']:.1f}；{best} 为 {a0['mean']:.1f} 和 {a1['mean']:.1f}；"
               f"{v['seeds']} 个种子")
    lo, hi = v["gaps"]
    holds = a0["mean"] - a1["mean"] <= MIN_FALL
    text = {
        "bottleneck": (f"{name} shows the bottleneck: {m} without attention falls with source length while {best} "
                       f"{'holds' if holds else 'falls much less'} ({nums}).",
                       f"{name} 显示了瓶颈：没有注意力时{m}随源序列变长而下降，而 {best} {'保持住了' if holds else '下降得少得多'}（{nums}）。"),
        "every_length": (f"{name} shows attention's gain at every length, not a gap that grows with length: {best} is {lo:.1f} to "
                         f"{hi:.1f} {m} points above the fixed-vector model in every length bucket ({nums}).",
                         f"{name} 显示的是注意力在每个长度上都有的提升，而不是随长度扩大的差距：{best} 在每个长度区间上都比固定向量模型高 "
                         f"{lo:.1f} 到 {hi:.1f} 个{m}点（{nums}）。"),
        "fits": (f"{name} shows no bottleneck at these lengths: the fixed-vector model scores {FITS:.0f} % or more in every bucket, so one "
                 f"vector holds what this task needs ({nums}).",
                 f"{name} 在这些长度上没有显示瓶颈：固定向量模型在每个区间上都达到 {FITS:.0f} % 以上，一个向量就装得下这个任务需要的信息（{nums}）。"),
        "weak": (f"{name} is too short to say anything: the best model reaches {v['top']:.1f} BLEU, under {WEAK_BLEU:.0f} ({nums}).",
                 f"{name} 训练太短，说明不了什么：最好的模型只有 {v['top']:.1f} BLEU，低于 {WEAK_BLEU:.0f}（{nums}）。"),
        "unclear": (f"{name} shows no clear difference between the models with length ({nums}).",
                    f"{name} 在不同长度上没有显示出模型之间的明显差别（{nums}）。"),
    }[v["kind"]]
    return text[1] if zh else text[0]


def transformer_note(name: str, results: dict, lang: str = "en") -> str | None:
    """Why the Transformer falls with length where the attention RNN holds (little data), when it does; else None."""
    v, models = verdict(results), results["models"]
    if v is None or "transformer" not in models:
        return None
    ends = _ends(models["transformer"], v["metric"])
    if ends is None:
        return None
    t0, t1 = (b["metrics"][v["metric"]] for b in ends)
    a1 = v["att"][1]
    if a1["mean"] - t1["mean"] <= max(MIN_FALL, a1["std"] + t1["std"]) or t0["mean"] - t1["mean"] <= MIN_FALL:
        return None
    pairs = results.get("data", {}).get("train")
    n = f"{pairs:,}" if isinstance(pairs, int) else _tr(lang, "a few thousand", "几千")
    best = LABELS[v["best"]]
    return _tr(
        lang,
        f"In {name} the Transformer falls from {t0['mean']:.1f} to {t1['mean']:.1f} where {best} ends at {a1['mean']:.1f}: trained on {n} "
        f"pairs, it must learn from its position codes alone which source position each output reads, and on long sources that "
        f"match is the first to slip; a recurrent model gets the order from its recurrence. At this data size it is the weaker "
        f"model, which says little about the architecture with more data.",
        f"在 {name} 中，Transformer 从 {t0['mean']:.1f} 降到 {t1['mean']:.1f}，而 {best} 最后是 {a1['mean']:.1f}：只用 {n} 个句对训练，"
        f"它必须单凭位置编码学会每个输出该读哪个源位置，源序列一长，这种对应最先出错；循环模型则从循环结构本身得到顺序。"
        f"在这个数据量下它是较弱的模型，但这并不说明数据更多时这个架构如何。")


def overview_html(full_results: dict | None, lang: str = "en") -> str:
    """A paragraph of verdicts and a table (shortest → longest bucket per model) over the committed runs; '' when none."""
    runs = {n: r for n, r in (full_results or {}).items() if verdict(r) is not None}
    if not runs:
        return ""
    lines = [s for n, r in runs.items() for s in (sentence(n, r, lang), transformer_note(n, r, lang)) if s]
    rows = []
    for n, r in runs.items():
        metric = r["metric_names"][0]
        cells = []
        for model in MODELS:
            ends = _ends(r["models"][model], metric) if model in r["models"] else None
            cells.append("–" if ends is None else f"{ends[0]['metrics'][metric]['mean']:.1f} → {ends[1]['metrics'][metric]['mean']:.1f}"
                         f" ± {ends[1]['metrics'][metric]['std']:.1f}")
        v = verdict(r)
        rows.append([n, (METRIC_ZH if lang == "zh" else METRIC_LABELS).get(metric, metric), v["seeds"], *cells])
    head = ([_tr(lang, "run", "运行"), _tr(lang, "metric", "指标"), _tr(lang, "seeds", "种子数")]
            + [(LABELS_ZH if lang == "zh" else LABELS)[m] for m in MODELS])
    intro = _tr(lang, "What the committed runs show (shortest → longest source-length bucket, ± the seed std on the longest):",
                "已提交的运行说明了什么（最短 → 最长的源长度区间，最长区间附种子间标准差）：")
    return "".join(f"<p>{esc(s)}</p>" for s in lines) + f"<p>{esc(intro)}</p>" + table(head, rows)
