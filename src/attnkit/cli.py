"""Command line: thin — parse arguments, check them, call library functions.

attnkit report [--out DIR]          run everything at its quick default, write DIR/index.html
attnkit bench [--quick|--suite S] [--out DIR]  backend benchmark sweep (JSON + PNG; default runs/bench/)
attnkit viz TEXT [--out DIR] [--focus WORD]  attention maps and diagnostics of a real pretrained model
attnkit backends                    list registered backends
attnkit doctor                      what this machine has for attnkit, and what to install
attnkit serve [--port 8765] [--host 127.0.0.1] [--lang zh|en] [--no-browser]  the live attention playground
attnkit experiment NAME [--quick|--full] [--seeds N] [--out DIR] [--resume] [--device cpu|cuda]
attnkit experiment --list           the registered experiments

Bad input (an empty text, an ``--out`` that is a file or cannot be written, no command) ends with
one ``attnkit: error: ...`` line on stderr and a non-zero status, before any work starts.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from . import __version__
from .data._missing import MissingData

#: all-MiniLM-L6-v2 has 512 position embeddings; `attnkit viz` keeps at most this many tokens
MODEL_MAX_TOKENS = 512


class CliError(Exception):
    """Bad command-line input: printed as one line, exit status 2."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attnkit", description="attnkit: attention that is correct, fast and inspectable")
    p.add_argument("--version", action="version", version=f"attnkit {__version__}", help="print the version and exit")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", title="commands")
    r = sub.add_parser("report", help="run every experiment at its quick default and write one HTML report")
    r.add_argument("--out", default="report", help="output folder (default: report/)")
    r.add_argument("--runs", default=None, help="where experiment results are read from (default: runs/, where `attnkit experiment` writes)")
    r.add_argument("--existing-only", action="store_true",
                   help="run no experiment: read results under --runs and show a note for each experiment without them "
                        "(default: run the quick configuration of every experiment that has none, minutes each)")
    r.add_argument("--lang", choices=("en", "zh"), default="en", help="language of the page's prose: en (default) or zh (Chinese)")
    r.add_argument("--force", action="store_true", help="rerun every section instead of reusing cached ones (cache: DIR/.cache/)")
    r.add_argument("--results", default="results",
                   help="folder of committed long runs, RESULTS/<experiment>/<run>/results.json, shown beside the quick runs "
                        "(default: results/ of the current folder, a source checkout; a missing folder leaves them out)")
    b = sub.add_parser("bench", help="benchmark the backends")
    b.add_argument("--quick", action="store_true", help="small sweep (about 30 s); same as --suite quick")
    b.add_argument("--suite", choices=("quick", "must", "full"), default=None,
                   help="quick (~30 s), must (the headline comparisons, ~7 min; the default), full (the whole sweep, ~50 min)")
    b.add_argument("--out", default="runs/bench",
                   help="where JSON and PNG go (default: runs/bench/; give benchmarks/results to update the committed results)")
    v = sub.add_parser("viz", help="attention maps of all-MiniLM-L6-v2 for a sentence")
    v.add_argument("text", help="the sentence to look at (quote it); longer than --max-length tokens is cut, with a warning")
    v.add_argument("--out", default="viz", help="output folder (default: viz/); attention.html is the page to open")
    v.add_argument("--focus", metavar="WORD", default=None,
                   help="also tabulate where this token attends, layer by layer (default: no focus table)")
    v.add_argument("--max-length", type=int, default=128,
                   help=f"keep at most this many tokens, [CLS] and [SEP] included (default 128, at most {MODEL_MAX_TOKENS})")
    sub.add_parser("backends", help="list registered backends")
    # --- attnkit serve (attnkit.serve) -------------------------------------------------------
    sv = sub.add_parser("serve", help="the live attention playground in the browser (local server, Chinese by default)")
    sv.add_argument("--port", type=int, default=8765, help="port to listen on (default 8765; 0 picks a free one)")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    sv.add_argument("--lang", choices=("zh", "en"), default="zh", help="language of the page: zh (default, Chinese) or en")
    sv.add_argument("--no-browser", action="store_true", help="do not open the page in a browser; just print its address")
    # --- end attnkit serve ---------------------------------------------------------------------
    sub.add_parser("doctor", help="check torch, the backends, the data packages and files, the browser; say what to install")
    # parsed by attnkit.experiments.lab.command, which knows each experiment's own flags
    sub.add_parser("experiment", add_help=False,
                   help="run a registered experiment: attnkit experiment NAME [--quick|--full] ... (--list for the names)")
    return p


