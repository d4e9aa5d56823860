"""``attnkit experiment vision``: the same small ResNet without and with SE / ECA / CBAM / MHSA, and a
ViT of similar size, on Fashion-MNIST — accuracy over seeds, and what each attention costs.

Models (one family, one training recipe, only the attention differs):

* ``resnet`` — He et al.'s CIFAR-style ResNet-(6n+2) (:func:`~attnkit.models.resnet.resnet_small`);
* ``se``, ``eca``, ``cbam`` — the same network with the module in every residual block, on the
  branch before the sum (SE and CBAM use reduction r = ``reduction``: the papers' 16 would leave
  one hidden unit at 16 channels);
* ``mhsa`` — the plain network with :class:`~attnkit.modules.mhsa2d.MHSA2d` inserted after the last
  stage (:func:`~attnkit.models.insert_attention.insert_attention`, the detectors' pattern);
* ``vit`` — a :class:`~attnkit.models.vit.VisionTransformer` with a 4×4 patch grid, sized near the
  ResNet's parameter count.

Recipe: AdamW, cosine learning-rate decay per epoch, fixed epochs (no early stopping, no model
selection), the test split read once per model after training. Per model: test accuracy mean ± std
over seeds, parameters, forward FLOPs of one image counted by ``torch.utils.flop_counter`` (the
attention calls counted on the reference backend: the CPU SDPA kernel reports no FLOPs to the
counter), training time and training images per second. Data: Fashion-MNIST from the Debian package
``dataset-fashion-mnist``; with ``--data auto`` (the default) a machine without it falls back to
scikit-learn's digits and says so in the log, results.json and the report. ``--data FOLDER`` trains on
your own images, one sub-folder per class (:mod:`attnkit.data.image_folder`: read with Pillow, all
grayscale or all RGB, resized to ``--set image_size=N``, default 32, a stratified 80/20 split).

``--quick`` (the default): 2,000 training and 1,000 test images, 2 epochs, 3 seeds, about 2–3 minutes
on 2 idle cores. ``--full``: 20,000 training images (a seeded random subset), all 10,000 test
images, 10 epochs, 3 seeds, sized for a 2-core CPU: one run, one thread, took 72 minutes on a
2-core machine shared with one other job. The committed run (``results/vision/full``) was split over
three processes (``--models`` on the same ``--out`` with ``--resume``: a model another process
finished is read from its checkpoint) on a machine shared with up to five jobs; its ``time_s``
sums their training time (the report prints it from there). ``--train-limit 0`` uses all 60,000 images (about three times longer).

Figures are made by :mod:`.plots`, the plain-language reading (English and Chinese) by
:mod:`.section`.

Shape legend: B batch, C channels, H×W image or feature map.
"""

from __future__ import annotations

import contextlib
import statistics
import time

import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset
from torch.utils.flop_counter import FlopCounterMode

from ...data.image_folder import load_image_folder
from ...data.images import DATASETS, load_images
from ...models.insert_attention import insert_attention
from ...models.resnet import resnet_small
from ...models.vit import VisionTransformer
from ...modules.multihead import MultiHeadAttention
from ..lab.registry import Experiment, register
from ..lab.runner import SetupError
from . import plots as vr

MODELS = ("resnet", "se", "eca", "cbam", "mhsa", "vit")
BLOCK_ATTN = {"resnet": None, "se": "se", "eca": "eca", "cbam": "cbam"}


def build_model(name: str, cfg: dict, image_size: tuple[int, int], num_classes: int, in_chans: int = 1) -> torch.nn.Module:
    """One of :data:`MODELS`, for ``in_chans``-channel images of ``image_size``."""
    if name == "vit":
        v = cfg["vit"]
        patch = image_size[0] // v["grid"]
        return VisionTransformer(image_size, patch, in_chans=in_chans, num_classes=num_classes, dim=v["dim"], depth=v["depth"],
                                 num_heads=v["heads"], mlp_ratio=v["mlp_ratio"])
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid names: {', '.join(MODELS)}")
    attn = BLOCK_ATTN.get(name)
    kw = {"reduction": cfg["reduction"]} if attn in ("se", "cbam") else None
    model = resnet_small(cfg["depth"], width=cfg["width"], num_classes=num_classes, in_chans=in_chans, attn=attn, attn_kwargs=kw)
    if name == "mhsa":
        insert_attention(model, f"layer{model.num_stages}", "mhsa", input_shape=(1, in_chans, *image_size), num_heads=cfg["mhsa_heads"])
    return model


