"""Evaluation for ``attnkit experiment seq2seq``: decode the test set, score it per source-length bucket.

* dates: **exact match** (the whole ISO string right) and **character accuracy** (position by
  position over the longer of prediction and reference), both in percent;
* text: corpus **BLEU** (Papineni et al. 2002) and **chrF** (Popović 2015) from ``sacrebleu`` —
  its default tokenisation, so numbers compare with published sacreBLEU scores — per bucket;
* symbols (a TSV read as characters or whitespace tokens on the target side): exact match and chrF.

Buckets are by source length (the quantity Bahdanau et al. 2015 plot on their Fig. 2 x-axis).
Per seed every bucket gets one number; :func:`mean_std` then summarises the seeds (population
std, 0 for one seed). Also here: the validation loss ``fit`` monitors, and the alignment matrices
of a few test sentences for the heatmaps (teacher-forced on the model's own greedy output, so
each row is the step that produced that output token).

Shape legend: B batch, S source length, T output length.
"""

from __future__ import annotations

import numpy as np
import torch

from ...data.tokenize import BOS, EOS, PAD, collate_pairs
from ...models.decoding import beam_search, greedy_decode


def mean_std(values: list[float]) -> dict:
    v = np.asarray(values, dtype=np.float64)
    return {"mean": float(v.mean()), "std": float(v.std()), "runs": [float(x) for x in v]}


def token_loss(model, batch: dict) -> torch.Tensor:
    """Mean cross-entropy over real target tokens (padding ignored), teacher forcing."""
    logits = model(batch["src"], batch["src_len"], batch["tgt_in"]).logits  # (B, T, V)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["tgt_out"].reshape(-1), ignore_index=PAD)


@torch.no_grad()
def valid_loss(model, pairs: list, device, batch_size: int = 256) -> float:
    total, count = 0.0, 0
    for i in range(0, len(pairs), batch_size):
        b = {k: v.to(device) for k, v in collate_pairs(pairs[i : i + batch_size]).items()}
        n = int((b["tgt_out"] != PAD).sum())
        total += float(token_loss(model, b)) * n
        count += n
    return total / max(1, count)


@torch.no_grad()
def translate(model, encoded: list, tgt_tok, device, *, beam: int = 1, max_len: int = 64, batch_size: int = 128) -> list[str]:
    """Decode every source (in order, batches of similar length) and detokenise."""
    was = model.training
    model.eval()
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i][0]))
    out: list[str] = [""] * len(encoded)
    for i in range(0, len(order), batch_size):
        idx = order[i : i + batch_size]
        b = collate_pairs([encoded[j] for j in idx])
        src, src_len = b["src"].to(device), b["src_len"].to(device)
        limit = min(max_len, 2 * int(src_len.max()) + 10)
        if beam > 1:
            res = beam_search(model, src, src_len, beam_size=beam, max_len=limit)
        else:
            res = greedy_decode(model, src, src_len, max_len=limit)
        for j, row in zip(idx, res.tokens.tolist()):
            out[j] = tgt_tok.decode(row)
    model.train(was)
    return out


def char_accuracy(pred: str, ref: str) -> float:
    n = max(len(pred), len(ref), 1)
    return 100.0 * sum(a == b for a, b in zip(pred, ref)) / n


def score(kind: str, preds: list[str], refs: list[str]) -> dict[str, float]:
    """Both metrics of ``kind`` over one group of sentences (empty group → NaN)."""
    names = {"dates": ("exact_match", "char_accuracy"), "symbols": ("exact_match", "chrf")}.get(kind, ("bleu", "chrf"))
    if not refs:
        return {m: float("nan") for m in names}
    if kind == "dates":
        return {
            "exact_match": 100.0 * float(np.mean([p == r for p, r in zip(preds, refs)])),
            "char_accuracy": float(np.mean([char_accuracy(p, r) for p, r in zip(preds, refs)])),
        }
    import sacrebleu

    chrf = sacrebleu.corpus_chrf(preds, [refs]).score
    if kind == "symbols":
        return {"exact_match": 100.0 * float(np.mean([p == r for p, r in zip(preds, refs)])), "chrf": chrf}
    return {"bleu": sacrebleu.corpus_bleu(preds, [refs]).score, "chrf": chrf}


