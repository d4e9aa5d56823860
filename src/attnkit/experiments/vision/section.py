"""The vision experiment's report section: the plain-language reading (English or Chinese), the
tables, the committed ``--full`` run beside the report's own quick run, and the published numbers.

Every number in the prose is formatted from a results dict (the run's JSON); nothing is typed in,
except :data:`PAPERS`: what the SE, CBAM and ECA papers report on ImageNet, each with its table.

With a committed run (``results/vision/full``, handed in as ``full_results`` by the report, see
:mod:`attnkit.experiments.lab.committed`) the reading is the committed run's — 3 seeds on 20,000 training
images says more than the report's own quick run of 2,000 — and the quick run follows it as a
smaller replication; without one the quick run is read.

What MHSA2d costs at a detector's feature-map sizes is quoted by :mod:`.cost` from
the committed benchmark ``benchmarks/results/vision_cost.json``, read when the section is rendered
(``cost_file``); without that file the paragraph is left out.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from ...page.html import details, esc, figure, so_what, table
from ...page.i18n import tr as _tr
from ...page.significance import rule_sentence
from ..lab.committed import describe_run
from ..lab.results import Section
from .cost import COST_FILE, cost_html
from .mhsa_reading import mhsa_sentence, viewer_concentration

DATA_NAMES = {"fashion-mnist": ("Fashion-MNIST", "Fashion-MNIST"), "digits": ("scikit-learn's 8×8 digits", "scikit-learn 的 8×8 手写数字")}
OBJECT_WORDS = {"fashion-mnist": ("garment", "服装", "kind of garment", "服装种类"), "digits": ("digit", "数字笔画", "digit", "数字")}
LABELS = {"resnet": "ResNet", "se": "+SE", "eca": "+ECA", "cbam": "+CBAM", "mhsa": "+MHSA (last stage)", "vit": "ViT"}
VERDICT_WORDS = {  # verdict label -> (table en, table zh, sentence en, sentence zh)
    "helped": ("helped", "有帮助", "it helped", "有帮助"),
    "hurt": ("hurt", "变差", "it hurt", "反而变差"),
    "no clear difference": ("no clear difference", "无明显差异", "it made no difference larger than the seed spread",
                            "差异没有超过种子间的离散程度"),
    "one seed": ("one seed: cannot tell", "只有一个种子：无法判断", "with one seed there is no spread to tell a difference from noise",
                 "只有一个种子，没有离散程度，无法区分差异与噪声"),
}

#: ImageNet-1k val top-1 (%), ResNet-50 backbone, 224 single crop, one training protocol for all
#: four: Wang et al. 2020, ECA-Net, https://arxiv.org/abs/1910.03151, Table 2 (kept in results.json).
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

#: Each paper's own ImageNet-1k single-crop top-1 (%) for ResNet-50 with and without the module,
#: from the table named (errors there converted: top-1 = 100 − error). Each paper trained its own
#: baseline, so compare differences within a paper, not across papers.
PAPERS = [
    {"paper": "Hu et al. 2018, Squeeze-and-Excitation Networks, arXiv:1709.01507, Table 2 (top-1 error 24.80 → 23.29)",
     "baseline": 75.20, "rows": [("se", "SE-ResNet-50", 76.71)]},
    {"paper": "Woo et al. 2018, CBAM, arXiv:1807.06521, Table 4 (top-1 error 24.56 → 23.14 / 22.66)",
     "baseline": 75.44, "rows": [("se", "ResNet-50 + SE", 76.86), ("cbam", "ResNet-50 + CBAM", 77.34)]},
    {"paper": "Wang et al. 2020, ECA-Net, arXiv:1910.03151, Table 2",
     "baseline": 75.20, "rows": [("se", "SENet-50", 76.71), ("cbam", "CBAM-50", 77.34), ("eca", "ECA-Net-50", 77.48)]},
]


def _label(name: str, lang: str) -> str:
    """A model's name in the page's language (only the MHSA one has words in it)."""
    return "+MHSA（最后一个阶段）" if lang == "zh" and name == "mhsa" else LABELS.get(name, name)


def _n(k: int, word: str) -> str:
    return f"{k} {word}{'' if k == 1 else 's'}"


def _pct(v: float) -> str:
    return f"{100 * v:.2f}"


def _data_name(data: dict, lang: str) -> str:
    names = DATA_NAMES.get(data["name"], (data["name"], data["name"]))
    return names[1] if lang == "zh" else names[0]


def reading_sentences(results: dict, lang: str = "en", image_concentration: dict | None = None) -> list[str]:
    """The plain-language reading, generated from the numbers, in ``lang`` ("en" or "zh"): what the
    models scored (:func:`outcome_sentences`), then what their attention looks at (:func:`looking_sentences`).
    ``image_concentration``: :func:`viewer_concentration` of the pictured image, used when the run's
    MHSA reading predates the concentration numbers."""
    return outcome_sentences(results, lang) + looking_sentences(results, lang, image_concentration)


def outcome_sentences(results: dict, lang: str = "en") -> list[str]:
    """How each model scored against the plain ResNet, in ``lang``."""
    models, verdict, data = results["models"], results.get("verdict", {}), results["data"]
    seeds = len(next(iter(models.values()))["acc"]["per_seed"])
    out = []
    if "resnet" in models:
        b = models["resnet"]
        out.append(_tr(lang,
                       f"On {_data_name(data, lang)} ({data['train']:,} training and {data['test']:,} test images, "
                       f"{_n(b['epochs'], 'epoch')}, {_n(seeds, 'seed')}) the plain ResNet reached {_pct(b['acc']['mean'])}% ± "
                       f"{_pct(b['acc']['std'])}% test accuracy with {b['params']:,} parameters.",
                       f"在 {_data_name(data, lang)} 上（{data['train']:,} 张训练图像、{data['test']:,} 张测试图像，{b['epochs']} 个 epoch，"
                       f"{seeds} 个种子），普通 ResNet 的测试准确率为 {_pct(b['acc']['mean'])}% ± {_pct(b['acc']['std'])}%，"
                       f"参数量 {b['params']:,}。"))
    if verdict:
        groups = {}
        for name, v in verdict.items():
            m = models[name]["acc"]
            groups.setdefault(v["label"], []).append((_label(name, lang), f"{_pct(m['mean'])}% ± {_pct(m['std'])}%", 100 * v["delta_acc"]))
        out.append(_tr(lang,
                       "Against it (the spread and the cost of each are in the table): " + "; ".join(
                           ", ".join(f"{lab} {acc} ({d:+.2f} points)" for lab, acc, d in g) + f" — {VERDICT_WORDS[k][2]}"
                           for k, g in groups.items()) + ".",
                       "与它相比（各自的离散程度和代价见表）：" + "；".join(
                           "、".join(f"{lab} {acc}（{d:+.2f} 个百分点）" for lab, acc, d in g) + f"——{VERDICT_WORDS[k][3]}"
                           for k, g in groups.items()) + "。"))
        if any(v["label"] != "one seed" for v in verdict.values()):  # the rule, where a verdict was made with it
            out.append(rule_sentence(lang))
    attn = [n for n in verdict if n != "vit" and verdict[n]["label"] != "one seed"]  # one seed: nothing to judge
    if attn and not any(verdict[n]["label"] == "helped" for n in attn):
        out.append(_tr(lang,
                       "None of the attention modules beat the plain network by more than 2σ of the seed spread here: the "
                       "ImageNet gains the papers report (below) did not show on this small, low-resolution task at this training budget.",
                       "在这里，没有任何注意力模块以超过种子离散 2σ 的幅度胜过普通网络：论文在 ImageNet 上报告的提升（见下文）"
                       "没有在这个小规模、低分辨率、训练预算有限的任务上出现。"))
        worse = [n for n in attn if verdict[n]["label"] == "hurt"]
        if worse:
            out.append(_tr(lang, f"{' and '.join(_label(n, 'en') for n in worse)} did worse than the plain network by more than 2σ.",
                           f"{'、'.join(_label(n, 'zh') for n in worse)} 则比普通网络差，且差距超出了 2σ。"))
    return out


def spatial_meaning(sp: dict, obj: str, obj_zh: str, lang: str) -> str:
    """What CBAM's spatial gate values mean: a gate multiplies features, it is not an object mask."""
    if sp["on_background"] > sp["on_object"]:
        return _tr(lang, f"So this gate is not an object mask: it passes more of the background than of the {obj}. A spatial gate "
                         "multiplies the features at each position by a number between 0 and 1; what the network needs from a position "
                         f"is learned, and here it keeps the {obj}'s features damped and the background (mostly empty pixels) "
                         "passing. Read its figure as \"how much of each position passes\", not as where the object is.",
                   f"所以这个门控不是物体掩码：它让背景通过的比例比{obj_zh}还高。空间门控把每个位置的特征乘以 0 到 1 之间的一个数；"
                   f"网络需要从每个位置得到什么是学出来的，这里它压低了{obj_zh}处的特征，而让背景（大多是空白像素）通过。"
                   "请把它的图读作“每个位置有多少通过”，而不是物体在哪里。")
    return _tr(lang, f"The gate passes more of the {obj} than of the background: on this data it acts partly like an object mask, "
                     "though it is learned for the class, not told where the object is.",
               f"门控让{obj_zh}通过的比例高于背景：在这份数据上它部分起到了物体掩码的作用，但它是为分类学出来的，并没有被告知物体在哪里。")


