"""Bad inputs raise ValueError/TypeError (never AssertionError, never an error from deep inside a
matmul) whose message names the offending argument. Each case: (id, thunk, error type, words
that must appear in the message)."""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit import biases as Bi
from attnkit import masks as M
from attnkit import scores as Sc

q = torch.randn(1, 2, 4, 8)
k = torch.randn(1, 2, 5, 8)
v = torch.randn(1, 2, 5, 8)
A = attnkit.attention
MHA = attnkit.MultiHeadAttention


def _mha(**kw):
    return MHA(8, 2, **kw)


CASES = [
    # attention(): tensors
    ("q_not_tensor", lambda: A([[1.0]], k, v), TypeError, ["q", "torch.Tensor"]),
    ("k_3d", lambda: A(q, k[0], v), ValueError, ["k", "4 dims"]),
    ("v_int", lambda: A(q, k, v.long()), TypeError, ["v", "floating"]),
    ("dtype_mismatch", lambda: A(q, k.double(), v), TypeError, ["q", "k", "dtype"]),
    ("device_mismatch", lambda: A(q, k, v.to("meta")), ValueError, ["device"]),
    ("batch_mismatch", lambda: A(q, torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)), ValueError, ["batch", "B"]),
    ("head_dim_mismatch", lambda: A(q, k[..., :4], v), ValueError, ["head dim", "E"]),
    ("kv_length_mismatch", lambda: A(q, k, v[:, :, :3]), ValueError, ["k and v"]),
    ("gqa_not_multiple", lambda: A(torch.randn(1, 3, 4, 8), k, v), ValueError, ["H", "Hkv", "multiple"]),
    ("empty_length", lambda: A(q[:, :, :0], k, v), ValueError, ["L"]),
    # attention(): options
    ("score_unknown", lambda: A(q, k, v, score="bogus"), ValueError, ["score", "bogus"]),
    ("score_learned_by_name", lambda: A(q, k, v, score="general"), ValueError, ["score", "GeneralScore"]),
    ("score_wrong_type", lambda: A(q, k, v, score=3), TypeError, ["score"]),
    ("score_head_dim", lambda: A(q, k, v, score=Sc.GeneralScore(4)), ValueError, ["head_dim", "E"]),
    ("scale_inf", lambda: A(q, k, v, scale=float("-inf")), ValueError, ["scale", "finite"]),
    ("scale_nan", lambda: A(q, k, v, scale=float("nan")), ValueError, ["scale"]),
    ("scale_string", lambda: A(q, k, v, scale="0.1"), TypeError, ["scale"]),
    ("dropout_too_big", lambda: A(q, k, v, dropout_p=1.5), ValueError, ["dropout_p"]),
    ("backend_unknown", lambda: A(q, k, v, backend="nope"), ValueError, ["backend", "nope", "reference"]),
    ("backend_not_string", lambda: A(q, k, v, backend=None), TypeError, ["backend"]),
    ("memory_budget_negative", lambda: A(q, k, v, memory_budget=-5), ValueError, ["memory_budget"]),
    # masks through attention()
    ("mask_float_tensor", lambda: A(q, k, v, mask=torch.ones(4, 5)), TypeError, ["mask", "bool", "from_attention_mask"]),
    ("mask_wrong_shape", lambda: A(q, k, v, mask=torch.ones(4, 6, dtype=torch.bool)), ValueError, ["mask", "broadcastable"]),
    ("mask_5d", lambda: A(q, k, v, mask=torch.ones(1, 1, 1, 4, 5, dtype=torch.bool)), ValueError, ["mask", "dims"]),
    ("mask_wrong_type", lambda: A(q, k, v, mask=5), TypeError, ["mask", "predicate"]),
    ("mask_batch_mismatch", lambda: A(q, k, v, mask=M.padding_mask(torch.tensor([1, 2, 3]), 5)), ValueError, ["mask", "batch"]),
    ("padding_wrong_S", lambda: A(q, k, v, mask=M.padding_mask(torch.tensor([2]), 6)), ValueError, ["padding mask", "S=5"]),
    ("document_wrong_length", lambda: A(q, k, v, mask=M.document(torch.zeros(3, dtype=torch.long))), ValueError, ["document ids", "L=4"]),
    ("predicate_not_bool", lambda: A(q, k, v, mask=M.custom(lambda b, h, i, j: i + j)), TypeError, ["predicate", "bool"]),
    ("masks_for_two_batch_sizes", lambda: A(q, k, v, mask=M.padding_mask([1, 2], 5) & M.padding_mask([1, 2, 3], 5)), ValueError, ["batch sizes"]),
    # mask constructors
    ("causal_align", lambda: M.causal("middle"), ValueError, ["align", "bottom_right"]),
    ("window_negative", lambda: M.sliding_window(left=-1), ValueError, ["left"]),
    ("window_float", lambda: M.sliding_window(left=1, right=0.5), ValueError, ["right"]),
    ("window_unbounded", lambda: M.sliding_window(None, None), ValueError, ["left or right"]),
    ("lengths_float", lambda: M.padding_mask(torch.tensor([1.5]), 4), ValueError, ["lengths"]),
    ("lengths_too_long", lambda: M.padding_mask(torch.tensor([5]), 4), ValueError, ["lengths", "max_len"]),
    ("padding_side", lambda: M.padding_mask(torch.tensor([1]), 4, side="top"), ValueError, ["side"]),
    ("hf_mask_values", lambda: M.from_attention_mask(torch.tensor([[1, 2]])), ValueError, ["attention_mask", "0 and 1"]),
    ("hf_mask_1d", lambda: M.from_attention_mask(torch.tensor([1, 0])), ValueError, ["attention_mask"]),
    ("kpm_not_bool", lambda: M.from_key_padding_mask(torch.zeros(1, 3)), ValueError, ["key_padding_mask", "bool"]),
    ("doc_ids_float", lambda: M.document(torch.zeros(4)), TypeError, ["doc_ids"]),
    ("prefix_negative", lambda: M.prefix_lm(-1), ValueError, ["prefix_len"]),
    ("prefix_float_tensor", lambda: M.prefix_lm(torch.tensor([1.5])), ValueError, ["prefix_len"]),
    ("custom_not_callable", lambda: M.custom(5), TypeError, ["custom mask", "callable"]),
    ("custom_depends_on", lambda: M.custom(lambda b, h, i, j: i >= j, depends_on=("x",)), ValueError, ["depends_on"]),
    ("compose_with_int", lambda: M.causal() & 3, TypeError, ["other"]),
    ("materialize_zero", lambda: M.causal().materialize(0, 3), ValueError, ["L"]),
    # biases
    ("bias_int_tensor", lambda: A(q, k, v, bias=torch.ones(4, 5, dtype=torch.long)), TypeError, ["bias", "floating"]),
    ("bias_bare_callable", lambda: A(q, k, v, bias=lambda s: s), TypeError, ["bias", "custom_bias", "score_mod"]),
    ("bias_wrong_shape", lambda: A(q, k, v, bias=torch.zeros(4, 6)), ValueError, ["bias", "broadcastable"]),
    ("bias_heads_mismatch", lambda: A(q, k, v, bias=Bi.ALiBi(3)), ValueError, ["bias", "num_heads=3", "H=2"]),
    ("bias_list_heads", lambda: A(q, k, v, bias=[Bi.ALiBi(2), Bi.ALiBi(3)]), ValueError, ["biases", "head counts"]),
    ("alibi_zero_heads", lambda: Bi.ALiBi(0), ValueError, ["num_heads"]),
    ("alibi_slopes_shape", lambda: Bi.ALiBi(2, slopes=torch.ones(3)), ValueError, ["slopes"]),
    ("t5_few_buckets", lambda: Bi.T5RelativeBias(2, num_buckets=2), ValueError, ["num_buckets"]),
    ("t5_short_max_distance", lambda: Bi.T5RelativeBias(2, num_buckets=32, max_distance=8), ValueError, ["max_distance"]),
    ("shaw_zero_distance", lambda: Bi.RelativePositionBias(2, max_distance=0), ValueError, ["max_distance"]),
    ("bias_depends_on", lambda: Bi.custom_bias(lambda b, h, i, j: i * 1.0, depends_on=("q",)), ValueError, ["depends_on"]),
    ("score_mod_not_callable", lambda: Bi.score_mod(None), TypeError, ["score_mod", "callable"]),
    # scores
    ("cosine_temperature", lambda: Sc.CosineScore(0.0), ValueError, ["init_temperature"]),
    ("additive_head_dim", lambda: Sc.AdditiveScore(0), ValueError, ["head_dim"]),
    ("general_heads", lambda: A(q, k, v, score=Sc.GeneralScore(8, num_heads=3)), ValueError, ["num_heads=3", "H=2"]),
    # registry / dispatch
    ("register_auto", lambda: attnkit.register("auto", lambda c: None), ValueError, ["backend name", "auto"]),
    ("register_not_callable", lambda: attnkit.register("x_test", 5), TypeError, ["run"]),
    ("memory_budget_global", lambda: attnkit.set_memory_budget(-1), ValueError, ["memory budget"]),
    ("forced_sdpa_weights", lambda: A(q, k, v, backend="sdpa", return_weights=True), ValueError, ["sdpa", "weights"]),
    # MultiHeadAttention
    ("mha_embed_not_divisible", lambda: MHA(10, 3), ValueError, ["embed_dim", "num_heads"]),
    ("mha_kv_heads", lambda: MHA(8, 4, kv_heads=3), ValueError, ["num_heads", "kv_heads"]),
    ("mha_dropout", lambda: MHA(8, 2, dropout=1.0), ValueError, ["dropout"]),
    ("mha_num_heads_type", lambda: MHA(8, 2.0), TypeError, ["num_heads"]),
    ("mha_backend_unknown", lambda: MHA(8, 2, backend="nope"), ValueError, ["backend", "nope"]),
    ("mha_score_head_dim", lambda: MHA(8, 2, score=Sc.GeneralScore(8)), ValueError, ["head_dim", "E=4"]),
    ("mha_query_2d", lambda: _mha()(torch.randn(3, 8)), ValueError, ["query", "3 dims", "unsqueeze"]),
    ("mha_key_width", lambda: _mha()(torch.randn(1, 3, 8), torch.randn(1, 3, 6)), ValueError, ["key", "last dim"]),
    ("mha_value_length", lambda: _mha()(torch.randn(1, 3, 8), torch.randn(1, 4, 8), torch.randn(1, 5, 8)), ValueError, ["key and value"]),
    ("mha_batch", lambda: _mha()(torch.randn(2, 3, 8), torch.randn(1, 3, 8)), ValueError, ["query and key", "batch"]),
    ("mha_dtype", lambda: _mha()(torch.randn(1, 3, 8, dtype=torch.float64)), TypeError, ["query", "dtype"]),
    ("mha_kpm_float", lambda: _mha()(torch.randn(1, 3, 8), key_padding_mask=torch.zeros(1, 3)), ValueError, ["key_padding_mask"]),
    ("mha_kpm_batch", lambda: _mha()(torch.randn(2, 3, 8), key_padding_mask=torch.zeros(3, 3, dtype=torch.bool)), ValueError, ["mask", "batch"]),
    ("mha_from_torch_type", lambda: MHA.from_torch(torch.nn.Linear(2, 2)), TypeError, ["from_torch", "MultiheadAttention"]),
    ("mha_from_torch_bias_kv", lambda: MHA.from_torch(torch.nn.MultiheadAttention(8, 2, add_bias_kv=True)), ValueError, ["add_bias_kv"]),
    ("mha_to_torch_gqa", lambda: MHA(8, 2, kv_heads=1).to_torch(), ValueError, ["kv_heads", "num_heads"]),
    ("mha_to_torch_score", lambda: MHA(8, 2, score="cosine").to_torch(), ValueError, ["to_torch", "cosine"]),
]


