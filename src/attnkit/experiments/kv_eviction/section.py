"""The ``kv_eviction`` report section: the reading in English or Chinese, the trade-off table, the
sink measurement, and the StreamingLLM paper's numbers beside ours.

Every number of ours is formatted from a results dict; :data:`PUBLISHED` holds the paper's. With a
committed run (``results/kv_eviction/<run>``, handed in as ``full_results``) the reading is the
committed run's and the report's own run follows it; without one the report's own run is read.
"""

from __future__ import annotations

from pathlib import Path

from ...page.html import details, esc, figure, so_what, table
from ...page.i18n import tr
from ..lab.committed import describe_run
from .plots import ORDER, name

#: Xiao et al. 2023, https://arxiv.org/abs/2309.17453, Table 1: Llama-2-13B, perplexity on the first
#: book (65K tokens) of the PG19 test set, cache of 1024 (initial tokens + recent window).
PUBLISHED = {"source": "Xiao et al. 2023 (StreamingLLM), arXiv:2309.17453, Table 1: Llama-2-13B, PG19 first book (65K tokens)",
             "rows": [("0 + 1024", "window only", "仅窗口", 5158.07), ("4 + 1020", "sinks + window", "汇点 + 窗口", 5.40),
                      ('4 "\\n" + 1020', "four line breaks as sinks", "四个换行符作汇点", 5.60)]}
#: what the literature says makes a sink form, and how far this model is from it (verified in the papers' abstracts)
LITERATURE = ("Sinks are reported to emerge after effective optimization on sufficient training data (Gu et al. 2025, "
              "arXiv:2410.10781: 60M-parameter LLaMA-style models on 5B tokens) and to grow stronger with model size and context "
              "length (Barbero et al. 2025, arXiv:2504.02732); this model has well under a million parameters, saw a few million "
              "characters and a context of {C}.",
              "文献报告：汇点在充分训练、数据足够之后才出现（Gu 等 2025，arXiv:2410.10781：6000 万参数的 LLaMA 式模型，50 亿词元），"
              "并随模型规模和上下文长度增大而增强（Barbero 等 2025，arXiv:2504.02732）；这里的模型不到一百万参数，只见过几百万个字符，上下文为 {C}。")
SINK_RATIO = 2.0  # first-position weight this many times a uniform row's share: we call it a sink


def _ppl(v: dict) -> str:
    return f"{v['mean']:.3f} ± {v['std']:.3f}"


def trade_rows(r: dict, lang: str) -> list[list[str]]:
    """One row per policy and budget: tokens kept, KiB held, last-bin perplexity, seconds."""
    rows = []
    for p in ORDER:
        for b, v in sorted(r["policies"][p].items(), key=lambda kv: (kv[0] != "all", int(kv[0]) if kv[0].isdigit() else 0)):
            budget = tr(lang, "all", "全部") if b == "all" else b
            rows.append([name(p, lang), budget, v["max_kept"], f"{v['nbytes'] / 1024:.1f}", _ppl(v["last_bin_ppl"]),
                         f"{v['time_s']['mean']:.1f}"])
    return rows


def sink_verdict(r: dict) -> tuple[bool, float, int]:
    """(a sink formed, the largest first-position weight over layers ÷ a uniform row's, its layer)."""
    s = r["sink"]
    ratios = [m / s["uniform_first"] for m in s["first_mean"]]
    best = max(range(len(ratios)), key=ratios.__getitem__)
    return ratios[best] >= SINK_RATIO, ratios[best], best


