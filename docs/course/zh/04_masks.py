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
# # 第 4 课 — 掩码：填充、因果、滑动窗口
#
# **本课回答的问题：** 一个查询*被允许*看哪些键？少了掩码会出什么问题？
#
# 掩码是一张 (L, S) 的布尔表；在 attnkit 中 `True` 表示*可以关注*。被屏蔽的分数在 softmax 之前置为
# `-inf`，权重因此恰好为 0（不要用 `-1e9` 这类大负数：整行被屏蔽时它会变成对填充位的均匀平均，而且 float16 根本装不下它）。
# 三种掩码覆盖了大多数模型：
#
# * **填充掩码** —— 一个批次里句子长短不一，末尾的填充词不是数据；
# * **因果掩码** —— 语言模型预测第 `i` 个词时不能看到 `i` 之后的词；
# * **滑动窗口** —— 每个查询只看最近的 `w` 个键（Longformer、Mistral）。

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
# ## 三种掩码的样子
#
# `mask.materialize(L, S)` 把掩码对象变成稠密的 (B, H, L, S) 表。掩码可以用 `&` 和 `|` 组合：
# 对填充过的批次跑因果模型，就用 `causal() & padding_mask(...)`。

# %%
N = 8 if SMALL else 12
masks = {
    "padding (5 valid keys)": attnkit.masks.padding_mask(torch.tensor([5]), max_len=N),
    "causal": attnkit.masks.causal(),
    "sliding window (left=3)": attnkit.masks.sliding_window(left=3),
    "causal & padding": attnkit.masks.causal() & attnkit.masks.padding_mask(torch.tensor([5]), max_len=N),
}
fig, axes = plt.subplots(1, len(masks), figsize=(3.3 * len(masks), 3.4), constrained_layout=True)
for ax, (name, m) in zip(axes, masks.items()):
    table = m.materialize(N, N, batch=1)[0, 0]
    im = ax.imshow(table.float().numpy(), vmin=0, vmax=1, cmap="Greys_r")
    ax.set_title(name, fontsize=10)
    ax.set_xlabel("key position j")
    ax.set_ylabel("query position i")
    print(f"{name:25s} allowed pairs: {int(table.sum())} of {N * N}")
fig.colorbar(im, ax=axes, ticks=[0, 1], label="1 = may attend, 0 = masked")
fig.savefig(f"{OUT}/04_masks.png", dpi=110)
plt.show()

# %% [markdown]
# ## 测量信息泄漏
#
# 掩码正确的判据：查询 `i` 不该看到的词发生变化时，它的输出不变。我们把因果自注意力跑两次：一次
# 用 `x`，一次只把 `x` 的*最后一个*词换掉。有因果掩码时，之前各位置的输出必须完全相同；没有掩码时
# 所有位置都会变——模型"看见了未来"，训练时它就会学着抄答案而不是预测答案。

# %%
D, H = 16, 4
mha = attnkit.MultiHeadAttention(D, H, dtype=torch.float64).eval()
x = torch.randn(1, N, D, dtype=torch.float64)
x2 = x.clone()
x2[:, -1] = torch.randn(D, dtype=torch.float64)  # 只改变"未来"（最后一个词）
for causal in (True, False):
    a, _ = mha(x, causal=causal)
    b, _ = mha(x2, causal=causal)
    leak = (a[:, :-1] - b[:, :-1]).abs().max().item()  # 位置 0..N-2 不应察觉到变化
    assert (leak < 1e-12) == causal
    print(f"causal={causal!s:5s}: max change at earlier positions = {leak:.2e}")

# %% [markdown]
# 对填充做同样的测试：改动填充位置上的值。有填充掩码时，真实词的输出纹丝不动；没有掩码时，填充
# 位置上的垃圾数据会改变真实结果。

# %%
n_valid = 5
pad = attnkit.masks.padding_mask(torch.tensor([n_valid]), max_len=N)
x3 = x.clone()
x3[:, n_valid:] = 100 * torch.randn(N - n_valid, D, dtype=torch.float64)
for mask in (pad, None):
    a, _ = mha(x, mask=mask)
    b, _ = mha(x3, mask=mask)
    assert ((a[:, :n_valid] - b[:, :n_valid]).abs().max() < 1e-12) == (mask is not None)
    print(f"padding mask {'on ' if mask is not None else 'off'}: max change of real tokens = {(a[:, :n_valid] - b[:, :n_valid]).abs().max().item():.2e}")

# %% [markdown]
# ## 无键可看的查询
#
# 掩码组合不当时，某一行可能一个可看的键都没有（例如：只向*前*看的窗口再叠加因果掩码）。全是
# `-inf` 的 softmax 等于 `0/0 = NaN`；attnkit 对这样的行返回零，并在报告中计数。

# %%
empty = attnkit.masks.causal() & attnkit.masks.sliding_window(left=0, right=2) & ~attnkit.masks.sliding_window(left=0, right=0)
q = torch.randn(1, 1, N, 8)
res = attnkit.attention(q, q, q, mask=empty)
assert res.report.fully_masked_rows == N and (res.out == 0).all()
print("fully masked rows:", res.report.fully_masked_rows, "| any NaN:", bool(res.out.isnan().any()))
s = (q @ q.transpose(-2, -1))[0, 0].masked_fill(~empty.materialize(N, N)[0, 0], float("-inf"))
assert torch.softmax(s, -1).isnan().all()
print("a plain softmax of those rows gives:", torch.softmax(s, -1)[0, :3].tolist())

# %% [markdown]
# ## 练习
#
# 1. 手工构造 *prefix-LM* 掩码（前 `p` 个词彼此双向可见，其余部分是因果的），与
#    `attnkit.masks.prefix_lm(p).materialize(N, N)` 比较。
# 2. 在 float16 下用 `-1e9` 代替 `-inf` 做填充掩码，测一测漏到填充位上的权重。整行都被屏蔽时会怎样？
# 3. 窗口大小为 `w`、序列长度为 `n` 时，允许的（查询，键）对一共有多少？对几组 `n`、`w` 用
#    `materialize` 验证你的公式。
#
# 解答：`solutions/04_masks.py`。