def bucket_scores(data, preds: list[str]) -> tuple[dict, list[dict]]:
    """(overall metrics, one {range, count, metrics} per bucket) for one seed's predictions."""
    refs = [t for _, t in data.test_pairs]
    overall = score(data.kind, preds, refs)
    per = []
    which = [data.bucket_of(s) for s, _ in data.test_pairs]
    for b, rng in enumerate(data.buckets()):
        members = [i for i, w in enumerate(which) if w == b]
        per.append({"range": list(rng), "count": len(members), "metrics": score(data.kind, [preds[i] for i in members], [refs[i] for i in members])})
    return overall, per


def pick_examples(data, n: int = 3) -> list[int]:
    """Test sentences for the heatmaps: the shortest, a middle and a long one (by source length)."""
    lengths = [data.source_length(s) for s, _ in data.test_pairs]
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    cap = 40 if data.kind == "text" else 10**9  # long verses make unreadable heatmaps
    order = [i for i in order if lengths[i] <= cap] or order
    picks = [order[int(q * (len(order) - 1))] for q in np.linspace(0.05, 0.97, n)]
    return list(dict.fromkeys(picks))


@torch.no_grad()
def alignments(model, data, indices: list[int], device) -> list[dict]:
    """For each test sentence: source tokens, output tokens and the (T, S) alignment matrix."""
    model.eval()
    out = []
    for i in indices:
        src_ids = data.test[i][0]
        src = torch.tensor([src_ids], device=device)
        src_len = torch.tensor([len(src_ids)], device=device)
        pred = greedy_decode(model, src, src_len, max_len=min(64, 2 * len(src_ids) + 10)).tokens[0].tolist()
        pred = pred[: pred.index(EOS) + 1] if EOS in pred else pred
        tgt_in = torch.tensor([[BOS] + pred[:-1]], device=device)  # BOS + output: row t produced output token t
        kwargs = {"need_weights": True} if hasattr(model, "decoder_layers") else {}
        w = model(src, src_len, tgt_in, **kwargs).alignments
        if w is None:
            return []
        out.append({
            "source": data.src_tok.tokens(src_ids), "output": data.tgt_tok.tokens(pred),
            "weights": [[round(float(x), 4) for x in row] for row in w[0].tolist()],
        })
    return out


@torch.no_grad()
def attention_focus(model, pairs: list, device, n: int = 256) -> dict[str, float] | None:
    """How peaked a recurrent model's alignments are on ``n`` test pairs (teacher-forced on the
    references): the mean over real output rows of the normalised entropy (1 = uniform over the real
    source tokens, 0 = one-hot) and of the largest weight. None for a model without alignments, and
    for the Transformer (its cross-attention has several heads and layers; see attnkit.inspect).

    Why: a score that saturates early in training leaves one-hot rows that pass almost no gradient
    back to it, so the alignment stops learning where to look (at worst the same source token at
    every step: a fixed-vector model in disguise), which the BLEU table alone would not reveal
    (LuongAttention's docstring has the case that prompted it).
    """
    from ...inspect.row_metrics import max_weight, normalized_entropy

    if hasattr(model, "decoder_layers"):
        return None
    was = model.training
    model.eval()
    b = {k: v.to(device) for k, v in collate_pairs(pairs[:n]).items()}
    w = model(b["src"], b["src_len"], b["tgt_in"]).alignments  # (B, T, S)
    model.train(was)
    if w is None:
        return None
    rows = b["tgt_out"] != PAD  # (B, T) real output steps
    valid = torch.arange(w.shape[-1], device=w.device)[None] < b["src_len"][:, None]  # (B, S)
    ent = normalized_entropy(w[:, None], valid)[:, 0]  # (B, T)
    peak = max_weight(w[:, None])[:, 0]
    return {"normalized_entropy": float(ent[rows].mean()), "max_weight": float(peak[rows].mean())}
