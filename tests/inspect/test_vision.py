"""inspect.vision: gates captured by hooks (removed afterwards, outputs unchanged), image plots."""

from __future__ import annotations

import pytest
import torch

from attnkit.inspect.vision import capture_gates, plot_channel_gates, plot_pixel_attention, plot_spatial_gate, plot_vit_attention
from attnkit.models.resnet import resnet_small
from attnkit.modules.cbam import CBAM
from attnkit.modules.squeeze_excite import SqueezeExcite

pytest.importorskip("matplotlib")


def test_capture_gates_records_every_gate_and_leaves_the_model_alone():
    m = resnet_small(8, width=16, attn="cbam", attn_kwargs={"reduction": 4}).eval()
    x = torch.randn(3, 1, 28, 28)
    y0 = m(x)
    with capture_gates(m) as rec:
        y1 = m(x)
    torch.testing.assert_close(y0, y1)
    assert [tuple(g.shape) for g in rec.channel.values()] == [(3, 16), (3, 32), (3, 64)]
    assert [tuple(s.shape) for s in rec.spatial.values()] == [(3, 28, 28), (3, 14, 14), (3, 7, 7)]
    assert all(bool(((g > 0) & (g < 1)).all()) for g in rec.channel.values())
    assert not any(mod._forward_hooks for mod in m.modules())  # hooks removed


def test_captured_channel_gate_is_the_factor_applied():
    se = SqueezeExcite(8, 2)
    x = torch.rand(2, 8, 3, 3) + 0.5
    with capture_gates(se) as rec:
        y = se(x)
    g = rec.channel["gate"]
    torch.testing.assert_close(y, x * g[:, :, None, None])


def test_model_without_gates_is_an_error():
    with pytest.raises(ValueError, match="has no SE/ECA/CBAM gate"):
        with capture_gates(torch.nn.Conv2d(1, 1, 1)):
            pass


def test_plots_write_pngs(tmp_path):
    m = CBAM(16, 4).eval()
    with capture_gates(m) as rec:
        m(torch.rand(2, 16, 6, 5))
    plot_channel_gates(rec.channel["channel.gate"], labels=["a", "b"], path=tmp_path / "g.png")
    plot_spatial_gate(rec.spatial["spatial.gate"][0], torch.rand(6, 5), path=tmp_path / "s.png")
    w = torch.softmax(torch.randn(2, 12, 12), -1)
    plot_pixel_attention(w, (3, 4), (1, 2), torch.rand(3, 4), path=tmp_path / "p.png")
    layers = [torch.softmax(torch.randn(1, 2, 5, 5), -1) for _ in range(2)]
    plot_vit_attention(layers, (2, 2), torch.rand(8, 8), path=tmp_path / "v.png")
    for f in ("g", "s", "p", "v"):
        assert (tmp_path / f"{f}.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: plot_pixel_attention(torch.rand(2, 12, 12), (3, 4), (3, 0)), "outside the 3x4 map"),
        (lambda: plot_pixel_attention(torch.rand(2, 10, 10), (3, 4), (0, 0)), "N = 3\\*4 = 12"),
        (lambda: plot_channel_gates(torch.rand(2, 3, 4)), "gates must be \\(C,\\) or \\(K, C\\)"),
        (lambda: plot_channel_gates(torch.rand(2, 4), labels=["a"]), "labels has 1 names for 2 rows"),
        (lambda: plot_vit_attention([torch.rand(1, 2, 5, 5)], (3, 3)), "T=5 tokens"),
    ],
)
def test_bad_inputs_get_one_clear_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()
