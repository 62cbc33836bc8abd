"""The statistics: estimates and their uncertainty from per-cluster sums, knowing no run.

Every estimate takes per-cluster sums (sums.DocSums: y, n, y^2 per cluster) or plain counts, never a
run or a table of steps; analysis/metrics makes the sums, the questions above it ask.
  rates                Rate, Difference, estimate, compare_sums: binomial/delta, cluster, bootstrap sds
  cluster              the CRV1 sandwich and the cluster bootstrap
  mcnemar              McNemar's test on paired binary outcomes
  sizing               power and sample size of a two-arm difference
  confidence_sequence  intervals valid at every sample size at once (sequential looks, the CI gate)
  replicates           random effects over replicate jobs (DerSimonian-Laird, Hartung-Knapp) and ratio intervals
  keys                 the JSON keys every result's to_dict writes
"""
from atlas_ab.analysis.lazy import exports

#: each public name and the module that defines it, imported on first use (a verb loads only what it
#: uses: `power` no regression library, `compare` no plotting one)
PUBLIC = {
    "DocSums":                 "atlas_ab.analysis.stats.sums",
    "MIN_CLUSTERS":            "atlas_ab.analysis.stats.rates",
    "SE_KINDS":                "atlas_ab.analysis.stats.rates",
    "Rate":                    "atlas_ab.analysis.stats.rates",
    "Difference":              "atlas_ab.analysis.stats.rates",
    "binomial_se":             "atlas_ab.analysis.stats.rates",
    "compare_sums":            "atlas_ab.analysis.stats.rates",
    "difference":              "atlas_ab.analysis.stats.rates",
    "estimate":                "atlas_ab.analysis.stats.rates",
    "few_clusters":            "atlas_ab.analysis.stats.rates",
    "format_delta":            "atlas_ab.analysis.stats.rates",
    "rate":                    "atlas_ab.analysis.stats.rates",
    "ratio_difference_se":     "atlas_ab.analysis.stats.rates",
    "relative_cluster_se":     "atlas_ab.analysis.stats.rates",
    "relative_se_independent": "atlas_ab.analysis.stats.rates",
    "Bootstrap":               "atlas_ab.analysis.stats.cluster",
    "McNemarResult":           "atlas_ab.analysis.stats.mcnemar_test",
    "mcnemar":                 "atlas_ab.analysis.stats.mcnemar_test",
    "PowerResult":             "atlas_ab.analysis.stats.sizing",
    "design_effect":           "atlas_ab.analysis.stats.sizing",
    "power_at":                "atlas_ab.analysis.stats.sizing",
    "se_at":                   "atlas_ab.analysis.stats.sizing",
    "solve":                   "atlas_ab.analysis.stats.sizing",
    "threshold_z":             "atlas_ab.analysis.stats.sizing",
    "asymptotic_cs":           "atlas_ab.analysis.stats.confidence_sequence",
    "hedged_cs":               "atlas_ab.analysis.stats.confidence_sequence",
    "mixture_radius":          "atlas_ab.analysis.stats.confidence_sequence",
    "JSON_KEY":                "atlas_ab.analysis.stats.keys",
    "SINGLE":                  "atlas_ab.analysis.stats.replicates",
    "Z95":                     "atlas_ab.analysis.stats.replicates",
    "RandomEffects":           "atlas_ab.analysis.stats.replicates",
    "LogRatio":                "atlas_ab.analysis.stats.replicates",
    "random_effects":          "atlas_ab.analysis.stats.replicates",
    "log_ratio":               "atlas_ab.analysis.stats.replicates",
    "relative_part":           "atlas_ab.analysis.stats.replicates",
    "welch_df":                "atlas_ab.analysis.stats.replicates",
    "fields_dict":             "atlas_ab.analysis.stats.keys",
}

__getattr__, __dir__ = exports(__name__, PUBLIC)
