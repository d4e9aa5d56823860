"""The detection experiment's report section (English or Chinese): per run a reading formatted from
its numbers, the table, the three figures, the significance rule, an honest sentence on whether MHSA
helped, and the published YOLOv8 numbers as what they are — their data, not ours.

Committed ``--full`` runs (``results/detection/<run>/``, handed in as ``full_results``) are shown
first (:func:`~attnkit.experiments.lab.committed.committed_first`); the report's own smaller run
follows as a replication.
"""

from __future__ import annotations

from pathlib import Path

from ...page.html import details, esc, figure, so_what, table
from ...page.i18n import tr as _tr
from ..lab.committed import committed_first
from ..lab.results import Section
from .plots import PUBLISHED, label

DATA_WORDS = {"synthetic-objects": ("generated canvases of Fashion-MNIST items and drawn shapes over clutter",
                                    "生成的画布：Fashion-MNIST 物品与绘制的形状，加上杂乱背景"),
              "synthetic-context": ("generated canvases where an object's class depends on a bar at the far edge (a distant cue)",
                                    "生成的画布：物体的类别取决于画布远端边缘的一条横杠（远距离线索）")}
VERDICT = {"helped": ("helped", "有帮助"), "hurt": ("hurt", "变差"), "no clear difference": ("no clear difference", "无明显差异"),
           "one seed": ("one seed: no verdict", "只有一个种子：无结论")}
RULE = ("Significance rule: a variant helped (or hurt) when its mean mAP@0.5:0.95 differs from the plain detector's by more than "
        "twice the standard error of the difference, SE = √(s²_plain/n + s²_variant/n) over n seeds; otherwise there is no clear difference.",
        "显著性规则：某个变体的平均 mAP@0.5:0.95 与普通检测器相差超过差值标准误的两倍（SE = √(s²_普通/n + s²_变体/n)，n 为种子数）时，"
        "才算“有帮助”（或“变差”）；否则视为无明显差异。")


def _pm(m: dict) -> str:
    return f"{100 * m['mean']:.1f} ± {100 * m['std']:.1f}"


def results_table(r: dict, lang: str) -> str:
    verdict = r.get("verdict", {})
    head = [_tr(lang, "variant", "变体"), "mAP@0.5 (%)", "mAP@0.5:0.95 (%)", _tr(lang, "params", "参数量"), "GFLOPs",
            _tr(lang, "activation MiB / step", "每步激活内存 (MiB)"), _tr(lang, "train s / seed (shared machine)", "每个种子训练秒数（共享机器）"),
            _tr(lang, "vs plain (2 SE rule)", "相对普通（2 SE 规则）")]
    rows = []
    for name, v in r["variants"].items():
        vd = verdict.get(name)
        word = "—" if vd is None else f"{100 * vd['delta']:+.1f} (SE {100 * vd['se']:.1f}): " + _tr(lang, *VERDICT[vd["label"]])
        rows.append([label(name, lang), _pm(v["map50"]), _pm(v["map50_95"]), f"{v['params']:,}", f"{v['gflops']:.4f}",
                     f"{v['act_mem_mb']:.1f}", f"{v['train_s']['mean']:.0f}", word])
    return table(head, rows)


def outcome_sentences(r: dict, lang: str) -> list[str]:
    """What the run found, from its numbers: the plain detector, each MHSA variant's difference and cost."""
    v, verdict = r["variants"], r.get("verdict", {})
    data = DATA_WORDS.get(r["data"]["name"], (r["data"]["name"], r["data"]["name"]))
    n = len(next(iter(v.values()))["map50_95"]["per_seed"])
    out = [_tr(lang, f"Data: {data[0]}, {r['data']['train']} training and {r['data']['val']} validation images of "
                     f"{r['data']['image_size'][0]}×{r['data']['image_size'][1]} px, {len(r['data']['classes'])} classes; {n} seeds per variant.",
               f"数据：{data[1]}，{r['data']['train']} 张训练图像、{r['data']['val']} 张验证图像，"
               f"{r['data']['image_size'][0]}×{r['data']['image_size'][1]} 像素，{len(r['data']['classes'])} 个类别；每个变体 {n} 个种子。")]
    if "plain" not in v:
        return out
    p = v["plain"]
    out.append(_tr(lang, f"The plain detector reached mAP@0.5:0.95 {_pm(p['map50_95'])}% (mAP@0.5 {_pm(p['map50'])}%).",
                   f"普通检测器的 mAP@0.5:0.95 为 {_pm(p['map50_95'])}%（mAP@0.5 为 {_pm(p['map50'])}%）。"))
    for name, vd in verdict.items():
        m = v[name]
        flops = 100 * (m["gflops"] / p["gflops"] - 1)
        mem = 100 * (m["act_mem_mb"] / p["act_mem_mb"] - 1)  # not training time: a shared machine's load moves it more than the model
        out.append(_tr(lang, f"{label(name)}: {_pm(m['map50_95'])}%, a difference of {100 * vd['delta']:+.1f} points "
                             f"(SE {100 * vd['se']:.1f}): {VERDICT[vd['label']][0]}; it cost {flops:+.0f}% FLOPs and {mem:+.0f}% activation memory.",
                       f"{label(name, 'zh')}：{_pm(m['map50_95'])}%，相差 {100 * vd['delta']:+.1f} 个百分点"
                       f"（SE {100 * vd['se']:.1f}）：{VERDICT[vd['label']][1]}；代价是 FLOPs {flops:+.0f}%、激活内存 {mem:+.0f}%。"))
    return out


