"""The YOLOv8 detection loss: task-aligned targets (:mod:`.assigner`), then three terms.

With T the assigner's soft class targets (B, A, K), fg its positive anchors and S = max(1, Σ T)::

    L_cls = Σ BCE(cls_logits, T) / S                                 every anchor, every class
    L_box = Σ_fg w_a · (1 − CIoU(pred_a, target_a)) / S             w_a = Σ_k T[a, k]
    L_dfl = Σ_fg w_a · DFL_a / S
    L     = 7.5 · L_box + 0.5 · L_cls + 1.5 · L_dfl                  (YOLOv8's gains)

**Distribution focal loss** (Li et al. 2020, https://arxiv.org/abs/2006.04388, eq. 6): a side
distance y (grid units, 0 ≤ y < R − 1) lies between the integers y_l = ⌊y⌋ and y_r = y_l + 1; the
head's softmax p over the R bins is pushed onto those two, in proportion to closeness::

    DFL(p, y) = −((y_r − y) · log p_{y_l} + (y − y_l) · log p_{y_r})

whose minimum puts p_{y_l} = y_r − y, p_{y_r} = y − y_l, so the expectation Σ i·p_i equals y exactly.
The term is averaged over the four sides.

Targets come as one (B, M, 5) tensor per batch: ``class, x1, y1, x2, y2`` in pixels, rows with class
−1 padding (images have different numbers of objects).

Shape legend: B images, M objects (padded), A anchors, K classes, R DFL bins.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .assigner import TaskAlignedAssigner
from .boxes import bbox2dist, ciou, dist2bbox
from .head import make_anchors


def dfl_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """(n, 4, R) bin logits, (n, 4) target distances in [0, R − 1) → (n,) DFL averaged over sides."""
    R = logits.shape[-1]
    left = target.long()  # ⌊y⌋ (targets are ≥ 0)
    wl = left + 1 - target  # weight of the lower bin: y_r − y
    logp = F.log_softmax(logits, -1)
    lo = logp.gather(-1, left[..., None]).squeeze(-1)
    hi = logp.gather(-1, (left + 1).clamp(max=R - 1)[..., None]).squeeze(-1)
    return -(lo * wl + hi * (1 - wl)).mean(-1)


class DetectionLoss(nn.Module):
    """``DetectionLoss(model)(outputs, targets)`` → (total, {"box", "cls", "dfl"}) for a
    :class:`~.yolo.YOLODetector`'s ``forward`` outputs and (B, M, 5) pixel targets."""

    def __init__(self, model, box_gain: float = 7.5, cls_gain: float = 0.5, dfl_gain: float = 1.5,
                 assigner: TaskAlignedAssigner | None = None):
        super().__init__()
        self.strides, self.reg_max, self.num_classes = list(model.head.strides), model.reg_max, model.num_classes
        self.gains = (box_gain, cls_gain, dfl_gain)
        self.assigner = assigner or TaskAlignedAssigner()

    def forward(self, outputs, targets: torch.Tensor):
        box_logits, cls_logits, shapes = outputs
        B, A, _ = box_logits.shape
        R = self.reg_max
        if targets.dim() != 3 or targets.shape[0] != B or targets.shape[-1] != 5:
            raise ValueError(f"targets must be (B={B}, M, 5) rows of class, x1, y1, x2, y2 (class -1 = padding), "
                             f"got shape {tuple(targets.shape)}")
        points, stride = make_anchors(shapes, self.strides, box_logits.device, box_logits.dtype)  # grid units
        bins = box_logits.view(B, A, 4, R)
        dist = (bins.softmax(-1) * torch.arange(R, device=bins.device, dtype=bins.dtype)).sum(-1)  # (B, A, 4)
        pred = dist2bbox(dist, points)  # (B, A, 4) grid units
        labels, gt, mask_gt = targets[..., 0], targets[..., 1:], targets[..., 0] >= 0
        t_boxes, t_scores, fg = self.assigner.assign(cls_logits.detach().sigmoid(), (pred.detach() * stride).to(gt.dtype),
                                                     points * stride, labels, gt, mask_gt)
        S = t_scores.sum().clamp(min=1)
        loss_cls = F.binary_cross_entropy_with_logits(cls_logits, t_scores.to(cls_logits.dtype), reduction="sum") / S
        if fg.any():
            w = t_scores.sum(-1)[fg]  # (n,)
            t_grid = t_boxes / stride  # back to grid units, the head's own scale
            loss_box = ((1 - ciou(pred[fg], t_grid[fg])) * w).sum() / S
            t_dist = bbox2dist(points, t_grid, R - 1)  # (B, A, 4)
            loss_dfl = (dfl_loss(bins[fg], t_dist[fg]) * w).sum() / S
        else:  # no object in the batch: only the background term teaches
            loss_box = loss_dfl = box_logits.sum() * 0
        g_box, g_cls, g_dfl = self.gains
        total = g_box * loss_box + g_cls * loss_cls + g_dfl * loss_dfl
        return total, {"box": float(loss_box.detach()), "cls": float(loss_cls.detach()), "dfl": float(loss_dfl.detach())}


__all__ = ["DetectionLoss", "dfl_loss"]
