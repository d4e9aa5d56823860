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
# # 第 14 课 —— 压缩 KV 缓存：汇点、重要词元与量化
#
# **本课回答的问题：** 缓存无法保留无尽文本流中的每个词元：哪些可以丢弃？为什么必须保留开头那几个？
#
# 第 9 课保留了所有的键和值，所以内存随文本增长。本课的缓存有一个**预算**：固定数量的词元（或字节）。
# 有四种花费预算的方式：
#
# * **汇点 + 窗口**（StreamingLLM，Xiao et al. 2023，https://arxiv.org/abs/2309.17453）：开头的几个词元
#   加上最近的词元；
# * **H2O**（Zhang et al. 2023，https://arxiv.org/abs/2306.14048）：最近的词元，加上“重要词元”
#   （heavy hitters），即迄今为止累计获得注意力最多的键；
# * **SnapKV**（Li et al. 2024，https://arxiv.org/abs/2404.14469）：最近的词元，加上最新几个查询所关注的键；
# * **量化**（KIVI，Liu et al. 2024，https://arxiv.org/abs/2402.02750）：保留每个词元，但用更少的比特存储。

# %%
import json
import os
import sys
from pathlib import Path

import matplotlib

if "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # 作为脚本运行（或在测试中）：图保存为文件，不弹窗口
import matplotlib.pyplot as plt
import torch

import attnkit
from attnkit import MultiHeadAttention
from attnkit.cache import H2OCache, QuantizedCache, SinkCache, SnapKVCache
from attnkit.modules.rotary import RotaryEmbedding

SMALL = os.environ.get("ATTNKIT_COURSE_SMALL") == "1"  # 测试套件以小规模运行每一课
OUT = os.environ.get("ATTNKIT_COURSE_OUT", "course_out")
os.makedirs(OUT, exist_ok=True)
torch.manual_seed(0)

# %% [markdown]
# ## 汇点为什么存在
#
# softmax 的权重为正且和为 1：一个找不到有用信息的查询，也必须把权重放在某个地方。训练好的模型会为它
# 学出一个位置——每个序列都有、每个查询都看得见的那个词元：第一个。它的键与每个查询的得分都很高，而它的
# 值很小，所以“关注它”几乎什么也不加：这是一个停车位。下面是带有这样一个汇点的单个头。去掉汇点，它的
# 权重就流向真实的词元；去掉一个普通词元，几乎没有变化。

# %%
S, E = 32, 16
k = torch.randn(S, E, dtype=torch.float64)
v = torch.randn(S, E, dtype=torch.float64)
common = 1.2 * torch.randn(E, dtype=torch.float64)  # 所有查询共有的一个方向（在真实模型中是学出来的）
q = torch.randn(8, E, dtype=torch.float64) + common  # 8 个查询
k[0] = common  # 汇点：每个查询给它的得分都很高
v[0] = 0.05 * v[0]  # ……而它的值几乎为零


def attend(keep):
    w = torch.softmax(q @ k[keep].T / E**0.5, -1)  # (8, kept)
    return w @ v[keep], w


full, w_full = attend(list(range(S)))
no_sink, _ = attend(list(range(1, S)))
no_middle, _ = attend([i for i in range(S) if i != 15])
change = lambda out: ((out - full).norm(dim=-1) / full.norm(dim=-1)).mean().item()
print(f"汇点上的权重：{w_full[:, 0].mean():.2f}（均匀分布的份额为 {1 / S:.3f}）")
print(f"驱逐汇点时输出的变化：{change(no_sink):.2f}；驱逐第 15 个词元时：{change(no_middle):.3f}")
assert w_full[:, 0].mean() > 10 / S, "汇点拿到的是均匀份额的许多倍"
assert change(no_sink) > 10 * change(no_middle), "驱逐汇点对输出的影响远大于驱逐其他词元"

# %% [markdown]
# ## 每种策略保留什么
#
# 一个使用旋转位置编码的注意力层，通过四个各有 16 个槽位的缓存，逐个词元读取一串随机向量。图中对每一步（横轴）
# 标出缓存保留的原始位置（纵轴）。窗口在滑动；汇点 + 窗口还在 0–3 处保留一条水平线；H2O 和 SnapKV
# 则保留一些由注意力挑选出来的、零散分布的旧词元。

