"""Fuzz cases on which ``sdpa`` (and ``auto``, which picked it) once failed, pinned so they keep passing.

Each is re-drawn from ``benchmarks/fuzz_attention.py``'s sequence (``draw_case`` from
``random.Random(seed)`` in order) and judged like the fuzz: out, dq, dk, dv within twice the float32
reference's error against the float64 oracle plus a few ulps (``_fuzz_judge``). What broke, all in
float32 at |lse| in the hundreds (logits of std 5–10, large biases):

* dv (sometimes dq, dk): CPU's fused backward rebuilt the weights from an lse rounded to float32,
  one relative error per row that does not average out (:mod:`attnkit.backends.sdpa_flash`);
* out and dq with E != Ev or a learned (T5) bias: the public function's math path;
* dv at |lse| below the float64 rerun's threshold (14 in seed 2's case 2603: document mask, Shaw
  bias, E = 32): the op's forward and backward applied a scale that is not a power of two with
  different roundings; float32 calls now run the op on ``q · scale`` with its scale at 1;
* out at logits of std 10 (seed 0's case 6266 of the small budget), when that fold was first also
  used above the threshold: rounding ``q · scale`` perturbs large logits; such calls' outputs are
  recomputed with the scale in the op;
* out without gradients for GQA with a head dim that is not unit-stride (seed 1's case 4754 of the
  small budget): the public function ran its math path; such inputs are now copied first.

Two more cases (``JUDGE_PINNED``) were the judge's own misreadings, pinned on every backend: seed 1's
case 2460 (unscaled dot scores of ~300: PyTorch's fused kernel rounded them in a GEMM's fused
multiply-add order, 3.5x the three orders the baseline then sampled; it now samples that order too)
and case 2757 (a query seeing one key: blockwise's dq was a D-cancellation at 1.6x a floor that took
|dP| for the rounding scale of a dot product whose terms summed to 9x that; the floor now takes the
terms' sizes). Under this judge every case above still fails on the code before its fix (re-checked).

One case (``BLOCKWISE_PINNED``) failed for blockwise, pinned on every backend: seed 5's case 5855 of
the full budget (dq at 1.5x: the bias routes' backward took D = dO · O from the fused kernel's output
while rebuilding the weights itself; it fails on the code before the fix).

Shape legend: q (B, H, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev).
"""

from __future__ import annotations

import random
import sys
from functools import lru_cache
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from _fuzz_cases import draw_case  # noqa: E402
from _fuzz_judge import run_case  # noqa: E402

# (seed, budget) -> indices that failed for sdpa
PINNED = {
    (0, "small"): [297, 378, 438, 1225, 1604, 1648, 1671, 1936, 1944, 1992, 2978, 4243, 6266],
    (1, "full"): [5, 37, 64, 224, 249, 275, 314, 429, 625, 835],
    (1, "small"): [4754],
    (2, "full"): [2603],
}

# (seed, budget) -> indices the judge once failed on correct results, checked on every backend
JUDGE_PINNED = {(1, "small"): [2460, 2757]}

# (seed, budget) -> indices that failed for blockwise, checked on every backend: seed 5's case 5855
# (a dense float bias, logits of std 10, GQA): the bias routes' backward took D = dO · O from the
# fused kernel's output while rebuilding the weights itself, and dq came out at 1.5x its tolerance
BLOCKWISE_PINNED = {(5, "full"): [5855]}


@lru_cache(maxsize=None)
def _drawn(seed: int, budget: str, upto: int) -> tuple:
    rng = random.Random(seed)
    return tuple(draw_case(rng, i, budget) for i in range(upto + 1))


def _case(seed: int, budget: str, index: int) -> dict:
    upto = max(PINNED.get((seed, budget), []) + JUDGE_PINNED.get((seed, budget), []) + BLOCKWISE_PINNED.get((seed, budget), []))
    return _drawn(seed, budget, upto)[index]


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny calls: one intra-op thread (tests/conftest.py)


@pytest.mark.parametrize("seed,budget,index", [(s, b, i) for (s, b), idx in PINNED.items() for i in idx],
                         ids=[f"seed{s}-{b}-{i}" for (s, b), idx in PINNED.items() for i in idx])
def test_pinned_case_passes_on_sdpa_and_auto(seed, budget, index):
    params = _case(seed, budget, index)
    assert params["index"] == index
    res = run_case(params, ["sdpa", "auto"])
    for name, v in res.verdicts.items():
        assert v.status != "failed", f"{name}: {v.failure} errors {v.errors} tolerances {v.tolerances} {v.detail}"


# checked on every backend: the judge's misreadings and blockwise's faults
EVERY_BACKEND = [(s, b, i) for pinned in (JUDGE_PINNED, BLOCKWISE_PINNED) for (s, b), idx in pinned.items() for i in idx]


@pytest.mark.parametrize("seed,budget,index", EVERY_BACKEND, ids=[f"seed{s}-{b}-{i}" for s, b, i in EVERY_BACKEND])
def test_pinned_case_passes_on_every_backend(seed, budget, index):
    params = _case(seed, budget, index)
    assert params["index"] == index
    for name, v in run_case(params).verdicts.items():
        assert v.status != "failed", f"{name}: {v.failure} errors {v.errors} tolerances {v.tolerances} {v.detail}"
