"""``attnkit experiment detection``: the controlled experiment seed article 001 (§5.3) recommends
before putting MHSA into a YOLO-style detector — the same small detector, the same data and recipe,
with and without :class:`~attnkit.modules.mhsa2d.MHSA2d` at each place the popular recipes use.

Variants (:data:`~attnkit.models.detection.PLACEMENTS`): ``plain``, ``mhsa_p5`` (after SPPF),
``mhsa_p4p5`` (also after the stride-16 stage), ``mhsa_neck`` (on the PAN's P5 output). Per variant
and seed: mAP@0.5 and mAP@0.5:0.95 on the validation split (pycocotools), and once per variant the
parameters, forward GFLOPs of one image (``torch.utils.flop_counter``, attention on the reference
backend so its matmuls are counted), training time and activation memory of one step
(:mod:`.measure`).

Data (``--data``): ``objects`` (default) or ``context`` — the generated sets of
:mod:`attnkit.data.detection_synth` (``context``: an object's class depends on a bar at the far edge
of the canvas) — or a YOLO-format FOLDER (:mod:`attnkit.data.yolo_folder`, resized to
``--set size=N``).

Recipe: AdamW, one-cycle learning rate stepped per batch, gradient norm clipped at 10, fixed epochs,
no augmentation, no model selection; the validation split is read once per model, after training.
Resumable: every (variant, seed) is one checkpointed ``ctx.fit`` tag.

``--quick`` (default): 320 training / 96 validation canvases of 96×96, 20 epochs, 2 seeds: 156 s
on 2 idle cores. ``--full``: 512 / 192 canvases, 15 epochs, 3 seeds (one thread each: 52 min per data
variant on a 2-core machine shared with other jobs).

Shape legend: B batch, C channels, S×S canvas, M objects per image (padded).
"""

from __future__ import annotations

import time

import torch
from torch.utils.data import TensorDataset

from ...data.detection_synth import VARIANTS as SYNTH, make_detection_set
from ...models.detection import PLACEMENTS, DetectionLoss, MHSAPlacement, YOLODetector
from ..lab.registry import Experiment, register
from ..lab.runner import SetupError
from ..vision.train import mean_std
from .measure import activation_mb, evaluate_map, forward_flops


def build_detector(name: str, cfg: dict, num_classes: int, in_chans: int, size: int) -> YOLODetector:
    """The detector of variant ``name`` (a key of PLACEMENTS) at the config's widths."""
    return YOLODetector(num_classes, in_chans, tuple(cfg["widths"]), cfg["depth"], reg_max=cfg["reg_max"],
                        attention=MHSAPlacement.named(name, cfg["heads"]), image_size=size)


def load_data(cfg: dict):
    """A generated set (``objects``, ``context``) or a YOLO folder; a bad folder is a SetupError."""
    if cfg["data"] in SYNTH:
        return make_detection_set(cfg["data"], n_train=cfg["n_train"], n_val=cfg["n_val"], size=cfg["size"],
                                  max_objects=cfg["max_objects"], seed=cfg["data_seed"])
    from ...data.yolo_folder import load_yolo_folder

    try:
        return load_yolo_folder(cfg["data"], size=cfg["size"], train_limit=cfg.get("train_limit"), val_limit=cfg.get("val_limit"))
    except ValueError as e:
        raise SetupError(f"--data {cfg['data']!r} is not {' or '.join(SYNTH)}, so it is read as a YOLO folder: {e}") from None


def _variants(cfg: dict) -> list[str]:
    names = cfg["variants"].split(",") if isinstance(cfg["variants"], str) else list(cfg["variants"])
    bad = [n for n in names if n not in PLACEMENTS]
    if bad:
        raise SetupError(f"--variants: unknown {bad}; valid names: {', '.join(PLACEMENTS)}")
    return names


def train_one(ctx, name: str, cfg: dict, data, seed: int):
    """Train variant ``name`` with ``seed``; (model, seconds)."""
    ctx.seed_everything(seed)
    model = build_detector(name, cfg, len(data.classes), data.train_x.shape[1], data.image_size[0]).to(ctx.device)
    loss = DetectionLoss(model)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    steps = cfg["epochs"] * -(-len(data.train_x) // cfg["batch_size"])
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg["lr"], total_steps=steps, pct_start=0.15)
    t0 = time.perf_counter()
    fit = ctx.fit(model, TensorDataset(data.train_x, data.train_t), batch_size=cfg["batch_size"], epochs=cfg["epochs"],
                  tag=f"{name}-seed{seed}", loss_fn=lambda m, b: loss(m(b[0]), b[1])[0], optimizer=opt, scheduler=sched,
                  scheduler_every="step", grad_clip=10.0)
    return model, fit.time_s if fit.time_s > 0 else time.perf_counter() - t0