@contextlib.contextmanager
def countable_attention(model: torch.nn.Module):
    """Route every MultiHeadAttention through the reference backend (plain matmuls the flop counter
    sees) for the duration of the block; the result is the same attention."""
    mods = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    old = [m.backend for m in mods]
    for m in mods:
        m.backend = "reference"
    try:
        yield
    finally:
        for m, b in zip(mods, old):
            m.backend = b


def forward_flops(model: torch.nn.Module, image_shape: tuple[int, ...]) -> int:
    """FLOPs of one image's forward pass (torch.utils.flop_counter: 2 per multiply-add)."""
    was = model.training
    model.eval()
    try:
        with torch.no_grad(), countable_attention(model), FlopCounterMode(display=False) as counter:
            model(torch.zeros(1, *image_shape, device=next(model.parameters()).device))
    finally:
        model.train(was)
    return int(counter.get_total_flops())


@torch.no_grad()
def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 500) -> float:
    model.eval()
    dev = next(model.parameters()).device
    correct = sum(int((model(xb.to(dev)).argmax(1).cpu() == yb).sum()) for xb, yb in zip(x.split(batch_size), y.split(batch_size)))
    return correct / len(y)


def mean_std(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "per_seed": values}


def _load(cfg: dict, train_limit: int | None):
    """A named data set (:func:`~attnkit.data.images.load_images`) or an image folder
    (:func:`~attnkit.data.image_folder.load_image_folder`); a bad folder is one SetupError (exit code 2)."""
    if cfg["data"] in DATASETS:
        return load_images(cfg["data"], train_limit=train_limit, test_limit=cfg["test_limit"])
    try:
        return load_image_folder(cfg["data"], size=cfg.get("image_size", 32), train_limit=train_limit, test_limit=cfg["test_limit"])
    except ValueError as e:
        raise SetupError(f"--data {cfg['data']!r} is not auto, fashion-mnist or digits, so it is read as an image folder: {e}") from None


