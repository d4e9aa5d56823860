"""``MultiHeadAttention`` equals ``torch.nn.MultiheadAttention`` with the same weights (fp32,
≤ 1e-5) for self, cross, key-padding and causal attention, returns the same weights (averaged and
per head), and gives zeros where torch gives NaN (a fully masked row). Also: from_torch/to_torch
round trip, Xavier init, batch_first=False, GQA as repeated key/value projections."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import attnkit
from attnkit import MultiHeadAttention

D, H = 16, 4
ATOL = 1e-5


def _pair(batch_first=True, kdim=None, vdim=None, bias=True, seed=0):
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(D, H, batch_first=batch_first, kdim=kdim, vdim=vdim, bias=bias).eval()
    with torch.no_grad():  # torch zero-inits the in-projection bias: make biases visible
        for p in ref.parameters():
            if p.dim() == 1:
                p.normal_(0, 0.1)
    ours = MultiHeadAttention.from_torch(ref).eval()
    return ref, ours


def _x(*shape, seed=1):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _backends():
    return ["auto"] + [b.name for b in attnkit.available_backends() if b.exact]


@pytest.mark.parametrize("backend", _backends())
def test_self_attention_matches_torch(backend):
    ref, ours = _pair()
    ours.backend = backend
    x = _x(2, 7, D)
    want, _ = ref(x, x, x, need_weights=False)
    got, w = ours(x)
    assert w is None
    torch.testing.assert_close(got, want, rtol=0, atol=ATOL)


@pytest.mark.parametrize("kdim,vdim", [(None, None), (12, 10)])
def test_cross_attention_matches_torch(kdim, vdim):
    ref, ours = _pair(kdim=kdim, vdim=vdim)
    q, kx, vx = _x(2, 5, D), _x(2, 9, kdim or D, seed=2), _x(2, 9, vdim or D, seed=3)
    want, _ = ref(q, kx, vx, need_weights=False)
    got, _ = ours(q, kx, vx)
    torch.testing.assert_close(got, want, rtol=0, atol=ATOL)


@pytest.mark.parametrize("backend", _backends())
def test_key_padding_matches_torch(backend):
    ref, ours = _pair()
    ours.backend = backend
    x, mem = _x(3, 4, D), _x(3, 6, D, seed=2)
    kpm = torch.tensor([[False] * 6, [False] * 4 + [True] * 2, [False] + [True] * 5])  # True = padding (torch)
    want, _ = ref(x, mem, mem, key_padding_mask=kpm, need_weights=False)
    got, _ = ours(x, mem, key_padding_mask=kpm)
    torch.testing.assert_close(got, want, rtol=0, atol=ATOL)
    # the Hugging Face convention (1 = token) gives the same result
    got_hf, _ = ours(x, mem, attention_mask=(~kpm).long())
    torch.testing.assert_close(got_hf, want, rtol=0, atol=ATOL)


@pytest.mark.parametrize("backend", _backends())
def test_causal_matches_torch(backend):
    ref, ours = _pair()
    ours.backend = backend
    x = _x(2, 6, D)
    causal = torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)  # torch: True = not allowed
    want, _ = ref(x, x, x, attn_mask=causal, need_weights=False)
    got, _ = ours(x, causal=True)
    torch.testing.assert_close(got, want, rtol=0, atol=ATOL)
    got_mask, _ = ours(x, mask=attnkit.masks.causal())
    torch.testing.assert_close(got_mask, want, rtol=0, atol=ATOL)


def _weight_backends():
    """Exact backends that can return weights (sdpa cannot), plus auto."""
    from attnkit.core.call import make_call

    t = torch.zeros(1, 1, 1, 1)
    return ["auto"] + [b.name for b in attnkit.available_backends()
                       if b.exact and b.supports(make_call(t, t, t, return_weights=True)) is None]


@pytest.mark.parametrize("backend", _weight_backends())
@pytest.mark.parametrize("average", [True, False], ids=["averaged", "per_head"])
def test_weights_match_torch_need_weights(average, backend):
    ref, ours = _pair()
    ours.backend = backend
    x, mem = _x(2, 5, D), _x(2, 7, D, seed=2)
    kpm = torch.zeros(2, 7, dtype=torch.bool)
    kpm[1, 5:] = True
    want_out, want_w = ref(x, mem, mem, key_padding_mask=kpm, need_weights=True, average_attn_weights=average)
    got_out, got_w = ours(x, mem, key_padding_mask=kpm, need_weights=True, average_attn_weights=average)
    assert got_w.shape == want_w.shape == ((2, 5, 7) if average else (2, H, 5, 7))
    torch.testing.assert_close(got_w, want_w, rtol=0, atol=ATOL)
    torch.testing.assert_close(got_out, want_out, rtol=0, atol=ATOL)
    assert (got_w[1, ..., 5:] == 0).all()


def test_fully_masked_row_torch_gives_nan_ours_gives_zeros():
    ref, ours = _pair()
    x = _x(2, 3, D)
    kpm = torch.zeros(2, 3, dtype=torch.bool)
    kpm[1] = True  # batch row 1: every key is padding
    t_out, t_w = ref(x, x, x, key_padding_mask=kpm, need_weights=True)
    out, w = ours(x, key_padding_mask=kpm, need_weights=True)
    # torch.nn.MultiheadAttention: NaN for the fully masked sequence (output and weights)
    assert torch.isnan(t_out[1]).all() and torch.isnan(t_w[1]).all()
    # attnkit: the attention result for those rows is 0, so the output is just the out-projection bias
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    assert (w[1] == 0).all()
    torch.testing.assert_close(out[1], ours.out_proj.bias.expand(3, D), rtol=0, atol=0)
    torch.testing.assert_close(out[0], t_out[0], rtol=0, atol=ATOL)  # the other sequence is unchanged
    x.requires_grad_(True)
    ours(x, key_padding_mask=kpm)[0].sum().backward()
    assert torch.isfinite(x.grad).all()


def test_batch_first_false_matches_torch():
    ref, ours = _pair(batch_first=False)
    assert ours.batch_first is False
    x = _x(7, 2, D)  # (L, B, D)
    kpm = torch.zeros(2, 7, dtype=torch.bool)
    kpm[0, 6] = True
    want, want_w = ref(x, x, x, key_padding_mask=kpm, need_weights=True)
    got, got_w = ours(x, key_padding_mask=kpm, need_weights=True)
    assert got.shape == (7, 2, D)
    torch.testing.assert_close(got, want, rtol=0, atol=ATOL)
    torch.testing.assert_close(got_w, want_w, rtol=0, atol=ATOL)


@pytest.mark.parametrize("kdim,bias", [(None, True), (12, True), (None, False)])
def test_from_torch_to_torch_round_trip(kdim, bias):
    ref, ours = _pair(kdim=kdim, vdim=kdim, bias=bias)
    back = ours.to_torch().eval()
    sd_ref, sd_back = ref.state_dict(), back.state_dict()
    assert sd_ref.keys() == sd_back.keys()
    for name in sd_ref:
        assert torch.equal(sd_ref[name], sd_back[name]), name
    q, kv = _x(2, 4, D), _x(2, 6, kdim or D, seed=2)
    torch.testing.assert_close(back(q, kv, kv)[0], ref(q, kv, kv)[0], rtol=0, atol=0)
    again = MultiHeadAttention.from_torch(back)
    for (n1, p1), (n2, p2) in zip(ours.named_parameters(), again.named_parameters()):
        assert n1 == n2 and torch.equal(p1, p2)


def test_xavier_init():
    torch.manual_seed(0)
    m = MultiHeadAttention(256, 8, kdim=128)
    for lin in (m.q_proj, m.k_proj, m.v_proj, m.out_proj):
        fan_out, fan_in = lin.weight.shape
        bound = math.sqrt(6.0 / (fan_in + fan_out))  # Glorot & Bengio 2010, uniform
        w = lin.weight.detach()
        assert w.abs().max() <= bound
        assert w.abs().max() > 0.95 * bound  # it fills the range, i.e. is not a smaller init
        assert abs(w.std().item() - bound / math.sqrt(3)) < 0.05 * bound  # uniform(-a, a) has std a/√3
        assert (lin.bias == 0).all()


def test_gqa_equals_mha_with_repeated_kv_projections():
    torch.manual_seed(0)
    gqa = MultiHeadAttention(D, H, kv_heads=2).eval()
    full = MultiHeadAttention(D, H).eval()
    E, g = D // H, H // 2
    with torch.no_grad():
        full.q_proj.load_state_dict(gqa.q_proj.state_dict())
        full.out_proj.load_state_dict(gqa.out_proj.state_dict())
        for src, dst in ((gqa.k_proj, full.k_proj), (gqa.v_proj, full.v_proj)):
            # kv head j serves query heads j*g .. j*g+g-1: repeat each head's rows g times
            dst.weight.copy_(src.weight.view(2, E, D).repeat_interleave(g, 0).reshape(D, D))
            dst.bias.copy_(src.bias.view(2, E).repeat_interleave(g, 0).reshape(D))
    x = _x(2, 5, D)
    torch.testing.assert_close(gqa(x, causal=True)[0], full(x, causal=True)[0], rtol=0, atol=1e-6)
    assert gqa.k_proj.weight.shape == (2 * E, D)


def test_report_is_available_through_attend():
    _, ours = _pair()
    x = _x(1, 4, D)
    out, res = ours.attend(x, causal=True)
    assert res.report.backend in {b.name for b in attnkit.available_backends()}
    torch.testing.assert_close(out, ours(x, causal=True)[0], rtol=0, atol=0)


def test_gradients_flow_to_every_projection():
    _, ours = _pair()
    ours.train()
    x = _x(2, 5, D)
    ours(x, causal=True)[0].square().sum().backward()
    for name, p in ours.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


def test_named_score_is_not_shared_between_modules():
    """``score="cosine"`` names a shared singleton; a module owns a copy, so casting one module
    cannot change the score every other call uses."""
    from attnkit.core.scores import as_score

    m = MultiHeadAttention(D, H, score="cosine")
    m.double()
    assert as_score("cosine").log_tau.dtype == torch.float32
    assert m.score is not as_score("cosine") and m.score.log_tau.dtype == torch.float64
    out, _ = m(_x(1, 3, D).double())
    assert out.dtype == torch.float64


@pytest.mark.parametrize("kind", ["dynamic", "static", "sliding", "cross"])
def test_zero_new_tokens_give_an_empty_output_and_leave_the_cache_alone(kind):
    """A (B, 0, D) query on a filled cache: out (B, 0, D), per-head weights (B, H, 0, S); the next
    step equals the same step taken without the empty one in between."""
    from attnkit import cache as C

    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H).eval()
    make = {"dynamic": C.DynamicCache, "static": lambda: C.StaticCache(16), "sliding": lambda: C.SlidingWindowCache(4),
            "cross": C.CrossAttentionCache}[kind]
    prompt, step, enc = _x(2, 5, D), _x(2, 1, D, seed=2), _x(2, 6, D, seed=3)
    kw = {} if kind == "cross" else {"causal": True}
    outs = []
    for empty_step in (False, True):
        cache = make()
        with torch.no_grad():
            mha(prompt, enc if kind == "cross" else None, cache=cache, **kw)
            if empty_step:
                out, w = mha(prompt[:, :0], cache=cache, need_weights=True, average_attn_weights=False, **kw)
                assert out.shape == (2, 0, D)
                assert w.shape == (2, H, 0, {"sliding": 4, "cross": 6}.get(kind, 5))
            outs.append(mha(step, cache=cache, **kw)[0])
    torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=0)
