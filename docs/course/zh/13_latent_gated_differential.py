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
# # 第 13 课 — 今天的注意力：潜向量、门控与差分
#
# **本课回答的问题：** DeepSeek 的多头潜在注意力（Multi-head Latent Attention，MLA）为什么能比多头注意力
# 少存 71 倍的缓存，却仍然精确地解码？输出门控（Qwen3-Next）和两个 softmax 之差（DiffLlama）又改变了
# 一层里的什么？
#
# 第 9 课讲过 KV 缓存的代价：每一层都要为每个头、每个词存一个键和一个值。GQA（第 3 课）让多个头共用
# 键和值。MLA 走得更远：每个词被压缩成一个短向量，即**潜向量** `c`（DeepSeek-V3 中有 512 个数），每个头
# 的键和值都是它的*线性像*：`k_h = W_UK,h c`，`v_h = W_UV,h c`。缓存里只放 `c`（外加一个所有头共用的
# 小旋转键）。让解码变便宜的诀窍是**吸收**：因为这些映射是线性的，`W_UK,h` 可以挪到查询一侧，`W_UV,h`
# 可以挪到输出一侧，于是解码的每一步直接对潜向量做注意力，从不重建键和值。

# %%
import os
import sys
import time

import matplotlib

if "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # 作为脚本运行（或在测试中）：图写入文件，不弹窗口
import matplotlib.pyplot as plt
import torch

import attnkit
from attnkit.cache import DynamicCache
from attnkit.modules import DecoderAttention, DifferentialAttention, LatentCache, OutputGate
from attnkit.modules.latent_attention import plan_cost

SMALL = os.environ.get("ATTNKIT_COURSE_SMALL") == "1"  # 测试套件以小尺寸运行每一课
OUT = os.environ.get("ATTNKIT_COURSE_OUT", "course_out")
os.makedirs(OUT, exist_ok=True)
torch.manual_seed(0)
torch.set_num_threads(1)  # 下面要给解码计时：单线程，就像服务器给每个请求的预算

# %% [markdown]
# ## 缓存的算术，实测
#
# DeepSeek-V3 的注意力有 128 个头；每个查询/键头有 128 维"不带位置"的分量加 64 维旋转分量，每个值头
# 128 维；潜向量 512 个数，共用的旋转键 64 个数。我们把同样的 16 个词分别写进多头缓存（每个头的键和值）
# 和 MLA 的潜向量缓存，用 bfloat16，然后读出 `nbytes`。

# %%
T, H3 = 16, 128
mha = DynamicCache()
mha.update(torch.zeros(1, H3, T, 128 + 64, dtype=torch.bfloat16), torch.zeros(1, H3, T, 128, dtype=torch.bfloat16))
latent = LatentCache()
latent.update(torch.zeros(1, T, 512, dtype=torch.bfloat16), torch.zeros(1, T, 64, dtype=torch.bfloat16))
per_mha = mha.kv_nbytes / mha.capacity
per_mla = latent.kv_nbytes / T
print(f"每层每个词：多头 {per_mha:.0f} 字节，潜向量 {per_mla:.0f} 字节 -> 少 {per_mha / per_mla:.1f} 倍")
print(f"61 层 x 128k 个词：多头 {per_mha * 61 * 131072 / 2**30:.0f} GiB，潜向量 {per_mla * 61 * 131072 / 2**30:.1f} GiB")
assert per_mla == (512 + 64) * 2 and per_mha == H3 * (192 + 128) * 2
assert 71 < per_mha / per_mla < 71.2

# %% [markdown]
# ## 吸收，用数值验证
#
# 对头 h、查询词 t 和缓存中的词 s，得分是
# `q_h·k_h = q^N_h · (W_UK,h c_s) + q^R_h · k^R_s`。结合律把矩阵挪到查询上：
# `q^N_h · (W_UK,h c_s) = (W_UK,hᵀ q^N_h) · c_s`。值这一侧靠线性：
# `Σ_s p_s W_UV,h c_s = W_UV,h (Σ_s p_s c_s)`。所以 MLA *就是*在潜向量上做的多查询注意力，只是查询更宽。
# 先在随机数上验证这个恒等式，再用两种顺序算整层。

# %%
r, dn, dr, dv, H = 32, 16, 8, 16, 4
W_UK = torch.randn(dn, r, dtype=torch.float64)
q_nope, c = torch.randn(dn, dtype=torch.float64), torch.randn(r, dtype=torch.float64)
lhs = q_nope @ (W_UK @ c)  # 先展开键，再做点积
rhs = (W_UK.T @ q_nope) @ c  # 先吸收进查询，再与潜向量做点积
print(f"展开的得分 {lhs.item():.12f}，吸收的得分 {rhs.item():.12f}")
assert abs(lhs - rhs) < 1e-12

