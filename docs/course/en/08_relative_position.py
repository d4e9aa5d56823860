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
# # Lesson 8 — Relative position: ALiBi, T5 buckets, rotary
#
# **Question this lesson answers:** how can attention know *how far apart* two tokens are, rather
# than where each one sits?
#
# Lesson 5 added an absolute position vector to every token. Many models instead change the score
# itself, so that it depends on the offset `i - j` between query `i` and key `j`:
#
# * **ALiBi** (Press et al. 2022) adds a fixed penalty `-m_h · |i - j|` with one slope per head,
#   `m_h = 2^(-8h/H)` for `h = 1..H`: nearby keys win, each head with its own reach;
# * **T5 buckets** (Raffel et al. 2020) add a *learned* scalar per head and per bucket of `i - j`:
#   one bucket per offset for small offsets, logarithmically wider buckets up to `max_distance`;
# * **rotary** (RoPE, Su et al. 2021) adds nothing: it *rotates* each pair of coordinates of `q` and
#   `k` by an angle proportional to the position, so `q_m · k_n` depends only on `m - n`.

# %%
import os
import sys

import matplotlib

if "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # run as a script (or in the test suite): figures go to files, no window
import matplotlib.pyplot as plt
import numpy as np
import torch

import attnkit

SMALL = os.environ.get("ATTNKIT_COURSE_SMALL") == "1"  # the test suite runs every lesson small
OUT = os.environ.get("ATTNKIT_COURSE_OUT", "course_out")
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(0)
torch.manual_seed(0)

# %% [markdown]
# ## ALiBi: a penalty that grows with distance

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
# ## T5: learned scalars on logarithmic buckets
#
# `t5_bucket` maps an offset to a bucket index. With 32 buckets and `max_distance = 128`, offsets
# 0–7 get their own bucket in each direction and larger ones share log-spaced buckets. The bias
# values are parameters, learned with the model; here they are at their initial values.

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
# ## Rotary: the relative property, checked
#
# Rotate `q` at position `m` and `k` at position `n`. If we shift *both* positions by the same `t`,
# the dot product must not change. Then compare with the absolute encoding of lesson 5, which does
# change.

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
# Rotary leaves vector norms unchanged and needs no extra parameters, which is why most recent
# decoders use it. How far a model trained at one length generalises to longer ones is a separate,
# empirical question (ALiBi was proposed for exactly that).
#
# ## Exercises
#
# 1. Implement rotary by hand for one vector: pair coordinates `(x_{2i}, x_{2i+1})` and rotate pair
#    `i` by the angle `p · 10000^(-2i/E)`. Compare with `attnkit.RotaryEmbedding(E, interleaved=True)`.
# 2. Plot the ALiBi weights (softmax of the bias alone, zero query-key scores) of the last query for
#    each head. How many keys does each head effectively see (weights above 1 %)?
# 3. Use `t5_bucket` with `bidirectional=False` (a decoder): what bucket does a *future* key get, and
#    why does it not matter in a causal model?
#
# Solutions: `solutions/08_relative_position.py`.
