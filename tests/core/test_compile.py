"""``torch.compile(fullgraph=True)`` of :func:`attnkit.attention` and ``MultiHeadAttention``:
validation, dispatch and the built-in masks and biases trace without graph breaks (a break is an
error under ``fullgraph=True``), whether they are built outside the compiled function or inside it,
on every backend; the compiled result equals the eager one, and what cannot be traced (an active
``inspect.capture``) fails with an error that says so.

Dynamo's ``eager`` backend is used: graph breaks happen while tracing, whatever backend then
compiles the graph, and it keeps these tests to seconds on a 2-core machine.
"""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit import biases, masks

L = S = 8
CASES = {
    "none": (lambda: {}, False),
    "causal": (lambda: {"mask": masks.causal()}, False),
    "sliding_window": (lambda: {"mask": masks.sliding_window(2)}, True),
    "padding": (lambda: {"mask": masks.padding_mask(torch.tensor([5, 8]), S)}, True),
    "document": (lambda: {"mask": masks.document(torch.tensor([0, 0, 0, 1, 1, 1, 2, 2]))}, True),
    "prefix_lm": (lambda: {"mask": masks.prefix_lm(3)}, True),
    "alibi": (lambda: {"bias": biases.ALiBi(4)}, True),
    "t5": (lambda: {"bias": biases.T5RelativeBias(4)}, True),
    "shaw": (lambda: {"bias": biases.RelativePositionBias(4)}, True),
    "custom": (lambda: {"mask": masks.custom(lambda b, h, q, kv: kv <= q, depends_on=()),
                        "bias": biases.custom_bias(lambda b, h, q, kv: -(q - kv).abs().float(), depends_on=())}, True),
}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _full(fn):
    return torch.compile(fn, fullgraph=True, backend="eager")


@pytest.mark.parametrize("case", list(CASES))
def test_attention_compiles_without_graph_breaks(case, request):
    make, _ = CASES[case]
    kw = make()
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, L, 16, generator=g) for _ in range(3))

    def f(q, k, v):
        return attnkit.attention(q, k, v, **kw).out

    got = _full(f)(q, k, v)
    torch.testing.assert_close(got, f(q, k, v), rtol=1e-6, atol=1e-6)


# Built inside the compiled function: every built-in mask kind and bias, each case a mask and a
# bias so that every kind meets every backend in 10 cases. Learned biases (T5, Shaw) draw a fresh
# table at every call, compiled or not, so the function returns the table and the eager run reuses it.
INSIDE = {
    "causal_alibi": lambda: (masks.causal("top_left"), biases.ALiBi(4)),
    "window_t5": lambda: (masks.sliding_window(2, 1), biases.T5RelativeBias(4, num_buckets=8, max_distance=16)),
    "chunked_shaw": lambda: (masks.chunked(3), biases.RelativePositionBias(4, max_distance=3)),
    "prefix_custom_bias": lambda: (masks.prefix_lm(3), biases.custom_bias(lambda b, h, q, kv: -(q - kv).abs().float(), depends_on=())),
    "prefix_tensor_list_bias": lambda: (masks.prefix_lm(torch.tensor([2, 5])), [torch.ones(L, S).triu(), biases.ALiBi(4)]),
    "padding_left_tensor_bias": lambda: (masks.padding_mask(torch.tensor([5, 8]), S, side="left"), torch.linspace(-1, 1, S)[None, :].expand(L, S)),
    "hf_mask_score_mod": lambda: (masks.from_attention_mask(torch.tensor([[1] * 6 + [0] * 2, [1] * 8])),
                                  biases.score_mod(lambda s, b, h, q, kv: 5 * torch.tanh(s / 5), depends_on=())),
    "kpm_and_causal": lambda: (masks.from_key_padding_mask(torch.arange(S)[None, :] >= torch.tensor([[4], [8]])) & masks.causal(), None),
    "document": lambda: (masks.document(torch.tensor([0, 0, 0, 1, 1, 1, 2, 2])), None),
    # a bool tensor joins a combination as masks.TensorMask(t) and ~m is spelled masks.NotMask(m):
    # Dynamo traces & and | between masks, but not & / | with a tensor operand nor ~ on a Python object
    "custom_not_or_tensor": lambda: ((masks.custom(lambda b, h, q, kv: (q + kv) % 3 != 0, depends_on=())
                                      | masks.NotMask(masks.sliding_window(0, 0)))
                                     & masks.TensorMask(torch.ones(L, S, dtype=torch.bool).tril()), None),
}
BACKENDS = ["reference", "sdpa", "blockwise", "auto"]
# sdpa takes only additive biases; a score_mod on it is a clear error, compiled or not
INSIDE_RUNS = [(c, b) for c in INSIDE for b in BACKENDS if not (b == "sdpa" and c == "hf_mask_score_mod")]


