"""Training the character LM of ``kv_eviction`` (one per seed), resumable through ``ctx.fit``.

Each seed draws a pool of ``windows`` training windows (:func:`.data.training_windows`) and makes
``epochs`` shuffled passes over it; the checkpoint after every pass makes the run resumable, and a
finished seed is loaded, not trained again. AdamW with a cosine schedule, gradient clipping at 1.

Shapes: a batch is (batch, context + 1) ids.
"""

from __future__ import annotations

import math

import torch

from .data import training_windows
from .model import CharLM, lm_loss


def build_model(c: dict, vocab_size: int) -> CharLM:
    return CharLM(vocab_size, dim=c["dim"], heads=c["heads"], layers=c["layers"], max_positions=c["stream_len"] + 8)


def train_seed(ctx, seed: int, c: dict, vocab_size: int, ids: torch.Tensor, starts: list[int]) -> tuple[CharLM, dict]:
    """The model of ``seed`` trained (or loaded when its checkpoint says finished) and its fit summary."""
    ctx.seed_everything(seed)
    model = build_model(c, vocab_size)
    windows = training_windows(ids, starts, c["context"], c["windows"], seed=1000 + seed)
    data = torch.utils.data.TensorDataset(windows)
    steps = c["epochs"] * c["windows"] // c["batch_size"]
    opt = torch.optim.AdamW(model.parameters(), lr=c["lr"], weight_decay=0.1)
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    fit = ctx.fit(model, data, batch_size=c["batch_size"], loss_fn=lm_loss, optimizer=opt, epochs=c["epochs"],
                  tag=f"charlm-seed{seed}", scheduler=sched, scheduler_every="step", grad_clip=1.0, seed=seed)
    model.eval()
    return model, {"train_loss": fit.history[-1]["train_loss"] if fit.history else None, "time_s": fit.time_s,
                   "steps": steps, "skipped": fit.skipped}
