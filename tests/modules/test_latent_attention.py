"""MultiHeadLatentAttention: absorbed and expanded orders agree, decoding equals prefill, the latent
cache holds r + dr numbers per token (DeepSeek-V3: 71x less than multi-head attention's cache), and
the float64 gradients of both orders pass gradcheck."""

from __future__ import annotations

import pytest
import torch

from attnkit.cache import DynamicCache
from attnkit.modules.latent_attention import MultiHeadLatentAttention, plan_cost
from attnkit.modules.latent_cache import LatentCache

pytestmark = pytest.mark.usefixtures("one_thread")
WIDTHS = dict(kv_lora_rank=16, qk_nope_dim=8, qk_rope_dim=4, v_dim=6)


def _mla(q_lora_rank=12, dtype=torch.float32, **kw):
    torch.manual_seed(0)
    m = MultiHeadLatentAttention(32, 4, q_lora_rank=q_lora_rank, dtype=dtype, **{**WIDTHS, **kw})
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.1)  # norm gains off 1
    return m


def _both(m, x, **kw):
    m.path = "expand"
    a, _ = m(x, **kw)
    m.path = "absorb"
    b, _ = m(x, **kw)
    return a, b


@pytest.mark.parametrize("q_lora_rank", [None, 12])
def test_absorbed_equals_expanded_float32(q_lora_rank):
    m = _mla(q_lora_rank)
    x = torch.randn(3, 11, 32)
    a, b = _both(m, x)
    assert (a - b).abs().max().item() <= 1e-5
    pos = torch.tensor([5, 6, 7, 9, 10, 11, 20, 21, 22, 23, 24])  # explicit, with gaps
    a, b = _both(m, x, positions=pos)
    assert (a - b).abs().max().item() <= 1e-5


