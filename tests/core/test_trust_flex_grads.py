"""The ``flex`` backend and a custom bias's trainable tensors: never a silently lost gradient.

FlexAttention has no CPU backward, so a CPU call that records one must be declined. A call records
one when q, k or v requires grad, and also when only the bias reads a trainable tensor: a
parameter of a built-in bias, or one a user's function reaches through a closure, a list, a dict,
a default, a ``functools.partial``, a bound or callable object, a global, a helper or a module's
attribute (``_capture_styles.py``; found with :func:`attnkit.core.reachable.grad_tensors`).
``bias.parameters()`` alone lists none of the user's, and flex then ran the call with no graph:
the tensor got no gradient. Under ``torch.no_grad()`` it still serves the call. With flex
registered, ``auto`` gives every such tensor the reference's gradient (float64 gradcheck).

Shape legend: q (B, H, L, E), k and v (B, H, S, E); H = 2 heads, w (H,).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import attnkit
from attnkit import biases, masks
from attnkit.backends import flex
from attnkit.core.call import make_call
from _capture_styles import W, capture_styles, leaf_for

pytest.importorskip("torch.nn.attention.flex_attention")
H = 2
STYLES = sorted(capture_styles(W))


@pytest.fixture
def enabled():
    """flex registered for the test, the registry as it was afterwards."""
    was = "flex" in {b.name for b in attnkit.available_backends()}
    flex.enable()
    yield
    if not was:
        flex.disable()


def _qkv(L: int, device="cpu"):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1, H, L, 4, generator=g, dtype=torch.float64).to(device) for _ in range(3)]


@pytest.mark.parametrize("style", STYLES)
def test_a_tensor_only_the_bias_reaches_makes_a_cpu_call_need_a_backward(style):
    bias = capture_styles(leaf_for(style))[style]
    q, k, v = _qkv(8)  # nothing but the captured tensor requires grad
    assert "no CPU backward" in flex.supports(make_call(q, k, v, bias=bias, mask=masks.causal()))
    with torch.no_grad():
        assert flex.supports(make_call(q, k, v, bias=bias, mask=masks.causal())) is None


def test_learned_alibi_slopes_make_a_cpu_call_need_a_backward():
    q, k, v = _qkv(8)
    alibi = biases.ALiBi(H, slopes=nn.Parameter(biases.alibi_slopes(H).double()))
    assert "no CPU backward" in flex.supports(make_call(q, k, v, bias=alibi))


def test_a_captured_tensor_that_needs_no_gradient_is_served():
    """The walk counts only tensors that require grad: a frozen captured table does not decline."""
    bias = capture_styles(leaf_for("closure").detach())["closure"]
    q, k, v = _qkv(8)
    assert flex.supports(make_call(q, k, v, bias=bias)) is None


@pytest.mark.parametrize("style", STYLES)
def test_forced_flex_raises_rather_than_drop_the_gradient(enabled, style):
    bias = capture_styles(leaf_for(style))[style]
    q, k, v = _qkv(8)
    with pytest.raises(ValueError, match="no CPU backward"):
        attnkit.attention(q, k, v, bias=bias, backend="flex")


@pytest.mark.parametrize("style", ["closure", "list", "partial", "bound-method", "helper", "score-mod"])
def test_auto_with_flex_registered_gives_the_reference_gradient(enabled, style):
    w = leaf_for(style)
    bias = capture_styles(w)[style]
    q, k, v = _qkv(6)

    def f(w_in):  # gradcheck perturbs w in place: the bias reads the same tensor
        res = attnkit.attention(q, k, v, bias=bias, mask=masks.causal(), backend="auto")
        assert res.report.backend != "flex"
        return res.out

    assert torch.autograd.gradcheck(f, (w,), eps=1e-6, atol=1e-7)



@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_inputs_that_require_grad_run_on_cpu_where_no_backward_is_recorded(enabled, monkeypatch, mode):
    """Under ``torch.no_grad()`` or ``torch.inference_mode()`` supports() lets a q that requires grad
    through, and FlexAttention itself refused it ("does not support backward on CPU"): the values run
    detached. FlexAttention's eager function stands in for the compiled one (no compile here)."""
    monkeypatch.setattr(flex, "_COMPILED", pytest.importorskip("torch.nn.attention.flex_attention").flex_attention)
    q, k, v = (t.requires_grad_() for t in _qkv(16))
    ctx = torch.no_grad() if mode == "no_grad" else torch.inference_mode()
    with ctx:
        got = attnkit.attention(q, k, v, mask=masks.causal(), backend="flex")
        want = attnkit.attention(q, k, v, mask=masks.causal(), backend="reference").out
    assert got.report.backend == "flex"
    torch.testing.assert_close(got.out, want, rtol=1e-12, atol=1e-12)
