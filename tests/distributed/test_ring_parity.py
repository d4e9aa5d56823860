"""Ring attention on 2 and 4 gloo ranks equals single-process softmax attention, forward and backward.

One spawn per world size runs every case (process start costs seconds); the per-case assertions
are separate tests over the collected report. Tolerance: the ring's max error against the float64
reference must be within ``FACTOR`` times the error of the plain reference computed in the ring's
own dtype (float32 or bfloat16), the flash-attention test convention.
"""

from __future__ import annotations

import pytest
import torch

from _ring_cases import parity_worker
from _ring_harness import run_ranks

FACTOR = 4.0  # ring error <= FACTOR * (plain float32 reference error) + FLOOR
FLOOR = 1e-6  # a few float32 ulps at |x| ~ 1; the reference's own error can be ~0 by luck

BASE = dict(B=2, H=4, Hkv=4, E=8, Ev=6, seed=0)


def _cases(world_size: int) -> list[dict]:
    even = 6 * world_size  # divisible by 2W: zigzag chunks of 3
    uneven = even - 3  # padded internally to a multiple of the chunk count
    cases = []
    for layout in ("contiguous", "zigzag"):
        for causal in (False, True):
            tag = f"{layout}-{'causal' if causal else 'full'}"
            cases.append(dict(BASE, name=f"{tag}-mha", layout=layout, causal=causal, L=even, seed=1))
            cases.append(dict(BASE, name=f"{tag}-gqa", layout=layout, causal=causal, L=even, H=6, Hkv=2, seed=2))
            cases.append(dict(BASE, name=f"{tag}-uneven", layout=layout, causal=causal, L=uneven, H=4, Hkv=2, seed=3))
            # whatever the padded tail holds never reaches outputs or gradients
            for hostile in ("nan", "inf", "1e38"):
                cases.append(dict(BASE, name=f"{tag}-uneven-pad-{hostile}", layout=layout, causal=causal, L=uneven, H=4,
                                  Hkv=2, seed=3, hostile=float(hostile)))
    # logits of std 8 (|lse| of tens): the merges and the lse-based backward at the sizes where a
    # float32 lse's rounding starts to show (measured: within 2.1x of the reference's own error)
    for causal in (False, True):
        cases.append(dict(BASE, name=f"zigzag-{'causal' if causal else 'full'}-large-logits", layout="zigzag", causal=causal,
                          L=even, H=4, Hkv=2, seed=4, q_std=8.0))
    bf16 = dict(layout="zigzag", causal=True, L=even, H=4, Hkv=2, dtype=torch.bfloat16)
    cases.append(dict(BASE, name="zigzag-causal-gqa-bf16", **bf16))
    return cases


@pytest.fixture(scope="module", params=[2, 4], ids=lambda w: f"W{w}")
def report(request):
    world_size = request.param
    per_rank = run_ranks(parity_worker, world_size, _cases(world_size), 1 if world_size == 2 else 2)
    return world_size, per_rank


CASE_NAMES = [c["name"] for c in _cases(2)]


@pytest.mark.parametrize("name", CASE_NAMES)
@pytest.mark.parametrize("quantity", ["out", "dq", "dk", "dv"])
def test_matches_float64_reference(report, name, quantity):
    world_size, per_rank = report
    for rank, rep in per_rank.items():
        r = rep[name][quantity]
        assert r["finite"], f"W={world_size} rank {rank} {name} {quantity}: non-finite values"
        tol = FACTOR * r["reference"] + (FLOOR if "bf16" not in name else 0.0)
        assert r["ring"] <= tol, (
            f"W={world_size} rank {rank} {name} {quantity}: ring error {r['ring']:.3g} > {tol:.3g} "
            f"({FACTOR} x the plain reference's own error {r['reference']:.3g})"
        )


@pytest.mark.parametrize("name", [n for n in CASE_NAMES if "uneven" in n])
def test_padding_is_exactly_zero(report, name):
    """Padded query rows output 0 and padded positions get zero gradient."""
    world_size, per_rank = report
    for rank, rep in per_rank.items():
        for quantity in ("out", "dq", "dk", "dv"):
            assert rep[name][quantity]["pad_abs_max"] == 0.0, f"W={world_size} rank {rank} {name} {quantity}"


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_shard_gather_round_trip(report, layout):
    world_size, per_rank = report
    assert all(rep[f"roundtrip_{layout}"] for rep in per_rank.values())


def test_group_argument(report):
    """A ring over a sub-group (singleton groups at W=2: the no-communication path)."""
    world_size, per_rank = report
    for rank, rep in per_rank.items():
        assert rep["subgroup"] < 1e-12, f"W={world_size} rank {rank}: float64 ring error {rep['subgroup']:.3g}"


def test_mismatched_shard_lengths_raise_everywhere(report):
    world_size, per_rank = report
    for rank, rep in per_rank.items():
        msg = rep["mismatch"]
        assert "Lr: rank 0=4" in msg and f"rank {world_size - 1}=6" in msg, f"rank {rank}: {msg}"
        assert "shard_sequence" in msg, f"rank {rank}: the error should say how to fix it: {msg}"
