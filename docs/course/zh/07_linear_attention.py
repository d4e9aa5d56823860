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
# # 第 7 课 — 线性注意力：核技巧
#
# **本课回答的问题：** 注意力能不能只花 O(n) 而不是 O(n²)？代价是什么？
#
# softmax 注意力用核函数 `κ(q, k) = exp(q · k / sqrt(E))` 给每个值加权：
# `o_i = Σ_j κ(q_i, k_j) v_j / Σ_j κ(q_i, k_j)`。如果这个核能写成特征映射的点积
# `κ(q, k) ≈ φ(q) · φ(k)`，就可以利用矩阵乘法的结合律把求和重新分组：
#
# ```
# o_i = φ(q_i)ᵀ (Σ_j φ(k_j) v_jᵀ) / φ(q_i)ᵀ (Σ_j φ(k_j))
# ```
#
# 括号里的 `U = Φ_Kᵀ V` 是一个 (F, Ev) 矩阵，所有查询共用、只算一次，于是代价从 `O(L · S · E)`
# 降到 `O((L + S) · F · Ev)`。两种常见特征映射：
#
# * `elu(x) + 1`（Katharopoulos 等，2020）——便宜且为正，但它是*另一个*核，并不逼近 softmax；
# * FAVOR+ 正随机特征（Choromanski 等，2021），`φ(x) = exp(Wx - |x|²/2) / sqrt(F)`，`W` 的行是正交
#   高斯向量——它是 `exp(q · k)` 的无偏估计，特征数 `F` 越大误差越小。
#
# 两者都不精确。这正是"注意力本身解决不了长序列"的另一半：便宜的版本其实是另一个模型，够不够用
# 要靠测量来回答。

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
# ## 手工重新分组乘积

# %%
L = S = 128 if SMALL else 1024
E = 32
q = torch.randn(1, 1, L, E, dtype=torch.float64) * 0.5
k = torch.randn(1, 1, S, E, dtype=torch.float64) * 0.5
v = torch.randn(1, 1, S, E, dtype=torch.float64)
phi = lambda x: torch.nn.functional.elu(x) + 1
# 二次方做法：构造 (L, S) 核矩阵
A = phi(q) @ phi(k).transpose(-2, -1)
quad = (A @ v) / A.sum(-1, keepdim=True)
# 线性做法：先把键汇总成 (F, Ev)，从不构造 (L, S) 矩阵
U = phi(k).transpose(-2, -1) @ v
z = phi(k).sum(-2, keepdim=True)
lin = (phi(q) @ U) / (phi(q) * z).sum(-1, keepdim=True)
assert (lin - quad).abs().max() < 1e-12
assert (lin - attnkit.linear_attention(q, k, v, feature_map="elu").out).abs().max() < 1e-12
print("max |linear order - quadratic order| =", (lin - quad).abs().max().item())
print("max |by hand - attnkit.linear_attention(elu).out| =", (lin - attnkit.linear_attention(q, k, v, feature_map="elu").out).abs().max().item())

# %% [markdown]
# ## 代价：乘加次数随 n 的增长
#
# 这里数乘加次数（而不是计时：次数是精确的，与机器无关）。softmax 注意力约需 `2 · n² · E` 次；
# 线性注意力约需 `2 · n · F · E`，再加上特征映射的开销。

# %%
ns = np.array([256, 1024, 4096, 16384, 65536])
F_feat = 256
fig, ax = plt.subplots(figsize=(5.5, 3.6), constrained_layout=True)
ax.loglog(ns, 2 * ns**2 * E, marker="o", label="softmax: 2 n^2 E")
ax.loglog(ns, 2 * ns * F_feat * E + ns * F_feat * E, marker="s", label=f"linear (FAVOR+, F={F_feat})")
ax.set_xlabel("sequence length n (tokens)")
ax.set_ylabel("multiply-adds per head")
ax.set_title(f"attention cost, head size E={E}")
ax.legend()
fig.savefig(f"{OUT}/07_cost.png", dpi=110)
plt.show()
print("crossover near n =", int(1.5 * F_feat), "for these constants")

# %% [markdown]
# ## 代价：与 softmax 相比的近似误差
#
# 测量相对误差 `|o_lin - o_softmax| / |o_softmax|`：`elu` 一次，FAVOR+ 则随随机特征数增加，取几个
# 随机种子的平均。

# %%
exact = attnkit.attention(q, k, v).out
rel = lambda o: ((o - exact).norm() / exact.norm()).item()
assert rel(attnkit.linear_attention(q, k, v, feature_map="elu").out) > 1e-3
print(f"elu + 1           : relative error {rel(attnkit.linear_attention(q, k, v, feature_map='elu').out):.3f}")
features = [16, 64, 256] if SMALL else [16, 64, 256, 1024, 4096]
seeds = range(2 if SMALL else 5)
errors = []
for n_feat in features:
    e = np.mean([rel(attnkit.linear_attention(q, k, v, feature_map="favor", num_features=n_feat, seed=s).out) for s in seeds])
    errors.append(e)
    assert n_feat == features[0] or e < errors[0]
    print(f"FAVOR+ F={n_feat:5d}  : relative error {e:.3f}")
fig, ax = plt.subplots(figsize=(5.5, 3.6), constrained_layout=True)
ax.loglog(features, errors, marker="o", label="FAVOR+ (mean over seeds)")
ax.axhline(rel(attnkit.linear_attention(q, k, v, feature_map="elu").out), color="tab:red", ls="--", label="elu + 1")
ax.set_xlabel("number of random features F")
ax.set_ylabel("relative error vs softmax attention")
ax.set_title(f"linear attention error, n={L}, E={E}")
ax.legend()
fig.savefig(f"{OUT}/07_error.png", dpi=110)
plt.show()

# %% [markdown]
# FAVOR+ 的误差随 `F` 增大而下降（这是蒙特卡洛估计：`F` 足够大时噪声按 `1 / sqrt(F)` 缩小，之前下降得更慢）；`elu + 1` 则根本不会收敛到 softmax——它要
# 作为一个独立的模型来训练。注意力越尖锐（`|q|`、`|k|` 越大），两者都越差：练习 1 里试一试。
#
# ## 练习
#
# 1. 把 `q` 和 `k` 乘以 2（softmax 更尖锐），在 F = 256 时再测一次 FAVOR+ 误差。为什么误差变大了？
# 2. 把因果线性注意力写成 RNN：滚动状态 `U_i = U_{i-1} + φ(k_i) v_iᵀ`、`z_i = z_{i-1} + φ(k_i)`。
#    与 `attnkit.linear_attention(..., mask=attnkit.masks.causal()).out` 对照。
# 3. 按上面的计数，`F = 256` 的线性注意力从多大的 `n` 开始比 softmax 注意力需要更少的乘加？
#
# 解答：`solutions/07_linear_attention.py`。
