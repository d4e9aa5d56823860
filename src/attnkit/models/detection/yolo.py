"""A small YOLOv8-style detector: C2f backbone with SPPF, a PAN neck over P3–P5, the anchor-free
decoupled head, and optional :class:`~attnkit.modules.mhsa2d.MHSA2d` blocks placed by an
:class:`~.placement.MHSAPlacement`.

Written from the public design of Ultralytics YOLOv8 (2023; no paper) and the papers of its parts:
PANet's bottom-up path (Liu et al. 2018, https://arxiv.org/abs/1803.01534), the head of
:mod:`.head`, the loss of :mod:`.loss`. The layout, for widths (w0, w1, w2, w3, w4)::

    stem  ConvBNAct(in, w0, 3, s2)                                   /2
          ConvBNAct(w0, w1, 3, s2) → C2f(w1)                          /4
    P3    ConvBNAct(w1, w2, 3, s2) → C2f(w2)                          /8
    P4    ConvBNAct(w2, w3, 3, s2) → C2f(w3)  [→ MHSA2d if "p4"]      /16
    P5    ConvBNAct(w3, w4, 3, s2) → C2f(w4) → SPPF  [→ MHSA2d if "p5"]   /32
    neck  top-down:  h4 = C2f(cat(up(P5), P4)),  n3 = C2f(cat(up(h4), P3))          → out P3
          bottom-up: n4 = C2f(cat(conv_s2(n3), h4)), n5 = C2f(cat(conv_s2(n4), P5)) → out P4, P5
          [n5 → MHSA2d if "neck"]
    head  :class:`~.head.DetectHead` on (n3, n4, n5)

``forward`` returns the raw logits the loss needs; :meth:`YOLODetector.predict` decodes, thresholds
and runs NMS.

Shape legend: B batch, C channels, H×W image, A anchors, K classes, R DFL bins.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...modules.mhsa2d import MHSA2d
from .blocks import C2f, SPPF, ConvBNAct
from .boxes import batched_nms
from .head import DetectHead
from .placement import MHSAPlacement

STRIDES = (8, 16, 32)


def _maybe_mhsa(site: str, placement: MHSAPlacement, channels: int) -> nn.Module:
    return MHSA2d(channels, placement.num_heads) if site in placement else nn.Identity()


class Backbone(nn.Module):
    """(B, in_chans, H, W) → [P3 (B, w2, H/8, W/8), P4 (B, w3, H/16, W/16), P5 (B, w4, H/32, W/32)]."""

    def __init__(self, in_chans: int, widths: tuple[int, ...], depth: int, placement: MHSAPlacement):
        super().__init__()
        w0, w1, w2, w3, w4 = widths
        self.stem = nn.Sequential(ConvBNAct(in_chans, w0, 3, 2), ConvBNAct(w0, w1, 3, 2), C2f(w1, w1, depth, True))
        self.p3 = nn.Sequential(ConvBNAct(w1, w2, 3, 2), C2f(w2, w2, depth, True))
        self.p4 = nn.Sequential(ConvBNAct(w2, w3, 3, 2), C2f(w3, w3, depth, True), _maybe_mhsa("p4", placement, w3))
        self.p5 = nn.Sequential(ConvBNAct(w3, w4, 3, 2), C2f(w4, w4, depth, True), SPPF(w4, w4),
                                _maybe_mhsa("p5", placement, w4))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        p3 = self.p3(self.stem(x))
        p4 = self.p4(p3)
        return [p3, p4, self.p5(p4)]


class PANNeck(nn.Module):
    """[P3, P4, P5] → [n3, n4, n5], same channels and sizes: top-down FPN, then PANet's bottom-up path."""

    def __init__(self, widths: tuple[int, ...], depth: int, placement: MHSAPlacement):
        super().__init__()
        _, _, w2, w3, w4 = widths
        self.td4 = C2f(w4 + w3, w3, depth)
        self.td3 = C2f(w3 + w2, w2, depth)
        self.down3 = ConvBNAct(w2, w2, 3, 2)
        self.bu4 = C2f(w2 + w3, w3, depth)
        self.down4 = ConvBNAct(w3, w3, 3, 2)
        self.bu5 = C2f(w3 + w4, w4, depth)
        self.attn5 = _maybe_mhsa("neck", placement, w4)

    def forward(self, feats: list[torch.Tensor]) -> list[torch.Tensor]:
        p3, p4, p5 = feats
        h4 = self.td4(torch.cat((F.interpolate(p5, size=p4.shape[2:], mode="nearest"), p4), 1))
        n3 = self.td3(torch.cat((F.interpolate(h4, size=p3.shape[2:], mode="nearest"), p3), 1))
        n4 = self.bu4(torch.cat((self.down3(n3), h4), 1))
        n5 = self.attn5(self.bu5(torch.cat((self.down4(n4), p5), 1)))
        return [n3, n4, n5]


