"""A catalogue of bad (and odd but legal) inputs to attnkit's public API, one parametrized test.

Every entry ends in one of two ways, never a third:

* ``err(...)`` — a ``ValueError`` / ``TypeError`` of the stated type whose message contains the
  argument's name (and the other words listed). An error from deep inside torch or a backend
  (``RuntimeError``, ``IndexError``, ``AttributeError``, a size mismatch in a matmul) fails the entry,
  as does a message without the argument's name.
* ``ok(...)`` — a result, checked against an independent computation: the reference backend on the
  explicit form of the input (a 4-D mask instead of a 2-D one, no bias instead of a zero bias, ...),
  or, for ``meta`` tensors, the shape. Nothing is accepted silently without that check.

Shape legend: B batch, H heads, L queries, S keys, E head dim, D model width.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import pytest
import torch

import attnkit
from attnkit import biases as Bi
from attnkit import cache as C
from attnkit import masks as M

A = attnkit.attention
MHA = attnkit.MultiHeadAttention
RoPE = attnkit.RotaryEmbedding

g = torch.Generator().manual_seed(0)
B, H, L, S, E = 2, 2, 4, 5, 8
q = torch.randn(B, H, L, E, generator=g)
k = torch.randn(B, H, S, E, generator=g)
v = torch.randn(B, H, S, E, generator=g)
x = torch.randn(B, 3, 8, generator=g)  # MHA input (B, L=3, D=8)


def ref(**kw) -> torch.Tensor:
    """The reference backend's output for q, k, v and ``kw``."""
    return A(q, k, v, backend="reference", **kw).out


class Entry(NamedTuple):
    id: str
    thunk: Callable
    exc: type | None  # ValueError / TypeError, or None for a correct result
    words: tuple  # words the message must contain (the argument's name first)
    want: Callable | None  # the independent result an ``ok`` entry must equal


def err(id: str, thunk: Callable, exc: type, *words: str) -> Entry:
    return Entry(id, thunk, exc, words, None)


def ok(id: str, thunk: Callable, want: Callable) -> Entry:
    return Entry(id, thunk, None, (), want)


def _tensor(shape, **kw):
    return torch.ones(shape, dtype=torch.bool, **kw)


def _mha(**kw):
    torch.manual_seed(0)
    return MHA(8, 2, **kw).eval()


def _filled(cache, B_=2):
    """A fresh MHA and ``cache`` after a 3-token prompt."""
    m = _mha()
    m(x[:B_], cache=cache, causal=True)
    return m, cache


def _call(**kw):
    from attnkit.core.call import make_call

    return make_call(q, k, v, **kw)


# -- attention(): q, k, v ---------------------------------------------------------------------------
QKV = [
    err("q_none", lambda: A(None, k, v), TypeError, "q", "torch.Tensor"),
    err("k_list", lambda: A(q, k.tolist(), v), TypeError, "k", "torch.Tensor"),
    err("v_5d", lambda: A(q, k, v[None]), ValueError, "v", "4 dims"),
    err("q_2d", lambda: A(q[0, 0], k, v), ValueError, "q", "4 dims"),
    err("q_bool", lambda: A(q > 0, k, v), TypeError, "q", "floating"),
    err("q_complex", lambda: A(q.to(torch.complex64), k.to(torch.complex64), v.to(torch.complex64)), TypeError, "q", "floating"),
    err("dtype_half_float", lambda: A(q.half(), k, v), TypeError, "q", "dtype"),
    err("q_meta_kv_cpu", lambda: A(q.to("meta"), k, v), ValueError, "q", "device"),
    err("zero_heads", lambda: A(q[:, :0], k[:, :0], v[:, :0]), ValueError, "H", "positive"),
    err("zero_head_dim", lambda: A(q[..., :0], k[..., :0], v), ValueError, "E", "head dim"),
    err("zero_keys", lambda: A(q, k[:, :, :0], v[:, :, :0]), ValueError, "S", "positive"),
    err("more_kv_heads_than_q_heads", lambda: A(q[:, :1], k, v), ValueError, "H", "Hkv"),
    err("v_other_batch", lambda: A(q, k, v[:1]), ValueError, "k and v"),
    ok("all_meta_shape_only", lambda: A(q.to("meta"), k.to("meta"), v.to("meta")).out, lambda: torch.empty(B, H, L, E, device="meta")),
    ok("value_dim_differs", lambda: A(q, k, v[..., :3]).out, lambda: A(q, k, v[..., :3], backend="reference").out),
    ok("empty_batch", lambda: A(q[:0], k[:0], v[:0]).out, lambda: torch.empty(0, H, L, E)),
    ok("non_contiguous_q", lambda: A(q.transpose(2, 3).contiguous().transpose(2, 3), k, v).out, lambda: ref()),
    ok("gqa_one_kv_head", lambda: A(q, k[:, :1], v[:, :1]).out,
       lambda: A(q, k[:, :1].expand(B, H, S, E), v[:, :1].expand(B, H, S, E), backend="reference").out),
]

