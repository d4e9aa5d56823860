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
# # Lesson 14 — Compressing the KV cache: sinks, heavy hitters and quantization
#
# **Question this lesson answers:** a cache cannot keep every token of an endless stream: which
# ones can it drop, and why must it keep the first?
#
# Lesson 9 kept every key and value, so memory grows with the text. Here the cache has a
# **budget**: a fixed number of tokens (or of bytes). Four ways to spend it:
#
# * **sinks + window** (StreamingLLM, Xiao et al. 2023, https://arxiv.org/abs/2309.17453): the first
#   few tokens and the most recent ones;
# * **H2O** (Zhang et al. 2023, https://arxiv.org/abs/2306.14048): the recent ones and the "heavy
#   hitters", the keys that have received the most attention so far;
# * **SnapKV** (Li et al. 2024, https://arxiv.org/abs/2404.14469): the recent ones and the keys the
#   latest queries look at;
# * **quantization** (KIVI, Liu et al. 2024, https://arxiv.org/abs/2402.02750): every token, in
#   fewer bits.

# %%
import json
import os
import sys
from pathlib import Path

import matplotlib

if "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # run as a script (or in the test suite): figures go to files, no window
import matplotlib.pyplot as plt
import torch

import attnkit
from attnkit import MultiHeadAttention
from attnkit.cache import H2OCache, QuantizedCache, SinkCache, SnapKVCache
from attnkit.modules.rotary import RotaryEmbedding

SMALL = os.environ.get("ATTNKIT_COURSE_SMALL") == "1"  # the test suite runs every lesson small
OUT = os.environ.get("ATTNKIT_COURSE_OUT", "course_out")
os.makedirs(OUT, exist_ok=True)
torch.manual_seed(0)

# %% [markdown]
# ## Why a sink exists
#
# Softmax weights are positive and sum to 1: a query that finds nothing useful still has to put its
# weight somewhere. A trained model learns a place for it, a token every sequence has and every
# query can see: the first one. Its key scores high with every query and its value is small, so
# "attending to it" adds almost nothing: a parking spot. Below, one head with such a sink. Drop the
# sink and its weight flows to the real tokens; drop an ordinary token and little changes.

# %%
S, E = 32, 16
k = torch.randn(S, E, dtype=torch.float64)
v = torch.randn(S, E, dtype=torch.float64)
common = 1.2 * torch.randn(E, dtype=torch.float64)  # a direction every query shares (learned, in a real model)
q = torch.randn(8, E, dtype=torch.float64) + common  # 8 queries
k[0] = common  # the sink: every query scores it highly
v[0] = 0.05 * v[0]  # ... and its value is nearly nothing


def attend(keep):
    w = torch.softmax(q @ k[keep].T / E**0.5, -1)  # (8, kept)
    return w @ v[keep], w


full, w_full = attend(list(range(S)))
no_sink, _ = attend(list(range(1, S)))
no_middle, _ = attend([i for i in range(S) if i != 15])
change = lambda out: ((out - full).norm(dim=-1) / full.norm(dim=-1)).mean().item()
print(f"weight on the sink: {w_full[:, 0].mean():.2f} (a uniform share would be {1 / S:.3f})")
print(f"output change when the sink is evicted: {change(no_sink):.2f}; when token 15 is: {change(no_middle):.3f}")
assert w_full[:, 0].mean() > 10 / S, "the sink takes many times a uniform share"
assert change(no_sink) > 10 * change(no_middle), "evicting the sink moves the outputs far more than evicting another token"

# %% [markdown]
# ## What each policy keeps
#
# One attention layer with rotary positions reads a stream of random vectors one token at a time
# through four caches of 16 slots. The picture marks, for every step (x), which original positions
# (y) the cache holds. The window slides; sinks + window also keeps a flat line at 0–3; H2O and
# SnapKV keep a scattering of older tokens chosen by attention.

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
    assert max(len(s) for s in steps) <= BUDGET, f"{name} exceeded its budget"
assert all(s[:4] == [0, 1, 2, 3] for s in kept["sinks + window"][4:]), "the sinks never leave"
assert kept["window only"][-1][0] == T - BUDGET, "the window holds only the last 16"

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
# ## The position rule after eviction
#
# After an eviction, at which positions do the kept tokens sit? StreamingLLM's answer: **at their
# positions in the cache**, 0..n-1, not in the text. A model trained on short windows never saw
# position 50,000; it did see positions up to its window. So `SinkCache` stores keys *before* rotary
# and rotates each at its rank in the cache on every step. Check: a step's output equals a fresh
# forward over the kept tokens alone, at positions 0..n-1. Keeping the original positions instead
# leaves gaps in the distances, and the output changes.

# %%
cache = SinkCache(4, 12)
with torch.no_grad():
    for t in range(T):
        step, _ = layer(x[:, t:t + 1], cache=cache, causal=True)
    kept_now = cache.kept_positions()[0]
    fresh, _ = layer(x[:, kept_now], causal=True)  # positions 0..n-1
    original, _ = layer(x[:, kept_now], causal=True, positions=torch.tensor(kept_now))
