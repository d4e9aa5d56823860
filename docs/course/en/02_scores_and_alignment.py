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
# # Lesson 2 — Scoring functions and alignment
#
# **Question this lesson answers:** how many ways are there to say "this key matches this query",
# and what does a learned alignment look like?
#
# Step 1 of attention (lesson 1) is the *score*. The normalise and weighted-sum steps never change;
# the score is where attention variants differ. The classic choices, for a query `q` and a key `k`
# of size `d`:
#
# | name | score | origin |
# |---|---|---|
# | dot | `q · k` | Luong et al. 2015 |
# | scaled dot | `q · k / sqrt(d)` | Vaswani et al. 2017 |
# | general | `qᵀ W k`, a learned `W` (d, d) | Luong et al. 2015 |
# | additive | `vᵀ tanh(W_q q + W_k k)` | Bahdanau et al. 2015 |
# | cosine | `τ · cos(q, k)` | Swin v2 |
#
# Why the `sqrt(d)`: unbounded scores (dot, general) grow with `d`, and a softmax over large
# numbers is nearly one-hot with almost no gradient — it cannot learn to move. attnkit's Luong
# layer met exactly this on the Bible pairs (width 138): unscaled, its weights piled onto one source
# token within 50 training steps and stayed there; divided by `sqrt(d)` they stayed spread. The
# additive score is bounded by its `tanh` and does not need it.
#
# Attention was born in machine translation, *before* the Transformer: a recurrent encoder squeezed
# a whole source sentence into one fixed vector, and long sentences lost their beginnings (the
# fixed-vector bottleneck). Bahdanau's decoder instead looks back at every encoder state at every
# step and *aligns* each output word with the source words it needs. So attention is not the same
# thing as the Transformer — that is the first misconception this course corrects.

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
# ## Four scores on the same query and keys
#
# `attnkit.scores` holds each score as a small module mapping q (B, H, L, E) and k (B, H, S, E) to
# scores (B, H, L, S). `attnkit.attention(..., score=...)` takes any of them.

# %%
E = 8
L, S = (3, 5) if SMALL else (4, 8)
q = torch.randn(1, 1, L, E, dtype=torch.float64)
k = torch.randn(1, 1, S, E, dtype=torch.float64)
v = torch.randn(1, 1, S, E, dtype=torch.float64)
scores = {
    "dot": attnkit.scores.DotScore(),
    "scaled_dot": attnkit.scores.ScaledDotScore(),
    "general": attnkit.scores.GeneralScore(E).double(),
    "additive": attnkit.scores.AdditiveScore(E).double(),
    "cosine": attnkit.scores.CosineScore(init_temperature=10.0).double(),
}
weights = {}
for name, sc in scores.items():
    raw = sc(q, k) * sc.default_scale(E)  # the score times its default scale, as attnkit applies it
    by_hand = torch.softmax(raw, dim=-1)
    res = attnkit.attention(q, k, v, score=sc, return_weights=True)
    weights[name] = res.weights[0, 0].detach().numpy()
    diff = (res.weights[0, 0] - by_hand[0, 0]).abs().max().item()
    assert diff < 1e-12
    print(f"{name:11s} score range [{raw.min().item():6.2f}, {raw.max().item():6.2f}]  max |attnkit - by hand| = {diff:.1e}  backend={res.report.backend}")

# %% [markdown]
# The unscaled dot score spreads widest, so its softmax is the sharpest; the cosine score is bounded
# by `±τ`. Below, one heat map per score: same query, same keys, different weights.

# %%
fig, axes = plt.subplots(1, len(weights), figsize=(3.2 * len(weights), 3.2), constrained_layout=True)
for ax, (name, w) in zip(axes, weights.items()):
    im = ax.imshow(w, vmin=0, vmax=1, cmap="viridis")
    ax.set_title(name)
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
fig.colorbar(im, ax=axes, label="weight w_ij")
fig.savefig(f"{OUT}/02_scores.png", dpi=110)
plt.show()

# %% [markdown]
# ## A tiny Bahdanau model learns to align
#
# Task: reverse a sequence of digits. A GRU encoder reads the source; at every output step the
# decoder's hidden state is the query, the encoder states are keys and values, and the additive
# score decides where to look. Perfect alignment for reversal is the anti-diagonal: output step
# `t` should look at source position `S - 1 - t`. Nobody tells the model that; it has to find it.