# -- attention(): meta masks and biases with real q, k, v --------------------------------------------
META = [
    err("mask_meta_tensor", lambda: A(q, k, v, mask=_tensor((L, S), device="meta")), ValueError, "mask", "meta"),
    err("bias_meta_tensor", lambda: A(q, k, v, bias=torch.zeros(L, S, device="meta")), ValueError, "bias", "meta"),
    err("mask_meta_tensor_blockwise", lambda: A(q, k, v, mask=_tensor((L, S), device="meta"), backend="blockwise"), ValueError, "mask", "meta"),
    err("padding_from_meta_lengths", lambda: A(q, k, v, mask=M.padding_mask(torch.tensor([3, 5], device="meta"), S)), ValueError, "mask", "meta"),
    err("mask_meta_inside_and", lambda: A(q, k, v, mask=M.causal() & _tensor((L, S), device="meta")), ValueError, "mask", "meta"),
    err("alibi_on_meta", lambda: A(q, k, v, bias=Bi.ALiBi(H).to("meta")), ValueError, "bias", "meta"),
    err("t5_on_meta", lambda: A(q, k, v, bias=Bi.T5RelativeBias(H, device="meta")), ValueError, "bias", "meta"),
    ok("cpu_mask_with_meta_qkv", lambda: A(q.to("meta"), k.to("meta"), v.to("meta"), mask=_tensor((L, S))).out,
       lambda: torch.empty(B, H, L, E, device="meta")),
]

