"""`pairs RUN_A RUN_B`: two runs paired request by request on (doc_id, turn), where both decoded one
text (analysis/comparison/per_unit.py; docs/ingest.md)."""
from __future__ import annotations

from atlas_ab.analysis import cli


def run(args) -> int:
    from atlas_ab.analysis.comparison import pairs
    from atlas_ab.analysis.runs import (
        check_code,
        check_provenance,
        check_texts,
        code_json,
        load_units,
        top_lines,
        without_units,
    )

    a, b = (load_units(p, args.allow_incomplete) for p in (args.run_a, args.run_b))
    mismatches = check_provenance([a, b], args.allow_mismatch) + check_code([a, b], args.allow_mismatch)
    for m in mismatches:
        cli.warn(m + " (allowed by --allow-mismatch)")
    texts = check_texts(a, b, args.drop_differing)      # pairs only requests that decoded one text
    if texts.note:
        cli.warn(texts.note)
    a, b = without_units(a, texts.differ), without_units(b, texts.differ)
    res = pairs(a, b, args.metric, n_boot=args.bootstrap, seed=args.seed)
    return cli.emit(args, {**res.to_dict(), "code": code_json([a, b]), "texts": texts.to_dict()},
                    top_lines([a, b], mismatches) + "\n" + res.summary()
                    + (f"\n{texts.note}" if texts.differ else ""))


def register(subparsers) -> None:
    p = subparsers.add_parser("pairs", help="two runs paired request by request on (doc_id, turn)")
    cli.add_two_runs(p, "p1", "p{i}, p{i}_cond, tokens_per_step, draft_acceptance_rate")
    p.add_argument("--drop-differing", action="store_true",
                   help="leave out (and count) requests whose completion texts differ between the runs "
                        "(default: refuse them)")
    p.set_defaults(func=run)
