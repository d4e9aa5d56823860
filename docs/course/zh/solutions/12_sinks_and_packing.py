"""第 12 课练习的解答。作为脚本运行；每个答案都打印出验证它的数值。"""

import numpy as np
import torch

import attnkit

torch.manual_seed(0)
B, H, L, E = 1, 2, 6, 8
q, k, v = (torch.randn(B, H, L, E, dtype=torch.float64) for _ in range(3))

# 1. 当且仅当 s = lse 时 sigmoid(lse - s) = 1/2：此时汇点的分量与所有真实键加起来一样大
lse = torch.logsumexp(q @ k.transpose(-2, -1) / E**0.5, -1)  # (B, H, L)
s = lse[0, 0, 0].item()
plain = attnkit.attention(q, k, v).out[0, 0, 0]
half = attnkit.attention(q, k, v, sinks=torch.tensor([s, 0.0], dtype=torch.float64)).out[0, 0, 0]
torch.testing.assert_close(half, plain / 2, rtol=1e-12, atol=1e-12)
print(f"1. s = 查询 0 的 lse = {s:.4f}：输出恰好是普通输出的一半")

# 2. 批越大，批内最长的序列越长，其余序列要填充得越多
rng = np.random.default_rng(0)
lens = rng.integers(15, 86, size=2048)  # 代用的长度；在笔记本里可换成本课的真实长度
waste = {}
for bs in (8, 32, 128):
    pad = sum(len(lens[i:i + bs]) * lens[i:i + bs].max() for i in range(0, len(lens), bs))
    waste[bs] = 1 - lens.sum() / pad
    print(f"2. 批大小 {bs:3d}：{100 * waste[bs]:.0f}% 是填充")
assert waste[8] < waste[32] < waste[128]

# 3. 因果打包：每条序列各自因果，位置从它自己的开头计数
seq_lens = [5, 9, 3]
cu = torch.tensor([0, 5, 14, 17])
qp, kp, vp = (torch.randn(17, H, E, dtype=torch.float64) for _ in range(3))
packed = attnkit.varlen_attention(qp, kp, vp, cu, mask=attnkit.masks.causal()).out
for i in range(3):
    a, b = int(cu[i]), int(cu[i + 1])
    one = lambda t: t[a:b].transpose(0, 1).unsqueeze(0)
    alone = attnkit.attention(one(qp), one(kp), one(vp), mask=attnkit.masks.causal()).out[0].transpose(0, 1)
    torch.testing.assert_close(packed[a:b], alone, rtol=1e-12, atol=1e-12)
print("3. 因果 varlen_attention = 逐条因果注意力，长度", seq_lens)
