"""The story of ``attnkit report``, in the order of the page: what attention is, the seq2seq
bottleneck, self-attention on real text, masks, cost, relative positions, the KV cache, vision,
forecasting, the misconceptions, and a closing summary table.

Each entry states the question its section answers and how to read its figure, in English and
Chinese; the numbers come from the section's own run (see :mod:`.story`). Experiments registered
with a ``report_order`` that the story does not place itself are added before the summary, so a new
experiment file still gets its section.
"""

from __future__ import annotations

from . import cost_section, decoding_section, intro_section, masks_section, misconceptions_section, positions_section
from .experiment_story import experiment_section
from .html import table
from .i18n import tr
from .story import SectionContext, StorySection

PLACED = ("seq2seq", "minilm_maps", "vision", "forecast", "misconceptions_qkv", "misconceptions_explain",
          "misconceptions_long", "misconceptions_heads")


def _mod(name: str) -> str:
    return f"attnkit.report.{name}"


def story() -> list[StorySection]:
    s = [
        StorySection(
            "intro", ("What attention is", "什么是注意力"),
            ("What does an attention layer compute, step by step?", "注意力层一步一步算的是什么？"),
            ("Left: the score of every (query, key) pair, one row per query. Right: the same rows after softmax — each row sums "
             "to 1 and says how much of each value goes into that query's output.",
             "左图：每个 (查询, 键) 对的分数，每行一个查询。右图：同样的行经过 softmax 之后——每行和为 1，表示每个值在该查询输出中所占的份额。"),
            intro_section.compute, intro_section.render, (_mod("intro_section"),), est_s={"quick": 2, "tiny": 1},
            summary=intro_section.summary),
        experiment_section(
            "seq2seq", ("The seq2seq bottleneck, and alignments", "seq2seq 的瓶颈与对齐"),
            ("Why was attention invented? Does squeezing a sentence into one vector lose information as sentences grow?",
             "为什么要发明注意力？把整句话压成一个向量，句子变长时会丢失信息吗？"),
            ("The curves show accuracy per source-length bucket for each model; a falling curve is the bottleneck. The alignment "
             "pictures show, for each output character (row), which input characters (columns) the decoder attended to.",
             "曲线给出每个模型在各源长度区间上的准确率；下降的曲线就是瓶颈。对齐图中，每一行是一个输出字符，列是输入字符，颜色表示解码器关注的程度。"),
            est_quick=120, summary=_seq2seq_summary),
        experiment_section(
            "minilm_maps", ("Self-attention and multi-head attention on real text", "真实文本上的自注意力与多头注意力"),
            ("What do the 72 heads of a real pretrained model (all-MiniLM-L6-v2) look at?", "一个真实预训练模型（all-MiniLM-L6-v2）的 72 个头在看什么？"),
            ("Each small square is one head: rows are query tokens, columns key tokens, darker = more weight. Heads differ: some look "
             "at the previous token, some at [CLS]/[SEP], some broadly. The viewer lets you pick a layer and head.",
             "每个小方块是一个头：行是查询 token，列是键 token，越深表示权重越大。各个头不同：有的看前一个 token，有的看 [CLS]/[SEP]，有的看得很分散。交互查看器可以选择层和头。"),
            est_quick=15, summary=_minilm_summary),
        StorySection(
            "masks", ("Masks: padding, causal, sliding window", "掩码：填充、因果、滑动窗口"),
            ("Which (query, key) pairs may attend, and what goes wrong without a mask?", "哪些 (查询, 键) 对可以相互关注？没有掩码会出什么错？"),
            ("Black cells may attend, white cells are masked (their weight is exactly 0). Rows are queries, columns keys.",
             "黑色格子可以关注，白色格子被掩码（权重恰好为 0）。行是查询，列是键。"),
            masks_section.compute, masks_section.render, (_mod("masks_section"),), est_s={"quick": 3, "tiny": 1},
            summary=masks_section.summary),
        StorySection(
            "cost", ("Cost and speed: quadratic, blockwise, linear", "成本与速度：二次方、分块、线性"),
            ("Why is attention expensive for long inputs, and what do blockwise (Flash-style) and linear attention change?",
             "为什么注意力在长输入上代价高？分块（Flash 式）和线性注意力改变了什么？"),
            ("The first table is memory for the dense score matrix; the benchmark plot shows measured time per backend (lower is "
             "better) and the tables say which backend auto chose and why.",
             "第一张表是稠密分数矩阵所需的内存；基准图给出各后端的实测时间（越低越好），表格说明 auto 选择了哪个后端以及原因。"),
            cost_section.compute, cost_section.render, (_mod("cost_section"), _mod("bench_section"), _mod("backends_section")),
            inputs=cost_section.inputs, est_s={"quick": 5, "tiny": 2}, summary=cost_section.summary),
        StorySection(
            "positions", ("Relative positions", "相对位置"),
            ("Does attention know word order, and how do relative position methods (ALiBi, RoPE) add it?",
             "注意力知道词序吗？相对位置方法（ALiBi、RoPE）如何加入位置信息？"),
            ("The heatmaps are ALiBi's bias added to each score: 0 on the diagonal, more negative the further the key is; a steep "
             "head (left) only sees nearby tokens, a shallow one (right) far ones too.",
             "热力图是 ALiBi 加到每个分数上的偏置：对角线为 0，键越远越负；陡峭的头（左）只看附近的 token，平缓的头（右）也能看到远处。"),
            positions_section.compute, positions_section.render, (_mod("positions_section"),), est_s={"quick": 2, "tiny": 1},
            summary=positions_section.summary),
        StorySection(
            "kv_cache", ("The KV cache", "KV 缓存"),
            ("Why does text generation keep a cache of keys and values, and how much does it save?", "为什么文本生成要缓存键和值？能省多少？"),
            ("Tokens per second (higher is better) with a dynamic cache, a static cache, and recomputing the whole prefix.",
             "每秒生成的 token 数（越高越好）：动态缓存、静态缓存、以及每步重算整个前缀。"),
            decoding_section.compute, decoding_section.render, (_mod("decoding_section"),), inputs=decoding_section.inputs,
            est_s={"quick": 10, "tiny": 2}, summary=decoding_section.summary),
        experiment_section(
            "vision", ("Channel and spatial attention in vision", "视觉中的通道注意力与空间注意力"),
            ("Do SE, ECA, CBAM, spatial self-attention and a ViT help a small image classifier, and where do they look?",
             "SE、ECA、CBAM、空间自注意力和 ViT 能帮助小型图像分类器吗？它们关注哪里？"),
            ("The table gives test accuracy (mean ± std over seeds), parameters and cost per model; the maps overlay where spatial "
             "attention put its weight on test images.",
             "表格给出每个模型的测试准确率（多个种子的均值 ± 标准差）、参数量和计算量；热图叠加在测试图像上，显示空间注意力的权重位置。"),
            est_quick=110, summary=_vision_summary),
        experiment_section(
            "forecast", ("Temporal attention in forecasting", "预测中的时间注意力"),
            ("Does attention over past time steps improve a forecast, compared with simple baselines?", "与简单基线相比，对过去时间步的注意力能改进预测吗？"),
            ("Lower error is better; the attention-by-lag plot shows which past steps the decoder weighs (peaks at daily or weekly "
             "lags mean it found the seasonality).",
             "误差越低越好；按滞后画出的注意力图显示解码器看重哪些过去的时间步（在日或周滞后处出现峰值说明它找到了季节性）。"),
            est_quick=45, summary=_forecast_summary),
        StorySection(
            "misconception_older", ("Misconception: attention began with the Transformer", "误解：注意力始于 Transformer"),
            ("Was attention invented by the Transformer (2017)?", "注意力是 Transformer（2017）发明的吗？"),
            ("Rows compare the same RNN encoder-decoder without and with attention (Bahdanau et al., 2014) on this report's "
             "seq2seq run, next to a Transformer of the same size.",
             "表格在本报告的 seq2seq 运行上比较同一个 RNN 编码器-解码器有无注意力（Bahdanau 等，2014），以及同等规模的 Transformer。"),
            misconceptions_section.older_compute, misconceptions_section.older_render, (_mod("misconceptions_section"),),
            inputs=lambda ctx: {"seq2seq": ctx.data.get("seq2seq")}, est_s={"quick": 0.1, "tiny": 0.1},
            summary=misconceptions_section.older_summary),
        experiment_section(
            "misconceptions_qkv", ("Misconception: attention means self-attention", "误解：注意力就是自注意力"),
            ("Is every attention layer a Transformer's self-attention?", "每个注意力层都是 Transformer 的自注意力吗？"),
            ("One row per attnkit module: what plays the query, the keys and the values, and along which dimension the weights act.",
             "每行一个 attnkit 模块：谁充当查询、键、值，权重沿哪个维度作用。"),
            est_quick=1, summary=_qkv_summary),
        experiment_section(
            "misconceptions_explain", ("Misconception: attention weights are explanations", "误解：注意力权重就是解释"),
            ("Do the tokens that receive the most attention matter most for the model's output?", "得到最多注意力的 token 对模型输出最重要吗？"),
            ("Bars are the rank correlation per layer between attention received and importance measured by masking the token "
             "(+1 = same ranking, 0 = unrelated); whiskers are the spread over sentences.",
             "柱子是每层中“收到的注意力”与“遮住该 token 测得的重要性”之间的秩相关（+1 = 排序相同，0 = 无关）；误差线是不同句子间的离散程度。"),
            est_quick=5, summary=_explain_summary),
        experiment_section(
            "misconceptions_long", ("Misconception: attention by itself solves long sequences", "误解：注意力本身就能解决长序列问题"),
            ("How do time and memory grow with length, and what do the scalable variants give up?", "时间和内存如何随长度增长？可扩展的变体放弃了什么？"),
            ("Left: measured time per call versus n on log–log axes (slope 2 = quadratic, 1 = linear). Right: memory versus n "
             "from attnkit's reported bytes, with the stated budget as a dashed line.",
             "左图：每次调用的实测时间随 n 的变化（双对数坐标，斜率 2 = 二次，1 = 线性）。右图：由 attnkit 报告的字节数得到的内存随 n 的变化，虚线为设定的预算。"),
            est_quick=5, summary=_long_summary),
        experiment_section(
            "misconceptions_heads", ("Misconception: more heads is always better", "误解：头越多越好"),
            ("At a fixed width, do more heads help, and does a trained model need all of its heads?", "固定宽度下，更多的头有帮助吗？训练好的模型需要它所有的头吗？"),
            ("Left: test accuracy versus head count at a fixed width (error bars over seeds). Right: how close the pruned model's "
             "sentence embeddings stay to the full model's (1 = unchanged) as heads are removed.",
             "左图：固定宽度下测试准确率随头数的变化（误差线为多个种子）。右图：逐步剪掉头后，句向量与完整模型的接近程度（1 = 不变）。"),
            est_quick=60, summary=_heads_summary),
    ]
    s += _plugins()
    s.append(StorySection("summary", ("Summary", "总结"), ("What did this run measure, in one table?", "本次运行测得了什么（一张表）？"),
                          ("One row per section: what was measured now, and what it means.", "每节一行：本次测得了什么，以及它的含义。"),
                          lambda ctx: {}, _summary_render(s), cache=False))
    return s


