"""Solutions to lesson 15's exercises. Run as a script; each answer prints the number that checks it."""

import torch

from attnkit.experiments.detection.measure import forward_flops
from attnkit.models.detection import MHSAPlacement, TaskAlignedAssigner, YOLODetector, make_anchors
from attnkit.models.detection.boxes import box_iou, dist2bbox

# 1. Each side is at most R − 1 = 7 cells from the anchor, so a box is at most 2·7 cells wide:
#    448 px at P5 (stride 32), 112 px at P3 (stride 8).
R = 8
far = torch.full((1, 1, 4), float(R - 1))
for name, s in (("P3", 8), ("P5", 32)):
    box = dist2bbox(far, torch.tensor([[0.5, 0.5]])) * s
    side = float(box[0, 0, 2] - box[0, 0, 0])
    assert side == 2 * (R - 1) * s
    print(f"1. largest side at {name}: {side:.0f} px")

# 2. β weighs the IoU: with β = 6 an anchor with a poor box is chosen only when no better box is
#    inside the object, with β = 1 a high class score can win over a poor box.
torch.manual_seed(0)
shapes, strides = [(12, 12), (6, 6), (3, 3)], [8, 16, 32]
points, stride = make_anchors(shapes, strides)
px = points * stride
pred = torch.cat((px - torch.rand(189, 2) * 30, px + torch.rand(189, 2) * 30), 1)[None]
scores = torch.rand(1, 189, 2)
gt = torch.tensor([[[16.0, 16, 56, 48]]])
iou = box_iou(pred[0], gt[0])[:, 0]
mean_iou = {}
for beta in (6.0, 1.0):
    _, _, fg = TaskAlignedAssigner(topk=5, beta=beta).assign(scores, pred, px, torch.zeros(1, 1), gt, torch.ones(1, 1, dtype=torch.bool))
    chosen = fg[0].nonzero().flatten()
    mean_iou[beta] = float(iou[chosen].mean())
    print(f"2. beta = {beta}: anchors {chosen.tolist()}, their mean IoU {mean_iou[beta]:.3f}")
assert mean_iou[6.0] >= mean_iou[1.0]

# 3. At 96×96: P5 is 3×3 (N = 9, C = 64), P4 is 6×6 (N = 36, C = 32). The scores+values term 2·N²·C
#    is 10,368 MACs at P5 and 82,944 at P4: P4's N² term is 8× P5's here (16× the N², half the channels).
widths = (8, 16, 32, 64, 64)
plain = forward_flops(YOLODetector(3, 1, widths, reg_max=R, image_size=96), (1, 96, 96))
extra = {}
for site, (n, c) in (("p5", (9, 64)), ("p4", (36, 32))):
    f = forward_flops(YOLODetector(3, 1, widths, reg_max=R, attention=MHSAPlacement((site,)), image_size=96), (1, 96, 96)) - plain
    extra[site] = f
    assert f >= 2 * (4 * n * c * c + 2 * n * n * c)  # 2 FLOPs per multiply-add
    print(f"3. MHSA at {site}: +{f / 1e6:.2f} MFLOPs (formula: {2 * (4 * n * c * c + 2 * n * n * c) / 1e6:.2f})")
