"""attnkit.inspect.viewer: page structure, escaping, data round trip, bad inputs (no browser)."""

import base64
import io
import json
import re

import numpy as np
import pytest
import torch

from attnkit.inspect.metrics import classify_heads
from attnkit.inspect.viewer import render_html, save_html

EVIL = "</script><script>alert(1)</script>"


def weights(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).mul(2).softmax(-1)


def page_data(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="ak-data">(.*?)</script>', page, re.S)
    assert m, "data element missing"
    return json.loads(m.group(1))


def test_page_is_self_contained():
    page = render_html([weights(2, 4, 4)], list("abcd"))
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    # No external script, style, image or font: every http(s) mention is the SVG namespace.
    assert re.findall(r"https?://[^\s\"']+", page) == ["http://www.w3.org/2000/svg"]
    assert not re.search(r"<(script|img|iframe)[^>]*\ssrc=", page)
    assert "<link rel=\"stylesheet\"" not in page and "@import" not in page
    assert "default-src 'none'" in page  # the CSP forbids any fetch
    assert page.count("<script") == 3 and page.count("</script>") == 3  # the words, the data, the script


def test_user_text_is_escaped_for_script_and_html():
    tokens = [EVIL, "<!--", "a&b", 'q"uote', "line\u2028sep", "<img src=x onerror=alert(1)>"]
    page = render_html([weights(1, 6, 6)], tokens, title=EVIL)
    assert EVIL not in page and "<img src=x" not in page and "<!--" not in page
    assert page.count("</script>") == 3  # only the three real closing tags
    assert "\\u003c/script\\u003e" in page  # "</" can never appear inside the JSON
    assert "<title>&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;</title>" in page
    data = page_data(page)
    assert data["queries"] == tokens and data["keys"] == tokens and data["title"] == EVIL
    # The page script only ever writes user text with textContent.
    assert "innerHTML" not in page and "outerHTML" not in page and "insertAdjacentHTML" not in page


def test_weights_round_trip_rounded():
    layers = [weights(1, 3, 5, 5, seed=s) for s in range(2)] + [weights(1, 2, 5, 5, seed=9)]
    data = page_data(render_html(layers, decimals=4))
    assert data["decimals"] == 4 and [len(x) for x in data["layers"]] == [3, 3, 2]
    for got, ref in zip(data["layers"], layers, strict=True):
        arr = np.array(got)
        assert arr.dtype.kind == "i"  # stored as integers
        np.testing.assert_allclose(arr / 1e4, ref[0].numpy(), atol=0.5e-4 + 1e-12)
    assert data["queries"] == [str(i) for i in range(5)]
    small = page_data(render_html(layers, decimals=2))
    np.testing.assert_allclose(np.array(small["layers"][0]) / 100, layers[0][0].numpy(), atol=0.005 + 1e-12)


def test_index_picks_sequence_and_stacked_tensor():
    batch = weights(3, 2, 4, 4)
    data = page_data(render_html([batch], index=2))
    np.testing.assert_allclose(np.array(data["layers"][0]) / 1e4, batch[2].numpy(), atol=0.5e-4)
    stacked = torch.stack([batch, batch])  # (layers, B, H, L, S)
    assert len(page_data(render_html(stacked, index=1))["layers"]) == 2


def test_cross_attention_labels():
    data = page_data(render_html([weights(2, 3, 5)], ["a", "b", "c"], key_tokens=list("vwxyz")))
    assert data["queries"] == ["a", "b", "c"] and data["keys"] == list("vwxyz")
    assert page_data(render_html([weights(2, 3, 5)]))["keys"] == [str(j) for j in range(5)]
    with pytest.raises(ValueError, match="key_tokens"):
        render_html([weights(2, 3, 5)], ["a", "b", "c"])


def test_patch_view_and_embedded_png():
    from matplotlib.image import imread

    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (10, 12, 3), dtype=np.uint8)
    data = page_data(render_html([weights(2, 13, 13)], patch_grid=(3, 4), num_prefix_tokens=1, image=img))
    assert data["patch"]["grid"] == [3, 4] and data["patch"]["prefix"] == 1
    uri = data["patch"]["image"]
    assert uri.startswith("data:image/png;base64,")
    decoded = imread(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])), format="png")
    np.testing.assert_array_equal(np.rint(decoded * 255).astype(np.uint8), img)  # lossless round trip
    gray = page_data(render_html([weights(1, 4, 4)], patch_grid=(2, 2), image=np.linspace(0, 1, 20).reshape(4, 5)))
    decoded = imread(io.BytesIO(base64.b64decode(gray["patch"]["image"].split(",", 1)[1])), format="png")
    np.testing.assert_allclose(decoded[..., 0], np.linspace(0, 1, 20).reshape(4, 5), atol=1 / 255)


