"""第 14 课练习的答案。作为脚本运行；每个答案打印出验证它的数字。"""

import torch

from attnkit import MultiHeadAttention
from attnkit.cache import H2OCache, QuantizedCache
from attnkit.modules.rotary import RotaryEmbedding

torch.manual_seed(0)

# 1. 值为普通大小的汇点：驱逐它仍然对输出影响最大，因为被重新分配的是它的权重（而不是它的值）；
#    真正的汇点还会让自己的值很小，所以它几乎不往输出里加东西
S, E = 32, 16
k, v = torch.randn(S, E, dtype=torch.float64), torch.randn(S, E, dtype=torch.float64)
common = 1.2 * torch.randn(E, dtype=torch.float64)
q = torch.randn(8, E, dtype=torch.float64) + common
k[0], v[0] = common, v[1]


def attend(keep):
    return torch.softmax(q @ k[keep].T / E**0.5, -1) @ v[keep]


full = attend(list(range(S)))
change = lambda out: ((out - full).norm(dim=-1) / full.norm(dim=-1)).mean().item()
c_sink, c_mid = change(attend(list(range(1, S)))), change(attend([i for i in range(S) if i != 15]))
print(f"1. 驱逐汇点：{c_sink:.2f}；驱逐第 15 个词元：{c_mid:.3f}")
assert c_sink > c_mid

# 2. 只有 2 个最近槽位的 H2O：最老的词元被更多查询关注过，累计得分更大，于是赢得重要词元的槽位
D, H, T = 32, 4, 120
layer = MultiHeadAttention(D, H, rotary=RotaryEmbedding(D // H, max_positions=4096)).double().eval()
x = torch.randn(1, T, D, dtype=torch.float64)
cache = H2OCache(16, recent=2)
with torch.no_grad():
    for t in range(T):
        layer(x[:, t:t + 1], cache=cache, causal=True)
kept = cache.kept_positions()[0]
print("2. H2O(16, recent=2) 保留", kept)
assert sum(p < T // 2 for p in kept[:-2]) >= len(kept[:-2]) // 2, "大多数重要词元来自前半段"

# 3. E = 64 时让 4 位至少比 fp32 小 5 倍的最小分组
kk, vv = torch.randn(1, 4, 1024, 64), torch.randn(1, 4, 1024, 64)
fp32 = 2 * 4 * 1024 * 64 * 4
ratio = {}
for group in (4, 8, 16, 32, 64):
    c = QuantizedCache(bits=4, group=group, residual=32)
    c.update(kk, vv)
    ratio[group] = fp32 / c.kv_nbytes
best = min(g for g, r in ratio.items() if r >= 5)
print("3. 各分组下 fp32 / 4 位的字节比：", {g: round(r, 2) for g, r in ratio.items()}, "-> 最小分组：", best)
assert ratio[best] >= 5
