"""The vision experiment's reading of the trained models, its figures, the published numbers and
its report section — every sentence generated from the numbers of the run.

* :func:`read_attention` — what the attention learned, measured on test images:
  SE/ECA/CBAM channel gates — η², the share of the gates' variance across images explained by the
  image's class (0: one gate for every image, 1: the gate identifies the class); CBAM's first-stage
  spatial gate on the garment versus the background; MHSA2d's mean attention distance against
  uniform attention's; the ViT's class-token rollout mass on object patches against their share.
* :func:`verdicts` — per attention model, the accuracy difference to the plain ResNet and whether
  it exceeds the seed spread ``sqrt(std_a² + std_b²)``: "helped", "hurt" or "no clear difference".
* :data:`PUBLISHED` — ImageNet top-1 of ResNet-50 with each module, as reported in the ECA-Net paper.

Shape legend: B images, C channels, K classes, h×w map or patch grid, N = h·w.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F

#: ImageNet-1k val top-1 (%), ResNet-50 backbone, 224 single crop, one training protocol for all
#: four: Wang et al. 2020, ECA-Net, https://arxiv.org/abs/1910.03151, Table 2.
PUBLISHED_SOURCE = "Wang et al. 2020 (ECA-Net), arXiv:1910.03151, Table 2: ImageNet-1k top-1, ResNet-50 backbone"
PUBLISHED = {
    "source": PUBLISHED_SOURCE,
    "rows": [
        {"model": "resnet", "name": "ResNet-50", "top1": 75.20},
        {"model": "se", "name": "SE-ResNet-50 (Hu et al.)", "top1": 76.71},
        {"model": "cbam", "name": "CBAM-ResNet-50 (Woo et al.)", "top1": 77.34},
        {"model": "eca", "name": "ECA-ResNet-50 (Wang et al.)", "top1": 77.48},
    ],
}
DATA_NAMES = {"fashion-mnist": "Fashion-MNIST", "digits": "scikit-learn's 8×8 digits"}
LABELS = {"resnet": "ResNet", "se": "+SE", "eca": "+ECA", "cbam": "+CBAM", "mhsa": "+MHSA (last stage)", "vit": "ViT"}
OBJECT_THRESHOLD = 0.1  # raw pixel value above which a Fashion-MNIST pixel belongs to the garment


def verdicts(models: dict) -> dict:
    """Accuracy difference of each model to ``resnet`` and whether it exceeds the seed spread."""
    if "resnet" not in models:
        return {}
    base = models["resnet"]
    out = {}
    for name, m in models.items():
        if name == "resnet":
            continue
        delta = m["acc"]["mean"] - base["acc"]["mean"]
        spread = math.hypot(m["acc"]["std"], base["acc"]["std"])
        label = "helped" if delta > spread else "hurt" if delta < -spread else "no clear difference"
        out[name] = {
            "delta_acc": delta, "spread": spread, "label": label,
            "extra_params": m["params"] - base["params"], "params_ratio": m["params"] / base["params"],
            "flops_ratio": m["flops"] / base["flops"] if base["flops"] else None,
            "time_ratio": m["train_time_s"]["mean"] / base["train_time_s"]["mean"] if base["train_time_s"]["mean"] else None,
        }
    return out


# ------------------------------------------------------------------------------------ reading
def eta_squared(g: torch.Tensor, y: torch.Tensor) -> float:
    """Share of the variance of gates ``g`` (B, C) across images explained by the class ``y`` (B,)."""
    g = g.double()
    mu = g.mean(0, keepdim=True)
    total = float(((g - mu) ** 2).sum())
    between = sum(float((y == k).sum()) * float(((g[y == k].mean(0) - mu[0]) ** 2).sum()) for k in y.unique())
    return between / total if total > 0 else 0.0


@torch.no_grad()
def read_gates(model, x: torch.Tensor, raw: torch.Tensor, y: torch.Tensor) -> dict:
    from ..inspect.vision import capture_gates

    with capture_gates(model) as rec:
        model(x)
    stages = []
    for name, g in rec.channel.items():
        stages.append({"gate": name, "channels": int(g.shape[1]), "mean": float(g.mean()), "eta2_class": eta_squared(g, y),
                       "channel_spread": float(g.mean(0).std())})
    out = {"stages": stages, "last": stages[-1] if stages else None}
    if rec.spatial:
        name, s = next(iter(rec.spatial.items()))  # the first stage: the image's own resolution with the CIFAR stem
        mask = F.adaptive_avg_pool2d((raw > OBJECT_THRESHOLD).double(), s.shape[-2:])[:, 0] > 0.5  # (B, h, w)
        out["spatial"] = {"gate": name, "on_object": float(s[mask].mean()), "on_background": float(s[~mask].mean()),
                          "object_share": float(mask.double().mean())}
    return out


@torch.no_grad()
def read_mhsa(model, x: torch.Tensor) -> dict:
    import attnkit

    with attnkit.inspect.capture(model, record="weights") as rec:  # dense (B, heads, N, N) whatever B·N²
        model(x)
    w = rec.attentions[-1].double()  # (B, heads, N, N)
    n = w.shape[-1]
    side = math.isqrt(n)
    if side * side != n:
        return {}
    yy, xx = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    pos = torch.stack([yy.flatten(), xx.flatten()], 1).double()
    dist = torch.cdist(pos, pos)  # (N, N) pixel distances on the map
    mean_dist = float((w * dist).sum(-1).mean())
    per_head = [float(v) for v in (w * dist).sum(-1).mean((0, 2))]
    return {"grid": [side, side], "mean_distance": mean_dist, "uniform_distance": float(dist.mean()),
            "per_head_distance": per_head, "self_mass": float(w.diagonal(dim1=-2, dim2=-1).mean())}


@torch.no_grad()
def read_vit(model, x: torch.Tensor, raw: torch.Tensor) -> dict:
    import attnkit

    with attnkit.inspect.capture(model, record="weights") as rec:
        model(x)
    roll = attnkit.inspect.attention_rollout([a.double() for a in rec.attentions])  # (B, T, T)
    h, w = model.grid
    cls = roll[:, 0, 1:]  # (B, N): the class token's rollout over the patches
    obj = (F.adaptive_avg_pool2d((raw > OBJECT_THRESHOLD).double(), (h, w))[:, 0] > 0.5).flatten(1)  # (B, N)
    return {"grid": [h, w], "cls_mass_on_object": float((cls * obj).sum(1).div(cls.sum(1)).mean()),
            "object_patch_share": float(obj.double().mean()), "cls_mass_on_patches": float(cls.sum(1).mean())}


def read_attention(trained: dict, x: torch.Tensor, raw: torch.Tensor, y: torch.Tensor, classes) -> dict:
    """Measurements of what each trained model's attention does on test images ``x`` (normalised),
    ``raw`` the same images in [0, 1]."""
    out = {}
    for name in ("se", "eca", "cbam"):
        if name in trained:
            out[name] = read_gates(trained[name], x, raw, y)
    if "mhsa" in trained:
        out["mhsa"] = read_mhsa(trained["mhsa"], x)
    if "vit" in trained:
        out["vit"] = read_vit(trained["vit"], x, raw)
    return out


# ------------------------------------------------------------------------------------ figures
def _pick_images(y: torch.Tensor, count: int) -> list[int]:
    """The first test image of each of ``count`` different classes."""
    seen, idx = set(), []
    for i, k in enumerate(y.tolist()):
        if k not in seen:
            seen.add(k)
            idx.append(i)
        if len(idx) == count:
            break
    return idx


@torch.no_grad()
def make_figures(ctx, models: dict, trained: dict, x: torch.Tensor, raw: torch.Tensor, y: torch.Tensor, classes) -> list[str]:
    import attnkit
    from ..inspect.plots import _figure
    from ..inspect.vision import capture_gates, draw_heat, plot_channel_gates, plot_pixel_attention, plot_vit_attention

    files = []
    # accuracy against parameters and against FLOPs, mean ± std over seeds
    fig = _figure(10.0, 4.0)
    for i, (key, scale, label) in enumerate([("params", 1e3, "parameters (thousands)"), ("flops", 1e6, "forward MFLOPs per image")]):
        ax = fig.add_subplot(1, 2, i + 1)
        for name, m in models.items():
            ax.errorbar(m[key] / scale, 100 * m["acc"]["mean"], yerr=100 * m["acc"]["std"], fmt="o", capsize=4, label=LABELS.get(name, name))
            ax.annotate(LABELS.get(name, name), (m[key] / scale, 100 * m["acc"]["mean"]), textcoords="offset points", xytext=(5, 4), fontsize=8)
        ax.set_xlabel(label)
        ax.set_ylabel("test accuracy (%), mean ± std over seeds")
        ax.grid(alpha=0.3)
    ctx.save_figure(fig, "accuracy_vs_cost.png")
    files.append("accuracy_vs_cost.png")

    picks = _pick_images(y, 3)
    for name in ("se", "eca", "cbam"):
        if name not in trained:
            continue
        with capture_gates(trained[name]) as rec:
            trained[name](x[:500])
        gate_name, g = list(rec.channel.items())[-1]
        ys = y[: g.shape[0]]
        ks = [int(y[i]) for i in picks]
        per_class = torch.stack([g[ys == k].mean(0) for k in ks])  # (3, C)
        fig = plot_channel_gates(per_class, labels=[str(classes[k]) for k in ks],
                                 title=f"{LABELS[name]}: last-stage channel gates, mean over test images of each class")
        ctx.save_figure(fig, f"gates_{name}.png")
        files.append(f"gates_{name}.png")

    if "cbam" in trained:
        idx = _pick_images(y, 4)
        with capture_gates(trained["cbam"]) as rec:
            trained["cbam"](x[idx])
        s = next(iter(rec.spatial.values()))  # (4, h, w)
        fig = _figure(10.0, 2.9)
        for j, i in enumerate(idx):
            ax = fig.add_subplot(1, len(idx), j + 1)
            draw_heat(ax, s[j], raw[i, 0], vmax=1.0)
            ax.set_title(f"{classes[int(y[i])]}", fontsize=8)
        fig.suptitle("CBAM first-stage spatial gate over the image (bright = kept)", fontsize=9)
        ctx.save_figure(fig, "cbam_spatial.png")
        files.append("cbam_spatial.png")

    if "mhsa" in trained:
        i = picks[0]
        with attnkit.inspect.capture(trained["mhsa"]) as rec:
            trained["mhsa"](x[i : i + 1])
        w = rec.attentions[-1][0]  # (heads, N, N)
        side = math.isqrt(w.shape[-1])
        if side * side == w.shape[-1]:
            fig = plot_pixel_attention(w, (side, side), (side // 2, side // 2), raw[i, 0],
                                       title=f"MHSA2d after the last stage: where the centre pixel of the {side}x{side} map looks ({classes[int(y[i])]})")
            ctx.save_figure(fig, "mhsa_query.png")
            files.append("mhsa_query.png")
            if ctx.is_main:  # the interactive viewer: click a pixel of the map to make it the query
                attnkit.inspect.save_html(ctx.path("viewer_mhsa.html"), [w], patch_grid=(side, side), image=raw[i, 0],
                                          title=f"MHSA2d, last stage ({classes[int(y[i])]})")
                files.append("viewer_mhsa.html")

    if "vit" in trained:
        i = picks[0]
        with attnkit.inspect.capture(trained["vit"]) as rec:
            trained["vit"](x[i : i + 1])
        fig = plot_vit_attention(rec.attentions, trained["vit"].grid, raw[i, 0],
                                 title=f"ViT: class-token attention per head and rollout ({classes[int(y[i])]})")
        ctx.save_figure(fig, "vit_attention.png")
        files.append("vit_attention.png")
        if ctx.is_main:
            attnkit.inspect.save_html(ctx.path("viewer_vit.html"), [a[0] for a in rec.attentions], patch_grid=trained["vit"].grid,
                                      num_prefix_tokens=1, image=raw[i, 0], title=f"ViT ({classes[int(y[i])]})")
            files.append("viewer_vit.html")
    return files


# ------------------------------------------------------------------------------------ report
def _n(k: int, word: str) -> str:
    return f"{k} {word}{'' if k == 1 else 's'}"


def _pct(v: float) -> str:
    return f"{100 * v:.2f}"


def reading_sentences(results: dict) -> list[str]:
    """The plain-language reading, generated from the numbers."""
    models, verdict, reading, data = results["models"], results.get("verdict", {}), results.get("reading", {}), results["data"]
    seeds = len(next(iter(models.values()))["acc"]["per_seed"])
    out = []
    if "resnet" in models:
        b = models["resnet"]
        out.append(f"On {DATA_NAMES.get(data['name'], data['name'])} ({data['train']:,} training and {data['test']:,} test images, "
                   f"{_n(b['epochs'], 'epoch')}, {_n(seeds, 'seed')}) the plain ResNet reached {_pct(b['acc']['mean'])}% ± {_pct(b['acc']['std'])}% test accuracy "
                   f"with {b['params']:,} parameters.")
    for name, v in verdict.items():
        m = models[name]
        cost = (f"{v['extra_params']:+,} parameters ({100 * (v['params_ratio'] - 1):+.1f}%), "
                f"{100 * (v['flops_ratio'] - 1):+.1f}% FLOPs, {v['time_ratio']:.2f}× the training time")
        what = {"helped": "helped", "hurt": "hurt", "no clear difference": "made no difference larger than the seed spread"}[v["label"]]
        out.append(f"{LABELS.get(name, name)}: {_pct(m['acc']['mean'])}% ± {_pct(m['acc']['std'])}%, "
                   f"{100 * v['delta_acc']:+.2f} points against the plain ResNet (spread ±{100 * v['spread']:.2f}) — it {what}; cost {cost}.")
    attn = [n for n in verdict if n != "vit"]
    if attn and not any(verdict[n]["label"] == "helped" for n in attn):
        out.append("None of the attention modules beat the plain network by more than the seed-to-seed spread here: the "
                   "ImageNet gains the papers report (below) did not show on this small, low-resolution task at this training budget.")
    for name in ("se", "eca", "cbam"):
        r = reading.get(name, {}).get("last")
        if r:
            kind = "depend strongly on the class" if r["eta2_class"] > 0.5 else "depend partly on the class" if r["eta2_class"] > 0.2 else "barely depend on the class"
            out.append(f"{LABELS[name]}'s last-stage gates (C = {r['channels']}) average {r['mean']:.2f} and {kind}: "
                       f"η² = {r['eta2_class']:.2f} of their variance across test images is explained by the class "
                       f"(the gate learned to re-weight channels per kind of garment when η² is high).")
    sp = reading.get("cbam", {}).get("spatial")
    if sp:
        out.append(f"CBAM's first-stage spatial gate averages {sp['on_object']:.2f} on the garment and {sp['on_background']:.2f} "
                   f"on the background ({100 * sp['object_share']:.0f}% of the pixels are garment).")
    mh = reading.get("mhsa")
    if mh:
        near = abs(mh["mean_distance"] - mh["uniform_distance"]) < 0.05 * mh["uniform_distance"]
        how = ("about as far as uniform attention would, so its heads spread their weight over the whole map"
               if near else "nearer than uniform attention, so its heads favour neighbouring positions"
               if mh["mean_distance"] < mh["uniform_distance"] else "farther than uniform attention would")
        out.append(f"MHSA2d on the {mh['grid'][0]}×{mh['grid'][1]} last-stage map attends at a mean distance of "
                   f"{mh['mean_distance']:.2f} pixels (uniform attention: {mh['uniform_distance']:.2f}), {how}; a pixel keeps "
                   f"{mh['self_mass']:.2f} of the weight on itself.")
    vt = reading.get("vit")
    if vt:
        out.append(f"The ViT's class-token rollout puts {100 * vt['cls_mass_on_object']:.0f}% of its patch mass on garment "
                   f"patches, which are {100 * vt['object_patch_share']:.0f}% of the patches.")
    return out


def section(results, out_dir, lang: str = "en"):
    from ..report.html import esc, png_img, table
    from .registry import Section

    run_dir = Path(getattr(results, "run_dir", out_dir))
    models, data = results["models"], results["data"]
    parts = []
    if data.get("notice"):
        parts.append(f"<p><strong>Notice:</strong> {esc(data['notice'])}</p>")
    parts.append("<p>" + "</p><p>".join(esc(s) for s in reading_sentences(results)) + "</p>")
    rows = []
    verdict = results.get("verdict", {})
    for name, m in models.items():
        v = verdict.get(name)
        rows.append([LABELS.get(name, name), f"{_pct(m['acc']['mean'])} ± {_pct(m['acc']['std'])}",
                     f"{100 * v['delta_acc']:+.2f} ({v['label']})" if v else "—", f"{m['params']:,}", f"{m['flops'] / 1e6:.2f}",
                     f"{m['train_time_s']['mean']:.1f}", f"{m['images_per_s']['mean']:.0f}"])
    parts.append(table(["model", "test accuracy %", "Δ vs ResNet (points)", "parameters", "MFLOPs / image", "train s", "train images/s"], rows))
    parts.append("<p>Times are the wall-clock seconds of each model's training in this run (mean over seeds); other programs "
                 "running at the same time inflate them, so compare them only within a run on an otherwise idle machine. "
                 "FLOPs: one image's forward pass, counted by torch.utils.flop_counter.</p>")
    pub = results.get("published", PUBLISHED)
    base = next((r["top1"] for r in pub["rows"] if r["model"] == "resnet"), None)
    parts.append(f"<p>Published, for scale (not our numbers): {esc(pub['source'])}.</p>")
    parts.append(table(["model", "ImageNet top-1 %", "Δ vs ResNet-50"],
                       [[r["name"], f"{r['top1']:.2f}", f"{r['top1'] - base:+.2f}" if base is not None else "—"] for r in pub["rows"]]))
    for f in results.get("figures", []):
        p = run_dir / f
        if p.exists() and p.suffix == ".png":
            parts.append(png_img(p, f))
    pages = [f for f in results.get("figures", []) if f.endswith(".html") and (run_dir / f).exists()]
    if pages:
        parts.append("<p>Interactive viewers (click a patch or pixel to make it the query): "
                     + ", ".join(f'<a href="{esc((run_dir / f).resolve().as_uri())}">{esc(f)}</a>' for f in pages) + ".</p>")
    return Section("Attention in vision: SE, ECA, CBAM, MHSA2d and a ViT on Fashion-MNIST", "\n".join(parts))
