"""The vision run's gate figures and the numbers they draw: SE/ECA/CBAM's last-stage channel gates
averaged per class (a class × channel heatmap), and CBAM's first-stage spatial gate over a few test
images. :func:`plotted_gates` reads those numbers from the trained models; a run stores them in
``results.json`` (``plotted_gates``), so :func:`gate_figures` can draw the figures again, in English
or Chinese, without the models (``python -m attnkit.experiments.redraw_zh``).

Shape legend: B images, C channels, K classes, h×w gate map, H×W image.
"""

from __future__ import annotations

import torch

from .map_figures import class_name, spatial_gate_figure
from .section import LABELS


def pick_images(y: torch.Tensor, count: int) -> list[int]:
    """The first test image of each of ``count`` different classes."""
    seen, idx = set(), []
    for i, k in enumerate(y.tolist()):
        if k not in seen:
            seen.add(k)
            idx.append(i)
        if len(idx) == count:
            break
    return idx


def gates_figure(per_class: torch.Tensor, labels: list[str], title: str, lang: str = "en"):
    """Channel gates (K classes, C channels) as a class × channel heatmap on the gates' 0-to-1 scale,
    with a colour bar: which channels a class turns down reads along a row, how classes differ down a column."""
    from ...page.figures import WIDTH_IN, _plt, pick

    plt = _plt()
    g = per_class.detach().float().numpy()
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 1.2 + 0.45 * g.shape[0]), constrained_layout=True)
    im = ax.imshow(g, aspect="auto", cmap="magma", vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel(pick(lang, "channel", "通道"))
    ax.set_title(title, fontsize=10)
    fig.colorbar(im, ax=ax, label=pick(lang, "gate (sigmoid, 0 = channel off)", "门控（sigmoid，0 = 关闭该通道）"), pad=0.01)
    return fig


def _round(t: torch.Tensor, digits: int) -> list:
    """A tensor as nested lists rounded to ``digits`` decimals: a figure's numbers, small in ``results.json``."""
    return torch.round(t.detach().double() * 10**digits).div(10**digits).tolist()


@torch.no_grad()
def plotted_gates(trained: dict, x: torch.Tensor, raw: torch.Tensor, y: torch.Tensor, classes) -> dict:
    """The numbers the gate figures draw, JSON-able (stored in ``results.json``, so that a finished
    run's gate figures can be drawn again in another language by :func:`gate_figures`):

    * ``channel[name]`` for SE/ECA/CBAM: the last stage's gate, ``classes`` (3 class names, English)
      and ``per_class`` (3, C), the gates averaged over the test images of each class (up to 500 images);
    * ``spatial`` for CBAM: the first stage's spatial gate ``gates`` (4, h, w) over ``images`` (4, H, W)
      in [0, 1], one test image of each of 4 classes named in ``classes``."""
    from ...inspect.vision import capture_gates

    out: dict = {"channel": {}}
    picks = pick_images(y, 3)
    for name in ("se", "eca", "cbam"):
        if name not in trained:
            continue
        with capture_gates(trained[name]) as rec:
            trained[name](x[:500])
        gate_name, g = list(rec.channel.items())[-1]
        ys = y[: g.shape[0]]
        ks = [int(y[i]) for i in picks]
        per_class = torch.stack([g[ys == k].mean(0) for k in ks])  # (3, C)
        out["channel"][name] = {"gate": gate_name, "classes": [str(classes[k]) for k in ks], "per_class": _round(per_class, 4)}
    if "cbam" in trained:
        idx = pick_images(y, 4)
        with capture_gates(trained["cbam"]) as rec:
            trained["cbam"](x[idx])
        s = next(iter(rec.spatial.values()))  # (4, h, w)
        out["spatial"] = {"classes": [str(classes[int(y[i])]) for i in idx], "gates": _round(s, 3), "images": _round(raw[idx, 0], 3)}
    return out


def gate_figures(plotted: dict) -> list[tuple[str, object]]:
    """``(file name, draw(lang) -> figure)`` of the gate figures from :func:`plotted_gates`' numbers."""
    from ...page.figures import pick

    out = []
    for name, d in (plotted.get("channel") or {}).items():
        title = (f"{LABELS.get(name, name)}: last-stage channel gates, mean over test images of each class",
                 f"{LABELS.get(name, name)}：最后一个阶段的通道门控，各类别测试图像上的均值")
        out.append((f"gates_{name}.png", lambda lang, d=d, title=title: gates_figure(
            torch.tensor(d["per_class"], dtype=torch.float32), [class_name(c, lang) for c in d["classes"]], pick(lang, *title), lang)))
    sp = plotted.get("spatial")
    if sp:
        out.append(("cbam_spatial.png", lambda lang: spatial_gate_figure(
            torch.tensor(sp["gates"], dtype=torch.float32), torch.tensor(sp["images"], dtype=torch.float32), [class_name(c, lang) for c in sp["classes"]], lang)))
    return out