def _plugins() -> list[StorySection]:
    """Registered experiments with a report section that the story does not place itself."""
    from ..experiments import experiments

    out = []
    for e in experiments():
        if e.report_order is not None and e.name not in PLACED:
            out.append(experiment_section(e.name, (e.title(), e.title()), ("", ""), ("", ""), est_quick=60))
    return out


def _summary_render(secs: list[StorySection]):
    def render(data: dict, ctx: SectionContext, lang: str) -> str:
        rows, errors = [], []
        for sec in secs:
            d = ctx.data.get(sec.id)
            if sec.summary is None or d is None:
                continue
            try:
                line = sec.summary(d, ctx, lang)
            except Exception as e:  # collect them all, then fail the summary: a broken row must not pass unseen
                errors.append(f"{sec.id}: {type(e).__name__}: {e}")
                continue
            if line:
                rows.append([sec.heading(lang), *line])
        if errors:
            raise RuntimeError("summary rows failed: " + "; ".join(errors))
        html = table([tr(lang, "section", "章节"), tr(lang, "measured in this run", "本次测得"), tr(lang, "what it means", "含义")], rows)
        return html + "<p class='note'>" + tr(lang, "Columns: the section; its headline number from this run; the lesson it supports.",
                                              "列说明：章节；本次运行的主要数字；它支持的结论。") + "</p>"

    return render


