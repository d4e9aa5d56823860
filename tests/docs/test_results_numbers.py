"""Every number on docs/results.md is rebuilt here from the committed ``results/*/*/results.json`` and must
appear on the page verbatim, so a rerun experiment that changes a number fails until the page says the new one."""

from __future__ import annotations

from _doc_claims import RESULTS, ROOT, load, says


LABELS = {"resnet": "ResNet", "se": "+SE", "eca": "+ECA", "cbam": "+CBAM", "mhsa": "+MHSA (last stage)", "vit": "ViT"}


def vision_table_lines(doc: dict) -> list[str]:
    r = doc["results"]
    lines = []
    for name, m in r["models"].items():
        v = r["verdict"].get(name)
        delta = f"{100 * v['delta_acc']:+.2f} ± {100 * v['spread']:.2f} ({v['label']})" if v else "—"
        lines.append(f"| {LABELS[name]} | {100 * m['acc']['mean']:.2f} ± {100 * m['acc']['std']:.2f} | {delta} | {m['params']:,} | "
                     f"{m['flops'] / 1e6:.2f} | {m['train_time_s']['mean']:.0f} |")
    return lines


def test_vision_full_run_numbers_are_its_results_json():
    doc = load(ROOT / "results" / "vision" / "full" / "results.json")
    r, c = doc["results"], doc["config"]
    says(RESULTS, *vision_table_lines(doc))
    says(RESULTS, f"{r['data']['train']:,} training and {r['data']['test']:,} test images, {c['epochs']} epochs, {len(doc['seeds'])} seeds, "
         f"{doc['time_s'] / 60:.0f} min, {doc['env']['threads']} thread")
    labels = {n: v["label"] for n, v in r["verdict"].items()}
    assert "helped" not in labels.values()
    says(RESULTS, "none of SE, ECA, CBAM or MHSA beat the plain ResNet by more than the seed spread")
    hurt = [{"cbam": "CBAM", "mhsa": "MHSA", "vit": "the ViT"}[n] for n in ("cbam", "mhsa", "vit") if labels[n] == "hurt"]
    says(RESULTS, f"{', '.join(hurt[:-1])} and {hurt[-1]} did worse")


FORECAST_LABELS = {"naive": "naive", "seasonal_naive": "seasonal naive", "dlinear": "DLinear", "lstm": "LSTM",
                   "lstm_attention": "LSTM + attention", "transformer": "Transformer", "patch_transformer": "patch Transformer"}
FORECAST_RUNS = [("etth1-full", "in96_h24"), ("etth1-full", "in96_h96"), ("etth1-in336-full", "in336_h96"),
                 ("vic_elec-full", "in336_h48")]


def forecast_table_lines() -> list[str]:
    docs = {r: load(ROOT / "results" / "forecast" / r / "results.json") for r, _ in FORECAST_RUNS}
    lines = []
    for name, label in FORECAST_LABELS.items():
        cells = []
        for run, setting in FORECAST_RUNS:
            m = docs[run]["results"]["settings"][setting]["models"].get(name)
            cells.append(f"{m['mse']['mean']:.3f} ± {m['mse']['std']:.3f}" if m else "—")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def test_forecast_numbers_are_the_committed_runs():
    says(RESULTS, *forecast_table_lines())
    docs = {r: load(ROOT / "results" / "forecast" / r / "results.json") for r, _ in FORECAST_RUNS}
    assert all(len(d["seeds"]) >= 3 for d in docs.values())
    # the sentence "did not help" must stay true of the JSON: attention within the LSTM's spread, DLinear best
    for run, setting in FORECAST_RUNS:
        models = docs[run]["results"]["settings"][setting]["models"]
        best = min(models, key=lambda n: models[n]["mse"]["mean"])
        assert best == "dlinear", (run, setting, best)
        if "lstm" in models:
            a, b = models["lstm_attention"]["mse"], models["lstm"]["mse"]
            assert abs(a["mean"] - b["mean"]) <= (a["std"] ** 2 + b["std"] ** 2) ** 0.5, (run, setting)
    says(RESULTS, "Temporal attention did not help here")


SEQ2SEQ_RUNS = ["dates-list-full", "bible-hash-full", "bible-hash-30"]  # committed runs docs/results.md tabulates (results/seq2seq/<run>/results.json)


