"""A NaN or inf in any input gives the reference's result on every backend, module and path.

The reference backend is the spec (:mod:`attnkit.backends.nonfinite` states its rules). Each case
puts one NaN, +inf or -inf into q, k, v or a dense bias entry and compares a backend with the
reference in the same dtype: the NaN, +inf and -inf positions of the output and of the gradients of
q, k and v must be identical, and the finite entries close. CPU's fused SDPA op once returned zeros
for a NaN query row (so ``sdpa`` and ``auto`` hid what the gradients showed), and causal kernels
put NaN in other gradient rows than the reference.

Keys and values no query may see (padding, unused cache slots) must still never leak, and must not
send a call down the slow exact path.

Shape legend: B batch, H heads, L queries, S keys, E head dim.
"""

from __future__ import annotations

import copy

import pytest
import torch

import attnkit
from attnkit import masks as M
from attnkit.cache import CrossAttentionCache, DynamicCache
from attnkit.core.call import make_call

from _nan_cases import INF, NAN, VALUES, make_inputs, ring_cases, ring_nan_worker

BACKENDS = ("sdpa", "blockwise", "auto")
PLACES = ("q", "k", "v", "bias")
MASKS = {  # name: (L, S, mask factory)
    "none": (6, 6, lambda: None),
    "causal": (6, 6, lambda: M.causal()),  # L == S: sdpa's is_causal kernel, which skips tiles
    "causal_rect": (4, 7, lambda: M.causal()),  # bottom-right, L != S: a dense mask
    "window": (6, 6, lambda: M.sliding_window(left=1, right=1)),
    "padding": (6, 6, lambda: M.padding_mask(torch.tensor([4, 6]), 6)),
}


def assert_same_nonfinite(got: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    """Same NaN / +inf / -inf positions, finite entries close (float32 vs float32)."""
    for name, f in (("NaN", torch.isnan), ("+inf", torch.isposinf), ("-inf", torch.isneginf)):
        bad = f(got) != f(ref)
        assert not bad.any(), f"{what}: {name} differs from the reference at {bad.nonzero()[:4].tolist()}"
    fin = torch.isfinite(ref)
    torch.testing.assert_close(got[fin], ref[fin], atol=1e-4, rtol=1e-4, msg=f"{what}: finite entries differ")


def _run(backend, L, S, mask, place, value):
    q, k, v, bias = make_inputs(L, S, place, value)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = attnkit.attention(q, k, v, mask=mask, bias=bias, backend=backend).out
    out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(9)))
    return [out, q.grad, k.grad, v.grad]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("value_name", list(VALUES))
@pytest.mark.parametrize("place", PLACES)
def test_nonfinite_input_matches_reference(place, value_name, mask_name, backend):
    L, S, make = MASKS[mask_name]
    ref = _run("reference", L, S, make(), place, VALUES[value_name])
    got = _run(backend, L, S, make(), place, VALUES[value_name])
    for what, a, r in zip(("out", "dq", "dk", "dv"), got, ref):
        assert_same_nonfinite(a, r, f"{backend} {place}={value_name} mask={mask_name} {what}")


def test_nan_query_row_is_nan_not_zero():
    """The reported case: no mask, one NaN in a query row; every exact backend returns NaN there."""
    q, k, v, _ = make_inputs(6, 6, "q", NAN)
    for backend in ("reference",) + BACKENDS:
        out = attnkit.attention(q, k, v, backend=backend).out
        assert out[0, 1, 2].isnan().all(), backend
        assert torch.isfinite(out[0, 1, torch.arange(6) != 2]).all(), backend


def test_causal_value_nan_reaches_earlier_rows_as_zero_times_nan():
    """A NaN value at key 3 reaches rows 0..2 (weight 0 · NaN), as in the reference, on every backend."""
    q, k, v, _ = make_inputs(6, 6, "v", NAN)
    for backend in ("reference",) + BACKENDS:
        out = attnkit.attention(q, k, v, mask=M.causal(), backend=backend).out
        assert out[0, 1, :, 1].isnan().all(), backend


