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

from pathlib import Path

from ...page.html import esc, png_img, table
from ...page.i18n import tr as _tr
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


def _n(k: int, word: str) -> str:
    return f"{k} {word}{'' if k == 1 else 's'}"


def _pct(v: float) -> str:
    return f"{100 * v:.2f}"


def _data_name(data: dict, lang: str) -> str:
    names = DATA_NAMES.get(data["name"], (data["name"], data["name"]))
    return names[1] if lang == "zh" else names[0]


def reading_sentences(results: dict, lang: str = "en", image_concentration: dict | None = None) -> list[str]:
    """The plain-language reading, generated from the numbers, in ``lang`` ("en" or "zh").
    ``image_concentration``: :func:`viewer_concentration` of the pictured image, used when the run's
    MHSA reading predates the concentration numbers."""
    models, verdict, reading, data = results["models"], results.get("verdict", {}), results.get("reading", {}), results["data"]
    seeds = len(next(iter(models.values()))["acc"]["per_seed"])
    zh = lang == "zh"
    obj, obj_zh, kind, kind_zh = OBJECT_WORDS.get(data["name"], ("object", "物体", "class", "类别"))
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
    for name, v in verdict.items():
        m = models[name]
        what = VERDICT_WORDS[v["label"]][3 if zh else 2]
        flops = f"{100 * (v['flops_ratio'] - 1):+.1f}%" if v.get("flops_ratio") is not None else "?"
        time = f"{v['time_ratio']:.2f}" if v.get("time_ratio") is not None else "?"
        out.append(_tr(lang,
                       f"{LABELS.get(name, name)}: {_pct(m['acc']['mean'])}% ± {_pct(m['acc']['std'])}%, {100 * v['delta_acc']:+.2f} points "
                       f"against the plain ResNet (spread ±{100 * v['spread']:.2f}) — {what}; cost {v['extra_params']:+,} parameters "
                       f"({100 * (v['params_ratio'] - 1):+.1f}%), {flops} FLOPs, {time}× the training time.",
                       f"{LABELS.get(name, name)}：{_pct(m['acc']['mean'])}% ± {_pct(m['acc']['std'])}%，比普通 ResNet "
                       f"{100 * v['delta_acc']:+.2f} 个百分点（离散 ±{100 * v['spread']:.2f}）——{what}；代价：参数 {v['extra_params']:+,}"
                       f"（{100 * (v['params_ratio'] - 1):+.1f}%），FLOPs {flops}，训练时间为 {time} 倍。"))
    attn = [n for n in verdict if n != "vit" and verdict[n]["label"] != "one seed"]  # one seed: nothing to judge
    if attn and not any(verdict[n]["label"] == "helped" for n in attn):
        out.append(_tr(lang,
                       "None of the attention modules beat the plain network by more than the seed-to-seed spread here: the "
                       "ImageNet gains the papers report (below) did not show on this small, low-resolution task at this training budget.",
                       "在这里，没有任何注意力模块以超过种子间离散程度的幅度胜过普通网络：论文在 ImageNet 上报告的提升（见下文）"
                       "没有在这个小规模、低分辨率、训练预算有限的任务上出现。"))
        worse = [LABELS.get(n, n) for n in attn if verdict[n]["label"] == "hurt"]
        if worse:
            out.append(_tr(lang, f"{' and '.join(worse)} did worse than the plain network by more than the spread.",
                           f"{'和'.join(worse)} 则比普通网络差，且差距超出了离散范围。"))
    for name in ("se", "eca", "cbam"):
        r = reading.get(name, {}).get("last")
        if r:
            e2 = r["eta2_class"]
            level = 0 if e2 > 0.5 else 1 if e2 > 0.2 else 2
            kind_en = ("depend strongly on the class", "depend partly on the class", "barely depend on the class")[level]
            kind_zh = ("强烈依赖类别", "部分依赖类别", "几乎不依赖类别")[level]
            out.append(_tr(lang,
                           f"{LABELS[name]}'s last-stage gates (C = {r['channels']}) average {r['mean']:.2f} and {kind_en}: "
                           f"η² = {e2:.2f} of their variance across test images is explained by the class "
                           f"(the gate learned to re-weight channels per {kind} when η² is high).",
                           f"{LABELS[name]} 最后一个阶段的通道门控（C = {r['channels']}）均值为 {r['mean']:.2f}，{kind_zh}："
                           f"测试图像之间门控方差的 η² = {e2:.2f} 由类别解释（η² 高，说明门控学会了按{kind_zh}重新加权通道）。"))
    sp = reading.get("cbam", {}).get("spatial")
    if sp:
        out.append(_tr(lang,
                       f"CBAM's first-stage spatial gate averages {sp['on_object']:.2f} on the {obj} and {sp['on_background']:.2f} "
                       f"on the background ({100 * sp['object_share']:.0f}% of the pixels are {obj}).",
                       f"CBAM 第一阶段的空间门控在{obj_zh}上的均值为 {sp['on_object']:.2f}，在背景上为 {sp['on_background']:.2f}"
                       f"（{100 * sp['object_share']:.0f}% 的像素属于{obj_zh}）。"))
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


