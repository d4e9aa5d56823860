"""The layout of a packed variable-length batch: ``cu_seqlens`` checked, and sequences grouped by shape.

A packed batch stores N sequences back to back on one token axis, FlashAttention's varlen format:
sequence i holds query rows ``cu_seqlens_q[i] : cu_seqlens_q[i + 1]`` (L_i of them) and key rows
``cu_seqlens_k[i] : cu_seqlens_k[i + 1]`` (S_i). ``cu_seqlens`` is the cumulative sum of the
lengths with a leading 0, so it is 1-D, N + 1 long, starts at 0, never decreases and ends at the
total number of rows. Zero-length sequences are allowed (two equal neighbours), as in FlashAttention:
a sequence with L_i = 0 produces no rows, one with S_i = 0 has queries that see no key (zeros).

:func:`group_by_shape` puts sequences with the same (L_i, S_i) together, so each group runs as one
batched attention call of shape (n, H, L_i, E) and no tile ever mixes two sequences;
:func:`bucket_similar_lengths` merges groups of close lengths into one right-padded call where the
mask keeps padding unseen (causal).

Shape legend: N sequences, total_q / total_k packed query / key rows, L_i / S_i one sequence's lengths.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def check_cu_seqlens(name: str, cu: object, total: int, total_name: str) -> list[int]:
    """Validate ``cu`` (1-D int32/int64, 0 first, non-decreasing, ``total`` last); its values as a list."""
    if not isinstance(cu, torch.Tensor):
        raise TypeError(
            f"{name} must be a 1-D int32/int64 torch.Tensor of N + 1 offsets, got {type(cu).__name__}; "
            f"build it with torch.tensor([0, *lengths]).cumsum(0)"
        )
    if cu.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name} must have dtype int32 or int64, got {cu.dtype}; convert it with {name}.long()")
    if cu.dim() != 1 or cu.shape[0] < 2:
        raise ValueError(
            f"{name} must be 1-D with N + 1 >= 2 entries (0, then the end of each of N sequences), got shape "
            f"{tuple(cu.shape)}; for one sequence of length n pass torch.tensor([0, n])"
        )
    vals = cu.tolist()  # one device sync; the group plan below needs the lengths on the host anyway
    if vals[0] != 0:
        raise ValueError(f"{name} must start at 0 (the first sequence's first row), got {name}[0]={vals[0]}; prepend a 0")
    for i in range(1, len(vals)):
        if vals[i] < vals[i - 1]:
            raise ValueError(
                f"{name} must be non-decreasing (it is a cumulative sum of lengths), got {name}[{i - 1}]={vals[i - 1]} > "
                f"{name}[{i}]={vals[i]}; pass torch.tensor([0, *lengths]).cumsum(0) with lengths >= 0"
            )
    if vals[-1] != total:
        raise ValueError(
            f"{name} must end at {total_name}={total} (the packed rows), got {name}[-1]={vals[-1]}; "
            "the lengths must add up to the packed tensor's first dimension"
        )
    return vals


@dataclass(frozen=True)
class Group:
    """Sequences run as one (n, H, L, E) call: query lengths ``q_lens`` (all ``L``, or up to ``L`` in a
    padded bucket), key lengths ``k_lens`` (all ``S``, or up to ``S``)."""

    L: int
    S: int
    q_starts: tuple[int, ...]  # first packed query row of each sequence in the group
    k_starts: tuple[int, ...]  # first packed key row of each sequence in the group
    q_lens: tuple[int, ...]
    k_lens: tuple[int, ...]

    @property
    def n(self) -> int:
        return len(self.q_starts)


def group_by_shape(cu_q: list[int], cu_k: list[int]) -> list[Group]:
    """Sequences grouped by (L_i, S_i), in order of first appearance; sequences with L_i = 0 are left out
    (they produce no rows)."""
    starts: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
    for i in range(len(cu_q) - 1):
        L, S = cu_q[i + 1] - cu_q[i], cu_k[i + 1] - cu_k[i]
        if L == 0:
            continue
        qs, ks = starts.setdefault((L, S), ([], []))
        qs.append(cu_q[i])
        ks.append(cu_k[i])
    return [Group(L, S, tuple(qs), tuple(ks), (L,) * len(qs), (S,) * len(qs)) for (L, S), (qs, ks) in starts.items()]


def bucket_similar_lengths(groups: list[Group], slack: float = 0.25, min_pad: int = 8) -> list[Group]:
    """Merge groups of self-attention shape (L_i = S_i) whose lengths differ by at most
    max(``min_pad``, ``slack`` * shortest) into one call padded on the right to the longest.

    Only for masks under which a real query never sees a key after its own position (causal, a causal
    window): the padding keys then sit after every real query of their sequence and are never
    attended, and the padding queries' rows are dropped. Fewer, larger calls: real text has many
    distinct lengths, and each call has a fixed cost."""
    out: list[Group] = []
    for g in sorted(groups, key=lambda g: g.L):
        last = out[-1] if out else None
        if last is not None and g.L - min(last.q_lens) <= max(min_pad, slack * min(last.q_lens)):
            out[-1] = Group(
                g.L, g.L, last.q_starts + g.q_starts, last.k_starts + g.k_starts, last.q_lens + g.q_lens, last.k_lens + g.k_lens,
            )
        else:
            out.append(g)
    return out


def rows(starts: tuple[int, ...], lens: tuple[int, ...], padded: int, device: torch.device) -> torch.Tensor:
    """(n * padded,) long: the packed rows of n sequences (``starts``, ``lens``) laid out ``padded`` rows
    each; a padding slot repeats its sequence's last row (never attended, its output dropped)."""
    base = torch.tensor(starts, dtype=torch.long, device=device)[:, None]
    last = torch.tensor(lens, dtype=torch.long, device=device)[:, None] - 1
    return (base + torch.minimum(torch.arange(padded, device=device)[None, :], last)).reshape(-1)


