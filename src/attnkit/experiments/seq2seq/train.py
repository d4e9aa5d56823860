"""``attnkit experiment seq2seq``: the fixed-vector bottleneck versus attention, and the Transformer.

Bahdanau et al. 2015 (https://arxiv.org/abs/1409.0473, Fig. 2, Table 1) showed an encoder-decoder
that squeezes the source into one vector losing BLEU as sentences grow, while the same network
with attention stays flat. This experiment reruns that comparison on data that ships offline:

    attnkit experiment seq2seq [--data dates|dates-list|bible|PATH.tsv] [--quick|--full] [--seeds N] [--out DIR] [--resume]

1. data (:mod:`.data`): babel dates → ISO 8601 (sources of controlled length), lists of
   1–4 such dates (what the encoder must carry grows with the source), the KJV → Reina-Valera
   1909 verse pairs, or any TSV;
2. four models at one parameter budget (:mod:`.models`, ±10 %, printed): ``rnn`` (no
   attention), ``bahdanau``, ``luong`` and ``transformer``;
3. each trained with ``ctx.fit`` (seeded, checkpointed every epoch, ``--resume``-able, early
   stopping on the validation loss, DistributedDataParallel under torchrun), per seed;
4. the test set decoded greedily (or ``--beam K``) and scored per source-length bucket
   (:mod:`.evaluate`), mean ± std over seeds; figures (:mod:`.plots`) and a report
   section with a reading generated from the numbers (:mod:`.section`).

``--quick`` (the default: dates of 8–60 characters — weekday and month names plus filler words —,
4,000 training pairs, 60k parameters, 6 epochs, one seed, one thread) took 114 s of CPU time on
this 2-core machine (4 min 51 s of wall time while other jobs shared it), so about 2 minutes on
idle cores. It is short for the no-attention model (≈30 % exact match against ≈100 % for
Bahdanau) and one seed has no spread: it shows the shape of an under-trained run only.

``--full`` is sized for a 2-core CPU shared with other jobs (one thread, measured under that load):

* dates (``results/seq2seq/dates-full``): 10,000 training pairs, 150k parameters, 2+2 layers for
  the Transformer, up to 12 epochs (early stop, patience 3), 3 seeds. Median epoch: rnn 11.9 s,
  bahdanau 19.6 s, luong 20.7 s, transformer 15.5 s; the whole run 2,425 s (40 min wall).
  Trained that long, the no-attention GRU solves dates too (98.8 ± 0.4 % exact match, flat over
  length), so the bottleneck shows only as a small overall gap; the Transformer (76.0 ± 4.8 %)
  was still improving at epoch 12 (lr 1e-3, no warm-up) — under-trained, not a capacity verdict.
* Bible en→es (``--data bible --full``, ``results/seq2seq/bible-full``): 1M parameters, 2,000-token
  BPE vocabularies, 7,919 training verses (8,000 before the length filter), 3 epochs
  (``epochs_text``), 3 seeds. Median epoch: rnn 61 s, bahdanau 160 s, luong 109 s, transformer
  54 s; the whole run 3,494 s (58 min wall, plus 3 min of a first start). That is far too short
  to translate: best 2.2 ± 0.2 BLEU (Transformer; chrF 17.2), so the run measures time, not the
  bottleneck. A GPU allows the sizes that translate (6M parameters, 8,000-token vocabularies,
  all ~25k training verses, 20+ epochs: ``--set params_text=6000000 --set vocab_size=8000
  --set max_train=null --set epochs_text=20``).

* dates-list (``--data dates-list --full``, ``results/seq2seq/dates-list-full``): the same sizes,
  1–4 dates per source; 149 min of training over all processes (it was resumed across two
  sessions). Exact match falls from 92.6 % to 0.0 % with length without attention and stays
  at 99.4–100 % with Bahdanau or Luong: the bottleneck, as in Bahdanau et al.'s Fig. 2.
* Bible, verses split by hash (``results/seq2seq/bible-hash-full``: ``--set split='"hash"'
  --set max_train=null --set epochs_text=4 --set batching='"length"'``): all 26,116 training
  verses, 4 epochs, 105 min of training (two processes, one core each, then one that gathered
  them). BLEU: Transformer 15.5 ± 0.5, Bahdanau 10.3 ± 3.0, Luong 4.9 ± 0.4, no attention
  2.6 ± 1.0; every model is highest on verses of 0–10 words and flat beyond, so at this budget
  the Bible run shows attention's gain at every length, not a fall that grows with length.
  (Its Luong layer was the unscaled one, whose alignments saturated to one-hot rows; see
  :class:`~attnkit.modules.seq2seq_attention.LuongAttention`.)
* Bible, "-30" (``results/seq2seq/bible-hash-30``: the same flags plus ``--set train_max_words=30
  --set epochs_text=15``, ``--models rnn bahdanau luong``): 18,719 training verses of at most 30
  words, 15 epochs, tested on every length; 158 min of training on two cores (one process each,
  then one that gathered them). BLEU: Luong 19.8 ± 0.2, Bahdanau 16.8 ± 0.4, no attention
  4.9 ± 1.2; the fixed-vector GRU halves from the 0–10 to the 11–20 bucket and sits at 4–5 BLEU
  beyond, so again a gain at every length rather than a growing gap. A no-attention model run
  20 epochs on all lengths (seed 0) scored 15.4 on 0–10 words and 6.3–9.4 beyond: training
  longer did not lift it off that floor; a larger model is the next thing to try (on a GPU).

A TSV of your own (``--data PATH.tsv``): each side's tokenization is chosen from the training split
(whitespace tokens, characters or a BPE sized to the data; ``--set tokenizer=char|word|subword``
forces one) and, at ``--quick``, parameters, batch, epochs and learning rate are sized to the
number of training tokens (:mod:`.sizing`); both choices are printed and saved in results.json.
Every run ends with a progress guard (:mod:`attnkit.experiments.lab.progress`): a model whose best
validation loss is no better than predicting token frequencies is named in the log, in
``results["progress"]`` and in a warning box of the report section.

* Synthetic tasks (``results/seq2seq/{copy,reverse,translit}-quick``; data: ``python -m
  attnkit.data.synthetic_pairs TASK PATH.tsv``, 3–40 syllables per source, seed 0). A TSV is sized to
  its data at ``--quick`` (:mod:`.sizing`): ~1,200 updates, warm-up then cosine decay, length-sorted
  batches. What was measured on the way there (one seed each; exact match on the 31–40 bucket):
  with 6,000 pairs, a constant 3e-3 and random batches, Bahdanau reached copy 99.4, reverse 90.3,
  translit 71.2 (Transformer 100.0, 25.5, 17.2; no attention 0.0 on all three). With the schedule
  and length batching on the same 6,000 pairs translit rose to 86.5 (Bahdanau) and 75.5 (Luong), but
  both memorised (training loss 0.003 and 0.002 against 0.017 and 0.013 on validation), so the
  tasks are now written with 12,000 pairs and run with ``--set max_train=12000``. The seeds are
  trained one per process (``--set only_seeds=[K]``, each in its own ``--out``) and gathered with
  ``--resume``; the runs committed under ``results/`` name their seeds and models in their
  results.json. ``translit-quick`` (12,000 pairs, 175k parameters, 8 epochs of 160 updates, seed 0
  only): exact match on 31–40 syllables Bahdanau 95.7, Luong 87.6, no attention 0.0 (56.0 on
  0–10); validation loss 0.0034 and 0.0062 against 0.017 and 0.013 with 6,000 pairs.
  ``reverse-quick`` (the same rule: 115k parameters, seed 0 only): Bahdanau 97.0, Luong 92.2, no
  attention 0.0 (73.7 on 0–10). ``copy-quick`` (likewise): Bahdanau 98.7, Luong 95.4, no attention
  0.0 (66.0 on 0–10); each run's training time is in its results.json. The Transformer and seeds 1–2 were not run at these settings for lack of time: one seed
  gives no spread, so these runs show the shape, not a measured variance.

``--set batching='"length"'`` trains on batches of similar length (:mod:`attnkit.experiments.lab.batching`): on the
Bible pairs far less padding is computed per target token than with random batches.
The Transformer trains at lr 3e-3 with a 300-step linear warm-up (``warmup_transformer``); the
committed dates-full run predates that (lr 1e-3 from step 0, in its recorded config).

Shape legend: B batch, S source length, T target length (see the models' modules).
"""

