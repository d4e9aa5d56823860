"""Ring (context-parallel) attention: exact softmax attention over a sequence sharded across ranks.

Liu, Zaharia & Abbeel, "Ring Attention with Blockwise Transformers for Near-Infinite Context"
(2023), https://arxiv.org/abs/2310.01889; backward as in FlashAttention-2 (Dao, 2023,
https://arxiv.org/abs/2307.08691); zigzag load balancing as in zhuzilin/ring-flash-attention and
the Llama-3 context-parallel recipe.

Shape legend (per rank)
-----------------------
B batch, H query heads, Hkv key/value heads (H a multiple of Hkv: GQA), Lr local shard length
(equal on every rank), E query/key dim, Ev value dim, W ranks in the group.
q (B, H, Lr, E), k (B, Hkv, Lr, E), v (B, Hkv, Lr, Ev) -> out (B, H, Lr, Ev).

Forward
-------
Each rank keeps its queries and passes its key/value shard around the ring: at step t = 0..W-1
rank r holds the K/V of rank (r - t) mod W. While it computes with that block, the next block is
already on its way (``batch_isend_irecv`` is posted *before* the compute and waited on after), so
communication overlaps computation. Each block gives a partial output O_b and per-row log-sum-exp
lse_b (``block.py``), folded into the running result:

    M   = max(lse, lse_b)                    (0 if both are -inf: the guard)
    lse' = M + log(exp(lse - M) + exp(lse_b - M))
    O'  = exp(lse - lse') O + exp(lse_b - lse') O_b

which after W steps is ``out = sum_b exp(lse_b - lse) O_b`` with ``lse = log sum_b exp(lse_b)``:
the exact softmax over the whole row (derivation in ``block.py``).

Causal masking with zigzag layout: a shard is one or two chunks (``layout.py``); every
(query chunk, key chunk) pair is fully visible (no mask), masked (causal diagonal, or padding) or
invisible (skipped, no FLOPs). With ``layout="zigzag"`` every rank does the same work per step.

Backward
--------
A custom ``torch.autograd.Function`` whose backward runs the same ring again. The forward saves
only q, k, v, out and the per-row lse (no L x L matrix). With D = rowsum(dO ∘ O) computed once,
each step recomputes P = exp(S - lse) for the visible block and accumulates dQ locally; the block's
dK/dV contributions are added to an accumulator that travels one hop behind the K/V shard
(sent after the compute of step t, received and extended at step t+1). After the last step one
more hop delivers each accumulator to the rank that owns those keys.

Uneven lengths
--------------
Padded internally: shard with ``shard_sequence`` (pads the end to a multiple of the chunk count),
call ``ring_attention(..., seq_len=L)`` with the true length L, gather with
``gather_sequence(..., seq_len=L)``. Positions >= L are masked out: no query sees a padded key,
padded queries output exactly 0 and get zero gradient.

Failures
--------
Shapes, ``causal``, ``layout`` and ``seq_len`` are all-gathered and compared before the ring
starts, so a mismatch raises the same ``ValueError`` on every rank instead of a hang or garbage.
Every wait is bounded by ``timeout`` (seconds; None uses the process group's own timeout): if a peer
dies or hangs mid-ring, the others raise ``RingTimeoutError`` (or ``RingCommError`` when the peer's
connection closes first) instead of hanging.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from .block import accum_dtype, block_backward, block_forward, block_mask, group_queries, merge_partials
from .checks import check_agreement, check_local
from .comm import RingComm, check_timeout, resolve_group
from .layout import LAYOUTS, PairKind, pair_kind, rank_chunks


@dataclass(frozen=True)
class _RingConfig:
    group: dist.ProcessGroup
    rank: int
    world_size: int
    causal: bool
    scale: float
    layout: str
    seq_len: int
    timeout: timedelta | None


@dataclass(frozen=True)
class _Block:
    """One unit of work: local query rows ``q`` against local rows ``k`` of the current K/V shard."""

    q: slice
    k: slice
    allowed: torch.Tensor | None  # (Lq, Lk) or None when every pair is visible


def _plan(cfg: _RingConfig, src: int, local_len: int, device: torch.device) -> list[_Block]:
    """Blocks to compute when holding the K/V shard of rank ``src``; invisible pairs are dropped."""
    q_chunks = rank_chunks(cfg.layout, cfg.rank, cfg.world_size)
    k_chunks = rank_chunks(cfg.layout, src, cfg.world_size)
    chunk_len = local_len // len(q_chunks)

    def positions(chunks: list[int]) -> torch.Tensor:
        return torch.cat([torch.arange(c * chunk_len, (c + 1) * chunk_len, device=device) for c in chunks])

    blocks = []
    for qi, cq in enumerate(q_chunks):
        kinds = [pair_kind(cq, ck, chunk_len, causal=cfg.causal, seq_len=cfg.seq_len) for ck in k_chunks]
        visible = [kj for kj, kind in enumerate(kinds) if kind is not PairKind.SKIP]
        if not visible:
            continue
        # The visible key chunks are adjacent in the local shard (at most 2 of them), so one
        # matmul covers them; a position mask is built only when some pair needs one.
        lo, hi = min(visible), max(visible) + 1
        allowed = None
        if any(kinds[kj] is PairKind.MASKED for kj in visible):
            allowed = block_mask(
                positions([cq]), positions(list(k_chunks[lo:hi])), causal=cfg.causal, seq_len=cfg.seq_len
            )
        blocks.append(_Block(slice(qi * chunk_len, (qi + 1) * chunk_len), slice(lo * chunk_len, hi * chunk_len), allowed))
    return blocks


def _ring_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cfg: _RingConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns out (B, Hkv, G, Lr, Ev) and lse (B, Hkv, G, Lr) in the accumulation dtype."""
    comm = RingComm(cfg.group, cfg.timeout)
    qg = group_queries(q, k.shape[1])  # (B, Hkv, G, Lr, E)
    B, Hkv, G, Lr, _ = qg.shape
    acc = accum_dtype(q.dtype)
    out = torch.zeros(B, Hkv, G, Lr, v.shape[-1], dtype=acc, device=q.device)
    lse = torch.full((B, Hkv, G, Lr), float("-inf"), dtype=acc, device=q.device)
    kv = [k.contiguous(), v.contiguous()]
    for step in range(cfg.world_size):
        src = (cfg.rank - step) % cfg.world_size
        # Post the next hop before computing, so the transfer overlaps this step's matmuls.
        pending = comm.exchange(kv, tag=0, what=f"forward step {step}") if step < cfg.world_size - 1 else None
        k_cur, v_cur = kv
        for blk in _plan(cfg, src, Lr, q.device):
            o_b, lse_b = block_forward(
                qg[..., blk.q, :], k_cur[..., blk.k, :], v_cur[..., blk.k, :], scale=cfg.scale, allowed=blk.allowed
            )
            out[..., blk.q, :], lse[..., blk.q] = merge_partials(out[..., blk.q, :], lse[..., blk.q], o_b, lse_b)
        if pending is not None:
            kv = pending.wait()
    return out, lse


