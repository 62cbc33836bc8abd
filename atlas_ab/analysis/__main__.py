"""`python -m atlas_ab.analysis SUBCOMMAND ...`

Each subcommand is a module of `atlas_ab.analysis.commands` with `register(subparsers)`,
which sets `func(args) -> int` on its parser. Only the verb named is imported (a closed form
like `power` loads no plotting or regression library); `--help` imports them all to list them.
Bad input is one line on stderr, exit 2.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from atlas_ab import AtlasError
from atlas_ab.analysis.cli import PROG
from atlas_ab.errors import closed_stdout, one_line

#: every verb, in --help's order; each is the module atlas_ab.analysis.commands.<verb>, or
#: commands.<group>.<verb> for the verbs of a group (GROUPS)
SUBCOMMANDS = ["compare", "report", "mcnemar", "power", "fingerprints", "coverage", "ingest", "export", "pairs",
               "claims", "gate", "ladder", "throughput"]
GROUPS = {"ingest": "telemetry", "export": "telemetry"}     # engine telemetry in and out of the contract


def verb_module(verb: str) -> str:
    group = GROUPS.get(verb)
    return f"atlas_ab.analysis.commands.{group + '.' if group else ''}{verb}"


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser; `only` registers that one verb (its module alone is imported)."""
    parser = argparse.ArgumentParser(prog=f"python -m {PROG}",
                                     description="Acceptance A/B analysis of atlas_ab runs (docs/telemetry.md).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS if only is None else [only]:
        importlib.import_module(verb_module(name)).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # a known verb first: import its module only; anything else gets the full parser's help or error
    parser = build_parser(argv[0] if argv and argv[0] in SUBCOMMANDS else None)
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
