"""A route registered from outside the package: one class and one line in ``ROUTES``.

The toy route serves calls with one key (S = 1), no mask and no bias, where the softmax over one
key is exactly 1: ``out = v`` on every row and ``lse = scale · q·k``; its backward follows from
that (``dv = Σ_rows dO``, ``dq = scale · dlse · k``, ``dk = scale · Σ_rows dlse · q``). Inserted at
the head of ``ROUTES`` it must run, be named by the report and by the cost estimate ``auto``
reads, give the float64 reference's output and gradients (gradcheck), and be gone once removed.

Shape legend: B batch, H heads (= Hkv), L queries, S = 1 key, E head dim (= Ev).
"""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit.backends import blockwise
from attnkit.backends.blockwise import routes
from attnkit.backends.blockwise.routes import KernelRoute
from attnkit.core import cost
from attnkit.core.call import make_call


class OneKeyRoute(KernelRoute):
    name = "toy route: one key, weights exactly 1"

    def applies(self, call) -> bool:
        q, k, v = call.q, call.k, call.v
        return (call.S == 1 and call.mask is None and call.bias is None and call.dropout_p == 0
                and not call.return_weights and getattr(call.score, "identity_dot", False)
                and q.shape[1] == k.shape[1] and q.shape[-1] == v.shape[-1] and not torch.compiler.is_compiling())

    def plan(self, call):
        return ()

    def work(self, call, plan):
        B, H, _, L, _, _, _ = cost.dims(call)
        return B * H * L, 1, cost.rate("fused_flops", call.q.dtype), 0, 0.0

    def forward(self, call, plan, q, k, v):
        lse = call.scale * (q * k).sum(-1)  # (B, H, L): one score per row
        return v.expand(q.shape[:3] + v.shape[-1:]).clone(), lse

    def backward(self, call, plan, dout, q, k, v, out, lse, dlse, need):
        B, H, L, E = q.shape
        dout = torch.zeros_like(out) if dout is None else dout
        dlse = torch.zeros(B, H, L, dtype=q.dtype) if dlse is None else dlse.to(q.dtype)
        dq = call.scale * dlse.unsqueeze(-1) * k
        dk = call.scale * (dlse.unsqueeze(-1) * q).sum(2, keepdim=True)
        dv = dout.sum(2, keepdim=True)
        return [g if n else None for g, n in zip((dq, dk, dv), need)]


TOY = OneKeyRoute()


def _inputs(dtype=torch.float64, L=5):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, L, 4, generator=g, dtype=dtype)
    k, v = (torch.randn(2, 3, 1, 4, generator=g, dtype=dtype) for _ in range(2))
    return q, k, v


def test_a_route_registered_from_outside_runs_and_is_named(monkeypatch):
    monkeypatch.setattr(routes, "ROUTES", [TOY, *routes.ROUTES])  # the one line a new route adds
    q, k, v = _inputs()
    res = attnkit.attention(q, k, v, backend="blockwise")
    assert res.report.reason.endswith(f"ran: {TOY.name}")
    ref = attnkit.attention(q, k, v, backend="reference")
    assert torch.allclose(res.out, ref.out, atol=1e-12) and torch.allclose(res.lse, ref.lse, atol=1e-12)
    assert blockwise.estimate(make_call(q, k, v))["path"] == TOY.name  # auto's estimate names it too
    # the route's gradients (out and lse) against finite differences, in float64
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))

    def f(q, k, v):
        r = attnkit.attention(q, k, v, backend="blockwise")
        return r.out, r.lse

    assert torch.autograd.gradcheck(f, (qg, kg, vg))
    # a call it does not serve (two keys) goes on down the list
    q2, k2, v2 = q, torch.cat([k, k], 2), torch.cat([v, v], 2)
    assert TOY.name not in attnkit.attention(q2, k2, v2, backend="blockwise").report.reason


def test_the_route_is_gone_once_removed():
    q, k, v = _inputs(torch.float32)
    assert TOY not in routes.ROUTES
    reason = attnkit.attention(q, k, v, backend="blockwise").report.reason
    assert TOY.name not in reason and reason.endswith(f"ran: {routes.ROUTES[0].name}")


def test_every_route_names_the_path_its_estimate_names():
    """For a few calls, the runner and the estimate pick the same route (the report's path)."""
    from attnkit import biases, masks as M

    q, k, v = _inputs(torch.float32, L=300)
    k, v = (t.expand(2, 3, 300, 4).contiguous() for t in (k, v))
    for mask, bias in [(None, None), (M.causal(), None), (M.sliding_window(8, 8), None), (M.prefix_lm(40), None),
                       (M.chunked(64), None), (M.causal(), biases.ALiBi(3)), (M.chunked(64), biases.ALiBi(3))]:
        call = make_call(q, k, v, mask=mask, bias=bias)
        ran = attnkit.attention(q, k, v, mask=mask, bias=bias, backend="blockwise").report.reason.split("ran: ")[-1]
        assert blockwise.estimate(call)["path"] == ran, (mask, bias)


def test_routes_share_one_interface_and_end_in_the_tile_loop():
    assert all(isinstance(r, routes.Route) for r in routes.ROUTES)
    assert routes.ROUTES[-1] is routes.TILE_LOOP  # it applies to every call: the list always ends in a route that runs
    names = [r.name for r in routes.ROUTES]
    assert all(names) and len(set(names)) == len(names)  # the report's path names one route