@pytest.mark.parametrize("backend", BACKENDS)
def test_dead_keys_do_not_leak_or_take_the_exact_path(backend):
    """NaN in keys/values no query sees (padding) leaves outputs and gradients as with zeros there,
    and the O(n) check does not send the call to the exact path."""
    from attnkit.backends import nonfinite

    q, k, v, _ = make_inputs(6, 6, "q", 0.0)
    mask = M.padding_mask(torch.tensor([4, 6]), 6)
    k2, v2 = k.clone(), v.clone()
    k2[0, :, 4:], v2[0, :, 4:] = NAN, INF
    assert not nonfinite.needs_exact(make_call(q, k2, v2, mask=mask))
    outs = []
    for kk, vv in ((k, v), (k2, v2)):
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, kk, vv))
        out = attnkit.attention(qq, kk, vv, mask=mask, backend=backend).out
        out.sum().backward()
        outs.append([out, qq.grad, kk.grad[:, :, :4], vv.grad[:, :, :4]])
    for a, b in zip(*outs):
        assert torch.isfinite(b).all()
        torch.testing.assert_close(a, b)


def test_gqa_key_dead_for_one_head_only():
    """GQA: a NaN key that query head 0 may not see but head 1 (same kv head) may: head 0 stays
    finite, head 1 is NaN, on every backend (the kernel's shared kv head is not zeroed there)."""
    g = torch.Generator().manual_seed(1)
    q, k, v = torch.randn(1, 2, 3, 4, generator=g), torch.randn(1, 1, 5, 4, generator=g), torch.randn(1, 1, 5, 4, generator=g)
    v[0, 0, 4] = NAN
    mask = M.custom(lambda b, h, qi, kv: (kv < 4) | (h == 1))
    ref = attnkit.attention(q, k, v, mask=mask, backend="reference").out
    assert torch.isfinite(ref[0, 0]).all() and ref[0, 1].isnan().any()
    for backend in BACKENDS:
        assert_same_nonfinite(attnkit.attention(q, k, v, mask=mask, backend=backend).out, ref, backend)


def test_fully_masked_rows_stay_zero_with_nan_queries():
    """Batch row 1 is all padding: its queries see no key; a NaN in them still gives zeros."""
    q, k, v, _ = make_inputs(6, 6, "q", 0.0)
    q[1, :, 2] = NAN
    mask = M.padding_mask(torch.tensor([6, 0]), 6)
    ref = attnkit.attention(q, k, v, mask=mask, backend="reference").out
    assert (ref[1] == 0).all()
    for backend in BACKENDS:
        assert_same_nonfinite(attnkit.attention(q, k, v, mask=mask, backend=backend).out, ref, backend)


def test_exact_path_in_row_chunks_matches_one_chunk():
    """The exact path's row chunks (checkpointed) give the reference's single-chunk values and NaN."""
    from attnkit.backends import reference

    q, k, v, bias = make_inputs(6, 6, "bias", NAN)
    q[0, 0, 4, 0] = NAN
    results = []
    for max_pairs in (1 << 22, 2 * 2 * 2 * 6):  # one chunk; two query rows per chunk
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
        call = make_call(qq, kk, vv, mask=M.causal(), bias=bias)
        res = reference.run_in_row_chunks(call, max_pairs=max_pairs)
        res.out.backward(torch.ones_like(res.out))
        results.append([res.out, res.lse, qq.grad, kk.grad, vv.grad])
    for a, b in zip(*results):
        assert_same_nonfinite(a, b, "chunked")


# modules: MultiHeadAttention on each backend against a copy on the reference backend


def _mha_pair(backend, **kw):
    torch.manual_seed(0)
    ref = attnkit.MultiHeadAttention(16, 2, **kw)
    mha = copy.deepcopy(ref)
    mha.backend = backend
    return mha, ref


def _grads(module, *tensors):
    return [p.grad for p in module.parameters()] + [t.grad for t in tensors]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True])
