"""Solutions to lesson 4's exercises. Run as a script; each answer prints the number that checks it."""

import torch

import attnkit

N, p = 9, 4

# 1. prefix-LM: causal, plus full visibility inside the prefix
i, j = torch.arange(N)[:, None], torch.arange(N)[None, :]
mine = (j <= i) | ((i < p) & (j < p))
theirs = attnkit.masks.prefix_lm(p).materialize(N, N)[0, 0]
assert torch.equal(mine, theirs)
print("1. prefix-LM tables equal:", bool((mine == theirs).all()))

# 2. -1e9 in float16 overflows to -inf, and an all -1e9 row becomes uniform rather than empty
s = torch.randn(1, N, dtype=torch.float16)
keep = torch.arange(N) < 5
w_big = torch.softmax(s.float().masked_fill(~keep, -1e9), -1)
assert w_big[0, 5:].sum() == 0 and torch.tensor(-1e9, dtype=torch.float16).isinf()
print("2. weight on pads with -1e9 (float32 softmax):", w_big[0, 5:].sum().item())
print("   -1e9 as float16:", torch.tensor(-1e9, dtype=torch.float16).item())
row = torch.full((1, N), -1e9)
assert torch.allclose(torch.softmax(row, -1), torch.full((1, N), 1 / N))
print("   a fully masked row with -1e9 gives uniform weights:", torch.softmax(row, -1)[0, :3].tolist(), "- attention to padding")

# 3. window of w keys (the query itself and w-1 before): pairs = sum_i min(i+1, w)
for n, w in ((8, 3), (16, 5), (10, 10)):
    formula = sum(min(i + 1, w) for i in range(n))  # = n*w - w*(w-1)/2 when n >= w
    table = attnkit.masks.sliding_window(left=w - 1).materialize(n, n)
    assert int(table.sum()) == formula == n * w - w * (w - 1) // 2
    print(f"3. n={n:2d} w={w:2d}: formula {formula}, materialize {int(table.sum())}")