def looking_sentences(results: dict, lang: str = "en", image_concentration: dict | None = None) -> list[str]:
    """What the attention modules learned to look at (gates, spatial gate, MHSA, ViT), in ``lang``."""
    reading, data = results.get("reading", {}), results["data"]
    obj, obj_zh, kind, kind_zh = OBJECT_WORDS.get(data["name"], ("object", "物体", "class", "类别"))
    out = []
    gates = [(name, reading[name]["last"]) for name in ("se", "eca", "cbam") if reading.get(name, {}).get("last")]
    if gates:
        c = gates[0][1]["channels"]
        out.append(_tr(lang,
                       f"What the channel gates learned: a gate is a number between 0 and 1 that scales one of the last stage's {c} "
                       "channels, and η² (eta squared) is the share of the gates' variation across test images that the image's class "
                       "explains (0: every image gets the same gates; 1: the class alone sets them). "
                       + "; ".join(f"{LABELS[n]}: mean gate {r['mean']:.2f}, η² {r['eta2_class']:.2f}" for n, r in gates)
                       + f". A high η² means the module re-weights channels differently for each {kind}.",
                       f"通道门控学到了什么：门控是 0 到 1 之间的数，用来缩放最后一个阶段 {c} 个通道中的一个；η²（eta 平方）是测试图像之间门控的变化中"
                       "能由图像类别解释的比例（0：每张图像得到相同的门控；1：门控完全由类别决定）。"
                       + "；".join(f"{LABELS[n]}：门控均值 {r['mean']:.2f}，η² {r['eta2_class']:.2f}" for n, r in gates)
                       + f"。η² 高，说明该模块会针对不同的{kind_zh}以不同方式重新加权通道。"))
    sp = reading.get("cbam", {}).get("spatial")
    if sp:
        out.append(_tr(lang,
                       f"CBAM's first-stage spatial gate averages {sp['on_object']:.2f} on the {obj} and {sp['on_background']:.2f} "
                       f"on the background ({100 * sp['object_share']:.0f}% of the pixels are {obj}).",
                       f"CBAM 第一阶段的空间门控在{obj_zh}上的均值为 {sp['on_object']:.2f}，在背景上为 {sp['on_background']:.2f}"
                       f"（{100 * sp['object_share']:.0f}% 的像素属于{obj_zh}）。"))
        out.append(spatial_meaning(sp, obj, obj_zh, lang))
    mh = reading.get("mhsa")
    if mh:
        if "max_weight" not in mh and image_concentration:
            mh = {**mh, **image_concentration, "scope": "image"}
        out.append(mhsa_sentence(mh, lang))
    vt = reading.get("vit")
    if vt:
        out.append(_tr(lang,
                       f"The ViT's class-token rollout puts {100 * vt['cls_mass_on_object']:.0f}% of its patch mass on {obj} "
                       f"patches, which are {100 * vt['object_patch_share']:.0f}% of the patches.",
                       f"ViT 的类别 token 的 rollout 把 {100 * vt['cls_mass_on_object']:.0f}% 的 patch 权重放在{obj_zh} patch 上，"
                       f"而{obj_zh} patch 占全部 patch 的 {100 * vt['object_patch_share']:.0f}%。"))
    return out


