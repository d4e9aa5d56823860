"""ResNet with a pluggable attention module in every residual block.

He, Zhang, Ren & Sun, "Deep Residual Learning for Image Recognition", CVPR 2016,
https://arxiv.org/abs/1512.03385. Blocks (v1.5: the stride sits on the 3×3 conv, as in torchvision)::

    basic:       y = relu(x' + A(bn(conv3x3(relu(bn(conv3x3(x)))))))
    bottleneck:  y = relu(x' + A(bn(conv1x1(relu(bn(conv3x3(relu(bn(conv1x1(x))))))))))

x' is x, or a 1×1 conv + BN projection when the shape changes. The attention ``A`` (SE, ECA, CBAM,
…: :func:`attnkit.modules.create_attn.create_attn`) sits on the residual branch after the last BN,
before the identity is added — where the SE, ECA and CBAM papers put it (SE-Net Fig. 3). With
``attn=None`` the ImageNet models match torchvision parameter for parameter (ResNet-50: 25,557,032).

Two stems: ``"imagenet"`` (7×7/2 conv + 3×3/2 max-pool, 224-pixel inputs) and ``"cifar"`` (one 3×3
conv, stride 1, for 28–32-pixel inputs such as Fashion-MNIST and CIFAR; He et al. §4.2).

Shape legend: B batch, C channels, H height, W width; K classes.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import nn

from ..modules.create_attn import ATTN_MODULES, create_attn
from ..modules.gate import require_positive_int

STEMS = ("imagenet", "cifar")


def _attn_factory(attn, attn_kwargs: dict | None) -> Callable[[int], nn.Module] | None:
    """``attn`` as a name for create_attn, a callable ``channels -> module``, or None."""
    if attn is None:
        if attn_kwargs:
            raise ValueError(f"attn_kwargs={attn_kwargs} given without attn; pass attn='se' (or another name) too")
        return None
    if isinstance(attn, str):
        if attn.lower() not in ATTN_MODULES:  # fail at construction, before any block is built
            raise ValueError(f"unknown attn {attn!r}; valid names: {', '.join(sorted(ATTN_MODULES))}")
        return lambda c: create_attn(attn, c, **(attn_kwargs or {}))
    if callable(attn):
        if attn_kwargs:
            raise ValueError("attn_kwargs only apply to a named attn; put the options in your callable")
        return attn
    raise TypeError(f"attn must be a name (e.g. 'se'), a callable channels -> nn.Module, or None; got {type(attn).__name__}")


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, attn: Callable[[int], nn.Module] | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.attn = attn(planes) if attn is not None else nn.Identity()
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _projection(inplanes, planes, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.attn(self.bn2(self.conv2(out)))
        return self.relu(out + self.downsample(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, attn: Callable[[int], nn.Module] | None = None):
        super().__init__()
        width, out = planes, planes * self.expansion
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.attn = attn(out) if attn is not None else nn.Identity()
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _projection(inplanes, out, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.attn(self.bn3(self.conv3(out)))
        return self.relu(out + self.downsample(x))


def _projection(inplanes: int, out: int, stride: int) -> nn.Module:
    if stride == 1 and inplanes == out:
        return nn.Identity()
    return nn.Sequential(nn.Conv2d(inplanes, out, 1, stride, bias=False), nn.BatchNorm2d(out))


BLOCKS = {"basic": BasicBlock, "bottleneck": Bottleneck}


class ResNet(nn.Module):
    """``ResNet(block, layers, ...)``: (B, in_chans, H, W) → logits (B, K).

    * ``block``: ``"basic"`` or ``"bottleneck"``; ``layers``: blocks per stage, e.g. (3, 4, 6, 3).
    * ``widths``: the stages' base widths (bottleneck outputs are 4× wider); stage i > 0 halves H, W.
    * ``stem``: ``"imagenet"`` or ``"cifar"``; ``in_chans``: image channels (1 for Fashion-MNIST).
    * ``attn``: the block attention — a :func:`create_attn` name, a callable ``channels -> module``, or
      None; ``attn_kwargs`` go to create_attn; ``attn_stages``: which stages (1-based) get it (all).
    """

    def __init__(
        self,
        block: str,
        layers: Sequence[int],
        *,
        num_classes: int = 1000,
        in_chans: int = 3,
        widths: Sequence[int] = (64, 128, 256, 512),
        stem: str = "imagenet",
        attn=None,
        attn_kwargs: dict | None = None,
        attn_stages: Sequence[int] | None = None,
    ):
        super().__init__()
        if block not in BLOCKS:
            raise ValueError(f"block must be one of {sorted(BLOCKS)}, got {block!r}")
        if stem not in STEMS:
            raise ValueError(f"stem must be one of {STEMS}, got {stem!r}")
        layers, widths = list(layers), list(widths)
        if not layers or len(layers) != len(widths):
            raise ValueError(f"layers and widths need one entry per stage, got layers={layers}, widths={widths}")
        for name, vals in (("layers", layers), ("widths", widths)):
            for v in vals:
                require_positive_int(name, v)
        require_positive_int("num_classes", num_classes)
        require_positive_int("in_chans", in_chans)
        stages = range(1, len(layers) + 1)
        attn_stages = list(stages) if attn_stages is None else list(attn_stages)
        if not set(attn_stages) <= set(stages):
            raise ValueError(f"attn_stages must be stage numbers in {list(stages)}, got {attn_stages}")
        factory = _attn_factory(attn, attn_kwargs)
        blk = BLOCKS[block]
        self.block, self.stem_kind = block, stem

        c0 = widths[0]
        if stem == "imagenet":
            self.stem = nn.Sequential(
                nn.Conv2d(in_chans, c0, 7, 2, 3, bias=False), nn.BatchNorm2d(c0), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)
            )
        else:
            self.stem = nn.Sequential(nn.Conv2d(in_chans, c0, 3, 1, 1, bias=False), nn.BatchNorm2d(c0), nn.ReLU(inplace=True))
        inplanes = c0
        for i, (n, w) in enumerate(zip(layers, widths), start=1):
            a = factory if i in attn_stages else None
            blocks = []
            for j in range(n):
                blocks.append(blk(inplanes, w, 2 if (i > 1 and j == 0) else 1, a))
                inplanes = w * blk.expansion
            self.add_module(f"layer{i}", nn.Sequential(*blocks))
        self.num_stages = len(layers)
        self.num_features = inplanes
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(inplanes, num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        # torchvision's init: He-normal (fan_out) convs, BN γ=1 β=0
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def stages(self) -> list[nn.Sequential]:
        return [getattr(self, f"layer{i}") for i in range(1, self.num_stages + 1)]

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """(B, in_chans, H, W) → the last stage's map (B, num_features, H', W')."""
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            raise ValueError(f"ResNet expects images (B, C, H, W), got {tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
        x = self.stem(x)
        for s in self.stages():
            x = s(x)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.forward_features(x)), 1))


