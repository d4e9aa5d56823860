"""The MiniLM demo's engine (``attnkit viz`` and the ``minilm_maps`` experiment): attention heatmaps,
head diagnostics and the HTML viewer for all-MiniLM-L6-v2.

:func:`run_viz` tokenizes one text, runs attnkit's BERT on its fused backend while
:func:`attnkit.inspect.capture` records every layer's weights, and writes to ``out_dir``:

=======================  ==========================================================================
``heads_grid.png``       layer × head grid of (L, L) heatmaps (Clark et al. 2019, https://arxiv.org/abs/1906.04341)
``layer_{i}.png``        the heads of layer i, larger
``focus.png``            the focus token's head-averaged attention row, one line per layer
``diagnostics.png``      per-head normalised entropy with each head's label letter
``diagnostics.md``       the per-head table (:func:`attnkit.inspect.metrics.classify_heads`) and what it measures
``diagnostics.json``     the same rows, plus ablation importance, as JSON
``attention.html``       self-contained interactive viewer (no network)
``summary.json``         what :func:`run_viz` returns
=======================  ==========================================================================

What the numbers are: where each head's softmax puts its mass for this one text. They are not
explanations of the output (Jain & Wallace 2019, https://arxiv.org/abs/1902.10186); the
``importance`` column is measured instead, by ablation: ``1 − cos`` between the sentence embedding
with and without that head (Michel et al. 2019, https://arxiv.org/abs/1905.10650).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ...page.figures import cjk_font, draw_both, language, zh_path

DEFAULT_TEXT = "The animal didn't cross the street because it was too tired."
SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[PAD]")

_NOTE = """\
## What this table measures

Each row describes where one head's softmax put its mass over this text's tokens,
averaged over query tokens: normalised entropy (1 = uniform), max weight, mean distance
in tokens, mass on the first token ([CLS]), on the previous / next / own token, on one
fixed key (`fixed_mass`, `fixed_position`) and on [CLS]/[SEP] (`special_mass`). Labels
come from fixed thresholds: `dead` (>= 0.8 of the mass parked on one key or on
[CLS]/[SEP]), `uniform` (entropy >= 0.9), `positional-*` (>= 0.5 on the previous / next /
own token), else `content`.

