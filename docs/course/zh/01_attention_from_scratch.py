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
# # 第 1 课 — 从零实现注意力（NumPy）
#
# **本课回答的问题：** 一个注意力层到底在计算什么？
#
# 注意力并不是 Transformer 独有的一种特殊层，它是一个思想——*动态加权*：为当前目标生成输出时，
# 先查看所有可用的信息，针对*这个目标*给每条信息打一个相关性分数，把分数变成和为 1 的权重，
# 再返回加权和。平均池化对每个目标都用同一组权重（静态加权）；注意力则为每个目标重新计算权重。
#
# 三个步骤，永远一样：
#
# 1. **打分** —— 用查询 `q`（目标在找什么）与每个键 `k`（每条信息能提供什么）比较：
#    `s_j = q · k_j / sqrt(d)`；
# 2. **归一化** —— `w = softmax(s)`，权重为正且和为 1；
# 3. **加权求和** —— 对值 `v`（每条信息贡献的内容）求 `out = Σ_j w_j v_j`。
#
# 面对任何注意力模型，都先问两个问题：*它的查询、键、值分别是什么*，以及 *softmax 沿哪个维度
# 归一化*（这里：沿键的维度，每个查询一行）。

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

# %% [markdown]
# ## 用 NumPy 写出三个步骤
#
# 形状：`q` (L, d) —— L 个查询；`k` (S, d) —— S 个键；`v` (S, dv) —— 每个键对应一个值。

# %%
def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    # 减去行最大值在数学上不改变结果（在比值中抵消），
    # 但能防止分数很大时 exp() 溢出
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def attention_np(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scores = q @ k.T / np.sqrt(q.shape[-1])  # 第 1 步：(L, S)，每个查询一行
    weights = softmax(scores, axis=-1)  # 第 2 步：每行和为 1 —— softmax 沿键归一化
    return weights @ v, weights  # 第 3 步：(L, dv)


L, S, d = (3, 5, 4) if SMALL else (4, 6, 8)
q = rng.standard_normal((L, d))
k = rng.standard_normal((S, d))
v = rng.standard_normal((S, d))
out, w = attention_np(q, k, v)
print("权重（行 = 查询，列 = 键）：\n", np.round(w, 3))
print("每行之和：", w.sum(axis=1))

# %% [markdown]
# ## 在 attnkit 中做同样的计算
#
# `attnkit.attention` 接收 `(B, H, L, E)` 形状的张量——前面多了批次轴和头轴——返回输出、
# （需要时）注意力权重，以及一份说明用了哪个后端的报告。

# %%
t = lambda a: torch.tensor(a, dtype=torch.float64)[None, None]  # (L, d) -> (1, 1, L, d)
res = attnkit.attention(t(q), t(k), t(v), return_weights=True)
print("max |attnkit - numpy| output:", float(np.abs(res.out[0, 0].numpy() - out).max()))
print("max |attnkit - numpy| weights:", float(np.abs(res.weights[0, 0].numpy() - w).max()))
print(res.report)
assert np.allclose(w.sum(axis=1), 1.0)
assert np.abs(res.out[0, 0].numpy() - out).max() < 1e-12 and np.abs(res.weights[0, 0].numpy() - w).max() < 1e-12

# %% [markdown]
# ## 静态加权与动态加权
#
# 平均池化让每个查询得到同样的输出；注意力让每个查询得到自己的混合结果。下图热力图的每一行是
# 一个查询对各个键的权重：各行不同，这正是“动态”的含义。

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
static = np.full_like(w, 1.0 / S)
for ax, mat, title in ((axes[0], static, "average pooling (static)"), (axes[1], w, "attention (dynamic)")):
    im = ax.imshow(mat, vmin=0, vmax=1, cmap="viridis")
    ax.set_title(title)
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    ax.set_xticks(range(S))
    ax.set_yticks(range(L))
fig.colorbar(im, ax=axes, label="weight w_ij")
fig.savefig(f"{OUT}/01_static_vs_dynamic.png", dpi=110)
plt.show()

# %% [markdown]
# ## 为什么要除以 sqrt(d)？
#
# 对方差为 1 的随机向量，`q · k` 的方差是 `d`。分数过大时 softmax 接近独热向量，梯度几乎消失。
# 除以 `sqrt(d)` 后，无论头维度多大，方差都保持在 1 附近。动手测一下：

# %%
dims = [4, 16, 64] if SMALL else [4, 16, 64, 256, 1024]
n = 500 if SMALL else 5000
for dd in dims:
    a, b = rng.standard_normal((n, dd)), rng.standard_normal((n, dd))
    raw = (a * b).sum(1)
    assert raw.var() > dd / 2 and abs((raw / np.sqrt(dd)).var() - 1) < 0.3
    print(f"d={dd:5d}  var(q·k)={raw.var():8.1f}  var(q·k/sqrt(d))={(raw / np.sqrt(dd)).var():.2f}")

# %% [markdown]
# 未缩放的方差随 `d` 增长；缩放后的方差保持在 1 附近。
#
# ## 练习
#
# 1. 加入填充掩码：`j >= n_valid` 的键权重必须恰好为 0。如果一个查询的所有键都被屏蔽，应该返回
#    什么？（attnkit 返回零，绝不返回 NaN。）用
#    `attnkit.attention(..., mask=attnkit.masks.padding_mask(...))` 核对你的答案。
# 2. 用温度 `τ`（`softmax(s / τ)`）让 softmax 更尖锐或更平坦。画出 τ 在 [0.1, 10] 时某一行权重的
#    熵。τ 取多少时等价于平均池化？
# 3. 把点积打分换成 Bahdanau 的加性打分 `wᵀ tanh(W_q q + W_k k)`（`W_q`、`W_k`、`w` 随机）。
#    三个步骤中哪一步变了？
#
# 答案：`solutions/01_attention_from_scratch.py`。
