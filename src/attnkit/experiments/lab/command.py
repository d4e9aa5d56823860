"""``attnkit experiment NAME [--quick|--full] [--seeds N] [--out DIR] [--resume] [--device cpu|cuda]``.

Thin: parses, then calls :func:`attnkit.experiments.run_experiment`. The experiment is looked up
before its flags are parsed, so only its own module is imported and its own flags (from
``add_arguments``) appear in ``attnkit experiment NAME --help``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from ...data import MissingData
from .registry import Experiment, get, import_errors
from .registry import experiments as all_experiments
from .runner import RESULTS_FILE, SetupError, default_out, run_experiment

USAGE = "usage: attnkit experiment NAME [--quick|--full] [--seeds N] [--out DIR] [--resume] [--device cpu|cuda] [--set KEY=VALUE]\n" \
        "       attnkit experiment --list"


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1 (how many seeds to run), got {text!r}")
    return value


def _key_value(text: str) -> tuple[str, object]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. epochs=3), got {text!r}")
    try:
        return key, json.loads(raw)  # numbers, true/false, lists; anything else stays a string
    except json.JSONDecodeError:
        return key, raw


def build_parser(exp: Experiment) -> tuple[argparse.ArgumentParser, list[str]]:
    """The experiment's parser and the ``dest`` of each flag its ``add_arguments`` added."""
    p = argparse.ArgumentParser(prog=f"attnkit experiment {exp.name}", description=exp.help)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", dest="preset", action="store_const", const="quick", help="the quick configuration (default)")
    g.add_argument("--full", dest="preset", action="store_const", const="full", help="the full configuration")
    p.set_defaults(preset="quick")
    p.add_argument("--seeds", type=_positive_int, default=None, metavar="N", help="run seeds 0..N-1 (default: the preset's)")
    p.add_argument("--out", default=None, metavar="DIR", help=f"output folder (default: {default_out(exp.name, 'PRESET')})")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoints in --out; finished trainings are skipped")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda when available")
    p.add_argument("--set", dest="overrides", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                   help="override one configuration value (JSON value), e.g. --set epochs=2")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    before = {a.dest for a in p._actions}
    exp.add_arguments(p)
    own = [a.dest for a in p._actions if a.dest not in before]
    return p, own


def list_text() -> str:
    lines = ["experiments:"]
    for e in all_experiments():
        lines.append(f"  {e.name:14s} {e.help}")
    for module, err in sorted(import_errors().items()):
        lines.append(f"  {module:14s} (not available: {err})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[2:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE + "\n\n" + list_text(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--list":
        print(list_text())
        return 0
    try:
        exp = get(argv[0])
    except ValueError as e:
        print(f"{USAGE}\nattnkit experiment: error: {e}", file=sys.stderr)
        return 2
    parser, own = build_parser(exp)
    args = parser.parse_args(argv[1:])
    overrides = {d: getattr(args, d) for d in own if getattr(args, d) is not None}
    preset_keys = set(getattr(exp, args.preset)) | set(own)
    for key, _ in args.overrides:  # a misspelt key would otherwise be ignored without a word
        if key not in preset_keys:
            parser.error(f"--set {key}=...: {exp.name} --{args.preset} has no configuration key {key!r}; "
                         f"valid keys: {', '.join(sorted(preset_keys))}")
    overrides.update(dict(args.overrides))
    try:
        doc = run_experiment(exp, preset=args.preset, seeds=args.seeds, out=args.out, resume=args.resume,
                             device=args.device, overrides=overrides, show_progress=not args.no_progress)
    except SetupError as e:
        parser.exit(2, f"attnkit experiment {exp.name}: error: {e}\n")
    except MissingData as e:  # a loader's message already says what to install or which path to give
        parser.exit(1, f"attnkit experiment {exp.name}: missing data: {e}\n")
    out = args.out if args.out is not None else default_out(exp.name, args.preset)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, one line from rank 0
        print(f"{exp.name}: done in {doc['time_s']:.1f} s; wrote {out}/{RESULTS_FILE}")
    return 0
