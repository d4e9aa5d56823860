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

Masks and biases: a shard is one or two chunks (``layout.py``); every (query chunk, key chunk)
pair is one tile of the global (L, L) grid, and the mask's own ``tile_states`` says whether it is
fully visible (no mask), partly masked (the mask is evaluated at global positions) or invisible
(skipped on every rank: no FLOPs). Causal, sliding-window, chunked, document and prefix-LM masks,
dense (L, L) masks, predicates, and additive position biases (ALiBi, T5, Shaw) are served this way
(``ring_masks.py``). With a causal mask and ``layout="zigzag"`` every rank does the same work per step.

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

import warnings
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from ..core import masks as M
from ..core.biases import ScoreModifier
from ..core.output import AttentionOutput, Report
from ..core.scores import as_score
from .block import LSE_DTYPE, accum_dtype, block_backward, block_forward, group_queries, merge_partials
from .checks import check_agreement, check_local
from .comm import RingComm, check_timeout, resolve_group
from .layout import LAYOUTS, chunks_per_rank, rank_chunks
from .ring_exact import gathered_reference, local_nonfinite
from .ring_masks import FULL_PAIR, SKIP_PAIR, block_allowed, block_bias, chunk_codes, resolve_bias, resolve_mask


@dataclass(frozen=True)
class _RingConfig:
    group: dist.ProcessGroup
    rank: int
    world_size: int
    scale: float
    layout: str
    seq_len: int
    timeout: timedelta | None
    dtype: torch.dtype = torch.float32
    mask: M.Mask | None = None
    bias: ScoreModifier | None = None
    codes: tuple = ()  # codes[cq][ck]: SKIP / FULL / MASKED pair of global chunks (ring_masks.chunk_codes)
    B: int = 1
    H: int = 1
    Hkv: int = 1


@dataclass(frozen=True)
class _Block:
    """One unit of work: local query rows ``q`` against local rows ``k`` of the current K/V shard."""

    q: slice
    k: slice
    allowed: torch.Tensor | None  # (B|1, Hkv|1, G|1, Lq, Lk) or None when every pair is visible
    bias: torch.Tensor | None = None  # additive, same layout, or None


def _chunk_positions(chunks, chunk_len: int, device: torch.device) -> torch.Tensor:
    """Global positions of the rows of these chunks, in order (a rank's shard: its rank_chunks)."""
    return torch.cat([torch.arange(c * chunk_len, (c + 1) * chunk_len, device=device) for c in chunks])


def _plan(cfg: _RingConfig, src: int, local_len: int, device: torch.device) -> list[_Block]:
    """Blocks to compute when holding the K/V shard of rank ``src``; invisible pairs are dropped."""
    q_chunks = rank_chunks(cfg.layout, cfg.rank, cfg.world_size)
    k_chunks = rank_chunks(cfg.layout, src, cfg.world_size)
    chunk_len = local_len // len(q_chunks)

    def positions(chunks: list[int]) -> torch.Tensor:
        return _chunk_positions(chunks, chunk_len, device)

    blocks = []
    for qi, cq in enumerate(q_chunks):
        kinds = [cfg.codes[cq][ck] for ck in k_chunks]
        visible = [kj for kj, kind in enumerate(kinds) if kind != SKIP_PAIR]
        if not visible:
            continue
        # The visible key chunks are adjacent in the local shard (at most 2 of them), so one
        # matmul covers them; the mask is evaluated only when some pair is not fully visible.
        lo, hi = min(visible), max(visible) + 1
        q_pos, k_pos = positions([cq]), positions(list(k_chunks[lo:hi]))
        allowed = None
        if any(kinds[kj] != FULL_PAIR for kj in range(lo, hi)):
            allowed = block_allowed(cfg.mask, q_pos, k_pos, cfg.seq_len, cfg.B, cfg.H, cfg.Hkv)
        bias = block_bias(cfg.bias, q_pos, k_pos, cfg.seq_len, cfg.B, cfg.H, cfg.Hkv, accum_dtype(cfg.dtype))
        blocks.append(_Block(slice(qi * chunk_len, (qi + 1) * chunk_len), slice(lo * chunk_len, hi * chunk_len), allowed, bias))
    return blocks


