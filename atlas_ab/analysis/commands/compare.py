"""`compare RUN_A RUN_B`: every headline figure of two arms and their differences (B - A)."""
from __future__ import annotations

from atlas_ab.analysis import cli
from atlas_ab.analysis.comparison import compare_runs
from atlas_ab.analysis.runs import check_distinct, code_header, code_json


def run(args) -> int:
    runs, mismatches = cli.load_runs([args.run_a, args.run_b], args)
    check_distinct(runs)
    comp = compare_runs(runs[0], runs[1], args.metric, n_boot=args.bootstrap, seed=args.seed,
                        mismatches=tuple(mismatches))
    return cli.emit(args, {**comp.to_dict(), "code": code_json(runs)}, code_header(runs) + "\n" + comp.summary())


def register(subparsers) -> None:
    p = subparsers.add_parser("compare", help="difference of two runs (B - A) with every sd")
    cli.add_two_runs(p, "p2_uncond", "p1, p2_uncond, p{i}, p{i}_cond, tokens_per_step")
    p.set_defaults(func=run)
