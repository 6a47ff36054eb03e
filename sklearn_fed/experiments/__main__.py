"""Command line: ``sklearn-fed reproduce NAME [options]`` or ``python -m sklearn_fed.experiments NAME``."""

import argparse
import importlib
import sys

from . import EXPERIMENTS


def build_parser():
    parser = argparse.ArgumentParser(
        prog="sklearn-fed reproduce",
        description="Reproduce the tables and figures of the source papers.",
    )
    commands = parser.add_subparsers(dest="name", metavar="NAME")
    for name, module_name in sorted(EXPERIMENTS.items()):
        module = importlib.import_module(f".{module_name}", __package__)
        sub = commands.add_parser(name, help=module.DESCRIPTION, description=module.DESCRIPTION)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    return parser


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["reproduce"]:
        argv = argv[1:]
    parser = build_parser()
    if not argv or argv[0] not in EXPERIMENTS and not argv[0].startswith("-"):
        known = ", ".join(sorted(EXPERIMENTS)) or "(none yet)"
        what = f"unknown experiment {argv[0]!r}" if argv else "no experiment named"
        parser.print_usage(sys.stderr)
        print(f"error: {what}; choose one of: {known}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
