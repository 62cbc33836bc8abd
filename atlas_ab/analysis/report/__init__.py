"""`report RUN...`: the Markdown report of runs (build), the pre-registrations it judges (judged), its
tables (step_tables, sections, markdown) and figures (plots: the one module that imports matplotlib,
imported only where a figure is drawn: by the report, the claims report and the ladder verb).
"""
import importlib

#: each public name and the module that defines it, imported on first use (a verb loads only what it
#: uses: `power` no regression library, `compare` no plotting one)
PUBLIC = {
    "Report":           "atlas_ab.analysis.report.build",
    "build_report":     "atlas_ab.analysis.report.build",
    "Judged":           "atlas_ab.analysis.report.judged",
    "preregs_to_judge": "atlas_ab.analysis.report.judged",
    "judge_registered": "atlas_ab.analysis.report.judged",
}


def __getattr__(name: str):
    if name in PUBLIC:
        return getattr(importlib.import_module(PUBLIC[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(PUBLIC)
