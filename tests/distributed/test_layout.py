"""Layout bookkeeping without any communication: who holds which chunk, and which pairs are computed."""

from __future__ import annotations

import pytest

from attnkit.distributed.layout import (
    LAYOUTS,
    PairKind,
    check_layout,
    chunk_order,
    num_chunks,
    pair_kind,
    padded_length,
    rank_chunks,
)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 8])
def test_every_chunk_is_held_exactly_once(layout, world_size):
    assert sorted(chunk_order(layout, world_size)) == list(range(num_chunks(layout, world_size)))


def test_zigzag_pairs_each_chunk_with_its_mirror():
    assert [rank_chunks("zigzag", r, 4) for r in range(4)] == [(0, 7), (1, 6), (2, 5), (3, 4)]


def _work(layout: str, rank: int, world_size: int, chunk_len: int = 4) -> int:
    """Scores one rank computes under a causal mask over a whole ring pass."""
    total = 0
    for src in range(world_size):
        for cq in rank_chunks(layout, rank, world_size):
            for ck in rank_chunks(layout, src, world_size):
                kind = pair_kind(cq, ck, chunk_len, causal=True, seq_len=10**9)
                total += {PairKind.SKIP: 0, PairKind.FULL: chunk_len**2, PairKind.MASKED: chunk_len**2}[kind]
    return total


@pytest.mark.parametrize("world_size", [2, 3, 4, 8])
def test_zigzag_balances_causal_work_and_contiguous_does_not(world_size):
    zigzag = [_work("zigzag", r, world_size) for r in range(world_size)]
    contiguous = [_work("contiguous", r, world_size) for r in range(world_size)]
    assert len(set(zigzag)) == 1, zigzag
    assert contiguous[-1] == world_size * contiguous[0], contiguous  # the last rank does W times the first


def test_pair_kinds():
    # causal: below the diagonal full, on it masked, above it skipped
    assert pair_kind(3, 1, 4, causal=True, seq_len=100) is PairKind.FULL
    assert pair_kind(2, 2, 4, causal=True, seq_len=100) is PairKind.MASKED
    assert pair_kind(1, 3, 4, causal=True, seq_len=100) is PairKind.SKIP
    assert pair_kind(1, 3, 4, causal=False, seq_len=100) is PairKind.FULL
    # padding (seq_len=10, chunks of 4: chunk 2 holds 8..11 of which 10, 11 are padding; chunk 3 is all padding)
    assert pair_kind(0, 2, 4, causal=False, seq_len=10) is PairKind.MASKED
    assert pair_kind(2, 0, 4, causal=False, seq_len=10) is PairKind.MASKED
    assert pair_kind(0, 3, 4, causal=False, seq_len=10) is PairKind.SKIP
    assert pair_kind(3, 0, 4, causal=False, seq_len=10) is PairKind.SKIP


def test_padded_length():
    assert padded_length(21, "zigzag", 4) == 24
    assert padded_length(24, "zigzag", 4) == 24
    assert padded_length(21, "contiguous", 4) == 24
    assert padded_length(22, "contiguous", 2) == 22
    assert padded_length(3, "zigzag", 4) == 8  # more padding than data still works (chunks of 1)


def test_unknown_layout_lists_valid_ones():
    with pytest.raises(ValueError, match=r"one of \('contiguous', 'zigzag'\), got 'ring'"):
        check_layout("ring")
