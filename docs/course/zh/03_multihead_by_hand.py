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
# # 第 3 课 — 手写多头注意力
#
# **本课回答的问题：** 多头注意力层内部究竟发生了什么？它的查询、键、值从哪里来？
#
# 多头层并排运行若干个小注意力，每个头在自己的子空间里计算，最后把各头输出拼起来。设模型宽度为
# `D`、头数为 `H`、每头维度 `E = D / H`，共四步：
#
# 1. **投影** —— `Q = X W_q`、`K = Y W_k`、`V = Y W_v`（三个可学习的 (D, D) 矩阵）；
# 2. **拆头** —— 把 (B, L, D) 变形为 (B, L, H, E)，再转置为 (B, H, L, E)；
# 3. **注意** —— 每个头各自做缩放点积注意力；
# 4. **合并** —— (B, H, L, E) 变回 (B, L, D)，再乘一个输出投影 `W_o`。
#
# **自注意力**里 `X = Y`：序列向自己提问。**交叉注意力**里查询来自一个序列（解码器），键和值来自
# 另一个序列（编码器）。自注意力是注意力的一种重要形式，但不是唯一的形式。

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
# ## 把四步逐一写出来
#
# 以 `torch.nn.MultiheadAttention` 为参照（用它的权重），只用基本张量运算手工重算一遍。

# %%
B, L, S, D, H = (2, 5, 7, 16, 4) if SMALL else (4, 12, 20, 64, 8)
E = D // H
ref = torch.nn.MultiheadAttention(D, H, batch_first=True).double().eval()
x = torch.randn(B, L, D, dtype=torch.float64)  # 解码端序列：提供查询
y = torch.randn(B, S, D, dtype=torch.float64)  # 编码端序列：提供键和值

W_q, W_k, W_v = ref.in_proj_weight.split(D)  # torch 把三个投影矩阵叠在一起存放
b_q, b_k, b_v = ref.in_proj_bias.split(D)


def mha_by_hand(x, y):
    q = x @ W_q.T + b_q  # 1. 投影
    k = y @ W_k.T + b_k
    v = y @ W_v.T + b_v
    split = lambda t: t.view(t.shape[0], t.shape[1], H, E).transpose(1, 2)  # 2. (B, n, D) -> (B, H, n, E)
    q, k, v = split(q), split(k), split(v)
    w = torch.softmax(q @ k.transpose(-2, -1) / E**0.5, dim=-1)  # 3. 每个头一张 (n, m) 权重矩阵
    o = (w @ v).transpose(1, 2).reshape(x.shape[0], x.shape[1], D)  # 4. 把各头合并回 D 维
    return o @ ref.out_proj.weight.T + ref.out_proj.bias, w


mine, w_heads = mha_by_hand(x, y)
theirs, _ = ref(x, y, y)
print("cross-attention  max |by hand - torch| =", (mine - theirs).abs().max().item())
mine_self, _ = mha_by_hand(x, x)
assert (mine - theirs).abs().max() < 1e-12 and (mine_self - ref(x, x, x)[0]).abs().max() < 1e-12
print("self-attention   max |by hand - torch| =", (mine_self - ref(x, x, x)[0]).abs().max().item())

# %% [markdown]
# ## 同一组权重放进 attnkit
#
# `attnkit.MultiHeadAttention.from_torch` 复制四个投影矩阵；它的 `project`、`merge` 和 `attend`
# 方法恰好对应第 1–2 步、第 4 步和第 3 步。

# %%
ours = attnkit.MultiHeadAttention.from_torch(ref)
out_ak, w_ak = ours(x, y, y, need_weights=True, average_attn_weights=False)
assert (out_ak - theirs).abs().max() < 1e-12 and (out_ak - mine).abs().max() < 1e-12 and (w_ak - w_heads).abs().max() < 1e-12
print("attnkit vs torch     :", (out_ak - theirs).abs().max().item())
print("attnkit vs by hand   :", (out_ak - mine).abs().max().item(), "| weights:", (w_ak - w_heads).abs().max().item())
q, k, v = ours.project(x, y, y)
print("project() shapes     :", tuple(q.shape), tuple(k.shape), tuple(v.shape))

fig, axes = plt.subplots(1, H, figsize=(2.6 * H, 2.8), constrained_layout=True)
for h, ax in enumerate(axes):
    im = ax.imshow(w_ak[0, h].detach().numpy(), vmin=0, vmax=1, cmap="viridis")
    ax.set_title(f"head {h}")
    ax.set_xlabel("key (encoder pos)")
    ax.set_ylabel("query (decoder pos)")
fig.colorbar(im, ax=axes, label="weight")
fig.savefig(f"{OUT}/03_heads.png", dpi=110)
plt.show()

# %% [markdown]
# 每个头有自己的权重矩阵。头数并非越多越好：`D` 固定时，多一个头，每头的 `E` 就更小；训练好的模型
# 里也常有冗余、可以剪掉的头。头数是要做实验来选的超参数，而不是越大越好。
#
# ## 共享键和值：GQA 与 MQA
#
# 解码时每个历史词的键和值都要留在内存里（第 9 课）。分组查询注意力（GQA）让一组查询头共用一个
# 键/值头；多查询注意力（MQA）是极端情形，只有一个键/值头。查询仍保留全部 `H` 个头。

# %%
for kv_heads in (H, H // 2, 1):
    m = attnkit.MultiHeadAttention(D, H, kv_heads=kv_heads, dtype=torch.float64)
    q, k, v = m.project(x, y, y)
    # 手工做法：把每个键/值头复制给它所在组的查询头
    rep = H // kv_heads
    k_full, v_full = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    o = torch.softmax(q @ k_full.transpose(-2, -1) / E**0.5, -1) @ v_full
    diff = (m.merge(o) - m(x, y, y)[0]).abs().max().item()
    assert diff < 1e-12 and k.shape[1] == kv_heads
    n_kv = sum(p.numel() for p in (*m.k_proj.parameters(), *m.v_proj.parameters()))
    print(f"kv_heads={kv_heads}: k shape {tuple(k.shape)}, K/V parameters {n_kv}, max |by hand - attnkit| = {diff:.1e}")

# %% [markdown]
# ## 练习
#
# 1. 用一个 `torch.einsum` 算分数、再用一个算加权和，重写 `mha_by_hand`，并再次与 `ref` 对照。
# 2. 在自注意力情形下手工加入因果掩码（对角线以上填 `-inf`），与 `ours(x, x, x, causal=True)` 比较。
# 3. 当 `D = 4096`、`H = 32`、上下文 8192 个词、float16 时，每条序列每层分别要保存多少字节的键和值：
#    MHA、GQA（8 个键/值头）和 MQA？
#
# 解答：`solutions/03_multihead_by_hand.py`。
