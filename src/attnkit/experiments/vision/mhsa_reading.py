"""MHSA2d's last-stage attention in words (English or Chinese), from the numbers of
:func:`attnkit.experiments.vision.plots.read_mhsa`, or — for a run recorded before those numbers
existed — from the weights stored in the run's MHSA viewer (the image the report's map shows).

Whether the weight spreads or lands on one key is read from each attention row's largest weight and
normalised entropy H = −Σ w·log w / log N (0: all weight on one key, 1: uniform over the N keys).
"""

from __future__ import annotations

from pathlib import Path

from ...page.i18n import tr as _tr


def viewer_concentration(path: str | Path) -> dict | None:
    """The largest weight and normalised entropy (0 one key, 1 uniform) of the rows of the last layer
    stored in an :func:`attnkit.inspect.save_html` viewer — the weights of the image the MHSA figure
    shows — averaged over heads and query pixels; None when there is no readable viewer."""
    import json
    import re

    import numpy as np

    path = Path(path)
    if not path.exists():
        return None
    m = re.search(r'<script type="application/json" id="ak-data">(.*?)</script>', path.read_text(encoding="utf-8"), re.S)
    try:
        w = np.asarray(json.loads(m.group(1))["layers"][-1], dtype=np.float64) if m else None  # (heads, N, N)
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    if w is None or w.ndim != 3 or w.shape[-1] < 2:
        return None
    w = w / w.sum(-1, keepdims=True)  # the viewer rounds the weights; rows back to sum 1
    ent = -(w * np.log(np.clip(w, 1e-300, None))).sum(-1) / np.log(w.shape[-1])
    return {"max_weight": float(w.max(-1).mean()), "entropy": float(ent.mean())}


def mhsa_sentence(mh: dict, lang: str = "en") -> str:
    """MHSA2d's last-stage attention in words, from :func:`.plots.read_mhsa`'s numbers. Whether the
    weight spreads or lands on one key is read from the rows' largest weight and entropy, never from
    the mean distance alone (one far key and an even spread give the same mean distance)."""
    g = f"{mh['grid'][0]}×{mh['grid'][1]}"
    n = mh["grid"][0] * mh["grid"][1]
    near = abs(mh["mean_distance"] - mh["uniform_distance"]) < 0.05 * mh["uniform_distance"]
    k = 0 if near else 1 if mh["mean_distance"] < mh["uniform_distance"] else 2
    dist_en = ("about as far as uniform attention", "nearer than uniform attention", "farther than uniform attention")[k]
    dist_zh = ("与均匀注意力差不多远", "比均匀注意力更近", "比均匀注意力更远")[k]
    head = _tr(lang, f"MHSA2d on the {g} last-stage map attends at a mean distance of {mh['mean_distance']:.2f} pixels (uniform "
                     f"attention: {mh['uniform_distance']:.2f}), {dist_en}; a pixel keeps {mh['self_mass']:.2f} of the weight on itself",
               f"MHSA2d 在 {g} 的最后阶段特征图上的平均注意距离为 {mh['mean_distance']:.2f} 像素（均匀注意力："
               f"{mh['uniform_distance']:.2f}），{dist_zh}；每个像素在自己身上保留 {mh['self_mass']:.2f} 的权重")
    if "max_weight" not in mh or "entropy" not in mh:
        return head + _tr(lang, ". The mean distance alone does not say whether a head spreads its weight or puts it on one "
                                "far pixel; the map shows which.",
                          "。仅凭平均距离无法判断一个头是把权重分散开，还是集中在某一个远处的像素上；图中可以看出是哪一种。")
    mw, ent = mh["max_weight"], mh["entropy"]
    c = 0 if mw >= 0.5 else 2 if ent >= 0.8 else 1
    how_en = ("so each head picks out about one position rather than spreading its weight",
              "so each head spreads its weight over a few positions", "so the heads spread their weight over much of the map")[c]
    how_zh = ("即每个头基本只挑出一个位置，而不是把权重分散开", "即每个头把权重分给少数几个位置", "即各个头把权重分散在特征图的大部分位置上")[c]
    img = mh.get("scope") == "image"
    return head + _tr(lang,
                      f". {'On the pictured image (its viewer’s weights), each' if img else 'Each'} query gives on average {mw:.2f} of its weight to its single heaviest key (uniform: 1/{n} = {1 / n:.3f}) "
                      f"and its weights have a normalised entropy of {ent:.2f} (0 = one key, 1 = uniform), {how_en}.",
                      f"。{'在图中这张图像上（取自其查看器中的权重），' if img else ''}每个查询平均把 {mw:.2f} 的权重给了权重最大的那一个键（均匀时为 1/{n} = {1 / n:.3f}），"
                      f"权重的归一化熵为 {ent:.2f}（0 = 只有一个键，1 = 均匀），{how_zh}。")
