"""The page's glossary: every technical term a section uses is defined where it is first used
(``<abbr title>``, linked to its entry) and listed at the end of the page (``<dfn>``), in the page's
language.

Why built from the page and not written by hand: a learner met BLEU, chrF, η², MSE, SDPA, FAVOR+,
"rollout", "parked", "blockwise" and "auto" before or without a definition, because each section's
author knew them. :func:`annotate` finds the terms in a section's prose (text outside tags, code,
links, headings of folded blocks and table headers), wraps the first use in each section, and
returns which terms it found; :func:`glossary_html` writes the entries of exactly those terms, in
the order the page first used them. Adding a term is one :class:`Term` in :data:`TERMS`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html import escape


@dataclass(frozen=True)
class Term:
    key: str  # the anchor: ``#g-<key>``
    forms: tuple[str, ...]  # how prose writes it (case-sensitive, whole words), in either language
    name: tuple[str, str]  # (English, Chinese) heading of its entry
    meaning: tuple[str, str]  # (English, Chinese) definition, one or two plain sentences


TERMS: tuple[Term, ...] = (
    Term("notation", ("head size E", "head size",), ("head size E (d in the articles)", "头维度 E（文章中写作 d）"),
         ("The length of one head's query and key vectors. attnkit's code and this page write E; the articles and most papers "
          "write d (as in √d). They are the same number.",
          "一个头的查询向量和键向量的长度。attnkit 的代码和本页写作 E，文章和多数论文写作 d（如 √d），两者是同一个数。")),
    Term("bleu", ("BLEU",), ("BLEU", "BLEU"),
         ("A translation score from 0 to 100: how many of the output's 1- to 4-word sequences also occur in the reference, "
          "with a penalty for outputs that are too short. 30+ is a usable translation on news text.",
          "翻译评分，0 到 100：输出中有多少 1 到 4 个词的片段也出现在参考译文中，输出过短还会被扣分。在新闻文本上 30 分以上算可用的翻译。")),
    Term("chrf", ("chrF",), ("chrF", "chrF"),
         ("Like BLEU but over character sequences (1 to 6 characters), 0 to 100: kinder to a word that is almost right.",
          "与 BLEU 类似，但按字符片段（1 到 6 个字符）计算，0 到 100：对几乎写对的词更宽容。")),
    Term("exact_match", ("exact match", "完全匹配率", "完全匹配"), ("exact match", "完全匹配率"),
         ("The share of test outputs that equal the reference character for character (%).",
          "与参考答案逐字符完全相同的测试输出所占的比例（%）。")),
    Term("mse", ("MSE",), ("MSE (mean squared error)", "MSE（均方误差）"),
         ("The average of (forecast − truth)² over every predicted value; lower is better. Our series are standardised, so "
          "1.0 is the error of always predicting the mean.",
          "所有预测值上（预测 − 真实）² 的平均，越低越好。我们的序列都做了标准化，所以 1.0 相当于一直预测平均值的误差。")),
    Term("eta2", ("η²",), ("η² (eta squared)", "η²（eta 平方）"),
         ("The share (0 to 1) of a quantity's variation across test images that the image's class explains; 0: the class "
          "tells nothing, 1: it tells everything.",
          "某个量在测试图像之间的变化中，能由图像类别解释的比例（0 到 1）；0 表示类别毫无关系，1 表示完全由类别决定。")),
    Term("sdpa", ("SDPA", "sdpa"), ("SDPA", "SDPA"),
         ("PyTorch's fused attention call, torch.nn.functional.scaled_dot_product_attention: the same maths as the "
          "reference softmax(QKᵀ/√E)V, in one optimised kernel.",
          "PyTorch 的融合注意力函数 torch.nn.functional.scaled_dot_product_attention：与参考实现 softmax(QKᵀ/√E)V 相同的数学，"
          "用一个优化过的内核完成。")),
    Term("blockwise", ("blockwise",), ("blockwise (attnkit's backend)", "blockwise（attnkit 的后端）"),
         ("attnkit's tiled attention: keys and values are read in blocks and the softmax is updated block by block (the online "
          "softmax of Flash attention), so the full L×S score matrix is never stored.",
          "attnkit 的分块注意力：按块读取键和值，逐块更新 softmax（Flash 注意力的在线 softmax），因此从不保存完整的 L×S 分数矩阵。")),
    Term("auto", ("auto",), ("auto (backend choice)", "auto（自动选择后端）"),
         ("backend=\"auto\": attnkit picks a backend per call from the inputs (shape, mask, device); the page reports which one "
          "it picked, and the small cost of choosing.",
          "backend=\"auto\"：attnkit 根据每次调用的输入（形状、掩码、设备）选择一个后端；本页会给出它选了哪个，以及选择本身的少量开销。")),
    Term("favor", ("FAVOR+",), ("FAVOR+", "FAVOR+"),
         ("The Performer's random-feature approximation of softmax attention: exp(q·k) is replaced by a product of random "
          "positive features, so attention costs O(L) instead of O(L²), at the price of an approximation error.",
          "Performer 对 softmax 注意力的随机特征近似：把 exp(q·k) 换成随机正特征的乘积，使注意力的成本从 O(L²) 变为 O(L)，代价是近似误差。")),
    Term("rollout", ("rollout",), ("attention rollout", "注意力 rollout（逐层累乘）"),
         ("Multiplying the attention maps of successive layers (each plus the identity for the residual path) to estimate how much "
          "each input token feeds each output; a heuristic, not a measured attribution.",
          "把逐层的注意力图（每层加上代表残差通路的单位矩阵）相乘，估计每个输入词元对每个输出的贡献；这是一种启发式方法，不是测得的归因。")),
    Term("parked", ("parked",), ("parked head", "停靠的头"),
         ("A head that puts most of its weight (here ≥ 80 %) on one fixed token such as [CLS] or [SEP] whatever the input: "
          "it is idle on that input rather than reading content.",
          "无论输入是什么，都把大部分权重（这里 ≥ 80 %）放在一个固定词元（如 [CLS] 或 [SEP]）上的头：它在该输入上处于空闲，而不是在读内容。")),
    Term("kv_cache", ("KV cache", "KV 缓存"), ("KV cache", "KV 缓存"),
         ("The keys and values of the tokens generated so far, kept between decoding steps so that each step computes only the "
          "new token's: 2 × layers × kv_heads × E × tokens numbers.",
          "解码时保留已生成词元的键和值，使每一步只需计算新词元的：共 2 × 层数 × kv_heads × E × 词元数 个数。")),
    Term("gqa", ("GQA", "MQA"), ("GQA / MQA", "GQA / MQA"),
         ("Grouped-query attention: several query heads share one key/value head (kv_heads < heads), which divides the KV "
          "cache by heads / kv_heads; MQA is the extreme of one key/value head.",
          "分组查询注意力：多个查询头共用一个键/值头（kv_heads < heads），KV 缓存因此缩小为原来的 kv_heads / heads；"
          "MQA 是只有一个键/值头的极端情形。")),
    Term("mla", ("MLA",), ("MLA", "MLA"),
         ("Multi-head latent attention (DeepSeek-V2): the cache keeps one small latent vector per token (plus a small RoPE part) "
          "from which every head's keys and values are projected.",
          "多头潜在注意力（DeepSeek-V2）：缓存中每个词元只保留一个小的潜在向量（外加一小段 RoPE 部分），各头的键和值由它投影得到。")),
    Term("rope", ("RoPE",), ("RoPE", "RoPE"),
         ("Rotary position embedding: each query and key is rotated by an angle proportional to its position, so their dot "
          "product depends on the relative distance only.",
          "旋转位置编码：每个查询和键按与位置成正比的角度旋转，因此它们的点积只依赖于相对距离。")),
    Term("alibi", ("ALiBi",), ("ALiBi", "ALiBi"),
         ("Attention with linear biases: a penalty proportional to the distance between query and key is added to each score, "
          "a different slope per head; no position embedding at all.",
          "线性偏置注意力：给每个分数加上一个与查询和键之间距离成正比的惩罚，每个头斜率不同；完全不用位置嵌入。")),
    Term("sink", ("attention sink", "attention sinks", "注意力汇聚"), ("attention sink", "注意力汇聚点（attention sink）"),
         ("A token (usually the first) that receives a large share of attention whatever the query, because softmax must put its "
          "weight somewhere; evicting it from a KV cache breaks generation (StreamingLLM).",
          "一个无论查询是什么都得到大份额注意力的词元（通常是第一个），因为 softmax 必须把权重放在某处；把它从 KV 缓存中逐出会让生成崩溃（StreamingLLM）。")),
    Term("se", ("SE", "Squeeze-and-Excitation"), ("SE (Squeeze-and-Excitation)", "SE（挤压-激励）"),
         ("Channel attention: average each channel over the image, pass the vector through a small MLP and a sigmoid, and scale "
          "each channel by its gate (0 to 1).",
          "通道注意力：把每个通道在整幅图上取平均，经过一个小型 MLP 和 sigmoid，再用得到的门控值（0 到 1）缩放每个通道。")),
    Term("eca", ("ECA",), ("ECA", "ECA"),
         ("Efficient channel attention: SE's gate with the MLP replaced by one 1-D convolution across neighbouring channels.",
          "高效通道注意力：把 SE 门控中的 MLP 换成沿相邻通道的一次一维卷积。")),
    Term("cbam", ("CBAM",), ("CBAM", "CBAM"),
         ("Convolutional block attention module: an SE-like channel gate, then a spatial gate (0 to 1 per pixel) computed from "
          "the channel-wise mean and max maps by a 7×7 convolution.",
          "卷积块注意力模块：先做一个类似 SE 的通道门控，再做空间门控（每个像素 0 到 1），由按通道求得的均值图和最大值图经 7×7 卷积得到。")),
    Term("mhsa", ("MHSA",), ("MHSA", "MHSA"),
         ("Multi-head self-attention over the pixels (or patches) of a feature map, as in BoTNet and in the attention blocks "
          "added to detectors such as YOLOv8.",
          "在特征图的像素（或图块）上做的多头自注意力，如 BoTNet，以及加到 YOLOv8 等检测器里的注意力模块。")),
    Term("sigma", ("2σ",), ("2σ rule", "2σ 规则"),
         ("This page calls a difference \"helped\" or \"hurt\" only when it exceeds twice the standard error of the "
          "difference over seeds (about a 95 % two-sided test); smaller differences are reported as \"within noise\".",
          "本页只在差值超过其种子间标准误的两倍时（约等于 95 % 的双侧检验）才说“有帮助”或“有损害”；更小的差值记为“在噪声之内”。")),
)

_SKIP = {"code", "pre", "a", "abbr", "dfn", "summary", "th", "script", "style", "svg", "title", "h2", "h3", "h4", "button"}
_TAG = re.compile(r"(<[^>]*>)")
_FORMS = {form: t for t in TERMS for form in t.forms}
# longest forms first, so "KV cache" wins over a shorter overlapping form; whole words only (\b fails on "η²", hence the lookarounds)
_PATTERN = re.compile("|".join(rf"(?<![\w-]){re.escape(f)}(?![\w-])" for f in sorted(_FORMS, key=len, reverse=True)))


def _tag_name(tag: str) -> tuple[str, bool, bool]:
    """(name, closing, self-closing) of an HTML tag string such as ``<a href=...>`` or ``</a>``."""
    m = re.match(r"<\s*(/?)\s*([A-Za-z0-9]+)", tag)
    if not m:
        return "", False, False
    return m.group(2).lower(), bool(m.group(1)), tag.rstrip(">").rstrip().endswith("/")


def annotate(html: str, lang: str, seen: set[str] | None = None) -> tuple[str, list[str]]:
    """``html`` with the first use of each :data:`TERMS` term wrapped in ``<abbr title=definition>``
    linked to its glossary entry, and the keys of the terms found, in order of first use.
    ``seen``: terms already wrapped (left as they are); the caller passes a fresh set per section."""
    seen = set() if seen is None else seen
    found: list[str] = []
    depth = 0  # inside a tag of _SKIP (code, links, table headers...): text left alone
    out = []
    for part in _TAG.split(html):
        if part.startswith("<"):
            name, closing, selfclose = _tag_name(part)
            if name in _SKIP and not selfclose:
                depth += -1 if closing else 1
                depth = max(depth, 0)
            out.append(part)
            continue
        if depth:
            out.append(part)
            continue
        out.append(_PATTERN.sub(lambda m: _wrap(m.group(0), lang, seen, found), part))
    return "".join(out), found


def _wrap(word: str, lang: str, seen: set[str], found: list[str]) -> str:
    term = _FORMS[word]
    if term.key not in found:
        found.append(term.key)
    if term.key in seen:
        return word
    seen.add(term.key)
    meaning = term.meaning[1] if lang == "zh" else term.meaning[0]
    return f'<a class="term" href="#g-{term.key}"><abbr title="{escape(meaning, quote=True)}">{word}</abbr></a>'


def glossary_html(keys: list[str], lang: str) -> str:
    """The glossary entries of the terms ``keys`` (as :func:`annotate` found them), in that order, as a ``<dl>``."""
    by = {t.key: t for t in TERMS}
    zh = lang == "zh"
    rows = "".join(f'<dt><dfn id="g-{k}">{escape(by[k].name[zh])}</dfn></dt><dd>{escape(by[k].meaning[zh])}</dd>' for k in keys if k in by)
    return f'<dl class="glossary">{rows}</dl>' if rows else ""
