"""The optional ``flex`` backend: what it declines and why, that ``auto`` does not pick it on CPU, the
BlockMask it builds from attnkit's tile states, and (``ATTNKIT_FLEX_COMPILE=1``: one CPU compile of
about ten seconds) its compiled output against the float64 reference.

Shape legend: B batch, H heads, L queries, S keys, E head dim.
"""

from __future__ import annotations

import os

import pytest
import torch

import attnkit
from attnkit import biases as Bi
from attnkit import masks as M
from attnkit import scores as Sc
from attnkit.backends import flex
from attnkit.core import registry
from attnkit.core.call import make_call

flex_mod = pytest.importorskip("torch.nn.attention.flex_attention")


@pytest.fixture
def enabled():
    flex.enable()
    yield
    flex.disable()


def _qkv(L=64, requires_grad=False, dtype=torch.float32, device="cpu"):
    g = torch.Generator().manual_seed(0)
    ts = [torch.randn(2, 4, L, 16, generator=g, dtype=torch.float64).to(dtype) for _ in range(3)]
    return [t.to(device).requires_grad_(requires_grad) for t in ts]


def test_not_registered_until_enabled():
    assert "flex" not in {b.name for b in attnkit.available_backends()}
    flex.enable()
    try:
        assert registry.get("flex").priority < min(b.priority for b in attnkit.available_backends() if b.exact and b.name != "flex")
    finally:
        flex.disable()
    assert "flex" not in {b.name for b in attnkit.available_backends()}


def test_available_here():
    assert flex.available() is None  # torch 2.13 has flex_attention and torch.compile


@pytest.mark.parametrize(
    "kw, requires_grad, words",
    [
        ({}, True, ["no CPU backward", "torch.no_grad()", "blockwise"]),
        ({"return_weights": True}, False, ["weights"]),
        ({"dropout_p": 0.1}, False, ["dropout"]),
        ({"score": Sc.AdditiveScore(16, 8)}, False, ["dot-product"]),
    ],
    ids=["cpu_training", "weights", "dropout", "additive_score"],
)
def test_declines_with_the_reason(kw, requires_grad, words):
    q, k, v = _qkv(requires_grad=requires_grad)
    why = flex.supports(make_call(q, k, v, mask=M.causal(), **kw))
    assert why is not None
    for w in words:
        assert w in why, (w, why)


def test_a_learned_bias_needs_gradients_too():
    q, k, v = _qkv()
    t5 = Bi.T5RelativeBias(4)  # learned table: an nn.Parameter
    assert "no CPU backward" in flex.supports(make_call(q, k, v, bias=t5))
    with torch.no_grad():
        assert flex.supports(make_call(q, k, v, bias=t5)) is None


def test_serves_cpu_inference():
    q, k, v = _qkv(requires_grad=True)
    with torch.no_grad():
        assert flex.supports(make_call(q, k, v, mask=M.causal(), bias=Bi.ALiBi(4))) is None
    q, k, v = _qkv()
    assert flex.supports(make_call(q, k, v, mask=lambda b, h, qi, kv: kv <= qi)) is None


def test_unavailable_torch_is_a_reason(monkeypatch):
    monkeypatch.setattr(flex, "available", lambda: "this torch has no torch.nn.attention.flex_attention")
    q, k, v = _qkv()
    assert "flex_attention" in flex.supports(make_call(q, k, v))


def test_a_tensor_on_another_device_is_named():
    """FlexAttention's compiled mask_mod / score_mod cannot copy between devices (a device_put in the
    graph fails to lower): ALiBi slopes or captured ids elsewhere than q are declined, by name."""
    cpu, meta = torch.device("cpu"), torch.device("meta")
    alibi = Bi.ALiBi(4)
    assert flex._tensor_elsewhere(None, alibi, cpu) is None
    assert flex._tensor_elsewhere(None, alibi.to(meta), cpu) == "bias.slopes"
    ids = torch.zeros(8, dtype=torch.long, device=meta)
    custom = M.custom(lambda b, h, qi, kv: ids[qi] == ids[kv])
    assert "captured" in flex._tensor_elsewhere(M.causal() & custom, None, cpu)
    assert flex._tensor_elsewhere(M.document(ids), None, cpu).startswith("mask.")
    assert flex._tensor_elsewhere(M.document(ids), None, meta) is None