mla = attnkit.MultiHeadLatentAttention(64, H, kv_lora_rank=r, qk_nope_dim=dn, qk_rope_dim=dr, v_dim=dv)
x = torch.randn(2, 12, 64)
with torch.no_grad():
    mla.path = "expand"
    out_expand, _ = mla(x)
    mla.path = "absorb"
    out_absorb, _ = mla(x)
print("整层：max |展开 - 吸收| =", (out_expand - out_absorb).abs().max().item())
torch.testing.assert_close(out_absorb, out_expand, rtol=1e-5, atol=1e-5)

# %% [markdown]
# ## 从潜向量缓存解码
#
# `new_cache()` 给出一个 `LatentCache`（`max_len=` 一次分配这么多词的空间；不给的话，缓冲区满了就翻倍）。
# 提示词先把它填上，之后每一步送入一个词。输出与完整的（预填充）计算相同，缓存里存着
# `B · T · (r + dr)` 个数，外加每个词一个 int64 位置。

# %%
mla.path = "auto"
cache = mla.new_cache(max_len=12)
with torch.no_grad():
    steps = [mla(x[:, :4], cache=cache)[0]] + [mla(x[:, t:t + 1], cache=cache)[0] for t in range(4, 12)]
torch.testing.assert_close(torch.cat(steps, 1), out_expand, rtol=1e-5, atol=1e-5)
print(f"12 个词之后的缓存：{cache.kv_nbytes} 字节 = 2 x 12 x ({r} + {dr}) x 4，另有 {cache.nbytes - cache.kv_nbytes} 字节的位置表")
assert cache.kv_nbytes == 2 * 12 * (r + dr) * 4 and cache.nbytes - cache.kv_nbytes == 2 * 12 * 8

# %% [markdown]
# ## 解码耗时：吸收对展开
#
# 展开每一步要做 `S · r · H · (dn + dv)` 次乘加（每个缓存的潜向量都要过一遍 `kv_b_proj`），吸收只要
# `H · S · (2r + dr)`。16 个头、r = 128 时，每个缓存的词分别是 4096 对 272。完整的预填充正好相反（潜向量
# 宽度上的注意力更宽），所以 `path="auto"` 每次调用都比较这两个计数。

# %%
big = attnkit.MultiHeadLatentAttention(512, 16, kv_lora_rank=128, qk_nope_dim=64, qk_rope_dim=32, v_dim=64)
sizes = [256, 1024] if SMALL else [512, 2048, 8192]
times = {"expand": [], "absorb": []}
for S in sizes:
    cache = big.new_cache()
    cache.update(torch.randn(1, S, 128), torch.randn(1, S, 32))
    step = torch.randn(1, 1, 512)
    for path in times:
        big.path = path
        runs = []
        for _ in range(3):
            cache.crop(S)
            t0 = time.perf_counter()
            with torch.no_grad():
                big(step, cache=cache)
            runs.append(time.perf_counter() - t0)
        times[path].append(1e3 * sorted(runs)[1])
    print(f"S={S:5d}：展开 {times['expand'][-1]:7.2f} ms，吸收 {times['absorb'][-1]:6.2f} ms")
big.path = "auto"
cost = plan_cost(1, 4096, heads=16, kv_lora_rank=128, qk_nope_dim=64, qk_rope_dim=32, v_dim=64)
print(f"S=4096 时的乘加次数：展开 {cost['expand'] / 1e6:.0f} M，吸收 {cost['absorb'] / 1e6:.0f} M")
assert big.choose_path(1, 4096) == "absorb" and big.choose_path(4096, 4096) == "expand"
fig, ax = plt.subplots(figsize=(5.5, 3.4), constrained_layout=True)
for path, ms in times.items():
    ax.plot(sizes, ms, marker="o", label=path)
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("cached tokens S")
ax.set_ylabel("one decode step (ms, 1 thread)")
ax.set_title("MLA decode: absorbed vs expanded")
ax.legend()
fig.savefig(f"{OUT}/13_decode_time.png", dpi=110)
plt.show()

# %% [markdown]
# ## 输出门控与两张图之差
#
# **门控注意力**（Qwen3-Next）把每个头的输出乘上 `sigmoid(x W_g)`，门值由查询词自己算出。注意力权重
# 不受影响；变的是每个头有多少能传到输出，逐词而定（接近 0：这个头对这个词关闭，不必再把权重停在汇点
# 上）。**差分注意力**（DiffLlama）把两张 softmax 图相减，`A1 − λ·A2`：共模的权重相互抵消，条目可以为负；
# 每一行之和是 `1 − λ`。下图：按头门控的门值（词 × 头），以及一对头的三张图。

