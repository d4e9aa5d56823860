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
# # 第 5 课 — Transformer 块
#
# **本课回答的问题：** Transformer 层在注意力外面又加了什么？每一部分为什么要有？
#
# 一个编码器层是注意力再加上三个配套部件：
#
# * 每个子层外面套一个**残差连接** `x + f(x)`，让信号和梯度在很深的堆叠中有一条直通路径；
# * **层归一化** —— 把每个词的向量调成均值 0、方差 1（再乘可学习的缩放、加可学习的平移）。
#   *Post-LN*（2017 年原论文）在残差相加之后归一化：`x = LN(x + f(x))`；*Pre-LN*（GPT-2 及之后的
#   大多数模型）对子层的输入归一化：`x = x + f(LN(x))`；
# * 逐位置的**前馈网络** `W_2 relu(W_1 x + b_1) + b_2`，中间层通常宽 4 倍。
#
# 层外还有一样东西：**位置编码**。注意力对置换是等变的——把词的顺序打乱，输出也按同样方式打乱——
# 所以词序必须另外注入，例如加上正弦编码 `PE(p, 2i) = sin(p / 10000^(2i/D))`、
# `PE(p, 2i+1) = cos(p / 10000^(2i/D))`。

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

from attnkit.modules.positional import SinusoidalPositionalEncoding

# %% [markdown]
# ## 单靠注意力不分先后
#
# 把词的顺序打乱：自注意力的输出只是同样的几行换了顺序。先加上位置编码，这种对称性就消失了。

# %%
B, L, D, H = (2, 6, 16, 4) if SMALL else (4, 32, 64, 8)
mha = attnkit.MultiHeadAttention(D, H, dtype=torch.float64).eval()
x = torch.randn(B, L, D, dtype=torch.float64)
perm = torch.randperm(L)
out, _ = mha(x)
out_perm, _ = mha(x[:, perm])
assert (out[:, perm] - out_perm).abs().max() < 1e-12
print("no positions : max |f(x)[perm] - f(x[perm])| =", (out[:, perm] - out_perm).abs().max().item())
pe = SinusoidalPositionalEncoding(D, max_len=512, dtype=torch.float64)(torch.arange(L))  # (L, D)
out, _ = mha(x + pe)
out_perm, _ = mha(x[:, perm] + pe)
assert (out[:, perm] - out_perm).abs().max() > 1e-3
print("with PE      : max |f(x)[perm] - f(x[perm])| =", (out[:, perm] - out_perm).abs().max().item())

# %% [markdown]
# 正弦编码表：手算一份，再和 attnkit 的对比。每一对列是同一波长的正弦和余弦，波长从左边的 2π 一直
# 到右边的 10000·2π。

# %%
P = 64 if SMALL else 128
pos = np.arange(P)[:, None]
inv_freq = 1.0 / 10000 ** (np.arange(0, D, 2) / D)
table = np.zeros((P, D))
table[:, 0::2], table[:, 1::2] = np.sin(pos * inv_freq), np.cos(pos * inv_freq)
ours = SinusoidalPositionalEncoding(D, max_len=P, dtype=torch.float64)(torch.arange(P)).numpy()
assert np.abs(table - ours).max() < 1e-12
print("max |numpy table - attnkit table| =", np.abs(table - ours).max())
fig, ax = plt.subplots(figsize=(6, 4), constrained_layout=True)
im = ax.imshow(table, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1)
ax.set_xlabel("encoding dimension")
ax.set_ylabel("position p")
ax.set_title("sinusoidal positional encoding")
fig.colorbar(im, ax=ax, label="PE(p, dim)")
fig.savefig(f"{OUT}/05_positional_encoding.png", dpi=110)
plt.show()

# %% [markdown]
# ## 手写 Post-LN 和 Pre-LN 层，与 PyTorch 对照
#
# 把 `torch.nn.TransformerEncoderLayer` 的权重复制到 attnkit 的注意力里（前馈网络和归一化层直接
# 复用），再按公式把整层重搭一遍。

# %%
def layer_by_hand(ref, x):
    attn = attnkit.MultiHeadAttention.from_torch(ref.self_attn)
    sa = lambda t: attn(t)[0]
    ff = lambda t: ref.linear2(torch.relu(ref.linear1(t)))
    if ref.norm_first:  # Pre-LN：x + f(LN(x))
        x = x + sa(ref.norm1(x))
        return x + ff(ref.norm2(x))
    x = ref.norm1(x + sa(x))  # Post-LN：LN(x + f(x))
    return ref.norm2(x + ff(x))


for norm_first in (False, True):
    ref = torch.nn.TransformerEncoderLayer(D, H, dim_feedforward=4 * D, dropout=0.0, batch_first=True, norm_first=norm_first)
    ref = ref.double().eval()
    with torch.no_grad():
        diff = (layer_by_hand(ref, x) - ref(x)).abs().max().item()
    assert diff < 1e-12
    print(f"norm_first={norm_first!s:5s}: max |by hand - torch| = {diff:.1e}")

# %% [markdown]
# ## 归一化放在哪里
#
# Xiong 等 2020 年（https://arxiv.org/abs/2002.04745）分析了初始化时梯度的分布，认为 Post-LN 会把
# 较大的梯度压在最后几层上，这是它需要学习率预热的原因之一，而 Pre-LN 没有这个问题。论文的结论别
# 直接照单全收：下面在初始化状态下测一测每层前馈权重的梯度范数，看打印结果说话。（在这个玩具设置
# 里——宽度很小、输入随机、损失是随机线性函数、末尾没有 LayerNorm——曲线未必和论文一致；想想为什么。）

# %%
depth = 6 if SMALL else 24


def layer_grads(norm_first):
    torch.manual_seed(0)
    layers = [torch.nn.TransformerEncoderLayer(D, H, 4 * D, dropout=0.0, batch_first=True, norm_first=norm_first) for _ in range(depth)]
    t = x.float()
    for layer in layers:
        t = layer(t)
    (t * torch.randn_like(t)).sum().backward()  # 随机投影：LayerNorm 之后直接 sum() 是常数
    return [layer.linear2.weight.grad.norm().item() for layer in layers]


fig, ax = plt.subplots(figsize=(5.5, 3.5), constrained_layout=True)
for norm_first, name in ((False, "post-LN"), (True, "pre-LN")):
    g = layer_grads(norm_first)
    print(f"{name}: gradient norm, first layer {g[0]:.3f}, last layer {g[-1]:.3f}")
    ax.plot(range(1, depth + 1), g, marker="o", label=name)
ax.set_xlabel("layer (1 = nearest the input)")
ax.set_ylabel("||dLoss/dW_2|| at initialisation")
ax.set_title(f"{depth}-layer encoder, D={D}")
ax.legend()
fig.savefig(f"{OUT}/05_layer_gradients.png", dpi=110)
plt.show()

# %% [markdown]
# ## 练习
#
# 1. 用数值说明 `PE(p + k)` 是 `PE(p)` 的线性函数：固定 `k`，在所有 `p` 上用最小二乘拟合一个
#    (D, D) 矩阵 `M`，使 `PE(p + k) = PE(p) M`。残差是否接近 0？
# 2. 手工重建 `torch.nn.TransformerDecoderLayer`（先因果自注意力，再对 memory 的交叉注意力，最后
#    前馈网络），在 `norm_first=False` 下验证。
# 3. 数一数宽度为 `D`、`dim_feedforward = 4D` 的编码器层有多少参数。注意力占多少，前馈网络占多少？
#
# 解答：`solutions/05_transformer_block.py`。
