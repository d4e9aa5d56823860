"""insert_attention: the channel count comes from a dry run, the module lands after the stage, the
model is left untouched otherwise."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnkit.models.insert_attention import insert_attention, stage_output_shape
from attnkit.models.resnet import resnet50, resnet_small
from attnkit.modules.mhsa2d import MHSA2d


def test_reads_channels_by_a_meta_dry_run_on_a_big_model():
    m = resnet50()
    before = {k: v.clone() for k, v in m.state_dict().items() if "running" in k}
    assert stage_output_shape(m, "layer4", (1, 3, 640, 640)) == (1, 2048, 20, 20)  # P5 of a 640 input
    assert stage_output_shape(m, "layer2", (1, 3, 640, 640)) == (1, 512, 80, 80)  # P3
    mod = insert_attention(m, "layer3", "mhsa", input_shape=(1, 3, 224, 224), num_heads=8)
    assert isinstance(mod, MHSA2d) and mod.channels == 1024 and mod.num_heads == 8
    assert isinstance(m.layer3, nn.Sequential) and m.layer3[-1] is mod
    assert m.training  # the dry run put the model back in its mode
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items() if k in before)  # no BN stat update


def test_model_still_runs_and_uses_the_module():
    m = resnet_small(8, width=8).eval()
    x = torch.randn(2, 1, 28, 28)
    y0 = m(x)
    mod = insert_attention(m, "layer3", "mhsa", input_shape=(1, 1, 28, 28))
    assert mod.channels == 32
    y1 = m(x)
    assert y1.shape == y0.shape and not torch.allclose(y0, y1)


def test_dotted_names_and_callables_and_plain_sequentials():
    net = nn.Sequential(nn.Conv2d(3, 12, 3), nn.Sequential(nn.ReLU(), nn.Conv2d(12, 20, 3)), nn.AdaptiveAvgPool2d(1))
    mod = insert_attention(net, "1.1", lambda c: nn.BatchNorm2d(c), input_shape=(1, 3, 16, 16))
    assert isinstance(mod, nn.BatchNorm2d) and mod.num_features == 20
    assert net(torch.randn(2, 3, 16, 16)).shape == (2, 20, 1, 1)


class DataDependent(nn.Module):
    """A forward that meta tensors cannot run (.item()): the dry run falls back to CPU zeros."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(1, 6, 3)
        self.b = nn.Conv2d(6, 10, 1)

    def forward(self, x):
        h = self.a(x)
        if h.abs().sum().item() >= 0:
            h = self.b(h)
        return h


def test_falls_back_to_cpu_when_meta_cannot_run():
    m = DataDependent()
    assert insert_attention(m, "b", "se", input_shape=(1, 1, 8, 8), reduction=2).channels == 10


@pytest.mark.parametrize(
    "after, attn, shape, match",
    [
        ("layer9", "se", (1, 1, 28, 28), "no submodule 'layer9'; its top-level stages are"),
        ("fc", "se", (1, 1, 28, 28), "must output a feature map"),
        ("layer3", "sse", (1, 1, 28, 28), "valid names"),
        ("layer3", "se", (28, 28), "expects images|feature map|4"),
        ("layer3", "se", "28", "input_shape must be a tuple"),
    ],
)
def test_bad_inputs_get_one_clear_error(after, attn, shape, match):
    with pytest.raises((ValueError, TypeError, RuntimeError), match=match):
        insert_attention(resnet_small(8, width=16), after, attn, input_shape=shape)
