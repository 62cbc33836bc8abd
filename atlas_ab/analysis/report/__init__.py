"""`report RUN...`: the Markdown report of runs (build), the pre-registrations it judges (judged), its
tables (step_tables, sections, markdown) and figures (plots: the one module that imports matplotlib,
imported only where a figure is drawn: by the report, the claims report and the ladder verb).
"""
from atlas_ab.analysis.lazy import exports

#: each public name and the module that defines it, imported on first use (a verb loads only what it
#: uses: `power` no regression library, `compare` no plotting one)
PUBLIC = {
    "Report":           "atlas_ab.analysis.report.build",
    "build_report":     "atlas_ab.analysis.report.build",
    "Judged":           "atlas_ab.analysis.report.judged",
    "preregs_to_judge": "atlas_ab.analysis.report.judged",
    "judge_registered": "atlas_ab.analysis.report.judged",
}

__getattr__, __dir__ = exports(__name__, PUBLIC)
