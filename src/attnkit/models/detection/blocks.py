"""The convolutional blocks of a YOLOv8-style network: ``ConvBNAct``, ``Bottleneck``, ``C2f`` and
``SPPF``, written from the public design (Ultralytics YOLOv8, 2023; the C2f block follows the
cross-stage partial idea of CSPNet, Wang et al. 2020, https://arxiv.org/abs/1911.11929, and SPPF is
the sequential form of spatial pyramid pooling, He et al. 2015, https://arxiv.org/abs/1406.4729).

* ``ConvBNAct(c1, c2, k, s)``: conv (padding k//2, no bias) → BatchNorm → SiLU.
* ``Bottleneck``: two 3×3 convs, plus the input when the channel counts match.
* ``C2f(c1, c2, n)``: a 1×1 conv splits into two halves of c = c2/2 channels; n bottlenecks run on
  the second half one after the other, and *every* intermediate output is kept::

      y0, y1 = split(cv1(x));  y_{i+1} = bottleneck_i(y_i);  out = cv2(cat(y0, y1, …, y_{n+1}))

  so the final 1×1 conv sees features at n + 2 depths (more gradient paths than C3's single one).
* ``SPPF(c1, c2, k=5)``: three chained k×k max-pools (stride 1) give receptive fields k, 2k−1,
  3k−2, concatenated with the input: the pooling pyramid of SPP at a third of its cost.

Shape legend: B batch, C channels, H×W feature map.
"""

from __future__ import annotations

import torch
from torch import nn


class ConvBNAct(nn.Module):
    """(B, c1, H, W) → (B, c2, H/s, W/s): conv → BatchNorm → SiLU."""

    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)  # BatchNorm's shift replaces the bias
        self.bn = nn.BatchNorm2d(c2, eps=1e-3, momentum=0.03)  # YOLOv8's values: a slow running average
        self.act = nn.SiLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    """Two 3×3 ConvBNAct, with a residual when ``shortcut`` and the shapes allow it."""

    def __init__(self, c1: int, c2: int, shortcut: bool = True):
        super().__init__()
        self.cv1 = ConvBNAct(c1, c2, 3)
        self.cv2 = ConvBNAct(c2, c2, 3)
        self.add = shortcut and c1 == c2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    """(B, c1, H, W) → (B, c2, H, W): split, ``n`` chained bottlenecks, concatenate every stage."""

    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = False):
        super().__init__()
        self.c = c2 // 2
        self.cv1 = ConvBNAct(c1, 2 * self.c, 1)
        self.cv2 = ConvBNAct((2 + n) * self.c, c2, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, self.c, shortcut) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ys = list(self.cv1(x).chunk(2, 1))  # 2 × (B, c, H, W)
        for m in self.m:
            ys.append(m(ys[-1]))
        return self.cv2(torch.cat(ys, 1))  # (B, (2 + n)·c, H, W) → (B, c2, H, W)


class SPPF(nn.Module):
    """(B, c1, H, W) → (B, c2, H, W): three chained max-pools concatenated with their input."""

    def __init__(self, c1: int, c2: int, k: int = 5):
        super().__init__()
        c = c1 // 2
        self.cv1 = ConvBNAct(c1, c, 1)
        self.cv2 = ConvBNAct(4 * c, c2, 1)
        self.pool = nn.MaxPool2d(k, 1, k // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.cv1(x)]
        for _ in range(3):
            y.append(self.pool(y[-1]))
        return self.cv2(torch.cat(y, 1))


__all__ = ["ConvBNAct", "Bottleneck", "C2f", "SPPF"]
