"""`report RUN... [--prereg FILE] [--out DIR]`: the Markdown report of runs (and their pre-registrations)."""
from __future__ import annotations

import datetime as _dt
from pathlib import Path

from atlas_ab.analysis import cli
from atlas_ab.analysis.code_check import check_code, code_header, warning_lines
from atlas_ab.analysis.load import check_provenance
from atlas_ab.analysis.prereg import load_prereg
from atlas_ab.analysis.report import build_report
from atlas_ab.config.paths import resolve_path


def run(args) -> int:
    from atlas_ab.analysis import units

    out = Path(args.out) if args.out else Path("analysis/reports") / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    prereg = resolve_path(args.prereg) if args.prereg else None
    paths = cli.expand(args.runs)
    if any(units.needs_units(p, args.allow_incomplete) for p in paths):
        # engine runs without a step table: every run as its per-unit table, what its grain makes exact
        from atlas_ab.analysis.grain_report import grain_report

        runs = [units.load_units(p, args.allow_incomplete) for p in paths]
        mismatches = check_provenance(runs, args.allow_mismatch) + check_code(runs, args.allow_mismatch) \
            if len(runs) > 1 else []
        rep = grain_report(runs, out, prereg=load_prereg(prereg) if prereg else None, B=args.bootstrap,
                           seed=args.seed, mismatches=tuple(mismatches))
        if args.json:
            cli.emit_json(rep.data)
        else:
            for w in warning_lines(mismatches):
                print(w)
            if rep.verdict:
                print(rep.verdict.summary())
            print(code_header(runs))
            print(f"report: {rep.path}")
        return 0
    runs, mismatches = cli.load_runs(paths, args, optional=("oracle_hit2", "position"))
    rep = build_report(runs, out, prereg=prereg, B=args.bootstrap, seed=args.seed, mismatches=tuple(mismatches),
                       evaluate_edited=args.evaluate_edited, allow_ungated=args.allow_ungated)
    if args.json:
        cli.emit_json(rep.data)
    else:
        for w in warning_lines(mismatches):
            print(w)
        for j in rep.judged:
            if j.origin == "edited":
                print("WARNING: judged against an EDITED pre-registration (--evaluate-edited)")
            print(j.verdict.summary())
        if not rep.judged:
            print("no pre-registration to judge (none locked by the runs' study, none given)")
        print(code_header(runs))
        print(f"report: {rep.path}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("report", help="Markdown report (+ PNGs, report.json); evaluates a pre-registration")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories; the first is the control "
                                                          "unless --prereg names the arms")
    p.add_argument("--prereg", help="a pre-registration to judge (analysis/prereg/NAME.yaml or NAME); default: "
                                    "the ones the runs' study locked")
    p.add_argument("--evaluate-edited", action="store_true",
                   help="judge --prereg even though it differs from the text the study locked (the report "
                        "says so at its top)")
    p.add_argument("--allow-ungated", action="store_true",
                   help="judge runs whose lossless gate checked nothing (runner.gate_sequences=0)")
    p.add_argument("--out", help="output directory (default analysis/reports/<timestamp>)")
    p.add_argument("--json", action="store_true", help="also print every number as one JSON object")
    cli.add_run_flags(p)
    cli.add_boot_flags(p)
    p.set_defaults(func=run)