def _ring_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cfg: _RingConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns out (B, Hkv, G, Lr, Ev) in the accumulation dtype and lse (B, Hkv, G, Lr) in float64
    (:data:`.block.LSE_DTYPE`)."""
    comm = RingComm(cfg.group, cfg.timeout)
    qg = group_queries(q, k.shape[1])  # (B, Hkv, G, Lr, E)
    B, Hkv, G, Lr, _ = qg.shape
    acc = accum_dtype(q.dtype)
    out = torch.zeros(B, Hkv, G, Lr, v.shape[-1], dtype=acc, device=q.device)
    lse = torch.full((B, Hkv, G, Lr), float("-inf"), dtype=LSE_DTYPE, device=q.device)
    kv = [k.contiguous(), v.contiguous()]
    for step in range(cfg.world_size):
        src = (cfg.rank - step) % cfg.world_size
        # Post the next hop before computing, so the transfer overlaps this step's matmuls.
        pending = comm.exchange(kv, tag=0, what=f"forward step {step}") if step < cfg.world_size - 1 else None
        k_cur, v_cur = kv
        for blk in _plan(cfg, src, Lr, q.device):
            o_b, lse_b = block_forward(
                qg[..., blk.q, :], k_cur[..., blk.k, :], v_cur[..., blk.k, :], scale=cfg.scale, allowed=blk.allowed,
                bias=blk.bias,
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
                bias=blk.bias,
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


def _dot_operands(q: torch.Tensor, k: torch.Tensor, score, dropout_p, return_weights):
    """The score and its dot-product form (q', k'), after refusing what the ring cannot do
    (weights, dropout, a score with no dot form)."""
    if not isinstance(return_weights, bool) or return_weights:
        raise ValueError(f"ring attention never forms the (L, L) weights, so return_weights must be False, got {return_weights!r}")
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) or dropout_p != 0:
        raise ValueError(f"ring attention has no attention weights to drop out, so dropout_p must be 0, got {dropout_p!r}")
    sc = as_score(score)
    qk = sc.as_dot(q, k)
    if qk is None:
        raise ValueError(f"ring attention needs a score with a dot-product form, got {sc.name!r}; use scaled_dot, dot, cosine or general")
    return sc, qk


def _zero_padding(tensors, layout: str, rank: int, world_size: int, chunk_len: int, L: int) -> tuple:
    """Each (B, ·, Lr, ·) tensor with this rank's rows at global positions >= L zeroed.

    Those positions are padding: masked, but a caller's buffer may hold anything there (NaN, inf),
    and 0 * NaN in p @ v is NaN, so they are zeroed before any product (gradients there are then 0)."""
    t0 = tensors[0]
    pad = _chunk_positions(rank_chunks(layout, rank, world_size), chunk_len, t0.device) >= L  # (Lr,)
    return tuple(t.masked_fill(pad.view(-1, 1), 0.0) for t in tensors)


def _agree_across_ranks(exact: bool, q, k, v, the_mask, layout: str, seq_len: int | None, group, wait_for) -> bool:
    """Whether NaN or inf is in the inputs of any rank (``exact`` is this rank's answer). Every rank
    also compares its shapes, causality, layout and seq_len with the others' here, so a mismatch
    raises the same ValueError on every rank (``check_agreement``) instead of a hang."""
    if dist.get_world_size(group) <= 1:
        return exact
    B, H, Lr, E = q.shape
    is_causal = isinstance(the_mask, M.CausalMask)
    row = [B, H, k.shape[1], Lr, E, v.shape[-1], int(is_causal), LAYOUTS.index(layout), -1 if seq_len is None else seq_len]
    return bool(check_agreement(row + [int(exact)], group, wait_for, q.device)[:, -1].any())


def _check_global_extent(seq_len: int | None, world_size: int, Lr: int, the_mask, the_bias, B: int) -> None:
    """Checks that need the whole sequence: seq_len fits the W * Lr sharded rows, and the mask and
    bias (dense tensors, per-sequence ids) cover all L global positions and the batch."""
    total = world_size * Lr
    if seq_len is not None and seq_len > total:
        raise ValueError(f"seq_len={seq_len} exceeds the sharded length W * Lr = {world_size} * {Lr} = {total}")
    L = total if seq_len is None else seq_len
    for name, obj, build in (("mask", the_mask, lambda m: m.predicate(L, L)), ("bias", the_bias, lambda b: b.bias_fn(L, L))):
        if obj is not None:
            try:
                build(obj)  # dense tensors and per-sequence ids must cover the whole sequence
            except ValueError as e:
                raise ValueError(f"ring_attention's {name} is over global positions of all L={L} tokens: {e}") from None
    if the_mask is not None and the_mask.batch_size not in (None, B):
        raise ValueError(f"mask was built for batch size {the_mask.batch_size} but q has B={B}; build it for this batch")


def ring_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask=None,
    bias=None,
    score=None,
    dropout_p: float = 0.0,
    return_weights: bool = False,
    scale: float | None = None,
    group: dist.ProcessGroup | None = None,
    layout: str = "contiguous",
    seq_len: int | None = None,
    timeout: float | timedelta | None = None,
    causal: bool | None = None,
) -> AttentionOutput:
    """Exact softmax attention over a sequence sharded along its length across ``group``'s ranks,
    with :func:`attnkit.attention`'s vocabulary.

    Args:
        q: (B, H, Lr, E) this rank's query shard.  k: (B, Hkv, Lr, E).  v: (B, Hkv, Lr, Ev).
            H must be a multiple of Hkv (GQA); Lr must be equal on every rank.
        mask: over *global* positions of the whole (unpadded) sequence of L tokens, as for
            ``attention`` on the gathered sequence: ``masks.causal()``, ``sliding_window``,
            ``chunked``, ``document(ids of all L tokens)``, ``prefix_lm``, a bool (L, L) tensor or a
            predicate. Pairs of chunks the mask empties are skipped on every rank.
        bias: an additive bias over global positions (ALiBi, T5, Shaw, ``custom_bias``, an (L, L)
            tensor); its parameters get no gradient here (freeze them).
        score: a score with a dot-product form (default scaled dot); applied per token before the ring.
        dropout_p, return_weights: must be 0 / False (the ring never forms the weights).
        scale: score scale, default the score's (1/sqrt(E) for scaled dot).
        group: the process group to ring over (default: the default group).
        layout: how the shards were cut, ``"contiguous"`` or ``"zigzag"`` (balanced for causal);
            must match ``shard_sequence``'s.
        seq_len: the true total length L when the sequence was padded to W * Lr (positions >= L are
            masked; padded query rows output 0). None means no padding.
        timeout: seconds (or timedelta) each communication may wait before ``RingTimeoutError``;
            None uses the process group's timeout.
        causal: deprecated spelling of ``mask=masks.causal()``.

    Returns:
        :class:`~attnkit.core.output.AttentionOutput` whose ``out`` (B, H, Lr, Ev) is this rank's
        output shard in the same layout, differentiable in q, k, v; no weights or lse.
    """
    if causal is not None:
        warnings.warn("ring_attention(causal=...) is deprecated; pass mask=attnkit.masks.causal()", DeprecationWarning, stacklevel=2)
    check_local(q, k, v, False if causal is None else causal, scale, layout, seq_len)
    sc, (qd, kd) = _dot_operands(q, k, score, dropout_p, return_weights)
    the_mask = resolve_mask(mask, bool(causal))
    the_bias = resolve_bias(bias)
    wait_for = check_timeout(timeout)
    group = resolve_group(group)
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    B, H, Lr, E = q.shape
    total = world_size * Lr
    L = total if seq_len is None else seq_len
    chunk_len = Lr // chunks_per_rank(layout)
    if L < total:
        qd, kd, v = _zero_padding((qd, kd, v), layout, rank, world_size, chunk_len, L)
    exact = local_nonfinite(qd, kd, v, the_bias)  # NaN/inf anywhere: the gathered reference (ring_exact)
    exact = _agree_across_ranks(exact, q, k, v, the_mask, layout, seq_len, group, wait_for)
    _check_global_extent(seq_len, world_size, Lr, the_mask, the_bias, B)
    cfg = _RingConfig(
        group=group,
        rank=rank,
        world_size=world_size,
        scale=sc.default_scale(E) if scale is None else float(scale),
        layout=layout,
        seq_len=L,
        timeout=wait_for,
        dtype=q.dtype,
        mask=the_mask,
        bias=the_bias,
        codes=tuple(map(tuple, chunk_codes(the_mask, layout, world_size, chunk_len, L))),
        B=B,
        H=H,
        Hkv=k.shape[1],
    )
    return _compute(qd, kd, v, cfg, chunk_len, exact)


def _compute(
    qd: torch.Tensor, kd: torch.Tensor, v: torch.Tensor, cfg: _RingConfig, chunk_len: int, exact: bool
) -> AttentionOutput:
    """The ring over q' (B, H, Lr, E), k' (B, Hkv, Lr, E), v (B, Hkv, Lr, Ev); or, when ``exact``
    (NaN or inf in some rank's inputs), the reference on the sequence gathered from every rank."""
    if exact:
        out = gathered_reference(qd, kd, v, cfg, chunk_len)
        report = Report(
            "ring", f"NaN or inf in the inputs of some rank: the reference on the sequence gathered from {cfg.world_size} ranks"
        )
        return AttentionOutput(out, None, None, report)
    out = _RingAttention.apply(qd, kd, v, cfg)
    report = Report("ring", f"ring attention over {cfg.world_size} ranks, layout {cfg.layout!r}")
    return AttentionOutput(out, None, None, report)
