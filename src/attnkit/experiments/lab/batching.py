"""Batches of similar length, for training loops over sequences of very different lengths.

A batch is padded to its longest member, and a recurrent decoder runs one step per position of
the longest target: with random batches of Bible verses (5–80 tokens) about half of every step
is padding. :class:`LengthBuckets` keeps the randomness of the epoch's shuffle but sorts each
pool of ``pool`` consecutive batches by length before cutting it into batches (the "bucket
iterator" of torchtext and fairseq), so neighbours in a batch have similar lengths; the batches
are then shuffled, so the model does not see the lengths in order.

It is deterministic given the epoch's generator (resume and DistributedDataParallel see the same
batches), and cuts the epoch into exactly ``ceil(n / batch_size)`` batches like plain batching.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class LengthBuckets:
    """``batches(order, batch_size, generator)`` → index tensors of similar-length samples.

    ``lengths[i]`` is sample i's length (for seq2seq: the longer of source and target).
    """

    def __init__(self, lengths: Sequence[int], *, pool: int = 50):
        if isinstance(pool, bool) or not isinstance(pool, int) or pool < 1:
            raise ValueError(f"LengthBuckets: pool must be an int >= 1 (batches sorted together), got {pool!r}")
        self.lengths = torch.as_tensor(list(lengths), dtype=torch.long)
        if self.lengths.dim() != 1 or (self.lengths < 0).any():
            raise ValueError("LengthBuckets: lengths must be a flat sequence of non-negative ints, one per sample")
        self.pool = pool

    def batches(self, order: torch.Tensor, batch_size: int, generator: torch.Generator) -> list[torch.Tensor]:
        if order.numel() and int(order.max()) >= len(self.lengths):
            raise ValueError(f"LengthBuckets: the data has more samples than the {len(self.lengths)} lengths given")
        pools = order.split(batch_size * self.pool)  # (pool · batch_size) shuffled samples each
        # stable sort: equal lengths keep the shuffle's order, so the result depends only on the generator
        ordered = torch.cat([p[torch.sort(self.lengths[p], stable=True).indices] for p in pools])
        batches = list(ordered.split(batch_size))
        perm = torch.randperm(len(batches), generator=generator).tolist()
        return [batches[i] for i in perm]
