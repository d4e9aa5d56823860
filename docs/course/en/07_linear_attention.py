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
# # Lesson 7 — Linear attention: the kernel trick
#
# **Question this lesson answers:** can attention cost O(n) instead of O(n²), and what do we pay?
#
# Softmax attention weights each value by a kernel `κ(q, k) = exp(q · k / sqrt(E))`:
# `o_i = Σ_j κ(q_i, k_j) v_j / Σ_j κ(q_i, k_j)`. If the kernel were a dot product of feature maps,
# `κ(q, k) ≈ φ(q) · φ(k)`, the sums could be regrouped (matrix products are associative):
#
# ```
# o_i = φ(q_i)ᵀ (Σ_j φ(k_j) v_jᵀ) / φ(q_i)ᵀ (Σ_j φ(k_j))
# ```
#
# The bracket `U = Φ_Kᵀ V` is an (F, Ev) matrix computed once for all queries, so the cost is
# `O((L + S) · F · Ev)` instead of `O(L · S · E)`. Two feature maps:
#
# * `elu(x) + 1` (Katharopoulos et al. 2020) — cheap and positive, but a *different* kernel: it does
#   not estimate the softmax;
# * FAVOR+ positive random features (Choromanski et al. 2021), `φ(x) = exp(Wx - |x|²/2) / sqrt(F)`
#   with orthogonal Gaussian rows `W` — an unbiased estimate of `exp(q · k)` whose error shrinks as
#   the number of features `F` grows.
#
# Neither is exact. This is the second half of "attention alone does not solve long sequences": the
# cheap version is a different model, and whether it is good enough is a measurement.

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
# ## Regrouping the product, by hand

# %%
L = S = 128 if SMALL else 1024
E = 32
q = torch.randn(1, 1, L, E, dtype=torch.float64) * 0.5
k = torch.randn(1, 1, S, E, dtype=torch.float64) * 0.5
v = torch.randn(1, 1, S, E, dtype=torch.float64)
phi = lambda x: torch.nn.functional.elu(x) + 1
# quadratic: build the (L, S) kernel matrix
A = phi(q) @ phi(k).transpose(-2, -1)
quad = (A @ v) / A.sum(-1, keepdim=True)
# linear: (F, Ev) summary of the keys first, never an (L, S) matrix
U = phi(k).transpose(-2, -1) @ v
z = phi(k).sum(-2, keepdim=True)
lin = (phi(q) @ U) / (phi(q) * z).sum(-1, keepdim=True)
assert (lin - quad).abs().max() < 1e-12
assert (lin - attnkit.linear_attention(q, k, v, feature_map="elu").out).abs().max() < 1e-12
print("max |linear order - quadratic order| =", (lin - quad).abs().max().item())
print("max |by hand - attnkit.linear_attention(elu).out| =", (lin - attnkit.linear_attention(q, k, v, feature_map="elu").out).abs().max().item())

# %% [markdown]
# ## Cost: multiply-adds as n grows
#
# Counting multiply-adds (not timing: the count is exact and machine-independent). Softmax attention
# needs about `2 · n² · E`; linear attention about `2 · n · F · E` plus the feature map.

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
# ## The price: approximation error against softmax
#
# We measure the relative error `|o_lin - o_softmax| / |o_softmax|` for `elu` and for FAVOR+ with a
# growing number of random features, averaged over a few seeds.

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
# The FAVOR+ error falls as `F` grows (a Monte-Carlo estimate: its noise shrinks like `1 / sqrt(F)`
# once `F` is large, and slower before that); `elu + 1` does not
# converge to softmax at all — it is trained as its own model. Sharper attention (larger `|q|`,
# `|k|`) makes both worse: try it in exercise 1.
#
# ## Exercises
#
# 1. Multiply `q` and `k` by 2 (sharper softmax) and measure the FAVOR+ error again at F = 256. Why
#    does it grow?
# 2. Write causal linear attention as an RNN: a running state `U_i = U_{i-1} + φ(k_i) v_iᵀ` and
#    `z_i = z_{i-1} + φ(k_i)`. Check it against `attnkit.linear_attention(..., mask=attnkit.masks.causal()).out`.
# 3. At what `n` does linear attention with `F = 256` start to need fewer multiply-adds than softmax
#    attention, using the counts above?
#
# Solutions: `solutions/07_linear_attention.py`.