def _m(x):
    return x["mean"] if isinstance(x, dict) else x


def _seq2seq_summary(res: dict, lang: str, full_results=None):
    from ..experiments.seq2seq_report import summary_row  # the committed --full runs' scores when there are any

    return summary_row(res, lang, full_results)


def _vision_summary(res: dict, lang: str, full_results=None):
    from ..experiments.vision_prose import summary_row  # the committed --full run's verdict when there is one

    return summary_row(res, lang, full_results)


def _minilm_summary(res: dict, lang: str):
    c = res["label_counts"]
    total = sum(c.values())
    return (tr(lang, f"{total} heads: " + ", ".join(f"{k} {v}" for k, v in c.items() if v),
               f"{total} 个头：" + "，".join(f"{k} {v}" for k, v in c.items() if v)),
            tr(lang, "heads specialise: position, content, sinks", "不同的头各有分工：位置、内容、汇点"))


def _forecast_summary(res: dict, lang: str, full_results=None):
    from ..experiments.forecast_prose import summary_row  # the committed --full runs' numbers when there are any

    return summary_row(res, lang, full_results)


def _qkv_summary(res: dict, lang: str):
    n, m = len(res["rows"]), len(res["kinds_along"])
    return (tr(lang, f"{n} attention layers, {res['n_self']} of them self-attention, {m} different dimensions",
               f"{n} 种注意力层，其中 {res['n_self']} 种是自注意力，作用于 {m} 个不同维度"),
            tr(lang, "ask: what are Q, K, V, and along which dimension?", "要问：Q、K、V 是什么？沿哪个维度？"))