Attention weights are not explanations: a large weight does not mean the key mattered
for the output. `importance` is measured instead: 1 - cosine between the sentence
embedding with and without the head (head output multiplied by 0). One text is a small
sample: labels may change with the input.
"""


def _focus_index(tokens: list[str], focus: str | None) -> int | None:
    if not focus:
        return None
    f = focus.lower()
    for i, t in enumerate(tokens):
        if t.lower() == f:
            return i
    return None


def focus_report(attentions, tokens: list[str], index: int, *, top: int = 3) -> list[dict]:
    """Per layer, where query ``index`` attends: head-averaged top keys, top content keys
    (not [CLS]/[SEP]/itself), and the single head with the largest weight on a content key."""
    content = [j for j, t in enumerate(tokens) if t not in SPECIAL_TOKENS and j != index]
    out = []
    for layer, w in enumerate(attentions):
        row = w[0, :, index, :].double()  # (H, S)
        mean = row.mean(0)  # (S,)
        order = torch.argsort(mean, descending=True).tolist()
        corder = sorted(content, key=lambda j: -float(mean[j]))
        h, j = divmod(int(row[:, content].argmax()), len(content)) if content else (0, 0)
        out.append({
            "layer": layer,
            "top": [(tokens[j2], j2, round(float(mean[j2]), 4)) for j2 in order[:top]],
            "top_content": [(tokens[j2], j2, round(float(mean[j2]), 4)) for j2 in corder[:top]],
            "special_mass": round(float(sum(mean[j2] for j2, t in enumerate(tokens) if t in SPECIAL_TOKENS)), 4),
            "strongest_head": (
                {"head": h, "token": tokens[content[j]], "position": content[j], "weight": round(float(row[h, content[j]]), 4)}
                if content else None
            ),
        })
    return out


FOCUS_COLUMNS = ("layer", "top keys (mean over heads)", "top content keys", "[CLS]/[SEP] mass", "strongest head on a content key")


def focus_cells(entry: dict, digits: int = 3, missing: str = "-") -> list[str]:
    """One :func:`focus_report` layer entry as the text cells of :data:`FOCUS_COLUMNS`."""
    pairs = lambda items: ", ".join(f"{t} {w:.{digits}f}" for t, _, w in items)  # noqa: E731
    sh = entry["strongest_head"]
    head = f"head {sh['head']}: {sh['token']} {sh['weight']:.{digits}f}" if sh else missing
    return [str(entry["layer"]), pairs(entry["top"]), pairs(entry["top_content"]), f"{entry['special_mass']:.{digits}f}", head]


def run_viz(
    text: str = DEFAULT_TEXT,
    out_dir: str | Path = "attnkit-viz",
    *,
    model=None,
    tokenizer=None,
    focus: str | None = "it",
    ablation: bool = True,
    per_layer: bool = True,
    max_length: int = 128,
    dpi: int = 100,
) -> dict:
    """Write heatmaps, the diagnostic table and the HTML view for ``text`` into ``out_dir``.

    ``model``/``tokenizer`` default to all-MiniLM-L6-v2 (attnkit BERT, loaded offline). ``focus``
    is a token whose attention is summarised per layer (skipped when absent). ``ablation`` adds
    per-head importance (one extra forward per head); ``per_layer`` writes one larger PNG per layer.
    Returns the ``summary.json`` content, with
    ``files`` mapping each artefact to its path.
    """
    from ...inspect.viewer import save_html
    from ...models.bert_loader import BertTokenizer, load_bert

    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"text must be a non-empty string, got {text!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = load_bert() if model is None else model
    tokenizer = BertTokenizer(max_length=max_length) if tokenizer is None else tokenizer
    batch = tokenizer([text]).to(next(model.parameters()).device)
    tokens = batch.tokens[0]
    m = _measure(model, batch, ablation)
    summary = m["summary"]

    files = _draw_maps(m["attentions"], summary, tokens, out, dpi, per_layer)

    rows = summary.to_rows()
    if m["importance"] is not None:
        for r in rows:
            r["importance"] = round(float(m["importance"][r["layer"], r["head"]]), 6)

    fi = _focus_index(tokens, focus)
    focus_info = None
    if fi is not None:
        focus_info = {"token": tokens[fi], "position": fi, "layers": focus_report(m["attentions"], tokens, fi)}
        files["focus"] = _focus_figure(m["attentions"], tokens, fi, out / "focus.png", dpi)

    files["diagnostics_md"] = out / "diagnostics.md"
    files["diagnostics_md"].write_text(_diagnostics_markdown(text, tokens, summary, rows, focus_info), encoding="utf-8")
    files["diagnostics_json"] = out / "diagnostics.json"
    files["diagnostics_json"].write_text(json.dumps(rows, indent=1), encoding="utf-8")

    files["html"] = out / "attention.html"
    save_html(files["html"], m["attentions"], tokens, diagnostics=rows, title=f"attnkit · all-MiniLM-L6-v2 · {text[:60]}")

    result = {
        "text": text,
        "tokens": tokens,
        "model": "all-MiniLM-L6-v2 (attnkit BERT)",
        "backends": m["backends"],
        "label_counts": summary.counts(),
        "labels": summary.labels(),
        "heads": rows,
        "focus": focus_info,
        "embedding_norm": round(float(m["embedding"].norm()), 6),
        "files": {k: str(v) for k, v in files.items()},
    }
    files["summary"] = out / "summary.json"
    result["files"]["summary"] = str(files["summary"])
    files["summary"].write_text(json.dumps(result, indent=1), encoding="utf-8")
    return result


def _draw_maps(attentions: list, summary, tokens: list[str], out: Path, dpi: int, per_layer: bool) -> dict:
    """The layer × head grid and the diagnostics chart (each with its Chinese copy in ``zh/`` when a
    CJK font is found, see :func:`attnkit.page.figures.draw_both`) and one grid per layer
    (``per_layer``, English only: the report does not show them), under ``out``; returns {name: path}."""
    from ...inspect import plots

    def save(fig, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png", dpi=dpi)
        return path

    files = {"heads_grid": out / "heads_grid.png", "diagnostics_png": out / "diagnostics.png"}
    draw_both(save, files["heads_grid"], lambda lang: plots.plot_heads_grid(attentions, tokens, lang=lang))
    for i, w in enumerate(attentions if per_layer else []):
        files[f"layer_{i}"] = out / f"layer_{i}.png"
        plots.plot_heads_grid([w], tokens, cell_size=2.4, path=files[f"layer_{i}"], dpi=dpi)
    draw_both(save, files["diagnostics_png"], lambda lang: plots.plot_diagnostics(summary, lang=lang))
    return files


def _measure(model, batch, ablation: bool) -> dict:
    """One forward pass with the weights captured: every layer's (1, H, L, L) weights, the heads'
    labels, the sentence embedding, the backends used, and (``ablation``) each head's importance
    (one more forward pass per head)."""
    from ...inspect.capture import capture
    from ...inspect.metrics import classify_heads
    from ...inspect.rollout import head_importance
    from ...models.bert import mean_pool

    kw = batch.as_kwargs()
    model.eval()
    with torch.no_grad():
        with capture(model, record="weights") as rec:
            res = model(**kw)
        attentions = [w.float().cpu() for w in rec.attentions]  # each (1, H, L, L)
        special = torch.tensor([[t in SPECIAL_TOKENS for t in batch.tokens[0]]])
        importance = None
        if ablation:
            def run_fn(head_mask):
                h = model(**kw, head_mask=head_mask).last_hidden_state
                return mean_pool(h, batch.attention_mask)[0]

            importance = head_importance(run_fn, model.num_layers, model.num_heads, device=batch.input_ids.device)
        return {"attentions": attentions, "summary": classify_heads(attentions, special_keys=special),
                "embedding": mean_pool(res.last_hidden_state, batch.attention_mask), "importance": importance,
                "backends": rec.backends()}


def _focus_figure(attentions: list, tokens: list[str], fi: int, path: Path, dpi: int, lang: str = "en") -> Path:
    """Where token ``fi`` attends in each layer, averaged over heads: one row per layer (and its
    Chinese copy in ``zh/`` beside it when a CJK font is found)."""
    from ...inspect import plots

    if lang == "en" and cjk_font() is not None:
        with language("zh"):
            _focus_figure(attentions, tokens, fi, zh_path(path), dpi, "zh")
    mat = torch.stack([w[0, :, fi, :].mean(0) for w in attentions])  # (layers, L)
    fig = plots.plot_head(
        mat, [(f"第 {i} 层" if lang == "zh" else f"layer {i}") for i in range(len(attentions))], key_tokens=tokens,
        title=(f"{tokens[fi]!r}（位置 {fi}）在看哪里，各头平均" if lang == "zh" else
               f"where {tokens[fi]!r} (position {fi}) attends, mean over heads"), dpi=dpi, lang=lang,
    )
    # a few layers × a short text made a ~600 px picture; the report's figures are read at 1,000 px
    fig.set_size_inches(max(10.0, fig.get_figwidth()), max(3.6, fig.get_figheight()))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=max(dpi, 100))
    return path


def _diagnostics_markdown(text: str, tokens: list[str], summary, rows: list[dict], focus_info: dict | None) -> str:
    md = ["# attnkit viz: all-MiniLM-L6-v2\n", f"Text: {text!r}\n", f"Tokens ({len(tokens)}): {' '.join(tokens)}\n",
          "Label counts: " + ", ".join(f"{k} {v}" for k, v in summary.counts().items()) + "\n", _NOTE]
    md.append(_markdown_table(rows))
    if focus_info:
        md.append(f"\n## Where {focus_info['token']!r} (position {focus_info['position']}) attends\n")
        md.append("| " + " | ".join(FOCUS_COLUMNS) + " |")
        md.append("|" + "|".join("---" for _ in FOCUS_COLUMNS) + "|")
        md += ["| " + " | ".join(focus_cells(e)) + " |" for e in focus_info["layers"]]
    return "\n".join(md) + "\n"


def _markdown_table(rows: list[dict]) -> str:
    if not rows:
        return ""
    cols = list(rows[0])
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines)
