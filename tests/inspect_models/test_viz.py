"""run_viz on the real model: every artefact written, numbers consistent with a direct computation."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("matplotlib")

from attnkit.inspect.metrics import classify_heads  # noqa: E402
from attnkit.experiments.minilm.viz import DEFAULT_TEXT, run_viz  # noqa: E402


def test_run_viz_writes_everything(minilm, tmp_path):
    model, tok = minilm
    res = run_viz(DEFAULT_TEXT, tmp_path / "viz", model=model, tokenizer=tok, per_layer=False, dpi=50)
    files = res["files"]
    for key in ("heads_grid", "focus", "diagnostics_png", "diagnostics_md", "diagnostics_json", "html", "summary"):
        assert key in files and (tmp_path / "viz").joinpath(files[key].split("/")[-1]).stat().st_size > 0, key
    for key in ("heads_grid", "focus", "diagnostics_png"):
        with open(files[key], "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    html = open(files["html"], encoding="utf-8").read()
    assert "animal" in html and "<script" in html and "http://" not in html.split("</head>")[0].replace("http://www.w3.org", "")
    md = open(files["diagnostics_md"], encoding="utf-8").read()
    assert "not explanations" in md and "| layer |" in md
    summary = json.load(open(files["summary"], encoding="utf-8"))
    assert summary["tokens"][0] == "[CLS]" and summary["tokens"][-1] == "[SEP]"
    assert summary["backends"] == {"sdpa": 6}  # weights captured while the model ran fused
    assert sum(summary["label_counts"].values()) == 72
    rows = json.load(open(files["diagnostics_json"], encoding="utf-8"))
    assert len(rows) == 72 and all("importance" in r and r["importance"] >= -1e-6 for r in rows)
    focus = summary["focus"]
    assert focus["token"] == "it" and focus["position"] == summary["tokens"].index("it") and len(focus["layers"]) == 6

    # the labels equal classify_heads on the weights computed directly
    b = tok([DEFAULT_TEXT])
    with torch.no_grad():
        attn = model(**b.as_kwargs(), output_attentions=True).attentions
    special = torch.tensor([[t in ("[CLS]", "[SEP]") for t in b.tokens[0]]])
    direct = classify_heads([a.float() for a in attn], special_keys=special)
    assert direct.labels() == summary["labels"]
    # focus row: head-averaged weights of "it" sum to 1 per layer
    for layer, e in enumerate(focus["layers"]):
        row = attn[layer][0, :, focus["position"]].mean(0)
        assert e["top"][0][2] == pytest.approx(float(row.max()), abs=1e-4)


def test_run_viz_rejects_empty_text(tmp_path):
    with pytest.raises(ValueError, match="text"):
        run_viz("   ", tmp_path)