# %%
D, H, T, BUDGET = 32, 4, 60 if SMALL else 160, 16
layer = MultiHeadAttention(D, H, rotary=RotaryEmbedding(D // H, max_positions=4096)).double().eval()
x = torch.randn(1, T, D, dtype=torch.float64)
caches = {"window only": SinkCache(0, BUDGET), "sinks + window": SinkCache(4, BUDGET - 4),
          "H2O": H2OCache(BUDGET, recent=BUDGET // 2), "SnapKV": SnapKVCache(BUDGET, window=4, kernel=3)}
kept = {name: [] for name in caches}
with torch.no_grad():
    for t in range(T):
        for name, cache in caches.items():
            layer(x[:, t:t + 1], cache=cache, causal=True)
            kept[name].append(cache.kept_positions()[0])
for name, steps in kept.items():
    assert max(len(s) for s in steps) <= BUDGET, f"{name} 超出了预算"
assert all(s[:4] == [0, 1, 2, 3] for s in kept["sinks + window"][4:]), "汇点从不离开"
assert kept["window only"][-1][0] == T - BUDGET, "窗口只保留最后 16 个"

fig, axes = plt.subplots(1, 4, figsize=(11, 3), sharey=True, constrained_layout=True)
for ax, (name, steps) in zip(axes, kept.items()):
    xs = [t for t, s in enumerate(steps) for _ in s]
    ys = [p for s in steps for p in s]
    ax.scatter(xs, ys, s=2, marker="s")
    ax.set_title(name)
    ax.set_xlabel("step")
axes[0].set_ylabel("original position kept")
fig.savefig(f"{OUT}/14_kept.png", dpi=110)
plt.show()

# %% [markdown]
# ## 驱逐之后的位置规则
#
# 驱逐之后，被保留的词元位于哪些位置？StreamingLLM 的回答是：**位于它们在缓存中的位置**，即 0..n-1，
# 而不是在原文中的位置。一个在短窗口上训练的模型从未见过位置 50,000，但见过窗口以内的位置。所以
# `SinkCache` 在旋转编码*之前*存储键，并在每一步按它在缓存中的名次旋转。验证：一步的输出等于只对保留下来的
# 词元、在位置 0..n-1 上重新做一次前向计算的结果。如果改用原始位置，距离中会留下空隙，输出也随之改变。

# %%
cache = SinkCache(4, 12)
with torch.no_grad():
    for t in range(T):
        step, _ = layer(x[:, t:t + 1], cache=cache, causal=True)
    kept_now = cache.kept_positions()[0]
    fresh, _ = layer(x[:, kept_now], causal=True)  # 位置 0..n-1
    original, _ = layer(x[:, kept_now], causal=True, positions=torch.tensor(kept_now))
torch.testing.assert_close(step[0, -1], fresh[0, -1], rtol=1e-10, atol=1e-10)
gap = (original[0, -1] - fresh[0, -1]).abs().max().item()
print("保留的位置：", kept_now)
print(f"单步输出 = 在缓存内位置上重新前向计算的结果；用原始位置则相差 {gap:.3f}")
assert gap > 1e-3

# %% [markdown]
# ## 内存与困惑度的权衡
#
# 量化保留每个词元，但用更少的比特存储：像 KIVI 那样，键按通道量化，值按词元量化，最新的 32 个词元保持精确。
# 字节是真实的：8 位码每个占一个字节，4 位码两个共占一个字节，另加每组一个 float16 的缩放和零点。在随机的
# 高斯键上，4 位会让输出偏离约十分之一；下面的实验测量它对一个训练好的模型的代价。

# %%
S, Hkv, E = 1024, 4, 64
k, v = torch.randn(1, Hkv, S, E), torch.randn(1, Hkv, S, E)
q = torch.randn(1, Hkv, 8, E)
exact = attnkit.attention(q, k, v).out
fp32 = 2 * Hkv * S * E * 4
rows = []
for bits in (8, 4):
    view = QuantizedCache(bits=bits, group=32, residual=32)
    got = view.update(k, v)
    dev = ((attnkit.attention(q, got.k, got.v).out - exact).norm() / exact.norm()).item()
    rows.append((bits, view.kv_nbytes, fp32 / view.kv_nbytes, dev))
    print(f"{bits} 位：{view.kv_nbytes / 1024:.0f} KiB，fp32 为 {fp32 / 1024:.0f} KiB（小 {fp32 / view.kv_nbytes:.1f} 倍），"
          f"输出偏差 {100 * dev:.2f} %")
assert rows[0][2] >= 3 and rows[1][2] >= 5, "8 位至少比 fp32 小 3 倍，4 位至少小 5 倍"
assert rows[0][3] < 0.02 and rows[0][3] < rows[1][3], "8 位几乎不改变输出；4 位改变得更多"

# %% [markdown]
# 每种策略在困惑度上要付出多少？实验 `attnkit experiment kv_eviction` 在《钦定版圣经》上用 64 个字符的窗口（`--full` 为 128）
# 训练一个小型字符模型，然后读取长 8 倍的文本流。如果本检出包含已提交的结果，下面列出它们：

# %%
root = Path(__file__).resolve().parents[3] if "__file__" in globals() else Path.cwd()  # 代码检出目录（在笔记本中：请在该目录下运行）
runs = [root / "results" / "kv_eviction" / preset / "results.json" for preset in ("full", "quick")]
found = next((f for f in runs if f.is_file()), runs[-1])  # the full run when committed, else the quick one
if found.is_file():
    res = json.loads(found.read_text(encoding="utf-8"))["results"]
    b = str(res["headline_budget"])
    for policy, ppl in res["perplexity_last_bin"].items():
        row = res["policies"][policy].get(b) or res["policies"][policy]["all"]
        print(f"{policy:17s} 困惑度 {ppl:8.3f}   {row['nbytes'] / 1024:7.1f} KiB")
    sink = res["sink"]
    print("各层放在位置 0 上的权重：", "，".join(f"{w:.3f}" for w in sink["first_mean"]), f"（均匀分布：{sink['uniform_first']:.3f}）")
    assert set(res["perplexity_last_bin"]) >= {"dense", "window", "sink_window", "window_recompute", "h2o", "snapkv", "quantized8", "quantized4"}
else:
    print("本检出没有已提交的 kv_eviction 结果；请运行：attnkit experiment kv_eviction")
print("StreamingLLM，Llama-2-13B，PG19（论文表 1）：仅窗口 0+1024 -> 5158.07，汇点 4+1020 -> 5.40")

# %% [markdown]
# 论文中的大模型一旦失去汇点就会崩溃（5158 对 5.40）。这里训练的小模型没有形成汇点：上面打印的各层放在
# 位置 0 上的权重，在 `--quick` 和 `--full`（上下文加倍、头更多、见过的字符多 2.7 倍）中都低于均匀分布份额的两倍，
# 也没有哪个头把 0.3 的权重放在那里。
# 于是驱逐开头的词元代价很小，四个汇点槽位只是占用了窗口的空间。文献报告：汇点在充分优化、数据足够之后才出现
# （Gu et al. 2025，https://arxiv.org/abs/2410.10781，用的是 6000 万参数的模型和 50 亿词元），并随模型规模和
# 上下文长度增大而增强（Barbero et al. 2025，https://arxiv.org/abs/2504.02732）：远超在 CPU 上训练几分钟的模型。
# 对人们实际部署的模型来说，这条规则是一份廉价的保险。
#
# ## 不构造权重也能得到得分
#
# H2O 和 SnapKV 按键所获得的注意力（权重对所有查询求和）给键排序。融合内核从不构造 (L, S) 权重，
# 所以相关工具只好退回到缓慢的 “eager” 注意力。`attention(..., return_key_scores=True)` 借助最终的
# log-sum-exp 对分块做第二遍计算，得到同样的和，内存为 O(n)。

# %%
q, k, v = (torch.randn(1, 2, 300, 16, dtype=torch.float64) for _ in range(3))
res = attnkit.attention(q, k, v, mask=attnkit.masks.causal(), return_key_scores=True)
dense = attnkit.attention(q, k, v, mask=attnkit.masks.causal(), backend="reference", return_weights=True).weights
torch.testing.assert_close(res.key_scores, dense.sum(-2), rtol=1e-12, atol=1e-12)
print("键得分 = 权重的列和；第一个键获得", f"{res.key_scores[0, 0, 0]:.1f}（共 300）")

# %% [markdown]
# ## 练习
#
# 1. 在汇点的例子里，让汇点的值和其他值一样大（`v[0] = v[1]`）。驱逐它是否仍比驱逐第 15 个词元更糟？
#    这说明汇点存储的是什么？
# 2. 用 `H2OCache(BUDGET, recent=2)` 重画策略图。哪些旧位置留了下来？为什么最早的那些胜出？
# 3. 找出在 E = 64 时仍能让 4 位缓存比 fp32 小至少 5 倍的最小 `group`。（提示：每组键要付出 2·2·E 字节的
#    缩放和零点。）
#
# 答案：`solutions/14_kv_compression.py`。
