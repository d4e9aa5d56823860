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
# # 第 8 课 — 相对位置：ALiBi、T5 分桶、旋转位置编码
#
# **本课回答的问题：** 注意力怎样才能知道两个词*相距多远*，而不仅仅是各自在哪个位置？
#
# 第 5 课给每个词加上了绝对位置向量。许多模型换了个做法：直接修改分数，使它依赖查询 `i` 与键 `j`
# 之间的偏移 `i - j`：
#
# * **ALiBi**（Press 等，2022）加一个固定的惩罚 `-m_h · |i - j|`，每个头一个斜率，
#   `m_h = 2^(-8h/H)`（`h = 1..H`）：近处的键占优，每个头的"视距"各不相同；
# * **T5 分桶**（Raffel 等，2020）给每个头、每个 `i - j` 的桶加一个*可学习*的标量：偏移小时一个偏移
#   一个桶，偏移大时桶按对数变宽，直到 `max_distance`；
# * **旋转位置编码**（RoPE，Su 等，2021）什么也不加：它把 `q` 和 `k` 的每一对坐标旋转一个与位置成
#   正比的角度，使 `q_m · k_n` 只依赖 `m - n`。

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
# ## ALiBi：随距离增长的惩罚

# %%
H, N = 4, (12 if SMALL else 24)
alibi = attnkit.biases.ALiBi(H)
bias = alibi.materialize(N, N)[0]  # (H, N, N)
slopes = 2.0 ** (-8.0 * np.arange(1, H + 1) / H)
i, j = np.arange(N)[:, None], np.arange(N)[None, :]
by_hand = -slopes[:, None, None] * np.abs(i - j)
assert np.abs(by_hand - bias.numpy()).max() < 1e-6
print("slopes:", np.round(slopes, 4), "| max |by hand - attnkit| =", np.abs(by_hand - bias.numpy()).max())

q = torch.randn(1, H, N, 8, dtype=torch.float64)
k = torch.randn(1, H, N, 8, dtype=torch.float64)
v = torch.randn(1, H, N, 8, dtype=torch.float64)
manual = torch.softmax(q @ k.transpose(-2, -1) / 8**0.5 + bias.double(), -1) @ v
assert (attnkit.attention(q, k, v, bias=alibi).out - manual).abs().max() < 1e-12
print("attention(bias=ALiBi) vs adding the bias by hand:", (attnkit.attention(q, k, v, bias=alibi).out - manual).abs().max().item())

# %% [markdown]
# ## T5：对数分桶上的可学习标量
#
# `t5_bucket` 把偏移映射到桶编号。32 个桶、`max_distance = 128` 时，每个方向上偏移 0–7 各占一个桶，
# 更大的偏移共用按对数间隔划分的桶。偏置值是参数，随模型一起学习；这里是它们的初始值。

# %%
offsets = torch.arange(-64, 65)
buckets = attnkit.biases.t5_bucket(offsets, bidirectional=True, num_buckets=32, max_distance=128)
print("offset -> bucket:", {int(o): int(b) for o, b in zip(offsets[::8], buckets[::8])})
t5 = attnkit.biases.T5RelativeBias(H, num_buckets=32, max_distance=128)
t5_bias = t5.materialize(N, N)[0].detach()

fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), constrained_layout=True)
axes[0].plot(offsets.numpy(), buckets.numpy(), drawstyle="steps-mid")
axes[0].set_xlabel("relative position j - i (key - query, tokens)")
axes[0].set_ylabel("bucket index")
axes[0].set_title("T5 buckets (32, max_distance 128)")
for ax, mat, title in ((axes[1], bias[0].numpy(), "ALiBi bias, head 1"), (axes[2], t5_bias[0].numpy(), "T5 bias, head 1 (init)")):
    im = ax.imshow(mat, cmap="magma")
    ax.set_title(title)
    ax.set_xlabel("key position j")
    ax.set_ylabel("query position i")
    fig.colorbar(im, ax=ax, label="added to the score")
fig.savefig(f"{OUT}/08_biases.png", dpi=110)
plt.show()

# %% [markdown]
# ## 旋转位置编码：验证它的相对性
#
# 把 `q` 按位置 `m` 旋转、`k` 按位置 `n` 旋转。两者位置*同时*平移 `t` 时，点积不应改变。再和第 5 课的
# 绝对位置编码比较——后者会变。

# %%
E = 16
rope = attnkit.RotaryEmbedding(E, max_positions=4096)
qv = torch.randn(1, 1, 1, E, dtype=torch.float64)
kv = torch.randn(1, 1, 1, E, dtype=torch.float64)
at = lambda x, p: rope(x, torch.tensor([p]))
m, n = 5, 2
base = (at(qv, m) * at(kv, n)).sum().item()
for t in (0, 10, 100, 1000):
    assert abs((at(qv, m + t) * at(kv, n + t)).sum().item() - base) < 1e-9
    print(f"shift t={t:5d}: q_(m+t) . k_(n+t) = {(at(qv, m + t) * at(kv, n + t)).sum().item():+.10f}  (t=0 gives {base:+.10f})")

from attnkit.modules.positional import SinusoidalPositionalEncoding

pe = SinusoidalPositionalEncoding(E, max_len=4096, dtype=torch.float64)
for t in (0, 10, 100):
    s = ((qv[0, 0, 0] + pe(torch.tensor([m + t]))[0]) @ (kv[0, 0, 0] + pe(torch.tensor([n + t]))[0])).item()
    print(f"absolute PE, shift t={t:4d}: score {s:+.6f}")

# %% [markdown]
# 旋转编码不改变向量的模长，也不需要额外参数，所以近年的大多数解码器都用它。在某个长度上训练的
# 模型能否推广到更长的序列，则是另一个需要实验回答的问题（ALiBi 正是为此提出的）。
#
# ## 练习
#
# 1. 对一个向量手写旋转编码：把坐标两两配对 `(x_{2i}, x_{2i+1})`，第 `i` 对旋转角度
#    `p · 10000^(-2i/E)`。与 `attnkit.RotaryEmbedding(E, interleaved=True)` 比较。
# 2. 对每个头画出最后一个查询的 ALiBi 权重（只有偏置、查询-键分数为 0 时的 softmax）。每个头实际能
#    "看到"多少个键（权重高于 1%）？
# 3. 用 `bidirectional=False`（解码器）调用 `t5_bucket`：*未来*的键落在哪个桶？为什么在因果模型里这
#    无关紧要？
#
# 解答：`solutions/08_relative_position.py`。
