"""The training loop every experiment shares: :func:`fit` (called as ``ctx.fit(model, ...)``).

One call trains one model and returns a :class:`FitResult`. What it guarantees:

* **Seeded and resumable to the bit.** Epoch e's shuffle is drawn from a generator seeded with
  ``(seed, e)``, not from the global RNG, and the checkpoint written after every epoch holds the
  model, optimizer, scheduler, every rank's RNG states, the history and the early-stopping state.
  A run killed at any moment and restarted with ``--resume`` therefore continues from the last
  finished epoch and ends with the same numbers as a run that was never interrupted (same machine,
  same thread count). A tag whose checkpoint says *finished* is not trained again.
* **Atomic checkpoints**: ``out/checkpoints/{tag}.pt`` is written to a temporary file and renamed,
  so a kill mid-write leaves the previous checkpoint intact.
* **Early stopping**: with ``monitor`` (a key of ``eval_fn``'s dict, or ``"train_loss"``) and
  ``patience``, training stops after ``patience`` epochs without improvement and the best epoch's
  weights are put back into ``model``.
* **DistributedDataParallel** under torchrun: the same global batches as one process, each split
  across ranks (see :mod:`attnkit.experiments.lab.ddp`); ``loss_fn`` always receives the plain model,
  because the DDP wrapper is put around ``loss_fn(model, batch)`` as a whole.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.distributed as dist
from torch import nn

from . import ddp
from .atomic import remove_stale_temporaries, save_torch

if TYPE_CHECKING:  # pragma: no cover
    from .context import RunContext

CHECKPOINT_VERSION = 1


@dataclass
class FitResult:
    """What :func:`fit` returns. ``history`` has one dict per epoch (``epoch`` from 1,
    ``train_loss``, ``time_s`` and ``eval_fn``'s metrics); ``best_epoch`` is the monitored best (the
    last epoch without a monitor); ``time_s`` counts every epoch trained, across resumes."""

    history: list[dict]
    best_epoch: int
    epochs_run: int
    time_s: float
    best_value: float | None = None
    stopped_early: bool = False
    resumed_from: int = 0  # the epoch the run continued after (0 = started fresh)
    skipped: bool = False  # True when the tag had already finished and nothing was trained
    extra: dict = field(default_factory=dict)

    def final(self) -> dict:
        """The best epoch's history row (the last one without a monitor)."""
        return next((r for r in self.history if r["epoch"] == self.best_epoch), self.history[-1] if self.history else {})


class _LossModule(nn.Module):
    """``loss_fn(model, batch)`` as one module, so DDP's hooks see the whole forward pass whatever
    methods of the model ``loss_fn`` calls."""

    def __init__(self, model: nn.Module, loss_fn: Callable):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def forward(self, batch):
        return self.loss_fn(self.model, batch)


