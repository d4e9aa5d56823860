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
# # 第 15 课 —— 一步步搭建 YOLO 风格的检测头，以及 MHSA 放在哪里
#
# **本课回答的问题：** 无锚框（anchor-free）检测器怎样把特征图变成检测框？在某个特征层之前插入自注意力（MHSA）要付出什么代价？
#
# YOLOv8 风格的检测头读取三张特征图（P3、P4、P5，步长分别为 8、16、32）。每个格子就是一个预测，位置在格子中心；
# 检测头给出框的四条边离这个点有多远（l, t, r, b），以及每个类别的可能性。下面每一步都先手写，再与
# `attnkit.models.detection` 对照：
#
# 1. 锚点：格子的中心；
# 2. 把距离当作分布（DFL）：每条边 R 个区间，距离取期望；
# 3. 把距离解码成框；
# 4. 分布焦点损失：为什么它的最优解把概率分在相邻的两个区间上；
# 5. 任务对齐分配：哪些格子学习哪个物体；
# 6. 非极大值抑制；
# 7. MHSA 在 P3、P4、P5 上的开销。

# %%
import math
import os
import sys

import matplotlib

if "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # 作为脚本运行（或在测试中）：图写入文件，不弹窗口
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from attnkit.models.detection import DFL, MHSAPlacement, TaskAlignedAssigner, YOLODetector, dfl_loss, make_anchors, nms
from attnkit.models.detection.boxes import box_iou, dist2bbox

SMALL = os.environ.get("ATTNKIT_COURSE_SMALL") == "1"  # 测试会以小规模运行每一课
OUT = os.environ.get("ATTNKIT_COURSE_OUT", "course_out")
os.makedirs(OUT, exist_ok=True)
torch.manual_seed(0)

# %% [markdown]
# ## 第 1 步：锚点就是格子中心
#
# 步长为 s、大小为 h×w 的特征层有 h·w 个锚点，像素坐标为 ((j + ½)·s, (i + ½)·s)。对 96×96 的图像：
# 12×12 + 6×6 + 3×3 = 189 个锚点。

# %%
shapes, strides = [(12, 12), (6, 6), (3, 3)], [8, 16, 32]
by_hand = []
for (h, w), s in zip(shapes, strides):
    for i in range(h):
        for j in range(w):
            by_hand.append([(j + 0.5) * s, (i + 0.5) * s])
by_hand = torch.tensor(by_hand)
points, stride = make_anchors(shapes, strides)
assert torch.equal(points * stride, by_hand) and len(by_hand) == 189
print("锚点数：", len(by_hand), "| 前三个（像素）：", by_hand[:3].tolist())

# %% [markdown]
# ## 第 2 步：每条边的距离是 R 个区间上的分布（DFL）
#
# 框分支为每个锚点输出 4·R 个 logit。对每条边的 R 个 logit 做 softmax，得到距离 0…R−1（以该层的格子为单位）
# 上的分布 p，预测的距离就是 Σ i·p_i。

# %%
R = 8
logits = torch.randn(1, 4 * R, 189)  # (B, 4R, A)，与检测头框分支的输出相同
p = logits.view(1, 4, R, 189).softmax(2)
dist_hand = (p * torch.arange(R).float()[None, None, :, None]).sum(2)  # (B, 4, A)
torch.testing.assert_close(DFL(R)(logits), dist_hand)
assert float(dist_hand.min()) >= 0 and float(dist_hand.max()) <= R - 1
print("锚点 0 的四边距离 l t r b（格）：", [round(v, 2) for v in dist_hand[0, :, 0].tolist()])

# %% [markdown]
# ## 第 3 步：距离 → 框
#
# 以格为单位，框 = (ax − l, ay − t, ax + r, ay + b)，乘以步长得到像素坐标。

# %%
d = dist_hand.transpose(1, 2)  # (B, A, 4)
boxes_hand = torch.cat((points - d[..., :2], points + d[..., 2:]), -1) * stride
torch.testing.assert_close(dist2bbox(d, points) * stride, boxes_hand)
print("锚点 0 的框（像素）：", [round(v, 1) for v in boxes_hand[0, 0].tolist()])

# %% [markdown]
# ## 第 4 步：分布焦点损失（DFL）
#
# 目标距离 y 落在整数 y_l 和 y_r = y_l + 1 之间时，损失为 −((y_r − y)·log p_{y_l} + (y − y_l)·log p_{y_r})。
# 它的最小值把 y_r − y 的概率放在 y_l 上、y − y_l 放在 y_r 上，于是期望恰好等于 y。我们用梯度下降把它最小化，看看结果。

# %%
y = torch.tensor([[3.3, 0.6, 5.5, 1.2]])
z = torch.zeros(1, 4, R, requires_grad=True)
opt = torch.optim.Adam([z], lr=0.1)
for _ in range(300 if SMALL else 1000):
    opt.zero_grad()
    dfl_loss(z, y).sum().backward()
    opt.step()
q = z.detach().softmax(-1)
expect = (q * torch.arange(R).float()).sum(-1)
assert (expect - y).abs().max() < 0.05
assert abs(q[0, 0, 3].item() - 0.7) < 0.05 and abs(q[0, 0, 4].item() - 0.3) < 0.05
print("第 0 条边，目标 3.3：p(3) =", round(q[0, 0, 3].item(), 3), " p(4) =", round(q[0, 0, 4].item(), 3))

