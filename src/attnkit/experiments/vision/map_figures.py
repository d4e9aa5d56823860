"""The vision run's figures drawn over images, in English or Chinese (``lang``): CBAM's spatial gate,
MHSA2d's attention from the centre pixel, and the ViT's class-token maps with their rollout; the
class names of Fashion-MNIST in Chinese for the Chinese copies (:func:`class_name`).

Each function returns the figure; :func:`.plots.make_figures` saves it in both languages
(:func:`attnkit.page.figures.draw_both`), and :mod:`.viewer_figures` draws the two attention maps
again from a finished run's viewers.

Shape legend: n images, h×w map, N = h·w pixels or patches, heads attention heads, T = prefix + N tokens.
"""

from __future__ import annotations

import torch

CLASS_ZH = {"T-shirt/top": "T 恤/上衣", "Trouser": "裤子", "Pullover": "套头衫", "Dress": "连衣裙", "Coat": "外套",
            "Sandal": "凉鞋", "Shirt": "衬衫", "Sneaker": "运动鞋", "Bag": "包", "Ankle boot": "短靴"}  # Fashion-MNIST's classes


def class_name(name, lang: str = "en") -> str:
    """A class's name in the figures of ``lang`` (digits and unknown names as they are)."""
    return CLASS_ZH.get(str(name), str(name)) if lang == "zh" else str(name)


def spatial_gate_figure(gates: torch.Tensor, images: torch.Tensor, titles: list[str], lang: str = "en"):
    """CBAM's spatial gate (n, h, w) over each image (n, H, W), one panel per image titled by its class."""
    from ...inspect.plots import _figure
    from ...inspect.vision import draw_heat
    from ...page.figures import pick

    fig = _figure(10.0, 2.9)
    axes = []
    for j in range(len(titles)):
        ax = fig.add_subplot(1, len(titles), j + 1)
        im = draw_heat(ax, gates[j], images[j], vmax=1.0)
        ax.set_title(str(titles[j]), fontsize=8)
        axes.append(ax)
    fig.colorbar(im, ax=axes, shrink=0.85,
                 label=pick(lang, "gate (0 = pixel suppressed, 1 = kept)", "门控（0 = 抑制像素，1 = 保留）"))
    fig.suptitle(pick(lang, "CBAM first-stage spatial gate over the image (bright = kept)",
                      "CBAM 第一阶段在图像上的空间门控（亮 = 保留）"), fontsize=9)
    return fig


def pixel_attention_figure(weights: torch.Tensor, side: int, image: torch.Tensor, label, lang: str = "en"):
    """MHSA2d's last-stage weights (heads, N, N) of one image, N = side²: where the centre pixel looks."""
    from ...inspect.vision import plot_pixel_attention
    from ...page.figures import pick

    title = pick(lang, f"MHSA2d after the last stage: where the centre pixel of the {side}x{side} map looks ({class_name(label)})",
                 f"最后一个阶段之后的 MHSA2d：{side}x{side} 特征图的中心像素在看哪里（{class_name(label, lang)}）")
    return plot_pixel_attention(weights, (side, side), (side // 2, side // 2), image, title=title, lang=lang)


def vit_attention_figure(attentions: list, grid: tuple[int, int], image: torch.Tensor, label, lang: str = "en"):
    """The ViT's per-layer weights (1, heads, T, T) of one image: the class token's maps and rollout."""
    from ...inspect.vision import plot_vit_attention
    from ...page.figures import pick

    title = pick(lang, f"ViT: class-token attention per head and rollout ({class_name(label)})",
                 f"ViT：每个头的类别 token 注意力与 rollout（{class_name(label, lang)}）")
    return plot_vit_attention(attentions, grid, image, title=title, lang=lang)
