"""What the docs promise about masked keys and NaN, checked on every exact backend.

The promise (README "Conventions", :func:`attnkit.attention`, the blockwise backend's docstring):

* keys no query of a head may see (padding, unused cache slots, keys past the last query of a
  top-left causal mask) never leak: a NaN or inf there changes no output and no gradient;
* a NaN in a value row that *some* query may see reaches every query row of that head, in that
  value column only — also rows the mask hides it from (causal: earlier rows) and fully masked
  rows — because their weight is 0 and 0 · NaN = NaN;
* a NaN in a key reaches only the queries that may see it.

Each case is compared with an independent NumPy float64 oracle (scores from
``tests/numpy_reference.py``, a masked softmax over the allowed keys, then ``weights @ v``, with the
never-seen key rows zeroed as the first rule says):
the NaN positions must be identical and the finite entries within 4× the reference backend's own
error in the same dtype. The rules are also asserted directly (which rows, which column).

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E head dim.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import numpy_reference as nr

import attnkit
from attnkit import masks as M

BACKENDS = [b.name for b in attnkit.available_backends() if b.exact] + ["auto"]
DTYPES = [torch.float32, torch.float64]
B, H, HKV, E = 2, 4, 2, 8  # GQA: query heads 0, 1 read kv head 0
NAN = float("nan")
MASKS = {  # name: (L, S, mask); L = S = 130 spans several blockwise tiles, whose skipping would hide a NaN
    "causal": (12, 12, M.causal),
    "causal_long": (130, 130, M.causal),
    "causal_top_left": (8, 12, lambda: M.causal("top_left")),
    "window": (12, 12, lambda: M.sliding_window(left=2)),
}


def _inputs(L: int, S: int, dtype: torch.dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, L, E, generator=g, dtype=torch.float64)
    k, v = (torch.randn(B, HKV, S, E, generator=g, dtype=torch.float64) for _ in range(2))
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _allowed(mask, L: int, S: int) -> np.ndarray:
    """The mask as a (B, H, L, S) bool array, from attnkit's dense form (its predicates are checked
    position by position against numpy_reference in test_masks)."""
    if mask is None:
        return np.ones((B, H, L, S), dtype=bool)
    return np.broadcast_to(mask.materialize(L, S, batch=B, heads=H, device="cpu").numpy(), (B, H, L, S))


def oracle(q, k, v, mask) -> np.ndarray:
    """(B, H, L, Ev) float64: keys no query of a head may see zeroed, then masked softmax @ v."""
    L, S = q.shape[2], k.shape[2]
    allowed = _allowed(mask, L, S)
    kk = np.repeat(k.double().numpy(), H // HKV, axis=1)  # (B, H, S, E)
    vv = np.repeat(v.double().numpy(), H // HKV, axis=1)
    dead = ~allowed.any(-2)  # (B, H, S)
    kk[dead], vv[dead] = 0.0, 0.0
    w = _masked_softmax(nr.scores(q.double().numpy(), kk), allowed)
    with np.errstate(invalid="ignore"):
        out = w @ vv
    out[~allowed.any(-1)] = 0.0  # a row that may see no key is 0, whatever the values hold
    return out


def _masked_softmax(s: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """Softmax of each row over its allowed keys, 0 elsewhere and on rows with none. Unlike
    ``numpy_reference.masked_softmax`` (which drops a -inf score like a mask, and so also a NaN one),
    a NaN score of an allowed key makes its row NaN."""
    w = np.zeros_like(s)
    for idx in np.ndindex(*s.shape[:-1]):
        a = allowed[idx]
        if a.any():
            x = s[idx][a]
            e = np.exp(x - x.max())
            w[idx][a] = e / e.sum()
    return w


def assert_matches_oracle(out: torch.Tensor, ref_out: torch.Tensor, truth: np.ndarray, what: str) -> None:
    """Same NaN/inf positions as the oracle; finite entries within 4× the reference backend's error."""
    got, ref = out.double().numpy(), ref_out.double().numpy()
    bad = ~np.isfinite(truth)
    assert (np.isnan(got) == np.isnan(truth)).all(), f"{what}: NaN at {np.argwhere(np.isnan(got) != np.isnan(truth))[:4].tolist()}"
    assert (~np.isfinite(got) == bad).all(), f"{what}: non-finite entries differ from the oracle"
    ref_err = np.abs(ref[~bad] - truth[~bad]).max(initial=0.0)
    err = np.abs(got[~bad] - truth[~bad]).max(initial=0.0)
    assert err <= 4 * ref_err + 8 * torch.finfo(out.dtype).eps, f"{what}: error {err:.3g}, reference's {ref_err:.3g}"


