"""attnkit.inspect.capture: tiled summaries == dense statistics, selection, cleanup, no side effects."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import attnkit
from attnkit import biases as Bi
from attnkit import masks as M
from attnkit.core import hooks
from attnkit.inspect.capture import attention_modules, capture, dense_weights, tiled_row_summaries
from attnkit.inspect.metrics import RowSummary, row_summaries_from_weights
from attnkit.modules.multihead import MultiHeadAttention

FIELDS = ("entropy", "max_weight", "topk_weights", "sink_mass", "distance", "mass")


def _dense_softmax(q, k, mask, bias, scale):
    """Independent float64 weights: plain matmul + masked softmax (zeros on fully masked rows)."""
    B, H, L, _ = q.shape
    S = k.shape[2]
    kx = k.repeat_interleave(H // k.shape[1], dim=1)
    s = (q @ kx.transpose(-1, -2)) * scale
    if bias is not None:
        s = s + bias.materialize(L, S, batch=B, heads=H, dtype=s.dtype)
    if mask is not None:
        s = s.masked_fill(~mask.materialize(L, S, batch=B, heads=H), float("-inf"))
    w = torch.softmax(s, -1)
    return torch.nan_to_num(w, nan=0.0)  # fully masked rows: 0/0 -> 0


CASES = {
    "dense": (2, 3, 3, 37, 37, None, None),
    "causal_L<S": (1, 4, 2, 19, 45, M.causal(), None),
    "padding": (2, 2, 2, 30, 30, M.padding_mask([30, 11], 30), None),
    "window_alibi": (1, 4, 4, 40, 40, M.sliding_window(5, 0), Bi.ALiBi(4)),
    "fully_masked_rows": (1, 2, 1, 9, 9, M.causal("top_left") & M.custom(lambda b, h, q, kv: q != 3, depends_on=()), None),
}


@pytest.mark.parametrize("case", CASES)
def test_tiled_summaries_equal_dense_statistics(case):
    B, H, Hkv, L, S, mask, bias = CASES[case]
    g = torch.Generator().manual_seed(1)
    q = torch.randn(B, H, L, 8, generator=g, dtype=torch.float64) * 2
    k = torch.randn(B, Hkv, S, 8, generator=g, dtype=torch.float64) * 2
    v = torch.randn(B, Hkv, S, 8, generator=g, dtype=torch.float64)
    call = attnkit.core.call.make_call(q, k, v, mask=mask, bias=bias)
    # tiny tiles: several query blocks and ragged key blocks, skipped empty tiles
    tiled = tiled_row_summaries(call, k=4, sink_positions=(0, 2), tile_elements=B * H * 5 * 8, kv_block=8)
    w = _dense_softmax(q, k, mask, bias, call.scale)
    ref = row_summaries_from_weights(w, 4, sink_positions=(0, 2), offset=S - L)
    for f in FIELDS:
        a, b = getattr(tiled, f), getattr(ref, f)
        assert a.shape == b.shape, f
        assert torch.allclose(a, b, atol=1e-9, rtol=1e-9), (f, (a - b).abs().max())
    # indices agree wherever the top-k weights are not tied
    distinct = (ref.topk_weights[..., :-1] - ref.topk_weights[..., 1:]).abs().min(-1).values > 1e-9
    assert torch.equal(tiled.topk_indices[distinct][..., :-1], ref.topk_indices[distinct][..., :-1])
    assert torch.isfinite(tiled.entropy).all()
    # the reference backend's weights (used by capture for small calls) equal the same float64 truth
    assert torch.allclose(dense_weights(call), w, atol=1e-12)


def test_tiled_summaries_fully_masked_rows_are_zero():
    q = torch.randn(1, 1, 4, 8)
    mask = M.custom(lambda b, h, qi, kv: qi != 1, depends_on=())
    call = attnkit.core.call.make_call(q, q, q, mask=mask)
    s = tiled_row_summaries(call, k=2)
    assert s.mass[0, 0, 1].item() == 0 and s.entropy[0, 0, 1].item() == 0
    assert (s.topk_indices[0, 0, 1] == -1).all()
    assert torch.allclose(s.mass[0, 0, [0, 2, 3]], torch.ones(3))


class TwoBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = MultiHeadAttention(32, 4)
        self.b = MultiHeadAttention(32, 4)

    def forward(self, x):
        y, _ = self.a(x, causal=True)
        z, _ = self.b(y)
        return z


@pytest.fixture
def net():
    return TwoBlocks().eval()


def test_auto_records_weights_small_and_summaries_large(net):
    x = torch.randn(2, 20, 32)
    with torch.no_grad():
        plain = net(x)
        with capture(net) as small:
            out = net(x)
        with capture(net, max_elements=100, k=3) as large:
            out2 = net(x)
    assert torch.equal(plain, out) and torch.equal(plain, out2)
    assert small.backends() == {"sdpa": 2} == large.backends()
    assert all(r.weights is not None and r.summary is None for r in small)
    assert all(r.weights is None and r.summary is not None for r in large)
    assert [r.name for r in small] == ["a", "b"]
    for ws, sm in zip(small.attentions, large.summaries):
        ref = row_summaries_from_weights(ws, 3)
        for f in FIELDS:
            assert torch.allclose(getattr(sm, f), getattr(ref, f), atol=1e-5), f
    # the causal layer's weights are causal
    assert torch.all(small.attentions[0].triu(1) == 0)


def test_layers_and_heads_selection(net):
    x = torch.randn(1, 6, 32)
    with torch.no_grad(), capture(net, layers="b", heads=[3, 1]) as rec:
        net(x)
    assert len(rec) == 1 and rec[0].layer == 1 and rec[0].heads == (1, 3)
    assert rec.attentions[0].shape == (1, 2, 6, 6)
    with torch.no_grad(), capture(net, layers=-2, heads=0, record="summaries") as rec:
        net(x)
    assert rec[0].name == "a" and rec[0].summary.entropy.shape == (1, 1, 6)
    with pytest.raises(ValueError, match="out of range"):
        with capture(net, layers=5):
            pass
    with pytest.raises(ValueError, match="matches no attention module"):
        with capture(net, layers="c.*"):
            pass
    with pytest.raises(ValueError, match="record"):
        with capture(net, record="everything"):
            pass
    with pytest.raises(ValueError, match="H=4"), torch.no_grad(), capture(net, heads=[9]):
        net(x)
    with pytest.raises(ValueError, match="only a report"):
        with torch.no_grad(), capture(net, record="reports") as rec:
            net(x)
        rec.attentions


def test_nothing_left_behind(net):
    x = torch.randn(1, 5, 32)
    before = {n: (dict(m._forward_hooks), dict(m._forward_pre_hooks), dict(m.__dict__)) for n, m in net.named_modules()}
    with pytest.raises(RuntimeError, match="boom"):
        with capture(net) as rec:
            net(x)
            raise RuntimeError("boom")
    assert len(rec) == 2
    assert not hooks._OBSERVERS and hooks.current_modules() == ()
    after = {n: (dict(m._forward_hooks), dict(m._forward_pre_hooks), dict(m.__dict__)) for n, m in net.named_modules()}
    assert before.keys() == after.keys()
    for n in before:
        assert before[n][0].keys() == after[n][0].keys() and before[n][1].keys() == after[n][1].keys()
        assert before[n][2].keys() == after[n][2].keys(), n
    net(x)  # after the block: not recorded
    assert len(rec) == 2


def test_other_models_and_free_calls(net):
    other = TwoBlocks().eval()
    x = torch.randn(1, 5, 32)
    q = torch.randn(1, 2, 5, 8)
    with torch.no_grad(), capture(net) as rec:
        other(x)
        attnkit.attention(q, q, q)
    assert len(rec) == 0
    with torch.no_grad(), capture() as rec:
        attnkit.attention(q, q, q)
        net(x)
    assert len(rec) == 3 and rec[0].layer is None and rec[0].weights.shape == (1, 2, 5, 5)


def test_training_forward_and_backward_unaffected(net):
    net.train()
    x = torch.randn(2, 7, 32, requires_grad=True)
    torch.manual_seed(3)
    ref = net(x).square().sum()
    (gref,) = torch.autograd.grad(ref, x)
    torch.manual_seed(3)
    with capture(net) as rec:
        loss = net(x).square().sum()
    (g,) = torch.autograd.grad(loss, x)
    assert torch.equal(loss, ref) and torch.equal(g, gref)
    assert all(not r.weights.requires_grad for r in rec)


def test_attention_modules_finds_innermost():
    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)

    class BlockAttention(nn.Module):  # wraps another attention class: not a leaf
        def __init__(self):
            super().__init__()
            self.self_attn = SelfAttention()

    m = nn.Sequential(BlockAttention(), MultiHeadAttention(8, 2))
    assert [n for n, _ in attention_modules(m)] == ["0.self_attn", "1"]
    with pytest.raises(ValueError, match="no attention module"):
        with capture(nn.Linear(2, 2)):
            pass


def test_row_summary_from_recorded_weights(net):
    x = torch.randn(1, 6, 32)
    with torch.no_grad(), capture(net, k=2) as rec:
        net(x)
    s = rec[0].row_summary()
    assert isinstance(s, RowSummary) and s.topk_weights.shape == (1, 4, 6, 2)


def test_hook_point_contract():
    seen = []
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(TypeError, match="callable"):
        hooks.add_observer(42)
    with hooks.add_observer(lambda call, out: seen.append((call.shape["L"], out.report.backend))):
        res = attnkit.attention(q, q, q)
        with hooks.scope(nn.Identity()) as _:
            assert len(hooks.current_modules()) == 1
        assert hooks.current_modules() == ()
    attnkit.attention(q, q, q)
    assert seen == [(4, res.report.backend)]
    assert not hooks._OBSERVERS
