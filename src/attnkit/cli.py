"""Command line: thin — parse arguments, call library functions.

attnkit report [--out DIR]          run everything at its quick default, write DIR/index.html
attnkit bench [--quick|--suite S] [--out DIR]  backend benchmark sweep (JSON + PNG)
attnkit viz TEXT --out DIR          attention maps and diagnostics of a real pretrained model
attnkit backends                    list registered backends
attnkit experiment NAME [--quick|--full] [--seeds N] [--out DIR] [--resume] [--device cpu|cuda]
attnkit experiment --list           the registered experiments
"""

from __future__ import annotations

import argparse
import sys


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attnkit", description="attnkit: attention that is correct, fast and inspectable")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("report", help="run every experiment at its quick default and write one HTML report")
    r.add_argument("--out", default="report", help="output folder (default: report/)")
    r.add_argument("--runs", default=None, help="where experiment results are read from (default: runs/, where `attnkit experiment` writes)")
    r.add_argument("--run-missing", action="store_true",
                   help="run the quick configuration of every experiment that has no results under --runs (minutes each)")
    b = sub.add_parser("bench", help="benchmark the backends")
    b.add_argument("--quick", action="store_true", help="small sweep (about 30 s); same as --suite quick")
    b.add_argument("--suite", choices=("quick", "must", "full"), default=None,
                   help="quick (~30 s), must (the headline comparisons, ~7 min; the default), full (the whole sweep, ~50 min)")
    b.add_argument("--out", default="benchmarks/results", help="where JSON and PNG go")
    v = sub.add_parser("viz", help="attention maps of all-MiniLM-L6-v2 for a sentence")
    v.add_argument("text")
    v.add_argument("--out", default="viz", help="output folder")
    sub.add_parser("backends", help="list registered backends")
    # parsed by attnkit.experiments.command, which knows each experiment's own flags
    sub.add_parser("experiment", add_help=False,
                   help="run a registered experiment: attnkit experiment NAME [--quick|--full] ... (--list for the names)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "experiment":
        from .experiments.command import main as experiment_main

        return experiment_main(argv[1:])
    args = _parser().parse_args(argv)
    if args.cmd == "report":
        from .report import build_report

        build_report(args.out, runs=args.runs, run_missing=args.run_missing)
    elif args.cmd == "bench":
        from .bench import run_bench

        run_bench(quick=args.quick, out_dir=args.out, suite=args.suite)
    elif args.cmd == "viz":
        from .experiments.minilm_viz import run_viz

        res = run_viz(args.text, args.out)
        print(f"wrote {res.get('html', args.out)}")
    elif args.cmd == "backends":
        from .core.registry import available

        for b in available():
            print(f"{b.name:12s} exact={b.exact!s:5s} priority={b.priority}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