from __future__ import annotations

import torch

from ...data.tokenize import EOS, collate_pairs
from ...data.tokenizer_choice import KINDS as TOKENIZER_KINDS
from . import sizing as sz
from ..lab.batching import LengthBuckets
from ..lab.progress import check_progress, unigram_entropy, warning
from ..lab.progress import summarize as summarize_progress
from ..lab.registry import Experiment, register
from ..lab.runner import SetupError
from ..lab.schedule import DECAYS, lr_schedule
from . import evaluate as ev
from . import plots
from . import section as seq2seq_report
from .data import check_data_choice, load_data
from .models import MODELS, budget_table, build, match_budget

QUICK = {
    "data": "dates", "models": list(MODELS), "seeds": 1, "params": None, "params_dates": 60_000, "params_text": 1_000_000,
    "layers": 1, "heads": 4, "dropout": 0.0, "epochs": 6, "patience": 3, "batch_size": 64, "lr": 1e-2, "lr_transformer": 3e-3,
    "warmup_transformer": 0, "grad_clip": 1.0, "batching": "random", "beam": 1, "threads": 1,
    # the recurrent models' schedule (lab/schedule.py): warm-up updates, then "constant" or "cosine" down to lr_floor × lr
    "warmup": 0, "schedule": "constant", "lr_floor": 0.05,
    "only_seeds": None,  # e.g. [1]: train only these of the run's seeds (one process per seed; gather with --resume)
    # dates
    "n_train": 4000, "n_valid": 300, "n_test": 600, "length_range": [8, 60], "filler": "words", "edges": None,
    # text (bible / TSV)
    "vocab_size": 2000, "max_len": 80, "max_train": 6000, "max_valid": 300, "max_test": 600, "split": "book",
    "train_max_words": None,  # e.g. 30: train on short sources only, test on all (the paper's "-30" models)
    # a user's TSV: tokenization per side from the data (auto | char | word | subword), and at --quick
    # parameters, batch, epochs and learning rate sized to it (sizing.py; values set by --set are kept)
    "tokenizer": "auto", "size_to_data": True,
}
FULL = {
    # sized for a 2-core CPU: 3 seeds x 4 models must finish in about an hour (see the module docstring)
    **QUICK, "seeds": 3, "params_dates": 150_000, "layers": 2, "lr": 3e-3, "lr_transformer": 3e-3,
    "warmup_transformer": 300,  # steps; 1e-3 without warm-up left the Transformer under-trained (val loss 0.415 vs 0.258 at epoch 4)
    "epochs": 12, "patience": 3, "dropout": 0.1, "threads": None,
    "n_train": 10_000, "n_valid": 500, "n_test": 1500,
    # text (bible / TSV): 1M parameters, 2,000-token BPE vocabularies, 8k verse pairs, 3 epochs (epochs_text)
    "params_text": 1_000_000, "vocab_size": 2000, "max_train": 8000, "max_valid": 500, "max_test": 1500, "epochs_text": 3,
    "size_to_data": False,
}