# -- attention(): masks ----------------------------------------------------------------------------
pad4 = torch.tensor([[True] * 3 + [False] * 2, [True] * 5])[:, None, None, :]  # (B, 1, 1, S)
MASKS = [
    err("mask_int_tensor", lambda: A(q, k, v, mask=torch.ones(L, S, dtype=torch.long)), TypeError, "mask", "bool"),
    err("mask_1d", lambda: A(q, k, v, mask=_tensor((S,))), ValueError, "mask", "dims"),
    err("mask_3d", lambda: A(q, k, v, mask=_tensor((B, L, S))), ValueError, "mask", "ambiguous"),
    err("mask_B_equals_L", lambda: A(q[:, :, :2], k, v, mask=_tensor((B, S))), ValueError, "mask", "ambiguous", "(B, 1, 1, S)", "(1, 1, L, S)"),
    err("mask_4d_wrong_batch", lambda: A(q, k, v, mask=_tensor((3, 1, 1, S))), ValueError, "mask", "batch"),
    err("mask_4d_wrong_heads", lambda: A(q, k, v, mask=_tensor((1, 3, L, S))), ValueError, "mask", "broadcastable"),
    err("mask_string", lambda: A(q, k, v, mask="causal"), TypeError, "mask"),
    err("mask_python_bool", lambda: A(q, k, v, mask=True), TypeError, "mask"),
    err("mask_list", lambda: A(q, k, v, mask=[[True] * S] * L), TypeError, "mask"),
    err("predicate_wrong_shape", lambda: A(q, k, v, mask=M.custom(lambda b, h, i, j: (i - j).view(-1) > 0)), ValueError, "mask", "4-D"),
    err("predicate_fixed_shape", lambda: A(q, k, v, mask=M.custom(lambda b, h, i, j: (i >= j) & _tensor((L, S)))), ValueError, "mask", "index grid"),
    err("predicate_returns_int", lambda: A(q, k, v, mask=M.custom(lambda b, h, i, j: 1)), TypeError, "mask", "tensor"),
    err("predicate_indexes_out_of_range", lambda: A(q, k, v, mask=M.custom(lambda b, h, i, j: _tensor((2,))[i + j])), ValueError, "mask", "index grid"),
    err("prefix_tensor_batch_mismatch", lambda: A(q, k, v, mask=M.prefix_lm(torch.tensor([1, 2, 3]))), ValueError, "mask", "batch"),
    err("document_q_ids_wrong_length", lambda: A(q, k, v, mask=M.document(torch.zeros(S, dtype=torch.long), torch.zeros(L + 1, dtype=torch.long))),
        ValueError, "document ids", "L=4"),
    ok("mask_2d_L_S", lambda: A(q, k, v, mask=torch.rand(L, S, generator=g) > 0.3).out,
       lambda: None),  # replaced below: needs the same random mask on both sides
    ok("mask_B_1_1_S", lambda: A(q, k, v, mask=pad4).out, lambda: ref(mask=M.padding_mask(torch.tensor([3, 5]), S))),
    ok("mask_1_1_L_1", lambda: A(q, k, v, mask=torch.tensor([True, False, True, True])[None, None, :, None]).out,
       lambda: ref(mask=torch.tensor([True, False, True, True])[:, None].expand(L, S).contiguous())),
    ok("mask_all_false", lambda: A(q, k, v, mask=torch.zeros(L, S, dtype=torch.bool)).out, lambda: torch.zeros(B, H, L, E)),
    ok("predicate_returns_true", lambda: A(q, k, v, mask=M.custom(lambda b, h, i, j: True)).out, lambda: ref()),
    ok("window_zero_zero", lambda: A(q, k, v, mask=M.sliding_window(0, 0)).out,
       lambda: ref(mask=torch.arange(S)[None, :] == torch.arange(L)[:, None] + (S - L))),
    ok("prefix_longer_than_S", lambda: A(q, k, v, mask=M.prefix_lm(S + 10)).out, lambda: ref()),
    ok("causal_top_left_L_gt_S", lambda: A(k, q, q, mask=M.causal("top_left"), backend="blockwise").out,
       lambda: A(k, q, q, mask=M.causal("top_left"), backend="reference").out),
    ok("padding_all_zero_lengths", lambda: A(q, k, v, mask=M.padding_mask(torch.tensor([0, 5]), S)).out,
       lambda: torch.cat([torch.zeros(1, H, L, E), ref()[1:]])),
    ok("hf_mask_float_0_1", lambda: A(q, k, v, mask=M.from_attention_mask(torch.tensor([[1.0, 1, 1, 0, 0], [1, 1, 1, 1, 1]]))).out,
       lambda: ref(mask=pad4)),
]
_rand_mask = torch.rand(L, S, generator=torch.Generator().manual_seed(1)) > 0.3
MASKS[[e.id for e in MASKS].index("mask_2d_L_S")] = ok(
    "mask_2d_L_S", lambda: A(q, k, v, mask=_rand_mask).out, lambda: ref(mask=_rand_mask[None, None].expand(B, H, L, S))
)