torch.testing.assert_close(step[0, -1], fresh[0, -1], rtol=1e-10, atol=1e-10)
gap = (original[0, -1] - fresh[0, -1]).abs().max().item()
print("kept positions:", kept_now)
print(f"step = fresh forward at in-cache positions; with the original positions it differs by {gap:.3f}")
assert gap > 1e-3

# %% [markdown]
# ## Memory against perplexity
#
# Quantization keeps every token but stores each in fewer bits: keys per channel and values per
# token, as KIVI does, the newest 32 tokens exact. The bytes are real: 8-bit codes one per byte,
# 4-bit codes two per byte, plus a float16 scale and zero per group. On random Gaussian keys 4 bits
# move the output by about a tenth; the experiment below measures what it costs a trained model.

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
    print(f"{bits}-bit: {view.kv_nbytes / 1024:.0f} KiB vs {fp32 / 1024:.0f} KiB fp32 ({fp32 / view.kv_nbytes:.1f}x smaller), "
          f"output deviation {100 * dev:.2f} %")
assert rows[0][2] >= 3 and rows[1][2] >= 5, "8-bit at least 3x, 4-bit at least 5x below fp32"
assert rows[0][3] < 0.02 and rows[0][3] < rows[1][3], "8-bit barely moves the output; 4-bit moves it more"

# %% [markdown]
# What does each policy cost in perplexity? The experiment `attnkit experiment kv_eviction` trains a
# small character model on the King James Bible with 64-character windows (128 with `--full`) and
# reads a stream 8 times longer. Its committed numbers, when this checkout has them:

# %%
root = Path(__file__).resolve().parents[3] if "__file__" in globals() else Path.cwd()  # the checkout (a notebook: run it there)
runs = [root / "results" / "kv_eviction" / preset / "results.json" for preset in ("full", "quick")]
found = next((f for f in runs if f.is_file()), runs[-1])  # the full run when committed, else the quick one
if found.is_file():
    res = json.loads(found.read_text(encoding="utf-8"))["results"]
    b = str(res["headline_budget"])
    for policy, ppl in res["perplexity_last_bin"].items():
        row = res["policies"][policy].get(b) or res["policies"][policy]["all"]
        print(f"{policy:17s} perplexity {ppl:8.3f}   {row['nbytes'] / 1024:7.1f} KiB")
    sink = res["sink"]
    print("weight on position 0 by layer:", ", ".join(f"{w:.3f}" for w in sink["first_mean"]), f"(a uniform row: {sink['uniform_first']:.3f})")
    assert set(res["perplexity_last_bin"]) >= {"dense", "window", "sink_window", "window_recompute", "h2o", "snapkv", "quantized8", "quantized4"}
else:
    print("no committed kv_eviction results in this checkout; run: attnkit experiment kv_eviction")
print("StreamingLLM, Llama-2-13B, PG19 (their Table 1): window 0+1024 -> 5158.07, sinks 4+1020 -> 5.40")

# %% [markdown]
# The paper's large models collapse without their sinks (5158 against 5.40). The small models trained
# here did not form a sink: in every layer the weight on position 0 printed above stays below twice
# a uniform row's share, both in `--quick` and in `--full` (twice the context, more heads, 2.7 times
# the characters), and no head puts 0.3 of its weight there. Then evicting the first tokens costs little, and the four sink slots only take room
# from the window. Sinks are reported to emerge after effective optimization on sufficient data
# (Gu et al. 2025, https://arxiv.org/abs/2410.10781, with 60M-parameter models on 5B tokens) and to
# grow with model size and context length (Barbero et al. 2025, https://arxiv.org/abs/2504.02732):
# far beyond a model trained for minutes on a CPU. For the models people serve, the rule is cheap insurance.
#
# ## Scores without the weights
#
# H2O and SnapKV rank keys by the attention they receive: the weights summed over the queries.
# Fused kernels never build the (L, S) weights, so tools ask for slow "eager" attention instead.
# `attention(..., return_key_scores=True)` computes the same sums in a second pass over tiles with
# the final log-sum-exp, in O(n) memory.

# %%
q, k, v = (torch.randn(1, 2, 300, 16, dtype=torch.float64) for _ in range(3))
res = attnkit.attention(q, k, v, mask=attnkit.masks.causal(), return_key_scores=True)
dense = attnkit.attention(q, k, v, mask=attnkit.masks.causal(), backend="reference", return_weights=True).weights
torch.testing.assert_close(res.key_scores, dense.sum(-2), rtol=1e-12, atol=1e-12)
print("key scores = column sums of the weights; the first key collects", f"{res.key_scores[0, 0, 0]:.1f} of 300")

# %% [markdown]
# ## Exercises
#
# 1. In the sink example, make the sink's value as large as the others (`v[0] = v[1]`). Is evicting it
#    still worse than evicting token 15? What does that say about what a sink stores?
# 2. Run the policy picture with `H2OCache(BUDGET, recent=2)`. Which old positions survive, and why do
#    the earliest ones win?
# 3. Find the smallest `group` for which the 4-bit cache is still at least 5x smaller than fp32 at
#    E = 64. (Hint: each group of keys pays 2·2·E bytes of scales and zeros.)
#
# Solutions: `solutions/14_kv_compression.py`.
