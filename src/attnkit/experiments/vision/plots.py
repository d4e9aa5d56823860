"""The vision experiment's reading of the trained models and its figures — every number measured on
the run's test images.

* :func:`read_attention` — what the attention learned, measured on test images:
  SE/ECA/CBAM channel gates — η², the share of the gates' variance across images explained by the
  image's class (0: one gate for every image, 1: the gate identifies the class); CBAM's first-stage
  spatial gate on the garment versus the background; MHSA2d's mean attention distance against
  uniform attention's; the ViT's class-token rollout mass on object patches against their share.
* :func:`verdicts` — per attention model, the accuracy difference to the plain ResNet and whether
  it exceeds the seed spread ``sqrt(std_a² + std_b²)``: "helped", "hurt" or "no clear difference"
  ("one seed" when either model ran one seed: there is no spread to judge by).
* :func:`make_figures` — the run's figures, each saved in English and, in ``zh/``, Chinese (the maps
  over images are drawn by :mod:`.map_figures`, the gates by :mod:`.gate_figures`, re-exported here);
  :func:`run_figures` — the ones a finished run can be drawn again from (``results.json`` and the
  viewers' weights), by ``python -m attnkit.experiments.redraw_zh``;
* the prose, tables and published numbers of the report section live in :mod:`.section`
  (re-exported here: :func:`reading_sentences`, :func:`section`, :data:`PUBLISHED`, :data:`PAPERS`).

Shape legend: B images, C channels, K classes, h×w map or patch grid, N = h·w.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...page.significance import compare

from .gate_figures import gate_figures, gates_figure, pick_images, plotted_gates  # noqa: F401 (re-exported)
from .map_figures import class_name, pixel_attention_figure, spatial_gate_figure, vit_attention_figure  # noqa: F401 (re-exported)
from .section import DATA_NAMES, LABELS, PAPERS, PUBLISHED, PUBLISHED_SOURCE, reading_sentences, section  # noqa: F401 (re-exported)

OBJECT_THRESHOLD = 0.1  # raw pixel value above which a Fashion-MNIST pixel belongs to the garment
def verdicts(models: dict) -> dict:
    """Accuracy difference of each model to ``resnet`` and whether it exceeds 2σ of the seed spreads
    (:func:`attnkit.page.significance.compare`; ``spread`` is that 2σ bar)."""
    if "resnet" not in models:
        return {}
    base = models["resnet"]
    out = {}
    for name, m in models.items():
        if name == "resnet":
            continue
        delta = m["acc"]["mean"] - base["acc"]["mean"]
        seeds = min(len(m["acc"].get("per_seed", [0, 0])), len(base["acc"].get("per_seed", [0, 0])))
        label, spread = compare(delta, m["acc"]["std"], base["acc"]["std"], seeds)  # the page's 2σ rule
        out[name] = {
            "delta_acc": delta, "spread": spread, "label": label,
            "extra_params": m["params"] - base["params"], "params_ratio": m["params"] / base["params"],
            "flops_ratio": m["flops"] / base["flops"] if base["flops"] else None,  # cost counted, not timed: load-independent
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
    from ...inspect.vision import capture_gates

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
    entropy = -(w * w.clamp_min(1e-300).log()).sum(-1) / math.log(n)  # (B, heads, N): 0 one key, 1 uniform
    return {"grid": [side, side], "mean_distance": mean_dist, "uniform_distance": float(dist.mean()),
            "per_head_distance": per_head, "self_mass": float(w.diagonal(dim1=-2, dim2=-1).mean()),
            "max_weight": float(w.amax(-1).mean()), "entropy": float(entropy.mean())}


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
MARKERS = {"resnet": "o", "se": "s", "eca": "^", "cbam": "D", "mhsa": "P", "vit": "X"}


def accuracy_cost_figure(models: dict, lang: str = "en"):
    """Test accuracy (mean ± std over seeds) against parameters and against forward FLOPs, one
    marker and colour per model named in a legend below the plots (labels beside the points
    overlapped where models cost the same)."""
    from ...page.figures import WIDTH_IN, _plt, pick

    plt = _plt()
    t = lambda en, zh: pick(lang, en, zh)  # noqa: E731
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH_IN, 4.6), constrained_layout=True)
    handles = []
    for ax, (key, scale, label) in zip(axes, [("params", 1e3, t("parameters (thousands)", "参数量（千）")),
                                              ("flops", 1e6, t("forward MFLOPs per image", "每张图像前向 MFLOPs"))]):
        for i, (name, m) in enumerate(models.items()):
            h = ax.errorbar(m[key] / scale, 100 * m["acc"]["mean"], yerr=100 * m["acc"]["std"], fmt=MARKERS.get(name, "o"), ms=8,
                            capsize=4, color=f"C{i}", label=t("+MHSA (last stage)", "+MHSA（最后一个阶段）") if name == "mhsa" else LABELS.get(name, name))
            if ax is axes[0]:
                handles.append(h)
        ax.set_xlabel(label)
        ax.set_ylabel(t("test accuracy (%), mean ± std over seeds", "测试准确率（%），种子间均值 ± 标准差"))
        ax.grid(alpha=0.3)
        ax.margins(x=0.12, y=0.12)
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False)
    return fig


def run_figures(results) -> list[tuple[str, object]]:
    """``(file name, draw(lang) -> figure)`` of the figures a finished run can be drawn again from:
    accuracy against cost from ``results`` (its ``results.json``), and, when ``results`` has the
    ``run_dir`` of a :class:`~attnkit.experiments.Results`, the MHSA2d and ViT maps from the weights
    of its viewers (:mod:`.viewer_figures`); the gate figures from ``results["plotted_gates"]``
    (:func:`plotted_gates`), which runs drawn before it was stored do not hold."""
    from .viewer_figures import viewer_figures

    out = [("accuracy_vs_cost.png", lambda lang: accuracy_cost_figure(results["models"], lang))] if results.get("models") else []
    out += gate_figures(results.get("plotted_gates") or {})  # stored by runs of this version
    run_dir = getattr(results, "run_dir", None)
    return out + (viewer_figures(run_dir) if run_dir is not None else [])


@torch.no_grad()
def make_figures(ctx, models: dict, trained: dict, x: torch.Tensor, raw: torch.Tensor, y: torch.Tensor, classes,
                 plotted: dict | None = None) -> list[str]:
    """Save the run's figures in both languages; ``plotted``: :func:`plotted_gates` of the same
    models and images (computed here when not given)."""
    import attnkit
    from ...page.figures import draw_both

    files = []  # the English files; each has a Chinese copy in zh/ when a CJK font is found
    # accuracy against parameters and against FLOPs, mean ± std over seeds
    draw_both(ctx.save_figure, "accuracy_vs_cost.png", lambda lang: accuracy_cost_figure(models, lang))
    files.append("accuracy_vs_cost.png")

    picks = pick_images(y, 3)
    plotted = plotted_gates(trained, x, raw, y, classes) if plotted is None else plotted
    for name, draw in gate_figures(plotted):
        draw_both(ctx.save_figure, name, draw)
        files.append(name)

    if "mhsa" in trained:
        i = picks[0]
        with attnkit.inspect.capture(trained["mhsa"]) as rec:
            trained["mhsa"](x[i : i + 1])
        w = rec.attentions[-1][0]  # (heads, N, N)
        side = math.isqrt(w.shape[-1])
        if side * side == w.shape[-1]:
            draw_both(ctx.save_figure, "mhsa_query.png", lambda lang: pixel_attention_figure(w, side, raw[i, 0], classes[int(y[i])], lang))
            files.append("mhsa_query.png")
            if ctx.is_main:  # the interactive viewer: click a pixel of the map to make it the query
                attnkit.inspect.save_html(ctx.path("viewer_mhsa.html"), [w], patch_grid=(side, side), image=raw[i, 0],
                                          title=f"MHSA2d, last stage ({classes[int(y[i])]})")
                files.append("viewer_mhsa.html")

    if "vit" in trained:
        i = picks[0]
        with attnkit.inspect.capture(trained["vit"]) as rec:
            trained["vit"](x[i : i + 1])
        attentions = [a.detach() for a in rec.attentions]
        draw_both(ctx.save_figure, "vit_attention.png",
                  lambda lang: vit_attention_figure(attentions, trained["vit"].grid, raw[i, 0], classes[int(y[i])], lang))
        files.append("vit_attention.png")
        if ctx.is_main:
            attnkit.inspect.save_html(ctx.path("viewer_vit.html"), [a[0] for a in rec.attentions], patch_grid=trained["vit"].grid,
                                      num_prefix_tokens=1, image=raw[i, 0], title=f"ViT ({classes[int(y[i])]})")
            files.append("viewer_vit.html")
    return files
