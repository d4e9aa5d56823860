"""Every parameter the maths touches gets its gradient, on every backend (reference, sdpa, blockwise,
auto): learned ALiBi slopes, T5 and Shaw tables, dense bias tensors, attention sinks, and tensors a
custom bias or score_mod reaches in any way Python lets it (closure, list, dict, functools.partial,
plain object, helper function, bound method, global, a module's attribute, default argument,
callable object). gradcheck in float64 at tiny sizes, and float64 parity with the reference at
sizes where blockwise takes its fused bias routes and ``auto`` picks blockwise.
Their precision in float32: tests/core/test_trust_precision.py.

Shape legend: q (B, H, L, E), k and v (B, H, S, E).
"""

from __future__ import annotations

import weakref

import pytest
import torch
from torch import nn

import attnkit
from attnkit import biases, masks
from _capture_styles import W, capture_styles, dist, leaf_for

BACKENDS = ("reference", "sdpa", "blockwise", "auto")
H = 2


def _qkv(L: int, dtype=torch.float64, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, H, L, 4, generator=g, dtype=dtype).requires_grad_() for _ in range(3)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("style", sorted(capture_styles(W)))
def test_gradcheck_of_a_tensor_a_custom_bias_reaches(backend, style):
    w = leaf_for(style)
    bias = capture_styles(w)[style]
    if style == "score-mod" and backend == "sdpa":
        pytest.skip("sdpa takes additive biases only")
    q, k, v = (t.detach() for t in _qkv(6))

    def f(w_in):  # gradcheck perturbs w in place: the bias reads the same tensor
        return attnkit.attention(q, k, v, bias=bias, mask=masks.causal(), backend=backend).out

    assert torch.autograd.gradcheck(f, (w,), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("backend", ["blockwise", "auto"])
@pytest.mark.parametrize("style", sorted(capture_styles(W)))
def test_a_captured_tensor_gets_the_reference_gradient_on_fused_routes(backend, style):
    """At L = 300 blockwise runs its fused custom-bias route (and ``auto`` picks blockwise for the
    additive styles): the gradients of q, k, v and the captured tensor equal the reference's."""
    w = leaf_for(style)
    bias = capture_styles(w)[style]
    q, k, v = _qkv(300)
    grads = {}
    for be in ("reference", backend):
        out = attnkit.attention(q, k, v, bias=bias, mask=masks.causal(), backend=be).out
        grads[be] = torch.autograd.grad((out * torch.linspace(-1, 1, 4, dtype=torch.float64)).sum(), (q, k, v, w))
    for got, want in zip(grads[backend], grads["reference"]):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11)


def _builtin(name: str):
    """(bias, its learnable tensor) for each built-in bias that has one."""
    if name == "alibi":
        slopes = nn.Parameter(biases.alibi_slopes(H).double())
        return biases.ALiBi(H, slopes=slopes), slopes
    if name == "t5":
        b = biases.T5RelativeBias(H, num_buckets=8, max_distance=16, dtype=torch.float64)
        with torch.no_grad():
            b.table.normal_(0, 0.5)
        return b, b.table
    if name == "shaw":
        b = biases.RelativePositionBias(H, max_distance=3, dtype=torch.float64)
        with torch.no_grad():
            b.table.normal_(0, 0.5)
        return b, b.table
    t = torch.randn(1, H, 1, 6, dtype=torch.float64, requires_grad=True)  # per head and key
    return biases.TensorBias(t), t


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["alibi", "t5", "shaw", "tensor"])
def test_gradcheck_of_every_learnable_input_of_a_builtin_bias(backend, name):
    bias, param = _builtin(name)
    q, k, v = (t.detach() for t in _qkv(6))  # their gradients: tests/core/test_gradcheck.py
    for m in (None, masks.causal()):
        def f(p, m=m):
            return attnkit.attention(q, k, v, bias=bias, mask=m, backend=backend).out

        assert torch.autograd.gradcheck(f, (param,), eps=1e-6, atol=1e-7)