# -- mask constructors -------------------------------------------------------------------------------
MASK_CTORS = [
    err("causal_align_typo", lambda: M.causal("bottom"), ValueError, "align", "bottom_right"),
    err("window_left_string", lambda: M.sliding_window(left="2"), ValueError, "left"),
    err("window_left_bool", lambda: M.sliding_window(left=True), ValueError, "left"),
    err("window_right_negative", lambda: M.sliding_window(2, -1), ValueError, "right"),
    err("chunked_zero", lambda: M.chunked(0), ValueError, "chunk_size"),
    err("chunked_float", lambda: M.chunked(2.0), ValueError, "chunk_size"),
    err("chunked_negative", lambda: M.chunked(-4), ValueError, "chunk_size"),
    err("padding_negative_length", lambda: M.padding_mask(torch.tensor([-1, 2]), S), ValueError, "lengths"),
    err("padding_length_over_max_len", lambda: M.padding_mask([2, S + 1], S), ValueError, "lengths", "max_len"),
    err("padding_lengths_2d", lambda: M.padding_mask(torch.tensor([[1, 2]]), S), ValueError, "lengths"),
    err("padding_lengths_bool", lambda: M.padding_mask(torch.tensor([True, False]), S), ValueError, "lengths"),
    err("padding_max_len_negative", lambda: M.padding_mask(torch.tensor([0]), -1), ValueError, "max_len"),
    err("padding_max_len_float", lambda: M.padding_mask(torch.tensor([1]), 4.0), TypeError, "max_len"),
    err("hf_mask_3d", lambda: M.from_attention_mask(torch.ones(1, 2, 3)), ValueError, "attention_mask"),
    err("kpm_int", lambda: M.from_key_padding_mask(torch.zeros(2, 3, dtype=torch.long)), ValueError, "key_padding_mask"),
    err("document_3d", lambda: M.document(torch.zeros(1, 2, 3, dtype=torch.long)), TypeError, "doc_ids"),
    err("document_bool", lambda: M.document(torch.zeros(4, dtype=torch.bool)), TypeError, "doc_ids"),
    err("document_list", lambda: M.document([0, 0, 1]), TypeError, "doc_ids"),
    err("prefix_bool", lambda: M.prefix_lm(True), ValueError, "prefix_len"),
    err("prefix_2d_tensor", lambda: M.prefix_lm(torch.ones(2, 2, dtype=torch.long)), ValueError, "prefix_len"),
    err("compose_with_string", lambda: M.causal() | "x", TypeError, "other"),
    err("materialize_negative", lambda: M.causal().materialize(-1, 3), ValueError, "L"),
    err("materialize_float", lambda: M.causal().materialize(2.0, 3), TypeError, "L"),
]

# -- biases ----------------------------------------------------------------------------------------
BIASES = [
    err("alibi_zero_heads", lambda: Bi.ALiBi(0), ValueError, "num_heads"),
    err("alibi_negative_heads", lambda: Bi.ALiBi(-2), ValueError, "num_heads"),
    err("alibi_float_heads", lambda: Bi.ALiBi(2.0), TypeError, "num_heads"),
    err("alibi_align", lambda: Bi.ALiBi(2, align="center"), ValueError, "align"),
    err("alibi_slopes_length", lambda: Bi.ALiBi(2, slopes=[0.5]), ValueError, "slopes"),
    err("t5_zero_heads", lambda: Bi.T5RelativeBias(0), ValueError, "num_heads"),
    err("t5_zero_buckets", lambda: Bi.T5RelativeBias(2, num_buckets=0), ValueError, "num_buckets"),
    err("t5_zero_distance", lambda: Bi.T5RelativeBias(2, max_distance=0), ValueError, "max_distance"),
    err("shaw_negative_distance", lambda: Bi.RelativePositionBias(2, max_distance=-1), ValueError, "max_distance"),
    err("bias_3d", lambda: A(q, k, v, bias=torch.zeros(B, L, S)), ValueError, "bias", "ambiguous"),
    err("bias_bool_tensor", lambda: A(q, k, v, bias=_tensor((L, S))), TypeError, "bias", "mask="),
    err("bias_string", lambda: A(q, k, v, bias="alibi"), TypeError, "bias"),
    err("custom_bias_returns_bool", lambda: A(q, k, v, bias=Bi.custom_bias(lambda b, h, i, j: i > j)), TypeError, "bias", "numeric"),
    err("custom_bias_5d", lambda: A(q, k, v, bias=Bi.custom_bias(lambda b, h, i, j: (i - j)[None].float())), ValueError, "bias", "4-D"),
    err("custom_bias_fixed_shape", lambda: A(q, k, v, bias=Bi.custom_bias(lambda b, h, i, j: (i - j).float() + torch.zeros(L, S))),
        ValueError, "bias", "index grid"),
    err("score_mod_fixed_shape", lambda: A(q, k, v, bias=Bi.score_mod(lambda s, b, h, i, j: s + torch.zeros(1, 1, L, S))),
        ValueError, "bias", "index grid"),
    err("score_mod_table_too_small", lambda: A(q, k, v, bias=Bi.score_mod(lambda s, b, h, i, j: s + torch.zeros(2)[i - j + 1])),
        ValueError, "bias", "index grid"),
    ok("bias_minus_inf_is_a_mask", lambda: A(q, k, v, bias=torch.zeros(L, S).masked_fill(~_rand_mask, float("-inf"))).out,
       lambda: ref(mask=_rand_mask)),
    ok("bias_list_with_none", lambda: A(q, k, v, bias=[None, Bi.ALiBi(H)]).out, lambda: ref(bias=Bi.ALiBi(H))),
    ok("bias_empty_list", lambda: A(q, k, v, bias=[]).out, lambda: ref()),
    ok("custom_bias_python_constant", lambda: A(q, k, v, bias=Bi.custom_bias(lambda b, h, i, j: 3.0)).out, lambda: ref()),
]

