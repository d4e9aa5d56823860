"""ResNet family: torchvision's and the attention papers' parameter counts, where attention sits,
every argument has an effect, bad inputs."""

from __future__ import annotations

import pytest
import torch

from attnkit.models.resnet import ResNet, resnet18, resnet34, resnet50, resnet_small
from attnkit.modules.eca import eca_kernel_size
from attnkit.modules.squeeze_excite import SqueezeExcite


def count(m) -> int:
    return sum(p.numel() for p in m.parameters())


def on_meta(fn, **kw):
    with torch.device("meta"):  # shapes only: ImageNet models build in milliseconds
        return fn(**kw)


# (stage channels after expansion, blocks) of ResNet-50
R50_BLOCKS = [(256, 3), (512, 4), (1024, 6), (2048, 3)]


def test_plain_counts_match_torchvision():
    # torchvision.models.resnet{18,34,50}(num_classes=1000), published parameter counts
    assert count(on_meta(resnet18)) == 11_689_512
    assert count(on_meta(resnet34)) == 21_797_672
    assert count(on_meta(resnet50)) == 25_557_032


def test_se_resnet50_is_the_papers_28_1M():
    r = 16
    se_formula = sum(n * (2 * C * C // r + C + C // r) for C, n in R50_BLOCKS)
    n = count(on_meta(resnet50, attn="se"))
    assert n == 25_557_032 + se_formula == 28_088_024  # SE-Net Table 1: 25.6M → 28.1M


def test_cbam_resnet50_is_the_papers_28_09M():
    n = count(on_meta(resnet50, attn="cbam"))
    assert n == 28_088_024 + 16 * (2 * 7 * 7 + 2) == 28_089_624
    assert round(n / 1e6, 2) == 28.09  # CBAM Table 2


def test_eca_resnet50_adds_the_adaptive_k_per_block():
    extra = sum(n * eca_kernel_size(C) for C, n in R50_BLOCKS)
    assert extra == 3 * 5 + 4 * 5 + 6 * 5 + 3 * 7
    assert count(on_meta(resnet50, attn="eca")) == 25_557_032 + extra


def test_resnet20_is_the_papers_0_27M():
    assert round(count(resnet_small(20, in_chans=3)) / 1e6, 2) == 0.27  # He et al. Table 6


def test_attention_sits_on_the_residual_branch_before_the_sum():
    m = resnet_small(8, width=16, attn="se").eval()
    blk = m.layer2[0]
    x = torch.randn(2, 16, 14, 14)
    branch = blk.bn2(blk.conv2(blk.relu(blk.bn1(blk.conv1(x)))))
    want = torch.relu(blk.attn(branch) + blk.downsample(x))
    torch.testing.assert_close(blk(x), want)
    assert isinstance(blk.attn, SqueezeExcite)


@pytest.mark.parametrize("attn", [None, "se", "eca", "cbam", "spatial", "mhsa"])
def test_small_resnet_runs_every_attention(attn):
    torch.manual_seed(0)
    m = resnet_small(8, width=16, attn=attn, attn_stages=[3] if attn == "mhsa" else None)
    y = m(torch.randn(2, 1, 28, 28))
    assert y.shape == (2, 10)
    y.square().sum().backward()
    gates = [blk.attn for stage in (m.layer1, m.layer2, m.layer3) for blk in stage if not isinstance(blk.attn, torch.nn.Identity)]
    assert len(gates) == (0 if attn is None else 1 if attn == "mhsa" else 3)  # one block per stage at depth 8
    for gate in gates:  # each attention sits on the path to the logits, so training reaches it
        grads = [p.grad for p in gate.parameters()]
        assert grads and any(g is not None and g.abs().sum() > 0 for g in grads), f"{attn}: {gate} gets no gradient"


def test_every_constructor_argument_has_an_effect():
    x1 = torch.randn(1, 1, 28, 28)
    base = count(resnet_small(8, width=8))
    assert count(resnet_small(14, width=8)) > base  # depth
    assert count(resnet_small(8, width=16)) > base  # width
    assert resnet_small(8, width=8, num_classes=3)(x1).shape == (1, 3)  # num_classes
    assert resnet_small(8, width=8, in_chans=3)(torch.randn(1, 3, 28, 28)).shape == (1, 10)  # in_chans
    assert count(resnet_small(8, width=8, attn="eca")) > base  # attn
    se2 = count(resnet_small(8, width=16, attn="se", attn_kwargs={"reduction": 2}))
    assert se2 > count(resnet_small(8, width=16, attn="se"))  # attn_kwargs
    only3 = resnet_small(8, width=16, attn="se", attn_stages=[3])  # attn_stages
    assert isinstance(only3.layer1[0].attn, torch.nn.Identity) and isinstance(only3.layer3[0].attn, SqueezeExcite)
    assert resnet_small(8, width=8, attn=lambda c: torch.nn.Dropout())(x1).shape == (1, 10)  # a callable attn
    a = ResNet("basic", (1, 1), widths=(8, 16), stem="cifar", in_chans=1)
    b = ResNet("basic", (1, 1), widths=(8, 16), stem="imagenet", in_chans=1)
    assert a.forward_features(x1).shape[-1] == 14 and b.forward_features(x1).shape[-1] == 4  # stem
    c = ResNet("bottleneck", (1, 1), widths=(8, 16), stem="cifar", in_chans=1)
    assert c.num_features == 64 and a.num_features == 16  # block
    assert ResNet("basic", (2, 1), widths=(8, 16), in_chans=1).layer1[1] is not None  # layers


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: resnet_small(9), "depth must be 6n\\+2"),
        (lambda: resnet50(attn="sse"), "unknown attn 'sse'; valid names: cbam, eca, mhsa, se, spatial"),
        (lambda: resnet50(attn=3), "attn must be a name"),
        (lambda: ResNet("wide", (1,)), "block must be one of"),
        (lambda: ResNet("basic", (1, 1), widths=(8,)), "one entry per stage"),
        (lambda: ResNet("basic", (1, 1), widths=(8, 8), attn="se", attn_stages=[3]), "attn_stages must be stage numbers"),
        (lambda: ResNet("basic", (1,), widths=(8,), attn_kwargs={"reduction": 2}), "without attn"),
        (lambda: resnet_small(8, width=8)(torch.randn(1, 28, 28)), "expects images \\(B, C, H, W\\)"),
        (lambda: resnet_small(8, width=8, attn="se", attn_kwargs={"reduction": 16}), "reduction=16 is larger than channels=8"),
    ],
)
def test_bad_arguments_get_one_clear_error(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()