def test_multihead_self_attention_nan_token(backend, causal):
    """A NaN in a padding token: its key and value are seen by no query (no leak), its own query
    row still attends the other tokens, so its output row is NaN (the fused op once gave 0)."""
    mha, ref = _mha_pair(backend)
    x = torch.randn(2, 5, 16)
    x[0, 4, 2] = NAN
    pad = torch.zeros(2, 5, dtype=torch.bool)
    pad[0, 4] = True
    results = []
    for m in (mha, ref):
        xx = x.clone().requires_grad_()
        out, _ = m(xx, causal=causal, key_padding_mask=pad)
        out.sum().backward()
        results.append([out] + _grads(m, xx))
    assert results[1][0][0, 4].isnan().all() and torch.isfinite(results[1][0][:, :4]).all()
    for i, (a, b) in enumerate(zip(*results)):
        assert_same_nonfinite(a, b, f"{backend} causal={causal} tensor {i}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_multihead_cached_decoding_nan_in_cache(backend):
    """A NaN token in the prompt sits in the KV cache; every later decoding step sees it."""
    mha, ref = _mha_pair(backend, kv_heads=1)
    x = torch.randn(2, 6, 16)
    x[1, 1, 0] = NAN
    outs = []
    for m in (mha, ref):
        cache = DynamicCache()
        with torch.no_grad():
            steps = [m(x[:, :4], cache=cache, causal=True)[0]]
            steps += [m(x[:, t:t + 1], cache=cache, causal=True)[0] for t in (4, 5)]
        outs.append(torch.cat(steps, 1))
    assert outs[1][1].isnan().any() and torch.isfinite(outs[1][0]).all()
    assert_same_nonfinite(outs[0], outs[1], f"{backend} cached decoding")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("padded", [False, True])
def test_multihead_cross_attention_nan_memory(backend, padded):
    """Cross attention: a NaN in a decoder query gives that row NaN (the fused op once gave 0), a
    NaN in a live memory token spreads over its batch row, one in a padded token goes nowhere."""
    mha, ref = _mha_pair(backend)
    query, memory = torch.randn(3, 3, 16), torch.randn(3, 5, 16)
    query[2, 1, 0] = NAN
    memory[0, 1, 4] = NAN  # live
    pad = None  # no mask at all: the fused op's unmasked path
    if padded:
        memory[1, 4, :] = NAN
        pad = torch.tensor([[False] * 5, [False] * 4 + [True], [False] * 5])  # True = padding
    results = []
    for m in (mha, ref):
        qq, mm = query.clone().requires_grad_(), memory.clone().requires_grad_()
        out, _ = m(qq, mm, mm, key_padding_mask=pad)
        out.sum().backward()
        results.append([out] + _grads(m, qq))
    assert torch.isfinite(results[1][0][1]).all() and results[1][0][2, 1].isnan().all()
    for i, (a, b) in enumerate(zip(*results)):
        assert_same_nonfinite(a, b, f"{backend} cross tensor {i}")
    cached = []
    for m in (mha, ref):  # the same through a CrossAttentionCache, filled once, read twice
        cache = CrossAttentionCache()
        with torch.no_grad():
            first, _ = m(query, memory, memory, key_padding_mask=pad, cache=cache)
            second, _ = m(query, cache=cache)
        cached.append(torch.cat([first, second], 1))
    assert_same_nonfinite(cached[0], cached[1], f"{backend} cross cached")


def test_the_comparison_can_fail():
    """A zero where the reference has NaN, or NaN in one extra entry, fails the comparison."""
    ref = torch.tensor([1.0, NAN, 2.0])
    for bad in (torch.tensor([1.0, 0.0, 2.0]), torch.tensor([NAN, NAN, 2.0]), torch.tensor([1.0, NAN, INF])):
        with pytest.raises(AssertionError):
            assert_same_nonfinite(bad, ref, "t")


# ring attention: 2 gloo ranks against the reference on the whole sequence


@pytest.fixture(scope="module")
def ring_report():
    from _ring_harness import run_ranks

    return run_ranks(ring_nan_worker, 2, ring_cases())[0]


@pytest.mark.parametrize("index", range(len(ring_cases())))
def test_ring_attention_nonfinite_matches_reference(ring_report, index):
    c = ring_cases()[index]
    ref = _run("reference", c["L"], c["L"], M.causal() if c["causal"] else None, c["place"], VALUES[c["value"]])
    for what, a, r in zip(("out", "dq", "dk", "dv"), (torch.from_numpy(x) for x in ring_report[index]), ref):
        assert_same_nonfinite(a, r, f"ring {c} {what}")