def _ring_backward(
    d_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, cfg: _RingConfig
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """d_out (B, H, Lr, Ev) -> dq (B, H, Lr, E), dk (B, Hkv, Lr, E), dv (B, Hkv, Lr, Ev)."""
    comm = RingComm(cfg.group, cfg.timeout)
    Hkv = k.shape[1]
    acc = accum_dtype(q.dtype)
    qg = group_queries(q, Hkv)  # (B, Hkv, G, Lr, E)
    dog = group_queries(d_out.contiguous(), Hkv).to(acc)  # (B, Hkv, G, Lr, Ev)
    delta = (dog * group_queries(out, Hkv).to(acc)).sum(dim=-1)  # D = rowsum(dO ∘ O), (B, Hkv, G, Lr)
    Lr = qg.shape[3]
    dq = torch.zeros(qg.shape, dtype=acc, device=q.device)
    kv = [k.contiguous(), v.contiguous()]
    pending_grad = None
    for step in range(cfg.world_size):
        src = (cfg.rank - step) % cfg.world_size
        pending_kv = comm.exchange(kv, tag=0, what=f"backward step {step} (k, v)") if step < cfg.world_size - 1 else None
        k_cur, v_cur = kv
        dk_blk = torch.zeros(k.shape, dtype=acc, device=k.device)  # this step's share for the keys of rank src
        dv_blk = torch.zeros(v.shape, dtype=acc, device=v.device)
        for blk in _plan(cfg, src, Lr, q.device):
            dq_b, dk_b, dv_b = block_backward(
                qg[..., blk.q, :],
                k_cur[..., blk.k, :],
                v_cur[..., blk.k, :],
                dog[..., blk.q, :],
                lse[..., blk.q],
                delta[..., blk.q],
                scale=cfg.scale,
                allowed=blk.allowed,
            )
            dq[..., blk.q, :] += dq_b
            dk_blk[..., blk.k, :] += dk_b
            dv_blk[..., blk.k, :] += dv_b
        if pending_grad is not None:  # what the ranks before us accumulated for the same keys
            dk_in, dv_in = pending_grad.wait()
            dk_blk += dk_in
            dv_blk += dv_in
        if cfg.world_size > 1:  # hop on; after the last step this hop reaches the keys' owner
            pending_grad = comm.exchange([dk_blk, dv_blk], tag=2, what=f"backward step {step} (dk, dv)")
        if pending_kv is not None:
            kv = pending_kv.wait()
    if pending_grad is not None:
        dk_blk, dv_blk = pending_grad.wait()
    return dq.view(q.shape).to(q.dtype), dk_blk.to(k.dtype), dv_blk.to(v.dtype)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cfg: _RingConfig) -> torch.Tensor:
        out, lse = _ring_forward(q, k, v, cfg)
        B, H, Lr, _ = q.shape
        out = out.view(B, H, Lr, v.shape[-1]).to(q.dtype)
        ctx.cfg = cfg
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out: torch.Tensor):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _ring_backward(d_out, q, k, v, out, lse, ctx.cfg)
        return dq, dk, dv, None


