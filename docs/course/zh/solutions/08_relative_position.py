"""第 8 课练习的解答。作为脚本运行；每个答案都打印出验证它的数值。"""

import numpy as np
import torch

import attnkit

E, p = 8, 7
x = torch.randn(1, 1, 1, E, dtype=torch.float64)

# 1. 把每对（偶, 奇）坐标旋转 p * 10000^(-2i/E)
theta = p * 10000.0 ** (-np.arange(0, E, 2) / E)
a, b = x[0, 0, 0, 0::2].numpy(), x[0, 0, 0, 1::2].numpy()
mine = np.empty(E)
mine[0::2], mine[1::2] = a * np.cos(theta) - b * np.sin(theta), a * np.sin(theta) + b * np.cos(theta)
theirs = attnkit.RotaryEmbedding(E, interleaved=True)(x, torch.tensor([p]))[0, 0, 0].numpy()
assert np.abs(mine - theirs).max() < 1e-12
print("1. max |by hand - attnkit| =", np.abs(mine - theirs).max())

# 2. 只用偏置得到的权重：exp(-m |i-j|) 再归一化
H, N = 8, 64
bias = attnkit.biases.ALiBi(H).materialize(N, N)[0, :, -1]  # 最后一个查询，(H, N)
w = torch.softmax(bias, -1)
assert (w > 0.01).sum(-1).diff().ge(0).all()
print("2. keys above 1% weight per head:", (w > 0.01).sum(-1).tolist())

# 3. 单向分桶把所有未来偏移都放进 0 号桶，与偏移 0 相同
rel = torch.tensor([-3, -1, 0, 1, 3])  # 键位置减查询位置：正数表示未来
assert attnkit.biases.t5_bucket(rel, bidirectional=False, num_buckets=32, max_distance=128)[2:].eq(0).all()
print("3. buckets:", attnkit.biases.t5_bucket(rel, bidirectional=False, num_buckets=32, max_distance=128).tolist(),
      "- the causal mask removes future keys before the bias could matter")
