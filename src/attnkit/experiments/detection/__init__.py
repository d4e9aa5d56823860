"""MHSA in a small YOLOv8-style detector: the controlled experiment (plain vs MHSA at P5, P4+P5, or in
the neck) on a generated multi-object set or your own YOLO-format folder.

train: the experiment · measure: mAP, FLOPs, activation memory · plots: the figures ·
section: the report's prose (en, zh).
"""

from .train import DetectionExperiment

__all__ = ["DetectionExperiment"]