def split_by_group(x: torch.Tensor, groups: list[Group], side: str) -> list[torch.Tensor]:
    """Packed (total, H, E) → one (n, H, length, E) tensor per group (``side`` "q": length L, "k": S).

    The rows are put in group order with one index_select (skipped when they already are), then split:
    a per-group gather from the full tensor would make autograd add a full-size zero gradient per group."""
    if not groups:
        return []
    lengths = [g.L if side == "q" else g.S for g in groups]
    order = torch.cat([
        rows(g.q_starts, g.q_lens, n, torch.device("cpu")) if side == "q" else rows(g.k_starts, g.k_lens, n, torch.device("cpu"))
        for g, n in zip(groups, lengths)
    ])
    if order.numel() != x.shape[0] or not torch.equal(order, torch.arange(x.shape[0])):
        x = x.index_select(0, order.to(x.device))
    chunks = x.split([g.n * n for g, n in zip(groups, lengths)])
    return [c.view(g.n, n, *x.shape[1:]).transpose(1, 2) for c, g, n in zip(chunks, groups, lengths)]


def output_positions(groups: list[Group], total: int) -> torch.Tensor:
    """(total,) long: for each packed query row, its row in the concatenated group outputs
    (group after group, each (n * L) rows, sequence j of a group at rows j * L ..)."""
    where = torch.empty(total, dtype=torch.long)
    offset = 0
    for g in groups:
        for j, (s, n) in enumerate(zip(g.q_starts, g.q_lens)):
            where[s : s + n] = torch.arange(offset + j * g.L, offset + j * g.L + n)
        offset += g.n * g.L
    return where


def positions_in_sequence(cu: list[int], device: torch.device) -> torch.Tensor:
    """(total,) long: each packed row's position inside its own sequence (restarting at 0 per sequence)."""
    lengths = torch.tensor([cu[i + 1] - cu[i] for i in range(len(cu) - 1)], dtype=torch.long, device=device)
    starts = torch.tensor(cu[:-1], dtype=torch.long, device=device)
    total = cu[-1]
    return torch.arange(total, device=device) - torch.repeat_interleave(starts, lengths, output_size=total)
