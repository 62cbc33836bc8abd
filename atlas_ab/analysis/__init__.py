"""The analysis of atlas_ab runs: metrics, statistics, pre-registrations, reports.

Reads only the telemetry contract (docs/telemetry.md) and never imports torch.
CLI: `python -m atlas_ab.analysis {compare,report,mcnemar,power,...}`.

Library entry points (each returns a frozen dataclass with summary()/to_dict()):
  load_run(path) -> Run                       validated steps DataFrame + manifest
  cell_counts(steps, arm) -> Cells            (doc, turn, k, accept_len) counts
  arm_metrics(cells) -> ArmMetrics            every figure per turn class / turn, histogram
  compare(cells_a, cells_b, metric) -> Difference   binomial/delta, cluster, bootstrap sds
  rate(p, n) / difference(a, b)               the seeds' summary-number arithmetic
  mcnemar(first, second) -> McNemarResult; oracle_probe(run); between_runs(a, b, depth)
  solve(p, delta, sd=|alpha=, ...) -> PowerResult
  load_prereg(path) -> Prereg; evaluate(prereg, difference) -> Verdict
  build_report(runs, out, prereg) -> Report
"""
from atlas_ab.analysis.load import Run, load_run
from atlas_ab.analysis.metrics import ArmMetrics, Cells, DocSums, arm_metrics, cell_counts, doc_sums
from atlas_ab.analysis.paired import McNemarResult, OracleProbe, between_runs, mcnemar, oracle_probe
from atlas_ab.analysis.prereg import Prereg, Verdict, evaluate, load_prereg
from atlas_ab.analysis.sizing import PowerResult, solve
from atlas_ab.analysis.stats import Difference, Rate, compare, difference, format_delta, rate

__all__ = [
    "Run", "load_run", "ArmMetrics", "Cells", "DocSums", "arm_metrics", "cell_counts", "doc_sums",
    "McNemarResult", "OracleProbe", "between_runs", "mcnemar", "oracle_probe", "Prereg", "Verdict",
    "evaluate", "load_prereg", "PowerResult", "solve", "Difference", "Rate", "compare", "difference",
    "format_delta", "rate",
]