@register
class VisionExperiment(Experiment):
    name = "vision"
    help = "Attention in vision: a small ResNet with/without SE, ECA, CBAM, MHSA, and a ViT, on Fashion-MNIST"
    seeds = 3
    tiny = {"data": "digits", "train_limit": 64, "test_limit": 32, "epochs": 1, "batch_size": 32,
            "models": "resnet,cbam,mhsa,vit", "seeds": 1}
    title = ("Channel and spatial attention in vision", "视觉中的通道注意力与空间注意力")
    question = ("Do SE, ECA, CBAM, spatial self-attention and a ViT help a small image classifier, and where do they look?",
                "SE、ECA、CBAM、空间自注意力和 ViT 能帮助小型图像分类器吗？它们关注哪里？")
    how_to_read = (
        "The figure puts each model's test accuracy (mean ± std over seeds, higher is better) against its parameters and its "
        "computation; the table has the numbers. The maps of where each module looks are folded under the reading.",
        "图中把每个模型的测试准确率（多个种子的均值 ± 标准差，越高越好）与它的参数量和计算量放在一起；表格给出具体数字。"
        "各模块在看哪里的热图折叠在解读下方。")
    report_order = 80
    lesson = "10_attention_in_vision"  # the course lesson the report links under "Go deeper"
    est_s = {"quick": 110, "tiny": 8}
    quick = {"data": "auto", "train_limit": 2000, "test_limit": 1000, "epochs": 2, "batch_size": 32, "lr": 2e-3,
             "weight_decay": 1e-4, "depth": 8, "width": 16, "reduction": 4, "mhsa_heads": 4,
             "vit": {"dim": 48, "depth": 4, "heads": 4, "mlp_ratio": 2.0, "grid": 4}, "models": list(MODELS),
             "image_size": 32}  # an image folder's images are resized to image_size x image_size
    full = {**quick, "train_limit": 20000, "test_limit": None, "epochs": 10, "batch_size": 128}

    def add_arguments(self, parser) -> None:
        parser.add_argument("--data", default=None, metavar="auto|fashion-mnist|digits|FOLDER",
                            help="image data: auto = Fashion-MNIST if installed, else scikit-learn digits (default auto); "
                                 "or a FOLDER with one sub-folder of images per class (resized to --set image_size=N)")
        parser.add_argument("--models", default=None, help=f"comma-separated subset of {','.join(MODELS)}")
        parser.add_argument("--epochs", type=int, default=None, help="training epochs per model")
        parser.add_argument("--train-limit", dest="train_limit", type=int, default=None,
                            help="training images (a seeded random subset; 0 = all)")

    def run(self, ctx) -> dict:
        cfg = dict(ctx.config)
        models = cfg["models"].split(",") if isinstance(cfg["models"], str) else list(cfg["models"])
        bad = [m for m in models if m not in MODELS]
        if bad:
            raise ValueError(f"--models: unknown {bad}; valid names: {', '.join(MODELS)}")
        train_limit = cfg["train_limit"] or None  # 0 = everything
        data = _load(cfg, train_limit)
        if data.notice:
            ctx.log(f"NOTICE: {data.notice}")
        ctx.log(f"data: {data.name}, {len(data.train_y)} train / {len(data.test_y)} test images of {data.image_size}")
        mean, std = float(data.train_x.mean()), float(data.train_x.std())
        train_x, test_x = (data.train_x - mean) / std, (data.test_x - mean) / std  # normalised with train statistics
        train = TensorDataset(train_x, data.train_y)
        chans = data.train_x.shape[1]  # 1, or 3 for an RGB image folder
        image_shape = (chans, *data.image_size)

        out: dict = {}
        trained: dict[str, torch.nn.Module] = {}  # the first seed's model of each kind, for the figures
        for name in models:
            accs, times, ips = [], [], []
            params = flops = None
            for seed in ctx.seeds:
                ctx.seed_everything(seed)
                model = build_model(name, cfg, data.image_size, len(data.classes), chans).to(ctx.device)
                if params is None:
                    params = sum(p.numel() for p in model.parameters())
                    flops = forward_flops(model, image_shape)
                opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
                sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg["epochs"])
                t0 = time.perf_counter()
                fit = ctx.fit(model, train, batch_size=cfg["batch_size"], epochs=cfg["epochs"], tag=f"{name}-seed{seed}",
                              loss_fn=lambda m, b: F.cross_entropy(m(b[0]), b[1]), optimizer=opt, scheduler=sched)
                spent = fit.time_s if fit.time_s > 0 else time.perf_counter() - t0
                accs.append(accuracy(model, test_x, data.test_y))
                times.append(spent)
                ips.append(len(train) * fit.epochs_run / spent if spent > 0 else float("nan"))
                if seed == ctx.seeds[0]:
                    trained[name] = model.eval()
            out[name] = {"acc": mean_std(accs), "params": params, "flops": flops, "train_time_s": mean_std(times),
                         "images_per_s": mean_std(ips), "epochs": cfg["epochs"]}
            ctx.log(f"{name}: test accuracy {out[name]['acc']['mean']:.4f} ± {out[name]['acc']['std']:.4f} "
                    f"({len(accs)} seeds), {params:,} params, {flops / 1e6:.2f} MFLOPs/image")

        raw = data.test_x.mean(1, keepdim=True)  # one channel for the figures and the object mask (RGB: the mean)
        reading = vr.read_attention(trained, test_x[:500], raw[:500], data.test_y[:500], data.classes)
        plotted = vr.plotted_gates(trained, test_x, raw, data.test_y, data.classes)  # kept: the gate figures can be drawn again
        figures = vr.make_figures(ctx, out, trained, test_x, raw, data.test_y, data.classes, plotted)
        return {
            "data": data.describe(), "normalisation": {"mean": mean, "std": std}, "models": out,
            "verdict": vr.verdicts(out), "reading": reading, "published": vr.PUBLISHED, "figures": figures,
            "plotted_gates": plotted,
        }

    def report(self, results, out_dir, lang: str = "en", full_results=None):
        """The section; ``full_results`` ({run name: Results}, e.g. results/vision/full) is read first when given."""
        return vr.section(results, out_dir, lang, full_results=full_results)

    def summary(self, results, lang: str = "en", full_results=None):
        from .section import summary_row

        return summary_row(results, lang, full_results)  # the committed --full run's verdict when there is one
