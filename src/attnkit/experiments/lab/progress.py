"""The progress guard: did training make a model better than a table of token frequencies?

A run whose models learned nothing still writes tables and figures that look like results; the
guard says so instead. The yardstick is the loss of the simplest model that ignores the input: one
that predicts every target token from its frequency in the training targets. Its cross-entropy is
the **unigram entropy** of those targets,

    H = −Σ_v p(v) · ln p(v),   p(v) = count(v) / Σ_u count(u)   (nats per token, EOS included),

and a model's validation loss (mean cross-entropy per target token, nats) is compared with it:

    stalled  ⇔  best validation loss > :data:`STALL_FRACTION` × H.

Why this and not "the loss fell by 10 % from the first epoch": on an easy task the first epoch
already reaches a low loss, so a small later fall is success, not a stall; and on a hard one the loss
can fall from an initial ln V to H — learning only the token frequencies — which is a fall, yet no
use of the input. ``ln V`` (a uniform guess) is recorded for scale. When H is under
:data:`MIN_BASELINE` nats the targets are nearly constant and the test says nothing (``ok``).

Shape legend: histories are lists of per-epoch dicts (``fit``'s ``history``); ids are lists of ints.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

STALL_FRACTION = 0.8
MIN_BASELINE = 0.05

RULE = (f"a model is flagged when its best validation loss is above {STALL_FRACTION} x the unigram entropy of the "
        "training targets (the loss of predicting every token from its frequency alone, ignoring the input)")


def unigram_entropy(targets: Iterable[Sequence[int]], *, eos: int | None = None) -> float:
    """H in nats per token of the token ids in ``targets`` (plus one ``eos`` per sequence when given)."""
    counts: Counter = Counter()
    for t in targets:
        counts.update(int(i) for i in t)
        if eos is not None:
            counts[eos] += 1
    total = sum(counts.values())
    if total == 0:
        raise ValueError("unigram_entropy needs at least one target token, got none; pass the training targets")
    return -sum(c / total * math.log(c / total) for c in counts.values())


def check_progress(history: list[dict], baseline: float, *, vocab_size: int | None = None, key: str = "val_loss") -> dict:
    """One training run's verdict: ``{"ok", "first", "best", "baseline", "ratio", "uniform", "reason"}``."""
    if not isinstance(baseline, (int, float)) or not math.isfinite(baseline) or baseline < 0:
        raise ValueError(f"baseline must be a finite loss >= 0 (the unigram entropy in nats), got {baseline!r}")
    values = [float(h[key]) for h in history if key in h]
    uniform = math.log(vocab_size) if vocab_size else None
    if not values or not all(math.isfinite(v) for v in values):
        return {"ok": False, "first": None, "best": None, "baseline": baseline, "ratio": None, "uniform": uniform,
                "reason": f"no finite {key} was recorded (training diverged or never evaluated)"}
    first, best = values[0], min(values)
    ratio = best / baseline if baseline > 0 else 0.0
    out = {"ok": True, "first": first, "best": best, "baseline": baseline, "ratio": ratio, "uniform": uniform}
    if baseline < MIN_BASELINE:
        out["reason"] = f"targets are nearly constant (unigram entropy {baseline:.3f} nats): the test does not apply"
    elif best > STALL_FRACTION * baseline:
        out["ok"] = False
        out["reason"] = (f"best {key} {best:.3f} is {ratio:.2f} x the unigram entropy {baseline:.3f} (above {STALL_FRACTION}): "
                         "no better than predicting token frequencies without reading the input")
    else:
        out["reason"] = f"best {key} {best:.3f} is {ratio:.2f} x the unigram entropy {baseline:.3f}"
    return out


def summarize(checks: dict[str, list[dict]]) -> dict:
    """Run-level record for results.json: ``{"rule", "stalled": [names], "models": {name: [per-seed checks]}}``.

    A model is stalled when any of its seeds is (one untrained seed already corrupts the mean)."""
    stalled = [name for name, runs in checks.items() if any(not r["ok"] for r in runs)]
    return {"rule": RULE, "stall_fraction": STALL_FRACTION, "stalled": stalled, "models": checks}


def warning(summary: dict) -> str | None:
    """The log line for stalled models (None when every model made progress)."""
    if not summary.get("stalled"):
        return None
    parts = []
    for name in summary["stalled"]:
        bad = next(r for r in summary["models"][name] if not r["ok"])
        parts.append(f"{name} ({bad['reason']})")
    return ("WARNING: training made no meaningful progress for " + "; ".join(parts)
            + ". Its scores are not a result: train longer, lower the learning rate, or check the data and tokenization.")
