"""`gate BASELINE CANDIDATE --metric p1 --max-drop 0.01`: the acceptance regression gate
(analysis/ci_gate.py). Exit 0: no regression beyond the margin; 1: a regression; 3: not decided yet;
2: bad input (one line on stderr)."""
from __future__ import annotations

from atlas_ab.analysis import cli


def run(args) -> int:
    from atlas_ab.analysis.ci_gate import Margin, gate
    from atlas_ab.analysis.runs import load_units, refuse_timing_only

    margin = Margin.parse(args.max_drop)
    baseline, candidate = (load_units(p, allow_incomplete=args.allow_incomplete) for p in (args.baseline,
                                                                                          args.candidate))
    for r in (baseline, candidate):
        for w in r.warnings:
            cli.warn(w)
    refuse_timing_only((baseline, candidate), "gate")
    res = gate(baseline, candidate, args.metric, margin, estimand=args.estimand, alpha=args.alpha)
    if args.json:
        cli.emit_json(res.to_dict())
    else:
        print(res.line())
    return res.exit_code


def register(subparsers) -> None:
    p = subparsers.add_parser("gate", help="acceptance regression gate for CI: exit 0 no regression beyond the "
                                           "margin, 1 regression, 3 not decided yet")
    p.add_argument("baseline", metavar="BASELINE", help="the baseline run directory (ours, or ingested telemetry)")
    p.add_argument("candidate", metavar="CANDIDATE", help="the candidate run directory")
    p.add_argument("--metric", default="p1", help="p{i}, p{i}_cond, tokens_per_step, draft_acceptance_rate")
    p.add_argument("--max-drop", required=True, metavar="DROP",
                   help="the largest drop that is no regression: absolute (0.01) or relative to the baseline (1%%)")
    p.add_argument("--estimand", choices=("pooled", "per_request"), default="pooled",
                   help="pooled over verify steps (default) or averaged over requests")
    p.add_argument("--alpha", type=float, default=0.05, help="the sequence's level, valid at every re-run at once")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--allow-incomplete", action="store_true",
                   help="read runs whose manifest status is not 'complete'")
    p.set_defaults(func=run)
