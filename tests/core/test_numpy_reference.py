"""attnkit agrees with the independent NumPy reference (score → normalise → weighted sum) for every
score, with masks as bool arrays and biases as dense arrays, in float64 to 1e-10."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnkit
import numpy_reference as npr
from _core_cases import make_qkv
from attnkit import biases as Bi
from attnkit import masks as M
from attnkit import scores as Sc
from attnkit.core import registry
from attnkit.core.call import make_call

SHAPE = (2, 4, 2, 5, 7, 8, 6)  # B, H, Hkv, L, S, E, Ev: GQA with L < S
B, H, Hkv, L, S, E, Ev = SHAPE


def _score(kind):
    """(attnkit score object, numpy kind, numpy params) built from the same parameters."""
    if kind == "general":
        sc = Sc.GeneralScore(E, num_heads=H, dtype=torch.float64)
        return sc, {"W": sc.weight.detach().numpy()}
    if kind == "general_shared":
        sc = Sc.GeneralScore(E, dtype=torch.float64)
        return sc, {"W": sc.weight.detach().numpy()}
    if kind == "additive":
        sc = Sc.AdditiveScore(E, 5, dtype=torch.float64)
        return sc, {"Wq": sc.w_q.weight.detach().numpy(), "Wk": sc.w_k.weight.detach().numpy(),
                    "bk": sc.w_k.bias.detach().numpy(), "v": sc.v.weight.detach().numpy()[0]}
    if kind == "cosine":
        return Sc.CosineScore(3.0), {"tau": 3.0}
    return kind, {}


KINDS = ["dot", "scaled_dot", "general", "general_shared", "additive", "cosine"]


def _np(x):
    return x.detach().numpy()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("with_mask_and_bias", [False, True], ids=["plain", "mask+bias"])
def test_numpy_reference_matches_core(kind, with_mask_and_bias):
    q, k, v = make_qkv(SHAPE, torch.float64)
    sc, params = _score(kind)
    np_kind = "general" if kind == "general_shared" else kind
    mask = bias = np_mask = np_bias = None
    if with_mask_and_bias:
        lengths = [S - 3, 0]
        mask = M.padding_mask(torch.tensor(lengths), S) & M.causal()
        np_mask = npr.padding_mask(lengths, S) & npr.causal_mask(L, S)
        bias = Bi.ALiBi(H)
        np_bias = npr.alibi_bias(H, L, S)
    for backend in ["reference"] + [b.name for b in attnkit.available_backends() if b.name != "reference" and b.exact]:
        call_kw = dict(score=sc, mask=mask, bias=bias)
        if registry.get(backend).supports(make_call(q, k, v, **call_kw)) is not None:
            continue
        res = attnkit.attention(q, k, v, backend=backend, **call_kw)
        want_out, want_w = npr.attention(_np(q), _np(k), _np(v), np_kind, params=params, mask=np_mask, bias=np_bias)
        np.testing.assert_allclose(_np(res.out), want_out, rtol=0, atol=1e-10, err_msg=f"backend {backend}")
    res = attnkit.attention(q, k, v, return_weights=True, **call_kw)
    np.testing.assert_allclose(_np(res.weights), want_w, rtol=0, atol=1e-12)
    if with_mask_and_bias:
        assert (want_w[1] == 0).all() and (res.weights[1] == 0).all()  # batch row 1 is all padding


def test_numpy_reference_catches_a_wrong_scale():
    """The comparison above can fail: a different scale is visible far above the tolerance."""
    q, k, v = make_qkv(SHAPE, torch.float64)
    got = attnkit.attention(q, k, v, scale=0.5).out
    want, _ = npr.attention(_np(q), _np(k), _np(v), "scaled_dot")
    assert np.abs(_np(got) - want).max() > 1e-3


def test_explicit_scale_applies_to_every_score():
    q, k, v = make_qkv(SHAPE, torch.float64)
    for kind in ("dot", "cosine"):
        sc, params = _score(kind)
        got = attnkit.attention(q, k, v, score=sc, scale=0.37).out
        want, _ = npr.attention(_np(q), _np(k), _np(v), kind, params=params, scale=0.37)
        np.testing.assert_allclose(_np(got), want, atol=1e-10)