# -- score, scale, dropout_p, backend, memory_budget, return_weights -------------------------------------
OPTIONS = [
    err("score_upper_case", lambda: A(q, k, v, score="DOT"), ValueError, "score"),
    err("scale_tensor", lambda: A(q, k, v, scale=torch.tensor(0.5)), TypeError, "scale"),
    err("scale_bool", lambda: A(q, k, v, scale=True), TypeError, "scale"),
    err("scale_overflow_inf", lambda: A(q, k, v, scale=1e400), ValueError, "scale", "finite"),
    ok("scale_zero_uniform", lambda: A(q, k, v, scale=0.0).out, lambda: v.mean(2, keepdim=True).expand(B, H, L, E)),
    ok("scale_negative", lambda: A(q, k, v, scale=-1.0, backend="blockwise").out, lambda: ref(scale=-1.0)),
    err("dropout_negative", lambda: A(q, k, v, dropout_p=-0.1), ValueError, "dropout_p"),
    err("dropout_string", lambda: A(q, k, v, dropout_p="0.1"), TypeError, "dropout_p"),
    err("dropout_one", lambda: A(q, k, v, dropout_p=1.0), ValueError, "dropout_p"),
    err("dropout_none", lambda: A(q, k, v, dropout_p=None), TypeError, "dropout_p"),
    ok("dropout_int_zero", lambda: A(q, k, v, dropout_p=0).out, lambda: ref()),
    err("backend_upper_case", lambda: A(q, k, v, backend="REFERENCE"), ValueError, "backend", "reference"),
    err("backend_empty", lambda: A(q, k, v, backend=""), ValueError, "backend"),
    err("backend_int", lambda: A(q, k, v, backend=3), TypeError, "backend"),
    err("memory_budget_zero", lambda: A(q, k, v, memory_budget=0), ValueError, "memory_budget"),
    err("memory_budget_float", lambda: A(q, k, v, memory_budget=1.5), ValueError, "memory_budget"),
    err("memory_budget_bool", lambda: A(q, k, v, memory_budget=True), ValueError, "memory_budget"),
    ok("memory_budget_one_byte", lambda: A(q, k, v, memory_budget=1, mask=M.causal()).out, lambda: ref(mask=M.causal())),
    err("return_weights_string", lambda: A(q, k, v, return_weights="yes"), TypeError, "return_weights"),
    err("return_weights_int", lambda: A(q, k, v, return_weights=1), TypeError, "return_weights"),
    ok("return_weights_blockwise", lambda: A(q, k, v, mask=M.causal(), return_weights=True, backend="blockwise").weights,
       lambda: A(q, k, v, mask=M.causal(), return_weights=True, backend="reference").weights),
]

