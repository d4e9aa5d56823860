"""Every number on docs/performance.md is rebuilt here from ``benchmarks/results/*.json`` and must appear
on the page verbatim, so a rerun benchmark that changes a number fails until the page says the new one.
(The goal, Flex and floor tables between their markers: test_performance_goal_table.py; the one-thread
backend table: test_performance_table.py.)"""

from __future__ import annotations

from _doc_claims import BENCH, PERFORMANCE, load, says


def backend_table_lines(doc: dict) -> list[str]:
    s = doc["summary"]

    def row(label, key):
        r = s[key]
        return (f"| {label} | {r['sdpa_ms']:,.0f} ms, {r['sdpa_peak_mib']:,.0f} MiB | {r['blockwise_ms']:,.0f} ms "
                f"({r['speedup']:.3g}×), {r['blockwise_peak_mib']:,.0f} MiB (1/{1 / r['memory_ratio']:.0f}) |")

    tw = s["train_window_peak_mib"]
    ns = sorted(tw["sdpa"], key=int)
    sizes = "/".join(f"{int(n) // 1024}k" for n in ns)
    sdpa, blockwise = (" / ".join(f"{tw[b][n]:.0f}" for n in ns) for b in ("sdpa", "blockwise"))
    bf = s["bf16_dense_4k"]
    return [row("sliding window 256, n=16k, fp32", "window256_16k_fp32"), row("ALiBi, n=8k, fp32", "alibi_8k_fp32"),
            row("T5 bias, n=8k, fp32", "t5_8k_fp32"),
            f"| no mask, n=4k, bf16 | {bf['sdpa_ms']:,.0f} ms | {bf['blockwise_ms']:,.0f} ms ({bf['speedup']:.3g}×) |",
            f"| fwd+bwd, window 256, n={sizes} | {sdpa} MiB | {blockwise} MiB |"]


def sweep_claims(doc: dict) -> list[str]:
    a = doc["auto_choices"]
    rows = [r for r in doc["rows"] if "median_ms" in r]
    sizes = sorted({r["n"] for r in rows})
    claims = [f"n ∈ {{{', '.join(f'{n // 1024}k' for n in sizes)}}} × {len({r['mask'] for r in rows})} masks × "
              f"{len({r['bias'] for r in rows})} biases × fp32/bf16 × {len({r['backend'] for r in rows})} backends",
              f"in {a['chose_fastest']} of {a['configs']} configurations", f"within 1.10× of it in {a['within_1_10']}"]
    for m in a["misses"]:
        claims.append(f"n = {m['n'] // 1024}k {'bf16' if m['dtype'] == 'bfloat16' else 'fp32'} {m['mask']}/{m['bias']}: "
                      f"{m['chosen']}, {m['chosen_over_fastest']:.2f}× {m['fastest']}")
    return claims


def test_backend_numbers_are_the_committed_benchmarks():
    doc = load(BENCH / "attention.json")
    says(PERFORMANCE, *backend_table_lines(doc))
    inter = [r["auto_over_sdpa"] for r in doc["summary"]["auto_vs_sdpa"] if r["interleaved"]]
    says(PERFORMANCE, f"within {max(inter):.2f}× of calling SDPA directly in {len(inter)} interleaved comparisons")
    ns = [r["n"] for r in doc["summary"]["auto_vs_sdpa"] if r["interleaved"]]
    says(PERFORMANCE, f"(`attention.json`, n = {min(ns) // 1024}k–{max(ns) // 1024}k,")
    rows = load(BENCH / "auto_overhead.json")["rows"]
    small = min(r["n"] for r in rows)
    over = [r["overhead_us"] for r in rows if r["n"] == small]  # auto minus SDPA called directly, one thread
    says(PERFORMANCE, f"about {sum(over) / len(over):.0f} µs per call (`benchmarks/results/auto_overhead.json`, n = {small}, one thread)")
    for suite in ("quick", "full"):
        wall = load(BENCH / f"attention_{suite}.json")["wall_s"]
        took = f"{wall:.0f} s" if wall < 120 else f"{wall / 60:.0f} min"
        says(PERFORMANCE, f"took {took} when committed (`attention_{suite}.json`)")
    says(PERFORMANCE, *sweep_claims(load(BENCH / "attention_full.json")))


