"""Edge sizes and devices: E = 0 and Hkv = 0 are clear errors, B = 0 gives an
empty result on every backend (with a working backward), shapes flow on the ``meta`` device through
``attention`` and ``MultiHeadAttention`` (models are built on meta before loading weights), and a
memory budget a forced backend overshoots is said in the report."""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit import biases, masks
from attnkit.core.tiles import TileState

BACKENDS = ["reference", "sdpa", "blockwise", "auto"]

CASES = {
    "none": {},
    "causal": {"mask": masks.causal()},
    "window": {"mask": masks.sliding_window(2)},
    "padding": {"mask": masks.padding_mask(torch.tensor([3, 5]), 5)},
    "alibi": {"bias": biases.ALiBi(4)},
}


def _qkv(B, device="cpu", grad=False):
    q = torch.randn(B, 4, 6, 8, device=device, requires_grad=grad)
    k = torch.randn(B, 2, 5, 8, device=device, requires_grad=grad)
    v = torch.randn(B, 2, 5, 3, device=device, requires_grad=grad)
    return q, k, v


def test_zero_head_dim_is_a_clear_error():
    q, k, v = torch.randn(1, 2, 3, 0), torch.randn(1, 2, 4, 0), torch.randn(1, 2, 4, 5)
    with pytest.raises(ValueError, match="head dim E must be positive.*E=0"):
        attnkit.attention(q, k, v)


def test_zero_kv_heads_is_a_clear_error():
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 0, 4, 4), torch.randn(1, 0, 4, 4)
    with pytest.raises(ValueError, match="Hkv=0"):
        attnkit.attention(q, k, v)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["none", "causal", "window", "alibi"])
def test_empty_batch_gives_empty_result_and_backward(backend, case):
    q, k, v = _qkv(0, grad=True)
    res = attnkit.attention(q, k, v, backend=backend, **CASES[case])
    assert res.out.shape == (0, 4, 6, 3) and res.lse.shape == (0, 4, 6)
    assert res.report.fully_masked_rows == 0 and "B=0" in res.report.reason
    res.out.sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape
    if backend == "reference":
        w = attnkit.attention(q, k, v, backend=backend, return_weights=True, **CASES[case]).weights
        assert w.shape == (0, 4, 6, 5)


def test_empty_batch_still_checks_a_forced_backend():
    q, k, v = _qkv(0)
    with pytest.raises(ValueError, match="cannot serve"):
        attnkit.attention(q, k, v, backend="sdpa", return_weights=True)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(CASES))
def test_meta_tensors_propagate_shapes(backend, case, request):
    q, k, v = _qkv(2, device="meta")
    res = attnkit.attention(q, k, v, backend=backend, **CASES[case])
    assert res.out.device.type == "meta" and res.out.shape == (2, 4, 6, 3)


def test_meta_call_level_validation_reads_no_values():
    """Everything before the backend (checks, masks, custom-function shape checks, dispatch) runs on meta."""
    from attnkit.core.call import make_call
    from attnkit.core.dispatch import choose

    q, k, v = _qkv(2, device="meta")
    for kw in CASES.values():
        call = make_call(q, k, v, **kw)
        choose(call, "auto")
    call = make_call(q, k, v, mask=masks.custom(lambda b, h, qi, kv: kv <= qi), bias=biases.custom_bias(lambda b, h, qi, kv: (qi - kv).float()))
    assert call.q.device.type == "meta"


def test_multihead_attention_built_on_meta():
    mha = attnkit.MultiHeadAttention(16, 4, kv_heads=2, device="meta")
    x = torch.empty(2, 5, 16, device="meta")
    out, w = mha(x, causal=True)
    assert out.device.type == "meta" and out.shape == (2, 5, 16) and w is None
    mha.to_empty(device="cpu")  # then materialize and load, the usual meta workflow
    mha.reset_parameters()
    out, _ = mha(torch.randn(2, 5, 16), causal=True)
    assert out.shape == (2, 5, 16) and torch.isfinite(out).all()


def test_forced_backend_over_memory_budget_says_so():
    q, k, v = _qkv(2)
    res = attnkit.attention(q, k, v, backend="reference", memory_budget=64)
    assert res.report.backend == "reference"
    assert "over memory budget" in res.report.reason and "reference" in res.report.estimates
    roomy = attnkit.attention(q, k, v, backend="reference", memory_budget=2**30)
    assert "over memory budget" not in roomy.report.reason
    with attnkit.options(memory_budget=64):
        assert "over memory budget" in attnkit.attention(q, k, v, backend="blockwise").report.reason


def test_multihead_attention_on_meta_with_padding_masks():
    mha = attnkit.MultiHeadAttention(16, 4, device="meta")
    x = torch.empty(2, 5, 16, device="meta")
    am = torch.ones(2, 5, dtype=torch.long, device="meta")
    kpm = torch.zeros(2, 5, dtype=torch.bool, device="meta")
    for kw in ({"attention_mask": am}, {"key_padding_mask": kpm}, {"attention_mask": am, "causal": True}):
        out, _ = mha(x, **kw)
        assert out.device.type == "meta" and out.shape == (2, 5, 16)


def test_masks_on_meta_report_partial_tiles_and_skip_value_checks():
    lengths = torch.tensor([3, 5], device="meta")
    pad = masks.padding_mask(lengths, 5)  # the range check needs values: skipped on meta
    doc = masks.document(torch.zeros(5, dtype=torch.long, device="meta"))
    pre = masks.prefix_lm(torch.tensor([2, 3], device="meta"))
    for m in (pad, doc, pre, masks.causal() & pad):
        assert m.tile_state((0, 5), (0, 5), 5, 5, batch=2, heads=1, device="meta") is TileState.PARTIAL
    # the analytic shortcuts still decide tiles on real devices
    assert masks.causal().tile_state((0, 2), (4, 6), 6, 6) is not None
    with pytest.raises(ValueError, match="lengths"):
        masks.padding_mask(torch.tensor([3, 9]), 5)
