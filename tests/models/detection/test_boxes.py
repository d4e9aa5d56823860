"""Box arithmetic against independent NumPy references: IoU, CIoU (the paper's formula written
out), the distance ↔ box transforms, and NMS against a brute-force greedy reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnkit.models.detection.boxes import batched_nms, bbox2dist, box_iou, ciou, dist2bbox, nms


def _boxes(n, seed):
    g = np.random.default_rng(seed)
    xy = g.uniform(0, 50, (n, 2))
    wh = g.uniform(2, 30, (n, 2))
    return np.concatenate((xy, xy + wh), 1)


def _iou_np(a, b):
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def test_box_iou_matches_numpy():
    a, b = _boxes(7, 0), _boxes(5, 1)
    ref = np.array([[_iou_np(x, y) for y in b] for x in a])
    np.testing.assert_allclose(box_iou(torch.tensor(a), torch.tensor(b)).numpy(), ref, rtol=1e-9, atol=1e-12)


def test_ciou_matches_the_paper_formula():
    a, b = _boxes(20, 2), _boxes(20, 3)
    for x, y, got in zip(a, b, ciou(torch.tensor(a), torch.tensor(b)).tolist()):
        iou = _iou_np(x, y)
        c2 = (max(x[2], y[2]) - min(x[0], y[0])) ** 2 + (max(x[3], y[3]) - min(x[1], y[1])) ** 2
        rho2 = ((x[0] + x[2]) / 2 - (y[0] + y[2]) / 2) ** 2 + ((x[1] + x[3]) / 2 - (y[1] + y[3]) / 2) ** 2
        v = 4 / math.pi ** 2 * (math.atan((y[2] - y[0]) / (y[3] - y[1])) - math.atan((x[2] - x[0]) / (x[3] - x[1]))) ** 2
        alpha = v / (1 - iou + v)
        assert got == pytest.approx(iou - rho2 / c2 - alpha * v, abs=1e-6)


def test_ciou_is_one_for_identical_boxes_and_has_a_gradient_when_apart():
    b = torch.tensor([[0.0, 0, 10, 10]], dtype=torch.float64)
    assert float(ciou(b, b)) == pytest.approx(1.0, abs=1e-6)
    p = torch.tensor([[20.0, 20, 30, 30]], dtype=torch.float64, requires_grad=True)
    (1 - ciou(p, b)).sum().backward()
    assert p.grad.abs().sum() > 0  # no overlap, yet the centre term pulls the box in


def test_dist_and_box_are_inverse():
    anchors = torch.tensor([[5.5, 5.5], [2.5, 7.5]])
    dist = torch.tensor([[[1.0, 2.0, 3.0, 0.5], [0.25, 1.0, 2.0, 1.5]]])
    boxes = dist2bbox(dist, anchors)
    torch.testing.assert_close(boxes[0, 0], torch.tensor([4.5, 3.5, 8.5, 6.0]))
    torch.testing.assert_close(bbox2dist(anchors, boxes, 15), dist)


def _greedy_reference(boxes, scores, thr):
    order = list(np.argsort(-scores, kind="stable"))
    keep = []
    while order:
        i = order.pop(0)
        keep.append(i)
        order = [j for j in order if _iou_np(boxes[i], boxes[j]) <= thr]
    return keep


@pytest.mark.parametrize("seed", range(5))
def test_nms_matches_brute_force_greedy(seed):
    boxes = _boxes(40, seed)
    scores = np.random.default_rng(seed + 10).permutation(40).astype(np.float64)  # distinct scores: one order
    got = nms(torch.tensor(boxes), torch.tensor(scores), 0.4).tolist()
    assert got == _greedy_reference(boxes, scores, 0.4)


def test_batched_nms_keeps_overlapping_boxes_of_different_classes():
    boxes = torch.tensor([[0.0, 0, 10, 10], [1, 1, 11, 11], [0, 0, 10, 10]])
    keep = batched_nms(boxes, torch.tensor([0.9, 0.8, 0.7]), torch.tensor([0, 0, 1]), 0.5)
    assert sorted(keep.tolist()) == [0, 2]
    assert nms(torch.zeros(0, 4), torch.zeros(0), 0.5).numel() == 0
