"""``ctx.fit``, the shared training loop, in-process: seeded determinism, resume after an
interruption equal to an uninterrupted run (dropout RNG included), early stopping that hands back
the best weights, finished tags skipped, checkpoints never half-written, figures at >= 1,000 px."""

from __future__ import annotations

import struct

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from attnkit.experiments import FitResult, RunContext
from attnkit.experiments.lab import atomic


def _ctx(tmp_path, resume=False) -> RunContext:
    return RunContext(name="t", config={}, seeds=[0], out=tmp_path, resume=resume, show_progress=False)


def _data(n=40):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 4, generator=g)
    return torch.utils.data.TensorDataset(x, x @ torch.tensor([1.0, -2.0, 0.5, 3.0]))


def _model():
    return nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.3), nn.Linear(16, 1))  # dropout: RNG must be restored too


def _loss(model, batch):
    x, y = batch
    return F.mse_loss(model(x).squeeze(-1), y)


def _fit(ctx, seed=0, epochs=5, eval_fn=None, **kw) -> tuple[FitResult, nn.Module]:
    ctx.seed_everything(seed)
    model = _model()
    res = ctx.fit(model, _data(), batch_size=8, loss_fn=_loss, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                  epochs=epochs, tag=f"m{seed}", eval_fn=eval_fn, **kw)
    return res, model


def _strip(history):
    return [{k: v for k, v in r.items() if k != "time_s"} for r in history]


def test_same_seed_same_history_other_seed_differs(tmp_path):
    a, _ = _fit(_ctx(tmp_path / "a"))
    b, _ = _fit(_ctx(tmp_path / "b"))
    c, _ = _fit(_ctx(tmp_path / "c"), seed=1)
    assert _strip(a.history) == _strip(b.history)
    assert _strip(a.history) != _strip(c.history)
    assert a.epochs_run == 5 and a.best_epoch == 5 and not a.skipped and a.time_s > 0


def test_resume_after_an_interruption_equals_an_uninterrupted_run(tmp_path):
    ref, ref_model = _fit(_ctx(tmp_path / "ref"))

    def crash_at_epoch_3(model, calls=[]):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # after epoch 3's training, before its checkpoint
        return {}

    with pytest.raises(KeyboardInterrupt):
        _fit(_ctx(tmp_path / "cut"), eval_fn=crash_at_epoch_3)
    ck = torch.load(tmp_path / "cut" / "checkpoints" / "m0.pt", weights_only=False)
    assert ck["epoch"] == 2 and not ck["finished"]
    torch.manual_seed(123)  # whatever the RNG did meanwhile, the checkpoint's state is restored
    res, model = _fit(_ctx(tmp_path / "cut", resume=True))
    assert res.resumed_from == 2 and res.epochs_run == 5
    assert _strip(res.history) == _strip(ref.history)
    for p, q in zip(model.parameters(), ref_model.parameters()):
        assert torch.equal(p, q)


def test_a_finished_tag_is_not_trained_again(tmp_path):
    first, m1 = _fit(_ctx(tmp_path))
    calls = []

    def counting_loss(model, batch):
        calls.append(1)
        return _loss(model, batch)

    ctx = _ctx(tmp_path, resume=True)
    ctx.seed_everything(0)
    model = _model()
    res = ctx.fit(model, _data(), batch_size=8, loss_fn=counting_loss, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                  epochs=5, tag="m0")
    assert res.skipped and not calls and _strip(res.history) == _strip(first.history)
    for p, q in zip(model.parameters(), m1.parameters()):
        assert torch.equal(p, q)


def test_early_stopping_restores_the_best_weights(tmp_path):
    script = iter([3.0, 1.0, 2.0, 2.5, 0.5])
    seen = {}

    def eval_fn(model):
        value = next(script)
        seen[value] = [p.detach().clone() for p in model.parameters()]
        return {"val": value}

    res, model = _fit(_ctx(tmp_path), epochs=5, eval_fn=eval_fn, monitor="val", patience=2)
    assert res.stopped_early and res.epochs_run == 4 and res.best_epoch == 2 and res.best_value == 1.0
    assert res.final()["val"] == 1.0
    for p, q in zip(model.parameters(), seen[1.0]):
        assert torch.equal(p, q)  # the weights of epoch 2, not of epoch 4


def test_a_checkpoint_is_never_half_written(tmp_path, monkeypatch):
    _fit(_ctx(tmp_path), epochs=2)
    path = tmp_path / "checkpoints" / "m0.pt"
    before = path.read_bytes()

    def torn_save(obj, f):
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", torn_save)
    with pytest.raises(OSError, match="disk full"):
        atomic.save_torch(path, {"x": 1})
    assert path.read_bytes() == before  # the old checkpoint is intact
    assert torch.load(path, weights_only=False)["epoch"] == 2
    assert sorted(p.name for p in path.parent.iterdir()) == ["m0.pt"]  # no temporary left


