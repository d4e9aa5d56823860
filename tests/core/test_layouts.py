"""Every backend gives the same result, forward and gradients, for any memory layout of q, k, v.

A layout is a view with the same values as a contiguous tensor but other strides: the last dim
sliced (``x[..., ::2]``) or transposed in storage (``x.transpose(-1, -2)`` of an (.., D, N) tensor),
a broadcast (stride 0) batch, head, sequence or head dim, batch/head dims permuted in storage,
tokens taken from an NCHW or a channels-last feature map. CPU's fused SDPA op reads the head dim
as unit-stride without checking, so these once gave errors up to 1e33 on ``sdpa`` and ``auto``.

Each case builds a leaf tensor in the storage layout, takes the view, and runs the backend; the
oracle is the float64 reference on a contiguous copy of the same view, so gradients (with respect
to the leaf) pass through the same view ops. The tolerance follows tests/core/test_backend_parity.py:
a backend's float32 error may be ``FACTOR`` × the larger of the float32 reference's own error and
the same backend's error on contiguous inputs, plus a few-ulp floor.

Shape legend: B batch, H query heads, Hkv kv heads, L queries, S keys, E head dim, Ev value dim.
"""

from __future__ import annotations

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import example, given, settings, strategies as st  # noqa: E402

import attnkit  # noqa: E402
from _core_cases import max_err  # noqa: E402
from attnkit import masks as M  # noqa: E402

FACTOR = 2.0
FLOOR = 2e-6

LAYOUTS = (
    "contiguous", "transposed", "sliced_last", "sliced_seq", "expand_batch", "expand_head",
    "expand_seq", "expand_last", "permuted_bh", "nchw_tokens", "channels_last_tokens",
)
EXACT = ("reference", "sdpa", "blockwise", "auto")


def make_leaf(shape: tuple[int, int, int, int], layout: str, g: torch.Generator):
    """(leaf float64, view_fn): ``view_fn(leaf)`` has ``shape`` (B, H, N, D) in the given layout."""
    B, H, N, D = shape

    def rand(*s):
        return torch.randn(*s, generator=g, dtype=torch.float64)

    if layout == "contiguous":
        return rand(B, H, N, D), lambda t: t
    if layout == "transposed":  # stored (B, H, D, N): head dim stride N
        return rand(B, H, D, N), lambda t: t.transpose(-1, -2)
    if layout == "sliced_last":  # every other column of a wider tensor: head dim stride 2
        return rand(B, H, N, 2 * D), lambda t: t[..., ::2]
    if layout == "sliced_seq":
        return rand(B, H, 2 * N, D), lambda t: t[:, :, ::2]
    if layout == "expand_batch":
        return rand(1, H, N, D), lambda t: t.expand(B, H, N, D)
    if layout == "expand_head":
        return rand(B, 1, N, D), lambda t: t.expand(B, H, N, D)
    if layout == "expand_seq":
        return rand(B, H, 1, D), lambda t: t.expand(B, H, N, D)
    if layout == "expand_last":  # head dim stride 0
        return rand(B, H, N, 1), lambda t: t.expand(B, H, N, D)
    if layout == "permuted_bh":  # stored (N, H, B, D)
        return rand(N, H, B, D), lambda t: t.permute(2, 1, 0, 3)
    if layout == "nchw_tokens":  # (B, C=H*D, N) feature map -> tokens (B, N, C) -> heads: head dim stride N
        return rand(B, H * D, N), lambda t: t.transpose(1, 2).reshape(B, N, H, D).transpose(1, 2)
    if layout == "channels_last_tokens":  # (B, C, 1, N) channels-last map flattened to tokens
        leaf = rand(B, H * D, 1, N).contiguous(memory_format=torch.channels_last)
        return leaf, lambda t: t.flatten(2).transpose(1, 2).reshape(B, N, H, D).transpose(1, 2)
    raise ValueError(f"unknown layout {layout!r}")


def _run(backend, views, mask, upstream):
    """out and the gradients of the three leaves for one backend on views (q, k, v)."""
    leaves = [leaf.detach().clone().requires_grad_(True) for leaf, _ in views]
    q, k, v = (fn(leaf) for leaf, (_, fn) in zip(leaves, views))
    out = attnkit.attention(q, k, v, mask=mask, backend=backend).out
    out.backward(upstream.to(out.dtype))
    return out, [leaf.grad for leaf in leaves]


def _check(backend, shape, layouts, mask, seed):
    B, H, Hkv, L, S, E, Ev = shape
    g = torch.Generator().manual_seed(seed)
    views64 = [make_leaf(s, lay, g) for s, lay in zip(((B, H, L, E), (B, Hkv, S, E), (B, Hkv, S, Ev)), layouts)]
    upstream = torch.randn(B, H, L, Ev, generator=g, dtype=torch.float64)
    views32 = [(leaf.float(), fn) for leaf, fn in views64]
    contiguous64 = [(leaf, lambda t, fn=fn: fn(t).contiguous()) for leaf, fn in views64]
    contiguous32 = [(leaf.float(), fn) for leaf, fn in contiguous64]

    ref64, g64 = _run("reference", contiguous64, mask, upstream)
    ref32, g32 = _run("reference", contiguous32, mask, upstream)
    own32, gown = _run(backend, contiguous32, mask, upstream)
    got, ggot = _run(backend, views32, mask, upstream)

    tol = FACTOR * max(max_err(ref32, ref64), max_err(own32, ref64)) + FLOOR
    assert max_err(got, ref64) <= tol, f"{backend} {layouts}: out error {max_err(got, ref64):.3g} > {tol:.3g}"
    for name, a, r32, o32, r64 in zip("qkv", ggot, g32, gown, g64):
        tol = FACTOR * max(max_err(r32, r64), max_err(o32, r64)) + FLOOR * max(1.0, r64.abs().max().item())
        assert max_err(a, r64) <= tol, f"{backend} {layouts}: d{name} error {max_err(a, r64):.3g} > {tol:.3g}"


