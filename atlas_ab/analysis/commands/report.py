"""`report RUN... [--prereg FILE] [--out DIR]`: the Markdown report of runs (and their pre-registrations).

Exit status 1 when a pre-registration got no verdict because the runs did not all lock its text
(UNLOCKED, PREREG CHANGED) and the user did not ask to judge it anyway."""
from __future__ import annotations

import datetime as _dt
from pathlib import Path

from atlas_ab.analysis import cli
from atlas_ab.analysis.report import build_report
from atlas_ab.analysis.runs import code_header, expand, needs_units, refuse_timing_only, warning_lines
from atlas_ab.config.paths import resolve_path

NO_VERDICT = 1


def run(args) -> int:
    out = Path(args.out) if args.out else Path("analysis/reports") / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    prereg = resolve_path(args.prereg) if args.prereg else None
    paths = expand(args.runs, cli.warn)
    # a run without a step table is read at its per-unit grain, and so is every run beside it
    per_unit = any(needs_units(p, args.allow_incomplete) for p in paths)
    runs, mismatches = cli.load_runs(paths, args, optional=("oracle_hit2", "position"), per_unit=per_unit)
    refuse_timing_only(runs, "report")
    rep = build_report(runs, out, prereg=prereg, n_boot=args.bootstrap, seed=args.seed, mismatches=tuple(mismatches),
                       evaluate_edited=args.evaluate_edited, allow_ungated=args.allow_ungated,
                       evaluate_unlocked=args.evaluate_unlocked)
    if args.json:
        cli.emit_json(rep.data)
    else:
        for w in warning_lines(mismatches):
            print(w)
        for j in rep.judged:
            print(j.summary())
        if not rep.judged:
            print("no pre-registration to judge (none locked by the runs' study, none given)")
        print(code_header(runs))
        print(f"report: {rep.path}")
    return NO_VERDICT if any(j.origin in ("unlocked", "changed") for j in rep.judged) else 0


def register(subparsers) -> None:
    p = subparsers.add_parser("report", help="Markdown report (+ PNGs, report.json); evaluates a pre-registration")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories; the first is the control "
                                                          "unless --prereg names the arms")
    p.add_argument("--prereg", help="a pre-registration to judge (analysis/prereg/NAME.yaml or NAME); default: "
                                    "the ones the runs' study locked")
    p.add_argument("--evaluate-edited", action="store_true",
                   help="judge --prereg even though it differs from the text the study locked under its name "
                        "(the report says so at its top)")
    p.add_argument("--evaluate-unlocked", action="store_true",
                   help="judge a pre-registration that not every arm it names locked (runs made outside a study, "
                        "engine runs, a renamed copy); the report and stdout mark it UNLOCKED. Without it such a "
                        "pre-registration gets no verdict and report exits 1")
    p.add_argument("--allow-ungated", action="store_true",
                   help="judge runs whose lossless gate checked nothing (runner.gate_sequences=0)")
    p.add_argument("--out", help="output directory (default analysis/reports/<timestamp>)")
    p.add_argument("--json", action="store_true", help="also print every number as one JSON object")
    cli.add_run_flags(p)
    cli.add_boot_flags(p)
    p.set_defaults(func=run)
