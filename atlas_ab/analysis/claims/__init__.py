"""The claims report: the reference engine's claims settled on every model the study ran (build),
from the runs grouped by model with their workload facts (groups).
"""
from atlas_ab.analysis.lazy import exports

#: each public name and the module that defines it, imported on first use (a verb loads only what it
#: uses: `power` no regression library, `compare` no plotting one)
PUBLIC = {
    "REFERENCE":      "atlas_ab.analysis.claims.build",
    "OPTIONAL":       "atlas_ab.analysis.claims.build",
    "build_claims":   "atlas_ab.analysis.claims.build",
    "ModelRuns":      "atlas_ab.analysis.claims.groups",
    "temperature":    "atlas_ab.analysis.claims.groups",
    "group_by_model": "atlas_ab.analysis.claims.groups",
    "workload_facts": "atlas_ab.analysis.claims.groups",
    "facts_table":    "atlas_ab.analysis.claims.groups",
    "check_findings": "atlas_ab.analysis.claims.groups",
}

__getattr__, __dir__ = exports(__name__, PUBLIC)
