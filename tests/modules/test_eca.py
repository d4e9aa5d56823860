"""ECA: the adaptive kernel size of the paper, exactly k parameters, conv parity, locality, bad inputs."""

from __future__ import annotations

import math

import pytest
import torch

from attnkit.modules.eca import ECA, eca_kernel_size


def paper_k(C: int, gamma: float = 2, b: float = 1) -> int:
    # ECA-Net's released code (eca_module / eca_resnet): t = int(abs((log2(C) + b) / gamma)); odd
    t = int(abs((math.log(C, 2) + b) / gamma))
    return t if t % 2 else t + 1


@pytest.mark.parametrize("C, k", [(64, 3), (128, 5), (256, 5), (512, 5), (1024, 5), (2048, 7)])
def test_adaptive_kernel_size_follows_the_formula(C, k):
    assert eca_kernel_size(C) == paper_k(C) == k
    eca = ECA(C)
    assert eca.k == k
    assert sum(p.numel() for p in eca.parameters()) == k  # exactly k parameters, no reduction, no bias


def test_matches_conv1d_over_pooled_channels():
    eca = ECA(64).double()
    x = torch.randn(2, 64, 5, 3, dtype=torch.float64)
    conv = torch.nn.Conv1d(1, 1, eca.k, padding=eca.k // 2, bias=False).double()
    conv.weight.data.copy_(eca.weight.data)
    gate = torch.sigmoid(conv(x.mean((2, 3)).unsqueeze(1))).squeeze(1)
    torch.testing.assert_close(eca(x), x * gate[:, :, None, None], rtol=1e-12, atol=1e-12)


def test_a_channel_only_sees_its_k_neighbours():
    eca = ECA(32, k=3)
    x = torch.rand(1, 32, 4, 4)
    y = x.clone()
    y[:, 10] += 5.0  # changes channel 10's descriptor
    changed = ((eca(y) / y - eca(x) / x).abs().amax(dim=(0, 2, 3)) > 1e-6).nonzero().flatten().tolist()
    assert changed == [9, 10, 11]


def test_gradcheck_float64():
    eca = ECA(16).double()
    x = torch.randn(2, 16, 3, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(eca, (x,))


def test_every_constructor_argument_has_an_effect():
    assert ECA(256).k == 5
    assert ECA(256, gamma=1).k == 9  # int(9.0) = 9
    assert ECA(256, b=3).k == 5 and ECA(256, b=5).k == 7
    assert ECA(256, k=3).k == 3
    assert ECA(16).channels == 16 and ECA(4096).k == 7
    assert ECA(64, dtype=torch.float64).weight.dtype == torch.float64
    assert ECA(64, device="meta").weight.device.type == "meta"


@pytest.mark.parametrize(
    "make, x, match",
    [
        (lambda: ECA(64, k=4), None, "k must be odd"),
        (lambda: ECA(64, k=3, gamma=3), None, "gamma and b only choose k when k=None"),
        (lambda: ECA(64), torch.randn(2, 32, 3, 3), "channels=64 but x has C=32"),
        (lambda: ECA(64), torch.randn(64, 3, 3), "add a batch axis"),
        (lambda: ECA(64, gamma=0), None, "gamma must be a positive number"),
        (lambda: ECA(-1), None, "channels must be a positive int"),
    ],
)
def test_bad_inputs_get_one_clear_error(make, x, match):
    with pytest.raises(ValueError, match=match):
        make()(x)


def test_padding_keeps_channel_count():
    x = torch.randn(1, 5, 2, 2)
    assert ECA(5, k=5)(x).shape == x.shape
