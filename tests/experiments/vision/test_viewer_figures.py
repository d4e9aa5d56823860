"""The vision run's attention maps drawn again from its viewers' weights (for the Chinese copies of a
committed run): what :func:`read_viewer` reads back equals what :func:`attnkit.inspect.save_html`
was given, to the viewer's rounding, and the maps drawn from it equal the maps drawn from the
original weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("matplotlib")

import attnkit  # noqa: E402
from attnkit.experiments.vision.plots import pixel_attention_figure, vit_attention_figure  # noqa: E402
from attnkit.experiments.vision.viewer_figures import read_viewer, viewer_figures  # noqa: E402

DECIMALS = 4  # save_html's default: weights stored as integers of 1e-4


def _weights(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.softmax(3 * torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64), -1)


@pytest.fixture
def run_dir(tmp_path):
    g = torch.Generator().manual_seed(2)
    image = torch.rand(12, 12, generator=g, dtype=torch.float64)
    mhsa = _weights(4, 9, 9)  # (heads, N, N) on a 3x3 map
    vit = [_weights(1, 2, 5, 5, seed=s) for s in range(3)]  # per layer (1, heads, T, T): 1 class token + 2x2 patches
    attnkit.inspect.save_html(tmp_path / "viewer_mhsa.html", [mhsa], patch_grid=(3, 3), image=image, title="MHSA2d, last stage (Ankle boot)")
    attnkit.inspect.save_html(tmp_path / "viewer_vit.html", [a[0] for a in vit], patch_grid=(2, 2), num_prefix_tokens=1, image=image,
                              title="ViT (Bag)")
    return tmp_path, image, mhsa, vit


def _arrays(fig) -> list[np.ndarray]:
    return [np.asarray(im.get_array(), dtype=float) for ax in fig.axes for im in ax.get_images()]


def test_the_viewer_gives_back_its_weights_grid_image_and_class(run_dir):
    folder, image, mhsa, vit = run_dir
    m = read_viewer(folder / "viewer_mhsa.html")
    assert m["grid"] == (3, 3) and m["prefix"] == 0 and m["label"] == "Ankle boot"
    # rounding to 1e-4 then scaling each row back to sum 1: off by at most N·0.5e-4 per weight
    torch.testing.assert_close(m["layers"][-1], mhsa, atol=9 * 0.5 * 10**-DECIMALS, rtol=0)
    torch.testing.assert_close(m["layers"][-1].sum(-1), torch.ones(4, 9, dtype=torch.float64))
    np.testing.assert_allclose(m["image"], image.numpy(), atol=0.5 / 255 + 1e-9)  # stored as 8-bit grey
    v = read_viewer(folder / "viewer_vit.html")
    assert v["grid"] == (2, 2) and v["prefix"] == 1 and v["label"] == "Bag" and len(v["layers"]) == 3
    for got, want in zip(v["layers"], vit):
        torch.testing.assert_close(got, want[0], atol=5 * 0.5 * 10**-DECIMALS, rtol=0)


def test_the_maps_drawn_from_the_viewers_match_those_drawn_from_the_weights(run_dir):
    folder, image, mhsa, vit = run_dir
    drawn = dict(viewer_figures(folder))
    assert set(drawn) == {"mhsa_query.png", "vit_attention.png"}
    for name, original in (("mhsa_query.png", pixel_attention_figure(mhsa, 3, image, "Ankle boot")),
                           ("vit_attention.png", vit_attention_figure(vit, (2, 2), image, "Bag"))):
        again = drawn[name]("en")
        assert again._suptitle.get_text() == original._suptitle.get_text()
        a, b = _arrays(again), _arrays(original)
        assert len(a) == len(b) > 0
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, atol=0.5 / 255 + 1e-6)  # the image's 8 bits; the weights' 1e-4 rounding is smaller


def test_a_folder_without_viewers_has_no_maps_to_draw(tmp_path):
    assert viewer_figures(tmp_path) == [] and read_viewer(tmp_path / "viewer_mhsa.html") is None
