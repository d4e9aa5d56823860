"""``tiny``: a seconds-long synthetic experiment that exercises the whole experiment layer.

Task: reverse a sequence of L random digits. The model is one attnkit
:class:`~attnkit.MultiHeadAttention` layer over token + learned position embeddings and a linear
read-out; reversal needs exactly one attention hop (query position i must find key position
L-1-i), so a single layer learns it in a few epochs. Shapes: tokens (B, L) → embeddings (B, L, E)
→ logits (B, L, V).

It is the test bed of ``tests/experiments/``: resume after ``kill -9``, DDP under torchrun, the
results schema. ``epoch_sleep`` (seconds slept after each epoch) only exists to give such a test
time to interrupt a run.
"""

from __future__ import annotations

import time

import torch
from torch import nn
from torch.nn import functional as F

from ...modules.multihead import MultiHeadAttention
from ..lab.context import RunContext
from ..lab.registry import Experiment, register


class TinyReverser(nn.Module):
    """Embed (B, L) digits, one self-attention layer, read out (B, L, V) logits."""

    def __init__(self, vocab: int, length: int, dim: int, heads: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(length, dim) * 0.5)  # (L, E)
        self.attn = MultiHeadAttention(dim, heads)
        self.head = nn.Linear(dim, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, L = x.shape
        h = self.tok(x) + self.pos[:L]  # (B, L, E)
        out, _ = self.attn(h)  # (B, L, E)
        return self.head(out + self.pos[:L])  # (B, L, V)


def reversal_data(n: int, length: int, vocab: int, seed: int) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, vocab, (n, length), generator=g)  # (N, L)
    return torch.utils.data.TensorDataset(x, x.flip(1))


def _loss(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    logits = model(x)  # (B, L, V)
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


@register
class Tiny(Experiment):
    name = "tiny"
    help = "seconds-long synthetic test: one attention layer learns to reverse digit sequences"
    quick = {"n_train": 512, "n_val": 256, "length": 8, "vocab": 10, "dim": 32, "heads": 2, "epochs": 4,
             "batch_size": 32, "lr": 0.01, "patience": None, "epoch_sleep": 0.0, "plot": False}
    full = {**quick, "n_train": 4096, "epochs": 20, "patience": 3, "plot": True}
    report_order = None  # a test bed, not part of the report

    def add_arguments(self, parser):
        parser.add_argument("--epoch-sleep", type=float, default=None,
                            help="seconds to sleep after each epoch (tests use it to interrupt a run)")

    def run(self, ctx: RunContext) -> dict:
        c = ctx.config
        per_seed = {}
        for seed in ctx.seeds:
            ctx.seed_everything(seed)
            train = reversal_data(c["n_train"], c["length"], c["vocab"], seed=10_000 + seed)
            xv, yv = reversal_data(c["n_val"], c["length"], c["vocab"], seed=20_000 + seed).tensors
            model = TinyReverser(c["vocab"], c["length"], c["dim"], c["heads"])

            def evaluate(m: nn.Module) -> dict:
                logits = m(xv.to(ctx.device))  # (N, L, V)
                y = yv.to(ctx.device)
                if c["epoch_sleep"]:
                    time.sleep(c["epoch_sleep"])
                return {"val_loss": float(F.cross_entropy(logits.flatten(0, 1), y.flatten())),
                        "val_acc": float((logits.argmax(-1) == y).float().mean())}

            fit = ctx.fit(model, train, batch_size=c["batch_size"], loss_fn=_loss,
                          optimizer=torch.optim.Adam(model.parameters(), lr=c["lr"]), epochs=c["epochs"],
                          tag=f"reverser-seed{seed}", eval_fn=evaluate, monitor="val_loss", patience=c["patience"])
            final = fit.final()
            per_seed[str(seed)] = {"val_loss": final["val_loss"], "val_acc": final["val_acc"], "best_epoch": fit.best_epoch,
                                   "epochs_run": fit.epochs_run, "history": fit.history}
            ctx.log(f"seed {seed}: val_acc {final['val_acc']:.3f} (epoch {fit.best_epoch})")
        accs = [r["val_acc"] for r in per_seed.values()]
        if c["plot"]:
            self._plot(ctx, per_seed)
        return {"seeds": per_seed, "val_acc_mean": sum(accs) / len(accs)}

    @staticmethod
    def _plot(ctx: RunContext, per_seed: dict) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.5))
        for seed, r in per_seed.items():
            ax.plot([h["epoch"] for h in r["history"]], [h["val_loss"] for h in r["history"]], marker="o", label=f"seed {seed}")
        ax.set_xlabel("epoch")
        ax.set_ylabel("validation loss")
        ax.legend()
        ctx.save_figure(fig, "val_loss.png")
