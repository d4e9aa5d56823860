"""``create_attn(name, channels, **kw)``: build a vision attention module from its name.

The string factory of timm's ``layers/create_attn.py``: a model takes ``attn="eca"`` and each block
calls ``create_attn(attn, channels)``; a misspelt name fails at construction, listing the names.

====================  ===========================================  ==================================
name                  module                                       paper
====================  ===========================================  ==================================
``"se"``              :class:`~.squeeze_excite.SqueezeExcite`      Hu et al. 2018
``"eca"``             :class:`~.eca.ECA`                           Wang et al. 2020
``"cbam"``            :class:`~.cbam.CBAM`                         Woo et al. 2018
``"spatial"``         :class:`~.cbam.SpatialAttention`             Woo et al. 2018 (spatial branch)
``"mhsa"``            :class:`~.mhsa2d.MHSA2d`                     Srinivas et al. 2021 / Liu et al. 2022
====================  ===========================================  ==================================

Every module maps (B, C, H, W) → (B, C, H, W), C = ``channels``.
"""

from __future__ import annotations

from typing import Callable

from torch import nn

from .cbam import CBAM, SpatialAttention
from .eca import ECA
from .mhsa2d import MHSA2d
from .squeeze_excite import SqueezeExcite

ATTN_MODULES: dict[str, Callable[..., nn.Module]] = {
    "se": SqueezeExcite,
    "eca": ECA,
    "cbam": CBAM,
    "spatial": SpatialAttention,
    "mhsa": MHSA2d,
}


def create_attn(name: str, channels: int, **kw) -> nn.Module:
    """``create_attn("eca", 256)``, ``create_attn("se", 64, reduction=8)``; keyword arguments go to
    the module's constructor."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, one of {sorted(ATTN_MODULES)}, got {type(name).__name__}")
    key = name.lower()
    if key not in ATTN_MODULES:
        raise ValueError(f"unknown attention {name!r}; valid names: {', '.join(sorted(ATTN_MODULES))}")
    return ATTN_MODULES[key](channels, **kw)


__all__ = ["ATTN_MODULES", "create_attn"]
