"""LengthBuckets: every sample once per epoch, ceil(n / batch) batches, similar lengths within a
batch (far less padding than random batches), deterministic per generator, bad input rejected;
``fit(batching=...)`` trains on exactly those batches and resumes equal to an uninterrupted run."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnkit.experiments import RunContext
from attnkit.experiments.lab.batching import LengthBuckets


@given(n=st.integers(1, 300), batch=st.integers(1, 40), pool=st.integers(1, 8), seed=st.integers(0, 5))
def test_each_sample_once_and_the_plain_batch_count(n, batch, pool, seed):
    lengths = torch.randint(0, 90, (n,), generator=torch.Generator().manual_seed(seed)).tolist()
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + 1))
    out = LengthBuckets(lengths, pool=pool).batches(order, batch, torch.Generator().manual_seed(seed + 2))
    assert len(out) == len(order.split(batch)) and all(0 < len(b) <= batch for b in out)
    assert sorted(torch.cat(out).tolist()) == list(range(n))
    again = LengthBuckets(lengths, pool=pool).batches(order, batch, torch.Generator().manual_seed(seed + 2))
    assert all(torch.equal(a, b) for a, b in zip(out, again))


def test_padding_falls_against_random_batches():
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(5, 81, (5000,), generator=g).tolist()
    order = torch.randperm(5000, generator=g)

    def padding(batches):  # padded positions / real positions
        return sum(len(b) * max(lengths[i] for i in b.tolist()) - sum(lengths[i] for i in b.tolist()) for b in batches) / sum(lengths)

    plain = padding(order.split(64))
    bucketed = padding(LengthBuckets(lengths).batches(order, 64, g))
    assert plain > 0.7 and bucketed < 0.05, (plain, bucketed)


def test_bad_input():
    with pytest.raises(ValueError, match="pool must be an int >= 1"):
        LengthBuckets([1, 2], pool=0)
    with pytest.raises(ValueError, match="non-negative"):
        LengthBuckets([1, -2])
    with pytest.raises(ValueError, match="more samples than the 2 lengths"):
        LengthBuckets([1, 2]).batches(torch.arange(3), 2, torch.Generator())


def test_fit_trains_on_the_buckets_and_resumes_equal(tmp_path):
    from torch import nn
    from torch.nn import functional as F

    seen = []
    x = torch.randn(40, 3, generator=torch.Generator().manual_seed(0))
    data = torch.utils.data.TensorDataset(x, x.sum(-1))
    lengths = list(range(40))

    def loss(model, batch):
        seen.append(batch[0].shape[0])
        return F.mse_loss(model(batch[0]).squeeze(-1), batch[1])

    def run(out, epochs, resume=False):
        ctx = RunContext(name="t", config={}, seeds=[0], out=out, resume=resume, show_progress=False)
        ctx.seed_everything(0)
        model = nn.Linear(3, 1)
        res = ctx.fit(model, data, batch_size=8, loss_fn=loss, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                      epochs=epochs, tag="b", batching=LengthBuckets(lengths, pool=2))
        return res, model

    ref, ref_model = run(tmp_path / "ref", 3)
    assert seen == [8] * 15  # 40 samples, 5 batches an epoch
    run(tmp_path / "cut", 1)
    ck = torch.load(tmp_path / "cut" / "checkpoints" / "b.pt", weights_only=False)
    ck["finished"], ck["epochs"] = False, 3
    torch.save(ck, tmp_path / "cut" / "checkpoints" / "b.pt")
    res, model = run(tmp_path / "cut", 3, resume=True)
    assert [r["train_loss"] for r in res.history] == [r["train_loss"] for r in ref.history]
    assert torch.equal(model.weight, ref_model.weight)
