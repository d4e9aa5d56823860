"""COCO mAP of a detector's boxes, computed by the COCO project's own evaluator (``pycocotools``,
Lin et al. 2014, https://arxiv.org/abs/1405.0312; the ``exp`` extra installs it).

COCO's AP for one class at one IoU threshold t: detections sorted by score are matched greedily to
unmatched ground truths with IoU ≥ t; precision is made monotone (each recall's precision is the
best at that recall or higher) and averaged at the 101 recalls 0, 0.01, …, 1. mAP@0.5 averages over
classes at t = 0.5; mAP@0.5:0.95 also over t = 0.5, 0.55, …, 0.95. A class with no ground truth in
the split is left out of the mean (COCOeval's −1), at most 100 detections per image count.

Two values the tests check by hand: a detection shifted to IoU 2/3 is a true positive at the four
thresholds 0.5…0.65 of ten, so mAP@0.5:0.95 = 0.4; finding 2 of 4 objects with no false positive
gives precision 1 at the 51 recall points 0…0.50, so AP = 51/101.

Shape legend: n detections, m ground-truth boxes of one image.
"""

from __future__ import annotations

import contextlib
import io

import torch


def _require_pycocotools():
    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError as e:
        raise ImportError("detection mAP needs pycocotools: pip install 'attnkit[exp]' (or pip install pycocotools)") from e
    return COCO, COCOeval


def _coco_dicts(predictions, targets, num_classes: int):
    images, anns, dets = [], [], []
    for i, (p, t) in enumerate(zip(predictions, targets)):
        images.append({"id": i})
        for row in t.tolist():
            c, x1, y1, x2, y2 = row
            if c < 0:
                continue  # padding
            w, h = x2 - x1, y2 - y1
            anns.append({"id": len(anns) + 1, "image_id": i, "category_id": int(c), "bbox": [x1, y1, w, h], "area": w * h, "iscrowd": 0})
        for x1, y1, x2, y2, s, c in p.tolist():
            dets.append({"image_id": i, "category_id": int(c), "bbox": [x1, y1, x2 - x1, y2 - y1], "score": s})
    gt = {"images": images, "annotations": anns, "categories": [{"id": k} for k in range(num_classes)]}
    return gt, dets


def coco_map(predictions: list[torch.Tensor], targets: list[torch.Tensor], num_classes: int) -> dict:
    """``{"map50", "map50_95"}`` of per-image predictions (n, 6) ``x1, y1, x2, y2, score, class`` against
    per-image targets (m, 5) ``class, x1, y1, x2, y2`` (class −1 rows ignored), pixels throughout."""
    if len(predictions) != len(targets):
        raise ValueError(f"coco_map: {len(predictions)} prediction lists for {len(targets)} target lists; give one per image")
    COCO, COCOeval = _require_pycocotools()
    gt, dets = _coco_dicts(predictions, targets, num_classes)
    if not gt["annotations"] or not dets:
        return {"map50": 0.0, "map50_95": 0.0}  # nothing to find, or nothing found
    with contextlib.redirect_stdout(io.StringIO()):  # COCOeval prints its table
        coco_gt = COCO()
        coco_gt.dataset = gt
        coco_gt.createIndex()
        coco_dt = coco_gt.loadRes(dets)
        ev = COCOeval(coco_gt, coco_dt, "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return {"map50": max(0.0, float(ev.stats[1])), "map50_95": max(0.0, float(ev.stats[0]))}


__all__ = ["coco_map"]