# -- MultiHeadAttention: constructor and forward ------------------------------------------------------
MHA_CASES = [
    err("mha_embed_zero", lambda: MHA(0, 2), ValueError, "embed_dim"),
    err("mha_heads_zero", lambda: MHA(8, 0), ValueError, "num_heads"),
    err("mha_kv_heads_zero", lambda: MHA(8, 2, kv_heads=0), ValueError, "kv_heads"),
    err("mha_dropout_negative", lambda: MHA(8, 2, dropout=-0.5), ValueError, "dropout"),
    err("mha_kdim_zero", lambda: MHA(8, 2, kdim=0), ValueError, "kdim"),
    err("mha_vdim_negative", lambda: MHA(8, 2, vdim=-3), ValueError, "vdim"),
    err("mha_batch_first_string", lambda: MHA(8, 2, batch_first="no"), TypeError, "batch_first"),
    err("mha_bias_string", lambda: MHA(8, 2, bias="no"), TypeError, "bias"),
    err("mha_rotary_wrong_head_dim", lambda: MHA(8, 2, rotary=RoPE(8)), ValueError, "rotary", "head_dim"),
    err("mha_rotary_string", lambda: MHA(8, 2, rotary="rope"), TypeError, "rotary"),
    err("mha_score_unknown", lambda: MHA(8, 2, score="bogus"), ValueError, "score"),
    err("mha_query_int", lambda: _mha()(x.long()), TypeError, "query", "dtype"),
    err("mha_query_4d", lambda: _mha()(x[None]), ValueError, "query", "3 dims"),
    err("mha_kpm_wrong_length", lambda: _mha()(x, key_padding_mask=torch.zeros(B, 4, dtype=torch.bool)), ValueError, "padding mask", "S=3"),
    err("mha_attention_mask_values", lambda: _mha()(x, attention_mask=torch.full((B, 3), 2)), ValueError, "attention_mask"),
    err("mha_causal_string", lambda: _mha()(x, causal="yes"), TypeError, "causal"),
    err("mha_need_weights_string", lambda: _mha()(x, need_weights="no"), TypeError, "need_weights"),
    err("mha_mask_B_equals_L", lambda: _mha()(x[:, :2], mask=_tensor((B, 2))), ValueError, "mask", "ambiguous"),
    err("mha_positions_float", lambda: _mha()(x, positions=torch.arange(3.0)), ValueError, "positions"),
    ok("mha_empty_query", lambda: _mha()(x[:, :0])[0], lambda: torch.empty(B, 0, 8)),
]

# -- caches ------------------------------------------------------------------------------------------
CACHES = [
    err("cache_wrong_type", lambda: _mha()(x, cache={}), TypeError, "cache"),
    err("cache_batch_changes", lambda: _filled(C.DynamicCache())[0](x[:1], cache=_filled(C.DynamicCache())[1], causal=True),
        ValueError, "DynamicCache", "B="),
    err("cache_with_key", lambda: _mha()(x, x.clone(), cache=C.DynamicCache()), ValueError, "key", "CrossAttentionCache"),
    err("static_cache_zero", lambda: C.StaticCache(0), ValueError, "max_len"),
    err("static_cache_overflow", lambda: _mha()(x, cache=C.StaticCache(2), causal=True), ValueError, "StaticCache", "max_len"),
    err("sliding_cache_negative", lambda: C.SlidingWindowCache(-1), ValueError, "window"),
    err("dynamic_cache_zero_capacity", lambda: C.DynamicCache(initial_capacity=0), ValueError, "initial_capacity"),
    err("cache_reorder_before_use", lambda: C.DynamicCache().reorder([0]), ValueError, "reorder"),
    err("cache_reorder_out_of_range", lambda: _filled(C.DynamicCache())[1].reorder([0, 5]), ValueError, "indices"),
    err("cache_seq_lengths_before_use", lambda: C.StaticCache(4).seq_lengths(), ValueError, "seq_lengths"),
    err("cross_cache_first_call_without_key", lambda: _mha()(x, cache=C.CrossAttentionCache()), ValueError, "key="),
    err("cache_attention_mask_wrong_shape", lambda: _mha()(x, cache=C.DynamicCache(), attention_mask=torch.ones(B, 4)), ValueError, "attention_mask"),
    err("cache_positions_negative", lambda: _mha()(x, cache=C.DynamicCache(), positions=torch.tensor([-1, 0, 1])), ValueError, "positions"),
    err("cache_dtype_changes", lambda: _filled(C.StaticCache(8))[1].update(torch.zeros(B, 2, 1, 4, dtype=torch.float64),
                                                                          torch.zeros(B, 2, 1, 4, dtype=torch.float64)), TypeError, "StaticCache"),
    ok("zero_new_tokens_dynamic", lambda: (lambda mc: mc[0](x[:, :0], cache=mc[1], causal=True)[0])(_filled(C.DynamicCache())),
       lambda: torch.empty(B, 0, 8)),
    ok("zero_new_tokens_sliding_weights", lambda: (lambda mc: mc[0](x[:, :0], cache=mc[1], causal=True, need_weights=True,
                                                                    average_attn_weights=False)[1])(_filled(C.SlidingWindowCache(2))),
       lambda: torch.empty(B, 2, 0, 2)),
]

