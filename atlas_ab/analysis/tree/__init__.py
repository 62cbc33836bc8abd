"""Draft trees: per-depth top-k coverage of a SHADOW_TOPK run (coverage), what a static tree would
accept predicted from it (prediction), and that prediction tested against the tree arm (check).
"""
from atlas_ab.analysis.lazy import exports

#: each public name and the module that defines it, imported on first use (a verb loads only what it
#: uses: `power` no regression library, `compare` no plotting one)
PUBLIC = {
    "CoverageCell":     "atlas_ab.analysis.tree.coverage",
    "Coverage":         "atlas_ab.analysis.tree.coverage",
    "topk_coverage":    "atlas_ab.analysis.tree.coverage",
    "DepthPrediction":  "atlas_ab.analysis.tree.prediction",
    "TreePrediction":   "atlas_ab.analysis.tree.prediction",
    "rank_table":       "atlas_ab.analysis.tree.prediction",
    "predict_tree":     "atlas_ab.analysis.tree.prediction",
    "GapRow":           "atlas_ab.analysis.tree.check",
    "BranchRow":        "atlas_ab.analysis.tree.check",
    "TreeCheck":        "atlas_ab.analysis.tree.check",
    "observed_ranks":   "atlas_ab.analysis.tree.check",
    "node_probability": "atlas_ab.analysis.tree.check",
    "per_position":     "atlas_ab.analysis.tree.check",
    "branch_rows":      "atlas_ab.analysis.tree.check",
    "tree_check":       "atlas_ab.analysis.tree.check",
}

__getattr__, __dir__ = exports(__name__, PUBLIC)
