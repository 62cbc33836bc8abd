"""`python -m atlas_ab.analysis SUBCOMMAND ...`

Subcommands are modules with `register(subparsers)`; each sets `func(args) -> int`
on its parser. Modules written by others (fingerprints, coverage) are imported only
once their file exists, so the CLI works before they land.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

from atlas_ab import AtlasError
from atlas_ab.analysis.cli import PROG

SUBCOMMANDS = ["compare", "report", "mcnemar", "power", "fingerprints", "coverage", "ingest"]


def _modules():
    for name in SUBCOMMANDS:
        full = f"atlas_ab.analysis.{name}"
        if importlib.util.find_spec(full) is not None:
            yield importlib.import_module(full)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m {PROG}",
                                     description="Acceptance A/B analysis of atlas_ab runs (docs/telemetry.md).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for mod in _modules():
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except AtlasError as e:
        # One line, naming the file and the problem; bad input is exit 2 like argparse's.
        msg = " ".join(str(e).split())
        print(f"{PROG}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
