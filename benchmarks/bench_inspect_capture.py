"""Cost of attnkit.inspect.capture and of the MiniLM / Hugging Face paths, against SDPA in the same run.

Prints a table and writes JSON (medians in ms, ratios). Not a test: timings depend on the machine.

    PYTHONPATH=src python benchmarks/bench_inspect_capture.py [--threads 1] [--out benchmarks/results/inspect_capture.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from common import record

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def median_ms(fn, reps: int = 5, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def bench_calls(lengths, reps) -> list[dict]:
    import attnkit
    from attnkit.inspect.capture import capture

    rows = []
    for L in lengths:
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, 12, L, 32, generator=g) for _ in range(3))
        mask = attnkit.masks.causal()
        row = {"L": L, "B": 1, "H": 12, "E": 32, "mask": "causal"}
        row["sdpa_ms"] = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), reps)
        row["attnkit_ms"] = median_ms(lambda: attnkit.attention(q, k, v, mask=mask), reps)
        for mode in ("reports", "weights", "summaries"):
            if mode == "weights" and 12 * L * L > 2**26:
                continue

            def run(mode=mode):
                with torch.no_grad(), capture(record=mode):
                    attnkit.attention(q, k, v, mask=mask)

            row[f"capture_{mode}_ms"] = median_ms(run, reps)
        for key in list(row):
            if key.endswith("_ms") and key != "sdpa_ms":
                row[key.replace("_ms", "_vs_sdpa")] = round(row[key] / row["sdpa_ms"], 2)
        rows.append(row)
        print(row, flush=True)
    return rows


def bench_minilm(reps) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "inspect_models"))
    import transformers
    from _minilm_sentences import SENTENCES

    from attnkit.inspect.capture import capture
    from attnkit.integrations import hf as akhf
    from attnkit.models.bert_loader import load_minilm, minilm_path

    transformers.logging.set_verbosity_error()
    akhf.register()
    model, tok = load_minilm()
    b = tok(SENTENCES)
    kw = b.as_kwargs()
    hf = {impl: transformers.BertModel.from_pretrained(str(minilm_path()), attn_implementation=impl).eval()
          for impl in ("eager", "sdpa", "attnkit")}
    out = {"batch": list(b.input_ids.shape)}
    with torch.no_grad():
        for impl, m in hf.items():
            out[f"hf_{impl}_ms"] = median_ms(lambda m=m: m(**kw), reps)
        out["hf_eager_output_attentions_ms"] = median_ms(lambda: hf["eager"](**kw, output_attentions=True), reps)
        out["attnkit_bert_ms"] = median_ms(lambda: model(**kw), reps)
        out["attnkit_bert_output_attentions_ms"] = median_ms(lambda: model(**kw, output_attentions=True), reps)

        def cap(mode):
            with capture(model, record=mode):
                model(**kw)

        for mode in ("reports", "weights", "summaries"):
            out[f"attnkit_bert_capture_{mode}_ms"] = median_ms(lambda mode=mode: cap(mode), reps)
    for key in list(out):
        if key.endswith("_ms") and key != "hf_sdpa_ms":
            out[key.replace("_ms", "_vs_hf_sdpa")] = round(out[key] / out["hf_sdpa_ms"], 2)
    print(out, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--out", default="benchmarks/results/inspect_capture.json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    res = {
        "torch": torch.__version__,
        "threads": a.threads,
        "calls": bench_calls(a.lengths, a.reps),
        "minilm": bench_minilm(a.reps),
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    record(Path(a.out), res)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
