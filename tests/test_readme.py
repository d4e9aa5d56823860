"""The README keeps its promises: every code block runs as written, every command parses, and every
claim in its prose stays true of the committed JSON.

* Every ```python block runs as-is, each in a fresh namespace and a temporary working directory
  (files it writes do not land in the repository): a block that uses a name it does not define
  (``prompt``, ``transformers``, ``path``) fails here.
* Every line of every ```bash block is checked: ``attnkit ...`` (or ``.venv-*/bin/attnkit ...``)
  must be accepted by the real command-line parser (the experiment's own parser for
  ``attnkit experiment NAME ...``), ``make X`` must be a Makefile target, ``torchrun ... -m MOD``
  must name an importable module; any other line fails the test until a check is added for it.
* Numbers: the README is a front door and quotes no committed benchmark file. Its one headline
  table rounds ``benchmarks/results/attention.json`` (checked here within a stated tolerance) and its
  other claims are words the JSON keeps true (checked here); the measured numbers themselves live in
  docs/performance.md and docs/results.md and are rebuilt by tests/docs/, so rerunning a benchmark
  edits no README line.

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


# ------------------------------------------------------------------ numbers: none a rerun would change
def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _has(*claims: str):
    """Each claim appears in the README (line breaks in its prose count as spaces)."""
    flat = re.sub(r"\s+", " ", TEXT)
    missing = [c for c in claims if c not in flat]
    assert not missing, "README lacks (or says otherwise than the JSON): " + " | ".join(missing)


def test_the_readme_is_a_front_door():
    """At most 350 lines, and no committed benchmark file is quoted: the measured numbers live in
    docs/performance.md and docs/results.md (rebuilt there by tests/docs/), so a rerun edits no README line."""
    assert TEXT.count("\n") <= 350, f"README.md has {TEXT.count(chr(10))} lines; move detail to docs/ and link it"
    quoted = [p.name for p in BENCH.glob("*.json") if p.name in TEXT]
    assert "benchmarks/results/" not in TEXT and not quoted, f"README quotes {quoted}: link docs/performance.md instead"
    for page in ("docs/performance.md", "docs/results.md"):
        assert f"({page}" in TEXT and (ROOT / page).is_file()


HEADLINE = {  # README row label -> attention.json summary key
    "sliding window 256, n=16k, fp32": "window256_16k_fp32", "T5 bias, n=8k, fp32": "t5_8k_fp32",
    "ALiBi, n=8k, fp32": "alibi_8k_fp32", "no mask, n=4k, bf16": "bf16_dense_4k"}
ROUNDING = 0.25  # the headline table rounds; a rerun that moves a ratio by more than this must update it


def _close(said: float, measured: float) -> bool:
    return abs(said / measured - 1) <= ROUNDING


def test_the_headline_table_rounds_the_committed_benchmark():
    s = _load(BENCH / "attention.json")["summary"]
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| ([^|]+?) \| (.+) \|$", TEXT, flags=re.M)}
    for label, key in HEADLINE.items():
        assert label in rows, f"README's headline table lost its row {label!r}"
        r, cells = s[key], rows[label]
        speed = re.match(r"([\d.]+)× (faster|slower)", cells)
        said = float(speed.group(1)) if speed.group(2) == "faster" else 1 / float(speed.group(1))
        assert _close(said, r["speedup"]), (label, cells, r["speedup"])
        memory = re.search(r"1/(\d+) of SDPA's", cells)
        if memory:
            assert _close(1 / int(memory.group(1)), r["memory_ratio"]), (label, cells, r["memory_ratio"])
    assert _close(1 / 4.5, s["bf16_dense_4k"]["speedup"]) and s["bf16_dense_4k"]["speedup"] < 1


def test_the_readmes_words_stay_true_of_the_committed_json():
    """The README's unnumbered claims, each against the JSON that makes it true."""
    assert _load(BENCH / "report_quick_time.json")["wall_s"] < 900
    _has("The quick report takes under 15 minutes")
    assert _load(BENCH / "hf_sweep_causal_lm.json")["summary"]["mismatch"] == 0
    _has("found none whose output differs from eager's")
    verdict = _load(ROOT / "results" / "vision" / "full" / "results.json")["results"]["verdict"]
    assert "helped" not in {v["label"] for v in verdict.values()}
    assert [n for n in ("cbam", "mhsa", "vit") if verdict[n]["label"] == "hurt"] == ["cbam", "mhsa", "vit"]
    _has("none of SE, ECA, CBAM or MHSA beat the plain ResNet by more than the seed spread; CBAM, MHSA and the ViT did worse",
         "Temporal attention did not help here")  # pinned against the runs in tests/docs/test_results_numbers.py
    d = _load(BENCH / "decoding.json")["models"]
    assert min(m["dynamic"]["speedup_vs_recompute"] for m in d.values()) > 5
    _has("is many times faster than recomputing the prefix")
    p = _load(BENCH / "packed_vs_padded.json")
    assert p["speedup_packed_over_padded"] > 1 and p["memory_padded_over_packed"] > 1
    _has("faster and smaller than padding them")


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


