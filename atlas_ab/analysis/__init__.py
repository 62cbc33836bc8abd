"""The analysis of atlas_ab runs: metrics, statistics, verdicts on pre-registrations, reports.

Reads only the telemetry contract (docs/telemetry.md) and never imports torch; the run side
never imports this package (the definitions both need are telemetry/acceptance.py and
config/prereg.py). CLI: `python -m atlas_ab.analysis {compare,report,mcnemar,power,...}`.

Grouped by question; each package's __init__ lists its public names (PUBLIC), each result is a
frozen dataclass with summary()/to_dict(), and each layer imports only those before it:
  stats/       estimates from per-cluster sums, knowing no run: Rate, Difference, estimate,
               compare_sums, the cluster sandwich and bootstrap, McNemar, sizing.solve,
               confidence sequences
  metrics/     count tables and figures: cell_counts, doc_sums, compare(cells_a, cells_b, metric),
               the per-unit table (Units), arm_metrics
  runs/        loaded runs: AnyRun (what a grain gives), load_run -> Run, load_units -> UnitRun,
               provenance and code checks, expand (the run directories a command line names)
  comparison/  two runs: compare_runs, paired_difference, oracle_probe, the per-unit figures
  criteria/    judge(prereg, runs) -> Judgement: every verdict kind (config/prereg.py parses them)
  report/      build_report(runs, out, prereg) -> Report, and plots (the one matplotlib module)
  claims/, ladder/, tree/, sequential/, ci_gate.py, economics.py, fingerprints.py: one question each
  commands/    one module per CLI verb (__main__.SUBCOMMANDS lists them)
"""