class YOLODetector(nn.Module):
    """``YOLODetector(num_classes, in_chans=3, widths=(16, 32, 64, 128, 256), depth=1, reg_max=16,
    attention=MHSAPlacement(), image_size=640)``.

    ``forward(x)`` → ``(box_logits (B, A, 4·R), cls_logits (B, A, K), level shapes)``;
    ``predict(x)`` → one (n, 6) tensor per image: ``x1, y1, x2, y2, score, class`` in pixels.
    ``image_size`` only sets the class-bias prior (the expected cells per object); any H, W that
    are multiples of 32 work.
    """

    def __init__(self, num_classes: int, in_chans: int = 3, widths: tuple[int, ...] = (16, 32, 64, 128, 256), depth: int = 1,
                 reg_max: int = 16, attention: MHSAPlacement | None = None, image_size: int = 640):
        super().__init__()
        attention = MHSAPlacement() if attention is None else attention
        if not isinstance(attention, MHSAPlacement):
            raise TypeError(f"attention must be an MHSAPlacement, got {type(attention).__name__}; e.g. MHSAPlacement.named('mhsa_p5')")
        if len(widths) != 5 or any(not isinstance(w, int) or w < 2 for w in widths):
            raise ValueError(f"widths must be five ints >= 2 (stem, /4, P3, P4, P5), got {widths!r}")
        for site, w in (("p4", widths[3]), ("p5", widths[4]), ("neck", widths[4])):
            if site in attention and w % attention.num_heads:
                raise ValueError(f"MHSA at {site!r} has {w} channels, not divisible by num_heads={attention.num_heads}; "
                                 "change widths or num_heads")
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"num_classes must be an int >= 1, got {num_classes!r}")
        self.num_classes, self.reg_max, self.attention = num_classes, reg_max, attention
        self.backbone = Backbone(in_chans, tuple(widths), depth, attention)
        self.neck = PANNeck(tuple(widths), depth, attention)
        self.head = DetectHead(num_classes, (widths[2], widths[3], widths[4]), STRIDES, reg_max)
        self.head.init_biases(image_size)

    def forward(self, x: torch.Tensor):
        B, C, H, W = x.shape
        if H % 32 or W % 32:
            raise ValueError(f"YOLODetector: image height and width must be multiples of 32 (the P5 stride), got {H}x{W}; "
                             "resize or pad the images")
        return self.head(self.neck(self.backbone(x)))

    @torch.no_grad()
    def predict(self, x: torch.Tensor, conf: float = 0.001, iou: float = 0.6, max_det: int = 100,
                pre_nms: int = 300) -> list[torch.Tensor]:
        """Boxes after NMS per image, (n, 6): x1, y1, x2, y2 (pixels), score, class.

        Each anchor keeps its best class (score = that class's sigmoid); anchors under ``conf`` are
        dropped, the ``pre_nms`` best go to class-wise NMS at ``iou``, the ``max_det`` best stay.
        The defaults are the usual ones for computing mAP (a low ``conf``: the curve needs the tail).
        """
        box_logits, cls_logits, shapes = self(x)
        boxes = self.head.decode(box_logits, shapes)  # (B, A, 4)
        scores, classes = cls_logits.sigmoid().max(-1)  # (B, A)
        out = []
        for b in range(x.shape[0]):
            keep = scores[b] > conf
            bx, sc, cl = boxes[b][keep], scores[b][keep], classes[b][keep]
            top = sc.argsort(descending=True)[:pre_nms]
            bx, sc, cl = bx[top], sc[top], cl[top]
            k = batched_nms(bx, sc, cl, iou)[:max_det]
            out.append(torch.cat((bx[k], sc[k, None], cl[k, None].to(bx.dtype)), 1))
        return out


__all__ = ["YOLODetector", "Backbone", "PANNeck", "STRIDES"]