@register
class DetectionExperiment(Experiment):
    name = "detection"
    help = "MHSA in a small YOLOv8-style detector: plain vs MHSA at P5, P4+P5 or in the neck (mAP, cost)"
    seeds = 2
    title = ("Self-attention in a YOLO-style detector", "YOLO 风格检测器中的自注意力")
    question = ("Does inserting MHSA into a small YOLOv8-style detector raise its mAP enough to pay for its cost?",
                "在小型 YOLOv8 风格检测器中插入 MHSA，mAP 的提升能抵得上它的开销吗？")
    how_to_read = (
        "Each point is one detector variant: its validation mAP@0.5:0.95 (mean ± std over seeds, higher is better) against "
        "its forward GFLOPs and its activation memory per training step (both counted, not timed). The boxes figure shows what the plain and the MHSA detector find on the "
        "same validation images.",
        "每个点是一种检测器变体：验证集 mAP@0.5:0.95（多个种子的均值 ± 标准差，越高越好）对比它的前向 GFLOPs 和每个训练步的激活内存（两者都是计数得到的，不是计时）。"
        "检测框图展示普通检测器和加了 MHSA 的检测器在同一批验证图像上找到了什么。")
    report_order = 85
    lesson = "10_attention_in_vision"
    est_s = {"quick": 160, "tiny": 15}
    tiny = {"n_train": 32, "n_val": 16, "epochs": 1, "size": 64, "variants": "plain,mhsa_p5", "seeds": 1}
    quick = {"data": "objects", "size": 96, "n_train": 320, "n_val": 96, "max_objects": 4, "data_seed": 0, "epochs": 20,
             "batch_size": 32, "lr": 4e-3, "weight_decay": 5e-4, "widths": [8, 16, 32, 64, 64], "depth": 1, "reg_max": 8,
             "heads": 4, "variants": list(PLACEMENTS)}
    full = {**quick, "n_train": 512, "n_val": 192, "epochs": 15, "seeds": 3}

    def add_arguments(self, parser) -> None:
        parser.add_argument("--data", default=None, metavar="objects|context|FOLDER",
                            help="objects (generated, default), context (generated; class depends on a distant cue) "
                                 "or a YOLO-format FOLDER (data.yaml, images/{train,val}, labels/{train,val})")
        parser.add_argument("--variants", default=None, help=f"comma-separated subset of {','.join(PLACEMENTS)}")
        parser.add_argument("--epochs", type=int, default=None, help="training epochs per model")

    def run(self, ctx) -> dict:
        cfg = dict(ctx.config)
        names = _variants(cfg)
        data = load_data(cfg)
        if data.notice:
            ctx.log(f"NOTICE: {data.notice}")
        ctx.log(f"data: {data.name}, {len(data.train_x)} train / {len(data.val_x)} val images of {data.image_size}, "
                f"{len(data.classes)} classes")
        out, trained = {}, {}
        for name in names:
            maps, times, cost = [], [], None
            for seed in ctx.seeds:
                model, spent = train_one(ctx, name, cfg, data, seed)
                if cost is None:
                    shape = (data.train_x.shape[1], *data.image_size)
                    cost = {"params": sum(p.numel() for p in model.parameters()), "gflops": forward_flops(model, shape) / 1e9,
                            "act_mem_mb": activation_mb(model, data.train_x[: cfg["batch_size"]].to(ctx.device),
                                                        data.train_t[: cfg["batch_size"]].to(ctx.device))}
                maps.append(evaluate_map(model, data.val_x, data.val_t, len(data.classes)))
                times.append(spent)
                if seed == ctx.seeds[0]:
                    trained[name] = model.eval()
            out[name] = {"map50": mean_std([m["map50"] for m in maps]), "map50_95": mean_std([m["map50_95"] for m in maps]),
                         **cost, "train_s": mean_std(times)}
            ctx.log(f"{name}: mAP@0.5 {out[name]['map50']['mean']:.3f} ± {out[name]['map50']['std']:.3f}, "
                    f"mAP@0.5:0.95 {out[name]['map50_95']['mean']:.3f} ± {out[name]['map50_95']['std']:.3f}, "
                    f"{cost['params']:,} params, {cost['gflops']:.3f} GFLOPs")
        from . import plots

        figures = plots.make_figures(ctx, out, trained, data) if cfg.get("figures", True) else []
        return {"data": data.describe(), "variants": out, "verdict": plots.verdicts(out), "figures": figures,
                "published": plots.PUBLISHED}

    def report(self, results, out_dir, lang: str = "en", full_results=None):
        from .section import section

        return section(results, out_dir, lang, full_results=full_results)

    def summary(self, results, lang: str = "en", full_results=None):
        from .section import summary_row

        return summary_row(results, lang, full_results)
