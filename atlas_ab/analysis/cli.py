"""Shared CLI plumbing for the analysis subcommands: common flags, run loading, output."""
from __future__ import annotations

import argparse
import json
import math
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from atlas_ab.analysis.runs import Run

PROG = "atlas_ab.analysis"


def warn(msg: str) -> None:
    print(f"{PROG}: warning: {msg}", file=sys.stderr)


def add_run_flags(p: argparse.ArgumentParser, mismatch: bool = True) -> None:
    p.add_argument("--allow-incomplete", action="store_true",
                   help="analyse runs whose manifest status is not 'complete'")
    if mismatch:
        p.add_argument("--allow-mismatch", action="store_true",
                       help="compare runs whose workload.hash, model.hash or code.hash differ, or whose code is "
                            "unknown (stated at the top of the output)")


def add_two_runs(p: argparse.ArgumentParser, metric: str, metrics_help: str) -> None:
    """RUN_A RUN_B --metric --json, the run flags and the bootstrap flags: a two-run comparison."""
    p.add_argument("run_a", metavar="RUN_A", help="control run directory")
    p.add_argument("run_b", metavar="RUN_B", help="treatment run directory")
    p.add_argument("--metric", default=metric, help=metrics_help)
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    add_run_flags(p)
    add_boot_flags(p)


def add_boot_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap", type=int, default=2000, metavar="N_BOOT", help="document bootstrap draws")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")


def load_each(paths, allow_incomplete: bool = False) -> list[Run]:
    """Load the runs `paths` name (a sweep stands for its jobs), printing their warnings; unlike
    load_runs, no provenance check across them: the verbs whose runs differ on purpose (a ladder's
    widths and K, an arm's replicate jobs) compare what they need themselves."""
    from atlas_ab.analysis.runs import expand, load_run

    runs = [load_run(p, allow_incomplete=allow_incomplete) for p in expand(paths, warn)]
    for r in runs:
        for w in r.warnings:
            warn(w)
    return runs


def load_runs(paths, args, columns=(), optional=(), per_unit: bool = False) -> tuple[list[Run], list[str]]:
    """Load runs, print their warnings, and check they measured the same thing. `per_unit`: each
    as its per-unit table (units.load_units), as runs without a step table are read."""
    # here, not at the top: verbs that load no run (power) need no pandas or pyarrow
    from atlas_ab.analysis.runs import check_code, check_provenance, expand, load_run, unchecked_provenance

    if per_unit:
        from atlas_ab.analysis.runs import load_units

        runs = [load_units(p, allow_incomplete=args.allow_incomplete) for p in expand(paths, warn)]
    else:
        runs = [load_run(p, columns=columns, optional=optional, allow_incomplete=args.allow_incomplete)
                for p in expand(paths, warn)]
    for r in runs:
        for w in r.warnings:
            warn(w)
    mismatches = []
    if len(runs) > 1:
        mismatches = check_provenance(runs, getattr(args, "allow_mismatch", False))
        mismatches += check_code(runs, getattr(args, "allow_mismatch", False))
        for w in unchecked_provenance(runs):
            warn(w)
    for m in mismatches:
        warn(m + " (allowed by --allow-mismatch)")
    return runs, mismatches


def _clean(x):
    """JSON-safe: numpy scalars to Python, NaN/inf to null."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    np = sys.modules.get("numpy")      # not imported by power: without numpy there is no numpy scalar
    if np is not None and isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def dump_json(obj) -> str:
    return json.dumps(_clean(obj), indent=2, default=str)


def emit_json(obj) -> None:
    print(dump_json(obj))


def emit(args, data, text: str) -> int:
    """A subcommand's answer: one JSON object with --json, else the human form."""
    if args.json:
        emit_json(data)
    else:
        print(text)
    return 0
