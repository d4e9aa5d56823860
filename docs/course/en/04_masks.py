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
# # Lesson 4 — Masks: padding, causal, sliding window
#
# **Question this lesson answers:** which keys is a query *allowed* to see, and what breaks when a
# mask is missing?
#
# A mask is a boolean (L, S) table; in attnkit `True` means *may attend*. Masked scores are set to
# `-inf` before the softmax, so their weight is exactly 0 (never a large negative number such as
# `-1e9`, which turns a fully masked row into a uniform average over the pads and does not fit in
# float16). Three masks cover most models:
#
# * **padding** — a batch holds sentences of different lengths; the pad tokens at the end are not data;
# * **causal** — a language model predicting token `i` must not see tokens after `i`;
# * **sliding window** — each query sees only its `w` most recent keys (Longformer, Mistral).

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
# ## Pictures of the three masks
#
# `mask.materialize(L, S)` turns a mask object into its dense (B, H, L, S) table. Masks combine with
# `&` and `|`: a causal model on a padded batch uses `causal() & padding_mask(...)`.

# %%
N = 8 if SMALL else 12
masks = {
    "padding (5 valid keys)": attnkit.masks.padding_mask(torch.tensor([5]), max_len=N),
    "causal": attnkit.masks.causal(),
    "sliding window (left=3)": attnkit.masks.sliding_window(left=3),
    "causal & padding": attnkit.masks.causal() & attnkit.masks.padding_mask(torch.tensor([5]), max_len=N),
}
fig, axes = plt.subplots(1, len(masks), figsize=(3.3 * len(masks), 3.4), constrained_layout=True)
for ax, (name, m) in zip(axes, masks.items()):
    table = m.materialize(N, N, batch=1)[0, 0]
    im = ax.imshow(table.float().numpy(), vmin=0, vmax=1, cmap="Greys_r")
    ax.set_title(name, fontsize=10)
    ax.set_xlabel("key position j")
    ax.set_ylabel("query position i")
    print(f"{name:25s} allowed pairs: {int(table.sum())} of {N * N}")
fig.colorbar(im, ax=axes, ticks=[0, 1], label="1 = may attend, 0 = masked")
fig.savefig(f"{OUT}/04_masks.png", dpi=110)
plt.show()

# %% [markdown]
# ## Measuring a leak
#
# A mask is correct when the output for query `i` does not change if a token it must not see
# changes. We run causal self-attention twice: once on `x`, once on `x` with only the *last* token
# replaced. With the causal mask, every earlier position must give the same output; without it,
# all positions move — the model "sees the future", which in training means it learns to copy the
# answer instead of predicting it.

# %%
D, H = 16, 4
mha = attnkit.MultiHeadAttention(D, H, dtype=torch.float64).eval()
x = torch.randn(1, N, D, dtype=torch.float64)
x2 = x.clone()
x2[:, -1] = torch.randn(D, dtype=torch.float64)  # change only the future (the last token)
for causal in (True, False):
    a, _ = mha(x, causal=causal)
    b, _ = mha(x2, causal=causal)
    leak = (a[:, :-1] - b[:, :-1]).abs().max().item()  # positions 0..N-2 must not notice
    assert (leak < 1e-12) == causal
    print(f"causal={causal!s:5s}: max change at earlier positions = {leak:.2e}")

# %% [markdown]
# The same test for padding: change the values stored at pad positions. With the padding mask the
# real tokens' outputs stay put; without it, garbage in the pads changes real results.

# %%
n_valid = 5
pad = attnkit.masks.padding_mask(torch.tensor([n_valid]), max_len=N)
x3 = x.clone()
x3[:, n_valid:] = 100 * torch.randn(N - n_valid, D, dtype=torch.float64)
for mask in (pad, None):
    a, _ = mha(x, mask=mask)
    b, _ = mha(x3, mask=mask)
    assert ((a[:, :n_valid] - b[:, :n_valid]).abs().max() < 1e-12) == (mask is not None)
    print(f"padding mask {'on ' if mask is not None else 'off'}: max change of real tokens = {(a[:, :n_valid] - b[:, :n_valid]).abs().max().item():.2e}")

# %% [markdown]
# ## A query with nothing to see
#
# Combine masks carelessly and a row can end up with no allowed key at all (here: a window that
# looks only *ahead* of a causal model). A softmax over only `-inf` is `0/0 = NaN`; attnkit returns
# zeros for such rows and counts them in the report.

# %%
empty = attnkit.masks.causal() & attnkit.masks.sliding_window(left=0, right=2) & ~attnkit.masks.sliding_window(left=0, right=0)
q = torch.randn(1, 1, N, 8)
res = attnkit.attention(q, q, q, mask=empty)
assert res.report.fully_masked_rows == N and (res.out == 0).all()
print("fully masked rows:", res.report.fully_masked_rows, "| any NaN:", bool(res.out.isnan().any()))
s = (q @ q.transpose(-2, -1))[0, 0].masked_fill(~empty.materialize(N, N)[0, 0], float("-inf"))
assert torch.softmax(s, -1).isnan().all()
print("a plain softmax of those rows gives:", torch.softmax(s, -1)[0, :3].tolist())

# %% [markdown]
# ## Exercises
#
# 1. Build a *prefix-LM* mask by hand (the first `p` tokens see each other in both directions, the
#    rest are causal) and compare with `attnkit.masks.prefix_lm(p).materialize(N, N)`.
# 2. Use `-1e9` instead of `-inf` in float16 for a padding mask and measure the weight that leaks onto
#    the pads. What happens for a fully masked row?
# 3. For a sliding window of `w` keys and sequence length `n`, how many (query, key) pairs are
#    allowed? Check your formula against `materialize` for a few `n` and `w`.
#
# Solutions: `solutions/04_masks.py`.
