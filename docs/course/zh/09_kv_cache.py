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
# # 第 9 课 — KV 缓存
#
# **本课回答的问题：** 语言模型每生成一个新词，为什么不用把整个前缀重新算一遍注意力？这要付出多少
# 内存？
#
# 解码器一次生成一个词。有因果掩码时，新词到来并不会改变旧词的键和值（每个词只看自己的过去）。所以
# 不必每一步都在整个前缀上重跑模型——那样第 `t` 步的注意力要做 `O(t²)` 的工作，总共 `O(n³)`——而是把
# 每一层过去的键和值存进**缓存**，每一步只投影新词：一个查询对 `t` 个缓存的键，`O(t)` 的工作。代价是
# 内存：每个词要存 `2 · 层数 · 键值头数 · E` 个数（第 3 课的 GQA、MQA 正是为了压缩它）。

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

import time

# %% [markdown]
# ## 写一个迷你解码器
#
# 两层 Pre-LN，每层一个因果自注意力（attnkit 的 `MultiHeadAttention`），外加可学习的位置表和输出头。
# 模型未经训练——验证两种解码方式结果相同并不需要训练。

# %%
VOCAB, D, H, LAYERS, MAX_LEN = 50, 32, 4, 2, 512


class TinyDecoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(VOCAB, D)
        self.pos = torch.nn.Embedding(MAX_LEN, D)
        self.attn = torch.nn.ModuleList([attnkit.MultiHeadAttention(D, H) for _ in range(LAYERS)])
        self.ln = torch.nn.ModuleList([torch.nn.LayerNorm(D) for _ in range(LAYERS)])
        self.head = torch.nn.Linear(D, VOCAB)

    def forward(self, tokens, start=0, caches=None):
        """tokens (B, L) at absolute positions start..start+L-1; caches: one per layer, or None."""
        x = self.tok(tokens) + self.pos(torch.arange(start, start + tokens.shape[1]))
        for i, (attn, ln) in enumerate(zip(self.attn, self.ln)):
            cache = None if caches is None else caches[i]
            x = x + attn(ln(x), causal=True, cache=cache)[0]  # 有缓存时：复用之前调用留下的键和值
        return self.head(x)


model = TinyDecoder().eval()


@torch.no_grad()
def generate_recompute(prompt, n):
    seq = prompt
    for _ in range(n):
        logits = model(seq)  # 每一步都重算整个前缀
        seq = torch.cat([seq, logits[:, -1:].argmax(-1)], 1)
    return seq


@torch.no_grad()
def generate_cached(prompt, n):
    caches = [attnkit.cache.DynamicCache() for _ in range(LAYERS)]
    logits = model(prompt, caches=caches)  # 预填充：提示词填满缓存
    seq = torch.cat([prompt, logits[:, -1:].argmax(-1)], 1)
    for _ in range(n - 1):
        logits = model(seq[:, -1:], start=seq.shape[1] - 1, caches=caches)  # 只算新词
        seq = torch.cat([seq, logits[:, -1:].argmax(-1)], 1)
    return seq, caches

# %% [markdown]
# ## 有无缓存，生成同样的词

# %%
prompt = torch.randint(0, VOCAB, (2, 8))
n_new = 16 if SMALL else 64
a = generate_recompute(prompt, n_new)
b, caches = generate_cached(prompt, n_new)
assert torch.equal(a, b)
print("identical tokens:", bool((a == b).all()))
with torch.no_grad():
    full = model(b)[:, -1]
    step = model(b[:, -1:], start=b.shape[1] - 1, caches=caches)[:, -1]
torch.testing.assert_close(step, full, rtol=1e-5, atol=1e-5)
print("max |logits recomputed - logits from cache| =", (full - step).abs().max().item())
print(f"layer 0 cache: {caches[0].kv_nbytes} bytes of K/V allocated, room for {caches[0].capacity} tokens "
      f"(holds {b.shape[1]} so far) x {b.shape[0]} sequences")

# %% [markdown]
# ## 每秒生成的词数
#
# 在本机 CPU 上以小尺寸粗略测量（机器上还跑着别的程序，所以这些数字只作示意，不是基准测试）。
# 重算方式随序列变长越来越慢；带缓存的解码器每个词的开销只随对缓存的注意力增长。

# %%
assert caches[0].kv_nbytes == 2 * b.shape[0] * H * (D // H) * caches[0].capacity * 4 and caches[0].capacity >= b.shape[1]
lengths = [8, 16, 32] if SMALL else [16, 64, 128, 256]
rates = {"recompute": [], "KV cache": []}
for n in lengths:
    for name, fn in (("recompute", generate_recompute), ("KV cache", lambda p, n: generate_cached(p, n)[0])):
        t0 = time.perf_counter()
        fn(prompt, n)
        rates[name].append(n * prompt.shape[0] / (time.perf_counter() - t0))
    print(f"{n:4d} new tokens: recompute {rates['recompute'][-1]:8.0f} tok/s | cache {rates['KV cache'][-1]:8.0f} tok/s")
fig, ax = plt.subplots(figsize=(5.5, 3.6), constrained_layout=True)
for name, r in rates.items():
    ax.plot(lengths, r, marker="o", label=name)
ax.set_xlabel("tokens generated")
ax.set_ylabel("throughput (tokens / s, batch of 2)")
ax.set_title(f"greedy decoding, {LAYERS} layers, D={D}, CPU")
ax.legend()
fig.savefig(f"{OUT}/09_tokens_per_second.png", dpi=110)
plt.show()

# %% [markdown]
# ## 练习
#
# 1. 把 `DynamicCache` 换成 `attnkit.cache.SlidingWindowCache(window=8)`，并给重算路径传入同样的窗口
#    掩码（`mask=attnkit.masks.sliding_window(left=7)`）。生成的词还相同吗？
# 2. 按公式 `2 · 层数 · B · 键值头数 · E · t · 字节数` 计算本模型的缓存大小，与解码后的
#    `cache.kv_nbytes` 比较。
# 3. 为什么双向（编码器）模型*不能*使用缓存？
#
# 解答：`solutions/09_kv_cache.py`。
