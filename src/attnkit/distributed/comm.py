"""Ring communication with a per-operation timeout, on plain ``torch.distributed``.

Ring attention (Liu et al., 2023, https://arxiv.org/abs/2310.01889) passes key/value shards one hop
around a ring of ranks per step: rank r sends to r+1 and receives from r-1 (mod W). This module is
only that hop plus a timed ``all_gather``; no tensor math.

Why ``batch_isend_irecv``: the send to the next rank and the receive from the previous one are one
batch, so on NCCL they are launched as one group (separate ``isend``/``irecv`` calls can deadlock
there when next == prev), and on gloo they become ordinary asynchronous sends/receives. The same
code runs on both; the tensors' device decides where the bytes move.

Why a per-operation timeout: without one, a rank whose neighbour died waits for the process
group's timeout (30 minutes by default) or forever. ``Work.wait(timeout)`` bounds every wait; on
gloo it raises after ``timeout`` ("Timed out waiting ... for recv operation"), or at once when the
peer's socket closes; posting a send to a peer that has already died raises at once too
(:func:`post`). Either way :class:`RingTimeoutError` / :class:`RingCommError` is raised, and
the process group must then be considered broken: exit and let the launcher (torchrun) restart.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from datetime import timedelta

import torch
import torch.distributed as dist


class RingCommError(RuntimeError):
    """A ring send/receive or collective failed (a peer rank died or its connection closed)."""


class RingTimeoutError(RingCommError, TimeoutError):
    """A ring send/receive or collective did not complete within the configured timeout."""


def resolve_group(group: dist.ProcessGroup | None) -> dist.ProcessGroup:
    """Return ``group`` or the default group, with a clear error when there is none."""
    if not dist.is_available():
        raise RuntimeError("torch.distributed is not available in this PyTorch build; install a build with it")
    if not dist.is_initialized():
        raise RuntimeError(
            "torch.distributed is not initialized; launch with torchrun and call "
            "dist.init_process_group('gloo') on CPU or dist.init_process_group('nccl') on GPU first"
        )
    group = dist.group.WORLD if group is None else group
    if dist.get_rank(group) < 0:
        raise ValueError(
            f"this process (global rank {dist.get_rank()}) is not a member of the given group; "
            "call it only on the group's ranks (see dist.new_group), or pass group=None for all ranks"
        )
    return group


def check_timeout(timeout: object) -> timedelta | None:
    """``None`` (use the process group's own timeout), seconds as a number, or a ``timedelta``."""
    if timeout is None:
        return None
    if isinstance(timeout, timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise TypeError(f"timeout must be None, seconds (float) or a datetime.timedelta, got {type(timeout).__name__}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {seconds}; use None for the group's default")
    return timedelta(seconds=seconds)


def wait_all(works: Sequence[dist.Work], *, timeout: timedelta | None, what: str) -> None:
    """Wait for every ``Work``, turning a backend failure into :class:`RingCommError`.

    ``timeout`` None waits with the process group's own timeout (``Work.wait()`` default).
    """
    start = time.monotonic()
    for work in works:
        try:
            if timeout is None:
                work.wait()
            else:
                work.wait(timeout)
        except RuntimeError as e:  # gloo/NCCL raise RuntimeError (DistBackendError subclasses it)
            elapsed = time.monotonic() - start
            limit = "the process group's timeout" if timeout is None else f"{timeout.total_seconds():g} s"
            timed_out = "timed out" in str(e).lower() or (timeout is not None and elapsed >= 0.9 * timeout.total_seconds())
            kind = RingTimeoutError if timed_out else RingCommError
            verb = f"did not complete within {limit}" if timed_out else f"failed after {elapsed:.1f} s"
            raise kind(
                f"{what} {verb}: {e}. A peer rank has probably died or hung; this process group cannot be "
                "used any more, so exit and let the launcher restart the job"
            ) from e


def post(start, *, what: str):
    """``start()``, which posts sends, receives or a collective, with a backend failure turned into
    :class:`RingCommError`: when a peer has already died, gloo raises while posting the send to its
    closed socket, before there is anything to wait on (seen in a fault test: "Connection closed by
    peer" from ``batch_isend_irecv``)."""
    try:
        return start()
    except RuntimeError as e:  # gloo/NCCL raise RuntimeError (DistBackendError subclasses it)
        raise RingCommError(
            f"{what} failed to start: {e}. A peer rank has probably died or hung; this process group "
            "cannot be used any more, so exit and let the launcher restart the job"
        ) from e


class PendingExchange:
    """Receives in flight from one ring hop; :meth:`wait` returns the received tensors."""

    def __init__(
        self, works: list[dist.Work], sent: list[torch.Tensor], received: list[torch.Tensor], timeout: timedelta | None, what: str
    ):
        self._works, self._received, self._timeout, self._what = works, received, timeout, what
        self._sent = sent  # keep the send buffers alive until the sends are done

    def wait(self) -> list[torch.Tensor]:
        wait_all(self._works, timeout=self._timeout, what=self._what)
        self._sent = []
        return self._received


class RingComm:
    """One-hop ring exchange inside ``group``: send to rank+1, receive from rank-1 (group ranks)."""

    def __init__(self, group: dist.ProcessGroup, timeout: timedelta | None):
        self.group = group
        self.timeout = timeout
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.next = (self.rank + 1) % self.world_size
        self.prev = (self.rank - 1) % self.world_size

    def exchange(self, tensors: Sequence[torch.Tensor], *, tag: int, what: str) -> PendingExchange:
        """Start sending ``tensors`` to the next rank and receiving same-shaped ones from the previous.

        ``tag`` separates channels in flight at the same time (gloo matches by tag; NCCL by order).
        The sent tensors must not be modified until the returned exchange has been waited on.
        """
        sent = [t.contiguous() for t in tensors]
        received = [torch.empty_like(t) for t in sent]
        ops = []
        for i, (t, r) in enumerate(zip(sent, received, strict=True)):
            ops.append(dist.P2POp(dist.isend, t, group=self.group, group_peer=self.next, tag=tag + i))
            ops.append(dist.P2POp(dist.irecv, r, group=self.group, group_peer=self.prev, tag=tag + i))
        label = f"ring_attention {what} (rank {self.rank} of {self.world_size}: send to {self.next}, receive from {self.prev})"
        works = post(lambda: dist.batch_isend_irecv(ops), what=label)
        return PendingExchange(works, sent, received, self.timeout, label)


def all_gather_rows(row: torch.Tensor, group: dist.ProcessGroup, timeout: timedelta | None, what: str) -> torch.Tensor:
    """All-gather a 1-D tensor from every rank into (W, n), with the timeout applied."""
    return torch.stack(all_gather_tensor(row, group, timeout, what))


def all_gather_tensor(t: torch.Tensor, group: dist.ProcessGroup, timeout: timedelta | None, what: str) -> list[torch.Tensor]:
    """All-gather one same-shaped tensor from every rank (a list indexed by rank), with the timeout applied."""
    world_size = dist.get_world_size(group)
    parts = [torch.empty_like(t, memory_format=torch.contiguous_format) for _ in range(world_size)]
    label = f"{what} (all_gather, rank {dist.get_rank(group)} of {world_size})"
    work = post(lambda: dist.all_gather(parts, t.contiguous(), group=group, async_op=True), what=label)
    wait_all([work], timeout=timeout, what=label)
    return parts
