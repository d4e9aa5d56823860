"""COCO mAP through pycocotools on hand-made cases whose values are computed by hand (the evaluate
module's docstring derives them): perfect boxes, boxes shifted to IoU 2/3, objects missed."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("pycocotools", reason="enable with: pip install pycocotools")

from attnkit.models.detection import coco_map  # noqa: E402

GT = [torch.tensor([[0, 10.0, 10, 40, 40], [1, 50, 50, 70, 90]]), torch.tensor([[0, 20.0, 30, 50, 60], [0, 60, 5, 90, 25]])]


def _perfect():
    return [torch.cat((g[:, 1:], torch.full((len(g), 1), 0.9), g[:, :1]), 1) for g in GT]


def test_perfect_boxes_give_one():
    r = coco_map(_perfect(), GT, 2)
    assert r["map50"] == pytest.approx(1.0) and r["map50_95"] == pytest.approx(1.0)


def test_box_shifted_to_iou_two_thirds_counts_at_four_of_ten_thresholds():
    gt = [torch.tensor([[0, 10.0, 10, 40, 40]])]  # 30×30
    pred = [torch.tensor([[20.0, 10, 50, 40, 0.8, 0]])]  # shifted 10 px: IoU = 20·30 / (40·30) = 1/2 exactly
    r = coco_map(pred, gt, 1)
    assert r["map50"] == pytest.approx(1.0) and r["map50_95"] == pytest.approx(0.1)  # TP only at t = 0.50
    pred = [torch.tensor([[16.0, 10, 46, 40, 0.8, 0]])]  # shifted 6 px: IoU = 24/36 = 2/3: TP at 0.50, 0.55, 0.60, 0.65
    r = coco_map(pred, gt, 1)
    assert r["map50"] == pytest.approx(1.0) and r["map50_95"] == pytest.approx(0.4)


def test_two_of_four_objects_found_give_51_of_101():
    gt = [torch.tensor([[0, 0.0, 0, 10, 10], [0, 20, 20, 30, 30]]), torch.tensor([[0, 0.0, 0, 10, 10], [0, 40, 40, 60, 60]])]
    pred = [torch.tensor([[0.0, 0, 10, 10, 0.9, 0]]), torch.tensor([[40.0, 40, 60, 60, 0.7, 0]])]
    r = coco_map(pred, gt, 1)  # precision 1 up to recall 1/2: the 51 recall points 0, 0.01, …, 0.50 of 101
    assert r["map50"] == pytest.approx(51 / 101) and r["map50_95"] == pytest.approx(51 / 101)


def test_a_false_positive_ranked_first_halves_the_precision():
    gt = [torch.tensor([[0, 0.0, 0, 10, 10]])]
    pred = [torch.tensor([[50.0, 50, 60, 60, 0.9, 0], [0.0, 0, 10, 10, 0.5, 0]])]
    r = coco_map(pred, gt, 1)  # the TP comes second: precision 1/2 at recall 1, made monotone → 1/2 everywhere
    assert r["map50"] == pytest.approx(0.5)


def test_wrong_class_and_empty_predictions_score_zero():
    wrong = [torch.cat((g[:, 1:], torch.full((len(g), 1), 0.9), 1 - g[:, :1]), 1) for g in GT]
    assert coco_map(wrong, GT, 2)["map50"] == pytest.approx(0.0)
    assert coco_map([torch.zeros(0, 6)] * 2, GT, 2) == {"map50": 0.0, "map50_95": 0.0}


def test_padding_rows_are_ignored_and_lengths_must_match():
    padded = [torch.cat((g, torch.tensor([[-1.0, 0, 0, 0, 0]]))) for g in GT]
    assert coco_map(_perfect(), padded, 2)["map50_95"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="one per image"):
        coco_map(_perfect()[:1], GT, 2)
