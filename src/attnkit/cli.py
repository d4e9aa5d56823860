"""Command line: thin — parse arguments, call library functions.

attnkit report [--out DIR]          run everything at its quick default, write DIR/index.html
attnkit bench [--quick|--suite S] [--out DIR]  backend benchmark sweep (JSON + PNG)
attnkit viz TEXT --out DIR          attention maps and diagnostics of a real pretrained model
attnkit backends                    list registered backends
"""

from __future__ import annotations

import argparse
import sys


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attnkit", description="attnkit: attention that is correct, fast and inspectable")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("report", help="run every experiment at its quick default and write one HTML report")
    r.add_argument("--out", default="report", help="output folder (default: report/)")
    b = sub.add_parser("bench", help="benchmark the backends")
    b.add_argument("--quick", action="store_true", help="small sweep (about 30 s); same as --suite quick")
    b.add_argument("--suite", choices=("quick", "must", "full"), default=None,
                   help="quick (~30 s), must (the headline comparisons, ~7 min; the default), full (the whole sweep, ~50 min)")
    b.add_argument("--out", default="benchmarks/results", help="where JSON and PNG go")
    v = sub.add_parser("viz", help="attention maps of all-MiniLM-L6-v2 for a sentence")
    v.add_argument("text")
    v.add_argument("--out", default="viz", help="output folder")
    sub.add_parser("backends", help="list registered backends")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.cmd == "report":
        from .report import build_report

        build_report(args.out)
    elif args.cmd == "bench":
        from .bench import run_bench

        run_bench(quick=args.quick, out_dir=args.out, suite=args.suite)
    elif args.cmd == "viz":
        from .viz import run_viz

        res = run_viz(args.text, args.out)
        print(f"wrote {res.get('html', args.out)}")
    elif args.cmd == "backends":
        from .core.registry import available

        for b in available():
            print(f"{b.name:12s} exact={b.exact!s:5s} priority={b.priority}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
