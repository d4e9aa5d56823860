"""Solutions to lesson 1's exercises. Run as a script; every answer is checked by an assert-free
comparison printed next to attnkit's result (the course test runs this file too)."""

import os

import numpy as np
import torch

import attnkit

rng = np.random.default_rng(1)
L, S, d, n_valid = 3, 6, 8, 4
q, k, v = rng.standard_normal((L, d)), rng.standard_normal((S, d)), rng.standard_normal((S, d))


# 1. padding mask: -inf scores on padded keys, and a guard for rows with no key at all
def masked_attention(q, k, v, keep):  # keep: (S,) bool, True = may attend
    s = q @ k.T / np.sqrt(d)
    s = np.where(keep[None, :], s, -np.inf)
    m = s.max(axis=1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)  # a fully masked row has max -inf: exp(-inf - 0) = 0, no NaN
    e = np.exp(s - m)
    z = e.sum(axis=1, keepdims=True)
    w = np.divide(e, z, out=np.zeros_like(e), where=z > 0)  # empty row -> weights 0 -> output 0
    return w @ v, w


keep = np.arange(S) < n_valid
out, w = masked_attention(q, k, v, keep)
t = lambda a: torch.tensor(a)[None, None]
res = attnkit.attention(t(q), t(k), t(v), mask=attnkit.masks.padding_mask(torch.tensor([n_valid]), max_len=S))
assert w[:, n_valid:].max() == 0 and np.abs(res.out[0, 0].numpy() - out).max() < 1e-12
print("1. weights on padded keys:", w[:, n_valid:].max(), "| max diff vs attnkit:", float(np.abs(res.out[0, 0].numpy() - out).max()))
out0, w0 = masked_attention(q, k, v, np.zeros(S, dtype=bool))
assert (out0 == 0).all() and (w0 == 0).all()
print("   fully masked query returns:", out0[0, :3], "(zeros, not NaN)")

# 2. temperature: entropy of one row; tau -> infinity gives uniform weights = average pooling
s = q[0] @ k.T / np.sqrt(d)
for tau in (0.1, 0.3, 1.0, 3.0, 10.0, 1e6):
    p = np.exp(s / tau - (s / tau).max())
    p /= p.sum()
    ent = -(p * np.log(p + 1e-300)).sum()
    assert 0 <= ent <= np.log(S) + 1e-12
    print(f"2. tau={tau:>9}: entropy={ent:.3f} (uniform: {np.log(S):.3f})")

# 3. additive score: only step 1 changes; normalise and weighted sum stay the same
W_q, W_k, w_vec = rng.standard_normal((d, d)), rng.standard_normal((d, d)), rng.standard_normal(d)
s_add = np.tanh((q @ W_q.T)[:, None, :] + (k @ W_k.T)[None, :, :]) @ w_vec  # (L, S)
p = np.exp(s_add - s_add.max(1, keepdims=True))
p /= p.sum(1, keepdims=True)
assert np.allclose(p.sum(1), 1.0) and (p @ v).shape == (L, d)
print("3. additive weights rows sum to", p.sum(1), "; output shape", (p @ v).shape)
if os.environ.get("ATTNKIT_COURSE_SMALL") != "1":
    print("   (try larger d and see the additive score's cost: an (L, S, d) tensor instead of (L, S))")
