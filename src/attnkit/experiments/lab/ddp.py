"""DistributedDataParallel set-up for experiments started under ``torchrun``.

``torchrun --nproc-per-node N`` sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and the rendezvous
address; :func:`init_from_env` reads them and joins the process group with gloo on CPU or nccl on
GPU (each process on GPU ``LOCAL_RANK``). Without those variables a run is one process and nothing
here touches ``torch.distributed``.

How :func:`attnkit.experiments.lab.fit` splits the work (so N processes train like one): every rank draws
the same shuffled order, cuts it into the same global batches of ``batch_size``, and takes every
N-th sample of each (``batch[rank::N]``); DDP averages the gradients, and each rank's loss is scaled
by ``N · (its samples) / (global batch)`` so the average is the global batch's mean gradient even
when the last batch does not split evenly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .registry import SetupError


@dataclass(frozen=True)
class World:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    started_group: bool = False  # whether we must destroy the group at the end

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def env_world() -> World:
    """Rank and world size from torchrun's environment (1 process when it is absent)."""
    try:
        ws = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", str(rank)))
    except ValueError as e:
        raise ValueError(f"WORLD_SIZE/RANK/LOCAL_RANK must be integers (torchrun sets them), got {e}") from e
    return World(rank, ws, local)


def init_from_env(device: torch.device) -> tuple[World, torch.device]:
    """Join the process group when started by torchrun; returns the world and this rank's device."""
    w = env_world()
    if w.world_size <= 1:
        return w, device
    if device.type == "cuda":
        if w.local_rank >= torch.cuda.device_count():
            raise SetupError(f"torchrun started a process with LOCAL_RANK={w.local_rank} but this machine has "
                             f"{torch.cuda.device_count()} GPU(s); start at most that many processes per node or use --device cpu")
        device = torch.device("cuda", w.local_rank)
        torch.cuda.set_device(device)
    started = False
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
        started = True
    return World(dist.get_rank(), dist.get_world_size(), w.local_rank, started), device


def shutdown(world: World) -> None:
    if world.started_group and dist.is_initialized():
        dist.destroy_process_group()


def active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    """Sum a few floats over ranks (float64, so the sum does not depend on the rank count by much)."""
    if not active():
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def broadcast(obj, src: int = 0):
    """Rank ``src``'s Python object on every rank."""
    if not active():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def barrier() -> None:
    if active():
        dist.barrier()
