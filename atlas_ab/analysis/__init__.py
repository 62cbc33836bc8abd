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
import importlib

# Imported on first use (PEP 562), as are scipy and statsmodels in prereg.py and cluster.py:
# every run locks its pre-registrations through atlas_ab.analysis.prereg, and that import pulled
# in the whole analysis (scipy, statsmodels, sympy): 2.8 s of each run's start-up on the H200
# machine (cProfile of the 5.7B arm, 2026-11-29), 1.4 s on this 2-core CPU (python -X importtime).
_WHERE = {
    "load": ["Run", "load_run"],
    "metrics": ["ArmMetrics", "Cells", "DocSums", "arm_metrics", "cell_counts", "doc_sums"],
    "paired": ["McNemarResult", "OracleProbe", "between_runs", "mcnemar", "oracle_probe"],
    "prereg": ["Prereg", "Verdict", "evaluate", "load_prereg"],
    "sizing": ["PowerResult", "solve"],
    "stats": ["Difference", "Rate", "compare", "difference", "format_delta", "rate"],
}
_MODULE_OF = {name: mod for mod, names in _WHERE.items() for name in names}


def __getattr__(name: str):
    if name in _MODULE_OF:
        return getattr(importlib.import_module(f"atlas_ab.analysis.{_MODULE_OF[name]}"), name)
    raise AttributeError(f"module 'atlas_ab.analysis' has no attribute {name!r}")


__all__ = [
    "Run", "load_run", "ArmMetrics", "Cells", "DocSums", "arm_metrics", "cell_counts", "doc_sums",
    "McNemarResult", "OracleProbe", "between_runs", "mcnemar", "oracle_probe", "Prereg", "Verdict",
    "evaluate", "load_prereg", "PowerResult", "solve", "Difference", "Rate", "compare", "difference",
    "format_delta", "rate",
]