def test_reproducer_transposed_storage():
    """The reported case: q = k stored transposed; sdpa once differed from reference by 2.6."""
    torch.manual_seed(0)
    q = k = torch.randn(1, 2, 8, 16).transpose(-1, -2)
    v = torch.randn(1, 2, 16, 8)
    ref = attnkit.attention(q.double(), k.double(), v.double(), backend="reference").out
    for backend in EXACT:
        assert max_err(attnkit.attention(q, k, v, backend=backend).out, ref) < 1e-5, backend


@pytest.mark.parametrize("backend", EXACT)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_of_q_k_v(backend, layout):
    """One layout on all three of q, k, v (E == Ev, H == Hkv: sdpa's fused CPU op path)."""
    _check(backend, (2, 2, 2, 5, 7, 8, 8), (layout,) * 3, None, seed=1)


@pytest.mark.parametrize("backend", EXACT)
@pytest.mark.parametrize("mask_name", ["causal", "window"])
def test_strided_with_masks(backend, mask_name):
    """is_causal (L == S) and a dense mask go through other kernel arguments; strides must not matter there either."""
    mask = M.causal() if mask_name == "causal" else M.sliding_window(left=2, right=1)
    _check(backend, (1, 2, 2, 6, 6, 8, 8), ("transposed", "sliced_last", "nchw_tokens"), mask, seed=2)


@pytest.mark.parametrize("backend", EXACT)
def test_transposed_dense_bias(backend):
    """A dense float bias stored transposed reaches the kernel's mask argument as a strided tensor."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, n, 8, generator=g) for n in (5, 7, 7))
    bias = torch.randn(1, 2, 7, 5, generator=g).transpose(-1, -2)
    ref = attnkit.attention(q.double(), k.double(), v.double(), bias=bias.double(), backend="reference").out
    ref32 = attnkit.attention(q, k, v, bias=bias.contiguous(), backend="reference").out
    got = attnkit.attention(q, k, v, bias=bias, backend=backend).out
    assert max_err(got, ref) <= FACTOR * max_err(ref32, ref) + FLOOR


def test_linear_backend_is_layout_independent():
    """linear attention is its own function (not softmax): strided inputs give what contiguous ones give."""
    g = torch.Generator().manual_seed(4)
    views = [make_leaf((2, 2, 9, 8), lay, g) for lay in ("transposed", "nchw_tokens", "expand_last")]
    for mask in (None, M.causal()):
        upstream = torch.randn(2, 2, 9, 8, dtype=torch.float64, generator=g)
        strided = _run("linear", [(leaf.float(), fn) for leaf, fn in views], mask, upstream)
        plain = _run("linear", [(leaf.float(), lambda t, fn=fn: fn(t).contiguous()) for leaf, fn in views], mask, upstream)
        assert max_err(strided[0], plain[0]) < 1e-5
        for a, b in zip(strided[1], plain[1]):
            assert max_err(a, b) < 1e-4


_layout = st.sampled_from(LAYOUTS)


@settings(max_examples=60)
@given(
    layouts=st.tuples(_layout, _layout, _layout),
    B=st.integers(1, 2),
    heads=st.sampled_from([(2, 2), (1, 1), (3, 3), (2, 1)]),  # (H, Hkv): mostly H == Hkv, the fused op's case
    L=st.integers(1, 9),
    S=st.integers(1, 9),
    E=st.sampled_from([8, 4, 16, 1, 2]),
    extra_ev=st.sampled_from([0, 0, 0, 3]),  # mostly E == Ev, the fused op's case
    mask_name=st.sampled_from(["none", "causal", "window"]),
    seed=st.integers(0, 2**16),
)
@example(layouts=("contiguous", "contiguous", "transposed"), B=1, heads=(2, 2), L=2, S=2, E=8, extra_ev=0,
         mask_name="none", seed=0)
@example(layouts=("nchw_tokens", "sliced_last", "expand_last"), B=2, heads=(2, 2), L=5, S=5, E=4, extra_ev=0,
         mask_name="causal", seed=1)
def test_random_strided_views_every_backend(layouts, B, heads, L, S, E, extra_ev, mask_name, seed):
    """Random strided views of q, k, v (independently), random sizes, GQA or not, E == Ev or not,
    with and without masks: every exact backend matches the float64 reference, forward and gradients."""
    H, Hkv = heads
    mask = {"none": None, "causal": M.causal(), "window": M.sliding_window(left=1, right=1)}[mask_name]
    for backend in EXACT:
        _check(backend, (B, H, Hkv, L, S, E, E + extra_ev), layouts, mask, seed)
