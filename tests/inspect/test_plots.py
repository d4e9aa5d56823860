"""attnkit.inspect.plots writes real PNGs and rejects bad input with named arguments."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("matplotlib")  # the [viz] extra

from matplotlib.figure import Figure  # noqa: E402
from matplotlib.image import imread  # noqa: E402

from attnkit.inspect import plots  # noqa: E402
from attnkit.inspect.metrics import classify_heads  # noqa: E402
from attnkit.inspect.plots import plot_diagnostics, plot_head, plot_heads_grid, plot_patch_map  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def weights(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).mul(2).softmax(-1)


def check_png(path: Path, fig) -> np.ndarray:
    assert isinstance(fig, Figure)
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 2000
    img = imread(path)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
    assert img[..., :3].std() > 0.05  # something was drawn, not a blank canvas
    return img


@pytest.mark.parametrize("L, S", [(1, 1), (5, 5), (4, 9), (70, 70)])
def test_plot_head_png(tmp_path, L, S):
    toks = [f"q{i}" for i in range(L)]
    keys = None if L == S else [f"k{j}" for j in range(S)]
    path = tmp_path / "sub" / "head.png"  # parent folder is created
    fig = plot_head(weights(L, S), toks, key_tokens=keys, title="layer 0 head 0", path=path)
    check_png(path, fig)
    if L == S == 5:
        labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
        assert labels == toks


def test_plot_head_without_path_and_numpy_input():
    fig = plot_head(np.full((3, 3), 1 / 3))
    assert isinstance(fig, Figure) and len(fig.axes) == 2  # heatmap + colorbar


@pytest.mark.parametrize(
    "args, kwargs, exc, words",
    [
        ((torch.rand(2, 3, 3),), {}, ValueError, ["weights", "(L, S)", "ndim=3"]),
        ((torch.rand(3, 3), ["a", "b"]), {}, ValueError, ["tokens", "2 labels", "3 queries"]),
        ((torch.rand(3, 4), ["a", "b", "c"]), {}, ValueError, ["key_tokens"]),
        ((torch.rand(3, 4), ["a", "b", "c"]), dict(key_tokens=["x"]), ValueError, ["key_tokens", "1 labels", "4 keys"]),
        ((torch.rand(3, 3), "abc"), {}, TypeError, ["tokens"]),
        ((torch.rand(0, 3),), {}, ValueError, ["weights", "empty"]),
    ],
)
def test_plot_head_bad_inputs(args, kwargs, exc, words):
    with pytest.raises(exc) as info:
        plot_head(*args, **kwargs)
    for word in words:
        assert word in str(info.value)


def test_plot_heads_grid_png_shapes(tmp_path):
    toks = list("abcdef")
    layers = [weights(2, 4, 6, 6, seed=s) for s in range(3)]  # (B, H, L, S), index picks the sequence
    fig = plot_heads_grid(layers, toks, index=1, path=tmp_path / "grid.png")
    check_png(tmp_path / "grid.png", fig)
    assert len(fig.axes) == 12 + 1  # 12 heatmaps and the one colour bar they share
    assert fig.axes[-1].get_ylabel().startswith("attention weight")
    np.testing.assert_allclose(fig.axes[5].images[0].get_array(), layers[1][1, 1].numpy())
    # One stacked tensor (layers, H, L, S), a subset, and uneven head counts.
    fig = plot_heads_grid(torch.stack([weights(3, 4, 4)] * 2), layers=[1], heads=[0, 2], path=tmp_path / "g2.png")
    check_png(tmp_path / "g2.png", fig)
    assert len(fig.axes) == 2 + 1
    fig = plot_heads_grid([weights(2, 5, 5), weights(3, 5, 5)], path=tmp_path / "g3.png")
    check_png(tmp_path / "g3.png", fig)
    assert sum(ax.axison for ax in fig.axes) == 5 + 1  # + the colour bar; the missing (layer 0, head 2) cell is blank


@pytest.mark.parametrize(
    "args, kwargs, words",
    [
        (([torch.rand(4, 4)],), {}, ["attentions[0]", "(H, L, S)"]),
        (([weights(2, 3, 3)], ["a"]), {}, ["tokens", "1 labels"]),
        (([weights(2, 3, 3), weights(2, 4, 4)],), {}, ["attentions[1]", "(L, S)"]),
        (([weights(2, 3, 3)],), dict(heads=[5]), ["heads", "[0, 2)"]),
        (([weights(1, 2, 3, 3)],), dict(index=3), ["index", "batch size 1"]),
        ((torch.rand(3, 3, 3),), {}, ["attentions", "(layers, H, L, S)"]),
    ],
)
def test_plot_heads_grid_bad_inputs(args, kwargs, words):
    with pytest.raises(ValueError) as info:
        plot_heads_grid(*args, **kwargs)
    for word in words:
        assert word in str(info.value)


def test_plot_diagnostics_png(tmp_path):
    w = weights(2, 5, 7, 7)
    w[:, 0] = 0
    w[:, 0, :, 0] = 1  # a dead head
    summary = classify_heads([w, w[:, :3]])
    fig = plot_diagnostics(summary, path=tmp_path / "diag.png")
    check_png(tmp_path / "diag.png", fig)
    letters = [t.get_text() for t in fig.axes[0].texts]
    assert len(letters) == 8 and letters[0] == "D"
    np.testing.assert_allclose(fig.axes[0].images[0].get_array().filled(np.nan), summary.metric("entropy").numpy())
    fig = plot_diagnostics(summary, metric="sink_mass", path=tmp_path / "sink.png")
    check_png(tmp_path / "sink.png", fig)
    with pytest.raises(ValueError, match="name must be one of"):
        plot_diagnostics(summary, metric="nope")
    with pytest.raises(TypeError, match="summary"):
        plot_diagnostics([w])


@pytest.mark.parametrize(
    "shape, grid, prefix, query, image",
    [
        ((17, 17), (4, 4), 1, 6, None),
        ((17, 17), (4, 4), 1, 0, np.random.default_rng(0).random((64, 64, 3))),
        ((12,), (3, 4), 0, None, np.random.default_rng(1).integers(0, 255, (3, 30, 40), dtype=np.uint8)),
        ((2, 10), (2, 4), 2, 1, np.random.default_rng(2).random((20, 40))),
    ],
)
def test_plot_patch_map_png(tmp_path, shape, grid, prefix, query, image):
    w = weights(*shape)
    fig = plot_patch_map(w, grid, query=query, num_prefix_tokens=prefix, image=image, path=tmp_path / "patch.png")
    check_png(tmp_path / "patch.png", fig)
    row = w if w.ndim == 1 else w[query]
    heat = fig.axes[0].images[-1].get_array()
    np.testing.assert_allclose(heat, row[prefix:].reshape(grid).numpy(), rtol=1e-6)
    outlined = len(fig.axes[0].patches) == 1
    assert outlined == (len(shape) == 2 and shape[0] == shape[1] and query >= prefix)


@pytest.mark.parametrize(
    "args, kwargs, words",
    [
        ((weights(17), (4, 4)), {}, ["S=17", "num_prefix_tokens"]),
        ((weights(3, 16), (4, 4)), {}, ["query="]),
        ((weights(3, 16), (4, 4)), dict(query=3), ["query", "[0, 3)"]),
        ((weights(16), (4, 0)), {}, ["grid"]),
        ((weights(16), (4, 4)), dict(image=np.zeros((5, 5, 2))), ["image"]),
        ((weights(2, 2, 16), (4, 4)), {}, ["weights", "ndim=3"]),
    ],
)
def test_plot_patch_map_bad_inputs(args, kwargs, words):
    with pytest.raises(ValueError) as info:
        plot_patch_map(*args, **kwargs)
    for word in words:
        assert word in str(info.value)


def test_missing_matplotlib_gives_install_hint(monkeypatch):
    # A None entry in sys.modules makes the import raise ImportError.
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    with pytest.raises(ImportError, match=r"pip install attnkit\[viz\]"):
        plots.plot_head(torch.eye(2))


def test_importing_inspect_does_not_import_matplotlib_or_selenium():
    code = (
        "import sys, attnkit.inspect, attnkit.inspect.plots, attnkit.inspect.viewer;"
        "bad = [m for m in ('matplotlib', 'selenium') if m in sys.modules];"
        "sys.exit(f'imported {bad}' if bad else 0)"
    )
    src = Path(__file__).resolve().parents[2] / "src"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr + result.stdout