def _run(backend, q, k, v, mask):
    return attnkit.attention(q, k, v, mask=mask, backend=backend).out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_value_nan_reaches_every_row_of_its_head_in_its_column(backend, mask_name, dtype):
    L, S, make = MASKS[mask_name]
    q, k, v = _inputs(L, S, dtype)
    j, c = 7, 2  # key 7: seen by some query under every mask here, hidden from rows before it
    v[1, 0, j, c] = NAN
    mask = make()
    out = _run(backend, q, k, v, mask)
    assert_matches_oracle(out, _run("reference", q, k, v, mask), oracle(q, k, v, mask), f"{backend} {mask_name}")
    # the documented rule itself: batch 1, query heads 0 and 1 (kv head 0), column c, every row — nowhere else
    assert out[1, :2, :, c].isnan().all(), f"{backend}: a row of the head escaped the NaN value"
    assert int(out.isnan().sum()) == 2 * L, f"{backend}: the NaN reached another column, head or batch"
    hidden = ~torch.from_numpy(_allowed(mask, L, S)[1, 0, :, j].copy())
    assert hidden.any(), "the mask hides key j from no row: the case shows nothing"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_key_nan_reaches_only_the_queries_that_may_see_it(backend, mask_name, dtype):
    L, S, make = MASKS[mask_name]
    q, k, v = _inputs(L, S, dtype)
    j = 7
    k[1, 0, j, 3] = NAN
    mask = make()
    out = _run(backend, q, k, v, mask)
    assert_matches_oracle(out, _run("reference", q, k, v, mask), oracle(q, k, v, mask), f"{backend} {mask_name}")
    sees = torch.from_numpy(_allowed(mask, L, S)[1, :2, :, j].copy())  # (2, L): heads 0, 1
    row_nan = out[1, :2].isnan().all(-1)
    assert torch.equal(row_nan, sees), f"{backend}: NaN rows differ from the rows that may see key {j}"
    assert torch.isfinite(out[1, :2][~sees]).all() and torch.isfinite(out[0]).all() and torch.isfinite(out[1, 2:]).all()


NEVER_SEEN = {  # name: (L, S, mask, (batch, key) pairs no query of any head may see)
    "padding": (12, 12, lambda: M.padding_mask(torch.tensor([9, 12]), 12), [(0, 9), (0, 10), (0, 11)]),
    "left_padding_causal": (12, 12, lambda: M.causal() & M.padding_mask(torch.tensor([10, 12]), 12, side="left"),
                            [(0, 0), (0, 1)]),
    "causal_top_left": (8, 12, lambda: M.causal("top_left"), [(b, s) for b in range(B) for s in range(8, 12)]),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", list(NEVER_SEEN))
@pytest.mark.parametrize("backend", BACKENDS)
def test_keys_no_query_may_see_never_leak(backend, case, dtype):
    L, S, make, dead = NEVER_SEEN[case]
    q, k, v = _inputs(L, S, dtype)
    mask = make()
    k_bad, v_bad = k.clone(), v.clone()
    for b, s in dead:
        k_bad[b, :, s], v_bad[b, :, s] = NAN, float("inf")
    results = []
    for kk, vv in ((k, v), (k_bad, v_bad)):
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, kk, vv))
        out = _run(backend, qq, kk, vv, mask)
        out.backward(torch.ones_like(out))
        results.append((out, qq.grad, kk.grad, vv.grad))
    (out, dq, dk, dv), (out_bad, dq_bad, dk_bad, dv_bad) = results
    assert_matches_oracle(out_bad.detach(), _run("reference", q, k, v, mask), oracle(q, k_bad, v_bad, mask), f"{backend} {case}")
    live = torch.ones(B, S, dtype=torch.bool)
    for b, s in dead:
        live[b, s] = False
    for name, a, b_ in (("out", out_bad, out), ("dq", dq_bad, dq), ("dk", dk_bad, dk), ("dv", dv_bad, dv)):
        if name in ("dk", "dv"):  # the never-seen rows' own gradients are 0 by definition; compare the rest
            a, b_ = a.transpose(1, 2)[live], b_.transpose(1, 2)[live]
        assert torch.isfinite(a).all(), f"{backend} {case}: a hidden NaN/inf reached {name}"
        torch.testing.assert_close(a, b_, msg=f"{backend} {case}: {name} changed with what hidden keys hold")


@pytest.mark.parametrize("backend", BACKENDS)
def test_fully_masked_rows_are_zero_even_beside_a_visible_value_nan(backend):
    """Batch 0's first two keys are padding, so under causal its query rows 0, 1 see no key: zeros
    with finite inputs, and still zeros when a NaN value that later rows may see reaches every other
    row of the head (0 · NaN): a fully masked row is 0 by definition."""
    L = S = 12
    q, k, v = _inputs(L, S, torch.float32)
    mask = M.causal() & M.padding_mask(torch.tensor([10, 12]), S, side="left")
    assert (out := _run(backend, q, k, v, mask))[0, :, :2].eq(0).all()
    v[0, 0, 5, 1] = NAN
    out = _run(backend, q, k, v, mask)
    assert_matches_oracle(out, _run("reference", q, k, v, mask), oracle(q, k, v, mask), backend)
    assert out[0, :2, :2].eq(0).all(), f"{backend}: a fully masked row took the 0 · NaN"
    assert out[0, :2, 2:, 1].isnan().all(), f"{backend}: a row that sees keys hid the 0 · NaN"
    assert out[0, 2:, :2].eq(0).all()


def test_the_oracle_comparison_can_fail():
    """A backend that hid the 0 · NaN from earlier rows (a causal kernel skipping tiles) is caught."""
    L, S, make = MASKS["causal"]
    q, k, v = _inputs(L, S, torch.float32)
    v[1, 0, 7, 2] = NAN
    mask = make()
    out = _run("reference", q, k, v, mask)
    hidden = out.clone()
    hidden[1, :2, :7, 2] = 0.0  # rows before key 7 left finite
    with pytest.raises(AssertionError, match="NaN"):
        assert_matches_oracle(hidden, out, oracle(q, k, v, mask), "hidden")