def to_device(batch: Any, device: torch.device) -> Any:
    """Move every tensor in a (nested) tuple/list/dict batch to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        moved = [to_device(v, device) for v in batch]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    return batch


def rng_state() -> dict:
    import numpy as np

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    import numpy as np

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _gather_rng(world_size: int) -> list[dict]:
    mine = rng_state()
    if world_size <= 1 or not ddp.active():
        return [mine]
    allst: list = [None] * world_size
    dist.all_gather_object(allst, mine)
    return allst


def _check_args(epochs, batch_size, tag, monitor, patience, mode, scheduler_every, train_data) -> None:
    if scheduler_every not in ("epoch", "step"):
        raise ValueError(f"fit: scheduler_every must be 'epoch' or 'step', got {scheduler_every!r}")
    if train_data is None or not hasattr(train_data, "__len__") or not hasattr(train_data, "__getitem__"):
        raise TypeError(f"fit: train_data must be a map-style dataset (len() and [i]), got {type(train_data).__name__}")
    if len(train_data) == 0:
        raise ValueError("fit: train_data is empty; check the data loader's split sizes")
    if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 1:
        raise ValueError(f"fit: epochs must be an int >= 1, got {epochs!r}")
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"fit: batch_size must be an int >= 1, got {batch_size!r}")
    if not isinstance(tag, str) or not tag or any(c in tag for c in "/\\\0") or tag.startswith("."):
        raise ValueError(f"fit: tag names the checkpoint file and must be a plain file name, got {tag!r}; e.g. tag='lstm-seed0'")
    if mode not in ("min", "max"):
        raise ValueError(f"fit: mode must be 'min' or 'max', got {mode!r}")
    if patience is not None and (not isinstance(patience, int) or patience < 1):
        raise ValueError(f"fit: patience must be an int >= 1 or None, got {patience!r}")
    if patience is not None and monitor is None:
        raise ValueError("fit: patience needs monitor= (a key of eval_fn's dict, or 'train_loss') to know what to watch")


def fit(
    ctx: "RunContext",
    model: nn.Module,
    train_data=None,
    *,
    batch_size: int,
    loss_fn: Callable[[nn.Module, Any], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    epochs: int,
    tag: str,
    collate_fn: Callable | None = None,
    eval_fn: Callable[[nn.Module], dict] | None = None,
    monitor: str | None = None,
    patience: int | None = None,
    mode: str = "min",
    min_delta: float = 0.0,
    scheduler=None,
    scheduler_every: str = "epoch",
    batching=None,
    grad_clip: float | None = None,
    shuffle: bool = True,
    seed: int | None = None,
    find_unused_parameters: bool = False,
) -> FitResult:
    """Train ``model`` on ``train_data`` (a map-style dataset) for up to ``epochs`` epochs.

    ``loss_fn(model, batch)`` returns the batch's mean loss (a scalar tensor); ``batch`` is
    ``collate_fn(list of samples)`` (torch's default collate when None), moved to ``ctx.device``.
    ``eval_fn(model)`` (optional, run after every epoch under ``torch.no_grad()`` and ``model.eval()``,
    on rank 0, its dict shared with the other ranks) returns metrics added to the epoch's history row.
    ``scheduler`` is stepped once per epoch, or after every optimizer step with
    ``scheduler_every="step"`` (warm-up schedules); ``grad_clip`` clips the global gradient norm.
    ``seed`` (default: the last ``ctx.seed_everything`` seed) fixes the shuffle order.
    ``batching`` (e.g. :class:`~attnkit.experiments.lab.batching.LengthBuckets`) turns the epoch's
    shuffled order into batches (``batching.batches(order, batch_size, generator)``); default:
    consecutive slices of ``batch_size``.
    """
    _check_args(epochs, batch_size, tag, monitor, patience, mode, scheduler_every, train_data)
    n = len(train_data)
    seed = ctx.current_seed if seed is None else seed
    device, world = ctx.device, ctx.world_size
    model.to(device)
    ckpt_path = _checkpoint_path(ctx, tag)

    st, done = _resume_state(ctx, ckpt_path, tag, epochs, model, optimizer, scheduler)
    if done is not None:
        return done
    start = st.epoch

    step = _Step(_runner(model, loss_fn, world, device, find_unused_parameters), optimizer,
                 [p for p in model.parameters() if p.requires_grad], grad_clip, scheduler if scheduler_every == "step" else None)
    n_batches = (n + batch_size - 1) // batch_size
    bar = ctx._bar(total=epochs * n_batches, initial=start * n_batches, desc=tag)
    stopped = False
    try:
        for epoch in range(start + 1, epochs + 1):
            t0 = time.perf_counter()
            batches = _epoch_batches(n, batch_size, seed, epoch, shuffle, batching)
            row = _epoch_row(ctx, epoch, model, train_data, batches, collate_fn, step, bar, eval_fn,
                             scheduler if scheduler_every == "epoch" else None)
            _record_epoch(st, row, epoch, t0)
            stopped = _track_best(st, row, model, monitor, mode, min_delta, patience)
            finished = stopped or epoch == epochs
            if finished and st.best_state is not None:
                model.load_state_dict(st.best_state)  # early stopping hands back the best weights
            bar.set_postfix_str(_progress_text(row, epoch, epochs, monitor))
            rngs = _gather_rng(world)
            if ctx.is_main:
                _save(ckpt_path, tag, epochs, st, finished, stopped, model, optimizer, scheduler, rngs)
            if stopped:
                ctx.log(f"{tag}: early stop after epoch {epoch} (best {monitor} {st.best_value:.4g} at epoch {st.best_epoch})")
                break
    finally:
        bar.close()
    if start >= epochs and st.best_state is not None:
        # resumed with no epoch left to train (epochs lowered to what the checkpoint holds): the loop
        # never reached its last epoch, so hand back the best weights here
        model.load_state_dict(st.best_state)
    ddp.barrier()
    return FitResult(st.history, st.best_epoch, len(st.history), st.spent, st.best_value, stopped, start, False)


def _checkpoint_path(ctx: "RunContext", tag: str):
    """``out/checkpoints/{tag}.pt``; the main rank first removes temporaries a killed write left
    in that folder (the previous checkpoint itself is intact: writes are atomic)."""
    ckpt_path = ctx.out / "checkpoints" / f"{tag}.pt"
    if ctx.is_main:
        remove_stale_temporaries(ckpt_path.parent)
    return ckpt_path


def _epoch_batches(n: int, batch_size: int, seed: int, epoch: int, shuffle: bool, batching):
    """Epoch ``epoch``'s batches of sample indices: the shuffle is drawn from a generator seeded
    with ``(seed, epoch)`` alone, so a resumed run draws the same order as an uninterrupted one."""
    g = torch.Generator().manual_seed(int(seed) * 1_000_003 + epoch)
    order = torch.randperm(n, generator=g) if shuffle else torch.arange(n)
    return batching.batches(order, batch_size, g) if batching is not None else order.split(batch_size)


def _record_epoch(st: "_State", row: dict, epoch: int, t0: float) -> None:
    """Add the finished epoch's row, with its time since ``t0`` (perf_counter), to the state."""
    st.spent += time.perf_counter() - t0
    row["time_s"] = round(time.perf_counter() - t0, 4)
    st.history.append(row)
    st.epoch = epoch


def _progress_text(row: dict, epoch: int, epochs: int, monitor: str | None) -> str:
    """The progress bar's postfix: epoch, training loss and the monitored metric."""
    return (f"epoch {epoch}/{epochs} loss {row['train_loss']:.4g}"
            + (f" {monitor} {row[monitor]:.4g}" if monitor and monitor in row else ""))


def _resume_state(ctx: "RunContext", ckpt_path, tag: str, epochs: int, model, optimizer, scheduler) -> tuple["_State", FitResult | None]:
    """The state to continue from: fresh, or the checkpoint's under ``--resume``; with a
    :class:`FitResult` (second item) when that checkpoint's training had already finished."""
    if not (ctx.resume and ckpt_path.exists()):
        return _State(), None
    st, ck = _restore(ckpt_path, tag, model, optimizer, scheduler, ctx.rank)
    ctx.restored_s += st.spent
    if ck["finished"]:
        ctx.log(f"{tag}: already finished ({st.epoch} epochs); not trained again")
        return st, FitResult(st.history, st.best_epoch, len(st.history), st.spent, st.best_value, ck["stopped_early"], st.epoch, True)
    ctx.log(f"{tag}: resuming after epoch {st.epoch}/{epochs}")
    return st, None


def _epoch_row(ctx: "RunContext", epoch: int, model: nn.Module, data, batches, collate_fn, step: "_Step", bar, eval_fn,
               epoch_scheduler) -> dict:
    """Train one epoch over ``batches`` and evaluate: the history row ``{epoch, train_loss, eval_fn's metrics}``
    (the loss summed over every rank); ``epoch_scheduler`` (a per-epoch scheduler, else None) is stepped."""
    model.train()
    loss_sum, count = _train_epoch(ctx, data, batches, collate_fn, step, bar)
    loss_sum, count = ddp.all_reduce_sum([loss_sum, float(count)], ctx.device)
    if epoch_scheduler is not None:
        epoch_scheduler.step()
    row = {"epoch": epoch, "train_loss": loss_sum / count}
    if eval_fn is not None:
        row.update(ddp.broadcast(_evaluate(eval_fn, model) if ctx.is_main else None))
    return row


@dataclass
class _State:
    """Where a training stands after its last finished epoch: what a checkpoint keeps."""

    history: list = field(default_factory=list)
    epoch: int = 0  # the last finished epoch
    spent: float = 0.0  # seconds of training, across resumes
    bad: int = 0  # epochs since the monitored metric last improved
    best_value: float | None = None
    best_epoch: int = 0
    best_state: dict | None = None  # the best epoch's weights (CPU copies), for early stopping


@dataclass
class _Step:
    """One optimizer step: ``runner(batch)`` gives the loss (the model's or its DDP wrapper's)."""

    runner: Callable
    optimizer: torch.optim.Optimizer
    params: list
    grad_clip: float | None
    scheduler: Any  # stepped after every optimizer step (warm-up schedules), else None


def _runner(model: nn.Module, loss_fn: Callable, world: int, device: torch.device, find_unused_parameters: bool) -> Callable:
    """``batch -> loss``: ``loss_fn(model, batch)``, inside DDP when there are several ranks."""
    if world > 1:
        return nn.parallel.DistributedDataParallel(
            _LossModule(model, loss_fn), device_ids=[device.index] if device.type == "cuda" else None,
            find_unused_parameters=find_unused_parameters)
    return lambda batch: loss_fn(model, batch)


def _train_epoch(ctx: "RunContext", data, batches, collate_fn: Callable | None, step: _Step, bar) -> tuple[float, int]:
    """One pass over ``batches`` (index tensors of global batches); each rank takes its share of a
    batch. Returns this rank's (sum of per-sample losses, samples), to be summed over ranks."""
    rank, world, device = ctx.rank, ctx.world_size, ctx.device
    collate = collate_fn or torch.utils.data.default_collate
    loss_sum, count = 0.0, 0
    for global_batch in batches:
        local = global_batch[rank::world]
        weight = world * len(local) / len(global_batch)
        if len(local) == 0:  # fewer samples than ranks: take part in the all-reduce with zero weight
            local, weight = global_batch[:1], 0.0
        batch = to_device(_take(data, local, collate, collate_fn is None), device)
        step.optimizer.zero_grad(set_to_none=True)
        loss = step.runner(batch)
        if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
            raise TypeError(f"fit: loss_fn must return a scalar tensor (the batch's mean loss), got {type(loss).__name__}"
                            f"{tuple(loss.shape) if isinstance(loss, torch.Tensor) else ''}; reduce it with .mean()")
        (loss * weight if weight != 1.0 else loss).backward()
        if step.grad_clip is not None:
            nn.utils.clip_grad_norm_(step.params, step.grad_clip)
        step.optimizer.step()
        if step.scheduler is not None:
            step.scheduler.step()
        if weight > 0:
            loss_sum += float(loss.detach()) * len(local)
            count += len(local)
        bar.update(1)
    return loss_sum, count


def _track_best(st: _State, row: dict, model: nn.Module, monitor: str | None, mode: str, min_delta: float,
                patience: int | None) -> bool:
    """Update the best epoch from ``row``; True when ``patience`` epochs passed without improvement."""
    if monitor is None:
        st.best_epoch = row["epoch"]
        return False
    if monitor not in row:
        raise ValueError(f"fit: monitor={monitor!r} is not among the epoch's metrics {sorted(row)}; "
                         "return it from eval_fn or monitor 'train_loss'")
    value = float(row[monitor])
    best = st.best_value
    if best is None or (value < best - min_delta if mode == "min" else value > best + min_delta):
        st.best_value, st.best_epoch, st.bad = value, row["epoch"], 0
        st.best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    else:
        st.bad += 1
    return patience is not None and st.bad >= patience


def _save(path, tag: str, epochs: int, st: _State, finished: bool, stopped: bool, model, optimizer, scheduler, rngs) -> None:
    save_torch(path, {
        "version": CHECKPOINT_VERSION, "tag": tag, "epoch": st.epoch, "epochs": epochs, "finished": finished,
        "stopped_early": stopped, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict() if scheduler is not None else None, "rng": rngs,
        "history": st.history, "time_s": st.spent, "bad_epochs": st.bad, "best_value": st.best_value,
        "best_epoch": st.best_epoch, "best_state": st.best_state if not finished else None,
    })


def _restore(path, tag: str, model, optimizer, scheduler, rank: int) -> tuple[_State, dict]:
    """Load a checkpoint of ``tag`` into the model, optimizer, scheduler and this rank's RNGs."""
    ck = torch.load(path, map_location="cpu", weights_only=False)
    if ck.get("version") != CHECKPOINT_VERSION or ck.get("tag") != tag:
        raise ValueError(f"fit: {path} is not a checkpoint of tag {tag!r} (version {ck.get('version')}); "
                         "delete it or run without --resume")
    model.load_state_dict(ck["model"])
    if ck.get("optimizer") is not None:  # a finished checkpoint may drop it (never used again: nothing is trained)
        optimizer.load_state_dict(ck["optimizer"])
    if scheduler is not None and ck.get("scheduler") is not None:
        scheduler.load_state_dict(ck["scheduler"])
    rngs = ck["rng"]
    set_rng_state(rngs[rank] if rank < len(rngs) else rngs[0])
    return _State(ck["history"], ck["epoch"], ck["time_s"], ck["bad_epochs"], ck["best_value"], ck["best_epoch"], ck["best_state"]), ck


def _take(data, idx: torch.Tensor, collate: Callable, default: bool):
    """The samples ``idx`` of ``data`` collated; a TensorDataset is sliced at once (what the default
    collate would stack, without a Python loop over samples)."""
    if default and isinstance(data, torch.utils.data.TensorDataset):
        return tuple(t[idx] for t in data.tensors)
    return collate([data[i] for i in idx.tolist()])


def _evaluate(eval_fn: Callable, model: nn.Module) -> dict:
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            metrics = eval_fn(model)
    finally:
        model.train(was_training)
    if not isinstance(metrics, dict):
        raise TypeError(f"fit: eval_fn must return a dict of metrics, got {type(metrics).__name__}")
    return {str(k): float(v) if isinstance(v, (int, float, torch.Tensor)) and not isinstance(v, bool) else v
            for k, v in metrics.items()}