def test_there_are_at_least_30_cases():
    assert len(CASES) >= 30 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("thunk,exc,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises_a_helpful_error(thunk, exc, words):
    with pytest.raises((ValueError, TypeError)) as err:
        thunk()
    assert isinstance(err.value, exc), f"expected {exc.__name__}, got {type(err.value).__name__}: {err.value}"
    msg = str(err.value)
    for w in words:
        assert w in msg, f"message does not mention {w!r}: {msg}"


PER_BACKEND = [
    ("padding_wrong_S", dict(mask=M.padding_mask(torch.tensor([2]), 6)), ValueError, "padding mask"),
    ("document_wrong_length", dict(mask=M.document(torch.zeros(3, dtype=torch.long))), ValueError, "document ids"),
    ("predicate_not_bool", dict(mask=M.custom(lambda b, h, i, j: i + j)), TypeError, "predicate"),
    ("tensor_mask_other_L", dict(mask=torch.ones(3, 5, dtype=torch.bool)), ValueError, "mask"),
    ("tensor_bias_other_S", dict(bias=torch.zeros(4, 6)), ValueError, "bias"),
]


@pytest.mark.parametrize("backend", ["auto"] + [b.name for b in attnkit.available_backends() if b.exact])
@pytest.mark.parametrize("kw,exc,word", [c[1:] for c in PER_BACKEND], ids=[c[0] for c in PER_BACKEND])
def test_bad_masks_fail_the_same_way_on_every_backend(backend, kw, exc, word):
    """Validation happens before dispatch, so the error does not depend on which backend would run."""
    with pytest.raises(exc, match=word):
        A(q, k, v, backend=backend, **kw)


# A 2-D mask reads as (L, S); with B == L it could be a (B, S) padding mask: refused, and the two
# explicit spellings the error names give the two readings.
def test_two_d_mask_with_batch_equal_to_length_is_refused_and_both_spellings_work():
    g = torch.Generator().manual_seed(0)
    qq, kk, vv = (torch.randn(3, 2, 3, 8, generator=g), torch.randn(3, 2, 5, 8, generator=g), torch.randn(3, 2, 5, 8, generator=g))
    m2 = torch.rand(3, 5, generator=g) > 0.4
    m2[:, 0] = True
    with pytest.raises(ValueError, match=r"mask of shape \(3, 5\) is ambiguous") as err:
        A(qq, kk, vv, mask=m2)
    assert "(B, 1, 1, S)" in str(err.value) and "(1, 1, L, S)" in str(err.value)
    as_ls = A(qq, kk, vv, mask=m2[None, None]).out  # one (L, S) mask for every sequence
    as_pad = A(qq, kk, vv, mask=m2[:, None, None]).out  # row b's key padding
    for b in range(3):
        for i in range(3):
            want_ls = A(qq[b:b + 1, :, i:i + 1], kk[b:b + 1, :, m2[i]], vv[b:b + 1, :, m2[i]], backend="reference").out
            want_pad = A(qq[b:b + 1, :, i:i + 1], kk[b:b + 1, :, m2[b]], vv[b:b + 1, :, m2[b]], backend="reference").out
            torch.testing.assert_close(as_ls[b:b + 1, :, i:i + 1], want_ls)
            torch.testing.assert_close(as_pad[b:b + 1, :, i:i + 1], want_pad)
    A(q, k, v, mask=torch.ones(4, 5, dtype=torch.bool))  # B=1: one reading, accepted
    with pytest.raises(ValueError, match="ambiguous"):
        MHA(8, 2)(torch.randn(3, 3, 8), mask=m2[:, :3])


# Double backward through the blockwise backend: first-order gradients under create_graph=True are
# the usual ones; differentiating them again is a clear error naming the backend to use.
def test_blockwise_double_backward_says_it_is_unsupported_and_names_the_reference():
    g = torch.Generator().manual_seed(0)
    qq, kk, vv = (torch.randn(1, 2, 5, 4, dtype=torch.float64, generator=g).requires_grad_() for _ in range(3))

    def f(backend):
        return lambda q_, k_, v_: A(q_, k_, v_, mask=M.causal(), backend=backend).out

    with pytest.raises(RuntimeError, match="double backward.*backend='reference'"):
        torch.autograd.gradgradcheck(f("blockwise"), (qq, kk, vv))
    assert torch.autograd.gradgradcheck(f("reference"), (qq, kk, vv))
    out = f("blockwise")(qq, kk, vv)
    first = torch.autograd.grad(out.square().sum(), (qq, kk, vv), create_graph=True)
    want = torch.autograd.grad(f("reference")(qq, kk, vv).square().sum(), (qq, kk, vv))
    for a, b in zip(first, want):
        torch.testing.assert_close(a, b)
    with pytest.raises(RuntimeError, match="double backward"):  # a gradient penalty differentiates them again
        sum(t.square().sum() for t in first).backward()
