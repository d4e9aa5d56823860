"""The four models of ``attnkit experiment seq2seq`` at one parameter budget.

A comparison of architectures means little if one model simply has more weights, so every model
is sized to the same budget: for each, the width is searched (RNN hidden size; Transformer
``d_model`` in steps of its head count, feed-forward 2× wide) for the parameter count closest to
``cfg["params"]``, and the run stops with an error if any model lands outside ±10 % — the table
of counts is printed and saved with the results.

* ``rnn`` — :class:`~attnkit.models.seq2seq_rnn.Seq2SeqRNN` with ``attention="none"`` (the
  fixed-vector bottleneck), ``bahdanau``, ``luong``: GRU, bidirectional encoder, the same loop;
* ``transformer`` — :class:`~attnkit.models.transformer.Seq2SeqTransformer`, pre-LN, sinusoidal
  positions, ``cfg["layers"]`` encoder and decoder layers.

Shape legend: V_src / V_tgt vocabulary sizes; H hidden width; D d_model.
"""

from __future__ import annotations

from torch import nn

from ...models.seq2seq_rnn import Seq2SeqRNN
from ...models.transformer import Seq2SeqTransformer

MODELS = ("rnn", "bahdanau", "luong", "transformer")
TOLERANCE = 0.10
RNN_ATTENTION = {"rnn": "none", "bahdanau": "bahdanau", "luong": "luong"}


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def build(name: str, width: int, src_vocab: int, tgt_vocab: int, cfg: dict) -> nn.Module:
    """One model at one width (the width being the searched knob)."""
    if name in RNN_ATTENTION:
        return Seq2SeqRNN(
            src_vocab, tgt_vocab, emb_dim=max(8, width // 2), hidden=width, cell=cfg.get("cell", "gru"),
            bidirectional=True, attention=RNN_ATTENTION[name], dropout=cfg.get("dropout", 0.0),
        )
    if name == "transformer":
        heads = cfg.get("heads", 4)
        return Seq2SeqTransformer(
            src_vocab, tgt_vocab, d_model=width, nhead=heads, num_encoder_layers=cfg["layers"],
            num_decoder_layers=cfg["layers"], dim_feedforward=2 * width, dropout=cfg.get("dropout", 0.0),
            norm_first=True, position=cfg.get("position", "sinusoidal"), max_len=cfg.get("max_positions", 1024),
        )
    raise ValueError(f"models must be among {list(MODELS)}, got {name!r}")


def _widths(name: str, cfg: dict) -> range:
    if name == "transformer":
        h = cfg.get("heads", 4)
        step = 2 * h if cfg.get("position") == "rotary" else h  # rotary rotates pairs: even head dim
        return range(step, 1025, step)
    return range(8, 1025, 2)


def match_budget(names: list[str], src_vocab: int, tgt_vocab: int, cfg: dict) -> dict[str, dict]:
    """{name: {"width", "params", "ratio"}} with params closest to ``cfg["params"]``; raises if any
    model cannot get within ±10 % (e.g. its embeddings alone exceed the budget)."""
    budget = cfg["params"]
    out = {}
    for name in names:
        best = None
        for w in _widths(name, cfg):
            n = count_params(build(name, w, src_vocab, tgt_vocab, cfg))
            if best is None or abs(n - budget) < abs(best[1] - budget):
                best = (w, n)
            if n > budget:
                break  # counts grow with width: nothing wider can be closer
        w, n = best
        out[name] = {"width": w, "params": n, "ratio": n / budget}
    off = {k: round(v["ratio"], 3) for k, v in out.items() if abs(v["ratio"] - 1) > TOLERANCE}
    if off:
        raise ValueError(
            f"params={budget}: no width puts {sorted(off)} within ±10 % of the budget (ratios {off}); "
            "raise or lower --set params=N (vocabulary sizes: "
            f"{src_vocab} source, {tgt_vocab} target)"
        )
    return out


def budget_table(sizes: dict[str, dict], budget: int) -> str:
    """The printed table: model, width, parameters, ratio to the budget."""
    lines = [f"parameter budget {budget:,} (each model within ±10 %):"]
    for name, s in sizes.items():
        lines.append(f"  {name:12s} width {s['width']:4d}  params {s['params']:9,d}  ({100 * (s['ratio'] - 1):+.1f} %)")
    return "\n".join(lines)
