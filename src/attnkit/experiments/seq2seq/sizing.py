"""Model size, epochs and learning rate scaled to a user's parallel corpus at ``--quick``.

A fixed 1M-parameter budget trained for a fixed 6 epochs at one learning rate fits no data set in
particular: on a few thousand short pairs it is a large model that sees a few hundred updates and
learns nothing. The rule (:func:`size_for`, every number recorded in the returned dict and printed):

* **parameters** — :data:`PARAMS_PER_TOKEN` per target token of the training split (the amount of
  supervision), within [:data:`MIN_PARAMS`, :data:`MAX_PARAMS`], rounded to 5,000: a small task gets a
  small model, which also trains fastest. On a small vocabulary nearly all of it goes to the
  recurrent width (the embeddings and the output layer are tiny), and a width of ~70–90 rather than
  ~50 is what lets an attention model keep 40-token sources exact; on one core the wider step costs
  little more, since a step of a small GRU is mostly per-operation overhead;
* **batch size** — :data:`BATCH` (half of it under :data:`SMALL_DATA` pairs, so a tiny set still
  gets several updates per epoch);
* **batches** — of similar length (:class:`~attnkit.experiments.lab.batching.LengthBuckets`): the
  recurrent decoder runs one step per target position of a batch's longest pair, so on sources of
  3–40 tokens random batches spend about half of every update on padding;
* **epochs** — enough for about :data:`TARGET_STEPS` optimizer updates, within
  [:data:`MIN_EPOCHS`, :data:`MAX_EPOCHS`] (the number of updates, not of epochs, is what a model
  needs: the same rule fits 1,000 or 100,000 pairs); early stopping on the validation loss (patience
  :data:`PATIENCE`) ends a run that has converged sooner;
* **learning rate** — Adam at :data:`LR` for the recurrent models, :data:`LR_LARGE` above
  :data:`LARGE_PARAMS`, warmed up over :data:`WARMUP_FRACTION` of the updates and then decayed along
  a cosine to :data:`LR_FLOOR` × the peak (:mod:`attnkit.experiments.lab.schedule`): at a constant
  3e-3 the synthetic tasks' validation loss spiked late in training and a long target (up to 80
  characters) then missed one symbol; the Transformer keeps its rate, warmed up over a tenth of the
  updates, with the same decay.

(``max_len`` grows with the data too, in :mod:`.data`: no training pair of a user's TSV is dropped for length.)

Shape legend: lengths and counts are in tokens of the chosen tokenizers.
"""

from __future__ import annotations

import math

PARAMS_PER_TOKEN = 0.5
MIN_PARAMS, MAX_PARAMS = 60_000, 1_000_000
BATCH, SMALL_DATA = 64, 1000
TARGET_STEPS = 1200
MIN_EPOCHS, MAX_EPOCHS = 6, 60
PATIENCE = 6
LR, LR_LARGE, LARGE_PARAMS = 3e-3, 1e-3, 300_000
WARMUP_FRACTION, LR_FLOOR = 0.05, 0.05
# the config keys the rule sets
SIZED = ("params", "batch_size", "epochs", "patience", "lr", "warmup", "warmup_transformer", "schedule", "lr_floor", "batching")


def size_for(train: list[tuple[list[int], list[int]]]) -> dict:
    """The quick-preset values for encoded training pairs ``[(source ids, target ids)]``."""
    if not train:
        raise ValueError("size_for needs the encoded training pairs, got none; give a TSV with training lines")
    n = len(train)
    target_tokens = sum(len(t) + 1 for _, t in train)  # +1: EOS is predicted too
    params = int(round(min(MAX_PARAMS, max(MIN_PARAMS, PARAMS_PER_TOKEN * target_tokens)) / 5000) * 5000)
    batch = BATCH if n >= SMALL_DATA else BATCH // 2
    steps_per_epoch = math.ceil(n / batch)
    epochs = min(MAX_EPOCHS, max(MIN_EPOCHS, math.ceil(TARGET_STEPS / steps_per_epoch)))
    return {
        "pairs": n, "target_tokens": target_tokens, "params": params, "batch_size": batch, "epochs": epochs,
        "patience": PATIENCE, "lr": LR if params <= LARGE_PARAMS else LR_LARGE,
        "warmup": max(1, int(WARMUP_FRACTION * epochs * steps_per_epoch)),
        "warmup_transformer": max(1, (epochs * steps_per_epoch) // 10),
        "schedule": "cosine", "lr_floor": LR_FLOOR, "batching": "length",
        "steps": epochs * steps_per_epoch,
    }


def describe(sizing: dict) -> str:
    """The printed line: every chosen value and what it was derived from."""
    return (f"quick sizing for {sizing['pairs']:,} training pairs ({sizing['target_tokens']:,} target tokens): "
            f"{sizing['params']:,} parameters ({PARAMS_PER_TOKEN} per target token, within {MIN_PARAMS:,}..{MAX_PARAMS:,}), "
            f"batch {sizing['batch_size']}, {sizing['epochs']} epochs (~{sizing['steps']:,} updates, target {TARGET_STEPS:,}; "
            f"early stop after {sizing['patience']} without improvement), lr {sizing['lr']:g} "
            f"(warm-up {sizing['warmup']} updates, then {sizing['schedule']} to {sizing['lr_floor']:g}×), "
            f"{sizing['batching']}-sorted batches")


def apply(cfg: dict, sizing: dict, explicit: set[str]) -> dict:
    """``cfg`` with the sized values, except those in ``explicit`` (set by the user, who wins)."""
    out = dict(cfg)
    for key in SIZED:
        if key not in explicit:
            out[key] = sizing[key]
    return out
