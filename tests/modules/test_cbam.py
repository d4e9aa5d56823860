"""CBAM: both pooling branches through one MLP, channel-then-spatial order, parameter count, bad inputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnkit.modules.cbam import CBAM, ChannelAttention, SpatialAttention


def reference_cbam(m: CBAM, x: torch.Tensor) -> torch.Tensor:
    """Eq. 2–3 of the paper, written with torch's pooling ops and the module's weights."""
    l1, l2 = m.channel.mlp[0], m.channel.mlp[2]

    def mlp(d):
        return F.linear(F.relu(F.linear(d, l1.weight, l1.bias)), l2.weight, l2.bias)

    avg = F.adaptive_avg_pool2d(x, 1).flatten(1)
    mx = F.adaptive_max_pool2d(x, 1).flatten(1)
    x1 = x * torch.sigmoid(mlp(avg) + mlp(mx))[:, :, None, None]
    sp = torch.cat([x1.mean(1, keepdim=True), x1.max(1, keepdim=True).values], 1)
    s = m.spatial
    z = F.conv2d(sp, s.conv.weight, padding=s.kernel_size // 2)
    z = F.batch_norm(z, s.norm.running_mean, s.norm.running_var, s.norm.weight, s.norm.bias, training=False, eps=s.norm.eps)
    return x1 * torch.sigmoid(z)


def test_matches_the_papers_equations():
    m = CBAM(32, 4).double().eval()
    with torch.no_grad():
        m.spatial.norm.running_mean.fill_(0.3)
        m.spatial.norm.running_var.fill_(2.0)
    x = torch.randn(2, 32, 6, 5, dtype=torch.float64)
    torch.testing.assert_close(m(x), reference_cbam(m, x), rtol=1e-12, atol=1e-12)


def test_max_pool_branch_changes_the_output():
    # same average per channel, different maximum: a CBAM without the max branch could not tell them apart
    ca = ChannelAttention(8, 2)
    a = torch.ones(1, 8, 4, 4)
    b = torch.ones(1, 8, 4, 4)
    b[:, :, 0, 0] += 3.0
    b[:, :, 0, 1] -= 3.0
    torch.testing.assert_close(a.mean((2, 3)), b.mean((2, 3)))
    gate_a, gate_b = (ca(t)[:, :, 3, 3] / t[:, :, 3, 3] for t in (a, b))  # pixel (3, 3) is 1 in both
    assert not torch.allclose(gate_a, gate_b)


def test_avg_pool_branch_changes_the_output():
    ca = ChannelAttention(8, 2)
    a = torch.zeros(1, 8, 4, 4)
    a[:, :, 0, 0] = 4.0
    b = torch.full((1, 8, 4, 4), 3.0)
    b[:, :, 0, 0] = 4.0  # same max, larger mean
    assert not torch.allclose(ca(a)[:, :, 0, 0], ca(b)[:, :, 0, 0])


def test_order_is_channel_then_spatial():
    m = CBAM(16, 4).eval()
    x = torch.randn(2, 16, 5, 5)
    torch.testing.assert_close(m(x), m.spatial(m.channel(x)))
    assert not torch.allclose(m(x), m.channel(m.spatial(x)))


@pytest.mark.parametrize("C, r, k", [(64, 16, 7), (256, 16, 7), (32, 4, 3)])
def test_parameter_count_is_se_mlp_plus_spatial_conv_and_bn(C, r, k):
    m = CBAM(C, r, k, device="meta")
    # SE MLP 2C²/r + C/r + C, spatial conv 2·k² (no bias), BatchNorm γ, β: 2
    assert sum(p.numel() for p in m.parameters()) == 2 * C * C // r + C // r + C + 2 * k * k + 2


def test_spatial_attention_alone_gates_positions_not_channels():
    sa = SpatialAttention(kernel_size=3).eval()
    x = torch.rand(2, 6, 5, 4) + 0.1
    ratio = sa(x) / x
    torch.testing.assert_close(ratio, ratio[:, :1].expand_as(ratio))
    assert sa(torch.randn(1, 11, 5, 4)).shape == (1, 11, 5, 4)  # any C without channels=


def test_gradcheck_float64():
    m = CBAM(8, 2, 3).double().eval()
    x = torch.randn(2, 8, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(m, (x,))


def test_every_constructor_argument_has_an_effect():
    assert CBAM(32, 4).channel.mlp[0].out_features == 8 and CBAM(32, 8).channel.mlp[0].out_features == 4
    assert CBAM(64).channel.mlp[2].out_features == 64
    assert CBAM(32, 16, 3).spatial.conv.kernel_size == (3, 3)
    assert CBAM(32, dtype=torch.float64).spatial.conv.weight.dtype == torch.float64
    assert CBAM(32, device="meta").channel.mlp[0].weight.device.type == "meta"
    with pytest.raises(ValueError, match="channels=4"):
        SpatialAttention(4)(torch.randn(1, 5, 3, 3))  # SpatialAttention's channels checks the input


@pytest.mark.parametrize(
    "make, x, match",
    [
        (lambda: CBAM(16), torch.randn(2, 8, 4, 4), "channels=16 but x has C=8"),
        (lambda: CBAM(16), torch.randn(16, 4, 4), "add a batch axis"),
        (lambda: CBAM(8, reduction=16), None, "reduction=16 is larger than channels=8"),
        (lambda: CBAM(16, spatial_kernel=4), None, "kernel_size must be odd"),
    ],
)
def test_bad_inputs_get_one_clear_error(make, x, match):
    with pytest.raises(ValueError, match=match):
        make()(x)