#: The cost columns of :func:`results_table`: (result key, English header, Chinese header, format). Both are
#: counted, not timed, so they do not change with the machine's load: the run's wall-clock training times
#: (``train_time_s``, ``images_per_s``) were taken on a machine shared with other jobs and are not a cost.
COST_COLUMNS = (("params", "parameters", "参数量", lambda v: f"{v:,}"),
                ("flops", "MFLOPs / image", "每张图像 MFLOPs", lambda v: f"{v / 1e6:.2f}"))


def results_table(results: dict, lang: str = "en") -> str:
    """Accuracy, difference to the ResNet, and the cost per model (:data:`COST_COLUMNS`), with the columns explained."""
    verdict = results.get("verdict", {})
    rows = []
    for name, m in results["models"].items():
        v = verdict.get(name)
        rows.append([_label(name, lang), f"{_pct(m['acc']['mean'])} ± {_pct(m['acc']['std'])}",
                     f"{100 * v['delta_acc']:+.2f} ± {100 * v['spread']:.2f} ({VERDICT_WORDS[v['label']][1 if lang == 'zh' else 0]})" if v else "—",
                     *(fmt(m[key]) for key, _, _, fmt in COST_COLUMNS)])
    zh = lang == "zh"
    head = (["模型", "测试准确率 %", "相对 ResNet（百分点）"] if zh else ["model", "test accuracy %", "Δ vs ResNet (points)"])
    head += [c[2] if zh else c[1] for c in COST_COLUMNS]
    return table(head, rows) + "<p class='note'>" + _tr(
        lang,
        "Columns: test accuracy, mean ± standard deviation over seeds; the difference to the plain ResNet ± 2σ, σ = "
        "√(std² + std_ResNet²), and the verdict (a difference within 2σ is no clear difference); the cost: trainable "
        "parameters, and one image's forward pass in millions of floating-point operations (counted by "
        "torch.utils.flop_counter). Both are counted, not timed, so they do not depend on the machine's load; the run's "
        "training times were measured on a machine shared with other jobs and are not used as a cost.",
        "列说明：测试准确率，多个种子的均值 ± 标准差；相对普通 ResNet 的差值 ± 2σ（σ = √(std² + std_ResNet²)），以及结论"
        "（差值不超过 2σ 即视为没有明显差别）；代价：可训练参数量，以及一张图像前向传播的浮点运算数（百万，由 torch.utils.flop_counter 计数）。"
        "这两项都是数出来的而不是计时得到的，不受机器负载影响；这次运行的训练时间是在与其他任务共用的机器上测得的，不用作代价。") + "</p>"


