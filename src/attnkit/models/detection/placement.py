"""Where a YOLO-style detector gets :class:`~attnkit.modules.mhsa2d.MHSA2d`: the option object.

The popular "YOLOv8 + MHSA" recipes insert multi-head self-attention before a chosen feature level
so that every cell of that map can read every other cell (global context a stack of 3×3 convs only
reaches through depth). Three sites are offered, the ones those recipes use:

======  ==============================================================================
site    where the MHSA2d block goes (a residual block: y = x + MHSA(x))
======  ==============================================================================
p5      backbone, after SPPF on the stride-32 map (BoTNet's place: the smallest map)
p4      backbone, after the stride-16 stage (4× the positions of P5: 16× the score matrix)
neck    neck, on the P5 output of the PAN, just before the head reads it
======  ==============================================================================

Cost: an H×W map has N = H·W positions; attention adds 4·N·C² (projections) + 2·N²·C (scores and
values) multiply-adds per image, so P4 costs 16× P5's N² term. ``PLACEMENTS`` names the variants
the detection experiment compares.
"""

from __future__ import annotations

from dataclasses import dataclass

SITES = ("p4", "p5", "neck")


@dataclass(frozen=True)
class MHSAPlacement:
    """``sites``: a subset of :data:`SITES` (empty = the plain detector); ``num_heads`` per block."""

    sites: tuple[str, ...] = ()
    num_heads: int = 4

    def __post_init__(self):
        if isinstance(self.sites, str):
            raise TypeError(f"MHSAPlacement: sites must be a tuple of site names, got the string {self.sites!r}; "
                            f"write sites=({self.sites!r},)")
        bad = [s for s in self.sites if s not in SITES]
        if bad:
            raise ValueError(f"MHSAPlacement: unknown site(s) {bad}; valid sites: {', '.join(SITES)}")
        if isinstance(self.num_heads, bool) or not isinstance(self.num_heads, int) or self.num_heads < 1:
            raise ValueError(f"MHSAPlacement: num_heads must be an int >= 1, got {self.num_heads!r}")
        object.__setattr__(self, "sites", tuple(dict.fromkeys(self.sites)))  # each site once

    def __contains__(self, site: str) -> bool:
        return site in self.sites

    @classmethod
    def named(cls, name: str, num_heads: int = 4) -> "MHSAPlacement":
        """One of :data:`PLACEMENTS` by name (``"plain"``, ``"mhsa_p5"``, ``"mhsa_p4p5"``, ``"mhsa_neck"``)."""
        if name not in PLACEMENTS:
            raise ValueError(f"unknown detector variant {name!r}; valid names: {', '.join(PLACEMENTS)}")
        return cls(PLACEMENTS[name], num_heads)


PLACEMENTS = {"plain": (), "mhsa_p5": ("p5",), "mhsa_p4p5": ("p4", "p5"), "mhsa_neck": ("neck",)}

__all__ = ["MHSAPlacement", "PLACEMENTS", "SITES"]