def paired(r: dict, a: str, b: str) -> tuple[float, float]:
    """Mean and std over seeds of (a − b) in last-bin perplexity at the headline budget: each seed's
    model reads the same streams under both policies, so the difference is measured pair by pair."""
    hb = str(r["headline_budget"])
    xs = [x - y for x, y in zip(r["policies"][a][hb]["last_bin_ppl"]["per_seed"], r["policies"][b][hb]["last_bin_ppl"]["per_seed"])]
    m = sum(xs) / len(xs)
    return m, (sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5 if len(xs) > 1 else 0.0


def _reading(r: dict, lang: str) -> str:
    ppl, hb = r["perplexity_last_bin"], r["headline_budget"]
    win, sink, rec, dense = ppl["window"], ppl["sink_window"], ppl["window_recompute"], ppl["dense"]
    exploded = win > 1.5 * sink
    has_sink, ratio, layer = sink_verdict(r)
    n, T, C = r["n_seeds"], r["stream_len"], r["context"]
    head = tr(lang,
              f"A character-level decoder with rotary positions was trained on the King James Bible with windows of {C} characters, "
              f"each starting with the same BOS token ({n} seeds). It then read {r['streams']} streams of {T} characters "
              f"({T // C}× the training context) of {r['text']}, one character at a time. In the last bin of positions, with a cache of "
              f"{hb} tokens: window only {win:.3f}, sinks + window {sink:.3f}, window recomputed {rec:.3f}, H2O {ppl['h2o']:.3f}, "
              f"SnapKV {ppl['snapkv']:.3f}, 8-bit {ppl['quantized8']:.3f}, 4-bit {ppl['quantized4']:.3f}; keeping everything (dense) "
              f"{dense:.3g}, against {r['dense_in_context']['mean']:.3f} within the training context.",
              f"一个使用旋转位置编码的字符级解码器在《钦定版圣经》上训练，训练窗口长 {C} 个字符，每个窗口都以同一个 BOS 词元开头（{n} 个种子）。"
              f"随后它逐字符读取 {r['streams']} 条长 {T} 个字符的文本流（训练上下文的 {T // C} 倍），文本为{'《圣经》留出的书卷' if r['text'] == 'KJV held-out books' else r['text']}。"
              f"在最后一个位置区间、缓存 {hb} 个词元时的困惑度：仅窗口 {win:.3f}，汇点 + 窗口 {sink:.3f}，窗口重算 {rec:.3f}，H2O {ppl['h2o']:.3f}，"
              f"SnapKV {ppl['snapkv']:.3f}，8 位 {ppl['quantized8']:.3f}，4 位 {ppl['quantized4']:.3f}；全部保留（稠密）为 {dense:.3g}，"
              f"而在训练上下文之内是 {r['dense_in_context']['mean']:.3f}。")
    shape = tr(lang,
               "Window-only perplexity exploded once the first tokens left the cache, as in StreamingLLM's Figure 3." if exploded else
               "Unlike StreamingLLM's Figure 3, window-only perplexity did not explode when the first tokens left the cache: "
               "this small model does not depend on them.",
               "与 StreamingLLM 图 3 一样，开头的词元一离开缓存，仅窗口的困惑度就爆炸了。" if exploded else
               "与 StreamingLLM 图 3 不同，开头的词元离开缓存后，仅窗口的困惑度并没有爆炸：这个小模型并不依赖它们。")
    sink_s = tr(lang,
                f"The most, layer {layer}, puts {ratio:.1f}× a uniform row's share of attention on position 0: " +
                ("a sink formed." if has_sink else "no sink formed (we call it a sink from 2×)" +
                 ("; every layer gives position 0 less than a uniform row would." if ratio < 1 else ".")),
                f"最多的第 {layer} 层放在位置 0 上的注意力是均匀分布份额的 {ratio:.1f} 倍：" +
                ("形成了汇点。" if has_sink else "没有形成汇点（我们以 2 倍为界）" +
                 ("；每一层给位置 0 的注意力都少于均匀分布。" if ratio < 1 else "。")))
    frac = r["sink"].get("sink_heads_frac_per_seed")
    if frac is not None:  # Gu et al.'s count: heads whose mean weight on the first token exceeds 0.3
        sink_s += " " + tr(lang, "Heads with more than 0.3 of their weight on position 0 (Gu et al. 2025's sink heads), per seed: "
                                 + ", ".join(f"{100 * f:.0f} %" for f in frac) + ".",
                           "位置 0 上权重超过 0.3 的头（Gu 等 2025 定义的汇点头），各种子占比：" + "，".join(f"{100 * f:.0f}%" for f in frac) + "。")
    if not has_sink:
        sink_s += " " + tr(lang, *LITERATURE).format(C=C)
    d, sd = paired(r, "sink_window", "window")
    pair = tr(lang, f"Seed by seed, sinks + window minus window only: {d:+.3f} ± {sd:.3f} perplexity.",
              f"逐个种子配对比较，汇点 + 窗口减去仅窗口：困惑度差 {d:+.3f} ± {sd:.3f}。")
    return f"<p>{head} {shape} {sink_s} {pair}</p>"


def _published(lang: str) -> str:
    return "<p>" + tr(lang, "The paper's numbers (theirs, not ours): ", "论文中的数字（他们的测量，不是我们的）：") + PUBLISHED["source"] + "</p>" + details(
        tr(lang, "StreamingLLM's table", "StreamingLLM 的表格"), table(
            [tr(lang, "cache (initial + recent)", "缓存（开头 + 最近）"), tr(lang, "perplexity", "困惑度")],
            [[f"{c} ({tr(lang, en, zh)})", f"{p:.2f}"] for c, en, zh, p in PUBLISHED["rows"]]))


def _figures(r, lang: str) -> str:
    run_dir = Path(getattr(r, "run_dir", "."))
    out = ""
    for fname, en, zh in (("perplexity_vs_position.png", "bits per character by position", "按位置的每字符比特数"),
                          ("kept_positions.png", "kept positions over time", "随时间保留的位置"),
                          ("sink.png", "attention maps and the weight on position 0", "注意力图与位置 0 上的权重"),
                          ("tradeoff.png", "memory against perplexity", "内存与困惑度")):
        if (run_dir / fname).is_file():
            out += figure(run_dir / fname, tr(lang, en, zh), lang)
    return out


def _body(r, lang: str, figures: bool = True) -> str:
    head = [tr(lang, "policy", "策略"), tr(lang, "budget", "预算"), tr(lang, "max tokens kept", "最多保留词元"),
            tr(lang, "KiB at the end (1 stream)", "结束时 KiB（单条流）"), tr(lang, "perplexity, last bin (mean ± std)", "最后区间困惑度（均值 ± 标准差）"),
            tr(lang, "eval s", "评估秒数")]
    # the table folds (the page's main flow keeps ten tables); the reading above it says what it shows
    return _reading(r, lang) + (_figures(r, lang) if figures else "") + details(tr(lang, "the numbers: memory and perplexity per policy", "数字：各策略的内存与困惑度"),
                                                           table(head, trade_rows(r, lang))) + "<p class='note'>" + tr(
        lang, "KiB: keys and values of all layers in float32, the quantized ones at their packed size (codes, float16 scales and zeros). "
              "The recomputed window holds no cache between steps; its row shows the window it re-reads.",
        "KiB：全部层的键和值，按 float32 计；量化的按打包后的大小（码、float16 缩放与零点）。窗口重算在步与步之间不保留缓存；其行显示每步重读的窗口大小。") + "</p>"


def render(results, lang: str, full_results=None) -> str:
    """The section's HTML from a run's ``results`` (and the committed runs, when handed in)."""
    runs = full_results or {}
    # the full run is the one trained to give a sink its chance; without it, the run with the most seeds
    main_name = "full" if "full" in runs else max(runs, key=lambda n: runs[n].get("n_seeds", 0), default=None)
    main = runs[main_name] if main_name else results
    # name every committed run (its file, preset, seeds, time), so a reader can open the numbers
    html = "".join(f"<p class='note'>{esc(describe_run(n, run, lang))}.</p>" for n, run in (full_results or {}).items())
    html += _body(main, lang)
    for n, run in runs.items():  # every other committed run, folded: its numbers, not its figures
        if n != main_name:
            html += details(tr(lang, f"the committed run {n!r}", f"已提交的运行 {n!r}"), _body(run, lang, figures=False))
    if runs:
        html += details(tr(lang, "this report's own run", "本报告自己的运行"), _body(results, lang))
    html += _published(lang)
    has_sink, _, _ = sink_verdict(main)
    html += so_what(lang, tr(
        lang,
        "Softmax weights are positive and sum to one, so a query with nothing to look at must still put its weight somewhere; "
        "a trained model learns to park it on a token every sequence has, the first. Evicting that token moves the parked weight "
        "onto real tokens and corrupts every output, which is why StreamingLLM keeps four. " +
        ("Our small model formed such a sink." if has_sink else
         "Our small model barely did, so here the sinks only cost window space; the rule matters for models that formed one."),
        "softmax 权重为正且和为 1，因此没有可看之处的查询也必须把权重放在某处；训练好的模型学会把它停放在每个序列都有的词元上——第一个。"
        "驱逐这个词元会把停放的权重挪到真实词元上，破坏每个输出，所以 StreamingLLM 保留四个。" +
        ("我们的小模型形成了这样的汇点。" if has_sink else "我们的小模型几乎没有形成汇点，所以这里汇点只占用了窗口空间；这条规则对形成了汇点的模型才重要。")))
    return html


def summary(results, lang: str = "en"):
    p = results["perplexity_last_bin"]
    return (tr(lang, f"after {results['stream_len'] // results['context']}× the training context: window {p['window']:.2f}, "
                     f"sinks + window {p['sink_window']:.2f} perplexity",
               f"在训练上下文的 {results['stream_len'] // results['context']} 倍处：仅窗口困惑度 {p['window']:.2f}，汇点 + 窗口 {p['sink_window']:.2f}"),
            tr(lang, "a cache that keeps a fixed budget of tokens can read an endless stream", "只保留固定数量词元的缓存可以读取无尽的文本流"))
