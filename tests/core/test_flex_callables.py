"""FlexAttention's plain callables as ``mask=`` and ``bias=``: equal to ``torch.nn.attention.flex_attention``
on the same functions, forward, and gradients equal to a float64 oracle.

Forward: FlexAttention's eager implementation (CPU, no compile) is the outside reference; in float64
it is the oracle, and attnkit's float32 error against it may be at most ``FACTOR`` × FlexAttention's
own float32 error (plus a few-ulp floor). FlexAttention has no CPU backward, so gradients are held
to the same rule against a dense float64 oracle written here with plain torch ops (scores, the
score_mod on broadcast indices, ``where`` for the mask, softmax), its own float32 run giving the
error scale.

Shape legend: B batch, H heads, L queries, S keys, E head dim.
"""

from __future__ import annotations

import functools

import pytest
import torch

import attnkit
from attnkit.core import biases as Bi
from attnkit.core.call import make_call
from attnkit.core.mask_values import CustomMask

flex_mod = pytest.importorskip("torch.nn.attention.flex_attention")

FACTOR = 2.0
FLOOR = 4e-6
B, H, L, E = 2, 4, 48, 16
DOCS = torch.tensor([0] * 13 + [1] * 20 + [2] * 15)  # (L,) document ids, captured in a closure
SLOPES = torch.tensor([0.5, 0.25, 0.125, 0.0625])  # (H,) ALiBi-like slopes, captured


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 10)


def document(b, h, q_idx, kv_idx):
    return DOCS[q_idx] == DOCS[kv_idx]


def alibi(score, b, h, q_idx, kv_idx):
    return score - SLOPES[h] * (q_idx - kv_idx).abs()


def softcap(score, b, h, q_idx, kv_idx):
    return 4.0 * torch.tanh(score / 4.0)


def relative(score, b, h, q_idx, kv_idx):  # reads b and h
    return score + 0.05 * (kv_idx - q_idx) * (h + 1) - 0.3 * b


MASK_MODS = {"none": None, "causal": causal, "window": window, "document": document}
SCORE_MODS = {"none": None, "alibi": alibi, "softcap": softcap, "relative": relative}
CASES = [("causal", "none"), ("window", "alibi"), ("document", "softcap"), ("none", "relative"), ("causal", "softcap"),
         ("document", "alibi")]


def _qkv(dtype, requires_grad=False):
    g = torch.Generator().manual_seed(3)
    ts = [torch.randn(B, H, L, E, generator=g, dtype=torch.float64) * 1.5 for _ in range(3)]
    return [t.to(dtype).requires_grad_(requires_grad) for t in ts]


def _flex(q, k, v, mask_mod, score_mod):
    bm = None if mask_mod is None else flex_mod.create_block_mask(mask_mod, None, None, L, L, device="cpu", BLOCK_SIZE=16)
    with torch.no_grad():
        return flex_mod.flex_attention(q, k, v, score_mod=score_mod, block_mask=bm)


def _oracle(q, k, v, mask_mod, score_mod):
    """Dense attention with plain torch ops, differentiable, in q's dtype."""
    s = q @ k.transpose(-1, -2) / E**0.5  # (B, H, L, S)
    b = torch.arange(B).view(-1, 1, 1, 1)
    h = torch.arange(H).view(1, -1, 1, 1)
    qi = torch.arange(L).view(1, 1, -1, 1)
    ki = torch.arange(L).view(1, 1, 1, -1)
    if score_mod is not None:
        s = score_mod(s, b, h, qi, ki)
    if mask_mod is not None:
        s = torch.where(mask_mod(b, h, qi, ki), s, float("-inf"))
    return torch.softmax(s, -1) @ v


def _err(a, b):
    return (a.double() - b.double()).abs().max().item()


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("backend", ["auto", "blockwise", "reference"])
@pytest.mark.parametrize("mask_name, mod_name", CASES)
def test_forward_equals_flex_attention_on_the_same_functions(mask_name, mod_name, backend):
    mask_mod, score_mod = MASK_MODS[mask_name], SCORE_MODS[mod_name]
    q64, k64, v64 = _qkv(torch.float64)
    truth = _flex(q64, k64, v64, mask_mod, score_mod)
    q, k, v = _qkv(torch.float32)
    flex32 = _flex(q, k, v, mask_mod, score_mod)
    ours = attnkit.attention(q, k, v, mask=mask_mod, bias=score_mod, backend=backend).out
    assert _err(ours, truth) <= FACTOR * _err(flex32, truth) + FLOOR
    ours64 = attnkit.attention(q64, k64, v64, mask=mask_mod, bias=score_mod, backend=backend).out
    assert _err(ours64, truth) < 1e-12


@pytest.mark.parametrize("backend", ["auto", "blockwise", "reference"])
@pytest.mark.parametrize("mask_name, mod_name", CASES)
def test_gradients_equal_a_float64_oracle(mask_name, mod_name, backend):
    mask_mod, score_mod = MASK_MODS[mask_name], SCORE_MODS[mod_name]
    dout = torch.randn(B, H, L, E, generator=torch.Generator().manual_seed(5), dtype=torch.float64)

    def grads(fn, dtype):
        qkv = _qkv(dtype, requires_grad=True)
        torch.autograd.backward(fn(*qkv), dout.to(dtype))
        return [t.grad for t in qkv]

    truth = grads(lambda q, k, v: _oracle(q, k, v, mask_mod, score_mod), torch.float64)
    dense32 = grads(lambda q, k, v: _oracle(q, k, v, mask_mod, score_mod), torch.float32)
    ours = grads(lambda q, k, v: attnkit.attention(q, k, v, mask=mask_mod, bias=score_mod, backend=backend).out, torch.float32)
    for name, got, ref32, want in zip("qkv", ours, dense32, truth):
        assert _err(got, want) <= FACTOR * _err(ref32, want) + FLOOR, f"d{name}"


