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
# # 第 6 课 — Flash 式注意力：在线 softmax
#
# **本课回答的问题：** 能不能在从不保存完整 (L, S) 分数矩阵的前提下，精确地算出注意力？
#
# 稠密注意力要构造 `L × S` 个分数。L = S = 32 768、float32 时，*每个头*就是 4 GiB——限制长上下文的是
# 内存墙，而不是算力。FlashAttention（Dao 等，2022，https://arxiv.org/abs/2205.14135）把键分块遍历，
# 每个查询只维护三个滚动量：目前见过的最大分数 `m`、softmax 的分母 `ℓ`、未归一化的输出 `o`。
# 新的一块分数 `s` 到来时：
#
# ```
# m_new = max(m, max_j s_j)
# ℓ_new = ℓ · exp(m - m_new) + Σ_j exp(s_j - m_new)
# o_new = o · exp(m - m_new) + Σ_j exp(s_j - m_new) v_j
# ```
#
# 最后 `out = o / ℓ`。因子 `exp(m - m_new)` 把按旧最大值累加的部分换算到新最大值上；整个过程没有
# 任何近似。也要看清它*没做*什么：计算量仍是 `L × S`——分块省的是内存，不是算术。注意力本身并不能
# 让长序列变便宜（第 7 课会用精确性去换速度）。

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
# ## 用 NumPy 写在线 softmax

# %%
def dense(q, k, v):
    s = q @ k.T / np.sqrt(q.shape[1])
    w = np.exp(s - s.max(1, keepdims=True))
    return (w / w.sum(1, keepdims=True)) @ v


def online(q, k, v, block):
    L, S = q.shape[0], k.shape[0]
    m = np.full((L, 1), -np.inf)  # 每个查询的滚动最大值
    ell = np.zeros((L, 1))  # 滚动分母
    o = np.zeros((L, v.shape[1]))  # 滚动的未归一化输出
    peak = 0
    for j0 in range(0, S, block):
        s = q @ k[j0 : j0 + block].T / np.sqrt(q.shape[1])  # 只存在一个 (L, block) 的小块
        peak = max(peak, s.nbytes)
        m_new = np.maximum(m, s.max(1, keepdims=True))
        alpha = np.exp(m - m_new)  # 把旧的累加和换算到新的最大值上
        p = np.exp(s - m_new)
        ell = ell * alpha + p.sum(1, keepdims=True)
        o = o * alpha + p @ v[j0 : j0 + block]
        m = m_new
    return o / ell, peak


L, S, E = (64, 256, 16) if SMALL else (256, 4096, 64)
q, k, v = rng.standard_normal((L, E)), rng.standard_normal((S, E)), rng.standard_normal((S, E))
ref = dense(q, k, v)
for block in (16, 64, 256):
    out, peak = online(q, k, v, block)
    assert np.abs(out - ref).max() < 1e-12 and peak == L * min(block, S) * 8
    print(f"block={block:4d}: max |online - dense| = {np.abs(out - ref).max():.1e}, "
          f"largest score tile {peak / 1024:.0f} KiB vs full matrix {L * S * 8 / 1024:.0f} KiB")

# %% [markdown]
# ## 内存：整张矩阵与一个小块
#
# 稠密分数矩阵按 `L · S` 增长；分块计算的一个小块是 `block_q × block_kv`，与长度无关。下面是 float32、
# 单个头的情形：

# %%
lengths = np.array([1024, 4096, 16384, 65536])
fig, ax = plt.subplots(figsize=(5.5, 3.6), constrained_layout=True)
ax.loglog(lengths, lengths**2 * 4 / 2**20, marker="o", label="dense (L, S) scores")
ax.loglog(lengths, np.full(len(lengths), 128 * 128 * 4 / 2**20), marker="s", label="one 128 x 128 tile")
ax.set_xlabel("sequence length L = S (tokens)")
ax.set_ylabel("memory per head (MiB, float32)")
ax.set_title("score memory: dense vs blockwise")
ax.legend()
fig.savefig(f"{OUT}/06_memory.png", dpi=110)
plt.show()

# %% [markdown]
# ## attnkit 的分块后端及其报告
#
# `attnkit.attention(..., backend="blockwise")` 用 PyTorch 逐块执行同样的递推，反向传播时重算小块
# 而不保存权重。每次调用都返回一份 `report`，说明跑的是哪个后端、物化了什么；与构造整张矩阵的
# reference 后端对比一下。

# %%
tq = lambda a: torch.tensor(a)[None, None]
res_b = attnkit.attention(tq(q), tq(k), tq(v), backend="blockwise")
res_r = attnkit.attention(tq(q), tq(k), tq(v), backend="reference")
assert np.abs(res_b.out[0, 0].numpy() - ref).max() < 1e-12 and np.abs(res_r.out[0, 0].numpy() - ref).max() < 1e-12
assert res_b.report.materialized_bytes < res_r.report.materialized_bytes == L * S * 8
print("max |blockwise - numpy dense| =", np.abs(res_b.out[0, 0].numpy() - ref).max())
print("max |reference - numpy dense| =", np.abs(res_r.out[0, 0].numpy() - ref).max())
print("--- blockwise report ---\n", res_b.report, sep="")
print("--- reference report ---\n", res_r.report, sep="")
print("bytes materialised: blockwise", res_b.report.materialized_bytes, "| reference", res_r.report.materialized_bytes)

# %% [markdown]
# ## 练习
#
# 1. 给 `online` 加上因果掩码（查询 `i` 只看 `j <= i` 的键），并跳过完全位于"未来"的键块。L = S 时能
#    跳过多少块？
# 2. 同时返回每个查询的 log-sum-exp `m + log ℓ`。为什么有了它，以后就能重算任意小块的权重（这正是
#    FlashAttention 反向传播保存的量）？
# 3. 把键分成两半，分别跑 `online`，再用各自的 `(m, ℓ, o)` 精确合并两部分结果。环形注意力（ring
#    attention）就是这样合并分布在不同设备上的键的。
#
# 解答：`solutions/06_flash_online_softmax.py`。