def test_fit_rejects_bad_arguments(tmp_path):
    ctx = _ctx(tmp_path)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    kw = dict(batch_size=8, loss_fn=_loss, optimizer=opt, epochs=1)
    with pytest.raises(ValueError, match="tag names the checkpoint file"):
        ctx.fit(model, _data(), tag="a/b", **kw)
    with pytest.raises(ValueError, match="patience needs monitor="):
        ctx.fit(model, _data(), tag="a", patience=2, **kw)
    with pytest.raises(ValueError, match="epochs must be an int >= 1, got 0"):
        ctx.fit(model, _data(), tag="a", **{**kw, "epochs": 0})
    with pytest.raises(TypeError, match="scalar tensor"):
        ctx.fit(model, _data(), tag="a", **{**kw, "loss_fn": lambda m, b: (m(b[0]) - b[1]) ** 2})
    with pytest.raises(ValueError, match="monitor='nope' is not among"):
        ctx.fit(model, _data(), tag="a", monitor="nope", **kw)


def test_save_figure_writes_a_png_at_least_1000_px_wide(tmp_path):
    plt = pytest.importorskip("matplotlib.pyplot")
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [1, 0])
    path = _ctx(tmp_path).save_figure(fig, "sub/line.png")
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, _ = struct.unpack(">II", head[16:24])
    assert width >= 1000
    assert not plt.fignum_exists(fig.number)
    with pytest.raises(ValueError, match="must end in .png"):
        _ctx(tmp_path).save_figure(plt.figure(), "x.jpg")


def test_save_json_is_atomic_and_converts_tensors(tmp_path):
    import json

    p = _ctx(tmp_path).save_json("r.json", {"t": torch.tensor([1.5, 2.0]), "s": torch.tensor(3), "nan": float("nan")})
    assert json.loads(p.read_text()) == {"t": [1.5, 2.0], "s": 3, "nan": None}
    with pytest.raises(TypeError, match="cannot write object to JSON"):
        _ctx(tmp_path).save_json("bad.json", {"o": object()})
    assert not (tmp_path / "bad.json").exists()


def test_a_warmup_scheduler_steps_per_optimizer_step_and_resumes(tmp_path):
    """``scheduler_every="step"``: the rate rises step by step (40 samples / batch 8 = 5 steps an
    epoch); a run resumed after epoch 2 restores the scheduler and ends equal to an uninterrupted one."""

    def fit(ctx, epochs):
        ctx.seed_everything(0)
        model = _model()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / 12))
        res = ctx.fit(model, _data(), batch_size=8, loss_fn=_loss, optimizer=opt, scheduler=sched, scheduler_every="step",
                      epochs=epochs, tag="warm")
        return res, sched, model

    ref, sched, ref_model = fit(_ctx(tmp_path / "ref"), 4)
    assert sched.last_epoch == 20 and sched.get_last_lr()[0] == pytest.approx(0.05)
    fit(_ctx(tmp_path / "cut"), 2)  # "killed" after epoch 2: same tag, more epochs asked on resume
    ck = torch.load(tmp_path / "cut" / "checkpoints" / "warm.pt", weights_only=False)
    assert ck["scheduler"]["last_epoch"] == 10
    ck["finished"], ck["epochs"] = False, 4
    torch.save(ck, tmp_path / "cut" / "checkpoints" / "warm.pt")
    res, sched2, model = fit(_ctx(tmp_path / "cut", resume=True), 4)
    assert sched2.last_epoch == 20 and _strip(res.history) == _strip(ref.history)
    for a, b in zip(model.parameters(), ref_model.parameters()):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="scheduler_every must be 'epoch' or 'step'"):
        _fit(_ctx(tmp_path / "bad"), scheduler_every="batch")


def test_resuming_with_the_epochs_already_trained_hands_back_the_best_weights(tmp_path):
    """A run stopped after 3 of 6 epochs and resumed with ``epochs=3`` trains nothing more; the model
    must still be the monitored best epoch's, not the last epoch's."""
    script = iter([3.0, 1.0, 2.0])
    seen = {}

    def eval_fn(model):
        value = next(script)
        seen[value] = [p.detach().clone() for p in model.parameters()]
        return {"val": value}

    def stop_after_3(model, calls=[]):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt  # during epoch 4, after epoch 3's checkpoint
        return eval_fn(model)

    with pytest.raises(KeyboardInterrupt):
        _fit(_ctx(tmp_path), epochs=6, eval_fn=stop_after_3, monitor="val")
    res, model = _fit(_ctx(tmp_path, resume=True), epochs=3, eval_fn=eval_fn, monitor="val")
    assert res.best_epoch == 2 and res.resumed_from == 3
    for p, q in zip(model.parameters(), seen[1.0]):
        assert torch.equal(p, q)  # epoch 2's weights, not epoch 3's
