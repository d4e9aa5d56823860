"""What the detection experiment measures besides training: COCO mAP on the validation split, the
forward FLOPs of one image, and the activation memory of one training step.

**Activation memory.** On a CPU there is no allocator high-water mark per model (the process's
resident peak mixes every earlier model), so the figure here is what the variants differ by: the
bytes of the tensors autograd saves for the backward pass during one training forward of a batch
(``torch.autograd.graph.saved_tensors_hooks``), each storage counted once. MHSA's (N, N) attention
weights land exactly there. On CUDA the allocator's own peak for the same step is reported instead.

Shape legend: B batch, C channels, H×W image, M objects per image (padded).
"""

from __future__ import annotations

import torch

from ...data.detection_set import unpad
from ...models.detection import DetectionLoss, coco_map
from ..vision.train import forward_flops  # noqa: F401 (re-exported: the same counter, attention on the reference backend)


def activation_mb(model: torch.nn.Module, x: torch.Tensor, targets: torch.Tensor) -> float:
    """MiB of one training step's activations for the batch ``x`` (B, C, H, W) and its (B, M, 5) targets."""
    loss_fn = DetectionLoss(model)
    was = model.training
    model.train()
    if x.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(x.device)
        loss_fn(model(x), targets)[0].backward()
        model.zero_grad(set_to_none=True)
        model.train(was)
        return torch.cuda.max_memory_allocated(x.device) / 2 ** 20
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor):
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            s = t.untyped_storage()
            seen[s.data_ptr()] = s.nbytes()
        return t

    state = {k: v.clone() for k, v in model.state_dict().items() if "running" in k or "num_batches" in k}
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(model(x), targets)[0]
    del loss
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    model.load_state_dict(state, strict=False)  # the measuring step must not move BatchNorm's statistics
    model.train(was)
    return sum(n for ptr, n in seen.items() if ptr not in params) / 2 ** 20


@torch.no_grad()
def evaluate_map(model, val_x: torch.Tensor, val_t: torch.Tensor, num_classes: int, batch_size: int = 64) -> dict:
    """``{"map50", "map50_95"}`` on the validation split (pycocotools' COCOeval)."""
    model.eval()
    dev = next(model.parameters()).device
    preds = [p.cpu() for i in range(0, len(val_x), batch_size) for p in model.predict(val_x[i:i + batch_size].to(dev))]
    return coco_map(preds, unpad(val_t), num_classes)


__all__ = ["activation_mb", "evaluate_map", "forward_flops"]
