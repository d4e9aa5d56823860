"""Seeing attention in vision models: SE/ECA/CBAM gates, MHSA2d pixel maps, ViT patch maps.

* **Gates** (SE, ECA, CBAM's channel and spatial branches) are sigmoids, not softmaxes, so they do
  not go through :func:`attnkit.attention`. Every one is computed by a
  :class:`~attnkit.modules.gate.Gate` module; :func:`capture_gates` hooks them for the duration of a
  ``with`` block and keeps (B, C) channel gates and (B, H, W) spatial maps per module name. Nothing
  is stored on the model. A channel gate says how much the block scaled each channel for *this
  image*; a spatial map says where CBAM kept the features.
* **Self-attention** (MHSA2d, ViT) runs through :class:`~attnkit.MultiHeadAttention`, so
  :func:`attnkit.inspect.capture` records its weights while the fast backend runs; here are the
  image-shaped plots of them: one query pixel's attention over an H×W map
  (:func:`plot_pixel_attention`) and a ViT's per-head class-token maps beside the rollout
  (:func:`plot_vit_attention`).

Every plot takes a keyword-only ``lang``: ``"en"`` (default) or ``"zh"`` for its axis words, colour
bars and panel titles in Chinese (drawn in a CJK font, :mod:`attnkit.inspect.figure_text`); a
``title`` passed in is printed as given.

Shape legend: B batch, C channels, H×W feature map or patch grid, N = H·W, heads attention heads,
T = prefix + N tokens.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch import Tensor, nn

from .figure_text import in_language, word
from .plots import _figure, _finish, _image
from .rollout import attention_rollout

__all__ = ["GateRecorder", "capture_gates", "plot_channel_gates", "plot_spatial_gate", "plot_pixel_attention", "plot_vit_attention", "draw_heat"]


@dataclass
class GateRecorder:
    """Gates recorded by :func:`capture_gates`: ``channel[name]`` (B, C), ``spatial[name]`` (B, H, W),
    the last call of each gate module (in model order: dicts keep insertion order)."""

    channel: dict[str, Tensor] = field(default_factory=dict)
    spatial: dict[str, Tensor] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.channel) + len(self.spatial)


@contextlib.contextmanager
def capture_gates(model: nn.Module) -> Iterator[GateRecorder]:
    """``with capture_gates(model) as g: model(x)`` then ``g.channel`` / ``g.spatial``."""
    from ..modules.gate import Gate

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    gates = [(n, m) for n, m in model.named_modules() if isinstance(m, Gate)]
    if not gates:
        raise ValueError(f"{type(model).__name__} has no SE/ECA/CBAM gate (attnkit.modules.gate.Gate); build it with attn='se', 'eca' or 'cbam'")
    rec = GateRecorder()

    def hook_for(name: str, kind: str):
        def hook(mod, args, out):
            out = out.detach()
            if kind == "channel":
                rec.channel[name] = out.reshape(out.shape[0], -1)  # (B, C)
            else:
                rec.spatial[name] = out[:, 0]  # (B, H, W)

        return hook

    handles = [m.register_forward_hook(hook_for(n, m.kind)) for n, m in gates]
    try:
        yield rec
    finally:
        for h in handles:
            h.remove()


def draw_heat(ax, heat, image=None, *, alpha: float = 0.55, cmap: str = "inferno", vmax: float | None = None):
    """Draw an (h, w) map stretched over ``image`` on a matplotlib axis; returns the heat artist."""
    heat = np.asarray(heat.detach().cpu() if isinstance(heat, Tensor) else heat, dtype=np.float64)
    if heat.ndim != 2:
        raise ValueError(f"heat must be (h, w), got shape {heat.shape}")
    h, w = heat.shape
    extent = (0, w, h, 0)
    if image is not None:
        ax.imshow(_image(image), extent=extent, cmap="gray", interpolation="bilinear")
    im = ax.imshow(heat, extent=extent, cmap=cmap, vmin=0.0, vmax=vmax, interpolation="nearest", alpha=alpha if image is not None else 1.0)
    ax.set_xticks([])
    ax.set_yticks([])
    return im


@in_language
def plot_channel_gates(gates, *, labels: list[str] | None = None, title: str | None = None, path: str | Path | None = None, dpi: int = 120,
                       lang: str = "en"):
    """Bar plot of channel gates: (C,) for one image, or (K, C) for K images/classes side by side
    (``labels`` names the rows)."""
    g = np.asarray(gates.detach().cpu() if isinstance(gates, Tensor) else gates, dtype=np.float64)
    if g.ndim == 1:
        g = g[None]
    if g.ndim != 2:
        raise ValueError(f"gates must be (C,) or (K, C), got shape {g.shape}")
    if labels is not None and len(labels) != g.shape[0]:
        raise ValueError(f"labels has {len(labels)} names for {g.shape[0]} rows of gates")
    K, C = g.shape
    fig = _figure(min(12.0, 3.0 + 0.12 * C), 2.8)
    ax = fig.add_subplot()
    width = 0.8 / K
    x = np.arange(C)
    for i in range(K):
        ax.bar(x + (i - (K - 1) / 2) * width, g[i], width=width, label=labels[i] if labels else None)
    ax.set_xlim(-0.6, C - 0.4)
    ax.set_ylim(0, 1)
    ax.set_xlabel(word(lang, "channel"))
    ax.set_ylabel(word(lang, "gate"))
    if labels:
        ax.legend(fontsize=7, ncol=min(K, 5))
    if title:
        ax.set_title(title, fontsize=9)
    return _finish(fig, path, dpi)


@in_language
def plot_spatial_gate(gate, image=None, *, title: str | None = None, path: str | Path | None = None, dpi: int = 120, lang: str = "en"):
    """A CBAM spatial map (h, w) in [0, 1] over the image."""
    fig = _figure(3.4, 3.0)
    ax = fig.add_subplot()
    im = draw_heat(ax, gate, image, vmax=1.0)
    fig.colorbar(im, ax=ax, shrink=0.8, label=word(lang, "spatial_gate"))
    if title:
        ax.set_title(title, fontsize=9)
    return _finish(fig, path, dpi)


def _pixel_index(pixel, grid: tuple[int, int]) -> int:
    h, w = grid
    if not (isinstance(pixel, (tuple, list)) and len(pixel) == 2 and all(isinstance(p, int) for p in pixel)):
        raise ValueError(f"pixel must be (row, col) ints, got {pixel!r}")
    r, c = pixel
    if not (0 <= r < h and 0 <= c < w):
        raise ValueError(f"pixel {pixel} is outside the {h}x{w} map")
    return r * w + c


@in_language
def plot_pixel_attention(weights, grid: tuple[int, int], pixel: tuple[int, int], image=None, *, title: str | None = None,
                         path: str | Path | None = None, dpi: int = 120, lang: str = "en"):
    """MHSA2d: where one query pixel looks. ``weights`` (heads, N, N) of one image (from
    :func:`attnkit.inspect.capture`), N = h·w; one panel per head, the query pixel outlined."""
    w = weights.detach().cpu().double() if isinstance(weights, Tensor) else torch.as_tensor(weights, dtype=torch.float64)
    h, wd = grid
    if w.dim() != 3 or w.shape[1] != h * wd or w.shape[2] != h * wd:
        raise ValueError(f"weights must be (heads, N, N) with N = {h}*{wd} = {h * wd}, got shape {tuple(w.shape)}")
    q = _pixel_index(pixel, grid)
    heads = w.shape[0]
    fig = _figure(2.4 * heads + 0.6, 2.6)
    from matplotlib.patches import Rectangle  # noqa: PLC0415 -- matplotlib is imported lazily

    top = float(w[:, q].max())  # one colour scale for every head: a bright cell means a large weight, not the head's own maximum
    axes = []
    for i in range(heads):
        ax = fig.add_subplot(1, heads, i + 1)
        im = draw_heat(ax, w[i, q].reshape(h, wd), image, vmax=top)
        ax.add_patch(Rectangle((pixel[1], pixel[0]), 1, 1, fill=False, edgecolor="cyan", linewidth=1.5))
        ax.set_title(word(lang, "head").format(i), fontsize=8)
        axes.append(ax)
    fig.colorbar(im, ax=axes, shrink=0.85, label=word(lang, "pixel_weight").format(n=h * wd, u=1 / (h * wd)))
    if title:
        fig.suptitle(title, fontsize=9)
    return _finish(fig, path, dpi)


@in_language
def plot_vit_attention(attentions, grid: tuple[int, int], image=None, *, index: int = 0, num_prefix_tokens: int = 1,
                       title: str | None = None, path: str | Path | None = None, dpi: int = 120, lang: str = "en"):
    """ViT: the class token's attention over the patches in each head of the last layer, and the
    attention rollout (Abnar & Zuidema 2020) of the class token over all layers."""
    if not attentions:
        raise ValueError("attentions is empty: capture the model first (attnkit.inspect.capture)")
    h, wd = grid
    last = attentions[-1][index].detach().cpu().double()  # (heads, T, T)
    if last.shape[-1] != num_prefix_tokens + h * wd:
        raise ValueError(f"weights have T={last.shape[-1]} tokens, grid {h}x{wd} + {num_prefix_tokens} prefix needs {num_prefix_tokens + h * wd}")
    roll = attention_rollout([a[index : index + 1].detach().cpu().double() for a in attentions])[0]  # (T, T)
    heads = last.shape[0]
    fig = _figure(2.2 * (heads + 1) + 1.4, 2.6)
    top = float(last[:, 0, num_prefix_tokens:].max())  # the heads share one scale; the rollout, another quantity, has its own
    axes = []
    for i in range(heads):
        ax = fig.add_subplot(1, heads + 1, i + 1)
        im = draw_heat(ax, last[i, 0, num_prefix_tokens:].reshape(h, wd), image, vmax=top)
        ax.set_title(word(lang, "last_head").format(i), fontsize=7)
        axes.append(ax)
    fig.colorbar(im, ax=axes, shrink=0.85, label=word(lang, "cls_weight"))
    ax = fig.add_subplot(1, heads + 1, heads + 1)
    im = draw_heat(ax, roll[0, num_prefix_tokens:].reshape(h, wd), image)
    ax.set_title(word(lang, "rollout_title"), fontsize=7)
    fig.colorbar(im, ax=ax, shrink=0.85, label=word(lang, "rollout"))
    if title:
        fig.suptitle(title, fontsize=9)
    return _finish(fig, path, dpi)
