"""Task-aligned assignment (TOOD, Feng et al. 2021, https://arxiv.org/abs/2108.07755, §3.2): which
anchors learn which object, chosen from the model's own current predictions.

For object g and anchor a whose centre lies inside g's box, the alignment metric mixes how well the
anchor already *classifies* g (its score s for g's class) and *localises* it (the IoU u of its
predicted box with g)::

    t(a, g) = s(a, g)^α · u(a, g)^β                      α = 0.5, β = 6 (YOLOv8's values)

Each object takes the ``topk`` anchors with the largest t as positives; an anchor claimed by several
objects keeps the one it overlaps most. The classification target of a positive is not 1 but the
normalised metric (eq. 10)::

    t̂(a, g) = t(a, g) / max_a' t(a', g) · max_a' u(a', g)

so the best-aligned anchor of each object is asked for a score equal to the object's best IoU, and
weaker anchors for less: the score learns to rank by box quality, which NMS and mAP then use.

Shape legend: B images, M objects (padded; ``mask_gt`` marks the real ones), A anchors, K classes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .boxes import EPS, ciou


def anchors_inside(points: torch.Tensor, gt_boxes: torch.Tensor, margin: float = 1e-9) -> torch.Tensor:
    """(A, 2) points, (B, M, 4) boxes → (B, M, A) bool: the point lies strictly inside the box."""
    lt = points[None, None] - gt_boxes[..., None, :2]  # (B, M, A, 2)
    rb = gt_boxes[..., None, 2:] - points[None, None]
    return torch.cat((lt, rb), -1).amin(-1) > margin


class TaskAlignedAssigner:
    """``assign(scores, pred_boxes, points, gt_labels, gt_boxes, mask_gt)`` →
    ``(target_boxes (B, A, 4), target_scores (B, A, K), fg_mask (B, A))``.

    ``scores`` (B, A, K) are sigmoid probabilities, boxes in pixels (corners), ``points`` (A, 2) the
    anchor centres in pixels, ``gt_labels`` (B, M) class ids, ``mask_gt`` (B, M) bool.
    """

    def __init__(self, topk: int = 10, alpha: float = 0.5, beta: float = 6.0):
        self.topk, self.alpha, self.beta = topk, alpha, beta

    @torch.no_grad()
    def assign(self, scores, pred_boxes, points, gt_labels, gt_boxes, mask_gt):
        B, A, K = scores.shape
        M = gt_boxes.shape[1]
        if M == 0 or not bool(mask_gt.any()):
            return torch.zeros_like(pred_boxes), torch.zeros_like(scores), torch.zeros(B, A, dtype=torch.bool, device=scores.device)
        valid = anchors_inside(points, gt_boxes) & mask_gt[..., None]  # (B, M, A)
        labels = gt_labels.clamp(min=0).long()
        cls_score = scores.gather(2, labels[:, None, :].expand(B, A, M)).transpose(1, 2)  # (B, M, A): s(a, g)
        overlaps = ciou(pred_boxes[:, None], gt_boxes[:, :, None]).clamp(min=0) * valid  # (B, M, A): u(a, g)
        metric = cls_score.pow(self.alpha) * overlaps.pow(self.beta) * valid
        mask_pos = self._topk(metric, valid)
        mask_pos = self._resolve(mask_pos, overlaps)  # (B, M, A): at most one object per anchor
        gt_idx, fg = mask_pos.float().argmax(1), mask_pos.any(1)  # (B, A)
        batch = torch.arange(B, device=scores.device)[:, None]
        target_boxes = gt_boxes[batch, gt_idx]  # (B, A, 4)
        target_scores = F.one_hot(labels[batch, gt_idx], K).to(scores.dtype) * fg[..., None]
        metric = metric * mask_pos
        best_overlap = (overlaps * mask_pos).amax(-1, keepdim=True)  # (B, M, 1): max u over g's positives
        norm = (metric * best_overlap / (metric.amax(-1, keepdim=True) + EPS)).amax(1)  # (B, A): t̂
        return target_boxes, target_scores * norm[..., None], fg

    def _topk(self, metric: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """(B, M, A) bool: each object's ``topk`` anchors by metric, among those inside its box."""
        k = min(self.topk, metric.shape[-1])
        idx = metric.topk(k, -1).indices  # (B, M, k)
        chosen = torch.zeros_like(valid).scatter_(-1, idx, True)
        return chosen & valid

    @staticmethod
    def _resolve(mask_pos: torch.Tensor, overlaps: torch.Tensor) -> torch.Tensor:
        """An anchor claimed by several objects keeps only the one it overlaps most."""
        multi = mask_pos.sum(1, keepdim=True) > 1  # (B, 1, A)
        best = F.one_hot(overlaps.argmax(1), mask_pos.shape[1]).transpose(1, 2).bool()  # (B, M, A)
        return torch.where(multi, best, mask_pos)


__all__ = ["TaskAlignedAssigner", "anchors_inside"]
