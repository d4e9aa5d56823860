"""float64 ``torch.autograd.gradcheck`` through the reference and sdpa backends (and any other
exact backend) with masks and each bias, including learned bias tables and a fully masked row
(whose gradient must be exactly 0, never NaN)."""

from __future__ import annotations

import pytest
import torch

import attnkit
from _core_cases import exact_backends
from attnkit import biases as Bi
from attnkit import masks as M
from attnkit.core import registry
from attnkit.core.call import make_call

B, H, Hkv, L, S, E, Ev = 2, 2, 1, 3, 4, 3, 2
FAST = True  # random-projection gradcheck: same float64 finite-difference test, a fraction of the calls


def _bias(name):
    if name == "none":
        return None
    if name == "alibi":
        return Bi.ALiBi(H)
    if name == "t5":
        return Bi.T5RelativeBias(H, num_buckets=4, max_distance=3, dtype=torch.float64)
    if name == "shaw":
        return Bi.RelativePositionBias(H, max_distance=1, dtype=torch.float64)
    if name == "custom":
        return Bi.custom_bias(lambda b, h, q, kv: 0.5 * torch.cos(q - kv + h).double())
    if name == "softcap":
        return Bi.score_mod(lambda s, b, h, q, kv: 2 * torch.tanh(s / 2))
    if name == "tensor":
        return torch.randn(B, 1, L, S, dtype=torch.float64)
    raise KeyError(name)


MASKS = {
    "none": lambda: None,
    "causal": lambda: M.causal(),
    # batch row 1 has no valid key: its rows are fully masked
    "pad+window": lambda: M.padding_mask(torch.tensor([3, 0]), S) & M.sliding_window(left=1, right=1),
}


@pytest.mark.parametrize("backend", ["reference"] + exact_backends())
@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("bias_name", ["none", "alibi", "t5", "shaw", "custom", "softcap", "tensor"])
def test_gradcheck(backend, mask_name, bias_name):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, L, E, dtype=torch.float64, generator=g, requires_grad=True)
    k = torch.randn(B, Hkv, S, E, dtype=torch.float64, generator=g, requires_grad=True)
    v = torch.randn(B, Hkv, S, Ev, dtype=torch.float64, generator=g, requires_grad=True)
    mask, bias = MASKS[mask_name](), _bias(bias_name)
    if registry.get(backend).supports(make_call(q, k, v, mask=mask, bias=bias)) is not None:
        pytest.skip(f"{backend} does not serve {bias_name}")
    if isinstance(bias, torch.nn.Module) and "table" in bias._parameters:
        # the learned table itself is a gradcheck input: gradcheck perturbs it in place, and every
        # backend reads it through the module, as in training
        with torch.no_grad():
            bias.table.normal_(generator=g)
        f = lambda q, k, v, t: attnkit.attention(q, k, v, mask=mask, bias=bias, backend=backend).out  # noqa: E731
        assert torch.autograd.gradcheck(f, (q, k, v, bias.table), fast_mode=FAST)
        return
    if isinstance(bias, torch.Tensor):
        bias.requires_grad_(True)
        f = lambda q, k, v, b: attnkit.attention(q, k, v, mask=mask, bias=b, backend=backend).out  # noqa: E731
        assert torch.autograd.gradcheck(f, (q, k, v, bias), fast_mode=FAST)
        return
    f = lambda q, k, v: attnkit.attention(q, k, v, mask=mask, bias=bias, backend=backend).out  # noqa: E731
    assert torch.autograd.gradcheck(f, (q, k, v), fast_mode=FAST)


@pytest.mark.parametrize("backend", ["reference"] + exact_backends())
def test_fully_masked_rows_have_zero_finite_gradients(backend):
    q = torch.randn(1, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 2, 5, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, 5, 4, dtype=torch.float64, requires_grad=True)
    allowed = torch.ones(1, 2, 3, 5, dtype=torch.bool)
    allowed[:, :, 1] = False  # query 1 sees nothing
    out = attnkit.attention(q, k, v, mask=allowed, backend=backend).out
    out.sum().backward()
    assert (out[:, :, 1] == 0).all()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert (q.grad[:, :, 1] == 0).all()