def honest_sentence(r: dict, lang: str) -> str:
    verdict = r.get("verdict", {})
    judged = {n: vd["label"] for n, vd in verdict.items() if vd["label"] != "one seed"}
    helped = [label(n, lang) for n, lab in judged.items() if lab == "helped"]
    if not judged:
        return _tr(lang, "With one seed there is no spread, so this run cannot say whether MHSA helped; run ≥ 3 seeds (--full).",
                   "只有一个种子就没有离散程度，这次运行无法判断 MHSA 是否有帮助；请至少跑 3 个种子（--full）。")
    if helped:
        return _tr(lang, f"Here MHSA helped beyond the 2 SE rule at: {', '.join(helped)} — on this data, at this size, for its extra cost.",
                   f"在这里，MHSA 在以下位置按 2 SE 规则确实有帮助：{'、'.join(helped)}——仅限这份数据、这个规模，并且付出了额外开销。")
    return _tr(lang, "Here MHSA did not help: no placement beat the plain detector by more than twice the standard error, "
                     "while every placement cost parameters, FLOPs and memory.",
               "在这里 MHSA 没有帮助：没有任何插入位置以超过两倍标准误的幅度胜过普通检测器，而每个位置都付出了参数、FLOPs 和内存。")


def published_html(lang: str) -> str:
    y8n, y8s, bot = PUBLISHED["yolov8n"], PUBLISHED["yolov8s"], PUBLISHED["botnet"]
    rows = [[name, f"{p['map50_95']}", f"{p['params_m']} M", f"{p['gflops']}", _tr(lang, *p["data"]), _tr(lang, *p["source"])]
            for name, p in (("YOLOv8n", y8n), ("YOLOv8s", y8s))]
    text = _tr(lang, "What others report, on their data (not ours: COCO at 640 px, 80 classes, 118k images). The small-object gains "
                     "claimed for \"YOLOv8 + MHSA\" come from write-ups on data sets such as VisDrone, usually one run without seeds; "
                     f"we have not reproduced them. BoTNet, MHSA in the last ResNet stage, reports {bot['box_ap']} box AP on COCO "
                     f"({bot['data'][0]}; {bot['source'][0]}).",
               "别人在他们的数据上报告的数字（不是我们的数据：COCO，640 像素，80 类，11.8 万张图像）。“YOLOv8 + MHSA”在小目标上的提升，"
               "来自 VisDrone 等数据集上的文章，通常只跑一次、没有多个种子；我们没有复现它们。BoTNet 把 MHSA 放在 ResNet 最后一个阶段，"
               f"在 COCO 上报告 {bot['box_ap']} box AP（{bot['data'][1]}；{bot['source'][1]}）。")
    head = [_tr(lang, "model", "模型"), "mAP@0.5:0.95 (%)", _tr(lang, "params", "参数量"), "GFLOPs", _tr(lang, "data", "数据"), _tr(lang, "source", "来源")]
    return f"<p>{esc(text)}</p>" + table(head, rows)


def render_run(r, run_dir: Path, lang: str) -> str:
    # the table folds (the page's main flow keeps ten tables); the sentences above it carry its reading
    parts = [f"<p>{esc(' '.join(outcome_sentences(r, lang)))}</p>",
             details(_tr(lang, "the numbers: mAP, parameters, FLOPs per variant", "数字：各变体的 mAP、参数量与 FLOPs"), results_table(r, lang)),
             f"<p class='note'>{esc(_tr(lang, *RULE))}</p>",
             so_what(lang, esc(honest_sentence(r, lang)))]
    alts = {"map_vs_cost.png": ("mAP against cost", "mAP 与开销"), "boxes.png": ("predicted boxes, plain vs MHSA", "预测框：普通与 MHSA"),
            "mhsa_attention.png": ("where the inserted MHSA looks", "插入的 MHSA 在看哪里")}
    for f in r.get("figures", []):
        if (run_dir / f).exists():
            parts.append(figure(run_dir / f, _tr(lang, *alts.get(f, (f, f))), lang))
    return "\n".join(parts)


def section(results, out_dir, lang: str = "en", full_results: dict | None = None) -> Section:
    run_dir = Path(getattr(results, "run_dir", out_dir))
    parts = []
    if results["data"].get("notice"):
        parts.append(f"<p><strong>{_tr(lang, 'Notice', '提示')}:</strong> {esc(results['data']['notice'])}</p>")
    parts += committed_first(full_results, lambda run, d: render_run(run, d, lang), lang,
                             ("A smaller run made for this report (fewer images, epochs and seeds): read the claims from the committed runs above.",
                              "为本报告做的一次较小的运行（图像、epoch 和种子更少）：结论请以上面已提交的运行为准。"))
    parts.append(render_run(results, run_dir, lang))
    parts.append(details(_tr(lang, "Published YOLOv8 numbers: their data, not ours", "已发表的 YOLOv8 数字：他们的数据，不是我们的"), published_html(lang)))
    return Section(_tr(lang, "Self-attention in a YOLO-style detector", "YOLO 风格检测器中的自注意力"), "\n".join(parts))


def summary_row(results: dict, lang: str = "en", full_results: dict | None = None):
    """The closing table's row: the first committed run's reading when there is one, else this run's."""
    r = next(iter(full_results.values())) if full_results else results
    if "plain" not in r["variants"]:
        return None
    return (_tr(lang, f"plain detector mAP@0.5:0.95 {_pm(r['variants']['plain']['map50_95'])}%",
                f"普通检测器 mAP@0.5:0.95 {_pm(r['variants']['plain']['map50_95'])}%"), honest_sentence(r, lang))