def test_both_orders_return_the_same_weights():
    m = _mla()
    x = torch.randn(2, 5, 32)
    cache = m.new_cache()
    with torch.no_grad():
        m(x[:, :4], cache=cache)
        outs = {}
        for path in ("absorb", "expand"):
            m.path = path
            cache.crop(4)
            outs[path] = m(x[:, 4:], cache=cache, need_weights=True)[1]
    assert outs["absorb"].shape == (2, 4, 1, 5)
    torch.testing.assert_close(outs["absorb"], outs["expand"], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(outs["absorb"].sum(-1), torch.ones(2, 4, 1))


def test_both_orders_pass_gradcheck_in_float64():
    m = _mla(dtype=torch.float64)
    x = torch.randn(1, 4, 32, dtype=torch.float64, requires_grad=True)
    for path in ("absorb", "expand"):
        m.path = path
        assert torch.autograd.gradcheck(lambda t: m(t)[0], (x,), eps=1e-6, atol=1e-5, fast_mode=True)


@pytest.mark.parametrize("path", ["auto", "absorb", "expand"])
def test_decoding_with_the_latent_cache_equals_prefill(path):
    m = _mla(path=path)
    x = torch.randn(2, 10, 32)
    with torch.no_grad():
        full, _ = m(x)
        cache = m.new_cache()
        steps = [m(x[:, :3], cache=cache)[0]] + [m(x[:, t:t + 1], cache=cache)[0] for t in range(3, 10)]
    assert (torch.cat(steps, 1) - full).abs().max().item() <= 1e-5
    assert cache.length == 10


def test_decoding_at_explicit_positions_equals_prefill_there():
    m = _mla()
    x = torch.randn(1, 6, 32)
    pos = torch.arange(6) + 40
    with torch.no_grad():
        full, _ = m(x, positions=pos)
        cache = m.new_cache()
        steps = [m(x[:, :2], positions=pos[:2], cache=cache)[0]] + [m(x[:, t:t + 1], positions=pos[t:t + 1], cache=cache)[0] for t in range(2, 6)]
    assert (torch.cat(steps, 1) - full).abs().max().item() <= 1e-5


def test_auto_absorbs_when_decoding_and_expands_a_full_prefill():
    m = MultiHeadLatentAttention(64, 16, kv_lora_rank=512, qk_nope_dim=128, qk_rope_dim=64, v_dim=128, device="meta")
    assert m.choose_path(1, 4096) == "absorb"
    assert m.choose_path(4096, 4096) == "expand"
    c = plan_cost(1, 4096, heads=16, kv_lora_rank=512, qk_nope_dim=128, qk_rope_dim=64, v_dim=128)
    assert c["expand"] == 4096 * 512 * 16 * 256 + 16 * 4096 * 320 and c["absorb"] == 16 * 512 * 256 + 16 * 4096 * 1088


def test_cache_bytes_are_batch_tokens_latent_width():
    m = _mla()
    cache = m.new_cache()
    B, T = 2, 7
    with torch.no_grad():
        m(torch.randn(B, T, 32), cache=cache)
    r_dr = WIDTHS["kv_lora_rank"] + WIDTHS["qk_rope_dim"]
    assert cache.kv_nbytes == B * T * r_dr * 4
    assert cache.nbytes == B * T * r_dr * 4 + B * T * 8  # + the int64 position table


def test_deepseek_v3_caches_71x_less_than_multi_head_attention():
    """DeepSeek-V3: H=128, qk_nope 128, qk_rope 64, v 128, kv_lora_rank 512 (one layer, bf16, T tokens)."""
    B, T, H = 1, 16, 128
    latent = LatentCache()
    latent.update(torch.zeros(B, T, 512, dtype=torch.bfloat16), torch.zeros(B, T, 64, dtype=torch.bfloat16))
    mha = DynamicCache()
    mha.update(torch.zeros(B, H, T, 192, dtype=torch.bfloat16), torch.zeros(B, H, T, 128, dtype=torch.bfloat16))
    per_token_mla, per_token_mha = latent.kv_nbytes / (B * T), mha.kv_nbytes / (B * mha.capacity)
    print(f"DeepSeek-V3 cache per token per layer: MLA {per_token_mla:.0f} B, MHA {per_token_mha:.0f} B, ratio {per_token_mha / per_token_mla:.1f}x")
    assert per_token_mla == 576 * 2 and per_token_mha == 40960 * 2
    assert 71 <= per_token_mha / per_token_mla < 71.2


def test_cache_grows_by_doubling_and_keeps_its_rows():
    cache = LatentCache()
    a = torch.randn(1, 3, 4)
    cache.update(a, torch.zeros(1, 3, 2))
    kv, pos = cache.update(torch.ones(1, 2, 4), torch.zeros(1, 2, 2))
    assert cache.capacity == 6 and torch.equal(kv[0, 0, :3, :4], a[0]) and pos.tolist() == [[0, 1, 2, 3, 4]]


def test_bad_inputs_raise_with_the_fix():
    m = _mla()
    with pytest.raises(ValueError, match=r"x must be \(B, L, D=32\)"):
        m(torch.randn(2, 32))
    with pytest.raises(ValueError, match=r"positions must be an integer \(L,\)=\(2,\)"):
        m(torch.randn(1, 2, 32), positions=torch.arange(3))
    with pytest.raises(TypeError, match="LatentCache"):
        m(torch.randn(1, 2, 32), cache=DynamicCache())
    with pytest.raises(ValueError, match="path must be one of"):
        MultiHeadLatentAttention(32, 4, path="fast", **WIDTHS)
    with pytest.raises(ValueError, match="qk_rope_dim must be even"):
        MultiHeadLatentAttention(32, 4, **{**WIDTHS, "qk_rope_dim": 3})
    cache = LatentCache(max_len=2)
    with pytest.raises(ValueError, match="max_len=2"):
        cache.update(torch.zeros(1, 3, 4), torch.zeros(1, 3, 2))
    cache.update(torch.zeros(1, 1, 4), torch.zeros(1, 1, 2))
    with pytest.raises(ValueError, match="B=1"):
        cache.update(torch.zeros(2, 1, 4), torch.zeros(2, 1, 2))


def test_absorption_is_exact_for_any_widths():
    """Hypothesis: absorbed and expanded agree (float64, 1e-10) over random widths, lengths and positions."""
    hyp = pytest.importorskip("hypothesis")
    st = hyp.strategies

    @hyp.settings(max_examples=8, deadline=None)
    @hyp.given(H=st.integers(1, 4), r=st.integers(1, 12), dn=st.integers(1, 6), half_dr=st.integers(1, 3), dv=st.integers(1, 6),
               L=st.integers(1, 6), q_lora=st.sampled_from([None, 5]), start=st.integers(0, 30))
    def check(H, r, dn, half_dr, dv, L, q_lora, start):
        torch.manual_seed(H * 100 + r)
        m = MultiHeadLatentAttention(8, H, kv_lora_rank=r, qk_nope_dim=dn, qk_rope_dim=2 * half_dr, v_dim=dv, q_lora_rank=q_lora,
                                     dtype=torch.float64)
        x = torch.randn(2, L, 8, dtype=torch.float64)
        a, b = _both(m, x, positions=torch.arange(start, start + L))
        assert (a - b).abs().max().item() < 1e-10

    check()
