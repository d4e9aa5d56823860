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
# # Lesson 6 — Flash-style attention: the online softmax
#
# **Question this lesson answers:** can attention be computed exactly without ever holding the whole
# (L, S) score matrix?
#
# Dense attention builds `L × S` scores. For L = S = 32 768 in float32 that is 4 GiB *per head* — the
# memory wall, not the arithmetic, is what limits long contexts. FlashAttention (Dao et al. 2022,
# https://arxiv.org/abs/2205.14135) walks over the keys in blocks and keeps, for each query, only
# three running quantities: the largest score seen so far `m`, the softmax denominator `ℓ`, and the
# unnormalised output `o`. When a new block of scores `s` arrives:
#
# ```
# m_new = max(m, max_j s_j)
# ℓ_new = ℓ · exp(m - m_new) + Σ_j exp(s_j - m_new)
# o_new = o · exp(m - m_new) + Σ_j exp(s_j - m_new) v_j
# ```
#
# and at the end `out = o / ℓ`. The factor `exp(m - m_new)` re-bases what was summed under the old
# maximum onto the new one; nothing is approximated. Note what this does *not* do: the work is
# still `L × S` — blocking saves memory, not arithmetic. Attention by itself does not make long
# sequences cheap (lesson 7 trades exactness for that).

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
# ## The online softmax in NumPy

# %%
def dense(q, k, v):
    s = q @ k.T / np.sqrt(q.shape[1])
    w = np.exp(s - s.max(1, keepdims=True))
    return (w / w.sum(1, keepdims=True)) @ v


def online(q, k, v, block):
    L, S = q.shape[0], k.shape[0]
    m = np.full((L, 1), -np.inf)  # running max per query
    ell = np.zeros((L, 1))  # running denominator
    o = np.zeros((L, v.shape[1]))  # running unnormalised output
    peak = 0
    for j0 in range(0, S, block):
        s = q @ k[j0 : j0 + block].T / np.sqrt(q.shape[1])  # only an (L, block) tile exists
        peak = max(peak, s.nbytes)
        m_new = np.maximum(m, s.max(1, keepdims=True))
        alpha = np.exp(m - m_new)  # re-base the old sums onto the new maximum
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
# ## Memory: the full matrix against one tile
#
# The dense score matrix grows like `L · S`; one tile of a blockwise pass is `block_q × block_kv`
# whatever the length. Here for float32 and one head:

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
# ## attnkit's blockwise backend and its report
#
# `attnkit.attention(..., backend="blockwise")` runs the same recurrence in PyTorch, tile by tile,
# with a backward pass that recomputes tiles instead of storing weights. Every call returns a
# `report` saying which backend ran and what it materialised; compare it with the reference backend,
# which builds the full matrix.

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
# ## Exercises
#
# 1. Add a causal mask to `online` (query `i` sees keys `j <= i`) and skip key blocks that lie
#    entirely in the future. How many blocks does it skip for L = S?
# 2. Also return the log-sum-exp `m + log ℓ` per query. Why is it enough to recompute the weights
#    of any tile later (this is what the backward pass of FlashAttention stores)?
# 3. Split the keys in two halves, run `online` on each, and merge the two partial results exactly
#    using their `(m, ℓ, o)`. This is how ring attention combines keys held on different devices.
#
# Solutions: `solutions/06_flash_online_softmax.py`.
