"""第 10 课练习的解答。作为脚本运行；每个答案都打印出验证它的数值。"""

import os

import torch

from attnkit.data.images import load_images

SMALL = os.environ.get("ATTNKIT_COURSE_SMALL") == "1"
data = load_images("auto", train_limit=256 if SMALL else 6000, test_limit=128 if SMALL else 1000)


class CBAM(torch.nn.Module):  # 与课文中相同
    def __init__(self, c, r=4):
        super().__init__()
        self.mlp = torch.nn.Sequential(torch.nn.Linear(c, c // r), torch.nn.ReLU(), torch.nn.Linear(c // r, c))
        self.conv = torch.nn.Conv2d(2, 1, 7, padding=3, bias=False)

    def forward(self, x):
        x = x * torch.sigmoid(self.mlp(x.mean((2, 3))) + self.mlp(x.amax((2, 3))))[:, :, None, None]
        return x * torch.sigmoid(self.conv(torch.cat([x.mean(1, keepdim=True), x.amax(1, keepdim=True)], 1)))


def train(use_cbam, seed, steps):
    torch.manual_seed(seed)
    att = (lambda c: CBAM(c)) if use_cbam else (lambda c: torch.nn.Identity())
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), att(16), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), att(32),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, len(data.classes)),
    )
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    for _ in range(steps):
        idx = torch.randint(0, len(data.train_x), (64,))
        loss = torch.nn.functional.cross_entropy(net(data.train_x[idx]), data.train_y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        acc = (net(data.test_x).argmax(1) == data.test_y).float().mean().item()
    return acc, sum(p.numel() for p in net.parameters())


# 1. 有无 CBAM、多个种子：先报告波动，再谈提升
seeds, steps = ((0,), 10) if SMALL else ((0, 1, 2), 150)
for use in (False, True):
    runs = [train(use, s, steps) for s in seeds]
    accs = [a for a, _ in runs]
    print(f"1. CBAM={use!s:5s}: params {runs[0][1]}, accuracy per seed {[round(a, 3) for a in accs]}")

# 2. softmax 门控在 C 个通道上和为 1：每个约 1/C，所有通道都被压小
logits = torch.randn(1, 32)
assert abs(torch.softmax(logits, -1).mean().item() - 1 / 32) < 1e-6 and torch.sigmoid(logits).mean() > 1 / 32
print(f"2. sigmoid gate mean {torch.sigmoid(logits).mean().item():.3f} vs softmax gate mean {torch.softmax(logits, -1).mean().item():.3f} (= 1/C)")

# 3. 词元数 N = (224/P)^2；分数矩阵有 N^2 个元素：P 减半，开销乘以 16
for P in (16, 8):
    N = (224 // P) ** 2
    assert N == {16: 196, 8: 784}[P]
    print(f"3. P={P:2d}: N={N} tokens, N^2={N * N} scores per head")