def check_out_dir(path: str, flag: str = "--out") -> Path:
    """``path`` as a folder this process can write to, checked before any work (nothing is created).

    Raises :class:`CliError` when it is a file, lies under a file, or its nearest existing folder
    refuses a new file (read-only, no permission, a virtual file system such as /proc)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise CliError(f"{flag} {path!r} is an existing file, not a folder; give a folder (it is created if missing)")
    existing = p
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise CliError(f"{flag} {path!r} cannot be created: {str(existing)!r} is a file; give another folder")
    try:  # os.access says yes to root on read-only mounts; a real file says what will happen
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        raise CliError(f"{flag} {path!r} is not writable ({existing}: {e.strerror}); give a folder you can write to") from None
    return p


def _count_tokens(tokenizer, text: str) -> int:
    """Tokens of ``text`` before truncation ([CLS] and [SEP] included)."""
    tokenizer.tok.no_truncation()
    try:
        return len(tokenizer.tok.encode(text).ids)
    finally:
        tokenizer.tok.enable_truncation(max_length=tokenizer.max_length)


def _viz(args) -> int:
    if not args.text.strip():
        raise CliError("TEXT is empty; give a sentence, e.g. attnkit viz \"The cat sat on the mat.\"")
    if not 2 <= args.max_length <= MODEL_MAX_TOKENS:
        raise CliError(f"--max-length must be in [2, {MODEL_MAX_TOKENS}] (the model's limit); got {args.max_length}")
    check_out_dir(args.out)
    from .experiments.minilm.viz import run_viz
    from .models.bert_loader import BertTokenizer

    tokenizer = BertTokenizer(max_length=args.max_length)
    n = _count_tokens(tokenizer, args.text)
    if n > args.max_length:
        print(f"warning: the text has {n} tokens and --max-length is {args.max_length}: "
              f"{n - args.max_length} tokens at the end were dropped", file=sys.stderr)
    res = run_viz(args.text, args.out, tokenizer=tokenizer, focus=args.focus, max_length=args.max_length)
    if args.focus is not None and res.get("focus") is None:
        print(f"note: --focus {args.focus!r} is not a token of this text; no focus table", file=sys.stderr)
    print(f"wrote {res['files']['html']}")
    return 0


def _run(argv: list[str]) -> int:
    if argv and argv[0] == "experiment":
        from .experiments.lab.command import main as experiment_main

        return experiment_main(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    if args.cmd is None:
        parser.print_usage(sys.stderr)
        raise CliError("choose a command: report, bench, viz, serve, backends, doctor or experiment (attnkit --help says more)")
    if args.cmd == "report":
        check_out_dir(args.out)
        from .report.build import report_command

        return report_command(args.out, runs=args.runs, run_missing=not args.existing_only, lang=args.lang, force=args.force,
                              results=args.results)
    if args.cmd == "bench":
        check_out_dir(args.out)
        from .bench import run_bench

        run_bench(quick=args.quick, out_dir=args.out, suite=args.suite)  # prints each path it writes
        return 0
    if args.cmd == "viz":
        return _viz(args)
    if args.cmd == "serve":  # --- attnkit serve ---
        if not 0 <= args.port <= 65535:
            raise CliError(f"--port must be in [0, 65535], got {args.port}")
        from .serve import serve

        serve(args.host, args.port, lang=args.lang, open_browser=not args.no_browser)
        return 0
    if args.cmd == "doctor":
        from .tools.doctor import run_doctor

        return run_doctor()
    if args.cmd == "backends":
        from .core.registry import available

        for b in available():
            print(f"{b.name:12s} exact={b.exact!s:5s} priority={b.priority}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return _run(argv)
    except CliError as e:
        print(f"attnkit: error: {e}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, FileNotFoundError, MissingData) as e:
        # the library's input errors name the argument and the fix: one line, no traceback
        # (ATTNKIT_DEBUG=1 shows the traceback)
        if os.environ.get("ATTNKIT_DEBUG"):
            raise
        print(f"attnkit: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
