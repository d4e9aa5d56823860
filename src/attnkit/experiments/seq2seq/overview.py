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
from ...page.names import run_name
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
    name = run_name(name, lang)
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
    name = run_name(name, lang)
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


def _verdicts(full_results: dict | None) -> dict:
    """``{run name: Results}`` of the committed runs that have a verdict."""
    return {n: r for n, r in (full_results or {}).items() if verdict(r) is not None}


def verdict_lines(full_results: dict | None, lang: str = "en", skip: tuple[str, ...] = ()) -> list[str]:
    """Each committed run's verdict sentence (and Transformer note), plain text, runs in ``skip`` left out."""
    return [s for n, r in _verdicts(full_results).items() if n not in skip
            for s in (sentence(n, r, lang), transformer_note(n, r, lang)) if s]


def verdict_table(full_results: dict | None, lang: str = "en") -> str:
    """One row per committed run: each model's score on the shortest → longest bucket; '' when none."""
    runs = _verdicts(full_results)
    if not runs:
        return ""
    rows = []
    for n, r in runs.items():
        metric = r["metric_names"][0]
        cells = []
        for model in MODELS:
            ends = _ends(r["models"][model], metric) if model in r["models"] else None
            cells.append("–" if ends is None else f"{ends[0]['metrics'][metric]['mean']:.1f} → {ends[1]['metrics'][metric]['mean']:.1f}"
                         f" ± {ends[1]['metrics'][metric]['std']:.1f}")
        rows.append([run_name(n, lang), (METRIC_ZH if lang == "zh" else METRIC_LABELS).get(metric, metric), verdict(r)["seeds"], *cells])
    head = ([_tr(lang, "run", "运行"), _tr(lang, "metric", "指标"), _tr(lang, "seeds", "种子数")]
            + [(LABELS_ZH if lang == "zh" else LABELS)[m] for m in MODELS])
    intro = _tr(lang, "What the committed runs show (shortest → longest source-length bucket, ± the seed std on the longest):",
                "已提交的运行说明了什么（最短 → 最长的源长度区间，最长区间附种子间标准差）：")
    return f"<p>{esc(intro)}</p>" + table(head, rows)


def overview_html(full_results: dict | None, lang: str = "en") -> str:
    """A paragraph of verdicts and a table (shortest → longest bucket per model) over the committed runs; '' when none."""
    if not _verdicts(full_results):
        return ""
    return "".join(f"<p>{esc(s)}</p>" for s in verdict_lines(full_results, lang)) + verdict_table(full_results, lang)


LEAD = "dates-list-full"  # the run whose figure shows the bottleneck most plainly (3 seeds, exact match, 0 to 100 %)


def lead_run(full_results: dict | None) -> str | None:
    """The committed run the section leads with: :data:`LEAD` when it shows the bottleneck, else the bottleneck
    run with the most seeds, else the first run with a verdict; None without one."""
    runs = _verdicts(full_results)
    kinds = {n: verdict(r) for n, r in runs.items()}
    if kinds.get(LEAD, {}).get("kind") == "bottleneck":
        return LEAD
    shown = sorted((n for n, v in kinds.items() if v["kind"] == "bottleneck"), key=lambda n: -kinds[n]["seeds"])
    return shown[0] if shown else next(iter(runs), None)


def _names(names: list[str], lang: str) -> str:
    return ("；" if lang == "zh" else "; ").join(run_name(n, lang) for n in names)


def takeaway(full_results: dict | None, lang: str = "en") -> str:
    """The section's "so what", plain text from the committed runs' verdicts (every number from their JSON):
    the lead run's bottleneck, attention's gain at every length on the text runs, and the other runs'
    bottleneck on the longest bucket; '' without committed runs."""
    runs = _verdicts(full_results)
    lead = lead_run(full_results)
    if lead is None:
        return ""
    out = []
    v = verdict(runs[lead])
    if v["kind"] == "bottleneck":
        models, metric = runs[lead]["models"], v["metric"]
        (r0, r1) = v["rnn"]
        att = {n: _ends(models[n], metric)[1]["metrics"][metric]["mean"] for n in ATTENTION if n in models and _ends(models[n], metric)}
        ends_en = " and ".join(f"{LABELS[n]}{' ends' if i == 0 else ''} at {x:.1f}" for i, (n, x) in enumerate(att.items()))
        ends_zh = "、".join(f"{LABELS_ZH[n]} 为 {x:.1f}" for n, x in att.items())
        m_en = METRIC_LABELS.get(metric, metric).replace(" (%)", "")
        out.append(_tr(lang, f"The run on {run_name(lead, lang)} shows the bottleneck: without attention, {m_en} falls from {r0['mean']:.1f} on the shortest "
                             f"sources to {r1['mean']:.1f} on the longest, while {ends_en} there ({v['seeds']} seeds).",
                       f"{run_name(lead, lang)}这次运行显示了瓶颈：没有注意力时，{METRIC_ZH.get(metric, metric)}从最短源序列上的 {r0['mean']:.1f} "
                       f"降到最长源序列上的 {r1['mean']:.1f}，而在最长的源序列上 {ends_zh}（{v['seeds']} 个种子）。"))
    gain = [n for n in runs if n != lead and verdict(runs[n])["kind"] == "every_length"]
    if gain:
        lo = min(verdict(runs[n])["gaps"][0] for n in gain)
        hi = max(verdict(runs[n])["gaps"][1] for n in gain)
        metric = verdict(runs[gain[0]])["metric"]
        bible = all((runs[n].get("data") or {}).get("name") == "bible" for n in gain)
        who_en, who_zh = ("The Bible runs", "圣经翻译的运行") if bible else ("The runs", "运行")
        out.append(_tr(lang, f"{who_en} ({_names(gain, lang)}) show attention's gain at every length rather than a gap that grows: "
                             f"the better attention model is {lo:.1f} to {hi:.1f} {METRIC_LABELS.get(metric, metric)} points above the fixed-vector "
                             f"model in every length bucket.",
                       f"{who_zh}（{_names(gain, lang)}）显示的是注意力在每个长度上的提升，而不是随长度扩大的差距：在每个长度区间上，"
                       f"较好的注意力模型都比固定向量模型高 {lo:.1f} 到 {hi:.1f} 个{METRIC_ZH.get(metric, metric)}点。"))
    more = [n for n in runs if n != lead and verdict(runs[n])["kind"] == "bottleneck" and verdict(runs[n])["metric"] == "exact_match"]
    if more:
        keep = min(verdict(runs[n])["att"][1]["mean"] for n in more)
        fall = max(verdict(runs[n])["rnn"][1]["mean"] for n in more)
        seeds = sorted({verdict(runs[n])["seeds"] for n in more})
        k = str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]}–{seeds[-1]}"
        out.append(_tr(lang, f"The other runs that show it ({_names(more, lang)}; {k} seed{'s' if seeds != [1] else ''} each) repeat it: on the "
                             f"longest bucket the better attention model keeps at least {keep:.1f} % exact match, where the model without "
                             f"attention falls to {fall:.1f} %.",
                       f"显示瓶颈的其他运行（{_names(more, lang)}；各 {k} 个种子）重复了这一点：在最长的区间上，较好的注意力模型至少保持 "
                       f"{keep:.1f} % 的完全匹配率，而没有注意力的模型降到 {fall:.1f} %。"))
    return " ".join(out) if lang == "en" else "".join(out)
