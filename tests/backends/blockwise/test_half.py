"""Blockwise in bf16/fp16: scores, running max/sum and D = rowsum(dO·O) in float32.

The yardstick is the ``reference`` backend in the same dtype: its own error against a float64 run on
the same rounded inputs. Blockwise must stay within 2× of it, forward and backward, with logits up
to ±100 (inputs of std 10, E = 64) — where half-precision scores are off by whole units. Before the
fix blockwise bf16 was ~140× the reference's forward error here (benchmarks/results/half_precision.json).
"""

from __future__ import annotations

import pytest
import torch

import attnkit
from _backend_cases import tiles
from attnkit import biases as Bi
from attnkit import masks as M

DTYPES = [torch.bfloat16, torch.float16]


def _run(q, k, v, dout, backend, **kw):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out = attnkit.attention(q, k, v, backend=backend, **kw).out
    grads = torch.autograd.grad(out, (q, k, v), dout.to(out.dtype))
    return [t.double() for t in (out, *grads)]


def _errors(got, truth):
    return [float((a - b).detach().abs().max()) for a, b in zip(got, truth)]


def _inputs(dtype, std, L=96, S=80, E=64, H=2, Hkv=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(1, H, L, E, generator=g) * std).to(dtype)
    k = (torch.randn(1, Hkv, S, E, generator=g) * std).to(dtype)
    v = (torch.randn(1, Hkv, S, E, generator=g) * std).to(dtype)
    dout = torch.randn(1, H, L, E, generator=g).to(dtype)
    return q, k, v, dout


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize(
    "case",
    [
        ("plain", 10.0, {}),
        ("std1", 1.0, {}),
        ("causal", 10.0, {"mask": M.causal()}),
        ("alibi_padding", 10.0, {"mask": M.padding_mask(torch.tensor([70]), 80), "bias": Bi.ALiBi(2)}),
    ],
    ids=lambda c: c[0],
)
def test_half_within_twice_the_reference_error(dtype, case):
    _, std, kw = case
    q, k, v, dout = _inputs(dtype, std)
    truth = _run(q.double(), k.double(), v.double(), dout.double(), "reference", **kw)
    ref = _errors(_run(q, k, v, dout, "reference", **kw), truth)
    with tiles(32, 16):  # several query and key tiles, ragged edges
        got = _errors(_run(q, k, v, dout, "blockwise", **kw), truth)
    eps = torch.finfo(dtype).eps
    for name, g, r in zip(("out", "dq", "dk", "dv"), got, ref):
        # a floor of a few ulps of the output scale for quantities the reference gets exactly
        assert g <= 2 * r + 4 * eps * std, f"{name}: blockwise {g:.4g} vs reference {r:.4g} ({dtype})"


def test_gqa_half_within_twice_the_reference_error():
    q, k, v, dout = _inputs(torch.bfloat16, 10.0, H=4, Hkv=2)
    truth = _run(q.double(), k.double(), v.double(), dout.double(), "reference")
    ref = _errors(_run(q, k, v, dout, "reference"), truth)
    with tiles(32, 16):
        got = _errors(_run(q, k, v, dout, "blockwise"), truth)
    for name, gv, r in zip(("out", "dq", "dk", "dv"), got, ref):
        assert gv <= 2 * r, f"{name}: blockwise {gv:.4g} vs reference {r:.4g}"


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
def test_one_key_query_has_zero_score_gradient(dtype):
    """One query over one key: the weight is exactly 1 whatever the score, so dq = dk = 0. With a
    half-precision D = dO·O against an fp32 dP = dO·v, blockwise gave |dq| ≈ 0.3 (bf16, std 10)."""
    g = torch.Generator().manual_seed(1)
    q, k, v = ((torch.randn(1, 4, 1, 64, generator=g) * 10).to(dtype) for _ in range(3))
    dout = torch.randn(1, 4, 1, 64, generator=g).to(dtype)
    _, dq, dk, dv = _run(q, k, v, dout, "blockwise")
    assert float(dq.abs().max()) <= 1e-3 and float(dk.abs().max()) <= 1e-3
    assert torch.equal(dv, dout.double())  # dv = P dO with P = 1


def test_half_output_keeps_dtype_and_lse_is_float32():
    q, k, v, _ = _inputs(torch.bfloat16, 1.0, L=8, S=8)
    res = attnkit.attention(q, k, v, backend="blockwise")
    assert res.out.dtype == torch.bfloat16
