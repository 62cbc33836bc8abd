"""`claims RUN... --out DIR`: the claims study's report (analysis/claims/)."""
from __future__ import annotations

from pathlib import Path

from atlas_ab.analysis import cli
from atlas_ab.analysis.claims import OPTIONAL, build_claims, check_findings
from atlas_ab.analysis.runs import check_code, expand, load_run, refuse_timing_only


def run(args) -> int:
    # one model per group: build_claims checks that each group measured one workload (the models
    # themselves differ by design, so the cross-run provenance check of load_runs does not apply)
    runs = [load_run(p, optional=OPTIONAL, allow_incomplete=args.allow_incomplete)
            for p in expand(args.runs, cli.warn)]
    for r in runs:
        for w in r.warnings:
            cli.warn(w)
    refuse_timing_only(runs, "claims")
    # every run of the report ran one code (runs made before code hashes: --allow-mismatch, said at its top)
    mismatches = check_code(runs, args.allow_mismatch)
    for m in mismatches:
        cli.warn(m + " (allowed by --allow-mismatch)")
    data = build_claims(runs, Path(args.out), n_boot=args.bootstrap, seed=args.seed, mismatches=tuple(mismatches))
    if args.json:
        cli.emit_json(data)
    else:
        for label, g in data["models"].items():
            for name, q in g["questions"].items():
                print(f"{label}  {name}: {q['verdict']['status']}")
        print(f"report: {Path(args.out) / 'report.md'}")
    if args.findings:
        bad = check_findings(Path(args.findings).read_text(), data)
        for b in bad:
            cli.warn(f"{args.findings}: {b}")
        return 1 if bad else 0
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("claims", help="the claims study's report: every question at every model size")
    p.add_argument("runs", nargs="+", metavar="RUN", help="the runs (or sweep directories) of +study=claims and "
                                                         "+study=claims_conf, for one or more models")
    p.add_argument("--out", required=True, help="output directory (analysis/reports/claims_<date>)")
    p.add_argument("--json", action="store_true", help="also print every number as one JSON object")
    p.add_argument("--findings", metavar="FILE",
                   help="check the workload numbers FILE's prose quotes ('N documents', 'N source files', "
                        "'N clusters') against the report's; exit 1 naming each that disagrees")
    cli.add_run_flags(p)
    cli.add_boot_flags(p)
    p.set_defaults(func=run)