# -- RotaryEmbedding -------------------------------------------------------------------------------
ROTARY = [
    err("rope_odd_head_dim", lambda: RoPE(7), ValueError, "head_dim", "even"),
    err("rope_base_one", lambda: RoPE(8, base=1), ValueError, "base"),
    err("rope_max_positions_zero", lambda: RoPE(8, max_positions=0), ValueError, "max_positions"),
    err("rope_3d_input", lambda: RoPE(8)(q[0]), ValueError, "x", "(B, H, L, E"),
    err("rope_positions_beyond_table", lambda: RoPE(8, max_positions=4)(q, torch.arange(L) + 4), ValueError, "positions", "max_positions"),
    err("rope_positions_float", lambda: RoPE(8)(q, torch.arange(L).float()), TypeError, "positions"),
    err("rope_wrong_head_dim", lambda: RoPE(4)(q), ValueError, "head_dim"),
]

# -- blockwise: tile sizes -----------------------------------------------------------------------------
BLOCKWISE = [
    err("set_tile_sizes_zero", lambda: attnkit.set_tile_sizes(0), ValueError, "block_q"),
    err("set_tile_sizes_negative_kv", lambda: attnkit.set_tile_sizes(block_kv=-1), ValueError, "block_kv"),
    err("set_tile_sizes_float", lambda: attnkit.set_tile_sizes(2.5), ValueError, "block_q"),
    err("options_negative_block", lambda: attnkit.options(block_q=-1).__enter__(), ValueError, "block_q"),
    err("options_unknown_name", lambda: attnkit.options(tile=4).__enter__(), ValueError, "tile", "block_q"),
    err("blockwise_attention_block_q_zero", lambda: attnkit.blockwise_attention(_call(), block_q=0), ValueError, "block_q"),
    err("blockwise_attention_block_kv_float", lambda: attnkit.blockwise_attention(_call(), block_kv=2.5), ValueError, "block_kv"),
    err("blockwise_attention_not_a_call", lambda: attnkit.blockwise_attention(q), TypeError, "call", "make_call"),
    ok("blockwise_attention_odd_tiles", lambda: attnkit.blockwise_attention(_call(mask=M.causal()), block_q=3, block_kv=2).out,
       lambda: ref(mask=M.causal())),
]

CATALOGUE = QKV + META + MASKS + MASK_CTORS + BIASES + OPTIONS + MHA_CASES + CACHES + ROTARY + BLOCKWISE


def test_the_catalogue_is_large_and_its_ids_unique():
    assert len(CATALOGUE) >= 80
    assert len({e.id for e in CATALOGUE}) == len(CATALOGUE)


@pytest.mark.parametrize("entry", CATALOGUE, ids=[e.id for e in CATALOGUE])
def test_bad_input_is_a_clear_error_or_a_correct_result(entry):
    if entry.exc is not None:
        with pytest.raises(Exception) as info:
            entry.thunk()
        e = info.value
        assert type(e) in (ValueError, TypeError), f"a deep error, not a ValueError/TypeError: {type(e).__name__}: {e}"
        assert isinstance(e, entry.exc), f"expected {entry.exc.__name__}, got {type(e).__name__}: {e}"
        for w in entry.words:
            assert w in str(e), f"the message does not name {w!r}: {e}"
        return
    got, want = entry.thunk(), entry.want()
    assert got.shape == want.shape and got.device == want.device and got.dtype == want.dtype
    if got.device.type != "meta":
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