def test_learned_alibi_slopes_are_a_parameter_of_the_module():
    slopes = nn.Parameter(biases.alibi_slopes(4))
    alibi = biases.ALiBi(4, slopes=slopes)
    assert any(p is slopes for p in alibi.parameters())


@pytest.mark.parametrize("backend", ["blockwise", "auto"])
@pytest.mark.parametrize("name", ["alibi", "t5", "shaw"])
def test_builtin_bias_gradients_on_the_relative_route(backend, name):
    """L = 300, no mask: blockwise runs the fused relative-bias route."""
    bias, param = _builtin(name)
    q, k, v = _qkv(300)
    grads = {}
    for be in ("reference", backend):
        out = attnkit.attention(q, k, v, bias=bias, backend=be).out
        grads[be] = torch.autograd.grad((out * torch.linspace(-1, 1, 4, dtype=torch.float64)).sum(), (q, k, v, param))
    for got, want in zip(grads[backend], grads["reference"]):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("backend", ["reference", "blockwise", "auto"])
def test_gradcheck_of_sinks(backend):
    q, k, v = _qkv(6)
    sinks = torch.tensor([0.3, -1.2], dtype=torch.float64, requires_grad=True)

    def f(s, q):
        return attnkit.attention(q, k, v, sinks=s, mask=masks.causal(), backend=backend).out

    assert torch.autograd.gradcheck(f, (sinks, q), eps=1e-6, atol=1e-7)


def test_a_tensor_read_directly_and_through_one_computed_from_it_is_declined_by_blockwise():
    """``raw`` and ``w = 2 · raw`` both captured and both read: the per-tile backward would count
    the path through w twice, so blockwise declines (a clear error when named) and auto serves
    the call elsewhere with the right gradient."""
    raw = nn.Parameter(torch.tensor([0.2, -0.1], dtype=torch.float64))
    w = raw * 2

    def both(b, h, qi, kv):
        return (w[h] + raw[h]) * torch.cos(dist(qi, kv))

    q, k, v = (t.detach() for t in _qkv(300))
    with pytest.raises(ValueError, match="blockwise"):
        attnkit.attention(q, k, v, bias=both, backend="blockwise")
    res = attnkit.attention(q, k, v, bias=both, backend="auto")
    assert res.report.backend != "blockwise"
    got = torch.autograd.grad(res.out.sum(), raw, retain_graph=True)[0]
    want = torch.autograd.grad(attnkit.attention(q, k, v, bias=both, backend="reference").out.sum(), raw)[0]
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_a_source_tensor_captured_beside_the_one_the_bias_reads_is_not_counted_twice():
    raw = nn.Parameter(torch.tensor([0.2, -0.1], dtype=torch.float64))
    w = raw * 2
    holder = {"raw": raw, "w": w}

    def via_w(b, h, qi, kv):
        return holder["w"][h] * torch.cos(dist(qi, kv))

    q, k, v = (t.detach() for t in _qkv(300))
    grads = [torch.autograd.grad(attnkit.attention(q, k, v, bias=via_w, backend=be).out.sum(), raw, retain_graph=True)[0]
             for be in ("reference", "blockwise")]
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-10, atol=1e-12)


def test_a_tile_that_reads_a_tensor_the_check_did_not_see_raises_instead_of_dropping_it():
    """A tensor reached only through a weak reference, and only on query rows >= 256: the forward's
    tiny-tile check cannot see it, the backward's per-tile check does."""
    seen = nn.Parameter(torch.tensor([0.1, 0.2], dtype=torch.float64))
    hidden = nn.Parameter(torch.tensor([0.3, 0.4], dtype=torch.float64))
    ref = weakref.ref(hidden)

    def sometimes(s, b, h, qi, kv):
        extra = ref()[h] if int(qi.min()) >= 256 else 0.0  # the second query tile (of 256 rows) on
        return s + (seen[h] + extra) * torch.cos(dist(qi, kv))

    q, k, v = (t.detach() for t in _qkv(300))
    out = attnkit.attention(q, k, v, bias=biases.score_mod(sometimes), backend="blockwise").out
    with pytest.raises(RuntimeError, match="trainable tensor"):
        out.sum().backward()
