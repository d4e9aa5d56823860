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
# # Lesson 1 — Attention from scratch, in NumPy
#
# **Question this lesson answers:** what does an attention layer actually compute?
#
# Attention is not a special layer that only Transformers have. It is one idea — *dynamic
# weighting*: to build an output for the current target, look at every available piece of
# information, score how relevant each piece is *for this target*, turn the scores into weights
# that sum to one, and return the weighted sum. Average pooling uses the same weights for every
# target (static weighting); attention recomputes them for each target.
#
# Three steps, always the same:
#
# 1. **score** — compare the query `q` (what the target is looking for) with every key `k`
#    (what each piece offers): `s_j = q · k_j / sqrt(d)`;
# 2. **normalise** — `w = softmax(s)`, so the weights are positive and sum to 1;
# 3. **weighted sum** — `out = Σ_j w_j v_j` over the values `v` (what each piece contributes).
#
# Two questions to ask about any attention model, every time: *what are its queries, keys and
# values*, and *along which dimension does the softmax act* (here: over the keys, one row per query).

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

# %% [markdown]
# ## The three steps in NumPy
#
# Shapes: `q` (L, d) — L queries; `k` (S, d) — S keys; `v` (S, dv) — one value per key.

# %%
def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    # subtracting the row maximum changes nothing mathematically (it cancels in the ratio)
    # but keeps exp() from overflowing for large scores
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def attention_np(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scores = q @ k.T / np.sqrt(q.shape[-1])  # step 1: (L, S), one row per query
    weights = softmax(scores, axis=-1)  # step 2: each row sums to 1 — the softmax acts over keys
    return weights @ v, weights  # step 3: (L, dv)


L, S, d = (3, 5, 4) if SMALL else (4, 6, 8)
q = rng.standard_normal((L, d))
k = rng.standard_normal((S, d))
v = rng.standard_normal((S, d))
out, w = attention_np(q, k, v)
print("weights (rows = queries, columns = keys):\n", np.round(w, 3))
print("row sums:", w.sum(axis=1))

# %% [markdown]
# ## The same call in attnkit
#
# `attnkit.attention` takes `(B, H, L, E)` tensors — a batch axis and a head axis in front — and
# returns the output, the weights when asked, and a report of which backend ran.

# %%
t = lambda a: torch.tensor(a, dtype=torch.float64)[None, None]  # (L, d) -> (1, 1, L, d)
res = attnkit.attention(t(q), t(k), t(v), return_weights=True)
print("max |attnkit - numpy| output:", float(np.abs(res.out[0, 0].numpy() - out).max()))
print("max |attnkit - numpy| weights:", float(np.abs(res.weights[0, 0].numpy() - w).max()))
print(res.report)
assert np.allclose(w.sum(axis=1), 1.0)
assert np.abs(res.out[0, 0].numpy() - out).max() < 1e-12 and np.abs(res.weights[0, 0].numpy() - w).max() < 1e-12

# %% [markdown]
# ## Static versus dynamic weighting
#
# Average pooling gives every query the same output. Attention gives each query its own mixture.
# Below, each row of the heat map is one query's weights over the keys: the rows differ, which is
# exactly what "dynamic" means.

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
static = np.full_like(w, 1.0 / S)
for ax, mat, title in ((axes[0], static, "average pooling (static)"), (axes[1], w, "attention (dynamic)")):
    im = ax.imshow(mat, vmin=0, vmax=1, cmap="viridis")
    ax.set_title(title)
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    ax.set_xticks(range(S))
    ax.set_yticks(range(L))
fig.colorbar(im, ax=axes, label="weight w_ij")
fig.savefig(f"{OUT}/01_static_vs_dynamic.png", dpi=110)
plt.show()

# %% [markdown]
# ## Why divide by sqrt(d)?
#
# For random unit-variance vectors, `q · k` has variance `d`. Large scores push the softmax towards
# a one-hot vector whose gradient almost vanishes. Dividing by `sqrt(d)` keeps the variance near 1
# whatever the head size. Measure it:

# %%
dims = [4, 16, 64] if SMALL else [4, 16, 64, 256, 1024]
n = 500 if SMALL else 5000
for dd in dims:
    a, b = rng.standard_normal((n, dd)), rng.standard_normal((n, dd))
    raw = (a * b).sum(1)
    assert raw.var() > dd / 2 and abs((raw / np.sqrt(dd)).var() - 1) < 0.3
    print(f"d={dd:5d}  var(q·k)={raw.var():8.1f}  var(q·k/sqrt(d))={(raw / np.sqrt(dd)).var():.2f}")

# %% [markdown]
# The unscaled variance grows like `d`; the scaled one stays near 1.
#
# ## Exercises
#
# 1. Add a padding mask: keys `j >= n_valid` must get weight exactly 0. What should a query whose
#    keys are *all* masked return? (attnkit returns zeros, never NaN.) Check your answer against
#    `attnkit.attention(..., mask=attnkit.masks.padding_mask(...))`.
# 2. Make the softmax sharper or flatter with a temperature `τ` (`softmax(s / τ)`). Plot the
#    entropy of one row of weights for τ in [0.1, 10]. Which τ gives average pooling?
# 3. Replace the dot-product score with Bahdanau's additive score `wᵀ tanh(W_q q + W_k k)` for
#    random `W_q`, `W_k`, `w`. Which of the three steps changed?
#
# Solutions: `solutions/01_attention_from_scratch.py`.