# %% [markdown]
# ## 第 5 步：任务对齐分配
#
# 每个物体在自己框内的锚点中取 t = s^α · u^β 最大的 k 个：s 是锚点对该物体类别的分数，u 是锚点预测框与物体的 IoU
# （α = 0.5，β = 6）。我们为一个物体手算 t，再比较选中的锚点。

# %%
gt = torch.tensor([[[16.0, 16, 56, 48]]])  # 96×96 图像中的一个物体，类别 0
scores = torch.rand(1, 189, 2)
pred = boxes_hand.detach()
inside = (by_hand[:, 0] > 16) & (by_hand[:, 0] < 56) & (by_hand[:, 1] > 16) & (by_hand[:, 1] < 48)
u = box_iou(pred[0], gt[0])[:, 0]
t = scores[0, :, 0].sqrt() * u.pow(6) * inside
mine = set(t.topk(5).indices[t.topk(5).values > 0].tolist())
_, _, fg = TaskAlignedAssigner(topk=5).assign(scores, pred, by_hand, torch.zeros(1, 1), gt, torch.ones(1, 1, dtype=torch.bool))
theirs = set(fg[0].nonzero().flatten().tolist())
print("框内锚点数：", int(inside.sum()), "| 手算选中：", sorted(mine), "| 分配器选中：", sorted(theirs))
assert theirs <= set(inside.nonzero().flatten().tolist()) and len(theirs) == min(5, int(inside.sum()))
# 库按 CIoU 排序，手算版本按 IoU 排序：两组选中的锚点大部分一致
assert len(mine & theirs) >= 3

# %% [markdown]
# ## 第 6 步：非极大值抑制
#
# 许多锚点看到的是同一个物体。按分数从高到低遍历所有框；只要没有已保留的框与它的重叠超过阈值，就保留它。

# %%
cand = torch.tensor([[10.0, 10, 50, 50], [12, 12, 52, 52], [60, 60, 90, 90], [11, 9, 49, 51], [62, 58, 91, 88]])
score = torch.tensor([0.9, 0.8, 0.7, 0.6, 0.5])
kept = []
for i in score.argsort(descending=True).tolist():
    if all(box_iou(cand[i:i + 1], cand[k:k + 1]).item() <= 0.5 for k in kept):
        kept.append(i)
assert kept == nms(cand, score, 0.5).tolist() == [0, 2]
print("NMS 后保留：", kept)

# %% [markdown]
# ## 第 7 步：MHSA 在每一层的开销
#
# H×W 的特征图有 N = H·W 个位置。MHSA 的投影需要 4·N·C² 次乘加，分数和加权求和需要 2·N²·C 次：对 N 是二次的，
# 所以 P4 的 N² 项是 P5 的 16 倍，P3 是 256 倍。这就是常见方案把它放在 P5（SPPF 之后）或颈部 P5 路径上的原因，
# 也是文章建议先做对照实验再使用它的原因。

# %%
C = 64
for name, side in (("P3", 80), ("P4", 40), ("P5", 20)):  # 640×640 的输入
    N = side * side
    print(f"{name}：N = {N:5d}，投影 {4 * N * C * C / 1e6:8.1f} M 次乘加，分数与加权求和 {2 * N * N * C / 1e6:9.1f} M 次乘加")
plain = YOLODetector(3, 1, (8, 16, 32, 64, 64), reg_max=R, image_size=96)
p5 = YOLODetector(3, 1, (8, 16, 32, 64, 64), reg_max=R, attention=MHSAPlacement(("p5",)), image_size=96)
extra = sum(x.numel() for x in p5.parameters()) - sum(x.numel() for x in plain.parameters())
assert extra == 4 * (C * C + C) + sum(x.numel() for x in p5.backbone.p5[-1].position.parameters())
print("P5 处 MHSA 增加的参数量：", extra)
box, cls, lv = p5(torch.zeros(2, 1, 96, 96))
assert box.shape == (2, 189, 4 * R) and cls.shape == (2, 189, 3) and lv == shapes

fig, ax = plt.subplots(figsize=(4, 4), constrained_layout=True)
ax.imshow(torch.zeros(96, 96).numpy(), cmap="gray")
for b in boxes_hand[0, t.topk(5).indices].tolist():
    ax.add_patch(plt.Rectangle((b[0], b[1]), b[2] - b[0], b[3] - b[1], fill=False, color="orange"))
ax.add_patch(plt.Rectangle((16, 16), 40, 32, fill=False, color="lime", linewidth=2))
ax.set_title("object (green) and its 5 best-aligned anchors' boxes", fontsize=8)
fig.savefig(f"{OUT}/13_assigned.png", dpi=110)
plt.show()

# %% [markdown]
# ## 练习
#
# 1. 在步长 32、R = 8 个区间时，检测头在 P5 能预测的最大框边长是多少像素？P3 呢？用 `dist2bbox` 验证。
# 2. 把第 5 步分配中的 β 从 6 改成 1。现在选中了哪些锚点？为什么较大的 β 偏爱定位准确的锚点？
# 3. 对 96×96 的输入，用 `torch.utils.flop_counter`（或 `attnkit.experiments.detection.measure.forward_flops`）
#    比较 MHSA 放在 P5 和 P4 时额外的 FLOPs。比值与 N² 项相符吗？
#
# 答案：`solutions/15_detection_head.py`。
