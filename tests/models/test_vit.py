"""ViT: ViT-B/16's parameter count, attention equals softmax(QKᵀ/√d)V layer by layer, positions at
new image sizes, rollout, every argument has an effect, bad inputs."""

from __future__ import annotations

import math

import pytest
import torch

import attnkit
from attnkit.models.vit import sincos_2d, vit_b16, vit_tiny


def count(m) -> int:
    return sum(p.numel() for p in m.parameters())


def test_vit_b16_has_the_published_parameter_count():
    with torch.device("meta"):
        m = vit_b16()
    assert count(m) == 86_567_656  # ViT-B/16, 224, 1000 classes (timm / the paper's "86M")


def test_attention_equals_plain_softmax_reference_in_every_layer():
    m = vit_tiny(depth=3).double().eval()
    x = torch.randn(2, 1, 28, 28, dtype=torch.float64)
    normed = []
    hooks = [b.norm1.register_forward_hook(lambda mod, a, out: normed.append(out)) for b in m.blocks]
    try:
        with attnkit.inspect.capture(m) as rec:
            m(x)
    finally:
        for h in hooks:
            h.remove()
    assert len(rec.attentions) == 3
    for blk, z, w in zip(m.blocks, normed, rec.attentions):
        a = blk.attn
        B, T, D = z.shape
        nh, E = a.num_heads, a.head_dim

        def heads(t):
            return t.reshape(B, T, nh, E).transpose(1, 2)

        q, k, v = heads(a.q_proj(z)), heads(a.k_proj(z)), heads(a.v_proj(z))
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(E), dim=-1)  # (B, nh, T, T)
        torch.testing.assert_close(w, p, rtol=1e-10, atol=1e-12)
        out = a.out_proj((p @ v).transpose(1, 2).reshape(B, T, D))
        torch.testing.assert_close(a(z)[0], out, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("position", ["learned", "sinusoidal"])
@pytest.mark.parametrize("size", [(28, 28), (42, 42), (35, 56)])
def test_positions_at_new_image_sizes_are_finite(position, size):
    m = vit_tiny(position=position).eval()
    y = m(torch.randn(2, 1, *size))
    assert y.shape == (2, 10) and bool(torch.isfinite(y).all())
    pos = m.positions((size[0] // 7, size[1] // 7))
    assert pos.shape == (1, 1 + (size[0] // 7) * (size[1] // 7), m.dim) and bool(torch.isfinite(pos).all())


def test_learned_positions_interpolate_smoothly_and_keep_the_training_grid():
    m = vit_tiny()
    torch.testing.assert_close(m.positions(m.grid), m.pos_embed)
    with torch.no_grad():  # a linear ramp over columns must stay a ramp after bicubic resizing
        ramp = torch.linspace(-1, 1, 4)
        m.pos_embed[0, 1:] = ramp.repeat(4)[:, None].expand(16, m.dim)
    big = m.positions((4, 8))[0, 1:, 0].reshape(4, 8)
    assert bool((big[:, 1:] >= big[:, :-1] - 1e-6).all())  # monotone along the columns
    torch.testing.assert_close(big[0], big[3])  # rows identical, as in the source


def test_sinusoidal_positions_are_the_2d_sin_cos_formula():
    pe = sincos_2d(3, 5, 8)
    y, x = 2, 3
    omega = [1.0, 1.0 / 100.0]  # 1 / 10000^(i / (D/4)), D/4 = 2
    want = [math.sin(y * o) for o in omega] + [math.cos(y * o) for o in omega]
    want += [math.sin(x * o) for o in omega] + [math.cos(x * o) for o in omega]
    torch.testing.assert_close(pe[y * 5 + x], torch.tensor(want))


def test_rollout_rows_sum_to_one():
    m = vit_tiny().eval()
    with attnkit.inspect.capture(m) as rec:
        m(torch.randn(2, 1, 28, 28))
    assert set(rec.backends()) == {"sdpa"}  # captured while the fused backend ran
    roll = attnkit.inspect.attention_rollout(rec.attentions)
    assert roll.shape == (2, 17, 17)
    torch.testing.assert_close(roll.sum(-1), torch.ones(2, 17))


def test_every_constructor_argument_has_an_effect():
    x = torch.randn(1, 1, 28, 28)
    base = vit_tiny()
    n = count(base)
    assert vit_tiny(image_size=56).pos_embed.shape[1] == 65  # image_size
    assert vit_tiny(patch_size=4).grid == (7, 7)  # patch_size
    assert vit_tiny(in_chans=3)(torch.randn(1, 3, 28, 28)).shape == (1, 10)  # in_chans
    assert vit_tiny(num_classes=4)(x).shape == (1, 4)  # num_classes
    assert count(vit_tiny(dim=32)) < n  # dim
    assert len(vit_tiny(depth=2).blocks) == 2  # depth
    assert vit_tiny(num_heads=2).blocks[0].attn.num_heads == 2  # num_heads
    assert count(vit_tiny(mlp_ratio=4.0)) > n  # mlp_ratio
    assert vit_tiny(dropout=0.5).blocks[0].mlp[2].p == 0.5 and vit_tiny(dropout=0.5).blocks[0].attn.dropout == 0.5
    assert vit_tiny(position="sinusoidal").pos_embed is None  # position


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: vit_tiny(image_size=30), "multiple of patch_size=7"),
        (lambda: vit_tiny(position="rope"), "position must be one of"),
        (lambda: vit_tiny(num_heads=3), "divisible by num_heads"),
        (lambda: vit_tiny(dim=62, num_heads=2, position="sinusoidal"), "divisible by 4"),
        (lambda: vit_tiny()(torch.randn(1, 1, 30, 28)), "not a multiple of patch_size=7"),
        (lambda: vit_tiny()(torch.randn(1, 28, 28)), "expects images"),
        (lambda: vit_tiny()(torch.randn(1, 3, 28, 28)), "expected 1 image channels, got C=3"),
    ],
)
def test_bad_inputs_get_one_clear_error(make, match):
    with pytest.raises(ValueError, match=match):
        make()
