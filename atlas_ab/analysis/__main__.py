"""`python -m atlas_ab.analysis SUBCOMMAND ...`

Each subcommand is a module of `atlas_ab.analysis.commands` with `register(subparsers)`,
which sets `func(args) -> int` on its parser. Bad input is one line on stderr, exit 2.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from atlas_ab import AtlasError
from atlas_ab.analysis.cli import PROG
from atlas_ab.errors import closed_stdout, one_line

SUBCOMMANDS = ["compare", "report", "mcnemar", "power", "fingerprints", "coverage", "ingest", "claims"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m {PROG}",
                                     description="Acceptance A/B analysis of atlas_ab runs (docs/telemetry.md).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"atlas_ab.analysis.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except AtlasError as e:
        # One line, naming the file and the problem; bad input is exit 2 like argparse's.
        print(f"{PROG}: error: {one_line(e)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return closed_stdout()


if __name__ == "__main__":
    sys.exit(main())