@pytest.mark.parametrize("case,backend", INSIDE_RUNS, ids=[f"{c}-{b}" for c, b in INSIDE_RUNS])
def test_masks_and_biases_built_inside_the_compiled_function(case, backend):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, L, 8, generator=g) for _ in range(3))

    def f(q, k, v):
        mask, bias = INSIDE[case]()
        tables = (bias.table,) if hasattr(bias, "table") else ()
        return attnkit.attention(q, k, v, mask=mask, bias=bias, backend=backend).out, tables

    got, tables = _full(f)(q, k, v)
    mask, bias = INSIDE[case]()
    if tables:
        with torch.no_grad():
            bias.table.copy_(tables[0])
    want = attnkit.attention(q, k, v, mask=mask, bias=bias, backend=backend).out
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mask", [
    masks.causal(), masks.causal("top_left"), masks.sliding_window(3, 1), masks.chunked(4), masks.prefix_lm(5),
    masks.NotMask(masks.sliding_window(0, 0)) & masks.causal(), masks.padding_mask([3, 9], 9), None,
], ids=repr)
def test_the_traced_tile_map_is_rebuilt_from_the_cache_key(mask):
    """Under torch.compile the blockwise tile map comes from the mask's cache_key (a mask built in
    the graph has no readable attributes): the same map as eager for every built-in structural
    mask, every tile evaluated (PARTIAL, always correct) for a data mask, which has no key."""
    from attnkit.backends.blockwise.loop.run import tile_codes as _tile_codes, tile_codes_of_key as _tile_codes_of_key
    from attnkit.core.tiles import PARTIAL

    L, S, bq, bk = 7, 9, 2, 4
    key = None if mask is None else mask.cache_key
    traced = _tile_codes_of_key(mask is None, key, L, S, bq, bk)
    if mask is not None and key is None:
        assert traced == ((int(PARTIAL),) * 3,) * 4
    else:
        assert masks.from_cache_key(key) is None if mask is None else masks.from_cache_key(key).cache_key == key
        assert traced == _tile_codes(mask, L, S, bq, bk)


def test_a_captured_tensor_of_a_bias_defined_in_the_graph_is_refused_not_silently_untrained():
    """blockwise hands gradients to the tensors a custom bias captures, found by searching its
    closure; a function defined inside the compiled function has no closure Python can read, so
    with autograd on the call is refused with the fix, and under no_grad it runs."""
    w = torch.randn(2, requires_grad=True)
    q, k, v = (torch.randn(1, 2, L, 4, generator=torch.Generator().manual_seed(i)) for i in range(3))

    def f(q, k, v):
        bias = biases.custom_bias(lambda b, h, i, j: w[h] * (i - j).abs().float(), depends_on=("h",))
        return attnkit.attention(q, k, v, bias=bias, backend="blockwise").out

    with pytest.raises(Exception, match="captures w.*no gradient"):
        _full(f)(q, k, v)
    torch._dynamo.reset()
    with torch.no_grad():
        torch.testing.assert_close(_full(f)(q, k, v), f(q, k, v), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("variant", ["plain", "causal_gqa", "rotary", "alibi"])
def test_multihead_attention_compiles_without_graph_breaks(variant, request):
    torch.manual_seed(0)
    kw = {"kv_heads": 2} if variant == "causal_gqa" else {}
    if variant == "rotary":
        kw["rotary"] = attnkit.RotaryEmbedding(4)
    mha = attnkit.MultiHeadAttention(16, 4, **kw).eval()
    bias = biases.ALiBi(4) if variant == "alibi" else None
    causal = variant != "plain"
    x = torch.randn(2, L, 16)

    def f(x):
        return mha(x, causal=causal, bias=bias)[0]

    torch.testing.assert_close(_full(f)(x), f(x), rtol=1e-6, atol=1e-6)


def test_capture_inside_a_fullgraph_compile_says_why_it_cannot():
    q = k = v = torch.randn(1, 2, L, 4)

    def f(q, k, v):
        return attnkit.attention(q, k, v, mask=masks.causal()).out

    with attnkit.inspect.capture(record="reports") as rec:
        with pytest.raises(Exception, match="inspect.capture"):
            _full(f)(q, k, v)
    torch._dynamo.reset()
    with attnkit.inspect.capture(record="reports") as rec:  # without fullgraph the call runs eagerly and is recorded
        torch.compile(f, backend="eager")(q, k, v)
    assert len(rec) == 1
