"""create_attn: every name builds its module, options reach it, bad names list the valid ones."""

from __future__ import annotations

import pytest
import torch

from attnkit.modules.cbam import CBAM, SpatialAttention
from attnkit.modules.create_attn import ATTN_MODULES, create_attn
from attnkit.modules.eca import ECA
from attnkit.modules.mhsa2d import MHSA2d
from attnkit.modules.squeeze_excite import SqueezeExcite


@pytest.mark.parametrize("name, cls", [("se", SqueezeExcite), ("eca", ECA), ("cbam", CBAM), ("spatial", SpatialAttention), ("mhsa", MHSA2d), ("SE", SqueezeExcite)])
def test_names_build_their_module_keeping_the_shape(name, cls):
    m = create_attn(name, 32)
    assert type(m) is cls
    x = torch.randn(2, 32, 5, 6)
    assert m(x).shape == x.shape


def test_keyword_options_reach_the_module():
    assert create_attn("se", 64, reduction=4).fc1.out_features == 16
    assert create_attn("eca", 64, k=7).k == 7
    assert create_attn("mhsa", 64, num_heads=8).num_heads == 8


def test_bad_name_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown attention 'sse'; valid names: cbam, eca, mhsa, se, spatial"):
        create_attn("sse", 32)
    with pytest.raises(TypeError, match="name must be a string"):
        create_attn(SqueezeExcite, 32)
    assert sorted(ATTN_MODULES) == ["cbam", "eca", "mhsa", "se", "spatial"]
