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
# # Lesson 9 — The KV cache
#
# **Question this lesson answers:** why does a language model not recompute attention over the whole
# prefix for every new token, and what does that cost in memory?
#
# A decoder generates one token at a time. With a causal mask, the keys and values of old tokens never
# change when a new token arrives (a token sees only its past). So instead of running the model on
# the whole prefix at each step — `O(t²)` work per step `t` in attention, `O(n³)` overall — we keep
# each layer's past keys and values in a **cache** and, at each step, project only the new token:
# one query against `t` cached keys, `O(t)` work. The price is memory: `2 · layers · kv_heads · E`
# numbers per token (lesson 3's GQA and MQA exist to shrink it).

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

import time

# %% [markdown]
# ## A tiny decoder, written out
#
# Two pre-LN layers with causal self-attention (attnkit's `MultiHeadAttention`), a learned position
# table and an output head. Untrained — equality of the two decoding paths does not need training.

# %%
VOCAB, D, H, LAYERS, MAX_LEN = 50, 32, 4, 2, 512


class TinyDecoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(VOCAB, D)
        self.pos = torch.nn.Embedding(MAX_LEN, D)
        self.attn = torch.nn.ModuleList([attnkit.MultiHeadAttention(D, H) for _ in range(LAYERS)])
        self.ln = torch.nn.ModuleList([torch.nn.LayerNorm(D) for _ in range(LAYERS)])
        self.head = torch.nn.Linear(D, VOCAB)

    def forward(self, tokens, start=0, caches=None):
        """tokens (B, L) at absolute positions start..start+L-1; caches: one per layer, or None."""
        x = self.tok(tokens) + self.pos(torch.arange(start, start + tokens.shape[1]))
        for i, (attn, ln) in enumerate(zip(self.attn, self.ln)):
            cache = None if caches is None else caches[i]
            x = x + attn(ln(x), causal=True, cache=cache)[0]  # with a cache: keys/values of earlier calls are reused
        return self.head(x)


model = TinyDecoder().eval()


@torch.no_grad()
def generate_recompute(prompt, n):
    seq = prompt
    for _ in range(n):
        logits = model(seq)  # the whole prefix, every step
        seq = torch.cat([seq, logits[:, -1:].argmax(-1)], 1)
    return seq


@torch.no_grad()
def generate_cached(prompt, n):
    caches = [attnkit.cache.DynamicCache() for _ in range(LAYERS)]
    logits = model(prompt, caches=caches)  # prefill: the prompt fills the caches
    seq = torch.cat([prompt, logits[:, -1:].argmax(-1)], 1)
    for _ in range(n - 1):
        logits = model(seq[:, -1:], start=seq.shape[1] - 1, caches=caches)  # only the new token
        seq = torch.cat([seq, logits[:, -1:].argmax(-1)], 1)
    return seq, caches

# %% [markdown]
# ## Same tokens, with and without the cache

# %%
prompt = torch.randint(0, VOCAB, (2, 8))
n_new = 16 if SMALL else 64
a = generate_recompute(prompt, n_new)
b, caches = generate_cached(prompt, n_new)
assert torch.equal(a, b)
print("identical tokens:", bool((a == b).all()))
with torch.no_grad():
    full = model(b)[:, -1]
    step = model(b[:, -1:], start=b.shape[1] - 1, caches=caches)[:, -1]
torch.testing.assert_close(step, full, rtol=1e-5, atol=1e-5)
print("max |logits recomputed - logits from cache| =", (full - step).abs().max().item())
print(f"layer 0 cache: {caches[0].kv_nbytes} bytes of K/V allocated, room for {caches[0].capacity} tokens "
      f"(holds {b.shape[1]} so far) x {b.shape[0]} sequences")

# %% [markdown]
# ## Tokens per second
#
# A rough measurement at a small size on this CPU (other programs share the machine, so treat the
# numbers as an illustration, not a benchmark). Recomputation slows down as the sequence grows;
# the cached decoder's per-token cost grows only with the attention over the cache.

# %%
assert caches[0].kv_nbytes == 2 * b.shape[0] * H * (D // H) * caches[0].capacity * 4 and caches[0].capacity >= b.shape[1]
lengths = [8, 16, 32] if SMALL else [16, 64, 128, 256]
rates = {"recompute": [], "KV cache": []}
for n in lengths:
    for name, fn in (("recompute", generate_recompute), ("KV cache", lambda p, n: generate_cached(p, n)[0])):
        t0 = time.perf_counter()
        fn(prompt, n)
        rates[name].append(n * prompt.shape[0] / (time.perf_counter() - t0))
    print(f"{n:4d} new tokens: recompute {rates['recompute'][-1]:8.0f} tok/s | cache {rates['KV cache'][-1]:8.0f} tok/s")
fig, ax = plt.subplots(figsize=(5.5, 3.6), constrained_layout=True)
for name, r in rates.items():
    ax.plot(lengths, r, marker="o", label=name)
ax.set_xlabel("tokens generated")
ax.set_ylabel("throughput (tokens / s, batch of 2)")
ax.set_title(f"greedy decoding, {LAYERS} layers, D={D}, CPU")
ax.legend()
fig.savefig(f"{OUT}/09_tokens_per_second.png", dpi=110)
plt.show()

# %% [markdown]
# ## Exercises
#
# 1. Replace `DynamicCache` by `attnkit.cache.SlidingWindowCache(window=8)` and pass the same window
#    as a mask to the recompute path (`mask=attnkit.masks.sliding_window(left=7)`). Are the tokens
#    still identical?
# 2. Compute the cache size formula `2 · layers · B · kv_heads · E · t · bytes` for this model and
#    compare it with `cache.kv_nbytes` after decoding.
# 3. Why can the cache *not* be used for a bidirectional (encoder) model?
#
# Solutions: `solutions/09_kv_cache.py`.
