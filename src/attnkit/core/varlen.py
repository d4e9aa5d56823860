"""Attention over packed variable-length batches (FlashAttention's ``flash_attn_varlen_func`` semantics).

Dao 2023, FlashAttention-2, https://arxiv.org/abs/2307.08691 (the varlen interface of
https://github.com/Dao-AILab/flash-attention). Instead of padding N sequences to the longest one,
a packed batch stores them back to back: q (total_q, H, E) with ``cu_seqlens_q`` = (0, L_0,
L_0 + L_1, ...), k and v (total_k, Hkv, E|Ev) with ``cu_seqlens_k``. Sequence i's queries attend
only sequence i's keys::

    out[cu_q[i] : cu_q[i+1]] = attention(q_i, k_i, v_i)      q_i (H, L_i, E), k_i, v_i (Hkv, S_i, E|Ev)

so no query attends another sequence and no score between two sequences is ever formed. Per sequence:

* masks align bottom-right (query j of sequence i sits at key position j + S_i - L_i), so
  L_i < S_i is a cached prefix: ``masks.causal()`` lets the L_i new queries see the whole prefix;
* positions restart at 0: a mask predicate or a bias (ALiBi, T5, relative) sees q_idx in 0..L_i-1
  and kv_idx in 0..S_i-1, exactly as if the sequence ran alone.

How it runs: sequences with the same (L_i, S_i) form one group (:mod:`.varlen_layout`), gathered
into (n, H, L_i, E) and sent through :func:`attnkit.attention` as one batched call, with its
dispatch, backends, sinks and capture hook. Under a causal mask (or a causal window) with L_i = S_i
and no bias or a relative one, groups of similar lengths (within max(8, 25%)) also share one call,
padded on the right to the longest: a real query never sees a key after its own position, so the
padding keys stay unseen and the padding rows are dropped; real text has many distinct lengths and
each call has a fixed cost. No call ever holds two sequences in one row, so no score between two
sequences is formed. The outputs are put back in packed order with one gather.

Masks and biases must hold no per-sequence data of a padded batch: a dense tensor mask or bias, or
a mask built for a batch size (key padding), is refused (padding does not exist here). In a custom
predicate ``b`` is the row inside a group of equal-length sequences, not the sequence number; use
``h``, ``q_idx`` and ``kv_idx``.

Shape legend: N sequences; q (total_q, H, E), k (total_k, Hkv, E), v (total_k, Hkv, Ev);
out (total_q, H, Ev); lse (total_q, H); cu_seqlens (N + 1,).
"""

from __future__ import annotations

import torch

from .biases import as_modifier
from .call import attention
from .checks import require_floating, require_ndim, require_tensor
from .masks import as_mask
from .output import AttentionOutput, Report
from .mask_kinds import CausalMask, SlidingWindowMask
from .varlen_layout import bucket_similar_lengths, check_cu_seqlens, group_by_shape, output_positions, split_by_group

_LEGEND = "(total_q, H, E) / (total_k, Hkv, E) / (total_k, Hkv, Ev)"


def varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor | None = None,
    *,
    score=None,
    mask=None,
    bias=None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    backend: str = "auto",
    sinks: torch.Tensor | None = None,
) -> AttentionOutput:
    """Attention of each packed query sequence over its own key sequence.

    q (total_q, H, E), k (total_k, Hkv, E), v (total_k, Hkv, Ev); ``cu_seqlens_q`` / ``cu_seqlens_k``
    (N + 1,) int32/int64 offsets, 0 first and total_q / total_k last (``cu_seqlens_k=None``: the same
    as ``cu_seqlens_q``, self-attention). Returns an :class:`AttentionOutput` with ``out``
    (total_q, H, Ev), ``lse`` (total_q, H) when every backend that ran returned one (else None),
    ``weights`` None (each sequence's would have its own shape) and a ``report`` that sums up the calls.

    ``score``, ``mask``, ``bias``, ``scale``, ``dropout_p``, ``backend`` are those of
    :func:`attnkit.attention`, applied per sequence (bottom-right alignment, positions from 0).
    ``sinks``: (H,) attention-sink logits, one per head (:mod:`attnkit.core.sinks`).

    A zero-length sequence is allowed: L_i = 0 gives no rows, S_i = 0 gives zeros (its queries
    see no key; ``lse`` is -inf, or the sink logit with sinks).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        require_tensor(name, t)
        require_ndim(name, t, 3, _LEGEND, "packed tensors have no batch axis: concatenate the sequences along dim 0")
        require_floating(name, t)
    if k.shape[0] != v.shape[0]:
        raise ValueError(f"k and v must have the same number of packed rows total_k, got k {tuple(k.shape)} and v {tuple(v.shape)}")
    cu_q = check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, q.shape[0], "total_q (q.shape[0])")
    if cu_seqlens_k is None:
        if k.shape[0] != q.shape[0]:
            raise ValueError(
                f"without cu_seqlens_k, k must have as many rows as q (self-attention), got total_q={q.shape[0]} and "
                f"total_k={k.shape[0]}; pass cu_seqlens_k for keys of other lengths"
            )
        cu_k = cu_q
    else:
        cu_k = check_cu_seqlens("cu_seqlens_k", cu_seqlens_k, k.shape[0], "total_k (k.shape[0])")
    if len(cu_k) != len(cu_q):
        raise ValueError(
            f"cu_seqlens_q and cu_seqlens_k must describe the same number of sequences, got N={len(cu_q) - 1} and "
            f"N={len(cu_k) - 1}; every query sequence needs its key sequence (zero-length ones included)"
        )
    H = q.shape[1]
    _check_per_sequence(mask, bias)
    if sinks is not None and (not isinstance(sinks, torch.Tensor) or tuple(sinks.shape) != (H,)):
        got = tuple(sinks.shape) if isinstance(sinks, torch.Tensor) else type(sinks).__name__
        raise ValueError(f"sinks of a packed batch must be one logit per head, shape (H,)=({H},), got {got}; pass e.g. torch.zeros({H})")

    groups = group_by_shape(cu_q, cu_k)
    if _padding_is_invisible(mask, bias) and all(g.L == g.S for g in groups):
        groups = bucket_similar_lengths(groups)
    run = [g for g in groups if g.S > 0]  # queries with no key give zeros, filled in by _assemble
    qs = split_by_group(q, run, "q")
    ks, vs = split_by_group(k, run, "k"), split_by_group(v, run, "k")
    results = {}
    for g, qg, kg, vg in zip(run, qs, ks, vs):
        results[g] = attention(
            qg, kg, vg, score=score, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p, backend=backend, sinks=sinks,
        )
    parts = [(g, results.get(g)) for g in groups]
    return _assemble(q, k, v, parts, sinks, len(cu_q) - 1)


def _padding_is_invisible(mask, bias) -> bool:
    """Can sequences of similar lengths share a call, padded on the right? When no real query sees a
    key after its own position (causal, a causal window: padding keys stay unseen) and the bias depends
    on key − query only (so on no length): then the real rows equal the sequence's own run."""
    m = as_mask(mask)
    causal = isinstance(m, CausalMask) or (isinstance(m, SlidingWindowMask) and m.right == 0)
    bm = as_modifier(bias)
    return causal and (bm is None or (bm.relative and bm.additive and not (bm.dims - {"h"})))


