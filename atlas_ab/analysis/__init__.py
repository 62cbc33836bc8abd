"""The analysis of atlas_ab runs: metrics, statistics, verdicts on pre-registrations, reports.

Reads only the telemetry contract (docs/telemetry.md) and never imports torch; the run side
never imports this package (the definitions both need are telemetry/acceptance.py and
config/prereg.py). CLI: `python -m atlas_ab.analysis {compare,report,mcnemar,power,...}`.

Modules (each result a frozen dataclass with summary()/to_dict()):
  load.load_run(path) -> Run                         validated steps DataFrame + manifest
  metrics.cell_counts / arm_metrics / doc_sums        counts per (doc, turn, k, accept_len) and every figure
  stats.compare(cells_a, cells_b, metric) -> Difference   binomial/delta, cluster, bootstrap sds
  paired.mcnemar / oracle_probe / between_runs / paired_difference
  sizing.solve(p, delta, threshold_sd=|alpha=, ...) -> PowerResult
  criteria.judge(prereg, runs) -> Judgement           every verdict kind (config/prereg.py parses them)
  report.build_report(runs, out, prereg) -> Report
"""