@register
class Seq2SeqExperiment(Experiment):
    name = "seq2seq"
    help = "RNN without attention vs Bahdanau vs Luong vs Transformer by source length (dates, Bible en→es, TSV)"
    quick = QUICK
    full = FULL
    tiny = {"n_train": 96, "n_valid": 24, "n_test": 40, "epochs": 1, "params": 20_000, "batch_size": 32, "seeds": 1}
    title = ("The seq2seq bottleneck, and alignments", "seq2seq 的瓶颈与对齐")
    question = ("Why was attention invented? Does squeezing a sentence into one vector lose information as sentences grow?",
                "为什么要发明注意力？把整句话压成一个向量，句子变长时会丢失信息吗？")
    how_to_read = (
        "The curves show accuracy per source-length bucket for each model; a falling curve is the bottleneck. The alignment "
        "pictures show, for each output character (row), which input characters (columns) the decoder attended to.",
        "曲线给出每个模型在各源长度区间上的准确率；下降的曲线就是瓶颈。对齐图中，每一行是一个输出字符，列是输入字符，颜色表示解码器关注的程度。")
    report_order = 20
    lesson = "02_scores_and_alignment"  # the course lesson the report links under "Go deeper" (a Bahdanau model learns to align)
    est_s = {"quick": 120, "tiny": 8}

    def add_arguments(self, parser):
        parser.add_argument("--data", default=None, help="dates (default), bible, or a PATH.tsv of 'source<TAB>target' lines")
        parser.add_argument("--models", nargs="+", default=None, choices=list(MODELS), help="a subset of the models")
        parser.add_argument("--params", type=int, default=None, help="parameter budget every model is sized to (±10 %%)")
        parser.add_argument("--beam", type=int, default=None, help="beam size for the test set (1 = greedy)")

    def run(self, ctx) -> dict:
        cfg = dict(ctx.config)
        _check_config(cfg)
        old_threads = torch.get_num_threads()
        if cfg.get("threads"):
            torch.set_num_threads(cfg["threads"])  # tiny models: one OpenMP thread beats two (sync costs more than math)
        try:
            return _run(ctx, cfg)
        finally:
            torch.set_num_threads(old_threads)

    def report(self, results, out_dir, lang: str = "en", full_results=None):
        return seq2seq_report.section(results, out_dir, lang, full_results=full_results)

    def summary(self, results, lang: str = "en", full_results=None):
        return seq2seq_report.summary_row(results, lang, full_results)  # the committed --full runs' scores when there are any


