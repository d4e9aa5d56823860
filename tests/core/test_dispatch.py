"""The report names the backend that ran and why the others did not; forcing a backend on a call it
cannot serve raises a ValueError carrying that backend's own reason."""

from __future__ import annotations

import pytest
import torch

import attnkit
from _core_cases import make_qkv
from attnkit import biases as Bi
from attnkit import scores as Sc
from attnkit.core import registry
from attnkit.core.call import make_call
from attnkit.core.output import BackendResult

SHAPE = (1, 2, 2, 4, 5, 8, 8)


def _calls():
    """Calls some backend may decline: (name, kwargs for attnkit.attention)."""
    return {
        "return_weights": dict(return_weights=True),
        "additive_score": dict(score=Sc.AdditiveScore(8)),
        "score_mod": dict(bias=Bi.score_mod(lambda s, b, h, q, kv: torch.tanh(s))),
        "plain": dict(),
    }


@pytest.mark.parametrize("backend", [b.name for b in attnkit.available_backends()])
def test_forced_backend_on_a_call_it_cannot_serve_gives_its_reason(backend):
    q, k, v = make_qkv(SHAPE)
    b = registry.get(backend)
    declined = 0
    for name, kw in _calls().items():
        why = b.supports(make_call(q, k, v, **kw))
        if why is None:
            res = attnkit.attention(q, k, v, backend=backend, **kw)
            assert res.report.backend == backend and "forced" in res.report.reason
            continue
        declined += 1
        assert isinstance(why, str) and len(why) > 10
        with pytest.raises(ValueError) as err:
            attnkit.attention(q, k, v, backend=backend, **kw)
        msg = str(err.value)
        assert backend in msg and why in msg and "backend" in msg
    if backend == "sdpa":
        assert declined == 3  # weights, no dot form, non-additive score_mod


def test_sdpa_reasons_say_what_is_missing():
    q, k, v = make_qkv(SHAPE)
    sd = registry.get("sdpa")
    calls = _calls()
    assert "weights" in sd.supports(make_call(q, k, v, **calls["return_weights"]))
    assert "dot-product" in sd.supports(make_call(q, k, v, **calls["additive_score"]))
    assert "additive" in sd.supports(make_call(q, k, v, **calls["score_mod"]))


def test_auto_report_names_backend_and_rejections():
    q, k, v = make_qkv(SHAPE)
    res = attnkit.attention(q, k, v, mask=attnkit.masks.causal())
    names = {b.name for b in attnkit.available_backends()}
    assert res.report.backend in names
    assert res.report.reason
    assert set(res.report.rejected) | {res.report.backend} == {b.name for b in attnkit.available_backends()}
    assert res.report.backend in str(res.report)
    # with weights requested, sdpa is rejected for that reason and the backend that ran can give weights
    res = attnkit.attention(q, k, v, return_weights=True)
    assert res.weights is not None and res.report.backend != "sdpa"
    assert "weights" in res.report.rejected["sdpa"]


def test_a_declining_backend_is_skipped_by_auto_and_named_when_forced():
    def run(call):  # pragma: no cover - must never run
        raise AssertionError("auto ran a backend that declined")

    registry.register("test_declines", run, supports=lambda call: "test backend serves nothing", priority=1000)
    try:
        q, k, v = make_qkv(SHAPE)
        res = attnkit.attention(q, k, v)
        assert res.report.backend != "test_declines"
        assert res.report.rejected["test_declines"] == "test backend serves nothing"
        with pytest.raises(ValueError, match="test_declines.*test backend serves nothing"):
            attnkit.attention(q, k, v, backend="test_declines")
    finally:
        registry.unregister("test_declines")


def test_auto_never_picks_an_approximate_backend():
    calls = []

    def run(call):
        calls.append(call)
        return BackendResult(torch.zeros(call.q.shape[:3] + (call.v.shape[-1],)))

    registry.register("test_approx", run, exact=False, priority=1000)
    try:
        q, k, v = make_qkv(SHAPE)
        res = attnkit.attention(q, k, v)
        assert res.report.backend != "test_approx" and "approximate" in res.report.rejected["test_approx"]
        assert not calls
        forced = attnkit.attention(q, k, v, backend="test_approx")
        assert forced.report.backend == "test_approx" and not forced.report.exact and calls
    finally:
        registry.unregister("test_approx")


def test_report_counts_and_materialized_bytes():
    q, k, v = make_qkv(SHAPE)
    mask = attnkit.masks.padding_mask(torch.tensor([0]), 5)
    for b in ["reference"] + [x.name for x in attnkit.available_backends() if x.exact and x.name != "reference"]:
        res = attnkit.attention(q, k, v, mask=mask, backend=b)
        assert res.report.fully_masked_rows == 2 * 4, b  # H=2 heads × L=4 queries, all padding
        assert res.report.materialized_bytes == sum(m.nbytes for m in res.report.materialized)
    ref = attnkit.attention(q, k, v, mask=mask, backend="reference")
    assert any(m.what == "scores" and m.shape == (1, 2, 4, 5) for m in ref.report.materialized)
