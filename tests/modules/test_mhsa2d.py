"""MHSA2d: parity with a plain-torch softmax, any H×W with the same weights, global context,
the relative bias depends only on the pixel offset, gradcheck, bad inputs."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import attnkit
from attnkit.modules.mhsa2d import MHSA2d, ContinuousPositionBias2d, log_offsets

from _mhsa2d_reference import plain_mhsa


def dense_bias(m: MHSA2d, H: int, W: int) -> torch.Tensor:
    """(heads, N, N) from the MLP evaluated on each pixel pair's own offset (no table, no gather)."""
    ys, xs = torch.meshgrid(torch.arange(H), torch.arange(W), indexing="ij")
    ys, xs = ys.flatten().double(), xs.flatten().double()

    def f(d):
        return torch.sign(d) * torch.log2(1 + d.abs()) / 3.0

    coords = torch.stack([f(ys[:, None] - ys[None]), f(xs[:, None] - xs[None])], dim=-1)  # (N, N, 2)
    return m.position.mlp(coords.to(m.position.mlp[0].weight.dtype)).permute(2, 0, 1)


def reference(m: MHSA2d, x: torch.Tensor) -> torch.Tensor:
    """The plain-matmul layer with the MLP-evaluated bias: shares no code path with MHSA2d.forward."""
    H, W = x.shape[-2:]
    return plain_mhsa(m, x, dense_bias(m, H, W) if m.position is not None else None)


