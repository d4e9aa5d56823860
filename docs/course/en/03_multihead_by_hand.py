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
# # Lesson 3 — Multi-head attention by hand
#
# **Question this lesson answers:** what exactly happens inside a multi-head attention layer, and
# where do its queries, keys and values come from?
#
# A multi-head layer runs several small attentions side by side, each in its own subspace, then
# glues their outputs together. Four steps, with model width `D`, `H` heads and head size `E = D / H`:
#
# 1. **project** — `Q = X W_q`, `K = Y W_k`, `V = Y W_v` (three learned (D, D) matrices);
# 2. **split heads** — reshape (B, L, D) → (B, L, H, E) → (B, H, L, E);
# 3. **attend** — scaled dot-product attention in each head independently;
# 4. **merge** — (B, H, L, E) → (B, L, D), then one more projection `W_o`.
#
# In **self-attention** `X = Y`: the sequence asks questions of itself. In **cross-attention** the
# queries come from one sequence (a decoder) and the keys and values from another (an encoder).
# Self-attention is one important form of attention, not the only one.

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
# ## The four steps, written out
#
# We start from `torch.nn.MultiheadAttention` (so its weights are the reference) and redo its
# computation by hand with plain tensor operations.

# %%
B, L, S, D, H = (2, 5, 7, 16, 4) if SMALL else (4, 12, 20, 64, 8)
E = D // H
ref = torch.nn.MultiheadAttention(D, H, batch_first=True).double().eval()
x = torch.randn(B, L, D, dtype=torch.float64)  # decoder-side sequence: the queries
y = torch.randn(B, S, D, dtype=torch.float64)  # encoder-side sequence: keys and values

W_q, W_k, W_v = ref.in_proj_weight.split(D)  # torch stores the three projections stacked
b_q, b_k, b_v = ref.in_proj_bias.split(D)


def mha_by_hand(x, y):
    q = x @ W_q.T + b_q  # 1. project
    k = y @ W_k.T + b_k
    v = y @ W_v.T + b_v
    split = lambda t: t.view(t.shape[0], t.shape[1], H, E).transpose(1, 2)  # 2. (B, n, D) -> (B, H, n, E)
    q, k, v = split(q), split(k), split(v)
    w = torch.softmax(q @ k.transpose(-2, -1) / E**0.5, dim=-1)  # 3. one (n, m) weight matrix per head
    o = (w @ v).transpose(1, 2).reshape(x.shape[0], x.shape[1], D)  # 4. merge heads back to D
    return o @ ref.out_proj.weight.T + ref.out_proj.bias, w


mine, w_heads = mha_by_hand(x, y)
theirs, _ = ref(x, y, y)
print("cross-attention  max |by hand - torch| =", (mine - theirs).abs().max().item())
mine_self, _ = mha_by_hand(x, x)
assert (mine - theirs).abs().max() < 1e-12 and (mine_self - ref(x, x, x)[0]).abs().max() < 1e-12
print("self-attention   max |by hand - torch| =", (mine_self - ref(x, x, x)[0]).abs().max().item())

# %% [markdown]
# ## The same weights in attnkit
#
# `attnkit.MultiHeadAttention.from_torch` copies the four projections; its `project`, `merge` and
# `attend` methods are exactly steps 1–2, 4 and 3.

# %%
ours = attnkit.MultiHeadAttention.from_torch(ref)
out_ak, w_ak = ours(x, y, y, need_weights=True, average_attn_weights=False)
assert (out_ak - theirs).abs().max() < 1e-12 and (out_ak - mine).abs().max() < 1e-12 and (w_ak - w_heads).abs().max() < 1e-12
print("attnkit vs torch     :", (out_ak - theirs).abs().max().item())
print("attnkit vs by hand   :", (out_ak - mine).abs().max().item(), "| weights:", (w_ak - w_heads).abs().max().item())
q, k, v = ours.project(x, y, y)
print("project() shapes     :", tuple(q.shape), tuple(k.shape), tuple(v.shape))

fig, axes = plt.subplots(1, H, figsize=(2.6 * H, 2.8), constrained_layout=True)
for h, ax in enumerate(axes):
    im = ax.imshow(w_ak[0, h].detach().numpy(), vmin=0, vmax=1, cmap="viridis")
    ax.set_title(f"head {h}")
    ax.set_xlabel("key (encoder pos)")
    ax.set_ylabel("query (decoder pos)")
fig.colorbar(im, ax=axes, label="weight")
fig.savefig(f"{OUT}/03_heads.png", dpi=110)
plt.show()

# %% [markdown]
# Each head has its own weight matrix. More heads are not automatically better: with `D` fixed,
# each extra head gets a smaller `E`, and trained models often have redundant heads that can be
# pruned. The head count is a hyper-parameter to test, not to maximise.
#
# ## Sharing keys and values: GQA and MQA
#
# At decoding time the keys and values of every past token are kept in memory (lesson 9). Grouped
# query attention (GQA) lets groups of query heads share one key/value head; multi-query attention
# (MQA) is the extreme with a single key/value head. The queries keep all `H` heads.

# %%
for kv_heads in (H, H // 2, 1):
    m = attnkit.MultiHeadAttention(D, H, kv_heads=kv_heads, dtype=torch.float64)
    q, k, v = m.project(x, y, y)
    # by hand: repeat each key/value head for the query heads of its group
    rep = H // kv_heads
    k_full, v_full = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    o = torch.softmax(q @ k_full.transpose(-2, -1) / E**0.5, -1) @ v_full
    diff = (m.merge(o) - m(x, y, y)[0]).abs().max().item()
    assert diff < 1e-12 and k.shape[1] == kv_heads
    n_kv = sum(p.numel() for p in (*m.k_proj.parameters(), *m.v_proj.parameters()))
    print(f"kv_heads={kv_heads}: k shape {tuple(k.shape)}, K/V parameters {n_kv}, max |by hand - attnkit| = {diff:.1e}")

# %% [markdown]
# ## Exercises
#
# 1. Write `mha_by_hand` with a single `torch.einsum` for the scores and one for the weighted sum,
#    and check it against `ref` again.
# 2. Add a causal mask to the self-attention case by hand (`-inf` above the diagonal) and compare
#    with `ours(x, x, x, causal=True)`.
# 3. For `D = 4096`, `H = 32` and a context of 8192 tokens in float16, how many bytes of keys and
#    values does one layer keep per sequence with MHA, GQA (8 key/value heads) and MQA?
#
# Solutions: `solutions/03_multihead_by_hand.py`.
