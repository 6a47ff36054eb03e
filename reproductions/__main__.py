"""Command line: ``python -m reproductions NAME [options]``, from the repository root."""

import argparse
import contextlib
import importlib
import io
import os
import sys

from . import EXPERIMENTS
from ._report import add_progress_argument


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m reproductions",
        description=(
            "Reproduce the tables and figures of the source papers: each prints our "
            "numbers beside the paper's, with a verdict per row."
        ),
        epilog=(
            "Run from the repository root. 'python -m reproductions NAME --help' lists "
            "the options of one; --quick gives a small run (under a minute of CPU), --out DIR "
            "writes DIR/NAME.md and the figures. Data the bundled sets do not cover is "
            "read from --data-dir (never downloaded)."
        ),
    )
    commands = parser.add_subparsers(dest="name", metavar="NAME", title="reproductions")
    for name, module_name in sorted(EXPERIMENTS.items()):
        module = importlib.import_module(f".{module_name}", __package__)
        # one module may serve several names (DESCRIPTIONS: name -> line)
        description = getattr(module, "DESCRIPTIONS", {}).get(name, module.DESCRIPTION)
        sub = commands.add_parser(name, help=description, description=description)
        module.add_arguments(sub)
        add_progress_argument(sub)  # every experiment accepts --no-progress
        if not any("--out" in action.option_strings for action in sub._actions):
            # modules that do not write files themselves: OUT/NAME.md gets their printout
            sub.add_argument("--out", default=None,
                             help=f"folder to write {name}.md into (default: print only)")
            sub.set_defaults(tee_out=True)
        sub.set_defaults(run=module.run)
    return parser


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv or argv[0] not in EXPERIMENTS and not argv[0].startswith("-"):
        known = ", ".join(sorted(EXPERIMENTS)) or "(none yet)"
        what = f"unknown experiment {argv[0]!r}" if argv else "no experiment named"
        parser.print_usage(sys.stderr)
        print(f"error: {what}; choose one of: {known}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if not (getattr(args, "tee_out", False) and args.out):
        return int(args.run(args) or 0)
    buffer = io.StringIO()
    with contextlib.redirect_stdout(_Tee(sys.stdout, buffer)):
        code = int(args.run(args) or 0)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{args.name}.md"), "w", encoding="utf-8") as f:
        f.write(buffer.getvalue())
    return code


class _Tee(io.TextIOBase):
    """Write to several text streams at once."""

    def __init__(self, *streams):
        self.streams = streams

    def write(self, text):
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self):
        for stream in self.streams:
            stream.flush()


if __name__ == "__main__":
    sys.exit(main())