def test_the_oracle_can_fail():
    """A softcap of 5 instead of 4 is far outside the tolerance the tests above use."""
    q, k, v = _qkv(torch.float64)
    want = _oracle(q, k, v, causal, softcap)
    got = attnkit.attention(q, k, v, mask=causal, bias=lambda s, b, h, qi, kv: 5.0 * torch.tanh(s / 5.0)).out
    assert _err(got, want) > 1e-4


# how a plain function is read -------------------------------------------------------------------
def test_arity_decides_what_a_plain_function_is():
    q, k, v = _qkv(torch.float32)
    call = make_call(q, k, v, mask=causal, bias=alibi)
    assert isinstance(call.mask, CustomMask) and isinstance(call.bias, Bi.ScoreMod) and not call.bias.additive
    additive = make_call(q, k, v, bias=lambda b, h, qi, kv: -(qi - kv).abs().float()).bias
    assert isinstance(additive, Bi.CustomBias) and additive.additive
    with_default = make_call(q, k, v, bias=lambda s, b, h, qi, kv, cap=3.0: cap * torch.tanh(s / cap)).bias
    assert isinstance(with_default, Bi.ScoreMod)
    partial = make_call(q, k, v, bias=functools.partial(lambda c, s, b, h, qi, kv: s * c, 0.5)).bias
    assert isinstance(partial, Bi.ScoreMod)


class _Module(torch.nn.Module):
    def forward(self, score, b, h, q_idx, kv_idx):
        return score * 0.5


def test_a_module_is_read_through_its_forward():
    q, k, v = _qkv(torch.float32)
    assert isinstance(make_call(q, k, v, bias=_Module()).bias, Bi.ScoreMod)


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(mask=alibi), ["mask", "score_mod", "bias="]),  # a score_mod passed as mask
        (dict(mask=lambda q_idx, kv_idx: q_idx >= kv_idx), ["mask", "2 required", "mask_mod(b, h, q_idx, kv_idx)", "masks.custom"]),
        (dict(bias=lambda *a: a[0]), ["bias", "unknown number", "score_mod(fn)", "custom_bias(fn)"]),
        (dict(bias=lambda s, q_idx, kv_idx: s), ["bias", "3 required", "5 as a score_mod", "4 as an additive"]),
        (dict(bias=lambda s, b, h, qi, kv, *, scale: s), ["bias", "unknown number"]),
    ],
    ids=["score_mod_as_mask", "mask_two_args", "bias_varargs", "bias_three_args", "bias_required_keyword"],
)
def test_a_function_of_another_shape_is_a_type_error_naming_the_fix(kw, words):
    q, k, v = _qkv(torch.float32)
    with pytest.raises(TypeError) as err:
        attnkit.attention(q, k, v, **kw)
    for w in words:
        assert w in str(err.value), (w, str(err.value))


# which indices a plain mask_mod reads ------------------------------------------------------------
@pytest.mark.parametrize("batch", [1, 2])
def test_the_first_call_reads_which_indices_a_mask_mod_uses(batch):
    q = torch.randn(batch, 3, 8, 4)
    per_head = lambda b, h, qi, kv: kv <= qi + h  # noqa: E731
    per_row = lambda b, h, qi, kv: kv <= qi + b  # noqa: E731
    assert make_call(q, q, q, mask=causal).mask.dims == frozenset()
    assert make_call(q, q, q, mask=per_head).mask.dims == {"h"}
    assert make_call(q, q, q, mask=per_row).mask.dims == {"b"}  # probed with b of size 2 even when B = 1
    sized = torch.zeros(batch, 8, dtype=torch.long)  # (B, L) data indexed by b: a probe at b = 1 fails when B = 1
    data = make_call(q, q, q, mask=lambda b, h, qi, kv: sized[b, qi] == sized[b, kv]).mask
    assert data.dims == {"b"}
    declared = attnkit.masks.custom(per_head, depends_on=("b", "h"))
    assert make_call(q, q, q, mask=declared).mask.dims == {"b", "h"}  # declared: kept as given


def test_a_mask_mod_reading_h_still_masks_every_head():
    """Narrowed dims must not lose a dependence: per-head windows against a per-head loop."""
    q, k, v = _qkv(torch.float64)
    per_head = lambda b, h, qi, kv: (kv <= qi) & (qi - kv <= 2 * h + 1)  # noqa: E731
    got = attnkit.attention(q, k, v, mask=per_head, backend="blockwise").out
    for hh in range(H):
        one = attnkit.attention(q[:, hh : hh + 1], k[:, hh : hh + 1], v[:, hh : hh + 1],
                                mask=attnkit.masks.sliding_window(left=2 * hh + 1, right=0)).out
        torch.testing.assert_close(got[:, hh : hh + 1], one, rtol=0, atol=1e-12)