def published_html(results: dict | None, lang: str = "en") -> str:
    """What the papers report on ImageNet (ResNet-50), each paper against its own baseline, beside our difference."""
    verdict = (results or {}).get("verdict", {})
    data = (results or {}).get("data") or {"name": "fashion-mnist"}
    data_en, data_zh = _data_name(data, "en"), _data_name(data, "zh")
    rows = []
    for p in PAPERS:
        for model, name, top1 in p["rows"]:
            ours = verdict.get(model)
            rows.append([name, f"{p['baseline']:.2f}", f"{top1:.2f}", f"{top1 - p['baseline']:+.2f}",
                         f"{100 * ours['delta_acc']:+.2f} ± {100 * ours['spread']:.2f}" if ours else "—", p["paper"]])
    head = (["模型", "论文中 ResNet-50 top-1 %", "加模块后 top-1 %", "论文中的提升（百分点）", "本实验的差值（百分点）", "出处"] if lang == "zh" else
            ["model", "paper's ResNet-50 top-1 %", "with the module, top-1 %", "published gain (points)", "our Δ (points)", "source"])
    return ("<p>" + _tr(lang, "Published, for scale (not our numbers): ImageNet-1k, 224-pixel single crop, ResNet-50 backbone, "
                              "each paper against the baseline it trained itself; the last column but one is this experiment's "
                              f"difference on {data_en}.",
                        "论文数据，仅作参照（不是我们的数字）：ImageNet-1k，224 像素单次裁剪，ResNet-50 骨干网络，每篇论文与它自己训练的基线比较；"
                        f"倒数第二列是本实验在 {data_zh} 上的差值。") + "</p>" + table(head, rows)
            + f"<p class='note'>{esc(_tr(lang, 'Top-1 = 100 − the top-1 error the papers tabulate.', 'top-1 = 100 − 论文表中的 top-1 错误率。'))}</p>")