# %%
V_SIZE, SRC_LEN, HID = 10, 6, 32


class TinyBahdanau(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V_SIZE + 1, HID)  # token V_SIZE is the start symbol
        self.enc = torch.nn.GRU(HID, HID, batch_first=True)
        self.dec = torch.nn.GRUCell(2 * HID, HID)
        self.score = attnkit.scores.AdditiveScore(HID)
        self.out = torch.nn.Linear(2 * HID, V_SIZE)

    def forward(self, src, tgt_in):
        keys, h = self.enc(self.emb(src))  # keys (B, S, HID): one state per source token
        h, ctx = h[0], torch.zeros_like(h[0])
        logits, align = [], []
        for t in range(tgt_in.shape[1]):
            h = self.dec(torch.cat([self.emb(tgt_in[:, t]), ctx], -1), h)
            res = attnkit.attention(h[:, None, None], keys[:, None], keys[:, None], score=self.score, return_weights=True)
            ctx = res.out[:, 0, 0]
            align.append(res.weights[:, 0, 0])  # (B, S): where step t looked
            logits.append(self.out(torch.cat([h, ctx], -1)))
        return torch.stack(logits, 1), torch.stack(align, 1)


def batch(n):
    src = torch.randint(0, V_SIZE, (n, SRC_LEN))
    tgt = src.flip(1)
    tgt_in = torch.cat([torch.full((n, 1), V_SIZE), tgt[:, :-1]], 1)  # teacher forcing: shift right
    return src, tgt_in, tgt


model = TinyBahdanau()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
steps = 40 if SMALL else 400
for step in range(steps):
    src, tgt_in, tgt = batch(64)
    logits, _ = model(src, tgt_in)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V_SIZE), tgt.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % max(1, steps // 4) == 0 or step == steps - 1:
        acc = (logits.argmax(-1) == tgt).float().mean().item()
        print(f"step {step:4d}  loss {loss.item():.3f}  token accuracy {acc:.2f}")

# %% [markdown]
# The heat map shows, for one test sequence, the weights of each output step over the source
# positions. After training (at the default size) the mass sits on the anti-diagonal. The small
# run used by the test suite is too short to learn it — run the lesson at its default size to see.

# %%
model.eval()
assert acc > 2 / V_SIZE
with torch.no_grad():
    src, tgt_in, tgt = batch(200)
    logits, align = model(src, tgt_in)
on_diag = align[:, torch.arange(SRC_LEN), torch.arange(SRC_LEN).flip(0)].mean().item()
assert on_diag > 1 / SRC_LEN
print(f"mean weight on the anti-diagonal: {on_diag:.2f} (uniform would be {1 / SRC_LEN:.2f})")
fig, ax = plt.subplots(figsize=(4.5, 4), constrained_layout=True)
im = ax.imshow(align[0].numpy(), vmin=0, vmax=1, cmap="viridis")
ax.set_xticks(range(SRC_LEN), [str(int(t)) for t in src[0]])
ax.set_yticks(range(SRC_LEN), [str(int(t)) for t in tgt[0]])
ax.set_xlabel("source token (position 0..S-1)")
ax.set_ylabel("output token (step 0..S-1)")
ax.set_title("Bahdanau alignment, reversal task")
fig.colorbar(im, ax=ax, label="attention weight")
fig.savefig(f"{OUT}/02_alignment.png", dpi=110)
plt.show()

# %% [markdown]
# An alignment map is a picture of *where the model looked*, not a proof of *why it answered*.
# Attention weights are not an explanation: other paths (here the recurrent state itself) carry
# information too. Lesson 11 comes back to this.
#
# ## Exercises
#
# 1. Show that `GeneralScore` with `W = I` is the dot score, and that `CosineScore` equals the
#    scaled dot score of the L2-normalised q and k times `τ · sqrt(E)`. Check both numerically.
# 2. Replace the additive score in `TinyBahdanau` by `ScaledDotScore()` and train again. Does it
#    still find the anti-diagonal? Compare the final accuracy.
# 3. The additive score builds a (B, H, L, S, A) hidden tensor. For L = S = 1024, E = A = 64 and
#    float32, how many bytes is that per head, against the (L, S) score matrix of the dot score?
#
# Solutions: `solutions/02_scores_and_alignment.py`.
