"""Solutions to lesson 12's exercises. Run as a script; each answer prints the number that checks it."""

import numpy as np
import torch

import attnkit

torch.manual_seed(0)
B, H, L, E = 1, 2, 6, 8
q, k, v = (torch.randn(B, H, L, E, dtype=torch.float64) for _ in range(3))

# 1. sigmoid(lse - s) = 1/2 exactly when s = lse: the sink then weighs as much as all real keys together
lse = torch.logsumexp(q @ k.transpose(-2, -1) / E**0.5, -1)  # (B, H, L)
s = lse[0, 0, 0].item()
plain = attnkit.attention(q, k, v).out[0, 0, 0]
half = attnkit.attention(q, k, v, sinks=torch.tensor([s, 0.0], dtype=torch.float64)).out[0, 0, 0]
torch.testing.assert_close(half, plain / 2, rtol=1e-12, atol=1e-12)
print(f"1. s = lse of query 0 = {s:.4f}: the output is exactly half of the plain one")

# 2. bigger batches: the longest sequence of a batch is longer, so the others pad more
rng = np.random.default_rng(0)
lens = rng.integers(15, 86, size=2048)  # stand-in lengths; use the lesson's real ones in a notebook
waste = {}
for bs in (8, 32, 128):
    pad = sum(len(lens[i:i + bs]) * lens[i:i + bs].max() for i in range(0, len(lens), bs))
    waste[bs] = 1 - lens.sum() / pad
    print(f"2. batch size {bs:3d}: {100 * waste[bs]:.0f} % padding")
assert waste[8] < waste[32] < waste[128]

# 3. causal packing: each sequence is causal on its own, positions counted from its own start
seq_lens = [5, 9, 3]
cu = torch.tensor([0, 5, 14, 17])
qp, kp, vp = (torch.randn(17, H, E, dtype=torch.float64) for _ in range(3))
packed = attnkit.varlen_attention(qp, kp, vp, cu, mask=attnkit.masks.causal()).out
for i in range(3):
    a, b = int(cu[i]), int(cu[i + 1])
    one = lambda t: t[a:b].transpose(0, 1).unsqueeze(0)
    alone = attnkit.attention(one(qp), one(kp), one(vp), mask=attnkit.masks.causal()).out[0].transpose(0, 1)
    torch.testing.assert_close(packed[a:b], alone, rtol=1e-12, atol=1e-12)
print("3. causal varlen_attention = causal attention per sequence, lengths", seq_lens)
