"""Misconception: "attention means self-attention". One table of what the queries, keys and values
are in each attnkit module, and along which dimension its weights act (sequence positions,
source positions, channels, pixels, patches, past time steps).

The table is data (:data:`QKV`), checked at run time — and by a test — against the package: every
named class must exist. Nothing is trained; the run takes milliseconds.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

from ...page.html import esc, so_what
from ...page.i18n import tr
from ..lab.context import RunContext
from ..lab.registry import Experiment, register
from ..lab.results import Section


class Row(NamedTuple):
    kind: tuple[str, str]        # (English, Chinese)
    module: str                  # dotted path of the class
    query: tuple[str, str]
    keys: tuple[str, str]
    values: tuple[str, str]
    along: tuple[str, str]       # the dimension the weights normalise over
    normaliser: str              # softmax or sigmoid


QKV: tuple[Row, ...] = (
    Row(("self-attention", "自注意力"), "attnkit.MultiHeadAttention",
        ("projection of each token x_i", "每个 token x_i 的投影"), ("projections of the same tokens", "同一序列 token 的投影"),
        ("projections of the same tokens", "同一序列 token 的投影"), ("positions of the same sequence", "同一序列的位置"), "softmax"),
    Row(("cross-attention", "交叉注意力"), "attnkit.MultiHeadAttention",
        ("projection of each decoder token", "每个解码器 token 的投影"), ("projections of the encoder output", "编码器输出的投影"),
        ("projections of the encoder output", "编码器输出的投影"), ("source positions", "源序列位置"), "softmax"),
    Row(("seq2seq, additive", "seq2seq 加性"), "attnkit.modules.seq2seq_attention.BahdanauAttention",
        ("decoder RNN state s_{t-1} (before the step)", "解码器 RNN 状态 s_{t-1}（更新前）"), ("encoder states h_j", "编码器状态 h_j"),
        ("encoder states h_j", "编码器状态 h_j"), ("source positions", "源序列位置"), "softmax"),
    Row(("seq2seq, multiplicative", "seq2seq 乘性"), "attnkit.modules.seq2seq_attention.LuongAttention",
        ("decoder RNN state h_t (after the step)", "解码器 RNN 状态 h_t（更新后）"), ("encoder states h̄_s", "编码器状态 h̄_s"),
        ("encoder states h̄_s", "编码器状态 h̄_s"), ("source positions", "源序列位置"), "softmax"),
    Row(("channel (SE)", "通道（SE）"), "attnkit.modules.squeeze_excite.SqueezeExcite",
        ("global average of the feature map (no separate keys)", "特征图的全局平均（没有单独的键）"), ("— (an MLP scores all channels at once)", "—（MLP 一次给所有通道打分）"),
        ("the channels themselves", "通道本身"), ("channels", "通道"), "sigmoid"),
    Row(("channel (ECA)", "通道（ECA）"), "attnkit.modules.eca.ECA",
        ("global average of the feature map", "特征图的全局平均"), ("— (a 1-D convolution over neighbouring channels)", "—（对相邻通道做一维卷积）"),
        ("the channels themselves", "通道本身"), ("channels", "通道"), "sigmoid"),
    Row(("channel + spatial (CBAM)", "通道 + 空间（CBAM）"), "attnkit.modules.cbam.CBAM",
        ("average- and max-pooled descriptors", "平均池化与最大池化描述子"), ("— (MLP, then a 7×7 convolution)", "—（MLP，然后 7×7 卷积）"),
        ("channels, then pixels", "先通道，后像素"), ("channels, then spatial positions", "先通道，后空间位置"), "sigmoid"),
    Row(("spatial self-attention (MHSA2d)", "空间自注意力（MHSA2d）"), "attnkit.modules.mhsa2d.MHSA2d",
        ("1×1 projection of each pixel", "每个像素的 1×1 投影"), ("1×1 projections of every pixel (+ 2-D relative bias)", "每个像素的 1×1 投影（+ 二维相对偏置）"),
        ("1×1 projections of every pixel", "每个像素的 1×1 投影"), ("pixels (H × W)", "像素（H × W）"), "softmax"),
    Row(("vision transformer (ViT)", "视觉 Transformer（ViT）"), "attnkit.models.vit.VisionTransformer",
        ("projection of each patch embedding (+ class token)", "每个图块嵌入的投影（+ 类别 token）"), ("projections of every patch", "每个图块的投影"),
        ("projections of every patch", "每个图块的投影"), ("image patches", "图像块"), "softmax"),
    Row(("temporal", "时间注意力"), "attnkit.modules.temporal_attention.TemporalAttention",
        ("decoder state q_t", "解码器状态 q_t"), ("W_k h_s: projected encoder states, one per past step", "W_k h_s：投影后的编码器状态，每个过去时间步一个"),
        ("h_s: the unprojected encoder states", "h_s：未投影的编码器状态"), ("past time steps", "过去的时间步"), "softmax"),
)


# the rows whose queries, keys and values all come from one input
SELF = ("self-attention", "spatial self-attention (MHSA2d)", "vision transformer (ViT)")


def resolve(path: str):
    """The class named by a dotted ``path``, or an ImportError/AttributeError saying which part is missing."""
    mod, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(mod), attr)


@register
class MisconceptionQKV(Experiment):
    name = "misconceptions_qkv"
    help = "misconception 'attention = self-attention': what Q, K, V are in every attnkit module"
    quick = {}
    full = {}
    title = ("Misconception: attention means self-attention", "误解：注意力就是自注意力")
    question = ("Is every attention layer a Transformer's self-attention?", "每个注意力层都是 Transformer 的自注意力吗？")
    how_to_read = ("One row per attnkit module: what plays the query, the keys and the values, and along which dimension the weights act.",
                   "每行一个 attnkit 模块：谁充当查询、键、值，权重沿哪个维度作用。")
    report_order = 110
    lesson = "03_multihead_by_hand"  # the course lesson the report links under "Go deeper"
    est_s = {"quick": 1, "tiny": 8}
    run_in_report = True

    def run(self, ctx: RunContext) -> dict:
        rows = []
        for r in QKV:
            cls = resolve(r.module)  # fails loudly when the table names a class that is gone
            rows.append({**r._asdict(), "class": cls.__name__, "doc": (cls.__doc__ or "").strip().splitlines()[0:1]})
        return {"rows": rows, "kinds_along": sorted({r.along[0] for r in QKV}), "n_self": sum(r.kind[0] in SELF for r in QKV)}

    def report(self, results, out_dir, lang: str = "en", full_results=None) -> Section:

        i = 1 if lang == "zh" else 0
        head = [tr(lang, "kind", "类型"), tr(lang, "attnkit class", "attnkit 类"), tr(lang, "queries", "查询 Q"), tr(lang, "keys", "键 K"),
                tr(lang, "values", "值 V"), tr(lang, "weights act along", "权重作用的维度"), tr(lang, "normaliser", "归一化")]
        body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in (r["kind"][i], r["module"], r["query"][i], r["keys"][i], r["values"][i], r["along"][i], r["normaliser"])) + "</tr>"
                       for r in results["rows"])
        n, m = len(results["rows"]), len(results["kinds_along"])
        text = tr(lang, f"Of the {n} attention layers in attnkit listed here, {results['n_self']} are self-attention; their weights act along "
                        f"{m} different dimensions. Two questions place any of them: what are its queries, keys and values, and along "
                        "which dimension are the weights normalised? Channel attention (SE, ECA) has no keys at all and uses a sigmoid, so "
                        "channels do not compete for a fixed budget as softmax rows do.",
                  f"这里列出的 attnkit 中 {n} 种注意力层里，只有 {results['n_self']} 种是自注意力；它们的权重作用在 {m} 个不同的维度上。"
                  "判断任何一种注意力只需两个问题：它的查询、键、值是什么？权重沿哪个维度归一化？通道注意力（SE、ECA）根本没有键，"
                  "并且用 sigmoid，所以各通道不像 softmax 的行那样争夺一个固定的总量。")
        html = f"<p>{text}</p><table><thead><tr>{''.join(f'<th>{esc(h)}</th>' for h in head)}</tr></thead><tbody>{body}</tbody></table>"
        html += so_what(lang, tr(lang, "Self-attention, where queries, keys and values all come from one sequence, is one case among many. "
                                       "Cross-attention, channel attention, spatial attention and temporal attention use the same weighting "
                                       "idea with other queries, keys and values, or other normalisers.",
                                 "自注意力（查询、键、值来自同一个序列）只是众多情形之一。交叉注意力、通道注意力、空间注意力和时间注意力"
                                 "用的是同一个加权思想，只是查询、键、值不同，或者归一化方式不同。"))
        return Section(self.heading(lang), html)

    def summary(self, results, lang: str = "en", full_results=None):
        n, m = len(results["rows"]), len(results["kinds_along"])
        return (tr(lang, f"{n} attention layers, {results['n_self']} of them self-attention, {m} different dimensions",
                   f"{n} 种注意力层，其中 {results['n_self']} 种是自注意力，作用于 {m} 个不同维度"),
                tr(lang, "ask: what are Q, K, V, and along which dimension?", "要问：Q、K、V 是什么？沿哪个维度？"))
