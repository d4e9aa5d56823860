"""The container every detection loader returns: images and padded box targets, train and val.

Targets of a split are one (N, M, 5) tensor — ``class, x1, y1, x2, y2`` in pixels of the stored
image, rows with class −1 padding up to M, the largest number of objects in one image — so a batch
is a plain slice and torch's default collate stacks it.

Shape legend: N images, C channels (1 or 3), H×W pixels, M objects per image (padded).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def pad_targets(per_image: list[list[list[float]]]) -> torch.Tensor:
    """Per-image lists of ``[class, x1, y1, x2, y2]`` → (N, M, 5) with class −1 padding (M ≥ 1)."""
    M = max(1, max((len(t) for t in per_image), default=0))
    out = torch.zeros(len(per_image), M, 5)
    out[..., 0] = -1
    for i, rows in enumerate(per_image):
        if rows:
            out[i, : len(rows)] = torch.tensor(rows, dtype=torch.float32)
    return out


def unpad(targets: torch.Tensor) -> list[torch.Tensor]:
    """(N, M, 5) → N tensors (m_i, 5) without the padding rows."""
    return [t[t[:, 0] >= 0] for t in targets]


@dataclass(frozen=True)
class DetectionSet:
    """``train_x`` (N, C, H, W) float32 in [0, 1], ``train_t`` (N, M, 5) pixel boxes; same for val."""

    name: str
    train_x: torch.Tensor
    train_t: torch.Tensor
    val_x: torch.Tensor
    val_t: torch.Tensor
    classes: tuple[str, ...]
    source: str
    notice: str | None = None

    @property
    def image_size(self) -> tuple[int, int]:
        return tuple(self.train_x.shape[2:])

    def describe(self) -> dict:
        """JSON-able summary for results files."""
        count = lambda t: int((t[..., 0] >= 0).sum())  # noqa: E731 (objects in a split)
        return {"name": self.name, "source": self.source, "notice": self.notice, "image_size": list(self.image_size),
                "train": int(self.train_x.shape[0]), "val": int(self.val_x.shape[0]), "classes": list(self.classes),
                "train_objects": count(self.train_t), "val_objects": count(self.val_t)}


__all__ = ["DetectionSet", "pad_targets", "unpad"]