def resnet18(**kw) -> ResNet:
    return ResNet("basic", (2, 2, 2, 2), **kw)


def resnet34(**kw) -> ResNet:
    return ResNet("basic", (3, 4, 6, 3), **kw)


def resnet50(**kw) -> ResNet:
    return ResNet("bottleneck", (3, 4, 6, 3), **kw)


def resnet_small(depth: int = 20, *, width: int = 16, num_classes: int = 10, in_chans: int = 1, **kw) -> ResNet:
    """He et al.'s CIFAR ResNet-(6n+2): three stages of n basic blocks, widths w, 2w, 4w, the 3×3
    stem (28×28 Fashion-MNIST → 28, 14, 7 maps). depth=20, width=16 is the paper's ResNet-20."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 8 or (depth - 2) % 6:
        raise ValueError(f"depth must be 6n+2 with n >= 1 (8, 14, 20, 32, ...), got {depth!r}")
    require_positive_int("width", width)
    n = (depth - 2) // 6
    return ResNet("basic", (n, n, n), widths=(width, 2 * width, 4 * width), stem="cifar", num_classes=num_classes, in_chans=in_chans, **kw)


__all__ = ["ResNet", "BasicBlock", "Bottleneck", "resnet18", "resnet34", "resnet50", "resnet_small"]
