"""The generated detection set: the same canvases on every call, boxes tight around drawn pixels and
inside the canvas, and in the context variant the class's cue bar at the far edge it names."""

from __future__ import annotations

import pytest
import torch

from attnkit.data.detection_set import unpad
from attnkit.data.detection_synth import make_detection_set


@pytest.fixture(scope="module")
def objects():
    return make_detection_set("objects", n_train=24, n_val=8, size=64)


def test_same_seed_same_set_and_splits_differ(objects):
    again = make_detection_set("objects", n_train=24, n_val=8, size=64)
    assert torch.equal(objects.train_x, again.train_x) and torch.equal(objects.train_t, again.train_t)
    assert not torch.equal(objects.train_x[:8], objects.val_x)
    assert len(objects.classes) == 6 and objects.describe()["train_objects"] >= 24


def test_boxes_lie_inside_the_canvas_and_cover_bright_pixels(objects):
    for x, t in zip(objects.train_x, unpad(objects.train_t)):
        assert len(t) >= 1
        assert (t[:, 1:] >= 0).all() and (t[:, 3:] <= 64).all() and (t[:, 3] > t[:, 1]).all() and (t[:, 4] > t[:, 2]).all()
        for c, x1, y1, x2, y2 in t.int().tolist():
            assert x[0, y1:y2, x1:x2].max() > 0.25  # an object is drawn in its box (items can be dim)


def test_context_class_names_the_edge_with_the_bar():
    d = make_detection_set("context", n_train=16, n_val=4, size=64)
    assert d.classes == ("circle/top", "circle/bottom", "square/top", "square/bottom")
    for x, t in zip(d.train_x, unpad(d.train_t)):
        top = float(x[0, :4, 16:48].mean()) > 0.9
        assert all((int(c) % 2 == 0) == top for c in t[:, 0])  # even ids: bar on top
        assert (t[:, 2] >= 8).all() and (t[:, 4] <= 56).all()  # objects keep off the bars


def test_bad_arguments():
    with pytest.raises(ValueError, match="variant"):
        make_detection_set("faces")
    with pytest.raises(ValueError, match="multiple of 32"):
        make_detection_set("context", size=80)
    with pytest.raises(ValueError, match="n_train"):
        make_detection_set("context", n_train=0)
