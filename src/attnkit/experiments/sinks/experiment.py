"""``sinks``: attention sinks on a pretrained encoder (lesson 12's measurement), and what evicting
the sink from the keys costs against evicting an ordinary word.

Measured (all-MiniLM-L6-v2, offline weights; King James Bible verses when installed, else a few plain
sentences; tens of seconds on a CPU):

1. per layer, the mean attention weight that a real query gives to position 0 (``[CLS]``), to the
   last token (``[SEP]``) and what a uniform spread would give, 1 / L (averaged over heads, queries
   and verses);
2. eviction, the StreamingLLM question (Xiao et al. 2023, arXiv:2309.17453) asked of this encoder:
   with position 0 masked out of every key set, how far do the words' final states move (1 − cosine
   of the mean word state, words = positions 1..L−2 except the middle one), against masking the
   middle word's key instead.

Shapes: input_ids (B, L); weights per layer (B, H, L, L); states (B, L, D).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...page.figures import pick, save_both
from ...page.html import figure, so_what
from ...page.i18n import tr
from ..lab.context import RunContext
from ..lab.registry import Experiment, register
from ..lab.results import Section

FALLBACK = ["The animal didn't cross the street because it was too tired.",
            "A quiet river runs past the old mill at the edge of town.",
            "She sold the car because the engine kept failing in winter.",
            "Heavy traffic delayed the bus by almost an hour."]


def _texts(n: int) -> tuple[list[str], str]:
    from ...data import MissingData

    try:
        from ...data.bible import load_bible_pairs

        return [p.en for p in load_bible_pairs(books=("Mark",))][:n], "King James Bible, Mark"
    except MissingData:
        return (FALLBACK * n)[:n], "four plain sentences (the Bible is not installed)"


def where_weight_goes(weights: tuple, lengths: list[int]) -> list[dict]:
    """Per layer: mean weight on position 0, on the last real token, and the uniform share (over heads, real queries, texts)."""
    rows = []
    for layer, w in enumerate(weights):  # (B, H, L, L)
        first = [float(w[i, :, :n, 0].mean()) for i, n in enumerate(lengths)]
        last = [float(w[i, :, :n, n - 1].mean()) for i, n in enumerate(lengths)]
        rows.append({"layer": layer, "first": sum(first) / len(first), "last": sum(last) / len(last),
                     "uniform": sum(1 / n for n in lengths) / len(lengths)})
    return rows


def eviction(model, batch, lengths: list[int]) -> dict:
    """1 − cosine of the mean word state when position 0's key is masked out, and when the middle word's is (mean over texts)."""
    def states(mask):
        with torch.no_grad():
            return model(input_ids=batch.input_ids, attention_mask=mask, token_type_ids=batch.token_type_ids).last_hidden_state  # (B, L, D)

    base = states(batch.attention_mask)
    out = {}
    for name in ("sink", "middle"):
        mask = batch.attention_mask.clone()
        for i, n in enumerate(lengths):
            mask[i, 0 if name == "sink" else n // 2] = 0
        moved = states(mask)
        d = []
        for i, n in enumerate(lengths):
            words = [j for j in range(1, n - 1) if j != n // 2]
            a, b = base[i, words].mean(0), moved[i, words].mean(0)
            d.append(float(1 - torch.nn.functional.cosine_similarity(a, b, dim=0)))
        out[name] = sum(d) / len(d)
    return out


def sinks_figure(rows: list[dict], lang: str = "en"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = lambda en, zh: pick(lang, en, zh)  # noqa: E731
    x = [r["layer"] + 1 for r in rows]
    fig, ax = plt.subplots(figsize=(10, 3.8), constrained_layout=True)
    ax.bar([i - 0.2 for i in x], [r["first"] for r in rows], 0.4, color="#d62728", label=t("position 0 ([CLS])", "位置 0（[CLS]）"))
    ax.bar([i + 0.2 for i in x], [r["last"] for r in rows], 0.4, color="#1f77b4", label=t("last token ([SEP])", "最后一个词元（[SEP]）"))
    ax.plot(x, [r["uniform"] for r in rows], "k--", label=t("uniform share 1/L", "均匀份额 1/L"))
    ax.set_xlabel(t("MiniLM layer", "MiniLM 层"))
    ax.set_ylabel(t("mean attention weight received", "平均收到的注意力权重"))
    ax.set_title(t("Where the attention goes: the first token is a sink", "注意力去了哪里：第一个词元是汇聚点"))
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    return fig


@register
class Sinks(Experiment):
    name = "sinks"
    help = "attention sinks in all-MiniLM-L6-v2: weight on [CLS]/[SEP] per layer, and the cost of evicting the sink's key"
    quick = {"texts": 32}
    full = {"texts": 128}
    tiny = {"texts": 4}
    seeds = 1
    title = ("Attention sinks, and evicting them", "注意力汇聚点，以及把它逐出")
    question = ("Why does a trained model park attention on the first token, and what happens if a cache drops that token?",
                "训练好的模型为什么把注意力停在第一个词元上？如果缓存丢掉这个词元会怎样？")
    how_to_read = ("Bars: the mean weight each layer's queries give to position 0 and to the last token, against the dashed uniform "
                   "share; a bar many times the dashed line is a sink. Below it, how far the words' final states move when one key is "
                   "masked out, the sink's or an ordinary word's (0 = not at all).",
                   "柱：每一层的查询给位置 0 和最后一个词元的平均权重，与虚线表示的均匀份额对比；比虚线高出许多倍的柱就是汇聚点。"
                   "图下方：把一个键屏蔽掉（汇聚点的，或一个普通词的）之后，各词的最终状态移动了多少（0 表示没有移动）。")
    report_order = 75  # after the KV cache (70), before vision (80)
    lesson = "12_sinks_and_packing"
    est_s = {"quick": 20, "tiny": 8}
    run_in_report = True

    def run(self, ctx: RunContext) -> dict:
        from ...models.bert_loader import load_minilm

        texts, source = _texts(int(ctx.config["texts"]))
        model, tok = load_minilm()
        model.eval()
        batch = tok(texts)
        lengths = [int(n) for n in batch.attention_mask.sum(1)]
        with torch.no_grad():
            weights = model(**batch.as_kwargs(), output_attentions=True).attentions  # per layer (B, H, L, L)
        rows = where_weight_goes(weights, lengths)
        ev = eviction(model, batch, lengths)
        if ctx.is_main:
            save_both(ctx.out / "sinks.png", lambda lang: sinks_figure(rows, lang))
        return {"layers": rows, "eviction": ev, "texts": len(texts), "source": source, "figure": "sinks.png"}

    def report(self, results, out_dir, lang: str = "en", full_results=None) -> Section:
        return Section(self.heading(lang), render(results, Path(results.run_dir), lang))

    def summary(self, results, lang: str = "en", full_results=None):
        top = max(results["layers"], key=lambda r: r["first"] / r["uniform"])
        ev = results["eviction"]
        return (tr(lang, f"layer {top['layer'] + 1}: {top['first'] / top['uniform']:.0f}× the uniform share on [CLS]; evicting it moves "
                         f"the words {ev['sink'] / max(ev['middle'], 1e-12):.0f}× more than evicting a word",
                   f"第 {top['layer'] + 1} 层：[CLS] 得到均匀份额的 {top['first'] / top['uniform']:.0f} 倍；逐出它使各词移动的幅度是逐出一个普通词的 "
                   f"{ev['sink'] / max(ev['middle'], 1e-12):.0f} 倍"),
                tr(lang, "keep the sink when a cache evicts", "缓存逐出时要保留汇聚点"))


def render(data: dict, run_dir: Path, lang: str) -> str:
    rows, ev = data["layers"], data["eviction"]
    top = max(rows, key=lambda r: r["first"] / r["uniform"])
    html = "<p>" + tr(
        lang,
        f"all-MiniLM-L6-v2 read {data['texts']} texts ({data['source']}). In layer {top['layer'] + 1} a query gives position 0 "
        f"({'[CLS]'}) {top['first']:.2f} of its weight on average, {top['first'] / top['uniform']:.0f}× the uniform share "
        f"{top['uniform']:.3f}, and the last token [SEP] {top['last']:.2f}. Softmax weights are positive and sum to 1, so a head "
        "with nothing to add for a query must still put its weight somewhere; an always-visible token is where trained heads park it.",
        f"all-MiniLM-L6-v2 读了 {data['texts']} 段文本（{data['source']}）。在第 {top['layer'] + 1} 层，一个查询平均把 {top['first']:.2f} "
        f"的权重给位置 0（[CLS]），是均匀份额 {top['uniform']:.3f} 的 {top['first'] / top['uniform']:.0f} 倍，给最后一个词元 [SEP] 的是 "
        f"{top['last']:.2f}。softmax 的权重为正且和为 1，所以一个对某个查询无话可说的头也必须把权重放在某处；训练好的头就把它停在一个总是可见的词元上。") + "</p>"
    html += figure(run_dir / data["figure"], tr(lang, "attention received by the first and last token, per layer",
                                                 "每层第一个和最后一个词元收到的注意力"), lang)
    html += "<p>" + tr(lang, "Eviction, the question a KV cache that drops old tokens must answer (StreamingLLM keeps the first tokens for "
                             "this reason): mask one key out of every layer and measure how far the words' final states move.",
                       "逐出——一个会丢弃旧词元的 KV 缓存必须回答的问题（StreamingLLM 正因为这个原因保留最前面的词元）："
                       "在每一层把一个键屏蔽掉，测量各词的最终状态移动了多少。") + "</p>"
    html += "<p>" + tr(lang, f"Masking position 0 (the sink) moved the mean word state by {ev['sink']:.4f} (1 − cosine); masking the middle "
                             f"word moved it by {ev['middle']:.4f}.",
                       f"屏蔽位置 0（汇聚点）使平均词状态移动了 {ev['sink']:.4f}（1 − 余弦）；屏蔽中间的词只移动了 {ev['middle']:.4f}。") + "</p>"
    ratio = ev["sink"] / max(ev["middle"], 1e-12)
    html += so_what(lang, tr(
        lang,
        f"A token that receives attention is not necessarily a token that carries meaning, but removing it still moves everything: "
        f"here evicting the sink moved the words {ratio:.1f}× as far as evicting an ordinary word. A cache that evicts old tokens "
        "should keep the first ones (or the model should have a learned sink logit, see the lesson), and a heat map bright on [CLS] "
        "is not evidence that [CLS] matters to the meaning.",
        f"收到注意力的词元不一定承载意义，但去掉它仍会牵动一切：这里逐出汇聚点使各词移动的幅度是逐出一个普通词的 {ratio:.1f} 倍。"
        "会逐出旧词元的缓存应该保留最前面的几个（或者让模型带一个学出来的汇聚点 logit，见课程），而一张在 [CLS] 上很亮的热力图，"
        "并不能证明 [CLS] 对意义很重要。"))
    return html