def test_the_sweep_claims_name_every_miss_at_its_size():
    # the example: the misses were said to be at n = 1k while the sweep lists 4k and 16k too
    doc = load(BENCH / "attention_full.json")
    sizes = {m["n"] for m in doc["auto_choices"]["misses"]}
    text = PERFORMANCE.read_text(encoding="utf-8")
    assert all(f"n = {n // 1024}k " in text for n in sizes)
    assert "the misses are at n = 1k" not in text


def test_decoding_numbers_are_the_committed_benchmark():
    d = load(BENCH / "decoding.json")
    m = d["models"]
    says(PERFORMANCE, f"A {d['config']['tokens']:,}-token greedy generation",
         f"{m['1_layer']['dynamic']['speedup_vs_recompute']:.0f}× (1 layer) and {m['4_layer']['dynamic']['speedup_vs_recompute']:.0f}× (4 layers)")


def vision_cost_lines(doc: dict) -> list[str]:
    rows = {(r["size"], r["impl"]): r for r in doc["rows"]}
    out = []
    for size in sorted({s for s, _ in rows}):
        a, n = rows[(size, "auto")], rows[(size, "naive")]
        out.append(f"| {size}×{size} | {a['median_ms']:,.0f} ms, {a['peak_mib']:,.0f} MiB | {n['median_ms']:,.0f} ms, "
                   f"{n['peak_mib']:,.0f} MiB | {n['median_ms'] / a['median_ms']:.2f}×, 1/{n['peak_mib'] / a['peak_mib']:.1f} |")
    return out


def test_vision_cost_numbers_are_the_committed_benchmark():
    doc = load(BENCH / "vision_cost.json")
    says(PERFORMANCE, *vision_cost_lines(doc))
    r = doc["rows"][0]
    assert all((x["channels"], x["heads"], x["threads"], x["runs"]) == (r["channels"], r["heads"], r["threads"], r["runs"]) for x in doc["rows"])
    says(PERFORMANCE, f"C = {r['channels']}, {r['heads']} heads, forward + backward, {r['threads']} thread, median of {r['runs']} runs")


def test_the_quick_report_time_is_the_measured_one():
    t = load(BENCH / "report_quick_time.json")
    assert t["rc"] == 0 and t["command"].startswith("attnkit report")
    says(PERFORMANCE, f"{t['wall_s'] // 60:.0f} min {t['wall_s'] % 60:.0f} s")



def test_hf_sweep_numbers_are_the_committed_sweep():
    c = load(BENCH / "hf_sweep_causal_lm.json")["summary"]
    assert c["mismatch"] == 0
    says(PERFORMANCE, f"{c['match_1e-5']} of {c['total']} match eager to 1e-5 on a padded batch,",
         f"{c['refused']} refused, {c['mismatch']} differ")




def test_flex_cuda_numbers_are_the_committed_gpu_run():
    doc = load(BENCH / "flex_cuda.json")
    row = next(r for r in doc["speed"] if r["case"] == "window256_bf16_fwd")
    assert row["n"] == 16384 and "H200" in doc["device"]
    says(PERFORMANCE, f"at n = 16k ({row['flex']['median_ms']:.2f} ms against SDPA's {row['sdpa']['median_ms']:.2f} ms with a dense mask")


def test_packed_vs_padded_numbers_are_the_committed_benchmark():
    r = load(BENCH / "packed_vs_padded.json")
    speed, memory = r["speedup_packed_over_padded"], r["memory_padded_over_packed"]
    assert speed == r["median_ms"]["padded"] / r["median_ms"]["packed"]
    assert memory == r["memory"]["padded"]["extra_mib_median"] / r["memory"]["packed"]["extra_mib_median"]
    says(PERFORMANCE, f"On {r['batch_summary']['n']} Bible verses ({r['batch_summary']['min']} to {r['batch_summary']['max']} "
         f"tokens, {r['tokens']['padded_over_real']:.1f}x padding), one causal layer's forward + backward ran "
         f"{speed:.2f}x faster packed than padded and used {memory:.2f}x less memory")
