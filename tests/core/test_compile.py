"""``torch.compile(fullgraph=True)`` of :func:`attnkit.attention` and ``MultiHeadAttention`` (issue 8
item 7): validation, dispatch and the built-in masks and biases trace without graph breaks (a break is
an error under ``fullgraph=True``), the compiled result equals the eager one, and what cannot be
traced (an active ``inspect.capture``) fails with an error that says so.

Dynamo's ``eager`` backend is used: graph breaks happen while tracing, whatever backend then
compiles the graph, and it keeps these tests to seconds on a 2-core machine.
"""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit import biases, masks

# the sdpa backend still branches on bool(empty_rows.any()) for dense masks/biases (H1's file)

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
