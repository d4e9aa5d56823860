"""The detection run's figures (English and Chinese) and its verdicts.

* ``map_vs_cost.png``: mAP@0.5:0.95 (mean ± std over seeds) against forward GFLOPs and activation memory per training step
  (both counted, so a shared machine's load cannot move them);
* ``boxes.png``: the plain detector and one MHSA variant on the same validation images, ground truth
  dashed;
* ``mhsa_attention.png``: where the inserted MHSA looks from the cell under one detection's centre.

**Significance rule** (:func:`verdicts`): a variant *helped* (or *hurt*) when its mean mAP@0.5:0.95
differs from the plain detector's by more than twice the standard error of the difference,
SE = √(s²_plain/n_plain + s²_variant/n_variant) over seeds; otherwise "no clear difference".
With one seed there is no spread and no verdict.

Shape legend: n images, S×S canvas, heads attention heads, N = h·w cells of the attended map.
"""

from __future__ import annotations

import math

import torch

from ...page.figures import draw_both, pick

LABELS = {"plain": ("plain", "普通"), "mhsa_p5": ("MHSA at P5", "MHSA 在 P5"), "mhsa_p4p5": ("MHSA at P4+P5", "MHSA 在 P4+P5"),
          "mhsa_neck": ("MHSA in the neck", "MHSA 在颈部")}
PUBLISHED = {
    "yolov8n": {"map50_95": 37.3, "params_m": 3.2, "gflops": 8.7, "data": ("COCO val2017, 640 px", "COCO val2017，640 像素"),
                "source": ("Ultralytics YOLOv8 model table, https://docs.ultralytics.com/models/yolov8/",
                           "Ultralytics YOLOv8 模型表，https://docs.ultralytics.com/models/yolov8/")},
    "yolov8s": {"map50_95": 44.9, "params_m": 11.2, "gflops": 28.6, "data": ("COCO val2017, 640 px", "COCO val2017，640 像素"),
                "source": ("Ultralytics YOLOv8 model table, https://docs.ultralytics.com/models/yolov8/",
                           "Ultralytics YOLOv8 模型表，https://docs.ultralytics.com/models/yolov8/")},
    "botnet": {"box_ap": 49.7, "data": ("COCO, Mask R-CNN with a BoTNet backbone (MHSA in the last stage)",
                        "COCO，以 BoTNet 为骨干的 Mask R-CNN（MHSA 在最后一个阶段）"),
               "source": ("Srinivas et al. 2021, https://arxiv.org/abs/2101.11605 (abstract)",
                          "Srinivas 等，2021，https://arxiv.org/abs/2101.11605（摘要）")},
}


def label(name: str, lang: str = "en") -> str:
    en, zh = LABELS.get(name, (name, name))
    return pick(lang, en, zh)


def verdicts(variants: dict, metric: str = "map50_95") -> dict:
    """Each MHSA variant against ``plain``: the difference, its standard error and the label."""
    if "plain" not in variants:
        return {}
    base = variants["plain"][metric]
    out = {}
    for name, v in variants.items():
        if name == "plain":
            continue
        m = v[metric]
        delta = m["mean"] - base["mean"]
        n_a, n_b = len(base["per_seed"]), len(m["per_seed"])
        se = math.sqrt(base["std"] ** 2 / n_a + m["std"] ** 2 / n_b)
        if min(n_a, n_b) < 2:
            lab = "one seed"
        elif delta > 2 * se:
            lab = "helped"
        elif delta < -2 * se:
            lab = "hurt"
        else:
            lab = "no clear difference"
        out[name] = {"delta": delta, "se": se, "label": lab}
    return out


def map_cost_figure(variants: dict, lang: str = "en"):
    """mAP@0.5:0.95 ± std against GFLOPs (left) and activation MiB per training step (right).

    Not training seconds: on a shared machine those measure the load more than the model."""
    from ...inspect.plots import _figure

    fig = _figure(9.0, 3.4)
    for j, (key, xlabel) in enumerate((("gflops", pick(lang, "forward GFLOPs per image", "每张图像的前向 GFLOPs")),
                                       ("act_mem_mb", pick(lang, "activation memory per training step (MiB)", "每个训练步的激活内存（MiB）")))):
        ax = fig.add_subplot(1, 2, j + 1)
        for name, v in variants.items():
            x = v[key]["mean"] if isinstance(v[key], dict) else v[key]
            ax.errorbar(x, 100 * v["map50_95"]["mean"], yerr=100 * v["map50_95"]["std"], fmt="o", capsize=3, label=label(name, lang))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(pick(lang, "val mAP@0.5:0.95 (%)", "验证集 mAP@0.5:0.95（%）"))
        ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle(pick(lang, "Detection accuracy against cost (mean ± std over seeds)", "检测精度与开销（多个种子的均值 ± 标准差）"), fontsize=9)
    return fig


def _draw_boxes(ax, image, boxes, classes, color, dashed=False, scores=None):
    from matplotlib.patches import Rectangle

    for k, (c, x1, y1, x2, y2) in enumerate(boxes):
        ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, edgecolor=color, linewidth=1.2, linestyle="--" if dashed else "-"))
        if scores is not None:
            ax.text(x1, y1 - 1, f"{classes[int(c)]} {scores[k]:.2f}", color=color, fontsize=6, va="bottom")