def _figures(results, run_dir: Path, lang: str, skip: tuple[str, ...] = ("accuracy_vs_cost.png",)) -> str:
    return "".join(figure(run_dir / f, f, lang) for f in results.get("figures", [])
                   if f.endswith(".png") and (run_dir / f).exists() and f not in skip)


def _viewers(results, run_dir: Path, out_dir: Path, folder: str, lang: str) -> str:
    """Links to the run's interactive viewers, written beside the page (``folder`` under ``out_dir``) with their
    words in ``lang`` (the same weights; :func:`attnkit.inspect.viewer_language.language_copy`), so the links
    are relative and the page's folder can move."""
    from ...inspect.viewer_language import language_copy

    pages = [f for f in results.get("figures", []) if f.endswith(".html") and (run_dir / f).exists()]
    if not pages:
        return ""
    written = [language_copy(run_dir / f, out_dir / folder, lang, _viewer_title(run_dir / f, lang)) for f in pages]
    links = ", ".join(f'<a href="{esc(folder)}/{esc(p.name)}">{esc(p.name)}</a>' for p in written)
    return "<p>" + _tr(lang, f"Interactive viewers (click a patch or pixel to make it the query): {links}.",
                       f"交互式查看器（点击一个 patch 或像素，把它设为查询）：{links}。") + "</p>"


_VIEWER_TITLES = {"MHSA2d, last stage": "MHSA2d，最后一个阶段", "ViT": "ViT"}


def _viewer_title(path: Path, lang: str) -> str | None:
    """The title of the viewer at ``path`` in ``lang`` ("MHSA2d, last stage (Trouser)" -> "MHSA2d，最后一个阶段（裤子）");
    None (keep the stored one) in English or for a title of another form."""
    from .map_figures import CLASS_ZH

    if lang == "en":
        return None
    title = re.search(r"<title>(.*?)</title>", path.read_text(encoding="utf-8"), re.S)
    found = re.fullmatch(r"(.*) \(([^()]*)\)", html.unescape(title.group(1)) if title else "")
    if found is None or found.group(1) not in _VIEWER_TITLES:
        return None
    return f"{_VIEWER_TITLES[found.group(1)]}（{CLASS_ZH.get(found.group(2), found.group(2))}）"


def _paragraphs(sentences: list[str]) -> str:
    return "<p>" + " ".join(esc(s) for s in sentences) + "</p>" if sentences else ""


def _concentration(results) -> dict | None:
    run_dir = getattr(results, "run_dir", None)
    return viewer_concentration(Path(run_dir) / "viewer_mhsa.html") if run_dir is not None else None


# what each module is, before any result is quoted (the article's order: channel, then spatial, then self-attention)
MODULES = ("The modules, each added to the same small ResNet: <b>SE</b> (squeeze-and-excitation) averages each channel over the "
           "image and learns a gate between 0 and 1 per channel; <b>ECA</b> computes that gate with one small 1-D convolution instead "
           "of SE's two-layer MLP; <b>CBAM</b> applies a channel gate and then a <i>spatial</i> gate, one number per pixel, from the "
           "mean and max over channels; <b>MHSA2d</b> is multi-head self-attention over the pixels of a feature map, the block that "
           "BoTNet and the attention variants of detectors such as YOLOv8 insert; the <b>ViT</b> attends over a 4×4 grid of 7×7-pixel patches with no "
           "convolution at all.",
           "这些模块都加在同一个小 ResNet 上：<b>SE</b>（挤压-激励）把每个通道在整幅图上取平均，为每个通道学一个 0 到 1 之间的门控；"
           "<b>ECA</b> 用一次小的一维卷积代替 SE 的两层 MLP 来算这个门控；<b>CBAM</b> 先做通道门控，再做<i>空间</i>门控——由各通道的均值和最大值"
           "为每个像素算出一个数；<b>MHSA2d</b> 是在特征图像素上的多头自注意力，也就是 BoTNet 以及 YOLOv8 等检测器的注意力变体所插入的模块；"
           "<b>ViT</b> 则在 4×4 个 7×7 像素的图块上做注意力，完全不用卷积。")