def results_table(results: dict, lang: str = "en") -> str:
    """Accuracy, difference to the ResNet, parameters, FLOPs and time per model, with the columns explained."""
    verdict = results.get("verdict", {})
    rows = []
    for name, m in results["models"].items():
        v = verdict.get(name)
        rows.append([LABELS.get(name, name), f"{_pct(m['acc']['mean'])} ± {_pct(m['acc']['std'])}",
                     f"{100 * v['delta_acc']:+.2f} ± {100 * v['spread']:.2f} ({VERDICT_WORDS[v['label']][1 if lang == 'zh' else 0]})" if v else "—",
                     f"{m['params']:,}", f"{m['flops'] / 1e6:.2f}", f"{m['train_time_s']['mean']:.1f}", f"{m['images_per_s']['mean']:.0f}"])
    head = (["模型", "测试准确率 %", "相对 ResNet（百分点）", "参数量", "每张图像 MFLOPs", "训练秒数", "训练图像/秒"] if lang == "zh" else
            ["model", "test accuracy %", "Δ vs ResNet (points)", "parameters", "MFLOPs / image", "train s", "train images/s"])
    return table(head, rows) + "<p class='note'>" + _tr(
        lang,
        "Columns: test accuracy, mean ± standard deviation over seeds; the difference to the plain ResNet ± the seed spread "
        "√(std² + std_ResNet²), and the verdict (a difference within the spread is no difference); trainable parameters; "
        "one image's forward pass in millions of floating-point operations (torch.utils.flop_counter); wall-clock seconds of "
        "training (mean over seeds) and training images per second. Times are comparable only within one run on an otherwise "
        "idle machine.",
        "列说明：测试准确率，多个种子的均值 ± 标准差；相对普通 ResNet 的差值 ± 种子离散程度 √(std² + std_ResNet²)，以及结论"
        "（差值在离散范围内即视为没有差别）；可训练参数量；一张图像前向传播的浮点运算数（百万，由 torch.utils.flop_counter 计数）；"
        "训练的墙钟秒数（多个种子的均值）和每秒训练图像数。时间只能在同一次运行、且机器没有其他负载时相互比较。") + "</p>"


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


def _figures(results, run_dir: Path, only: tuple[str, ...] | None = None) -> str:

    return "".join(png_img(run_dir / f, f) for f in results.get("figures", [])
                   if f.endswith(".png") and (run_dir / f).exists() and (only is None or f in only))


def _viewers(results, run_dir: Path, lang: str) -> str:

    pages = [f for f in results.get("figures", []) if f.endswith(".html") and (run_dir / f).exists()]
    if not pages:
        return ""
    links = ", ".join(f'<a href="{esc((run_dir / f).resolve().as_uri())}">{esc(f)}</a>' for f in pages)
    return "<p>" + _tr(lang, f"Interactive viewers (click a patch or pixel to make it the query): {links}.",
                       f"交互式查看器（点击一个 patch 或像素，把它设为查询）：{links}。") + "</p>"


def _sentences(results: dict, lang: str) -> str:

    run_dir = getattr(results, "run_dir", None)
    conc = viewer_concentration(Path(run_dir) / "viewer_mhsa.html") if run_dir is not None else None
    return "<p>" + "</p><p>".join(esc(s) for s in reading_sentences(results, lang, conc)) + "</p>"


def pick_committed(full_results: dict | None):
    """The committed run to read: the one of preset ``full`` (else the last by name), with its name."""
    if not full_results:
        return None, None
    name = next((n for n, r in full_results.items() if r.meta.get("preset") == "full"), list(full_results)[-1])
    return name, full_results[name]


def section(results, out_dir, lang: str = "en", full_results: dict | None = None, cost_file: str | Path | None = COST_FILE):
    run_dir = Path(getattr(results, "run_dir", out_dir))
    parts = []
    if results["data"].get("notice"):
        parts.append(f"<p><strong>{_tr(lang, 'Notice', '提示')}:</strong> {esc(results['data']['notice'])}</p>")
    name, full = pick_committed(full_results)
    if full is not None:
        parts.append(f"<h3>{esc(_tr(lang, 'The committed full run', '已提交的完整运行（--full）'))}</h3>")
        parts.append(f"<p class='note'>{esc(describe_run(name, full, lang))}.</p>")
        parts.append(_sentences(full, lang) + results_table(full, lang) + _figures(full, full.run_dir) + _viewers(full, full.run_dir, lang))
        parts.append(f"<h3>{esc(_tr(lang, 'This report’s own run', '本报告自己的运行'))}</h3>")
        parts.append("<p>" + _tr(lang, "A smaller replication, run now (fewer images and epochs, so noisier): read the claims above "
                                       "from the committed run.",
                                 "现在运行的一个较小规模的重复实验（图像和 epoch 更少，因此噪声更大）：结论请以上面已提交的运行为准。") + "</p>")
        parts.append(_sentences(results, lang) + results_table(results, lang) + _figures(results, run_dir, only=("accuracy_vs_cost.png",)))
    else:
        parts.append(_sentences(results, lang) + results_table(results, lang) + _figures(results, run_dir) + _viewers(results, run_dir, lang))
    parts.append(published_html(full if full is not None else results, lang))
    parts.append(cost_html(lang, cost_file))
    title = _tr(lang, "Attention in vision: SE, ECA, CBAM, MHSA2d and a ViT on Fashion-MNIST", "视觉中的注意力：SE、ECA、CBAM、MHSA2d 与 ViT（Fashion-MNIST）")
    return Section(title, "\n".join(parts))


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
                           f"ResNet {_pct(base['mean'])}% ± {_pct(base['std'])}%；{len(attn)} 个注意力模块中有 {len(helped)} 个超出种子离散范围地胜过它"
                           + (f"（{'、'.join(helped)}）" if helped else ""))
    meaning = (_tr(lang, "attention over channels and pixels can help; measure it against the plain network",
                   "对通道和像素的注意力可以有帮助；要与普通网络对比来衡量") if helped else
               _tr(lang, "ImageNet gains need not carry over: on small images the modules cost time and bought nothing here",
                   "ImageNet 上的提升未必能迁移：在小图像上，这些模块花了时间，却没有带来提升"))
    return measured, meaning
