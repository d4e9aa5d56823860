"""Ring attention serves masks and position biases over global positions, skipping what a mask empties.

``chunk_codes`` is checked against the dense mask (a pair is skipped only if no pair of positions in
it may attend; with chunk-aligned chunked/causal masks every such pair is skipped). One spawn of 2
gloo ranks runs every case in float64 against ``attnkit.attention(..., backend="reference")`` on the
gathered sequence (forward and the three gradients, agreement to rounding); the ring's plan of
blocks is checked to leave a skipped pair out. (NaN inputs take the gathered reference path, where
a NaN value reaches rows that a mask hides it from as ``0 · NaN``: tests/core/test_nan_paths.py.)
"""

from __future__ import annotations

import pytest
import torch

import attnkit
from _ring_harness import run_ranks
from _ring_mask_cases import mask_parity_worker
from attnkit import biases as Bi
from attnkit import masks as M
from attnkit.distributed import ring_attention
from attnkit.distributed.ring_masks import FULL_PAIR, MASKED_PAIR, SKIP_PAIR, chunk_codes

TOL = 1e-10  # float64 ring vs float64 single-device reference


@pytest.mark.parametrize(
    "mask,layout,W,C,L",
    [
        (M.causal(), "contiguous", 4, 4, 16),
        (M.causal(), "zigzag", 2, 3, 11),
        (M.sliding_window(left=3, right=0), "contiguous", 4, 4, 16),
        (M.chunked(8), "zigzag", 2, 4, 16),
        (M.document(torch.tensor([0] * 5 + [1] * 7 + [2] * 4)), "contiguous", 4, 4, 16),
        (None, "contiguous", 3, 4, 10),
    ],
    ids=["causal", "causal-zigzag-padded", "window", "chunked-zigzag", "document", "none-padded"],
)
def test_chunk_codes_are_proved_and_skip_every_empty_pair(mask, layout, W, C, L):
    codes = chunk_codes(mask, layout, W, C, L)
    n = len(codes)
    dense = torch.zeros(n * C, n * C, dtype=torch.bool)
    dense[:L, :L] = True if mask is None else mask.materialize(L, L)[0, 0]
    for cq in range(n):
        for ck in range(n):
            tile = dense[cq * C:(cq + 1) * C, ck * C:(ck + 1) * C]
            if codes[cq][ck] == SKIP_PAIR:
                assert not tile.any()
            else:
                assert tile.any(), f"pair ({cq}, {ck}) is empty but not skipped"
                if codes[cq][ck] == FULL_PAIR:
                    assert tile.all()
    assert any(MASKED_PAIR in row for row in codes) or mask is None


def _cases():
    base = dict(B=2, H=4, Hkv=2, E=8, seed=0)
    t5 = Bi.T5RelativeBias(4, num_buckets=8, max_distance=16).requires_grad_(False)
    with torch.no_grad():
        for p in t5.parameters():
            p.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(11))
    docs = torch.tensor([[0] * 6 + [1] * 9 + [2] * 9, [0] * 12 + [1] * 12])
    return [
        dict(base, name="causal-zigzag", layout="zigzag", L=24, mask=M.causal()),
        dict(base, name="window-contiguous-padded", layout="contiguous", L=21, mask=M.sliding_window(left=5, right=2)),
        dict(base, name="chunked-zigzag-padded", layout="zigzag", L=22, mask=M.chunked(5)),
        dict(base, name="document-per-row", layout="contiguous", L=24, mask=M.document(docs)),
        dict(base, name="prefix-lm", layout="zigzag", L=24, mask=M.prefix_lm(7)),
        dict(base, name="alibi-causal", layout="zigzag", L=24, mask=M.causal(), bias=Bi.ALiBi(4)),
        dict(base, name="t5-window", layout="contiguous", L=23, mask=M.sliding_window(left=4, right=4), bias=t5),
        dict(base, name="shaw-no-mask", layout="contiguous", L=24, bias=Bi.RelativePositionBias(4, max_distance=3).requires_grad_(False)),
    ]


def test_a_skipped_pair_is_not_computed():
    """Contiguous chunks of 12 and a chunked mask of 12: rank 1 holding rank 0's keys plans no block
    (no FLOPs), and its own keys one full-width block."""
    from attnkit.distributed.ring_attention import _plan, _RingConfig

    mask = M.chunked(12)
    codes = tuple(map(tuple, chunk_codes(mask, "contiguous", 2, 12, 24)))
    cfg = _RingConfig(group=None, rank=1, world_size=2, scale=1.0, layout="contiguous", seq_len=24, timeout=None,
                      mask=mask, codes=codes)
    assert _plan(cfg, 0, 12, torch.device("cpu")) == []
    (own,) = _plan(cfg, 1, 12, torch.device("cpu"))
    assert (own.q, own.k) == (slice(0, 12), slice(0, 12))


@pytest.fixture(scope="module")
def report():
    per_rank = run_ranks(mask_parity_worker, 2, _cases(), timeout=240)
    return per_rank


@pytest.mark.parametrize("name", [c["name"] for c in _cases()])
def test_ring_matches_single_device_attention(report, name):
    for rank, rows in report.items():
        row = rows[name]
        for quantity, err in row.items():
            assert err <= TOL, f"rank {rank} {name} {quantity}: max error {err:.3g} > {TOL}"


def test_ring_refuses_what_it_cannot_serve_before_any_communication():
    q = torch.randn(1, 2, 6, 4)
    with pytest.raises(ValueError, match="return_weights must be False"):
        ring_attention(q, q, q, return_weights=True)
    with pytest.raises(ValueError, match="dropout_p must be 0"):
        ring_attention(q, q, q, dropout_p=0.1)
    with pytest.raises(ValueError, match="dot-product form"):
        ring_attention(q, q, q, score=attnkit.scores.AdditiveScore(4, 3))
    with pytest.raises(ValueError, match="score modifier"):
        ring_attention(q, q, q, bias=Bi.score_mod(lambda s, b, h, qi, kv: torch.tanh(s), depends_on=()))
    with pytest.raises(ValueError, match="freeze them"):
        ring_attention(q, q, q, bias=Bi.T5RelativeBias(2, num_buckets=4, max_distance=8))
    scale = torch.nn.Parameter(torch.tensor(0.5))
    captured = {"scale": scale}  # a trainable tensor reached through a closure's dict, not .parameters()
    with pytest.raises(ValueError, match="freeze them"):
        ring_attention(q, q, q, bias=Bi.custom_bias(lambda b, h, qi, kv: captured["scale"] * (qi - kv).float()))