def ring_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    group: dist.ProcessGroup | None = None,
    causal: bool = False,
    scale: float | None = None,
    layout: str = "contiguous",
    seq_len: int | None = None,
    timeout: float | timedelta | None = None,
) -> torch.Tensor:
    """Exact softmax attention over a sequence sharded along its length across ``group``'s ranks.

    Args:
        q: (B, H, Lr, E) this rank's query shard.  k: (B, Hkv, Lr, E).  v: (B, Hkv, Lr, Ev).
            H must be a multiple of Hkv (GQA); Lr must be equal on every rank.
        group: the process group to ring over (default: the default group).
        causal: causal mask over *global* positions (query i sees keys j <= i).
        scale: score scale, default 1/sqrt(E).
        layout: how the shards were cut, ``"contiguous"`` or ``"zigzag"`` (balanced for causal);
            must match ``shard_sequence``'s.
        seq_len: the true total length L when the sequence was padded to W * Lr (positions >= L are
            masked; padded query rows output 0). None means no padding.
        timeout: seconds (or timedelta) each communication may wait before ``RingTimeoutError``;
            None uses the process group's timeout.

    Returns:
        out (B, H, Lr, Ev), this rank's output shard in the same layout; differentiable in q, k, v.
    """
    check_local(q, k, v, causal, scale, layout, seq_len)
    wait_for = check_timeout(timeout)
    group = resolve_group(group)
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    B, H, Lr, E = q.shape
    total = world_size * Lr
    if world_size > 1:
        row = [B, H, k.shape[1], Lr, E, v.shape[-1], int(causal), LAYOUTS.index(layout), -1 if seq_len is None else seq_len]
        check_agreement(row, group, wait_for, q.device)
    if seq_len is not None and seq_len > total:
        raise ValueError(f"seq_len={seq_len} exceeds the sharded length W * Lr = {world_size} * {Lr} = {total}")
    cfg = _RingConfig(
        group=group,
        rank=rank,
        world_size=world_size,
        causal=causal,
        scale=1.0 / math.sqrt(E) if scale is None else float(scale),
        layout=layout,
        seq_len=total if seq_len is None else seq_len,
        timeout=wait_for,
    )
    return _RingAttention.apply(q, k, v, cfg)
