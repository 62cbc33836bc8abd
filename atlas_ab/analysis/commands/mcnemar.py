"""`mcnemar RUN` (the ORACLE_P2 probe) and `mcnemar RUN_A RUN_B --depth D` (paired between runs)."""
from __future__ import annotations

from atlas_ab import AtlasError
from atlas_ab.analysis import cli
from atlas_ab.analysis.comparison import paired
from atlas_ab.analysis.runs import check_distinct, check_texts, code_json, top_lines, without_steps


def run(args) -> int:
    if len(args.runs) == 1:
        runs, mismatches = cli.load_runs(args.runs, args, optional=("oracle_hit2",))
        result = paired.oracle_probe(runs[0])
        out = {"kind": "oracle_probe", "run": str(runs[0].path), **result.to_dict()}
    elif len(args.runs) == 2:
        if args.depth < 1:
            raise AtlasError(f"--depth {args.depth}: the depth is a draft's position, 1 or more (up to the arms' K)")
        runs, mismatches = cli.load_runs(args.runs, args, columns=("position",))
        check_distinct(runs)
        texts = check_texts(runs[0], runs[1], args.drop_differing)   # engine runs: the same text, or no pair
        if texts.note:
            cli.warn(texts.note)
        runs = [without_steps(r, texts.differ) for r in runs]
        result = paired.between_runs(runs[0], runs[1], args.depth)
        out = {"kind": "between_runs", "runs": [str(r.path) for r in runs], "depth": args.depth,
               "mismatches": mismatches, "texts": texts.to_dict(), **result.to_dict()}
    else:
        raise AtlasError(f"mcnemar takes one run (oracle probe) or two (paired), got {len(args.runs)}")
    return cli.emit(args, {**out, "code": code_json(runs)}, top_lines(runs, mismatches) + "\n" + result.summary())


def register(subparsers) -> None:
    p = subparsers.add_parser("mcnemar", help="paired McNemar: the oracle probe of one run, or two runs matched "
                                              "on (doc_id, turn, position)")
    p.add_argument("runs", nargs="+", metavar="RUN", help="one run (oracle probe) or two (RUN_A RUN_B)")
    p.add_argument("--depth", type=int, default=2, help="depth compared between two runs")
    p.add_argument("--drop-differing", action="store_true",
                   help="engine runs: leave out (and count) requests whose completion texts differ (default: refuse)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    cli.add_run_flags(p)
    p.set_defaults(func=run)