def pick_committed(full_results: dict | None):
    """The committed run to read: the one of preset ``full`` (else the last by name), with its name."""
    if not full_results:
        return None, None
    name = next((n for n, r in full_results.items() if r.meta.get("preset") == "full"), list(full_results)[-1])
    return name, full_results[name]


def _accuracy_figure(results, out_dir: Path, folder: str, lang: str) -> str:
    """The accuracy-against-cost figure, drawn from the run's numbers in both languages beside the page."""
    from ...page.figures import save_both
    from .plots import accuracy_cost_figure

    path = out_dir / folder / "accuracy_vs_cost.png"
    save_both(path, lambda lg: accuracy_cost_figure(results["models"], lg))
    return figure(path, _tr(lang, "accuracy against parameters and FLOPs", "准确率与参数量、FLOPs 的关系"), lang)


def _so_what(results: dict, lang: str) -> str:
    verdict = results.get("verdict", {})
    attn = [n for n in verdict if n != "vit" and verdict[n]["label"] != "one seed"]
    if attn and any(verdict[n]["label"] == "helped" for n in attn):
        return so_what(lang, _tr(lang, "Here some attention modules paid off beyond the seed-to-seed spread. Channel and spatial attention "
                                       "re-weight what a CNN already computes; whether that pays for its cost is an empirical question, "
                                       "answered by the same network without the module, over several seeds.",
                                 "这里有的注意力模块带来了超出种子间离散程度的提升。通道注意力和空间注意力只是对 CNN 已经算出的特征重新加权；"
                                 "它是否值得付出代价，是一个需要实测的问题：要与不带该模块的同一网络、在多个种子上比较。"))
    return so_what(lang, _tr(lang, "An attention module that adds one or two points on ImageNet is not a free gain: on these small images "
                                   "none beat the plain network by more than the seed-to-seed spread, while each added parameters or FLOPs (table). "
                                   "The gates do learn something class-specific (below), but that is not the same as helping accuracy.",
                             "在 ImageNet 上提升一两个百分点的注意力模块并不是免费的收益：在这些小图像上，没有一个模块以超过种子间离散程度的幅度胜过普通网络，"
                             "而每个模块都增加了参数量或 FLOPs（见表）。门控确实学到了与类别相关的东西（见下文），但这不等于提高了准确率。"))