def test_forced_on_cpu_training_raises_with_the_reason(enabled):
    q, k, v = _qkv(requires_grad=True)
    with pytest.raises(ValueError) as err:
        attnkit.attention(q, k, v, mask=M.causal(), backend="flex")
    assert "backend='flex' cannot serve" in str(err.value) and "no CPU backward" in str(err.value)


@pytest.mark.parametrize("mask", [M.causal(), M.sliding_window(left=255), None], ids=["causal", "window", "none"])
def test_auto_does_not_pick_it_on_cpu(enabled, mask):
    """Its measured CPU rate is below the others' (flex_race.json): auto passes it over as slower."""
    q, k, v = _qkv(L=1024)
    with torch.no_grad():
        call = make_call(q, k, v, mask=mask)
        res = attnkit.attention(q, k, v, mask=mask)
    assert res.report.backend != "flex"
    assert "slower" in res.report.rejected["flex"]
    est = flex.estimate(call)
    assert est["time_s"] > min(b.estimate(call)["time_s"] for b in attnkit.available_backends() if b.exact and b.name != "flex")


def test_no_estimate_where_nothing_was_measured():
    q, k, v = _qkv(device="meta")
    est = flex.estimate(make_call(q, k, v, mask=M.causal()))
    assert est["time_s"] == float("inf") and est["bytes"] == float("inf")


@pytest.mark.parametrize(
    "mask",
    [M.causal(), M.sliding_window(left=40, right=5), M.document(torch.tensor([0] * 100 + [1] * 156)),
     M.custom(lambda b, h, qi, kv: (kv // 64) % 2 == 0)],
    ids=["causal", "window", "document", "custom"],
)
def test_block_mask_from_tile_states_equals_create_block_mask(mask):
    """The BlockMask built from attnkit's tile states is FlexAttention's own for the same predicate."""
    n = 256
    ours = flex.block_mask(mask, n, n, torch.device("cpu"))
    theirs = flex_mod.create_block_mask(mask.predicate(n, n), None, None, n, n, device="cpu", BLOCK_SIZE=flex.BLOCK)
    assert torch.equal(ours.to_dense(), theirs.to_dense())
    for a, b in ((ours.full_kv_num_blocks, theirs.full_kv_num_blocks), (ours.kv_num_blocks, theirs.kv_num_blocks)):
        assert torch.equal(a, b)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_block_mask_gives_flex_attention_the_masked_result():
    """Eager FlexAttention with our BlockMask equals the float64 reference (no compile)."""
    q, k, v = _qkv(L=256, dtype=torch.float64)
    mask = M.sliding_window(left=40, right=5)
    with torch.no_grad():
        out = flex_mod.flex_attention(q, k, v, block_mask=flex.block_mask(mask, 256, 256, torch.device("cpu")))
    ref = attnkit.attention(q, k, v, mask=mask, backend="reference").out
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)


@pytest.mark.skipif(not os.environ.get("ATTNKIT_FLEX_COMPILE"), reason="compiles FlexAttention on CPU (~10 s); set ATTNKIT_FLEX_COMPILE=1")
def test_compiled_cpu_inference_equals_the_reference(enabled):
    """One compile: a custom window predicate with GQA and a softcap score_mod."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, 256, 16, generator=g)
    k, v = (torch.randn(1, 2, 256, 16, generator=g) for _ in range(2))
    mask = lambda b, h, qi, kv: (kv <= qi) & (qi - kv < 100)  # noqa: E731
    mod = lambda s, b, h, qi, kv: 5.0 * torch.tanh(s / 5.0)  # noqa: E731
    with torch.no_grad():
        got = attnkit.attention(q, k, v, mask=mask, bias=mod, backend="flex")
        truth = attnkit.attention(q.double(), k.double(), v.double(), mask=mask, bias=mod, backend="reference").out
        ref32 = attnkit.attention(q, k, v, mask=mask, bias=mod, backend="reference").out
    assert got.report.backend == "flex"
    err, own = (got.out.double() - truth).abs().max().item(), (ref32.double() - truth).abs().max().item()
    assert err <= 2.0 * own + 4e-6
