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
# # Lesson 15 — A YOLO-style detection head, step by step, and where MHSA goes
#
# **Question this lesson answers:** how does an anchor-free detector turn a feature map into boxes,
# and what does inserting self-attention (MHSA) before a feature level cost?
#
# A YOLOv8-style head reads three feature maps (P3, P4, P5 at strides 8, 16, 32). Every cell is one
# prediction placed at the cell's centre; the head says how far the box's four sides are from that
# point (l, t, r, b) and how likely each class is. We build each step by hand and check it against
# `attnkit.models.detection`:
#
# 1. anchor points: the cell centres;
# 2. distances as distributions (DFL): R bins per side, the distance is the expectation;
# 3. decoding distances to boxes;
# 4. the distribution focal loss: why its optimum splits the mass between two bins;
# 5. task-aligned assignment: which cells learn which object;
# 6. non-maximum suppression;
# 7. the cost of MHSA at P3, P4, P5.

# %%
import math
import os
import sys

import matplotlib

if "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # run as a script (or in the test suite): figures go to files, no window
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from attnkit.models.detection import DFL, MHSAPlacement, TaskAlignedAssigner, YOLODetector, dfl_loss, make_anchors, nms
from attnkit.models.detection.boxes import box_iou, dist2bbox

SMALL = os.environ.get("ATTNKIT_COURSE_SMALL") == "1"  # the test suite runs every lesson small
OUT = os.environ.get("ATTNKIT_COURSE_OUT", "course_out")
os.makedirs(OUT, exist_ok=True)
torch.manual_seed(0)

# %% [markdown]
# ## Step 1: anchor points are cell centres
#
# A level with stride s and an h×w map has h·w anchors at ((j + ½)·s, (i + ½)·s) in pixels. For a
# 96×96 image: 12×12 + 6×6 + 3×3 = 189 anchors.

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
print("anchors:", len(by_hand), "| first three (px):", by_hand[:3].tolist())

# %% [markdown]
# ## Step 2: each side distance is a distribution over R bins (DFL)
#
# The box branch outputs 4·R logits per anchor. A softmax over each side's R logits gives p over the
# distances 0…R−1 (in cells of that level), and the predicted distance is Σ i·p_i.

# %%
R = 8
logits = torch.randn(1, 4 * R, 189)  # (B, 4R, A), as the head's box branch gives them
p = logits.view(1, 4, R, 189).softmax(2)
dist_hand = (p * torch.arange(R).float()[None, None, :, None]).sum(2)  # (B, 4, A)
torch.testing.assert_close(DFL(R)(logits), dist_hand)
assert float(dist_hand.min()) >= 0 and float(dist_hand.max()) <= R - 1
print("distance of anchor 0, sides l t r b (cells):", [round(v, 2) for v in dist_hand[0, :, 0].tolist()])

# %% [markdown]
# ## Step 3: distances → boxes
#
# box = (ax − l, ay − t, ax + r, ay + b) in cells, times the stride for pixels.

# %%
d = dist_hand.transpose(1, 2)  # (B, A, 4)
boxes_hand = torch.cat((points - d[..., :2], points + d[..., 2:]), -1) * stride
torch.testing.assert_close(dist2bbox(d, points) * stride, boxes_hand)
print("anchor 0's box (px):", [round(v, 1) for v in boxes_hand[0, 0].tolist()])

# %% [markdown]
# ## Step 4: the distribution focal loss
#
# For a target distance y between the integers y_l and y_r = y_l + 1 the loss is
# −((y_r − y)·log p_{y_l} + (y − y_l)·log p_{y_r}). Its minimum puts mass y_r − y on y_l and y − y_l
# on y_r, so the expectation is exactly y. We minimise it by gradient descent and look.

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
print("side 0, target 3.3: p(3) =", round(q[0, 0, 3].item(), 3), " p(4) =", round(q[0, 0, 4].item(), 3))

# %% [markdown]
# ## Step 5: task-aligned assignment
#
# An object takes the k anchors inside its box with the largest t = s^α · u^β, s the anchor's score
# for the object's class and u the IoU of the anchor's predicted box with it (α = 0.5, β = 6). We
# compute t by hand for one object and compare the chosen anchors.

