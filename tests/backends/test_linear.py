"""Linear attention against its own quadratic formulation (written out here independently), the
feature maps against their definitions, and the backend's contract (approximate, never auto)."""

from __future__ import annotations

import math

import pytest
import torch

import attnkit
from attnkit import masks as M
from _backend_cases import make_qkv
from attnkit.backends.linear import favor_features, linear_attention, orthogonal_gaussian


def quadratic(q, k, v, *, causal, phi_q, phi_k):
    """out_i = Σ_j (φ(q_i)·φ(k_j)) v_j / Σ_j φ(q_i)·φ(k_j), the O(L·S) form; GQA by repeating k, v."""
    g = q.shape[1] // k.shape[1]
    fk = phi_k.repeat_interleave(g, dim=1)
    A = phi_q @ fk.transpose(-1, -2)  # (B, H, L, S)
    if causal:
        A = A * torch.ones(A.shape[-2:], dtype=torch.bool).tril()
    return (A @ v.repeat_interleave(g, dim=1)) / A.sum(-1, keepdim=True)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("L,chunk", [(37, 8), (64, 64), (50, 64), (1, 4)])
@pytest.mark.parametrize("Hkv", [4, 2])
def test_elu_equals_quadratic_form(causal, L, chunk, Hkv):
    q, k, v = make_qkv(2, 4, Hkv, L, L, 8, 6)
    out = linear_attention(q, k, v, mask=M.causal() if causal else None, chunk=chunk).out
    phi = lambda x: torch.nn.functional.elu(x) + 1  # noqa: E731
    want = quadratic(q, k, v, causal=causal, phi_q=phi(q), phi_k=phi(k))
    assert torch.allclose(out, want, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("causal", [False, True])
def test_favor_equals_its_quadratic_form(causal):
    q, k, v = make_qkv(1, 2, 2, 45, 45, 8, 8)
    scale = 1 / math.sqrt(8)
    out = linear_attention(q, k, v, mask=M.causal() if causal else None, feature_map="favor", num_features=64, seed=3, chunk=16).out
    w = orthogonal_gaussian(64, 8, seed=3, dtype=torch.float64)
    r = math.sqrt(scale)
    # independent features: exp(w·x − |x|²/2), no stabiliser (it cancels in the ratio)
    feat = lambda x: torch.exp(x @ w.T - 0.5 * x.square().sum(-1, keepdim=True))  # noqa: E731
    want = quadratic(q, k, v, causal=causal, phi_q=feat(q * r), phi_k=feat(k * r))
    assert torch.allclose(out, want, atol=1e-10, rtol=1e-8)


def test_favor_estimates_the_softmax_kernel():
    # E[φ(x)·φ(y)] = exp(x·y); the error shrinks like 1/sqrt(F): 4096 features beat 16 by far
    g = torch.Generator().manual_seed(0)
    x, y = (0.2 * torch.randn(n, 16, generator=g, dtype=torch.float64) for n in (50, 60))
    truth = torch.exp(x @ y.T)
    errs = {}
    for m in (16, 4096):
        w = orthogonal_gaussian(m, 16, seed=1, dtype=torch.float64)
        # the library's key features carry a global stabiliser exp(-max(w·x)); undo it to compare
        fx = favor_features(x, w, is_query=False) * torch.exp((x @ w.T).amax())
        fy = favor_features(y, w, is_query=False) * torch.exp((y @ w.T).amax())
        errs[m] = ((fx @ fy.T - truth).abs() / truth).mean().item()
    assert errs[4096] < 0.06 and errs[4096] < errs[16] / 3


def test_orthogonal_rows_within_a_block():
    w = orthogonal_gaussian(16, 16, seed=0, dtype=torch.float64)
    gram = w @ w.T
    assert torch.allclose(gram - torch.diag(torch.diag(gram)), torch.zeros_like(gram), atol=1e-10)


def test_backend_is_approximate_and_never_auto():
    q, k, v = make_qkv(1, 2, 2, 16, 16, 8, 8, dtype=torch.float32)
    res = attnkit.attention(q, k, v, mask=attnkit.masks.causal(), backend="linear")
    assert res.report.exact is False and "approximate" in str(res.report)
    assert torch.allclose(res.out, linear_attention(q, k, v, mask=M.causal()).out, atol=1e-6)
    auto = attnkit.attention(q, k, v, mask=attnkit.masks.causal())
    assert auto.report.backend not in ("linear", "linear_favor")
    assert "approximate" in auto.report.rejected["linear"]


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(bias=attnkit.biases.ALiBi(2)), "bias"),
        (dict(mask=attnkit.masks.sliding_window(3, 0)), "causal"),
        (dict(return_weights=True), "weights"),
        (dict(dropout_p=0.1), "dropout"),
    ],
)
def test_forced_linear_refuses_what_it_cannot_do(kw, match):
    q, k, v = make_qkv(1, 2, 2, 8, 8, 4, 4, dtype=torch.float32)
    with pytest.raises(ValueError, match=match):
        attnkit.attention(q, k, v, backend="linear", **kw)


def test_bad_arguments():
    q, k, v = make_qkv(1, 2, 2, 8, 9, 4, 4)
    with pytest.raises(ValueError, match="L == S"):
        linear_attention(q, k, v, mask=M.causal()).out
    with pytest.raises(ValueError, match="feature_map"):
        linear_attention(q, k, v, feature_map="relu").out


def test_bf16_runs_in_fp32_and_returns_bf16():
    """bf16 in, bf16 out, fp32 inside: the result is the fp32 computation on the same bf16 inputs,
    rounded once to bf16 (relative error <= 2**-9, half a bf16 ulp; 2**-8 allows one ulp of slack).
    Computing any step in bf16 adds its own rounding and breaks that bound."""
    q, k, v = (t.bfloat16() for t in make_qkv(1, 2, 2, 33, 33, 8, 8, dtype=torch.float32))
    out = linear_attention(q, k, v, mask=M.causal(), chunk=8).out
    assert out.dtype == torch.bfloat16
    ref = linear_attention(q.float(), k.float(), v.float(), mask=M.causal(), chunk=8).out
    assert ((out.float() - ref).abs() <= ref.abs() * 2**-8).all()


def test_linear_attention_speaks_the_attention_vocabulary():
    """Same keywords as attnkit.attention, an AttentionOutput back; causal= is a deprecated alias."""
    q, k, v = make_qkv(1, 2, 2, 16, 16, 8, 8, dtype=torch.float32)
    res = linear_attention(q, k, v, mask=M.causal(), score="scaled_dot", dropout_p=0.0, return_weights=False)
    assert isinstance(res, attnkit.AttentionOutput) and res.weights is None and res.report.exact is False
    assert torch.equal(res.out, attnkit.attention(q, k, v, mask=M.causal(), backend="linear").out)
    with pytest.warns(DeprecationWarning, match="mask=attnkit.masks.causal"):
        old = linear_attention(q, k, v, causal=True)
    assert torch.equal(old.out, res.out)
    with pytest.raises(ValueError, match="weights"):
        linear_attention(q, k, v, return_weights=True)