def boxes_figure(models: dict, images: torch.Tensor, targets: list, classes, lang: str = "en", conf: float = 0.3):
    """One row per model, one column per image: predictions (solid, score ≥ ``conf``) over ground truth (dashed)."""
    from ...inspect.plots import _figure

    n = images.shape[0]
    fig = _figure(2.3 * n, 2.5 * len(models))
    for r, (name, model) in enumerate(models.items()):
        preds = model.predict(images.to(next(model.parameters()).device), conf=conf, iou=0.6)
        for j in range(n):
            ax = fig.add_subplot(len(models), n, r * n + j + 1)
            img = images[j].mean(0) if images.shape[1] > 1 else images[j, 0]
            ax.imshow(img.cpu().numpy(), cmap="gray", vmin=0, vmax=1)
            _draw_boxes(ax, img, targets[j].tolist(), classes, "lime", dashed=True)
            p = preds[j].cpu()
            _draw_boxes(ax, img, [[c, *b] for *b, _, c in p.tolist()], classes, "red", scores=p[:, 4].tolist())
            ax.set_xticks([])
            ax.set_yticks([])
            if j == 0:
                ax.set_ylabel(label(name, lang), fontsize=8)
    fig.suptitle(pick(lang, "Validation images: predictions (red, score ≥ 0.3) and ground truth (green, dashed)",
                      "验证图像：预测框（红色，分数 ≥ 0.3）与真实框（绿色虚线）"), fontsize=9)
    return fig


def attention_for_detection(model, image: torch.Tensor):
    """The weights (heads, N, N) of the model's MHSA with the largest map on one image, that map's
    (h, w), the cell under the centre of the best detection (the map's centre when nothing is
    detected) and that detection's row (x1, y1, x2, y2, score, class), or None."""
    import attnkit

    with attnkit.inspect.capture(model) as rec:
        model(image[None])
    w = max((a[0].detach() for a in rec.attentions), key=lambda a: a.shape[-1])  # (heads, N, N): P4 over P5 when both
    side = math.isqrt(w.shape[-1])
    stride = image.shape[-1] // side
    det = model.predict(image[None], conf=0.0)[0]
    if not len(det):
        return w, (side, side), (side // 2, side // 2), None
    x1, y1, x2, y2 = det[0, :4].tolist()
    cell = (min(side - 1, max(0, int((y1 + y2) / 2 // stride))), min(side - 1, max(0, int((x1 + x2) / 2 // stride))))
    return w, (side, side), cell, det[0]


def attention_figure(model, image: torch.Tensor, classes, variant: str, lang: str = "en"):
    """:func:`attnkit.inspect.vision.plot_pixel_attention` for the detection's cell, the box drawn in white."""
    from matplotlib.patches import Rectangle

    from ...inspect.vision import plot_pixel_attention

    w, grid, cell, box = attention_for_detection(model, image)
    what = f"{classes[int(box[5])]} {float(box[4]):.2f}" if box is not None else pick(lang, "no detection", "无检测")
    title = pick(lang, f"{label(variant)}: where the {grid[0]}x{grid[1]} map's cell under the top detection ({what}) looks",
                 f"{label(variant, 'zh')}：最高分检测（{what}）中心所在的 {grid[0]}x{grid[1]} 特征图单元在看哪里")
    fig = plot_pixel_attention(w, grid, cell, image.mean(0).cpu(), title=title, lang=lang)
    if box is not None:
        scale = grid[0] / image.shape[-1]  # the panels are drawn in map cells
        x1, y1, x2, y2 = (float(v) * scale for v in box[:4])
        for ax in fig.axes[: w.shape[0]]:
            ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, edgecolor="white", linewidth=1.2, linestyle="--"))
    return fig


def make_figures(ctx, variants: dict, trained: dict, data) -> list[str]:
    """Draw the figures (both languages) into the run folder; the English file names."""
    from ...data.detection_set import unpad

    files = []
    draw_both(ctx.save_figure, "map_vs_cost.png", lambda lang: map_cost_figure(variants, lang))
    files.append("map_vs_cost.png")
    mhsa = next((n for n in ("mhsa_p5", "mhsa_neck", "mhsa_p4p5") if n in trained), None)
    shown = {n: trained[n] for n in ("plain", mhsa) if n in trained}
    if shown:
        imgs, tg = data.val_x[:4], unpad(data.val_t[:4])
        draw_both(ctx.save_figure, "boxes.png", lambda lang: boxes_figure(shown, imgs, tg, data.classes, lang))
        files.append("boxes.png")
    att = next((n for n in ("mhsa_p4p5", "mhsa_p5", "mhsa_neck") if n in trained), None)
    if att is not None:
        draw_both(ctx.save_figure, "mhsa_attention.png", lambda lang: attention_figure(trained[att], data.val_x[0], data.classes, att, lang))
        files.append("mhsa_attention.png")
    return files