def seq2seq_lines(run: str) -> list[str]:
    """The per-bucket table of one committed seq2seq run and its run line, from the JSON."""
    from attnkit.experiments.seq2seq.plots import LABELS

    doc = load(ROOT / "results" / "seq2seq" / run / "results.json")
    r = doc["results"]
    metric = r["metric_names"][0]
    first = next(iter(r["models"].values()))
    ranges = [f"{lo}–{hi}" if hi < 1000 else f"> {lo - 1}" for lo, hi in (b["range"] for b in first["buckets"])]
    lines = [f"| model | parameters | " + " | ".join(f"{x} (n = {b['count']:,})" for x, b in zip(ranges, first["buckets"])) + " | all |"]
    for name, m in r["models"].items():
        cells = [f"{b['metrics'][metric]['mean']:.1f} ± {b['metrics'][metric]['std']:.1f}" for b in m["buckets"]]
        o = m["overall"][metric]
        lines.append(f"| {LABELS[name]} | {m['params']:,} | " + " | ".join(cells) + f" | {o['mean']:.1f} ± {o['std']:.1f} |")
    lines.append(f"{len(doc['seeds'])} seeds, {doc['time_s'] / 60:.0f} min, {doc['env']['threads']} thread")
    return lines


def test_seq2seq_numbers_are_the_committed_runs():
    from attnkit.experiments.seq2seq.section import reading

    for run in SEQ2SEQ_RUNS:
        says(RESULTS, *seq2seq_lines(run))
        r = load(ROOT / "results" / "seq2seq" / run / "results.json")["results"]
        says(RESULTS, *reading(r))  # the page quotes the report's own reading of the run, word for word
    m30 = load(ROOT / "results" / "seq2seq" / "bible-hash-30" / "results.json")["results"]["models"]
    says(RESULTS, f"(the fixed vector {m30['rnn']['overall']['bleu']['mean']:.1f}, Bahdanau {m30['bahdanau']['overall']['bleu']['mean']:.1f}, "
         f"Luong {m30['luong']['overall']['bleu']['mean']:.1f})",
         f"(mean largest weight {m30['luong']['attention_focus']['max_weight']['mean']:.2f}; "
         f"Bahdanau's {m30['bahdanau']['attention_focus']['max_weight']['mean']:.2f})")
    old = load(ROOT / "results" / "seq2seq" / "bible-full" / "results.json")["results"]["models"]
    best = max(old, key=lambda n: old[n]["overall"]["bleu"]["mean"])
    says(RESULTS, f"stayed at or under {old[best]['overall']['bleu']['mean']:.1f} BLEU for every model")


KV_NAMES = {"dense": "dense (full cache, beyond its training context)", "window": "window only",
            "sink_window": "4 sinks + window (StreamingLLM)", "window_recompute": "window, recomputed", "h2o": "H2O",
            "snapkv": "SnapKV", "quantized8": "sinks + window, 8-bit KIVI", "quantized4": "sinks + window, 4-bit KIVI"}


def kv_claims(r: dict) -> list[str]:
    """The table rows, the in-context perplexity and the per-seed weight on position 0 of one kv_eviction run."""
    ppl, sd = r["perplexity_last_bin"], r["perplexity_last_bin_std"]
    rows = [f"| {KV_NAMES[p]} | {ppl[p]:.3f} ± {sd[p]:.3f} |" for p in KV_NAMES]
    per_seed = [max(layer[i] for layer in r["sink"]["first_per_seed"]) for i in range(r["n_seeds"])]
    return [*rows, f"({r['dense_in_context']['mean']:.3f} ± {r['dense_in_context']['std']:.3f})",
            (", ".join(f"{w:.3f}" for w in per_seed[:-1]) + " and " if len(per_seed) > 1 else "") + f"{per_seed[-1]:.3f}",
            f"against {r['sink']['uniform_first']:.3f} for a uniform causal row"]


def test_kv_eviction_numbers_are_its_results_json():
    for run in ("quick", "full"):
        path = ROOT / "results" / "kv_eviction" / run / "results.json"
        if path.is_file():
            r = load(path)["results"]
            says(RESULTS, *kv_claims(r), f"{r['seconds']:.1f} s wall" if run == "quick" else f"{r['n_seeds']} seed")
