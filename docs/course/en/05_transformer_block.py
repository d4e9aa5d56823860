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
# # Lesson 5 — The Transformer block
#
# **Question this lesson answers:** what does a Transformer layer add around attention, and why is
# each part there?
#
# An encoder layer is attention plus three supporting parts:
#
# * a **residual connection** `x + f(x)` around each sub-layer, so the signal and its gradient have a
#   direct path through a deep stack;
# * **layer normalisation** — each token's vector rescaled to mean 0 and variance 1 (then a learned
#   scale and shift). *Post-LN* (the 2017 paper) normalises after the residual sum:
#   `x = LN(x + f(x))`; *pre-LN* (GPT-2 and most models since) normalises the sub-layer's input:
#   `x = x + f(LN(x))`;
# * a position-wise **feed-forward** network `W_2 relu(W_1 x + b_1) + b_2`, usually 4× wider.
#
# And one thing outside the layer: **positional encoding**. Attention is permutation-equivariant —
# shuffle the tokens and the outputs shuffle the same way — so word order must be injected, for
# example by adding the sinusoids `PE(p, 2i) = sin(p / 10000^(2i/D))`, `PE(p, 2i+1) = cos(p / 10000^(2i/D))`.

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

from attnkit.modules.positional import SinusoidalPositionalEncoding

# %% [markdown]
# ## Attention alone ignores order
#
# Permute the tokens: self-attention's output is the same rows, permuted. Add positional encodings
# first and that symmetry is gone.

# %%
B, L, D, H = (2, 6, 16, 4) if SMALL else (4, 32, 64, 8)
mha = attnkit.MultiHeadAttention(D, H, dtype=torch.float64).eval()
x = torch.randn(B, L, D, dtype=torch.float64)
perm = torch.randperm(L)
out, _ = mha(x)
out_perm, _ = mha(x[:, perm])
assert (out[:, perm] - out_perm).abs().max() < 1e-12
print("no positions : max |f(x)[perm] - f(x[perm])| =", (out[:, perm] - out_perm).abs().max().item())
pe = SinusoidalPositionalEncoding(D, max_len=512, dtype=torch.float64)(torch.arange(L))  # (L, D)
out, _ = mha(x + pe)
out_perm, _ = mha(x[:, perm] + pe)
assert (out[:, perm] - out_perm).abs().max() > 1e-3
print("with PE      : max |f(x)[perm] - f(x[perm])| =", (out[:, perm] - out_perm).abs().max().item())

# %% [markdown]
# The sinusoid table, by hand and from attnkit. Each column pair is a sine/cosine of one wavelength,
# from 2π (left) to 10000·2π (right).

# %%
P = 64 if SMALL else 128
pos = np.arange(P)[:, None]
inv_freq = 1.0 / 10000 ** (np.arange(0, D, 2) / D)
table = np.zeros((P, D))
table[:, 0::2], table[:, 1::2] = np.sin(pos * inv_freq), np.cos(pos * inv_freq)
ours = SinusoidalPositionalEncoding(D, max_len=P, dtype=torch.float64)(torch.arange(P)).numpy()
assert np.abs(table - ours).max() < 1e-12
print("max |numpy table - attnkit table| =", np.abs(table - ours).max())
fig, ax = plt.subplots(figsize=(6, 4), constrained_layout=True)
im = ax.imshow(table, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1)
ax.set_xlabel("encoding dimension")
ax.set_ylabel("position p")
ax.set_title("sinusoidal positional encoding")
fig.colorbar(im, ax=ax, label="PE(p, dim)")
fig.savefig(f"{OUT}/05_positional_encoding.png", dpi=110)
plt.show()

# %% [markdown]
# ## A post-LN and a pre-LN layer by hand, against PyTorch
#
# We copy the weights of `torch.nn.TransformerEncoderLayer` into attnkit's attention (the
# feed-forward and the norms are reused as they are) and rebuild the layer from its formula.

# %%
def layer_by_hand(ref, x):
    attn = attnkit.MultiHeadAttention.from_torch(ref.self_attn)
    sa = lambda t: attn(t)[0]
    ff = lambda t: ref.linear2(torch.relu(ref.linear1(t)))
    if ref.norm_first:  # pre-LN: x + f(LN(x))
        x = x + sa(ref.norm1(x))
        return x + ff(ref.norm2(x))
    x = ref.norm1(x + sa(x))  # post-LN: LN(x + f(x))
    return ref.norm2(x + ff(x))


for norm_first in (False, True):
    ref = torch.nn.TransformerEncoderLayer(D, H, dim_feedforward=4 * D, dropout=0.0, batch_first=True, norm_first=norm_first)
    ref = ref.double().eval()
    with torch.no_grad():
        diff = (layer_by_hand(ref, x) - ref(x)).abs().max().item()
    assert diff < 1e-12
    print(f"norm_first={norm_first!s:5s}: max |by hand - torch| = {diff:.1e}")

# %% [markdown]
# ## Where to put the norm
#
# Xiong et al. 2020 (https://arxiv.org/abs/2002.04745) analyse where the gradients go at
# initialisation and argue that post-LN puts large gradients on the last layers, one reason its
# training needs a learning-rate warm-up, while pre-LN does not. Do not take a paper's claim on
# trust: measure the gradient norm of each layer's feed-forward weight in a stack at
# initialisation, and read the printout. (In this toy setting — small width, random inputs, a random
# linear loss, no final LayerNorm — the curves may not look like the paper's; ask why.)

# %%
depth = 6 if SMALL else 24


def layer_grads(norm_first):
    torch.manual_seed(0)
    layers = [torch.nn.TransformerEncoderLayer(D, H, 4 * D, dropout=0.0, batch_first=True, norm_first=norm_first) for _ in range(depth)]
    t = x.float()
    for layer in layers:
        t = layer(t)
    (t * torch.randn_like(t)).sum().backward()  # a random projection: sum() alone is constant after a LayerNorm
    return [layer.linear2.weight.grad.norm().item() for layer in layers]


fig, ax = plt.subplots(figsize=(5.5, 3.5), constrained_layout=True)
for norm_first, name in ((False, "post-LN"), (True, "pre-LN")):
    g = layer_grads(norm_first)
    print(f"{name}: gradient norm, first layer {g[0]:.3f}, last layer {g[-1]:.3f}")
    ax.plot(range(1, depth + 1), g, marker="o", label=name)
ax.set_xlabel("layer (1 = nearest the input)")
ax.set_ylabel("||dLoss/dW_2|| at initialisation")
ax.set_title(f"{depth}-layer encoder, D={D}")
ax.legend()
fig.savefig(f"{OUT}/05_layer_gradients.png", dpi=110)
plt.show()

# %% [markdown]
# ## Exercises
#
# 1. Show numerically that `PE(p + k)` is a linear function of `PE(p)`: for a fixed `k`, fit one
#    (D, D) matrix `M` with `PE(p + k) = PE(p) M` over all `p` by least squares. Is the residual ~0?
# 2. Rebuild `torch.nn.TransformerDecoderLayer` by hand (causal self-attention, then cross-attention
#    over a memory, then the feed-forward) and check it, with `norm_first=False`.
# 3. Count the parameters of one encoder layer with `D` and `dim_feedforward = 4D`. Which share
#    belongs to attention and which to the feed-forward network?
#
# Solutions: `solutions/05_transformer_block.py`.
