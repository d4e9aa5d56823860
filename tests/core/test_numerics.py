"""Fully masked rows, precision and GQA on every exact backend:

* a fully masked row gives zero output, zero weights and finite (zero) gradients in float32,
  float64 and bfloat16, and is counted in ``report.fully_masked_rows``;
* half precision is computed with a float32 softmax: a bf16 call is as close to the float64
  result as rounding the inputs and output to bf16 allows;
* GQA/MQA (H a multiple of Hkv) equals attention over explicitly repeated k and v;
* learned scores (general, additive, cosine) get gradients.
"""

from __future__ import annotations

import pytest
import torch

import attnkit
from _core_cases import exact_backends, make_qkv, max_err
from attnkit import biases as Bi
from attnkit import masks as M
from attnkit import scores as Sc
from attnkit.core import registry
from attnkit.core.call import make_call

BACKENDS = ["reference"] + exact_backends()
DTYPES = [torch.float32, torch.float64, torch.bfloat16]


def _fully_masked_mask():
    """(B=2, ·, L=4, S=6): batch row 1 is all padding; in row 0, query 0 sees nothing (window)."""
    return M.padding_mask(torch.tensor([6, 0]), 6) & M.custom(lambda b, h, q, kv: q > 0, depends_on=())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("biased", [False, True], ids=["nobias", "alibi"])
def test_fully_masked_rows(backend, dtype, biased):
    shape = (2, 4, 2, 4, 6, 8, 5)
    q, k, v = make_qkv(shape, dtype, requires_grad=True)
    mask, bias = _fully_masked_mask(), (Bi.ALiBi(4) if biased else None)
    res = attnkit.attention(q, k, v, mask=mask, bias=bias, backend=backend)
    assert res.out.dtype == dtype
    dead = torch.zeros(2, 4, 4, dtype=torch.bool)
    dead[1] = True
    dead[0, :, 0] = True
    assert (res.out[dead] == 0).all() and torch.isfinite(res.out).all()
    assert (res.out[~dead].abs().sum(-1) > 0).all()
    assert res.report.fully_masked_rows == int(dead.sum())
    res.out.float().square().sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad.float()).all()
    assert (q.grad[dead] == 0).all()
    assert (k.grad[1] == 0).all() and (v.grad[1] == 0).all()  # nobody attends batch row 1's keys
    if registry.get(backend).supports(make_call(q, k, v, mask=mask, bias=bias, return_weights=True)) is None:
        w = attnkit.attention(q, k, v, mask=mask, bias=bias, backend=backend, return_weights=True).weights
        assert (w[dead] == 0).all() and torch.isfinite(w.float()).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_minus_inf_bias_row_is_a_fully_masked_row(backend, dtype):
    q, k, v = make_qkv((1, 2, 2, 3, 4, 8, 4), dtype)
    bias = torch.zeros(3, 4)
    bias[1] = float("-inf")
    res = attnkit.attention(q, k, v, bias=bias, backend=backend)
    assert torch.isfinite(res.out.float()).all() and (res.out[:, :, 1] == 0).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["plain", "causal+alibi", "window+pad"])
def test_bf16_close_to_float32_reference(backend, case):
    """Softmax in float32 for bf16 inputs: the error against float64 is near what rounding the
    inputs and the output to bf16 costs (a bf16 softmax would be several times worse)."""
    shape = (2, 4, 2, 16, 24, 32, 32)
    q, k, v = make_qkv(shape, torch.float64)
    kw = {
        "plain": {},
        "causal+alibi": dict(mask=M.causal(), bias=Bi.ALiBi(4)),
        "window+pad": dict(mask=M.sliding_window(left=4, right=2) & M.padding_mask(torch.tensor([20, 24]), 24)),
    }[case]
    if registry.get(backend).supports(make_call(q, k, v, **kw)) is not None:
        pytest.skip("not served")
    exact = attnkit.attention(q, k, v, backend="reference", **kw).out
    # what bf16 storage alone costs: inputs rounded to bf16, attention in float64, output rounded
    rounded = attnkit.attention(*(t.bfloat16().double() for t in (q, k, v)), backend="reference", **kw).out
    floor = max_err(rounded.bfloat16(), exact)
    got = attnkit.attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), backend=backend, **kw).out
    assert got.dtype == torch.bfloat16
    assert max_err(got, exact) <= 2.0 * floor + 1e-3, (max_err(got, exact), floor)
    f32 = attnkit.attention(q.float(), k.float(), v.float(), backend="reference", **kw).out
    assert max_err(got, f32) < 0.05


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("H,Hkv", [(4, 2), (6, 1), (4, 4)])
def test_gqa_equals_repeated_kv(backend, H, Hkv):
    q, k, v = make_qkv((2, H, Hkv, 5, 7, 8, 6), torch.float64)
    mask, bias = M.causal(), Bi.ALiBi(H)
    got = attnkit.attention(q, k, v, mask=mask, bias=bias, backend=backend).out
    g = H // Hkv
    kr, vr = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)  # query head h reads kv head h // g
    want = attnkit.attention(q, kr, vr, mask=mask, bias=bias, backend="reference").out
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    # and it is not the other grouping (kv head h % Hkv), which would be a silent bug
    if 1 < Hkv < H:
        wrong = attnkit.attention(q, k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1), mask=mask, bias=bias).out
        assert max_err(wrong, want) > 1e-3


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["general", "additive", "cosine"])
def test_learned_scores_get_gradients(backend, kind):
    score = {"general": lambda: Sc.GeneralScore(8), "additive": lambda: Sc.AdditiveScore(8, 6),
             "cosine": lambda: Sc.CosineScore(5.0)}[kind]()
    q, k, v = make_qkv((1, 2, 2, 4, 5, 8, 3))
    if registry.get(backend).supports(make_call(q, k, v, score=score)) is not None:
        pytest.skip("not served")
    attnkit.attention(q, k, v, score=score, mask=M.causal(), backend=backend).out.square().sum().backward()
    params = list(score.parameters())
    assert params and all(p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0 for p in params)
