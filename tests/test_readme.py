"""The README keeps its promises: every code block runs as written, every command parses, and every
number in its prose is the committed JSON's.

* Every ```python block runs as-is, each in a fresh namespace and a temporary working directory
  (files it writes do not land in the repository): a block that uses a name it does not define
  (``prompt``, ``transformers``, ``path``) fails here.
* Every line of every ```bash block is checked: ``attnkit ...`` (or ``.venv-*/bin/attnkit ...``)
  must be accepted by the real command-line parser (the experiment's own parser for
  ``attnkit experiment NAME ...``), ``make X`` must be a Makefile target, ``torchrun ... -m MOD``
  must name an importable module; any other line fails the test until a check is added for it.
* Numbers: each claim is rebuilt here from ``benchmarks/results/*.json`` or
  ``results/*/*/results.json`` and must appear in the README verbatim, so a rerun benchmark that
  changes a number fails this test until the README says the new number.

Skipped only when README.md does not exist.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BENCH = ROOT / "benchmarks" / "results"
TEXT = README.read_text(encoding="utf-8") if README.exists() else ""
pytestmark = pytest.mark.skipif(not README.exists(), reason="README.md is absent")


# ------------------------------------------------------------------ extracting blocks
def code_blocks(text: str, lang: str) -> list[tuple[str, int, str]]:
    """``[(heading, line, code)]`` for every fenced block of ``lang``: the "## " heading above it, the
    1-based line of its opening fence, and its code."""
    out, heading = [], "(top)"
    fence = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", flags=re.M | re.S)
    headings = [(m.start(), m.group(1).strip()) for m in re.finditer(r"^##\s+(.*)$", text, flags=re.M)]
    for m in fence.finditer(text):
        heading = next((h for pos, h in reversed(headings) if pos < m.start()), "(top)")
        if m.group(1) == lang:
            out.append((heading, text.count("\n", 0, m.start()) + 1, m.group(2)))
    return out


def command_lines(code: str) -> list[str]:
    """The commands of a bash block: comments dropped, backslash continuations joined."""
    joined = re.sub(r"\s*\\\n\s*", " ", code)
    return [line.split(" #")[0].strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_block_extraction():
    text = ("# x\n```python\na = 1\n```\n## One\ntext\n```bash\nls  # list\n```\n```python\nb = 2\n```\n"
            "## Two\n```python\nc = 3\n```\n")
    assert code_blocks(text, "python") == [("(top)", 2, "a = 1\n"), ("One", 10, "b = 2\n"), ("Two", 14, "c = 3\n")]
    assert code_blocks(text, "bash") == [("One", 7, "ls  # list\n")]
    assert command_lines("make x   # y\n# only a comment\nattnkit a \\\n  --b c\n") == ["make x", "attnkit a --b c"]


# ------------------------------------------------------------------ every block runs / parses
PY_BLOCKS = code_blocks(TEXT, "python")
BASH_LINES = [(h, n, line) for h, n, code in code_blocks(TEXT, "bash") for line in command_lines(code)]


def test_the_readme_has_blocks_to_check():
    assert len(PY_BLOCKS) >= 5 and len(BASH_LINES) >= 8  # a parsing slip must not turn every check below into nothing


@pytest.mark.parametrize("heading,line,code", PY_BLOCKS, ids=[f"L{n}-{h[:24]}" for h, n, _ in PY_BLOCKS])
def test_every_python_block_runs_as_written(heading, line, code, tmp_path, monkeypatch):
    import attnkit

    monkeypatch.chdir(tmp_path)
    budget = attnkit.get_memory_budget()
    namespace = {"__name__": "__readme__"}
    try:
        exec(compile(code, f"{README}:{line} ({heading})", "exec"), namespace)  # noqa: S102 - the README is ours
    finally:  # a block may change process-wide settings; later tests must not see them
        attnkit.set_memory_budget(budget)
        attnkit.set_tile_sizes()


def _parse(argv: list[str]):
    """Parse ``argv`` (after ``attnkit``) with the real parsers; SystemExit(0) from --help/--list is fine."""
    if argv and argv[0] == "experiment":
        from attnkit.experiments.lab.command import build_parser
        from attnkit.experiments.lab.registry import get

        if argv[1:2] in (["--list"], ["--help"]):
            return None
        parser, _ = build_parser(get(argv[1]))
        return parser.parse_args(argv[2:])
    from attnkit.cli import _parser

    return _parser().parse_args(argv)


@pytest.mark.parametrize("heading,line,cmd", BASH_LINES, ids=[f"L{n}-{c[:40]}" for _, n, c in BASH_LINES])
def test_every_shell_line_is_a_real_command(heading, line, cmd):
    argv = shlex.split(cmd)
    if re.fullmatch(r"(\.venv-\w+/bin/)?attnkit", argv[0]):
        try:
            _parse(argv[1:])
        except SystemExit as e:
            assert e.code == 0, f"README line {line}: `{cmd}` is rejected by attnkit's parser"
    elif argv[0] == "make":
        targets = re.findall(r"^([\w.-]+):", (ROOT / "Makefile").read_text(), flags=re.M)
        assert set(argv[1:]) <= set(targets), f"README line {line}: no Makefile target {argv[1:]}"
    elif argv[0] == "torchrun":
        module = argv[argv.index("-m") + 1]
        assert importlib.util.find_spec(module) is not None, f"README line {line}: {module} is not importable"
    else:
        pytest.fail(f"README line {line}: no check for `{cmd}`; add one to tests/test_readme.py")


def test_the_two_setup_commands_come_first_and_each_makes_its_environment():
    heading, _, code = code_blocks(TEXT, "bash")[0]
    assert heading.lower().startswith("set-up") and command_lines(code) == ["make report", "make test"]
    make = (ROOT / "Makefile").read_text()
    assert re.search(r"^report: \$\(REPORT_VENV\)/\.installed", make, flags=re.M)
    assert re.search(r"^test: \$\(TEST_VENV\)/\.installed", make, flags=re.M)


def test_the_setup_versions_are_the_makefile_and_pyproject_ones():
    import tomllib

    make = (ROOT / "Makefile").read_text()
    torch_pin = re.search(r"^TORCH \?= (\S+)", make, flags=re.M).group(1)
    workers = re.search(r"pytest -n (\d+)", make).group(1)
    python = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"].removeprefix(">=")
    _has(f"Python ≥ {python}", f"`{torch_pin}`", f"pytest on {workers} workers")


def test_commands_experiments_and_course_are_documented():
    from attnkit.experiments.lab.registry import experiments

    for flag in ("--lang zh", "--force", "--results DIR", "--quick", "--full", "--seeds N", "--out DIR", "--resume", "attnkit doctor"):
        assert flag in TEXT, flag
    for e in experiments():
        assert f"`{e.name}`" in TEXT, f"experiment {e.name} is not listed in the README"
    for page in ("docs/course/README.md", "docs/course/README.zh.md"):
        assert f"({page})" in TEXT and (ROOT / page).is_file()
    lessons = sorted((ROOT / "docs" / "course" / "en").glob("[0-9][0-9]_*.py"))
    assert f"{len(lessons)} lessons" in TEXT


# ------------------------------------------------------------------ numbers: rebuilt from the committed JSON
def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _has(*claims: str):
    """Each claim appears in the README (line breaks in its prose count as spaces)."""
    flat = re.sub(r"\s+", " ", TEXT)
    missing = [c for c in claims if c not in flat]
    assert not missing, "README lacks (or says otherwise than the JSON): " + " | ".join(missing)


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
    doc = _load(BENCH / "attention.json")
    _has(*backend_table_lines(doc))
    inter = [r["auto_over_sdpa"] for r in doc["summary"]["auto_vs_sdpa"] if r["interleaved"]]
    _has(f"within {max(inter):.2f}× of calling SDPA directly in {len(inter)} interleaved comparisons")
    ns = [r["n"] for r in doc["summary"]["auto_vs_sdpa"] if r["interleaved"]]
    _has(f"(`attention.json`, n = {min(ns) // 1024}k–{max(ns) // 1024}k,")
    rows = _load(BENCH / "auto_overhead.json")["rows"]
    small = min(r["n"] for r in rows)
    over = [r["overhead_us"] for r in rows if r["n"] == small]  # auto minus SDPA called directly, one thread
    _has(f"about {sum(over) / len(over):.0f} µs per call (`benchmarks/results/auto_overhead.json`, n = {small}, one thread)")
    for suite in ("quick", "full"):
        wall = _load(BENCH / f"attention_{suite}.json")["wall_s"]
        _has(f"({wall:.0f} s when committed)" if wall < 120 else f"({wall / 60:.0f} min when committed)")
    _has(*sweep_claims(_load(BENCH / "attention_full.json")))


def test_the_sweep_claims_name_every_miss_at_its_size():
    # the example: the misses were said to be at n = 1k while the sweep lists 4k and 16k too
    doc = _load(BENCH / "attention_full.json")
    sizes = {m["n"] for m in doc["auto_choices"]["misses"]}
    assert all(f"n = {n // 1024}k " in TEXT for n in sizes)
    assert "the misses are at n = 1k" not in TEXT


def test_decoding_numbers_are_the_committed_benchmark():
    d = _load(BENCH / "decoding.json")
    m = d["models"]
    _has(f"A {d['config']['tokens']:,}-token greedy generation",
         f"{m['1_layer']['dynamic']['speedup_vs_recompute']:.0f}× (1 layer) and {m['4_layer']['dynamic']['speedup_vs_recompute']:.0f}× (4 layers)")


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
    doc = _load(ROOT / "results" / "vision" / "full" / "results.json")
    r, c = doc["results"], doc["config"]
    _has(*vision_table_lines(doc))
    _has(f"{r['data']['train']:,} training and {r['data']['test']:,} test images, {c['epochs']} epochs, {len(doc['seeds'])} seeds, "
         f"{doc['time_s'] / 60:.0f} min, {doc['env']['threads']} thread")
    labels = {n: v["label"] for n, v in r["verdict"].items()}
    assert "helped" not in labels.values()
    _has("none of SE, ECA, CBAM or MHSA beat the plain ResNet by more than the seed spread")
    hurt = [{"cbam": "CBAM", "mhsa": "MHSA", "vit": "the ViT"}[n] for n in ("cbam", "mhsa", "vit") if labels[n] == "hurt"]
    _has(f"{', '.join(hurt[:-1])} and {hurt[-1]} did worse")


def vision_cost_lines(doc: dict) -> list[str]:
    rows = {(r["size"], r["impl"]): r for r in doc["rows"]}
    out = []
    for size in sorted({s for s, _ in rows}):
        a, n = rows[(size, "auto")], rows[(size, "naive")]
        out.append(f"| {size}×{size} | {a['median_ms']:,.0f} ms, {a['peak_mib']:,.0f} MiB | {n['median_ms']:,.0f} ms, "
                   f"{n['peak_mib']:,.0f} MiB | {n['median_ms'] / a['median_ms']:.2f}×, 1/{n['peak_mib'] / a['peak_mib']:.1f} |")
    return out


def test_vision_cost_numbers_are_the_committed_benchmark():
    doc = _load(BENCH / "vision_cost.json")
    _has(*vision_cost_lines(doc))
    r = doc["rows"][0]
    assert all((x["channels"], x["heads"], x["threads"], x["runs"]) == (r["channels"], r["heads"], r["threads"], r["runs"]) for x in doc["rows"])
    _has(f"C = {r['channels']}, {r['heads']} heads, forward + backward, {r['threads']} thread, median of {r['runs']} runs")


def test_the_quick_report_time_is_the_measured_one():
    t = _load(BENCH / "report_quick_time.json")
    assert t["rc"] == 0 and t["command"].startswith("attnkit report")
    _has(f"{t['wall_s'] // 60:.0f} min {t['wall_s'] % 60:.0f} s")


def test_license_changelog_and_gitignore_for_a_newcomer():
    import shutil
    import subprocess
    import tomllib

    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    # the SPDX string form: the old {text = "MIT"} table makes setuptools >= 77 warn three times per install
    assert meta["project"]["license"] == "MIT" and meta["project"]["license-files"] == ["LICENSE"]
    assert any(r.replace(" ", "").startswith("setuptools>=77") for r in meta["build-system"]["requires"])
    assert "## [Unreleased]" in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    _has("([LICENSE](LICENSE))", "[CHANGELOG.md](CHANGELOG.md)")
    if (ROOT / ".git").exists() and shutil.which("git"):  # `attnkit viz --out viz/` and the report's output never show up as changes
        for path in ("viz/attention.html", "report/index.html", "runs/x/results.json", "course_out/a.png"):
            r = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT)
            assert r.returncode == 0, f"{path} is not ignored by .gitignore"


FORECAST_LABELS = {"naive": "naive", "seasonal_naive": "seasonal naive", "dlinear": "DLinear", "lstm": "LSTM",
                   "lstm_attention": "LSTM + attention", "transformer": "Transformer", "patch_transformer": "patch Transformer"}
FORECAST_RUNS = [("etth1-full", "in96_h24"), ("etth1-full", "in96_h96"), ("etth1-in336-full", "in336_h96"),
                 ("vic_elec-full", "in336_h48")]


def forecast_table_lines() -> list[str]:
    docs = {r: _load(ROOT / "results" / "forecast" / r / "results.json") for r, _ in FORECAST_RUNS}
    lines = []
    for name, label in FORECAST_LABELS.items():
        cells = []
        for run, setting in FORECAST_RUNS:
            m = docs[run]["results"]["settings"][setting]["models"].get(name)
            cells.append(f"{m['mse']['mean']:.3f} ± {m['mse']['std']:.3f}" if m else "—")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def test_forecast_numbers_are_the_committed_runs():
    _has(*forecast_table_lines())
    docs = {r: _load(ROOT / "results" / "forecast" / r / "results.json") for r, _ in FORECAST_RUNS}
    assert all(len(d["seeds"]) >= 3 for d in docs.values())
    # the sentence "did not help" must stay true of the JSON: attention within the LSTM's spread, DLinear best
    for run, setting in FORECAST_RUNS:
        models = docs[run]["results"]["settings"][setting]["models"]
        best = min(models, key=lambda n: models[n]["mse"]["mean"])
        assert best == "dlinear", (run, setting, best)
        if "lstm" in models:
            a, b = models["lstm_attention"]["mse"], models["lstm"]["mse"]
            assert abs(a["mean"] - b["mean"]) <= (a["std"] ** 2 + b["std"] ** 2) ** 0.5, (run, setting)
    _has("Temporal attention did not help here")


def test_hf_sweep_numbers_are_the_committed_sweep():
    c = _load(BENCH / "hf_sweep_causal_lm.json")["summary"]
    assert c["mismatch"] == 0
    _has(f"{c['match_1e-5']} of {c['total']} match eager to 1e-5 on a padded batch,",
         f"{c['refused']} refused, {c['mismatch']} differ")


SEQ2SEQ_RUNS = ["dates-list-full", "bible-hash-full", "bible-hash-30"]  # committed runs the README tabulates (results/seq2seq/<run>/results.json)


def seq2seq_lines(run: str) -> list[str]:
    """The README's per-bucket table of one committed seq2seq run and its run line, from the JSON."""
    from attnkit.experiments.seq2seq.plots import LABELS

    doc = _load(ROOT / "results" / "seq2seq" / run / "results.json")
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
        _has(*seq2seq_lines(run))
        r = _load(ROOT / "results" / "seq2seq" / run / "results.json")["results"]
        _has(*reading(r))  # the README quotes the report's own reading of the run, word for word
    m30 = _load(ROOT / "results" / "seq2seq" / "bible-hash-30" / "results.json")["results"]["models"]
    _has(f"(the fixed vector {m30['rnn']['overall']['bleu']['mean']:.1f}, Bahdanau {m30['bahdanau']['overall']['bleu']['mean']:.1f}, "
         f"Luong {m30['luong']['overall']['bleu']['mean']:.1f})",
         f"(mean largest weight {m30['luong']['attention_focus']['max_weight']['mean']:.2f}; "
         f"Bahdanau's {m30['bahdanau']['attention_focus']['max_weight']['mean']:.2f})")
    old = _load(ROOT / "results" / "seq2seq" / "bible-full" / "results.json")["results"]["models"]
    best = max(old, key=lambda n: old[n]["overall"]["bleu"]["mean"])
    _has(f"stayed at or under {old[best]['overall']['bleu']['mean']:.1f} BLEU for every model")