def _check_config(cfg: dict) -> None:
    """Every user-facing value is checked before any work (a SetupError exits the CLI with code 2)."""
    try:
        check_data_choice(cfg["data"])
    except ValueError as e:
        raise SetupError(str(e)) from None
    bad = [m for m in cfg["models"] if m not in MODELS]
    if bad or not cfg["models"]:
        raise SetupError(f"--models must be among {list(MODELS)}, got {cfg['models']!r}")
    if cfg.get("tokenizer", "auto") not in TOKENIZER_KINDS:
        raise SetupError(f"--set tokenizer= must be one of {list(TOKENIZER_KINDS)}, got {cfg['tokenizer']!r}")
    if cfg.get("schedule", "constant") not in DECAYS:
        raise SetupError(f"--set schedule= must be one of {list(DECAYS)}, got {cfg['schedule']!r}")
    only = cfg.get("only_seeds")
    if only is not None and (not isinstance(only, list) or not only
                             or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in only)):
        raise SetupError(f"--set only_seeds= must be a non-empty JSON list of seeds >= 0 (e.g. [1]), got {only!r}")
    if cfg.get("batching", "random") not in ("random", "length"):
        raise SetupError(f"--set batching= must be 'random' or 'length', got {cfg['batching']!r}")
    for key in ("epochs", "batch_size", "beam") + tuple(k for k in ("params", "epochs_text", "train_max_words") if cfg.get(k) is not None):
        v = cfg[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SetupError(f"--{key} must be an integer >= 1, got {v!r}")


def _size_to_data(ctx, cfg: dict, data) -> tuple[dict, dict | None]:
    """The config with the model and training sizes ruled from a user's TSV (``--set size_to_data``;
    sizing.py), and the sizing record for the results (None for the built-in data sets or when off).
    Keys the user set away from the preset keep the user's value."""
    if not (cfg.get("size_to_data") and data.kind != "dates" and data.name != "bible"):  # only a user's TSV
        return cfg, None
    sizing = sz.size_for(data.train)
    preset = QUICK if ctx.preset == "quick" else FULL
    kept = sorted(k for k in sz.SIZED if cfg.get(k) != preset.get(k))  # set by the user: theirs wins
    cfg = sz.apply(cfg, sizing, set(kept))
    sizing["kept_from_config"] = {k: cfg[k] for k in kept}  # the rule's value for these was not used
    ctx.log(sz.describe(sizing) + (f"; kept as set: {', '.join(f'{k}={cfg[k]}' for k in kept)}" if kept else ""))
    return cfg, sizing


def _optimizer(model, name: str, cfg: dict, total_steps: int):
    """Adam at the model's rate and its per-step schedule (``lr_schedule``; None when the rate would
    stay constant from step 0)."""
    lr = cfg["lr_transformer"] if name == "transformer" else cfg["lr"]
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    # a Transformer trained at a high rate from step 0 stalls (post-LN especially; Vaswani et al. 2017
    # §5.3 warm up over 4,000 steps): the rate rises linearly over the first `warmup` steps, then stays
    # or decays along a cosine (cfg["schedule"]); None when it would stay constant from step 0
    warmup = cfg.get("warmup_transformer", 0) if name == "transformer" else cfg.get("warmup", 0)
    sched = lr_schedule(opt, total_steps=total_steps, warmup_steps=warmup,
                        decay=cfg.get("schedule", "constant"), floor=cfg.get("lr_floor", 0.05))
    return opt, sched


def _run(ctx, cfg: dict) -> dict:
    if cfg.get("only_seeds") is not None and not set(cfg["only_seeds"]) <= set(ctx.seeds):
        raise SetupError(f"--set only_seeds={cfg['only_seeds']} must be among the run's seeds {ctx.seeds}; raise --seeds")
    data = load_data(cfg, ctx.out / "cache")  # MissingData / ValueError naming the fix, before training
    ctx.log(f"data {data.name}: {data.info}")
    for side, c in data.info.get("tokenization", {}).items():
        ctx.log(f"tokenizer {side}: {c['kind']} ({c['vocab_size']} ids) — {c['reason']}")
    V_src, V_tgt = data.src_tok.vocab_size, data.tgt_tok.vocab_size
    cfg, sizing = _size_to_data(ctx, cfg, data)
    cfg["params"] = cfg["params"] or cfg.get(f"params_{data.kind}", cfg["params_text"])  # --params, else the data kind's budget
    try:
        sizes = match_budget(cfg["models"], V_src, V_tgt, cfg)
    except ValueError as e:
        raise SetupError(str(e)) from None
    ctx.log(budget_table(sizes, cfg["params"]))
    epochs = cfg.get("epochs_text") or cfg["epochs"] if data.kind == "text" else cfg["epochs"]
    picks = ev.pick_examples(data)
    models, examples, trained = {}, {}, []
    # "length": batches of similar length (half the padding of random batches on Bible verses; see batching.py)
    batching = LengthBuckets([max(len(s), len(t)) for s, t in data.train]) if cfg["batching"] == "length" else None
    max_out = max(len(t) for _, t in data.test) + 2
    steps_per_epoch = -(-len(data.train) // cfg["batch_size"])  # the schedule's length: every batch is one update
    baseline = unigram_entropy((t for _, t in data.train), eos=EOS)  # the progress guard's yardstick (progress.py)
    for name in cfg["models"]:
        runs = []
        for seed in ctx.seeds:
            if cfg.get("only_seeds") is not None and seed not in cfg["only_seeds"]:
                continue  # another process trains it; a later --resume run gathers every seed
            ctx.seed_everything(seed)
            model = build(name, sizes[name]["width"], V_src, V_tgt, cfg).to(ctx.device)
            opt, sched = _optimizer(model, name, cfg, total_steps=epochs * steps_per_epoch)
            fit = ctx.fit(
                model, train_data=data.train, batch_size=cfg["batch_size"], collate_fn=collate_pairs, loss_fn=ev.token_loss,
                optimizer=opt, scheduler=sched, scheduler_every="step", batching=batching, epochs=epochs, tag=f"{name}-seed{seed}",
                eval_fn=lambda m: {"val_loss": ev.valid_loss(m, data.valid, ctx.device)}, monitor="val_loss",
                patience=cfg["patience"], grad_clip=cfg["grad_clip"],
            )
            if cfg.get("only_seeds") is not None:  # a training worker: the gathering run (--resume) scores every seed
                trained.append({"model": name, "seed": seed, "epochs": fit.epochs_run, "time_s": fit.time_s})
                continue
            preds = ev.translate(model, data.test, data.tgt_tok, ctx.device, beam=cfg["beam"], max_len=max_out)
            overall, buckets = ev.bucket_scores(data, preds)
            runs.append({"overall": overall, "buckets": buckets, "time_s": fit.time_s, "epochs": fit.epochs_run, "history": fit.history,
                         "focus": ev.attention_focus(model, data.test, ctx.device),
                         "progress": check_progress(fit.history, baseline, vocab_size=V_tgt)})
            if seed == ctx.seeds[0]:
                examples[name] = {"alignments": ev.alignments(model, data, picks, ctx.device), "predictions": [preds[i] for i in picks]}
            m0 = data.metric_names[0]
            ctx.log(f"{name} seed {seed}: {m0} {overall[m0]:.1f} overall, by bucket " + ", ".join(f"{b['metrics'][m0]:.1f}" for b in buckets))
        if runs:
            models[name] = _summarize(runs, sizes[name])
    if cfg.get("only_seeds") is not None:
        return {"trained": trained, "partial": True, "note": "training only (--set only_seeds); gather every seed with --resume"}
    progress = summarize_progress({n: m["progress"] for n, m in models.items()})
    if warning(progress):
        ctx.log(warning(progress))
    results = {
        "data": {"name": data.name, **data.info}, "kind": data.kind, "metric_names": list(data.metric_names),
        "length_unit": data.length_unit, "budget": cfg["params"], "threads": torch.get_num_threads(),
        "decoding": "greedy" if cfg["beam"] == 1 else f"beam {cfg['beam']}", "models": models,
        "examples": [{"source": data.test_pairs[i][0], "reference": data.test_pairs[i][1],
                      **{n: e["predictions"][k] for n, e in examples.items()}} for k, i in enumerate(picks)],
        "alignments": {n: e["alignments"] for n, e in examples.items() if e["alignments"]},
        "progress": progress, "sizing": sizing,
    }
    plots.metric_vs_length(ctx, results)
    plots.training_curves(ctx, results)
    for n, al in results["alignments"].items():
        plots.alignment_heatmaps(ctx, n, al, f"alignments_{n}.png")
    for line in seq2seq_report.reading(results):
        ctx.log(line)
    return results


def _summarize(runs: list[dict], size: dict) -> dict:
    """Per model: size, time, overall and per-bucket metrics as mean ± std over seeds, histories."""
    metrics = list(runs[0]["overall"])
    buckets = []
    for j, b in enumerate(runs[0]["buckets"]):
        buckets.append({"range": b["range"], "count": b["count"],
                        "metrics": {m: ev.mean_std([r["buckets"][j]["metrics"][m] for r in runs]) for m in metrics}})
    return {
        "params": size["params"], "width": size["width"], "train_time_s": ev.mean_std([r["time_s"] for r in runs]),
        "epochs": [r["epochs"] for r in runs], "overall": {m: ev.mean_std([r["overall"][m] for r in runs]) for m in metrics},
        "buckets": buckets, "history": [r["history"] for r in runs], "progress": [r["progress"] for r in runs],
        # how peaked the alignments are (None: no recurrent attention); a one-hot row everywhere = collapsed
        "attention_focus": None if runs[0]["focus"] is None else
        {k: ev.mean_std([r["focus"][k] for r in runs]) for k in runs[0]["focus"]},
    }
