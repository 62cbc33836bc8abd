"""Acceptance metrics from a run's counts (definitions: docs/telemetry.md, telemetry/acceptance.py).
  cells   a step run's counts per (doc_id, turn, k, accept_len), each metric's per-cluster sums
          (doc_sums) and the difference of two arms (compare)
  units   the per-unit table every run reduces to (an engine run's requests or counters)
  arm     every figure of one arm: per turn class, per turn, the acceptance-length histogram
They know no run (runs/ makes the counts) and estimate nothing themselves (stats/ does).
"""
from atlas_ab.analysis.lazy import exports

#: each public name and the module that defines it, imported on first use (a verb loads only what it
#: uses: `power` no regression library, `compare` no plotting one)
PUBLIC = {
    "EXPECTED_COLUMNS":  "atlas_ab.analysis.metrics.cells",
    "Cells":             "atlas_ab.analysis.metrics.cells",
    "cell_counts":       "atlas_ab.analysis.metrics.cells",
    "sampled":           "atlas_ab.analysis.metrics.cells",
    "row_values":        "atlas_ab.analysis.metrics.cells",
    "expected_names":    "atlas_ab.analysis.metrics.cells",
    "expected_sums":     "atlas_ab.analysis.metrics.cells",
    "doc_sums":          "atlas_ab.analysis.metrics.cells",
    "compare":           "atlas_ab.analysis.metrics.cells",
    "Units":             "atlas_ab.analysis.metrics.units",
    "UNIT_COLUMNS":      "atlas_ab.analysis.metrics.units",
    "units_from_steps":  "atlas_ab.analysis.metrics.units",
    "units_from_counts": "atlas_ab.analysis.metrics.units",
    "unit_column":       "atlas_ab.analysis.metrics.units",
    "FIGURE":            "atlas_ab.analysis.metrics.units",
    "unit_parts":        "atlas_ab.analysis.metrics.units",
    "unit_sums":         "atlas_ab.analysis.metrics.units",
    "HEADLINE":          "atlas_ab.analysis.metrics.arm",
    "EXPECTED_HEADLINE": "atlas_ab.analysis.metrics.arm",
    "rates":             "atlas_ab.analysis.metrics.arm",
    "realized":          "atlas_ab.analysis.metrics.arm",
    "histogram":         "atlas_ab.analysis.metrics.arm",
    "ArmMetrics":        "atlas_ab.analysis.metrics.arm",
    "arm_metrics":       "atlas_ab.analysis.metrics.arm",
    "require_depth":     "atlas_ab.analysis.metrics.arm",
    "DAR":               "atlas_ab.telemetry.acceptance",
    "canonical":         "atlas_ab.telemetry.acceptance",
    "denominator":       "atlas_ab.telemetry.acceptance",
    "is_proportion":     "atlas_ab.telemetry.acceptance",
    "metric_depth":      "atlas_ab.telemetry.acceptance",
    "metric_names":      "atlas_ab.telemetry.acceptance",
    "outcome":           "atlas_ab.telemetry.acceptance",
    "parse_metric":      "atlas_ab.telemetry.acceptance",
    "weight":            "atlas_ab.telemetry.acceptance",
    "TURN_CLASSES":      "atlas_ab.telemetry.schema",
}

__getattr__, __dir__ = exports(__name__, PUBLIC)
