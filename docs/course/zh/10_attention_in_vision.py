# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 第 10 课 — 视觉中的注意力：SE、CBAM 与 ViT 的图块
#
# **本课回答的问题：** 卷积网络里的"注意力"指什么？一幅图像又怎样变成一串词元（token）？
#
# 注意力不只是词与词之间的自注意力。同样的思路——打分、归一化、重新加权——也可以作用在特征图
# (B, C, H, W) 的其他维度上：
#
# * **Squeeze-and-Excitation**（SE，Hu 等，2018）给*通道*加权：先用全局平均池化把每个通道"挤压"成
#   一个数，再让这 C 个数经过一个小的瓶颈 MLP（C → C/r → C），sigmoid 为每个通道给出 (0, 1) 之间的
#   门控值，用来缩放该通道；
# * **CBAM**（Woo 等，2018）先做通道注意力（平均池化*和*最大池化两个描述子经过共享 MLP），*再*做空间
#   注意力：对每个像素的通道均值和最大值做 7×7 卷积，为每个像素给出一个门控值；
# * **ViT**（Dosovitskiy 等，2021）把图像切成 P×P 的图块，每块展平后投影成 D 维词元，再对这些图块
#   词元做普通的自注意力。
#
# 注意 SE 和 CBAM 的门控用的是 sigmoid 而不是 softmax：各门控之间不竞争，也不必加起来等于 1。

# %%
import os
import sys

import matplotlib

if "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # 作为脚本运行（或在测试中）：图写入文件，不弹窗口
import matplotlib.pyplot as plt
import numpy as np
import torch

import attnkit

SMALL = os.environ.get("ATTNKIT_COURSE_SMALL") == "1"  # 测试套件以小尺寸运行每一课
OUT = os.environ.get("ATTNKIT_COURSE_OUT", "course_out")
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(0)
torch.manual_seed(0)

from attnkit.data.images import load_images

data = load_images("auto", train_limit=512 if SMALL else 6000, test_limit=256 if SMALL else 1000)
print(data.name, "train", tuple(data.train_x.shape), "test", tuple(data.test_x.shape))
C_IN, IMG = 1, data.image_size[0]

# %% [markdown]
# ## 从零实现 Squeeze-and-Excitation

