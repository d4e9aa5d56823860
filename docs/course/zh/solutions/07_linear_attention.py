"""第 7 课练习的解答。作为脚本运行；每个答案都打印出验证它的数值。"""

import torch

import attnkit

torch.manual_seed(7)
n, E = 128, 32
q = torch.randn(1, 1, n, E, dtype=torch.float64) * 0.5
k = torch.randn(1, 1, n, E, dtype=torch.float64) * 0.5
v = torch.randn(1, 1, n, E, dtype=torch.float64)


def favor_error(q, k, F=256):
    exact = attnkit.attention(q, k, v).out
    approx = attnkit.linear_attention(q, k, v, feature_map="favor", num_features=F).out
    return ((approx - exact).norm() / exact.norm()).item()


# 1. 估计量的方差按 exp(|q + k|^2) 增长：分数越尖锐，估计越嘈杂
print(f"1. FAVOR+ error: scale 1 -> {favor_error(q, k):.3f}, scale 2 -> {favor_error(2 * q, 2 * k):.3f}")

# 2. 把因果线性注意力写成按位置递推的 RNN
assert favor_error(2 * q, 2 * k) > favor_error(q, k)
phi = lambda x: torch.nn.functional.elu(x) + 1
U, z, outs = torch.zeros(E, E, dtype=torch.float64), torch.zeros(E, dtype=torch.float64), []
for i in range(n):
    fk, fq = phi(k[0, 0, i]), phi(q[0, 0, i])
    U, z = U + torch.outer(fk, v[0, 0, i]), z + fk  # 状态大小固定：所以每解码一个词只要 O(1)
    outs.append(fq @ U / (fq @ z))
rnn = torch.stack(outs)
assert (rnn - attnkit.linear_attention(q, k, v, mask=attnkit.masks.causal()).out[0, 0]).abs().max() < 1e-12
print("2. max |RNN - attnkit causal| =", (rnn - attnkit.linear_attention(q, k, v, mask=attnkit.masks.causal()).out[0, 0]).abs().max().item())

# 3. 2 n^2 E = 3 n F E  =>  n = 1.5 F
print("3. crossover n = 1.5 * 256 =", int(1.5 * 256))
