"""The sdpa backend's gradients against a float64 oracle where CPU's fused backward is least accurate
(|lse| ~ 100s: the op rebuilds the weights from an lse rounded to float32), and the gradient that
flows into its returned lse (attention sinks need it).

Tolerance: twice the float32 reference's own error against the float64 truth, plus a few ulps of
the quantity's magnitude (the flash-attention rule used by tests/fuzz).
"""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit.backends import sdpa_flash

pytestmark = pytest.mark.skipif(not sdpa_flash.available(), reason="torch has no CPU flash-attention op")


def _plain(q, k, v, scale, bias=None, causal=False):
    """softmax(q kᵀ · scale + bias) v and its lse, in the inputs' dtype: the oracle's arithmetic."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = q @ k.transpose(-1, -2) * scale
    if bias is not None:
        s = s + bias
    if causal:
        L, S = s.shape[-2:]
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


def _grads(fn, q, k, v, d_out, d_lse=None):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out, lse = fn(q, k, v)
    loss = (out * d_out.to(out.dtype)).sum()
    if d_lse is not None:
        loss = loss + (lse * d_lse.to(lse.dtype)).sum()
    return [out.detach(), *torch.autograd.grad(loss, (q, k, v))]


def _check(got, ref32, truth, names=("out", "dq", "dk", "dv")):
    eps = torch.finfo(torch.float32).eps
    for n, a, r, t in zip(names, got, ref32, truth):
        tol = 2 * float((r.double() - t).abs().max()) + 8 * eps * max(1.0, float(t.abs().max()))
        err = float((a.double() - t).abs().max())
        assert err <= tol, f"{n}: error {err:.3g} over tolerance {tol:.3g}"


def _case(seed, H=2, Hkv=2, L=24, S=40, E=8, std=10.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, H, L, E, generator=g) * std
    k, v = torch.randn(1, Hkv, S, E, generator=g), torch.randn(1, Hkv, S, E, generator=g)
    d_out = torch.randn(1, H, L, E, generator=g)
    return q, k, v, d_out


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", ["plain", "bias", "causal", "gqa"])
def test_gradients_at_large_logits_match_float64(seed, kind):
    # q of std 10 over E=8 and an offset bias put |lse| near 100-300: each row of the op's rebuilt
    # weights was off by the same relative ~1e-5, many times the reference's own error in dv
    H, Hkv = (4, 1) if kind == "gqa" else (2, 2)
    q, k, v, d_out = _case(seed, H=H, Hkv=Hkv, S=24 if kind == "causal" else 40)  # L == S: no causal alignment question
    L, S, E = q.shape[2], k.shape[2], q.shape[3]
    scale = E ** -0.5
    bias = None
    if kind == "bias":
        bias = torch.randn(L, S, generator=torch.Generator().manual_seed(seed + 100)) * 3 + 150
    causal = kind == "causal"
    mask = attnkit.masks.causal() if causal else None

    def ours(q, k, v):
        r = attnkit.attention(q, k, v, backend="sdpa", bias=bias, mask=mask)
        return r.out, r.lse

    got = _grads(ours, q, k, v, d_out)
    ref32 = _grads(lambda q, k, v: _plain(q, k, v, scale, bias, causal), q, k, v, d_out)
    b64 = None if bias is None else bias.double()
    truth = _grads(lambda q, k, v: _plain(q, k, v, scale, b64, causal), q.double(), k.double(), v.double(), d_out.double())
    _check(got, ref32, truth)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("offset", [12.0, 17.0, 22.0])
def test_gradients_below_the_rerun_threshold_match_float64(seed, offset):
    # |lse| in [16, 32]: the fused backward on the op run with q · scale (E = 8: a scale that is not
    # a power of two), no float64 rerun; the bias offset puts every row's lse near it
    q, k, v, d_out = _case(seed, H=4, Hkv=2, std=2.0)
    L, S, E = q.shape[2], k.shape[2], q.shape[3]
    scale = E ** -0.5
    bias = torch.randn(1, 4, L, S, generator=torch.Generator().manual_seed(seed + 200)) + offset

    def ours(q, k, v):
        r = attnkit.attention(q, k, v, backend="sdpa", bias=bias)
        assert not sdpa_flash.needs_lse_correction(r.lse.detach()), "this case is meant to stay under the threshold"
        return r.out, r.lse

    got = _grads(ours, q, k, v, d_out)
    ref32 = _grads(lambda q, k, v: _plain(q, k, v, scale, bias), q, k, v, d_out)
    truth = _grads(lambda q, k, v: _plain(q, k, v, scale, bias.double()), q.double(), k.double(), v.double(), d_out.double())
    _check(got, ref32, truth)


@pytest.mark.parametrize("std", [1.0, 10.0])
@pytest.mark.parametrize("kind", ["plain", "bias", "gqa"])
def test_gradient_into_lse_matches_float64_logsumexp(std, kind):
    H, Hkv = (4, 2) if kind == "gqa" else (2, 2)
    q, k, v, d_out = _case(7, H=H, Hkv=Hkv, std=std)
    L, S, E = q.shape[2], k.shape[2], q.shape[3]
    d_lse = torch.randn(1, H, L, generator=torch.Generator().manual_seed(8))
    bias = torch.randn(1, H, L, S, generator=torch.Generator().manual_seed(9)) if kind == "bias" else None
    scale = E ** -0.5

    def ours(q, k, v):
        r = attnkit.attention(q, k, v, backend="sdpa", bias=bias)
        return r.out, r.lse

    got = _grads(ours, q, k, v, d_out, d_lse)
    ref32 = _grads(lambda q, k, v: _plain(q, k, v, scale, bias), q, k, v, d_out, d_lse)
    b64 = None if bias is None else bias.double()
    truth = _grads(lambda q, k, v: _plain(q, k, v, scale, b64), q.double(), k.double(), v.double(), d_out.double(), d_lse)
    _check(got, ref32, truth)


def test_lse_alone_is_differentiable():
    q, k, v, _ = _case(3, std=1.0)
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    torch.logsumexp(q64 @ k64.transpose(-1, -2) * q.shape[-1] ** -0.5, -1).sum().backward()
    qs, ks = q.clone().requires_grad_(), k.clone().requires_grad_()
    attnkit.attention(qs, ks, v, backend="sdpa").lse.sum().backward()
    torch.testing.assert_close(qs.grad.double(), q64.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ks.grad.double(), k64.grad, rtol=1e-5, atol=1e-5)


def test_correction_runs_only_for_large_float32_lse():
    assert not sdpa_flash.needs_lse_correction(torch.full((1, 1, 4), 15.0))
    assert sdpa_flash.needs_lse_correction(torch.full((1, 1, 4), -100.0))
    assert not sdpa_flash.needs_lse_correction(torch.full((1, 1, 4), 100.0, dtype=torch.float64))
    assert not sdpa_flash.needs_lse_correction(torch.tensor([[[float("-inf"), 1.0]]]))


@pytest.mark.parametrize("E,Ev", [(8, 4), (4, 8), (8, 1)])
def test_head_dims_that_differ_match_float64(E, Ev):
    # the op needs E == Ev; the narrower side is padded with zeros (before: the public function's
    # math path, several times the reference's own error in out and dq at these logits)
    g = torch.Generator().manual_seed(E * 10 + Ev)
    q = torch.randn(2, 4, 17, E, generator=g) * 20  # |lse| in the hundreds
    k, v = torch.randn(2, 1, 31, E, generator=g) * 3, torch.randn(2, 1, 31, Ev, generator=g)
    d_out = torch.randn(2, 4, 17, Ev, generator=g)
    bias = attnkit.biases.ALiBi(4)
    scale = 2.0

    def ours(q, k, v):
        r = attnkit.attention(q, k, v, backend="sdpa", bias=bias, scale=scale)
        return r.out, r.lse

    L, S = q.shape[2], k.shape[2]
    b32 = bias.materialize(L, S, batch=1, heads=4, device=q.device, dtype=torch.float32)
    got = _grads(ours, q, k, v, d_out)
    ref32 = _grads(lambda q, k, v: _plain(q, k, v, scale, b32), q, k, v, d_out)
    truth = _grads(lambda q, k, v: _plain(q, k, v, scale, b32.double()), q.double(), k.double(), v.double(), d_out.double())
    _check(got, ref32, truth)


def test_learned_bias_gets_its_gradient():
    # a T5 table is a parameter: its gradient is the sum of dS over the positions of each bucket
    import copy

    q, k, v, d_out = _case(11, H=2, Hkv=2, L=12, S=12, std=3.0)
    grads = {}
    for name, dt, backend in (("sdpa", torch.float32, "sdpa"), ("ref32", torch.float32, "reference"),
                              ("truth", torch.float64, "reference")):
        torch.manual_seed(0)
        bias = attnkit.biases.T5RelativeBias(2, num_buckets=8, max_distance=8)
        bias = copy.deepcopy(bias).to(dt)
        qq, kk, vv = (t.to(dt).requires_grad_() for t in (q, k, v))
        out = attnkit.attention(qq, kk, vv, backend=backend, bias=bias).out
        params = [p for p in bias.parameters() if p.requires_grad]
        assert params, "the T5 table should be a learned parameter"
        grads[name] = torch.autograd.grad((out * d_out.to(dt)).sum(), [qq, kk, vv, *params])
    eps = torch.finfo(torch.float32).eps
    for a, r, t in zip(grads["sdpa"], grads["ref32"], grads["truth"]):
        tol = 2 * float((r.double() - t).abs().max()) + 16 * eps * max(1.0, float(t.abs().max()))
        assert float((a.double() - t).abs().max()) <= tol


def test_sinks_run_on_sdpa_and_match_float64():
    # sinks scale the output by sigmoid(lse - sink): they need the gradient into sdpa's lse
    q, k, v, d_out = _case(5, H=4, Hkv=2, std=3.0)
    sinks = torch.randn(4, generator=torch.Generator().manual_seed(6))
    grads = {}
    for name, dt, backend in (("sdpa", torch.float32, "sdpa"), ("ref32", torch.float32, "reference"),
                              ("truth", torch.float64, "reference")):
        leaves = [t.to(dt).requires_grad_() for t in (q, k, v, sinks)]
        res = attnkit.attention(*leaves[:3], backend=backend, sinks=leaves[3])
        assert res.report.backend == backend
        grads[name] = [res.out.detach(), *torch.autograd.grad((res.out * d_out.to(dt)).sum(), leaves)]
    _check(grads["sdpa"], grads["ref32"], grads["truth"], names=("out", "dq", "dk", "dv", "dsinks"))
