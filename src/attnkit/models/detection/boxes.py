"""Box arithmetic for the detector: corner/centre conversions, IoU and CIoU, the distance ↔ box
transforms of an anchor-free head, and greedy non-maximum suppression (no torchvision).

Boxes are ``(x1, y1, x2, y2)`` corners in pixels unless a name says otherwise; an anchor point is
the centre of a grid cell, and an anchor-free head predicts the four distances ``(l, t, r, b)`` from
that point to the box's sides::

    box = (ax − l, ay − t, ax + r, ay + b)          dist2bbox
    l, t, r, b = ax − x1, ay − y1, x2 − ax, y2 − ay  bbox2dist (its inverse)

**CIoU** (Zheng et al. 2020, https://arxiv.org/abs/1911.08287, eq. 9–11) adds to 1 − IoU the squared
centre distance over the squared diagonal of the smallest enclosing box, and an aspect-ratio term::

    CIoU = IoU − ρ²(b, b_gt) / c² − α v,   v = 4/π² (atan(w_gt/h_gt) − atan(w/h))²,   α = v / (1 − IoU + v)

so the loss 1 − CIoU still has a gradient when the boxes do not overlap (the IoU alone is flat there).

Shape legend: N, M boxes; B images; A anchors; K candidates.
"""

from __future__ import annotations

import math

import numpy as np
import torch

EPS = 1e-7  # keeps a zero-area box from dividing by zero; far below one pixel²


def xywh_to_xyxy(b: torch.Tensor) -> torch.Tensor:
    """(..., 4) centre-size → corners."""
    cx, cy, w, h = b.unbind(-1)
    return torch.stack((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2), -1)


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Pairwise IoU of (N, 4) and (M, 4) corner boxes → (N, M)."""
    lt = torch.maximum(a[:, None, :2], b[None, :, :2])
    rb = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)  # (N, M)
    area_a = (a[:, 2:] - a[:, :2]).clamp(min=0).prod(-1)
    area_b = (b[:, 2:] - b[:, :2]).clamp(min=0).prod(-1)
    return inter / (area_a[:, None] + area_b[None, :] - inter + EPS)


def ciou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Element-wise CIoU of (..., 4) corner boxes ``a`` (predicted) and ``b`` (target) → (...)."""
    (ax1, ay1, ax2, ay2), (bx1, by1, bx2, by2) = a.unbind(-1), b.unbind(-1)
    w1, h1 = ax2 - ax1, ay2 - ay1 + EPS
    w2, h2 = bx2 - bx1, by2 - by1 + EPS
    inter = (torch.minimum(ax2, bx2) - torch.maximum(ax1, bx1)).clamp(min=0) * \
            (torch.minimum(ay2, by2) - torch.maximum(ay1, by1)).clamp(min=0)
    iou = inter / (w1 * h1 + w2 * h2 - inter + EPS)
    cw = torch.maximum(ax2, bx2) - torch.minimum(ax1, bx1)  # the smallest enclosing box
    ch = torch.maximum(ay2, by2) - torch.minimum(ay1, by1)
    c2 = cw ** 2 + ch ** 2 + EPS
    rho2 = ((bx1 + bx2 - ax1 - ax2) ** 2 + (by1 + by2 - ay1 - ay2) ** 2) / 4  # squared centre distance
    v = (4 / math.pi ** 2) * (torch.atan(w2 / h2) - torch.atan(w1 / h1)) ** 2
    with torch.no_grad():  # α is a weight, not a path for the gradient (the paper's eq. 11)
        alpha = v / (v - iou + (1 + EPS))
    return iou - (rho2 / c2 + v * alpha)


def dist2bbox(dist: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """(..., A, 4) distances (l, t, r, b) from (A, 2) anchor points → (..., A, 4) corners."""
    lt, rb = dist.chunk(2, -1)
    return torch.cat((anchors - lt, anchors + rb), -1)


def bbox2dist(anchors: torch.Tensor, boxes: torch.Tensor, max_dist: float) -> torch.Tensor:
    """Inverse of :func:`dist2bbox`, clamped to [0, max_dist − 0.01] so the DFL's upper bin exists."""
    x1y1, x2y2 = boxes.chunk(2, -1)
    return torch.cat((anchors - x1y1, x2y2 - anchors), -1).clamp(0, max_dist - 0.01)


def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Greedy NMS: indices of the kept boxes, highest score first.

    Walk the boxes by falling score; keep a box unless a kept one overlaps it by more than
    ``iou_threshold``. One (K, K) IoU matrix, then a loop over K rows in NumPy (K ≤ a few hundred
    after the pre-NMS top-k, so the loop is cheaper than building it on the tensor side).
    """
    if boxes.numel() == 0:
        return torch.zeros(0, dtype=torch.long, device=boxes.device)
    order = scores.argsort(descending=True)
    iou = box_iou(boxes[order], boxes[order]).cpu().numpy()
    suppressed = np.zeros(len(order), dtype=bool)
    keep = []
    for i in range(len(order)):
        if suppressed[i]:
            continue
        keep.append(i)
        suppressed |= iou[i] > iou_threshold
    return order[torch.as_tensor(keep, dtype=torch.long, device=boxes.device)]


def batched_nms(boxes: torch.Tensor, scores: torch.Tensor, classes: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """NMS within each class: shifting each class's boxes by its own offset keeps classes from
    overlapping, so one :func:`nms` call serves them all."""
    if boxes.numel() == 0:
        return torch.zeros(0, dtype=torch.long, device=boxes.device)
    offset = classes.to(boxes.dtype)[:, None] * (boxes.max() + 1)
    return nms(boxes + offset, scores, iou_threshold)


__all__ = ["xywh_to_xyxy", "box_iou", "ciou", "dist2bbox", "bbox2dist", "nms", "batched_nms"]
