"""Solutions to lesson 14's exercises. Run as a script; each answer prints the number that checks it."""

import torch

from attnkit import MultiHeadAttention
from attnkit.cache import H2OCache, QuantizedCache
from attnkit.modules.rotary import RotaryEmbedding

torch.manual_seed(0)

# 1. a sink with an ordinary value: evicting it still moves the outputs most, because its weight (not
#    its value) is what gets redistributed; a real sink also keeps its value small, so it adds little
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
print(f"1. evicting the sink: {c_sink:.2f}; evicting token 15: {c_mid:.3f}")
assert c_sink > c_mid

# 2. H2O with only 2 recent slots: the oldest tokens have been attended by more queries, so their
#    accumulated scores are larger and they win the heavy-hitter slots
D, H, T = 32, 4, 120
layer = MultiHeadAttention(D, H, rotary=RotaryEmbedding(D // H, max_positions=4096)).double().eval()
x = torch.randn(1, T, D, dtype=torch.float64)
cache = H2OCache(16, recent=2)
with torch.no_grad():
    for t in range(T):
        layer(x[:, t:t + 1], cache=cache, causal=True)
kept = cache.kept_positions()[0]
print("2. H2O(16, recent=2) keeps", kept)
assert sum(p < T // 2 for p in kept[:-2]) >= len(kept[:-2]) // 2, "most heavy hitters come from the first half"

# 3. the smallest group that keeps 4-bit at least 5x below fp32 at E = 64
kk, vv = torch.randn(1, 4, 1024, 64), torch.randn(1, 4, 1024, 64)
fp32 = 2 * 4 * 1024 * 64 * 4
ratio = {}
for group in (4, 8, 16, 32, 64):
    c = QuantizedCache(bits=4, group=group, residual=32)
    c.update(kk, vv)
    ratio[group] = fp32 / c.kv_nbytes
best = min(g for g, r in ratio.items() if r >= 5)
print("3. fp32 / 4-bit bytes by group:", {g: round(r, 2) for g, r in ratio.items()}, "-> smallest group:", best)
assert ratio[best] >= 5
