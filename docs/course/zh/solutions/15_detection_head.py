"""第 15 课练习的答案。作为脚本运行；每个答案都会打印验证它的数字。"""

import torch

from attnkit.experiments.detection.measure import forward_flops
from attnkit.models.detection import MHSAPlacement, TaskAlignedAssigner, YOLODetector, make_anchors
from attnkit.models.detection.boxes import box_iou, dist2bbox

# 1. 每条边离锚点最多 R − 1 = 7 个格子，所以框最宽 2·7 个格子：
#    P5（步长 32）上是 448 像素，P3（步长 8）上是 112 像素。
R = 8
far = torch.full((1, 1, 4), float(R - 1))
for name, s in (("P3", 8), ("P5", 32)):
    box = dist2bbox(far, torch.tensor([[0.5, 0.5]])) * s
    side = float(box[0, 0, 2] - box[0, 0, 0])
    assert side == 2 * (R - 1) * s
    print(f"1. {name} 上最大的边长：{side:.0f} 像素")

# 2. β 决定 IoU 的权重：β = 6 时，只有当物体内没有更好的框时，框很差的锚点才会被选中；
#    β = 1 时，较高的类别分数可以压过一个很差的框。
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
    print(f"2. beta = {beta}：锚点 {chosen.tolist()}，平均 IoU {mean_iou[beta]:.3f}")
assert mean_iou[6.0] >= mean_iou[1.0]

# 3. 96×96 时：P5 是 3×3（N = 9，C = 64），P4 是 6×6（N = 36，C = 32）。分数与加权求和项 2·N²·C
#    在 P5 是 10,368 次乘加，在 P4 是 82,944 次：这里 P4 的 N² 项是 P5 的 8 倍（N² 为 16 倍，通道数减半）。
widths = (8, 16, 32, 64, 64)
plain = forward_flops(YOLODetector(3, 1, widths, reg_max=R, image_size=96), (1, 96, 96))
extra = {}
for site, (n, c) in (("p5", (9, 64)), ("p4", (36, 32))):
    f = forward_flops(YOLODetector(3, 1, widths, reg_max=R, attention=MHSAPlacement((site,)), image_size=96), (1, 96, 96)) - plain
    extra[site] = f
    assert f >= 2 * (4 * n * c * c + 2 * n * n * c)  # 每次乘加算 2 个 FLOP
    print(f"3. MHSA 放在 {site}：+{f / 1e6:.2f} MFLOPs（公式：{2 * (4 * n * c * c + 2 * n * n * c) / 1e6:.2f}）")
