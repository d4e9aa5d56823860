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
# # 第 2 课 — 打分函数与对齐
#
# **本课回答的问题：** "这个键和这个查询匹配"可以有几种算法？学出来的对齐又长什么样？
#
# 注意力的第 1 步（见第 1 课）是*打分*。归一化和加权求和两步从来不变，各种注意力变体的差别几乎都
# 落在打分上。给定长度为 `d` 的查询 `q` 和键 `k`，经典的打分方式有这些：
#
# | 名称 | 打分 | 出处 |
# |---|---|---|
# | 点积 | `q · k` | Luong 等，2015 |
# | 缩放点积 | `q · k / sqrt(d)` | Vaswani 等，2017 |
# | 一般式（general） | `qᵀ W k`，`W` (d, d) 可学习 | Luong 等，2015 |
# | 加性 | `vᵀ tanh(W_q q + W_k k)` | Bahdanau 等，2015 |
# | 余弦 | `τ · cos(q, k)` | Swin v2 |
#
# 为什么要除以 `sqrt(d)`：无界的打分（点积、一般式）会随 `d` 变大，对很大的数做 softmax 几乎是独热的，
# 梯度几乎为零——它就再也学不动了。attnkit 的 Luong 层在 Bible 句对上（宽度 138）正好遇到过：不缩放时，
# 训练 50 步之内权重就全部堆到一个源词元上，再也没挪开；除以 `sqrt(d)` 之后权重保持分散。
# 加性打分被 `tanh` 限住了范围，不需要这一步。
#
# 注意力诞生于机器翻译，比 Transformer 更早：循环编码器要把整句源语言压成一个定长向量，句子一长，
# 开头的信息就被挤掉了（定长向量瓶颈）。Bahdanau 的解码器则在每一步都回看编码器的全部状态，
# 把每个输出词和它需要的源词*对齐*。所以"注意力 = Transformer"是个误区——这是本课程纠正的第一个。

# %%
import os
import sys

import matplotlib

if "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # 作为脚本运行（或在测试中）：图写入文件，不弹窗口
import matplotlib.pyplot as plt
import numpy as np
import torch

import attnkit

SMALL = os.environ.get("ATTNKIT_COURSE_SMALL") == "1"  # 测试套件以小尺寸运行每一课
OUT = os.environ.get("ATTNKIT_COURSE_OUT", "course_out")
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(0)
torch.manual_seed(0)

# %% [markdown]
# ## 同一组查询和键，四种打分
#
# `attnkit.scores` 把每种打分写成一个小模块，把 q (B, H, L, E) 和 k (B, H, S, E) 映射为分数
# (B, H, L, S)。`attnkit.attention(..., score=...)` 接受其中任何一个。

# %%
E = 8
L, S = (3, 5) if SMALL else (4, 8)
q = torch.randn(1, 1, L, E, dtype=torch.float64)
k = torch.randn(1, 1, S, E, dtype=torch.float64)
v = torch.randn(1, 1, S, E, dtype=torch.float64)
scores = {
    "dot": attnkit.scores.DotScore(),
    "scaled_dot": attnkit.scores.ScaledDotScore(),
    "general": attnkit.scores.GeneralScore(E).double(),
    "additive": attnkit.scores.AdditiveScore(E).double(),
    "cosine": attnkit.scores.CosineScore(init_temperature=10.0).double(),
}
weights = {}
for name, sc in scores.items():
    raw = sc(q, k) * sc.default_scale(E)  # 分数乘以默认缩放，与 attnkit 内部做法一致
    by_hand = torch.softmax(raw, dim=-1)
    res = attnkit.attention(q, k, v, score=sc, return_weights=True)
    weights[name] = res.weights[0, 0].detach().numpy()
    diff = (res.weights[0, 0] - by_hand[0, 0]).abs().max().item()
    assert diff < 1e-12
    print(f"{name:11s} score range [{raw.min().item():6.2f}, {raw.max().item():6.2f}]  max |attnkit - by hand| = {diff:.1e}  backend={res.report.backend}")

# %% [markdown]
# 未缩放的点积分数范围最宽，softmax 因此最尖锐；余弦分数被限制在 `±τ` 之内。下面每种打分画一张
# 热力图：查询相同、键相同，权重却各不相同。

# %%
fig, axes = plt.subplots(1, len(weights), figsize=(3.2 * len(weights), 3.2), constrained_layout=True)
for ax, (name, w) in zip(axes, weights.items()):
    im = ax.imshow(w, vmin=0, vmax=1, cmap="viridis")
    ax.set_title(name)
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
fig.colorbar(im, ax=axes, label="weight w_ij")
fig.savefig(f"{OUT}/02_scores.png", dpi=110)
plt.show()