@pytest.mark.parametrize("H, W", [(4, 4), (3, 5), (6, 2), (1, 7)])
def test_matches_plain_softmax_attention_at_any_size(H, W):
    m = MHSA2d(16, 4).double()
    x = torch.randn(2, 16, H, W, dtype=torch.float64)
    torch.testing.assert_close(m(x), reference(m, x), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("backend", ["reference", "blockwise", "sdpa"])
def test_backends_agree(backend):
    m = MHSA2d(8, 2).double()
    x = torch.randn(1, 8, 5, 3, dtype=torch.float64)
    fixed = MHSA2d(8, 2, backend=backend).double()
    fixed.load_state_dict(m.state_dict())
    torch.testing.assert_close(fixed(x), reference(m, x), rtol=1e-10, atol=1e-10)


def test_same_weights_serve_other_resolutions():
    m = MHSA2d(16, 2)
    state = {k: v.clone() for k, v in m.state_dict().items()}
    for H, W in [(7, 7), (14, 14), (5, 11), (20, 3)]:
        y = m(torch.randn(1, 16, H, W))
        assert y.shape == (1, 16, H, W) and bool(torch.isfinite(y).all())
    assert all(torch.equal(state[k], v) for k, v in m.state_dict().items())


def test_bias_depends_only_on_the_pixel_offset():
    cpb = ContinuousPositionBias2d(3)
    small, big = cpb(3, 4), cpb(6, 9)  # (heads, 2H-1, 2W-1), centre = offset 0
    torch.testing.assert_close(small, big[:, 5 - 2 : 5 + 3, 8 - 3 : 8 + 4])
    torch.testing.assert_close(log_offsets(3), torch.tensor([-math.log2(3), -1.0, 0.0, 1.0, math.log2(3)]) / 3)


def test_one_pixel_sees_a_far_pixel():
    m = MHSA2d(8, 2).eval()
    x = torch.randn(1, 8, 9, 9)
    y = x.clone()
    y[:, :, 0, 0] += 3.0
    diff = (m(y) - m(x))[0].abs().sum(0)  # (H, W)
    assert diff[8, 8] > 1e-4  # the opposite corner changed: no conv of small support could do this


def test_without_position_bias_pixels_are_permutation_equivariant():
    m = MHSA2d(8, 2, position=None)
    x = torch.randn(1, 8, 4, 5)
    perm = torch.randperm(20)
    xp = x.flatten(2)[:, :, perm].reshape(1, 8, 4, 5)
    torch.testing.assert_close(m(xp).flatten(2), m(x).flatten(2)[:, :, perm], rtol=1e-5, atol=1e-5)
    mp = MHSA2d(8, 2)  # with the bias, positions matter
    mp.attn.load_state_dict(m.attn.state_dict())
    assert not torch.allclose(mp(xp).flatten(2), mp(x).flatten(2)[:, :, perm], atol=1e-4)


def test_gradcheck_float64_input_and_position_mlp():
    m = MHSA2d(4, 2).double()
    x = torch.randn(1, 4, 2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(m, (x,))
    w0 = m.position.mlp[0].weight.detach().clone().requires_grad_(True)

    def f(w):
        return torch.func.functional_call(m, {"position.mlp.0.weight": w}, (x.detach(),))

    assert torch.autograd.gradcheck(f, (w0,))


def test_every_constructor_argument_has_an_effect():
    assert MHSA2d(16, 4).attn.head_dim == 4 and MHSA2d(16, 2).attn.head_dim == 8
    assert MHSA2d(32).attn.embed_dim == 32
    assert MHSA2d(16, 4, position=None).position is None
    assert MHSA2d(16, 4, position=ContinuousPositionBias2d(4, hidden=8)).position.mlp[0].out_features == 8
    assert MHSA2d(16, dtype=torch.float64).attn.q_proj.weight.dtype == torch.float64
    assert MHSA2d(16, device="meta").position.mlp[0].weight.device.type == "meta"
    from attnkit.core.hooks import add_observer  # the backend argument reaches the attention call

    seen = []
    handle = add_observer(lambda call, out: seen.append(out.report.backend))
    try:
        MHSA2d(8, 2, backend="reference")(torch.randn(1, 8, 3, 3))
    finally:
        handle.remove()
    assert seen == ["reference"]


@pytest.mark.parametrize(
    "make, x, match",
    [
        (lambda: MHSA2d(16, 3), None, "divisible by num_heads"),
        (lambda: MHSA2d(16), torch.randn(2, 8, 4, 4), "channels=16 but x has C=8"),
        (lambda: MHSA2d(16), torch.randn(16, 4, 4), "add a batch axis"),
        (lambda: MHSA2d(16, 4, position=ContinuousPositionBias2d(2)), None, "num_heads=2"),
        (lambda: MHSA2d(16, 4, backend="nope"), None, "nope"),
    ],
)
def test_bad_inputs_get_one_clear_error(make, x, match):
    with pytest.raises((ValueError, KeyError), match=match):
        make()(x)


class _TensorSizes(TorchDispatchMode):
    """Records the element count and shape of every tensor an op returns (forward and backward)."""

    def __init__(self):
        super().__init__()
        self.created: list[tuple[int, tuple[int, ...], str]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.created.append((t.numel(), tuple(t.shape), str(func)))
        return out


def _largest_tensor(backend: str, Hh: int, Ww: int, heads: int) -> tuple[int, tuple[int, ...], str]:
    torch.manual_seed(0)
    m = MHSA2d(8, heads, backend=backend)
    x = torch.randn(1, 8, Hh, Ww, requires_grad=True)
    with attnkit.options(block_q=64, block_kv=64), _TensorSizes() as sizes:
        m(x).square().sum().backward()
    return max(sizes.created)


def test_blockwise_never_builds_the_n_by_n_bias():
    """No tensor of even one head's L·S elements (a bias or score matrix) is created, forward or
    backward: the bias is gathered per 64 × 64 tile. The largest tensors left are the position MLP's
    hidden layer on the (2H−1)(2W−1) offsets, O(N). The dense backend at the same size does build
    the (heads, N, N) matrix, which shows the recorder sees such a tensor when one exists."""
    Hh, Ww, heads = 24, 24, 2
    N = Hh * Ww
    numel, shape, op = _largest_tensor("reference", Hh, Ww, heads)
    assert numel >= heads * N * N, f"the recorder missed the dense path's ({heads}, N, N) tensor; largest was {shape} from {op}"
    numel, shape, op = _largest_tensor("blockwise", Hh, Ww, heads)
    assert numel < N * N, f"blockwise built {shape} ({numel} elements, from {op}); N·N = {N * N}"


def test_40x40_auto_runs_the_fused_custom_route():
    """The vision benchmark's call (256 channels, 8 heads, 40×40, ``auto``) runs on blockwise's fused
    per-key-chunk route, not the Python tile loop: the route the report names after ``ran:``."""
    from attnkit.backends.blockwise.routes import CUSTOM, TILE_LOOP
    from attnkit.core.hooks import add_observer

    torch.manual_seed(0)
    m = MHSA2d(256, 8)
    seen = []
    handle = add_observer(lambda call, out: seen.append(out.report))
    try:
        m(torch.randn(1, 256, 40, 40))
    finally:
        handle.remove()
    assert seen[-1].backend == "blockwise", seen[-1].reason
    assert seen[-1].reason.endswith(f"ran: {CUSTOM.name}") and TILE_LOOP.name not in seen[-1].reason, seen[-1].reason


def test_blockwise_gradients_of_the_position_mlp_match_the_dense_reference_float64():
    """The tile gather (one flat index into the table) hands the position MLP the same gradient as
    the dense (heads, N, N) bias differentiated by autograd, and passes gradcheck."""
    torch.manual_seed(0)
    m = MHSA2d(8, 2, backend="blockwise").double()
    x = torch.randn(1, 8, 5, 4, dtype=torch.float64, requires_grad=True)
    reference(m, x).square().sum().backward()
    want = [p.grad.clone() for p in m.position.parameters()] + [x.grad.clone()]
    # the fused route (its backward at default tiles), then the tile loop at several 8 × 8 tiles,
    # so per-tile table gradients add up
    for ctx in (contextlib.nullcontext(), attnkit.options(block_q=8, block_kv=8)):
        m.zero_grad()
        x.grad = None
        with ctx:
            m(x).square().sum().backward()
        got = [p.grad for p in m.position.parameters()] + [x.grad]
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)
    w0 = m.position.mlp[2].weight.detach().clone().requires_grad_(True)

    def f(w):
        return torch.func.functional_call(m, {"position.mlp.2.weight": w}, (x.detach()[..., :3, :3],))

    assert torch.autograd.gradcheck(f, (w0,))
