"""The score × mask × bias vocabulary the core tests iterate over, with tiny shapes.

Each factory takes the call's shape and returns a fresh object, so learned parameters (general,
additive, T5, Shaw) are re-initialised per case from the test's seed. Shapes cover L < S (decoding
with a cache, where ``top_left`` and ``bottom_right`` differ), L == S, and GQA (H = 4, Hkv = 2).
"""

from __future__ import annotations

import torch

import attnkit
from attnkit import biases as Bi
from attnkit import masks as M
from attnkit import scores as Sc

SHAPES = {
    # name: (B, H, Hkv, L, S, E, Ev)
    "rect-gqa": (2, 4, 2, 5, 7, 8, 6),
    "square": (2, 2, 2, 6, 6, 4, 4),
}


def make_qkv(shape, dtype=torch.float32, seed=0, requires_grad=False):
    B, H, Hkv, L, S, E, Ev = shape
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, L, E, generator=g, dtype=torch.float64)
    k = torch.randn(B, Hkv, S, E, generator=g, dtype=torch.float64)
    v = torch.randn(B, Hkv, S, Ev, generator=g, dtype=torch.float64)
    return tuple(t.to(dtype).requires_grad_(requires_grad) for t in (q, k, v))


SCORES = {
    "default": lambda s: None,
    "dot": lambda s: "dot",
    "scaled_dot": lambda s: Sc.ScaledDotScore(),
    "general": lambda s: Sc.GeneralScore(s[5], num_heads=s[1]),
    "additive": lambda s: Sc.AdditiveScore(s[5], 5),
    "cosine": lambda s: Sc.CosineScore(4.0),
}


def _lengths(s):
    B, S = s[0], s[4]
    return torch.tensor([max(S - 2, 1), 0] + [S] * (B - 2))  # batch row 1 is all padding: fully masked rows


MASKS = {
    "none": lambda s: None,
    "causal_br": lambda s: M.causal(),
    "causal_tl": lambda s: M.causal("top_left"),
    "window": lambda s: M.sliding_window(left=2, right=1),
    "pad_right": lambda s: M.padding_mask(_lengths(s), s[4]),
    "pad_left": lambda s: M.padding_mask(_lengths(s), s[4], side="left"),
    "document": lambda s: M.document(torch.tensor([0] * (s[4] // 2) + [1] * (s[4] - s[4] // 2)),
                                     torch.tensor([0] * (s[3] // 2) + [1] * (s[3] - s[3] // 2))),
    "prefix_lm": lambda s: M.prefix_lm(2),
    "custom_even": lambda s: M.custom(lambda b, h, q, kv: (kv + h) % 2 == 0),
    "composed": lambda s: (M.causal() & ~M.sliding_window(left=0, right=0)) | M.custom(lambda b, h, q, kv: kv == 0, depends_on=()),
    "tensor": lambda s: torch.rand(s[0], 1, s[3], s[4], generator=torch.Generator().manual_seed(7)) > 0.4,
}

BIASES = {
    "none": lambda s: None,
    "alibi": lambda s: Bi.ALiBi(s[1]),
    "t5": lambda s: _randomised(Bi.T5RelativeBias(s[1], num_buckets=8, max_distance=16)),
    "shaw": lambda s: _randomised(Bi.RelativePositionBias(s[1], max_distance=2)),
    "custom_bias": lambda s: Bi.custom_bias(lambda b, h, q, kv: 0.3 * torch.cos(q - kv + h).float(), depends_on=("h",)),
    "softcap": lambda s: Bi.score_mod(lambda sc, b, h, q, kv: 2.0 * torch.tanh(sc / 2.0), depends_on=()),
    "tensor": lambda s: torch.randn(1, s[1], s[3], s[4], generator=torch.Generator().manual_seed(3)),
    "alibi+tensor": lambda s: [Bi.ALiBi(s[1]), torch.randn(s[3], s[4], generator=torch.Generator().manual_seed(4))],
}


def _randomised(mod):
    """Learned tables start near 0 (std 0.02); make them large enough that a wrong bucket shows."""
    with torch.no_grad():
        for p in mod.parameters():
            p.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(11))
    return mod


def exact_backends(exclude=("reference",)):
    """Every registered exact backend except ``exclude`` (picks up new backends automatically)."""
    return [b.name for b in attnkit.available_backends() if b.exact and b.name not in exclude]


def max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
