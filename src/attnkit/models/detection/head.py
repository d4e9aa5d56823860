"""The anchor-free decoupled head with distribution focal loss bins (YOLOv8's head, after
Generalized Focal Loss, Li et al. 2020, https://arxiv.org/abs/2006.04388).

**Anchor points.** Every cell (i, j) of a level with stride s is one prediction, placed at the cell's
centre ``((j + ½), (i + ½))`` in grid units (× s in pixels). No anchor boxes: the head predicts the
box's four side distances from that point.

**Decoupled.** Two small conv branches per level — one for the box, one for the classes — because
localisation and classification want different features (YOLOX, Ge et al. 2021,
https://arxiv.org/abs/2107.08430, §2.2)::

    box:  ConvBNAct 3×3 → ConvBNAct 3×3 → Conv 1×1 → 4·R logits     (R = reg_max bins)
    cls:  ConvBNAct 3×3 → ConvBNAct 3×3 → Conv 1×1 → K logits       (sigmoid per class, no softmax)

**Distribution focal loss bins.** Each side distance d ∈ [0, R − 1] (grid units) is not regressed
directly: the head gives R logits, a softmax turns them into a distribution p over the integers
0…R−1, and the distance is its expectation::

    d = Σ_i i · softmax(logits)_i

(:class:`DFL` does this sum as a fixed 1×1 conv). The loss (see :mod:`.loss`) pushes the mass onto
the two integers around the target, so the head can say "between 3 and 4" instead of one number.

Shape legend: B batch, C channels, A anchors over all levels, K classes, R bins.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .blocks import ConvBNAct
from .boxes import dist2bbox


class DFL(nn.Module):
    """(B, 4·R, A) logits → (B, 4, A) expected distances, d = Σ i · softmax_i."""

    def __init__(self, reg_max: int = 16):
        super().__init__()
        self.reg_max = reg_max
        self.register_buffer("bins", torch.arange(reg_max, dtype=torch.float32), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, _, A = x.shape
        p = x.view(B, 4, self.reg_max, A).softmax(2)  # (B, 4, R, A)
        return torch.einsum("bfra,r->bfa", p, self.bins.to(p.dtype))


def make_anchors(shapes: list[tuple[int, int]], strides: list[int], device=None, dtype=torch.float32):
    """Cell centres of every level in grid units, (A, 2) as (x, y), and each one's stride, (A, 1)."""
    points, stride_col = [], []
    for (h, w), s in zip(shapes, strides):
        sy, sx = torch.meshgrid(torch.arange(h, device=device, dtype=dtype) + 0.5,
                                torch.arange(w, device=device, dtype=dtype) + 0.5, indexing="ij")
        points.append(torch.stack((sx, sy), -1).view(-1, 2))
        stride_col.append(torch.full((h * w, 1), float(s), device=device, dtype=dtype))
    return torch.cat(points), torch.cat(stride_col)


class DetectHead(nn.Module):
    """Per level a box branch and a class branch; ``forward`` returns the raw per-anchor logits.

    ``channels``: the neck's output channels per level (P3, P4, P5); ``strides``: their strides.
    Output: ``(box_logits (B, A, 4·R), cls_logits (B, A, K), [(h, w) per level])``.
    """

    def __init__(self, num_classes: int, channels: tuple[int, ...], strides: tuple[int, ...], reg_max: int = 16):
        super().__init__()
        self.num_classes, self.reg_max, self.strides = num_classes, reg_max, tuple(strides)
        c2 = max(16, channels[0] // 4, 4 * reg_max)  # YOLOv8's branch widths
        c3 = max(channels[0], min(num_classes, 100))
        self.box = nn.ModuleList(nn.Sequential(ConvBNAct(c, c2, 3), ConvBNAct(c2, c2, 3), nn.Conv2d(c2, 4 * reg_max, 1)) for c in channels)
        self.cls = nn.ModuleList(nn.Sequential(ConvBNAct(c, c3, 3), ConvBNAct(c3, c3, 3), nn.Conv2d(c3, num_classes, 1)) for c in channels)
        self.dfl = DFL(reg_max)

    def init_biases(self, image_size: int) -> None:
        """Start near the answer (YOLOv8's init): every distance bin equally likely, and a class prior
        of about 5 objects per image spread over the level's cells, so the first steps are not
        spent pushing a 50 % score down on thousands of background cells."""
        for box, cls, s in zip(self.box, self.cls, self.strides):
            nn.init.constant_(box[-1].bias, 1.0)
            nn.init.constant_(cls[-1].bias, math.log(5 / self.num_classes / (image_size / s) ** 2))

    def forward(self, feats: list[torch.Tensor]):
        shapes = [tuple(f.shape[2:]) for f in feats]
        box = torch.cat([b(f).flatten(2) for b, f in zip(self.box, feats)], 2)  # (B, 4R, A)
        cls = torch.cat([c(f).flatten(2) for c, f in zip(self.cls, feats)], 2)  # (B, K, A)
        return box.transpose(1, 2), cls.transpose(1, 2), shapes

    def decode(self, box_logits: torch.Tensor, shapes: list[tuple[int, int]]) -> torch.Tensor:
        """(B, A, 4·R) logits → (B, A, 4) corner boxes in pixels."""
        anchors, stride = make_anchors(shapes, list(self.strides), box_logits.device, box_logits.dtype)
        dist = self.dfl(box_logits.transpose(1, 2)).transpose(1, 2)  # (B, A, 4) in grid units
        return dist2bbox(dist, anchors) * stride


__all__ = ["DFL", "DetectHead", "make_anchors"]
