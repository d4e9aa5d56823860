"""A small YOLOv8-style detector with optional MHSA (see :mod:`.yolo`), its loss, assigner, NMS and
COCO mAP.

yolo: the network · blocks: C2f, SPPF · head: decoupled anchor-free head, DFL · assigner: TOOD's
task-aligned assignment · loss: BCE + CIoU + DFL · boxes: IoU, CIoU, NMS · placement: where MHSA goes ·
evaluate: mAP through pycocotools.
"""

from .assigner import TaskAlignedAssigner
from .boxes import batched_nms, box_iou, ciou, nms
from .evaluate import coco_map
from .head import DFL, DetectHead, make_anchors
from .loss import DetectionLoss, dfl_loss
from .placement import PLACEMENTS, MHSAPlacement
from .yolo import YOLODetector

__all__ = ["YOLODetector", "MHSAPlacement", "PLACEMENTS", "DetectionLoss", "TaskAlignedAssigner", "DetectHead", "DFL",
           "make_anchors", "dfl_loss", "nms", "batched_nms", "box_iou", "ciou", "coco_map"]