def _check_per_sequence(mask, bias) -> None:
    """Refuse masks and biases that describe a padded batch: on a packed axis they have no meaning."""
    if isinstance(mask, torch.Tensor):
        raise TypeError(
            "mask of a packed batch must be a mask object applied per sequence (attnkit.masks.causal(), sliding_window(), "
            f"custom(fn)), got a {tuple(mask.shape)} tensor; padding does not exist in a packed batch, and the sequences' "
            "boundaries come from cu_seqlens"
        )
    m = as_mask(mask)
    if m is not None and m.batch_size is not None:
        raise ValueError(
            f"mask {m!r} holds data for a batch of {m.batch_size} padded rows; a packed batch has no batch axis. "
            "Drop the padding mask (cu_seqlens already marks where each sequence ends) and pass a per-sequence mask"
        )
    bm = as_modifier(bias)
    if bm is not None and any(getattr(leaf, "t", None) is not None for leaf in bm.leaves()):
        raise TypeError(
            "bias of a packed batch must be a position bias evaluated per sequence (ALiBi, T5, relative, custom_bias), "
            "got a dense tensor bias, which is sized for one (L, S); sequences here have their own lengths"
        )


def _assemble(q, k, v, parts, sinks, n_seq: int) -> AttentionOutput:
    """The groups' outputs (n, H, L, Ev) put back in packed row order: out (total_q, H, Ev), lse (total_q, H)."""
    total_q, H, _ = q.shape
    Ev = v.shape[-1]
    lse_dtype = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    outs, lses = [], []
    anchor = None
    for g, res in parts:
        if res is None:
            if anchor is None:  # zeros that still hang off q, k, v in autograd, as attention's empty outputs do
                anchor = (q.sum() + k.sum() + v.sum()) * 0
            outs.append(q.new_zeros((g.n * g.L, H, Ev)) + anchor)
            empty = torch.full((g.n * g.L, H), float("-inf"), dtype=lse_dtype, device=q.device)
            lses.append(empty if sinks is None else empty.logaddexp(sinks.to(lse_dtype)[None]))
            continue
        outs.append(res.out.transpose(1, 2).reshape(g.n * g.L, H, Ev))  # (n, H, L, Ev) → (n L, H, Ev)
        lses.append(res.lse.transpose(1, 2).reshape(g.n * g.L, H) if res.lse is not None else None)
    if not outs:  # every sequence has L_i = 0 (total_q = 0)
        anchor = (q.sum() + k.sum() + v.sum()) * 0
        out = q.new_zeros((0, H, Ev)) + anchor
        lse = q.new_zeros((0, H), dtype=lse_dtype)
        return AttentionOutput(out, None, lse, Report(backend="none", reason=f"varlen: {n_seq} sequences, no query rows", fully_masked_rows=0))
    out = torch.cat(outs) if len(outs) > 1 else outs[0]
    have_lse = all(x is not None for x in lses)
    lse = (torch.cat(lses) if len(lses) > 1 else lses[0]) if have_lse else None
    where = output_positions([g for g, _ in parts], total_q)
    if out.shape[0] != total_q or not torch.equal(where, torch.arange(total_q)):
        where = where.to(q.device)  # padding rows of bucketed calls are left out here
        out = out.index_select(0, where)
        lse = lse.index_select(0, where) if lse is not None else None
    return AttentionOutput(out, None, lse, _report(parts, n_seq))


def _report(parts, n_seq: int) -> Report:
    """One report for the whole packed call: the backends that ran, the group count, the sums."""
    ran = [res for _, res in parts if res is not None]
    backends = sorted({r.report.backend for r in ran}) or ["none"]
    counts = [r.report.fully_masked_rows for r in ran]
    empty_rows = sum(g.n * g.L for g, res in parts if res is None)
    fully = None if any(c is None or isinstance(c, torch.Tensor) for c in counts) else sum(counts) + empty_rows
    padded = sum(g.n * g.L - sum(g.q_lens) for g, _ in parts)
    reason = (
        f"varlen: {n_seq} sequences in {len(parts)} groups, one batched call per group "
        f"(L up to {max(g.L for g, _ in parts)}; {padded} padding rows in causal buckets)"
    )
    if ran:
        reason += f"; first group: {ran[0].report.reason}"
    return Report(
        backend="+".join(backends), reason=reason, materialized=[m for r in ran for m in r.report.materialized],
        fully_masked_rows=fully, exact=all(r.report.exact for r in ran),
    )
