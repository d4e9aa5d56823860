"""docs/performance.md's table of the CPU speed goals, built from the committed benchmark JSON.

    python benchmarks/goal_table.py            # prints the table's lines
    python benchmarks/goal_table.py --write    # writes every table between its markers in docs/performance.md

Each row reads one committed file (all one thread, fp32 unless said, B=1, H=8, E=64, medians):
``flex_race.json`` (blockwise's fused route against compiled FlexAttention and SDPA in the same
run), ``bf16_window.json``, ``bias_and_small.json`` (relative biases at 8k against the tile loop of
the previous code, and small masked calls against SDPA given a prebuilt dense mask),
``causal_interleaved.json`` (causal ``auto`` against SDPA ``is_causal``, timed call by call in one process).
A second table sets ``auto`` beside compiled FlexAttention on every forward row of those runs
(``flex_lines``). ``tests/docs/test_performance_goal_table.py`` checks that docs/performance.md holds exactly
these lines.
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
HEADER = "| goal | measured | met |"
FILES = ("flex_race.json", "bf16_window.json", "bias_and_small.json", "causal_interleaved.json")


def _row(rows: list[dict], case: str, impl: str) -> dict:
    found = [r for r in rows if r.get("case") == case and r.get("impl") == impl]
    if len(found) != 1:
        raise ValueError(f"expected one row case={case!r} impl={impl!r} in the JSON, found {len(found)}")
    return found[0]


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _tagged(results: Path, name: str, tag: str | None) -> Path:
    """``name``'s file for ``tag``'s machine. Its bias rows: the run timed with glibc's default
    allocator (``bias_and_small.py --malloc default --tag TAG``) where there is one, the time a user
    sees (the other run's allocator setting, mmap above 64 KiB, is there for its peak readings)."""
    if tag is None:
        return results / name
    if name == "bias_and_small.json" and (results / f"bias_and_small_default_malloc_{tag}.json").is_file():
        return results / f"bias_and_small_default_malloc_{tag}.json"
    return results / name.replace(".json", f"_{tag}.json")


def _load(results: Path, name: str, tag: str | None = None) -> dict:
    return json.loads(_tagged(results, name, tag).read_text(encoding="utf-8"))


def table_lines(results: Path = RESULTS, tag: str | None = None) -> list[str]:
    """The table (header, rule, one line per goal) as the committed JSON gives it. With ``tag``,
    another machine's run (``flex_race_TAG.json``, ...; the benchmarks' ``--tag`` / ``--out``): the
    goals its files measure, the others left out."""
    data = {}
    for name in FILES:
        path = _tagged(results, name, tag)
        if tag is None or path.is_file():
            data[name] = json.loads(path.read_text(encoding="utf-8"))
    lines = [HEADER, "|---|---|---|"]
    for needs, part in _PARTS:
        if all(n in data for n in needs):
            lines += part(*(data[n] for n in needs), partial=tag is not None)
    return lines


def _window_lines(race, partial):
    rows = race["rows"]
    auto = _row(rows, "window256_16k_fp32_fwd", "attnkit_auto")
    flex = _row(rows, "window256_16k_fp32_fwd", "flex")
    speed = flex["median_ms"] / auto["median_ms"]
    mib = auto["peak_above_inputs_mib"]
    return [f"| window 256, n=16k: ≥ 1.8× compiled Flex, no compile step | {auto['median_ms']:.0f} vs "
            f"{flex['median_ms']:.0f} ms = {speed:.2f}× (Flex compiled for {flex['first_call_ms'] / 1000:.1f} s first) "
            f"| {_yes(speed >= 1.8)} |",
            f"| same: peak memory above inputs ≤ 1.25× the {auto['output_mib']:.0f} MiB output | {mib:.1f} MiB "
            f"| {_yes(mib <= 1.25 * auto['output_mib'])} |"]


def _bf16_lines(bf16, partial):
    ms = bf16["route"]["median_ms"]
    ratio = ms["bfloat16"] / ms["float32"]
    return [f"| window 256, n=4k: bf16 ≤ 0.4 of the fp32 time | {ms['bfloat16']:.1f} / {ms['float32']:.1f} ms "
            f"= {ratio:.2f} | {_yes(ratio <= 0.4)} |"]


def _fwdbwd_lines(race, partial):
    """The forward + backward goal; where the run holds the code the goals were set against
    (``blockwise_before``), the same-run speed-up over it beside the goal's own (720 -> 450 ms, 1.6x)."""
    rows = race["rows"]
    goal = race["goals"]["window256_16k_fp32_fwdbwd:blockwise_fused"]
    got = goal["measured"]
    mine = _row(rows, "window256_16k_fp32_fwdbwd", "blockwise_fused")
    runs = mine.get("run_medians_ms")
    spread = f" (median of {len(runs)} processes, {min(runs):.0f}–{max(runs):.0f})" if runs else ""
    line = (f"| window 256, n=16k forward+backward: ≤ 450 ms, ≤ 150 MiB | {got['median_ms']:.0f} ms{spread}, "
            f"{got['peak_above_inputs_mib']:.0f} MiB | {_yes(goal['met'])} |")
    lines = [line]
    if "speedup_vs_blockwise_before" in mine:
        before = _row(rows, "window256_16k_fp32_fwdbwd", "blockwise_before")
        speed = mine["speedup_vs_blockwise_before"]
        lines.append(f"| same, as the goal's ratio: ≥ 1.6× the blockwise the goals were set against (~720 → 450 ms) "
                     f"| {got['median_ms']:.0f} vs {before['median_ms']:.0f} ms in the same run = {speed:.2f}× "
                     f"| {_yes(speed >= 1.6)} |")
    return lines


def _causal_lines(race, causal_il, partial):
    causal = causal_il["rows"]
    worst = min(r["ratio"] for r in causal)
    lines = ["| causal n=" + " / ".join(f"{r['n'] // 1024}k" for r in causal) + ": ≥ 0.97× SDPA `is_causal` (the two "
             "timed call by call, interleaved in one process) | " + "; ".join(
                 f"{r['auto_ms']:.0f} vs {r['sdpa_causal_ms']:.0f} ms = {r['ratio']:.2f}×" for r in causal)
             + f" | {_yes(worst >= 0.97)} |"]
    rows = race["rows"]
    p_auto, p_mask = (_row(rows, "causal_prefix_2k_8k_fp32_fwd", i) for i in ("attnkit_auto", "sdpa_mask"))
    pr = p_mask["median_ms"] / p_auto["median_ms"]
    lines.append(f"| causal, 2k queries after a cached 6k prefix (bottom-right): ≥ 0.97× SDPA | {p_auto['median_ms']:.0f} vs "
                 f"{p_mask['median_ms']:.0f} ms (SDPA's `is_causal` is top-left here, so a mask) = {pr:.2f}× | {_yes(pr >= 0.97)} |")
    return lines


def _per_pair_lines(race, partial):
    rows = race["rows"]
    window_ns = _row(rows, "window256_16k_fp32_fwd", "blockwise_fused")["ns_per_pair"]
    per = {name: _row(rows, f"{name}_16k_fp32_fwd", "blockwise_fused")["ns_per_pair"] for name in ("document", "chunked", "prefix_lm")}
    worst = max(per.values()) / window_ns
    return ["| document / chunked / prefix-LM, n=16k: time per allowed pair within 1.3× the window's | "
            + " / ".join(f"{v:.1f}" for v in per.values()) + f" ns against {window_ns:.1f} ns | {_yes(worst <= 1.3)} |"]


def _bias_lines(bs, partial):
    """One line per bias kind; a partial run (another machine's) lists the kinds it measured."""
    bias = {r["case"]: r for r in bs["rows"] if r["part"] == "bias8k" and r["impl"] == "auto"}
    lines = []
    for kind, label in (("alibi", "ALiBi"), ("t5", "T5"), ("custom", "custom bias")):
        cases = [bias.get(f"{kind}_{m}") for m in ("none", "causal")]
        if partial and not all(c and "speedup_vs_blockwise_before" in c for c in cases):
            continue
        speeds = [c["speedup_vs_blockwise_before"] for c in cases]
        lines.append(f"| {label}, n=8k (no mask / causal): ≥ 1.5× the previous blockwise | "
                     + " / ".join(f"{s:.2f}×" for s in speeds) + f" | {_yes(min(speeds) >= 1.5)} |")
    return lines


def _small_lines(bs, partial):
    small = [r for r in bs["rows"] if r["part"] == "small" and r.get("code") == "this tree"]
    lines = []
    for n in sorted({r["n"] for r in small}):
        worst = max(r["ratio"] for r in small if r["n"] == n)
        best = min(r["ratio"] for r in small if r["n"] == n)
        lines.append(f"| small masked calls, n={n} (B=1 and 8; causal, window, padding, document): ≤ 1.2× SDPA with a "
                     f"dense mask | {best:.2f}–{worst:.2f}× | {_yes(worst <= 1.2)} |")
    return lines


# the table's parts in order: (the files each reads, the function building its lines)
_PARTS = (
    (("flex_race.json",), _window_lines),
    (("bf16_window.json",), _bf16_lines),
    (("flex_race.json",), _fwdbwd_lines),
    (("flex_race.json", "causal_interleaved.json"), _causal_lines),
    (("flex_race.json",), _per_pair_lines),
    (("bias_and_small.json",), _bias_lines),
    (("bias_and_small.json",), _small_lines),
)


FLEX_HEADER = "| case | `auto` | compiled Flex | `auto` ÷ Flex |"
# flex_race.json rows: label -> (case, attnkit's impl); "blockwise_fused" is backend="blockwise"
FLEX_RACE_ROWS = {
    "window 256, n=16k": ("window256_16k_fp32_fwd", "attnkit_auto"),
    "window 256, n=4k (forced blockwise)": ("window256_4k_fp32_fwd", "blockwise_fused"),
    "window 256, n=4k, bf16 (forced blockwise)": ("window256_4k_bf16_fwd", "blockwise_fused"),
    "causal, n=8k": ("causal_8k_fp32_fwd", "attnkit_auto"),
    "2k queries after a 6k cached prefix": ("causal_prefix_2k_8k_fp32_fwd", "attnkit_auto"),
    "16 documents, n=16k (forced blockwise)": ("document_16k_fp32_fwd", "blockwise_fused"),
    "causal chunks of 1,024, n=16k (forced blockwise)": ("chunked_16k_fp32_fwd", "blockwise_fused"),
    "prefix-LM, 1,024-key prefix, n=16k (forced blockwise)": ("prefix_lm_16k_fp32_fwd", "blockwise_fused"),
}
BIAS_LABELS = {"alibi": "ALiBi", "t5": "T5 buckets", "custom": "custom bias"}


def _ms(x: float) -> str:
    return f"{x:,.0f} ms" if x >= 100 else f"{x:.1f} ms" if x >= 1 else f"{x * 1000:.0f} µs"


def flex_lines(results: Path = RESULTS, tag: str | None = None) -> list[str]:
    """The table of ``auto`` against compiled FlexAttention (forward, same runs), then one line
    naming the rows where Flex is faster. With ``tag`` (another machine's run): the rows its files
    hold."""
    race = _load(results, "flex_race.json", tag)
    bs_path = _tagged(results, "bias_and_small.json", tag)
    bs = json.loads(bs_path.read_text(encoding="utf-8")) if tag is None or bs_path.is_file() else {"rows": []}
    lines, slower = [FLEX_HEADER, "|---|---|---|---|"], []

    def add(label, a, f):
        lines.append(f"| {label} | {_ms(a)} | {_ms(f)} | {a / f:.2f}× |")
        if a > f:
            slower.append(f"{label} ({_ms(f)} against {_ms(a)})")

    for label, (case, impl) in FLEX_RACE_ROWS.items():
        add(label, _row(race["rows"], case, impl)["median_ms"], _row(race["rows"], case, "flex")["median_ms"])
    bias = [r for r in bs["rows"] if r["part"] == "bias8k"]
    for kind, label in BIAS_LABELS.items():
        for m, how in (("none", "no mask"), ("causal", "causal")):
            case = f"{kind}_{m}"
            if tag is not None and not {"auto", "flex"} <= {r["impl"] for r in bias if r["case"] == case}:
                continue  # not measured on that machine
            add(f"{label}, n=8k, {how}", _row(bias, case, "auto")["median_ms"], _row(bias, case, "flex")["median_ms"])
    small = [r for r in bs["rows"] if r["part"] == "small" and r.get("code") == "this tree" and "flex_us" in r]
    for n in sorted({r["n"] for r in small}):  # one line per n: the range over its masks and batch sizes
        rs = [r for r in small if r["n"] == n]
        a, f = [r["auto_us_beside_flex"] / 1000 for r in rs], [r["flex_us"] / 1000 for r in rs]
        ratio = [r["ratio_to_flex"] for r in rs]
        lines.append(f"| small masked calls, n={n} ({len(rs)}: causal, window, padding, document; B=1 and 8) | "
                     f"{_ms(min(a))} – {_ms(max(a))} | {_ms(min(f))} – {_ms(max(f))} | {min(ratio):.2f}–{max(ratio):.2f}× |")
        slower += [f"{r['mask']}, n={n}, B={r['B']} ({_ms(r['flex_us'] / 1000)} against {_ms(r['auto_us_beside_flex'] / 1000)})"
                   for r in rs if r["ratio_to_flex"] > 1]
    lines.append("")
    lines.append("Compiled Flex is faster on: " + ("; ".join(slower) if slower else "none of these rows") + ".")
    return lines


SECOND_MACHINE = "amd_epyc"  # the tag of the other CPU's committed runs (an AMD EPYC without AMX)
FLOOR_HEADER = ("| goal | route / its kernel calls alone (+ bias function) | the route now | best at the kernel's rate "
                "| best at the GEMM's rate | reachable at the kernel's rate |")
FLOOR_LABELS = {
    "window256_16k": "window 256, n=16k: ≥ 1.8× compiled Flex",
    "window256_4k_bf16": "window 256, n=4k: bf16 ≤ 0.4 of the fp32 time",
    "alibi_8k_none": "ALiBi, n=8k, no mask: ≥ 1.5× the goals' day blockwise",
    "alibi_8k_causal": "ALiBi, n=8k, causal: ≥ 1.5× the goals' day blockwise",
    "custom_8k_none": "custom bias, n=8k, no mask: ≥ 1.5× the goals' day blockwise",
    "custom_8k_causal": "custom bias, n=8k, causal: ≥ 1.5× the goals' day blockwise",
}


def floor_lines(results: Path = RESULTS, tag: str | None = SECOND_MACHINE) -> list[str]:
    """The table of ``kernel_floor.py``'s verdicts: each missed goal, what the route reaches, and the
    best a route making the same kernel calls (or the same GEMMs) could reach on that CPU."""
    data = _load(results, "kernel_floor.json", tag)
    lines = [FLOOR_HEADER, "|---|---|---|---|---|---|"]
    for case, label in FLOOR_LABELS.items():
        v = data["verdicts"].get(case)
        if v is None:
            continue
        r = data["rows"][case]
        fn = f" + {_ms(r['bias_fn_ms'])}" if r["bias_fn_ms"] else ""
        times = f"{_ms(r['route_ms'])} / {_ms(r['kernel_ms'])}{fn}"
        kind = "speedup" if "route_speedup" in v else "ratio"  # the bias goals' speed-ups, the windows' ratios
        unit = "" if case == "window256_4k_bf16" else "×"  # a time ratio, not a speed-up
        cells = [f"{v[f'{part}_{kind}']:.2f}{unit}" for part in ("route", "kernel_floor", "gemm_floor")]
        lines.append(f"| {label} | {times} | " + " | ".join(cells) + f" | {_yes(v['reachable_at_kernel_rate'])} |")
    return lines


MARKERS = {"goal-table": table_lines, "flex-table": flex_lines,
           f"goal-table-{SECOND_MACHINE}": lambda: table_lines(tag=SECOND_MACHINE),
           f"flex-table-{SECOND_MACHINE}": lambda: flex_lines(tag=SECOND_MACHINE),
           f"floor-table-{SECOND_MACHINE}": floor_lines}


def write_page(page: Path = RESULTS.parents[1] / "docs" / "performance.md") -> None:
    """Replace the lines between each ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` pair of
    :data:`MARKERS` with its table."""
    text = page.read_text(encoding="utf-8")
    for name, lines in MARKERS.items():
        start, end = f"<!-- {name}:start -->\n", f"\n<!-- {name}:end -->"
        if start not in text or end not in text:
            raise ValueError(f"{page} has no {name} markers; add {start.strip()} and {end.strip()} around the table")
        head, rest = text.split(start, 1)
        text = head + start + "\n".join(lines()) + end + rest.split(end, 1)[1]
    page.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--write"]:
        write_page()
    else:
        print("\n".join(table_lines() + [""] + flex_lines()))
