"""第 4 课练习的解答。作为脚本运行；每个答案都打印出验证它的数值。"""

import torch

import attnkit

N, p = 9, 4

# 1. prefix-LM：因果掩码，再加上前缀内部完全可见
i, j = torch.arange(N)[:, None], torch.arange(N)[None, :]
mine = (j <= i) | ((i < p) & (j < p))
theirs = attnkit.masks.prefix_lm(p).materialize(N, N)[0, 0]
assert torch.equal(mine, theirs)
print("1. prefix-LM tables equal:", bool((mine == theirs).all()))

# 2. float16 中 -1e9 溢出为 -inf；整行都是 -1e9 时得到均匀分布而不是空行
s = torch.randn(1, N, dtype=torch.float16)
keep = torch.arange(N) < 5
w_big = torch.softmax(s.float().masked_fill(~keep, -1e9), -1)
assert w_big[0, 5:].sum() == 0 and torch.tensor(-1e9, dtype=torch.float16).isinf()
print("2. weight on pads with -1e9 (float32 softmax):", w_big[0, 5:].sum().item())
print("   -1e9 as float16:", torch.tensor(-1e9, dtype=torch.float16).item())
row = torch.full((1, N), -1e9)
assert torch.allclose(torch.softmax(row, -1), torch.full((1, N), 1 / N))
print("   a fully masked row with -1e9 gives uniform weights:", torch.softmax(row, -1)[0, :3].tolist(), "- attention to padding")

# 3. 窗口含 w 个键（自身和之前 w-1 个）：对数 = Σ_i min(i+1, w)
for n, w in ((8, 3), (16, 5), (10, 10)):
    formula = sum(min(i + 1, w) for i in range(n))  # n >= w 时 = n*w - w*(w-1)/2
    table = attnkit.masks.sliding_window(left=w - 1).materialize(n, n)
    assert int(table.sum()) == formula == n * w - w * (w - 1) // 2
    print(f"3. n={n:2d} w={w:2d}: formula {formula}, materialize {int(table.sum())}")
