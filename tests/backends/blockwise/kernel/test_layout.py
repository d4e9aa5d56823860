"""The fused kernel's layout check (:mod:`attnkit.backends.blockwise.kernel.layout`), one for the
blockwise routes and ``sdpa``.

Views whose size-1 dims carry strides other than the row-major ones (what ``expand`` and
channels-last views make) go through every mask route, forward and backward, against the float64
reference: the route's float32 error may be at most a few times the float32 reference's own error
on the same inputs (plus a few-ulp floor), as in tests/core/test_layouts.py.

Shape legend: B batch, H heads, L queries, S keys, E head dim.
"""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit import masks as M
from attnkit.backends import sdpa
from attnkit.backends.blockwise.kernel import layout
from attnkit.backends.blockwise.routes import BAND, CAUSAL, DENSE, PREFIX_LM, TILES

FACTOR, FLOOR = 4.0, 2e-6
ROUTE_MASKS = {
    DENSE.name: lambda: None,
    CAUSAL.name: M.causal,
    BAND.name: lambda: M.sliding_window(2, 2),
    PREFIX_LM.name: lambda: M.prefix_lm(2),
    TILES.name: lambda: M.chunked(2),
}


def _odd(x: torch.Tensor, stride: int) -> torch.Tensor:
    """A view of contiguous ``x`` with every size-1 dim given ``stride`` (differentiable)."""
    strides = [stride if n == 1 else s for n, s in zip(x.shape, x.stride())]
    return x.as_strided(x.shape, strides)


def test_sdpa_and_the_routes_share_one_check():
    assert sdpa.kernel_layout is layout.kernel_layout


@pytest.mark.parametrize("stride", [0, 3, 999])
def test_only_misread_layouts_are_copied(stride):
    x = torch.randn(1, 2, 1, 8)
    assert layout.kernel_layout(x) is x  # row-major: read as it is
    odd = _odd(x.clone(), stride)
    assert layout.odd_unit_strides(odd) and layout.kernel_layout(odd) is not odd
    assert layout.kernel_layout(odd).stride() == x.stride() and torch.equal(layout.kernel_layout(odd), x)
    sliced = torch.randn(1, 2, 3, 16)[..., ::2]
    assert layout.kernel_layout(sliced).stride(-1) == 1


@pytest.mark.parametrize("route", list(ROUTE_MASKS))
@pytest.mark.parametrize("shapes", [((1, 1, 1, 8), (1, 1, 1, 8)), ((1, 1, 5, 8), (1, 1, 1, 8)),
                                    ((1, 1, 1, 8), (1, 1, 6, 8)), ((2, 1, 5, 8), (2, 1, 6, 8))],
                         ids=["L1S1", "L5S1", "L1S6", "H1"])
def test_odd_unit_strides_through_every_mask_route(route, shapes):
    g = torch.Generator().manual_seed(0)
    mask = ROUTE_MASKS[route]()
    base = [torch.randn(*s, generator=g, dtype=torch.float64) for s in (shapes[0], shapes[1], shapes[1])]
    dout = torch.randn(*shapes[0], generator=g, dtype=torch.float64)

    def run(ts, backend, view=lambda t: t):
        leaves = [t.detach().clone().requires_grad_(True) for t in ts]
        res = attnkit.attention(*(view(t) for t in leaves), mask=mask, backend=backend)
        res.out.backward(dout.to(res.out.dtype))
        return res, [res.out.detach()] + [t.grad for t in leaves]

    _, truth = run(base, "reference")
    _, ref32 = run([t.float() for t in base], "reference")
    for stride in (0, 7777):
        res, got = run([t.float() for t in base], "blockwise", lambda t: _odd(t, stride))
        assert res.report.reason.endswith(route), res.report.reason
        for name, a, r, t in zip(("out", "dq", "dk", "dv"), got, ref32, truth):
            err, own = (a.double() - t).abs().max().item(), (r.double() - t).abs().max().item()
            assert err <= FACTOR * own + FLOOR, f"{route} {name} stride {stride}: {err:.3g} > {FACTOR} x {own:.3g}"
