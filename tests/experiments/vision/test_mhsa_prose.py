"""MHSA2d's reading says whether the weight spreads or lands on one key from the rows' largest weight
and entropy (never from the mean distance alone), in English and Chinese with the same numbers."""

from __future__ import annotations

import math
import re

import torch

from attnkit.experiments.vision.plots import read_mhsa
from attnkit.experiments.vision.mhsa_reading import mhsa_sentence
from attnkit.modules.mhsa2d import MHSA2d

BASE = {"grid": [7, 7], "mean_distance": 3.54, "uniform_distance": 3.61, "self_mass": 0.02}


def _numbers(s: str) -> list[str]:
    return sorted(re.findall(r"\d+\.\d+", s))


def test_peaked_rows_are_called_peaked_even_at_uniform_distance():
    mh = dict(BASE, max_weight=0.87, entropy=0.09)
    en, zh = mhsa_sentence(mh, "en"), mhsa_sentence(mh, "zh")
    assert "picks out about one position" in en and "spread" not in en.split("so each head")[1].split("rather")[0]
    assert "0.87" in en and "0.09" in en and "基本只挑出一个位置" in zh
    assert _numbers(en) == _numbers(zh)


def test_spread_rows_are_called_spread():
    mh = dict(BASE, max_weight=0.05, entropy=0.95)
    en, zh = mhsa_sentence(mh, "en"), mhsa_sentence(mh, "zh")
    assert "spread their weight over much of the map" in en and "分散在特征图的大部分位置上" in zh
    assert _numbers(en) == _numbers(zh)


def test_without_concentration_numbers_no_spread_claim():
    en, zh = mhsa_sentence(BASE, "en"), mhsa_sentence(BASE, "zh")
    assert "does not say whether" in en and "无法判断" in zh
    assert "spread their weight over" not in en


@torch.no_grad()
def test_read_mhsa_concentration_matches_numpy_and_uniform_limit():
    torch.manual_seed(0)
    m = MHSA2d(8, 2, position=None).double().eval()
    x = torch.randn(3, 8, 4, 4, dtype=torch.float64)
    r = read_mhsa(m, x)
    # independent reference: the softmax of the module's own projections, in float64
    seq = x.flatten(2).transpose(1, 2)  # (B, N, C)
    q = m.attn.q_proj(seq).view(3, 16, 2, 4).transpose(1, 2)
    k = m.attn.k_proj(seq).view(3, 16, 2, 4).transpose(1, 2)
    w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(4), -1)  # (B, heads, N, N)
    ent = float((-(w * w.log()).sum(-1) / math.log(16)).mean())
    assert abs(r["max_weight"] - float(w.amax(-1).mean())) < 1e-12
    assert abs(r["entropy"] - ent) < 1e-12
    m.attn.q_proj.weight.zero_()
    m.attn.q_proj.bias.zero_()  # every score 0: uniform attention
    u = read_mhsa(m, x)
    assert abs(u["max_weight"] - 1 / 16) < 1e-12 and abs(u["entropy"] - 1.0) < 1e-12


def test_viewer_concentration_reads_the_pictured_weights(tmp_path):
    import attnkit
    from attnkit.experiments.vision.mhsa_reading import viewer_concentration

    N = 16
    one_hot = torch.eye(N, dtype=torch.float64)[torch.randperm(N, generator=torch.Generator().manual_seed(0))]
    uniform = torch.full((N, N), 1 / N, dtype=torch.float64)
    path = tmp_path / "viewer_mhsa.html"
    attnkit.inspect.save_html(path, [torch.stack([one_hot, uniform])], patch_grid=(4, 4), title="t")
    c = viewer_concentration(path)
    # head 0 puts all weight on one key (max 1, entropy 0), head 1 is uniform (max 1/16, entropy 1)
    assert abs(c["max_weight"] - (1 + 1 / N) / 2) < 1e-3
    assert abs(c["entropy"] - 0.5) < 1e-3
    assert viewer_concentration(tmp_path / "missing.html") is None


def test_committed_reading_uses_the_pictured_image_when_it_lacks_the_numbers():
    from attnkit.experiments.vision.section import reading_sentences

    results = {"models": {"mhsa": {"acc": {"mean": 0.9, "std": 0.0, "per_seed": [0.9]}, "params": 1, "epochs": 1}},
               "reading": {"mhsa": BASE}, "data": {"name": "fashion_mnist", "train": 10, "test": 10}}
    en = [s for s in reading_sentences(results, "en", {"max_weight": 0.87, "entropy": 0.09}) if "MHSA2d" in s][0]
    zh = [s for s in reading_sentences(results, "zh", {"max_weight": 0.87, "entropy": 0.09}) if "MHSA2d" in s][0]
    assert "On the pictured image" in en and "picks out about one position" in en and "图中这张图像" in zh
    assert _numbers(en) == _numbers(zh)