# %% [markdown]
# ## 一个迷你 Bahdanau 模型学会对齐
#
# 任务：把一串数字倒序输出。GRU 编码器读入源序列；解码的每一步，解码器隐状态作为查询，编码器
# 各位置的状态作为键和值，由加性打分决定看哪里。倒序任务的理想对齐是反对角线：第 `t` 个输出应
# 看源序列第 `S - 1 - t` 个位置。没人把这一点告诉模型，它得自己找出来。

# %%
V_SIZE, SRC_LEN, HID = 10, 6, 32


class TinyBahdanau(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V_SIZE + 1, HID)  # 编号 V_SIZE 是起始符
        self.enc = torch.nn.GRU(HID, HID, batch_first=True)
        self.dec = torch.nn.GRUCell(2 * HID, HID)
        self.score = attnkit.scores.AdditiveScore(HID)
        self.out = torch.nn.Linear(2 * HID, V_SIZE)

    def forward(self, src, tgt_in):
        keys, h = self.enc(self.emb(src))  # keys (B, S, HID)：每个源词一个状态
        h, ctx = h[0], torch.zeros_like(h[0])
        logits, align = [], []
        for t in range(tgt_in.shape[1]):
            h = self.dec(torch.cat([self.emb(tgt_in[:, t]), ctx], -1), h)
            res = attnkit.attention(h[:, None, None], keys[:, None], keys[:, None], score=self.score, return_weights=True)
            ctx = res.out[:, 0, 0]
            align.append(res.weights[:, 0, 0])  # (B, S)：第 t 步看了哪里
            logits.append(self.out(torch.cat([h, ctx], -1)))
        return torch.stack(logits, 1), torch.stack(align, 1)


def batch(n):
    src = torch.randint(0, V_SIZE, (n, SRC_LEN))
    tgt = src.flip(1)
    tgt_in = torch.cat([torch.full((n, 1), V_SIZE), tgt[:, :-1]], 1)  # 教师强制：右移一位
    return src, tgt_in, tgt


model = TinyBahdanau()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
steps = 40 if SMALL else 400
for step in range(steps):
    src, tgt_in, tgt = batch(64)
    logits, _ = model(src, tgt_in)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V_SIZE), tgt.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % max(1, steps // 4) == 0 or step == steps - 1:
        acc = (logits.argmax(-1) == tgt).float().mean().item()
        print(f"step {step:4d}  loss {loss.item():.3f}  token accuracy {acc:.2f}")

# %% [markdown]
# 热力图给出一条测试序列在每个输出步上对源位置的权重。（默认尺寸）训练后，权重集中在反对角线上。
# 测试套件用的小尺寸训练步数太少，学不出来——请用默认尺寸运行本课来观察。

# %%
model.eval()
assert acc > 2 / V_SIZE
with torch.no_grad():
    src, tgt_in, tgt = batch(200)
    logits, align = model(src, tgt_in)
on_diag = align[:, torch.arange(SRC_LEN), torch.arange(SRC_LEN).flip(0)].mean().item()
assert on_diag > 1 / SRC_LEN
print(f"mean weight on the anti-diagonal: {on_diag:.2f} (uniform would be {1 / SRC_LEN:.2f})")
fig, ax = plt.subplots(figsize=(4.5, 4), constrained_layout=True)
im = ax.imshow(align[0].numpy(), vmin=0, vmax=1, cmap="viridis")
ax.set_xticks(range(SRC_LEN), [str(int(t)) for t in src[0]])
ax.set_yticks(range(SRC_LEN), [str(int(t)) for t in tgt[0]])
ax.set_xlabel("source token (position 0..S-1)")
ax.set_ylabel("output token (step 0..S-1)")
ax.set_title("Bahdanau alignment, reversal task")
fig.colorbar(im, ax=ax, label="attention weight")
fig.savefig(f"{OUT}/02_alignment.png", dpi=110)
plt.show()

# %% [markdown]
# 对齐图展示的是模型*看了哪里*，而不是它*为什么这样回答*的证据。注意力权重不等于解释：还有别的
# 通路（这里就是循环状态本身）也在传递信息。第 11 课会再谈这一点。
#
# ## 练习
#
# 1. 证明 `W = I` 的 `GeneralScore` 就是点积打分，而 `CosineScore` 等于对 L2 归一化后的 q、k 做
#    缩放点积再乘以 `τ · sqrt(E)`。用数值验证这两点。
# 2. 把 `TinyBahdanau` 中的加性打分换成 `ScaledDotScore()` 重新训练。它还能找到反对角线吗？比较
#    最终准确率。
# 3. 加性打分会构造一个 (B, H, L, S, A) 的隐藏张量。当 L = S = 1024、E = A = 64、float32 时，每个头
#    要占多少字节？和点积打分的 (L, S) 分数矩阵相比呢？
#
# 解答：`solutions/02_scores_and_alignment.py`。