# %%
class SE(torch.nn.Module):
    def __init__(self, channels, reduction=4):
        super().__init__()
        self.fc1 = torch.nn.Linear(channels, max(1, channels // reduction))
        self.fc2 = torch.nn.Linear(max(1, channels // reduction), channels)

    def forward(self, x):  # x (B, C, H, W)
        z = x.mean(dim=(2, 3))  # 挤压：每个通道一个数
        s = torch.sigmoid(self.fc2(torch.relu(self.fc1(z))))  # 激励：每个通道一个门控值
        self.last_gate = s.detach()
        return x * s[:, :, None, None]


class CBAM(torch.nn.Module):
    def __init__(self, channels, reduction=4, kernel=7):
        super().__init__()
        hidden = max(1, channels // reduction)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(channels, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, channels))
        self.conv = torch.nn.Conv2d(2, 1, kernel, padding=kernel // 2, bias=False)

    def forward(self, x):
        gate_c = torch.sigmoid(self.mlp(x.mean(dim=(2, 3))) + self.mlp(x.amax(dim=(2, 3))))  # 先通道
        x = x * gate_c[:, :, None, None]
        pooled = torch.cat([x.mean(1, keepdim=True), x.amax(1, keepdim=True)], 1)  # (B, 2, H, W)
        gate_s = torch.sigmoid(self.conv(pooled))  # 再空间：每个像素一个门控值
        self.last_map = gate_s.detach()
        return x * gate_s


x = torch.randn(2, 16, 10, 10)
se = SE(16)
assert sum(p.numel() for p in se.parameters()) == 2 * 16 * 16 // 4 + 16 + 4
assert torch.allclose(se(x), x * se.last_gate[:, :, None, None])
print("SE output shape", tuple(se(x).shape), "| gates of image 0:", np.round(se.last_gate[0, :6].numpy(), 3))
print("SE parameters:", sum(p.numel() for p in se.parameters()), "(formula 2 C^2/r + C + C/r =", 2 * 16 * 16 // 4 + 16 + 4, ")")

# %% [markdown]
# ### 用 attnkit 的模块得到相同的数（若可用）
#
# attnkit 在 `attnkit.modules` 中提供了 `SqueezeExcite` 和 `CBAM`。把我们的权重复制进去，比较输出。
# attnkit 的 CBAM 按作者发布的代码实现，在空间卷积之后多了一个 BatchNorm；评估模式下、统计量为初始值
# 时，它相当于除以 `sqrt(1 + 1e-5)`，所以两者相差约 1e-6。

# %%
try:
    from attnkit.modules.cbam import CBAM as AkCBAM
    from attnkit.modules.squeeze_excite import SqueezeExcite
except ImportError as err:  # 本课自己写的版本才是主线
    print("attnkit's vision modules are not available here:", err)
else:
    ak_se = SqueezeExcite(16, reduction=4)
    ak_se.load_state_dict(se.state_dict())
    assert (ak_se(x) - se(x)).abs().max() < 1e-6
    print("SE   max |ours - attnkit| =", (ak_se(x) - se(x)).abs().max().item())
    cb = CBAM(16)
    ak_cb = AkCBAM(16, reduction=4).eval()
    with torch.no_grad():
        for ours, theirs in zip((cb.mlp[0], cb.mlp[2]), (ak_cb.channel.mlp[0], ak_cb.channel.mlp[2])):
            theirs.weight.copy_(ours.weight)
            theirs.bias.copy_(ours.bias)
        ak_cb.spatial.conv.weight.copy_(cb.conv.weight)
        assert (ak_cb(x) - cb(x)).abs().max() < 1e-5
        print("CBAM max |ours - attnkit| =", (ak_cb(x) - cb(x)).abs().max().item())

# %% [markdown]
# ## 带 CBAM 的小 CNN，短暂训练
#
# 训练一个两层卷积网络，每层卷积之后接一个 CBAM，然后在测试图像上观察 CBAM 的空间门控。这张图显示
# 的是*门*开在哪里，它并不是对决策的解释：门控只是众多乘法因子之一，亮的区域只说明那里的特征被
# 传了下去，并不说明是它们导致了预测结果。

# %%
class SmallCNN(torch.nn.Module):
    def __init__(self, n_classes):
        super().__init__()
        self.c1, self.a1 = torch.nn.Conv2d(C_IN, 16, 3, padding=1), CBAM(16)
        self.c2, self.a2 = torch.nn.Conv2d(16, 32, 3, padding=1), CBAM(32)
        self.fc = torch.nn.Linear(32, n_classes)

    def forward(self, x):
        x = self.a1(torch.relu(self.c1(x)))
        x = self.a2(torch.relu(self.c2(torch.nn.functional.max_pool2d(x, 2))))
        return self.fc(x.mean(dim=(2, 3)))


net = SmallCNN(len(data.classes))
opt = torch.optim.Adam(net.parameters(), lr=3e-3)
steps = 10 if SMALL else 300
for step in range(steps):
    idx = torch.randint(0, len(data.train_x), (64,))
    loss = torch.nn.functional.cross_entropy(net(data.train_x[idx]), data.train_y[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
net.eval()
with torch.no_grad():
    acc = (net(data.test_x).argmax(1) == data.test_y).float().mean().item()
print(f"{steps} steps: last loss {loss.item():.3f}, test accuracy {acc:.3f}")

with torch.no_grad():
    net(data.test_x[:4])
fig, axes = plt.subplots(2, 4, figsize=(10, 5), constrained_layout=True)
for i in range(4):
    axes[0, i].imshow(data.test_x[i, 0].numpy(), cmap="gray")
    axes[0, i].set_title(f"label: {data.classes[int(data.test_y[i])]}", fontsize=9)
    im = axes[1, i].imshow(net.a1.last_map[i, 0].numpy(), vmin=0, vmax=1, cmap="viridis")
    axes[1, i].set_title("CBAM spatial gate (layer 1)", fontsize=9)
    for ax in axes[:, i]:
        ax.set_xlabel("x (pixels)")
        ax.set_ylabel("y (pixels)")
fig.colorbar(im, ax=axes[1, :], label="gate value (0 = closed, 1 = open)")
fig.savefig(f"{OUT}/10_cbam_gates.png", dpi=110)
plt.show()

# %% [markdown]
# ## ViT：图块就是词元
#
# 把图像切成 P×P 的图块，再对每个展平的图块做同一个线性映射，等价于核大小为 P、步长为 P 的卷积。
# 我们先验证这一点，然后对图块词元做一层自注意力——从这里开始就是第 3 课的内容了。

# %%
P, D = IMG // 4, 32  # 4 x 4 的图块网格
img = data.test_x[:2]
patches = img.unfold(2, P, P).unfold(3, P, P)  # (B, C, 4, 4, P, P)
tokens_raw = patches.permute(0, 2, 3, 1, 4, 5).reshape(2, 16, C_IN * P * P)  # (B, N=16, C*P*P)
proj = torch.nn.Conv2d(C_IN, D, P, stride=P)
by_hand = tokens_raw @ proj.weight.reshape(D, -1).T + proj.bias
by_conv = proj(img).flatten(2).transpose(1, 2)
assert (by_hand - by_conv).abs().max() < 1e-5
print("patch tokens", tuple(by_hand.shape), "| max |unfold+linear - conv| =", (by_hand - by_conv).abs().max().item())
try:
    from attnkit.models.vit import PatchEmbed
except ImportError as err:
    print("attnkit.models.vit is not available here:", err)
else:
    pe = PatchEmbed(P, C_IN, D)
    pe.proj.load_state_dict(proj.state_dict())
    assert (pe(img)[0] - by_hand).abs().max() < 1e-6 and tuple(pe(img)[1]) == (4, 4)
    print("attnkit PatchEmbed: max diff", (pe(img)[0] - by_hand).abs().max().item(), "grid", pe(img)[1])
attn = attnkit.MultiHeadAttention(D, 4)
out, w = attn(by_hand, need_weights=True)
assert w.shape == (2, 16, 16) and torch.allclose(w.sum(-1), torch.ones(2, 16))
print("self-attention over patches:", tuple(out.shape), "weights", tuple(w.shape), "(16 patches x 16 patches)")

fig, axes = plt.subplots(4, 4, figsize=(4, 4), constrained_layout=True)
for n, ax in enumerate(axes.flat):
    ax.imshow(patches[0, 0, n // 4, n % 4].numpy(), cmap="gray", vmin=0, vmax=1)
    ax.set_title(f"token {n}", fontsize=7)
    ax.axis("off")
fig.suptitle("one image as 16 patch tokens")
fig.savefig(f"{OUT}/10_vit_patches.png", dpi=110)
plt.show()

# %% [markdown]
# ## 练习
#
# 1. 把两个 CBAM 模块换成 `torch.nn.Identity()`，用同样的步数训练 `SmallCNN`。比较测试准确率和参数量。
#    差别是否大于三个随机种子之间的波动？
# 2. 把 SE 的 sigmoid 换成对通道的 softmax。门控的量级会怎样变化？为什么当许多通道同时重要时这会有害？
# 3. 计算 ViT 在 224×224 图像上 P = 16 和 P = 8 时的自注意力开销。它随 P 怎样变化？
#
# 解答：`solutions/10_attention_in_vision.py`。
