"""Solutions to lesson 8's exercises. Run as a script; each answer prints the number that checks it."""

import numpy as np
import torch

import attnkit

E, p = 8, 7
x = torch.randn(1, 1, 1, E, dtype=torch.float64)

# 1. rotate each (even, odd) pair by p * 10000^(-2i/E)
theta = p * 10000.0 ** (-np.arange(0, E, 2) / E)
a, b = x[0, 0, 0, 0::2].numpy(), x[0, 0, 0, 1::2].numpy()
mine = np.empty(E)
mine[0::2], mine[1::2] = a * np.cos(theta) - b * np.sin(theta), a * np.sin(theta) + b * np.cos(theta)
theirs = attnkit.RotaryEmbedding(E, interleaved=True)(x, torch.tensor([p]))[0, 0, 0].numpy()
assert np.abs(mine - theirs).max() < 1e-12
print("1. max |by hand - attnkit| =", np.abs(mine - theirs).max())

# 2. weights from the bias alone: exp(-m |i-j|), normalised
H, N = 8, 64
bias = attnkit.biases.ALiBi(H).materialize(N, N)[0, :, -1]  # last query, (H, N)
w = torch.softmax(bias, -1)
assert (w > 0.01).sum(-1).diff().ge(0).all()
print("2. keys above 1% weight per head:", (w > 0.01).sum(-1).tolist())

# 3. unidirectional buckets send every future offset to bucket 0, the same as offset 0
rel = torch.tensor([-3, -1, 0, 1, 3])  # key minus query position: positive = future
assert attnkit.biases.t5_bucket(rel, bidirectional=False, num_buckets=32, max_distance=128)[2:].eq(0).all()
print("3. buckets:", attnkit.biases.t5_bucket(rel, bidirectional=False, num_buckets=32, max_distance=128).tolist(),
      "- the causal mask removes future keys before the bias could matter")
