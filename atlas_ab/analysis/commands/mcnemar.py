"""`mcnemar RUN` (the ORACLE_P2 probe) and `mcnemar RUN_A RUN_B --depth D` (paired between runs)."""
from __future__ import annotations

from atlas_ab import AtlasError
from atlas_ab.analysis import cli, paired
from atlas_ab.analysis.code_check import code_json, top_lines


def run(args) -> int:
    if len(args.runs) == 1:
        runs, mismatches = cli.load_runs(args.runs, args, optional=("oracle_hit2",))
        result = paired.oracle_probe(runs[0])
        out = {"kind": "oracle_probe", "run": str(runs[0].path), **result.to_dict()}
    elif len(args.runs) == 2:
        runs, mismatches = cli.load_runs(args.runs, args, columns=("position",))
        result = paired.between_runs(runs[0], runs[1], args.depth)
        out = {"kind": "between_runs", "runs": [str(r.path) for r in runs], "depth": args.depth,
               "mismatches": mismatches, **result.to_dict()}
    else:
        raise AtlasError(f"mcnemar takes one run (oracle probe) or two (paired), got {len(args.runs)}")
    return cli.emit(args, {**out, "code": code_json(runs)}, top_lines(runs, mismatches) + "\n" + result.summary())


def register(subparsers) -> None:
    p = subparsers.add_parser("mcnemar", help="paired McNemar: the oracle probe of one run, or two runs matched "
                                              "on (doc_id, turn, position)")
    p.add_argument("runs", nargs="+", metavar="RUN", help="one run (oracle probe) or two (RUN_A RUN_B)")
    p.add_argument("--depth", type=int, default=2, help="depth compared between two runs")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    cli.add_run_flags(p)
    p.set_defaults(func=run)
