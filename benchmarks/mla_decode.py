"""One MLA decode step at 1k/4k/16k cached tokens: attnkit's absorbed decoding against transformers'.

DeepSeek-V2-Lite's attention widths (hidden 2048, 16 heads, kv_lora_rank 512, qk_nope 128, qk_rope 64,
v 128, no q_lora_rank), float32, batch 1, one thread. Both sides hold the same latent cache
contents (the same random latents written into each), so the step does the same maths:

* ``hf``: ``DeepseekV2Attention`` (transformers, attn_implementation="sdpa") with its own
  ``DynamicCache``: the cache holds the latent, but every step sends all S cached latents through
  ``kv_b_proj`` (S·r·H·(dn + dv) multiply-adds) before attending;
* ``attnkit``: ``from_hf_attention`` of that layer, a :class:`MultiHeadLatentAttention` with a
  :class:`LatentCache`: the step folds W_UK into the query and W_UV after attention and attends the
  cache directly in multi-query form (H·S·(2r + dr) multiply-adds).

Each step's cache is cropped back to S tokens (untimed) before the next, so every timed call sees S.
Medians of ``--reps`` calls (interleaved, so load drift hits both). The two outputs are compared.

The ``prefill`` rows check ``path="auto"``'s rule (:func:`~attnkit.modules.latent_attention.plan_cost`):
L new tokens over S = 4096 cached, timed both ways; the rule's pick should be the faster or close.

    OMP_NUM_THREADS=1 python benchmarks/mla_decode.py     # → benchmarks/results/mla_decode.json
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
from pathlib import Path

import torch

from common import record

RESULTS = Path(__file__).resolve().parent / "results"
WIDTHS = dict(hidden_size=2048, num_attention_heads=16, num_key_value_heads=16, kv_lora_rank=512, qk_nope_head_dim=128,
              qk_rope_head_dim=64, v_head_dim=128, q_lora_rank=None, max_position_embeddings=32768, vocab_size=100)


def _cpu() -> str:
    try:
        m = re.search(r"^model name\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.M)
        return m.group(1).strip() if m else platform.processor()
    except OSError:
        return platform.processor()


def build():
    """(transformers DeepseekV2Attention, its rotary embedding, attnkit copy)."""
    import transformers as T
    from transformers.models.deepseek_v2 import modeling_deepseek_v2 as mv2

    from attnkit.integrations.hf import from_hf_attention

    cfg = T.AutoConfig.for_model("deepseek_v2", **WIDTHS)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    hf = mv2.DeepseekV2Attention(cfg, 0).eval()
    return hf, mv2.DeepseekV2RotaryEmbedding(cfg), from_hf_attention(hf)


def filled_caches(hf, ours, S: int):
    """The same S random latents (normalised scale) in transformers' DynamicCache and attnkit's LatentCache."""
    from transformers import DynamicCache

    g = torch.Generator().manual_seed(S)
    latent, k_rope = torch.randn(1, S, 512, generator=g), torch.randn(1, S, 64, generator=g)
    theirs = DynamicCache(config=hf.config)
    theirs.update(latent[:, None], k_rope[:, None], 0)
    mine = ours.new_cache()
    mine.update(latent, k_rope)
    return theirs, mine


def decode_row(hf, rope, ours, S: int, reps: int) -> dict:
    theirs, mine = filled_caches(hf, ours, S)
    x = torch.randn(1, 1, WIDTHS["hidden_size"], generator=torch.Generator().manual_seed(7))
    pos = torch.tensor([[S]])
    pe = rope(x, pos)
    times = {"hf": [], "attnkit": []}
    outs = {}
    import time

    for i in range(reps + 1):  # the first round warms up
        for name in ("hf", "attnkit"):
            if theirs.get_seq_length() > S:
                theirs.crop(S - theirs.get_seq_length())  # transformers crops by a negative count
            mine.crop(S)
            t0 = time.perf_counter()
            if name == "hf":
                out = hf(x, position_embeddings=pe, attention_mask=None, cache=theirs)[0]
            else:
                out = ours(x, cache=mine)[0]
            if i:
                times[name].append((time.perf_counter() - t0) * 1e3)
            outs[name] = out
    hf_ms, ak_ms = statistics.median(times["hf"]), statistics.median(times["attnkit"])
    return {"cached": S, "hf_ms": round(hf_ms, 3), "attnkit_ms": round(ak_ms, 3), "speedup": round(hf_ms / ak_ms, 1),
            "max_abs_diff": float((outs["hf"] - outs["attnkit"]).abs().max()), "reps": reps}


def prefill_row(ours, L: int, S: int, reps: int) -> dict:
    import time

    g = torch.Generator().manual_seed(L)
    x = torch.randn(1, L, WIDTHS["hidden_size"], generator=g)
    ms = {}
    for path in ("absorb", "expand"):
        ours.path = path
        cache = ours.new_cache()
        cache.update(torch.randn(1, S - L, 512, generator=g), torch.randn(1, S - L, 64, generator=g))
        runs = []
        for _ in range(reps):
            cache.crop(S - L)
            t0 = time.perf_counter()
            ours(x, cache=cache)
            runs.append((time.perf_counter() - t0) * 1e3)
        ms[path] = round(statistics.median(runs), 2)
    ours.path = "auto"
    rule = ours.choose_path(L, S)
    return {"new": L, "cached_total": S, "absorb_ms": ms["absorb"], "expand_ms": ms["expand"], "rule_picks": rule,
            "faster": min(ms, key=ms.get)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1024,4096,16384")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=str(RESULTS / "mla_decode.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    import transformers

    load = os.getloadavg()[0]  # a shared machine: the load during the run, recorded beside the numbers

    hf, rope, ours = build()
    with torch.inference_mode():
        decode = [decode_row(hf, rope, ours, int(s), args.reps) for s in args.sizes.split(",")]
        for row in decode:
            print(f"S={row['cached']:>6}: transformers {row['hf_ms']:9.2f} ms   attnkit {row['attnkit_ms']:7.2f} ms   {row['speedup']:6.1f}x   (|diff| {row['max_abs_diff']:.1e})")
        prefill = [prefill_row(ours, L, 4096, 3) for L in (1, 8, 64, 512)]
        for row in prefill:
            print(f"L={row['new']:>4} over S=4096: absorb {row['absorb_ms']:8.2f} ms  expand {row['expand_ms']:8.2f} ms  rule -> {row['rule_picks']}")
    doc = {
        "what": "one MLA decode step, DeepSeek-V2-Lite widths, float32, B=1, one thread: transformers DeepseekV2Attention "
                "(sdpa, its DynamicCache, re-expands the latent every step) vs attnkit absorbed decoding over a LatentCache; "
                "medians in ms. prefill: L new tokens over 4096 cached, absorb vs expand, and what path='auto' picks",
        "cpu": _cpu(), "load_avg_1min_at_start": round(load, 2), "threads": torch.get_num_threads(), "torch": torch.__version__,
        "transformers": transformers.__version__, "widths": WIDTHS, "decode": decode, "prefill": prefill,
    }
    record(args.out, doc, argv)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