def test_series_and_diagnostics_payload():
    series = np.sin(np.arange(6.0))
    series[2] = np.nan
    layers = [weights(2, 3, 6, 6)]
    summary = classify_heads(layers)
    data = page_data(render_html(layers, series=torch.tensor(series), series_name="load", diagnostics=summary))
    assert data["series"]["name"] == "load" and data["series"]["values"][2] is None
    np.testing.assert_allclose([v for v in data["series"]["values"] if v is not None], series[~np.isnan(series)])
    diag = data["diagnostics"]
    assert diag["columns"][:3] == ["layer", "head", "label"] and len(diag["rows"]) == 3
    assert diag["rows"][1][:2] == [0, 1]
    rows = page_data(render_html(layers, diagnostics=[{"layer": 0, "head": 0, "note": "<b>", "x": float("nan")}]))
    assert rows["diagnostics"] == {"columns": ["layer", "head", "note", "x"], "rows": [[0, 0, "<b>", None]]}


def test_save_html(tmp_path):
    args = ([weights(1, 2, 3, 3)], ["x", "y", "z"])
    path = save_html(tmp_path / "deep" / "view.html", *args, title="t")
    assert path.exists() and path.read_text(encoding="utf-8") == render_html(*args, title="t")


@pytest.mark.parametrize(
    "args, kwargs, exc, words",
    [
        (([torch.rand(4, 4)],), {}, ValueError, ["attentions[0]", "(H, L, S)"]),
        ((torch.rand(2, 3, 3),), {}, ValueError, ["attentions", "[weights]"]),
        (([],), {}, ValueError, ["attentions", "non-empty"]),
        (([weights(1, 3, 3)], ["a"]), {}, ValueError, ["tokens", "1 labels", "3 queries"]),
        (([weights(1, 3, 3)], "abc"), {}, TypeError, ["tokens"]),
        (([torch.full((1, 2, 2), float("nan"))],), {}, ValueError, ["attentions[0]", "NaN", "nan_to_num"]),
        (([torch.randn(1, 3, 3) * 5],), {}, ValueError, ["attentions[0]", "[0, 1]", "scores"]),
        (([weights(1, 3, 3), weights(1, 4, 4)],), {}, ValueError, ["attentions[1]", "(L, S)"]),
        (([weights(2, 1, 3, 3)],), dict(index=2), ValueError, ["index", "[0, 2)"]),
        (([weights(1, 5, 5)],), dict(patch_grid=(2, 2)), ValueError, ["patch_grid", "S=4", "S=5"]),
        (([weights(1, 5, 5)],), dict(patch_grid=(2, 2), num_prefix_tokens=-1), ValueError, ["num_prefix_tokens"]),
        (([weights(1, 4, 4)],), dict(patch_grid=(2, 2), image=np.zeros((5, 5, 2))), ValueError, ["image"]),
        (([weights(1, 4, 4)],), dict(image=np.zeros((3, 3))), ValueError, ["image", "patch_grid"]),
        (([weights(1, 4, 4)],), dict(series=np.zeros(3)), ValueError, ["series", "S=4"]),
        (([weights(1, 4, 4)],), dict(diagnostics="table"), TypeError, ["diagnostics"]),
        (([weights(1, 4, 4)],), dict(decimals=9), ValueError, ["decimals"]),
        (([weights(1, 4, 4)],), dict(title=3), TypeError, ["title"]),
    ],
)
def test_bad_inputs_name_the_argument(args, kwargs, exc, words):
    with pytest.raises(exc) as info:
        render_html(*args, **kwargs)
    for word in words:
        assert word in str(info.value)


def test_large_page_warns(monkeypatch):
    import attnkit.inspect.viewer as viewer

    monkeypatch.setattr(viewer, "LARGE_PAGE_WEIGHTS", 10)
    with pytest.warns(UserWarning, match="large page"):
        render_html([weights(1, 4, 4)])