# %%
D, L = 32, 10
xs = torch.randn(1, L, D)
gate = OutputGate(D, 4, 8, kind="headwise")
gated = DecoderAttention(D, 4, kv_heads=2, gate=gate)
plain = DecoderAttention(D, 4, kv_heads=2)
plain.load_state_dict(gated.state_dict(), strict=False)
with torch.no_grad():
    _, w_gated = gated(xs, need_weights=True)
    _, w_plain = plain(xs, need_weights=True)
    g = gate.gates(xs)[0, :, :, 0]  # (L, H)
torch.testing.assert_close(w_gated, w_plain)
print("门控不改变注意力权重；门值范围", round(g.min().item(), 3), "到", round(g.max().item(), 3))

diff = DifferentialAttention(D, 4, kv_heads=2, depth=3)
with torch.no_grad():
    q, k, v = diff.project(xs, torch.arange(L)[None])
    a1 = attnkit.attention(q[:, :2], k[:, :1], v[:, :1], mask=attnkit.masks.causal(), return_weights=True).weights[0, 0]
    a2 = attnkit.attention(q[:, 2:], k[:, 1:], v[:, 1:], mask=attnkit.masks.causal(), return_weights=True).weights[0, 0]
    _, w_diff = diff(xs, need_weights=True)
    lam = diff.lam().item()
torch.testing.assert_close(w_diff[0, 0], a1 - lam * a2)
torch.testing.assert_close(w_diff.sum(-1), torch.full_like(w_diff.sum(-1), 1 - lam))
print(f"lambda = {lam:.3f}；A1 - lambda A2 的每一行之和都是 1 - lambda = {1 - lam:.3f}；最负的权重 {w_diff.min().item():.3f}")

fig, axes = plt.subplots(1, 4, figsize=(12, 3.2), constrained_layout=True)
gim = axes[0].imshow(g.T, cmap="viridis", vmin=0, vmax=1)
fig.colorbar(gim, ax=axes[0], shrink=0.6, location="bottom")
axes[0].set_title("output gate (heads x tokens)")
axes[0].set_xlabel("token")
axes[0].set_ylabel("head")
lim = max(a1.max().item(), a2.max().item())
for ax, m, title in ((axes[1], a1, "A1"), (axes[2], a2, "A2"), (axes[3], w_diff[0, 0], f"A1 - {lam:.2f} A2")):
    im = ax.imshow(m, cmap="RdBu_r", vmin=-lim, vmax=lim)
    ax.set_title(title)
    ax.set_xlabel("key")
axes[1].set_ylabel("query")
fig.colorbar(im, ax=axes[1:], shrink=0.8)
fig.savefig(f"{OUT}/13_gate_and_difference.png", dpi=110)
plt.show()

# %% [markdown]
# ## 把 Hugging Face 的一层从模型里取出来
#
# `attnkit.integrations.hf.from_hf_attention` 把 transformers 模型里的一个注意力层（DeepSeek-V2/V3、
# Qwen3-Next、DiffLlama、gpt-oss、Gemma 2/3、LLaMA、Qwen3、Mistral）变成上面的 attnkit 模块，权重是复制的。
# 这里用一个随机初始化的小 DeepSeek-V3 层。

# %%
try:
    import transformers
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    from attnkit.integrations.hf import from_hf_attention
except ImportError:
    transformers = None
if transformers is not None:
    cfg = transformers.AutoConfig.for_model("deepseek_v3", hidden_size=32, num_attention_heads=4, num_key_value_heads=4,
                                            kv_lora_rank=16, q_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8)
    layer = from_hf_attention(DeepseekV3Attention(cfg, 0))
    c = layer.new_cache()
    with torch.no_grad():
        layer(torch.randn(1, 6, 32), cache=c)
    print(type(layer).__name__, "| 缓存：", c.kv_nbytes, "字节存 6 个词 =", 6 * (16 + 4) * 4)
    assert c.kv_nbytes == 6 * (16 + 4) * 4

# %% [markdown]
# ## 练习
#
# 1. DeepSeek-V2-Lite 有 16 个头（头的宽度相同，潜向量也相同）。它的潜向量缓存比多头缓存小多少倍？
#    像上面那样用 `nbytes` 量出来。
# 2. 用 DeepSeek-V2-Lite 的宽度（H=16、r=512、dn=128、dr=64、dv=128），缓存 S = 4096 个词时，新词数 L
#    从多少起 `plan_cost` 更愿意展开？
# 3. 把差分层的四个 λ 向量置零。这时 λ 是多少？它的注意力图每一行之和是多少？用 `need_weights=True`
#    验证。
#
# 解答：`solutions/13_latent_gated_differential.py`。
