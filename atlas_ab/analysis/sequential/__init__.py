"""Sequential judging of a `difference` or `noninferiority` registration: its confidence sequence at
every look (judge), and the report's view of it (report_view; study/sequential.py runs the looks).
"""
from atlas_ab.analysis.lazy import exports

#: each public name and the module that defines it, imported on first use (a verb loads only what it
#: uses: `power` no regression library, `compare` no plotting one)
PUBLIC = {
    "METHODS":          "atlas_ab.analysis.sequential.judge",
    "MET":              "atlas_ab.analysis.sequential.judge",
    "NOT_MET":          "atlas_ab.analysis.sequential.judge",
    "UNDECIDED":        "atlas_ab.analysis.sequential.judge",
    "UNDERPOWERED":     "atlas_ab.analysis.sequential.judge",
    "Look":             "atlas_ab.analysis.sequential.judge",
    "SequentialResult": "atlas_ab.analysis.sequential.judge",
    "decide":           "atlas_ab.analysis.sequential.judge",
    "metric_range":     "atlas_ab.analysis.sequential.judge",
    "sequence":         "atlas_ab.analysis.sequential.judge",
    "schedule":         "atlas_ab.analysis.sequential.judge",
    "judge_path":       "atlas_ab.analysis.sequential.judge",
    "Clusters":         "atlas_ab.analysis.sequential.judge",
    "clusters_of":      "atlas_ab.analysis.sequential.judge",
    "decisive_look":    "atlas_ab.analysis.sequential.judge",
    "saving_words":     "atlas_ab.analysis.sequential.judge",
    "judge_sequential": "atlas_ab.analysis.sequential.judge",
    "SequentialView":   "atlas_ab.analysis.sequential.report_view",
    "record_of":        "atlas_ab.analysis.sequential.report_view",
    "view":             "atlas_ab.analysis.sequential.report_view",
}

__getattr__, __dir__ = exports(__name__, PUBLIC)