def section(results, out_dir, lang: str = "en", full_results: dict | None = None, cost_file: str | Path | None = COST_FILE):
    run_dir, out_dir = Path(getattr(results, "run_dir", out_dir)), Path(out_dir)
    name, full = pick_committed(full_results)
    # figures drawn for the page, and viewers copied beside it, go under out_dir/figures/: never into a run's own folder
    main, main_dir, folder = (full, Path(full.run_dir), f"figures/vision/{name}") if full is not None else (results, run_dir, "figures/vision/report-run")
    parts = []
    if results["data"].get("notice"):
        parts.append(f"<p><strong>{_tr(lang, 'Notice', '提示')}:</strong> {esc(results['data']['notice'])}</p>")
    if full is not None:
        parts.append(f"<p class='note'>{esc(_tr(lang, 'The committed full run', '已提交的完整运行（--full）'))}: {esc(describe_run(name, full, lang))}.</p>")
    parts.append("<p>" + _tr(lang, MODULES[0], MODULES[1]) + "</p>")
    parts.append(_paragraphs(outcome_sentences(main, lang)))
    parts.append(_accuracy_figure(main, out_dir, folder, lang))
    parts.append(results_table(main, lang))
    parts.append(_so_what(main, lang))
    inside = _paragraphs(looking_sentences(main, lang, _concentration(main))) + _figures(main, main_dir, lang)
    inside += _viewers(main, main_dir, out_dir, folder, lang)
    parts.append("<h3>" + _tr(lang, "What the attention modules look at: gates, spatial maps, MHSA and ViT attention",
                              "注意力模块在看什么：通道门控、空间图、MHSA 与 ViT 的注意力") + "</h3>" + inside)
    parts.append(details(_tr(lang, "Published ImageNet numbers, for scale", "论文中的 ImageNet 数字（作参照）"), published_html(main, lang)))
    if full is not None:
        own = "<p>" + _tr(lang, "A smaller replication, run now (fewer images and epochs, so noisier): read the claims above "
                                "from the committed run.",
                          "现在运行的一个较小规模的重复实验（图像和 epoch 更少，因此噪声更大）：结论请以上面已提交的运行为准。") + "</p>"
        own += _paragraphs(reading_sentences(results, lang, _concentration(results))) + results_table(results, lang)
        own += _accuracy_figure(results, out_dir, "figures/vision/report-run", lang)
        parts.append(details(_tr(lang, "This report’s own run (smaller, so noisier)", "本报告自己的运行（规模更小，噪声更大）"), own))
    cost = cost_html(lang, cost_file)
    if cost:
        parts.append(details(_tr(lang, "What MHSA costs at a detector's feature-map sizes", "MHSA 在检测器特征图尺寸下的代价"), cost))
    title = _tr(lang, "Attention in vision: SE, ECA, CBAM, MHSA2d and a ViT on Fashion-MNIST", "视觉中的注意力：SE、ECA、CBAM、MHSA2d 与 ViT（Fashion-MNIST）")
    return Section(title, "\n".join(p for p in parts if p))


def summary_row(results: dict, lang: str = "en", full_results: dict | None = None) -> tuple[str, str] | None:
    """The closing summary table's row: the committed run's verdict when there is one, else this run's."""
    name, full = pick_committed(full_results)
    r = full if full is not None else results
    models, verdict = r["models"], r.get("verdict", {})
    if "resnet" not in models:
        best = max(models, key=lambda n: models[n]["acc"]["mean"])
        return (_tr(lang, f"best: {LABELS.get(best, best)} {_pct(models[best]['acc']['mean'])}% test accuracy",
                    f"最好：{LABELS.get(best, best)}，测试准确率 {_pct(models[best]['acc']['mean'])}%"),
                _tr(lang, "attention over channels and pixels, not tokens", "注意力作用于通道和像素，而不是 token"))
    attn = [n for n in verdict if n != "vit" and verdict[n]["label"] != "one seed"]
    helped = [LABELS.get(n, n) for n in attn if verdict[n]["label"] == "helped"]
    if not attn:  # one seed (or no attention model): no verdict to report
        return (_tr(lang, f"ResNet {_pct(models['resnet']['acc']['mean'])}% (one seed: no verdict)",
                    f"ResNet {_pct(models['resnet']['acc']['mean'])}%（只有一个种子：无结论）"),
                _tr(lang, "run ≥ 3 seeds before judging an attention module", "判断注意力模块之前至少要跑 3 个种子"))
    where = _tr(lang, f"committed run '{name}': " if full is not None else "", f"已提交的运行“{name}”：" if full is not None else "")
    base = models["resnet"]["acc"]
    measured = where + _tr(lang, f"ResNet {_pct(base['mean'])}% ± {_pct(base['std'])}%; {len(helped)} of {len(attn)} attention modules "
                                 "beat it beyond the seed spread" + (f" ({', '.join(helped)})" if helped else ""),
                           f"ResNet {_pct(base['mean'])}% ± {_pct(base['std'])}%；{len(attn)} 个注意力模块中有 {len(helped)} 个超出种子离散 2σ 地胜过它"
                           + (f"（{'、'.join(helped)}）" if helped else ""))
    meaning = (_tr(lang, "attention over channels and pixels can help; measure it against the plain network",
                   "对通道和像素的注意力可以有帮助；要与普通网络对比来衡量") if helped else
               _tr(lang, "ImageNet gains need not carry over: on small images the modules added parameters and bought nothing here",
                   "ImageNet 上的提升未必能迁移：在小图像上，这些模块增加了参数，却没有带来提升"))
    return measured, meaning