def _explain_summary(res: dict, lang: str):
    ls = res["layers"]
    lo, hi = min(r["mean"] for r in ls), max(r["mean"] for r in ls)
    return (tr(lang, f"Spearman ρ per layer from {lo:+.2f} to {hi:+.2f}", f"各层 Spearman ρ 从 {lo:+.2f} 到 {hi:+.2f}"),
            tr(lang, "attention is not a measured importance", "注意力不等于测得的重要性"))


def _long_summary(res: dict, lang: str):
    return (tr(lang, f"dense scores fit a {res['budget_bytes'] / 2**30:.0f} GiB budget up to n = {res['dense_fits_up_to']:,}",
               f"{res['budget_bytes'] / 2**30:.0f} GiB 预算下稠密分数最多到 n = {res['dense_fits_up_to']:,}"),
            tr(lang, "long context needs windows, approximations or hardware", "长上下文需要窗口、近似或硬件"))


def _heads_summary(res: dict, lang: str):
    best = max(res["sweep"], key=lambda r: r["acc_mean"])
    pr = res["prune"]["rows"][-1]
    return (tr(lang, f"best head count {best['heads']}; {pr['pruned']} heads pruned → cos {pr['least_important']['mean_cos']:.3f}",
               f"最佳头数 {best['heads']}；剪掉 {pr['pruned']} 个头 → 余弦 {pr['least_important']['mean_cos']:.3f}"),
            tr(lang, "heads are a budget to split, many are redundant", "头数是要分配的预算，很多头是冗余的"))


__all__ = ["story"]
