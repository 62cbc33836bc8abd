"""Judging pre-registrations (config/prereg.py) against runs: every verdict kind in one place.

Verdicts, in this order:
  PREREG CHANGED   the file given is not the text the study locked under that name; no verdict
  UNLOCKED         an arm it names did not lock its text; no verdict unless the user asks
  UNDERPOWERED     the registered sd cannot be computed, or a count is below its registered
                   minimum (steps per arm, matched pairs, clusters: each counted as registered)
  NOT INFORMATIVE  the arms gave identical outcomes at every step the estimand compares (IDENTICAL)
  MET / NOT MET    the kind's rule (RULES) on the registered estimand with the registered sd
  UNDERPOWERED     not met, and the power to detect min_effect at the threshold, given the
                   observed sd, is below 0.8: the run could not have shown it (a null is no evidence);
                   for a non-inferiority, the power to show it were the arms equal
A MET result needs no power check: the threshold was crossed (nor does a non-inferiority shown
worse than its margin). Every comparison of arms also
gets a sensitivity line: the same rule on the other estimand, and whether it would decide
differently. The estimates come from the library: `metrics.compare` (binomial / cluster /
bootstrap sd), `comparison.paired_difference` (the paired sd), `economics.throughput_difference`,
`comparison.oracle_probe` (McNemar) and `fingerprints.fingerprint_table`.

Modules: verdict (what a judgement says), measured (the data it is judged on), rules (each kind's
decision), kinds (judge: the kind a registration names).
"""
from atlas_ab.analysis.lazy import exports

#: each public name and the module that defines it, imported on first use (a verb loads only what it
#: uses: `power` no regression library, `compare` no plotting one)
PUBLIC = {
    "RULES":               "atlas_ab.analysis.criteria.verdict",
    "COUNTED":             "atlas_ab.analysis.criteria.verdict",
    "IDENTICAL":           "atlas_ab.analysis.criteria.verdict",
    "ESTIMANDS":           "atlas_ab.analysis.criteria.verdict",
    "CLUSTER_UNITS":       "atlas_ab.analysis.criteria.verdict",
    "verdict_table":       "atlas_ab.analysis.criteria.verdict",
    "Verdict":             "atlas_ab.analysis.criteria.verdict",
    "Sensitivity":         "atlas_ab.analysis.criteria.verdict",
    "DifferenceItem":      "atlas_ab.analysis.criteria.verdict",
    "Judgement":           "atlas_ab.analysis.criteria.verdict",
    "changed":             "atlas_ab.analysis.criteria.verdict",
    "unlocked":            "atlas_ab.analysis.criteria.verdict",
    "power_words":         "atlas_ab.analysis.criteria.verdict",
    "Measured":            "atlas_ab.analysis.criteria.measured",
    "measure":             "atlas_ab.analysis.criteria.measured",
    "effect_of":           "atlas_ab.analysis.criteria.measured",
    "MIN_POWER":           "atlas_ab.analysis.criteria.rules",
    "difference_verdict":  "atlas_ab.analysis.criteria.rules",
    "equivalence_verdict": "atlas_ab.analysis.criteria.rules",
    "noninferiority_verdict": "atlas_ab.analysis.criteria.rules",
    "maximum_verdict":     "atlas_ab.analysis.criteria.rules",
    "sensitivity_of":      "atlas_ab.analysis.criteria.rules",
    "panel":               "atlas_ab.analysis.criteria.rules",
    "arm_run":             "atlas_ab.analysis.criteria.kinds",
    "judge_difference":    "atlas_ab.analysis.criteria.kinds",
    "judge_equivalence":   "atlas_ab.analysis.criteria.kinds",
    "judge_noninferiority": "atlas_ab.analysis.criteria.kinds",
    "judge_maximum":       "atlas_ab.analysis.criteria.kinds",
    "fingerprints_of":     "atlas_ab.analysis.criteria.kinds",
    "judge_oracle":        "atlas_ab.analysis.criteria.kinds",
    "JUDGES":              "atlas_ab.analysis.criteria.kinds",
    "judge":               "atlas_ab.analysis.criteria.kinds",
    "evaluate":            "atlas_ab.analysis.criteria.kinds",
}

__getattr__, __dir__ = exports(__name__, PUBLIC)