# %%
gt = torch.tensor([[[16.0, 16, 56, 48]]])  # one object in a 96×96 image, class 0
scores = torch.rand(1, 189, 2)
pred = boxes_hand.detach()
inside = (by_hand[:, 0] > 16) & (by_hand[:, 0] < 56) & (by_hand[:, 1] > 16) & (by_hand[:, 1] < 48)
u = box_iou(pred[0], gt[0])[:, 0]
t = scores[0, :, 0].sqrt() * u.pow(6) * inside
mine = set(t.topk(5).indices[t.topk(5).values > 0].tolist())
_, _, fg = TaskAlignedAssigner(topk=5).assign(scores, pred, by_hand, torch.zeros(1, 1), gt, torch.ones(1, 1, dtype=torch.bool))
theirs = set(fg[0].nonzero().flatten().tolist())
print("anchors inside the box:", int(inside.sum()), "| chosen by hand:", sorted(mine), "| by the assigner:", sorted(theirs))
assert theirs <= set(inside.nonzero().flatten().tolist()) and len(theirs) == min(5, int(inside.sum()))
# the library ranks by CIoU, the hand version by IoU: the chosen sets agree on most anchors
assert len(mine & theirs) >= 3

# %% [markdown]
# ## Step 6: non-maximum suppression
#
# Many anchors see the same object. Walk the boxes by falling score; keep one unless a kept box
# overlaps it by more than the threshold.

# %%
cand = torch.tensor([[10.0, 10, 50, 50], [12, 12, 52, 52], [60, 60, 90, 90], [11, 9, 49, 51], [62, 58, 91, 88]])
score = torch.tensor([0.9, 0.8, 0.7, 0.6, 0.5])
kept = []
for i in score.argsort(descending=True).tolist():
    if all(box_iou(cand[i:i + 1], cand[k:k + 1]).item() <= 0.5 for k in kept):
        kept.append(i)
assert kept == nms(cand, score, 0.5).tolist() == [0, 2]
print("kept after NMS:", kept)

# %% [markdown]
# ## Step 7: what MHSA costs at each level
#
# An H×W map has N = H·W positions. MHSA adds 4·N·C² multiply-adds for the projections and 2·N²·C
# for scores and values: quadratic in N, so P4 costs 16× P5's N² term and P3 256×. That is why the
# popular recipes put it at P5 (after SPPF) or in the neck's P5 path, and why the article asks for a
# controlled experiment before using it.

# %%
C = 64
for name, side in (("P3", 80), ("P4", 40), ("P5", 20)):  # a 640×640 input
    N = side * side
    print(f"{name}: N = {N:5d}, projections {4 * N * C * C / 1e6:8.1f} M MACs, scores+values {2 * N * N * C / 1e6:9.1f} M MACs")
plain = YOLODetector(3, 1, (8, 16, 32, 64, 64), reg_max=R, image_size=96)
p5 = YOLODetector(3, 1, (8, 16, 32, 64, 64), reg_max=R, attention=MHSAPlacement(("p5",)), image_size=96)
extra = sum(x.numel() for x in p5.parameters()) - sum(x.numel() for x in plain.parameters())
assert extra == 4 * (C * C + C) + sum(x.numel() for x in p5.backbone.p5[-1].position.parameters())
print("parameters added by MHSA at P5:", extra)
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
# ## Exercises
#
# 1. With R = 8 bins at stride 32, what is the largest box side the head can predict at P5, in
#    pixels? At P3? Check with `dist2bbox`.
# 2. Change β from 6 to 1 in the assignment of step 5. Which anchors are chosen now, and why does a
#    large β favour well-localised anchors?
# 3. For a 96×96 input, compare the extra FLOPs of MHSA at P5 and at P4 with
#    `torch.utils.flop_counter` (or `attnkit.experiments.detection.measure.forward_flops`). Does the
#    ratio match the N² term?
#
# Solutions: `solutions/15_detection_head.py`.
