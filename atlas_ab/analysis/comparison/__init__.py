"""Two runs compared: every headline figure of two step runs (arms), steps paired position by
position and the ORACLE_P2 probe (paired), and what each grain gives, compared or paired request
by request (per_unit).
"""
from atlas_ab.analysis.lazy import exports

#: each public name and the module that defines it, imported on first use (a verb loads only what it
#: uses: `power` no regression library, `compare` no plotting one)
PUBLIC = {
    "Comparison":        "atlas_ab.analysis.comparison.arms",
    "compare_runs":      "atlas_ab.analysis.comparison.arms",
    "headline_metrics":  "atlas_ab.analysis.comparison.arms",
    "OracleProbe":       "atlas_ab.analysis.comparison.paired",
    "oracle_probe":      "atlas_ab.analysis.comparison.paired",
    "MatchedPairs":      "atlas_ab.analysis.comparison.paired",
    "KEY":               "atlas_ab.analysis.comparison.paired",
    "require_same_text": "atlas_ab.analysis.comparison.paired",
    "between_runs":      "atlas_ab.analysis.comparison.paired",
    "PairedDifference":  "atlas_ab.analysis.comparison.paired",
    "matched_pairs":     "atlas_ab.analysis.comparison.paired",
    "paired_difference": "atlas_ab.analysis.comparison.paired",
    "mcnemar_by_depth":  "atlas_ab.analysis.comparison.paired",
    "Figure":            "atlas_ab.analysis.comparison.per_unit",
    "bounds":            "atlas_ab.analysis.comparison.per_unit",
    "figure":            "atlas_ab.analysis.comparison.per_unit",
    "figure_names":      "atlas_ab.analysis.comparison.per_unit",
    "exact_difference":  "atlas_ab.analysis.comparison.per_unit",
    "UnitComparison":    "atlas_ab.analysis.comparison.per_unit",
    "compare_units":     "atlas_ab.analysis.comparison.per_unit",
    "Pairs":             "atlas_ab.analysis.comparison.per_unit",
    "pairs":             "atlas_ab.analysis.comparison.per_unit",
}

__getattr__, __dir__ = exports(__name__, PUBLIC)
