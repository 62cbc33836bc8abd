"""Loaded runs and what they are: the run type every judgement takes (base.AnyRun), a step run
(load.Run) and a unit run (unit_runs.UnitRun), the directories a command line names (run_dirs),
and what says whether runs may be compared (provenance, the code that made them, their
completion texts).
A run written out as vLLM's (vllm_export) is here too: it reads one run and knows nothing else.
"""
from atlas_ab.analysis.lazy import exports

#: each public name and the module that defines it, imported on first use (a verb loads only what it
#: uses: `power` no regression library, `compare` no plotting one)
PUBLIC = {
    "AnyRun":                "atlas_ab.analysis.runs.base",
    "rows_in":               "atlas_ab.analysis.runs.base",
    "Run":                   "atlas_ab.analysis.runs.load",
    "load_run":              "atlas_ab.analysis.runs.load",
    "open_run":              "atlas_ab.analysis.runs.load",
    "read_shards":           "atlas_ab.analysis.runs.load",
    "read_manifest":         "atlas_ab.analysis.runs.load",
    "shard_files":           "atlas_ab.analysis.runs.load",
    "check_written":         "atlas_ab.analysis.runs.load",
    "unhashed_line":         "atlas_ab.analysis.runs.load",
    "FINAL":                 "atlas_ab.analysis.runs.load",
    "UnitRun":               "atlas_ab.analysis.runs.unit_runs",
    "load_units":            "atlas_ab.analysis.runs.unit_runs",
    "needs_units":           "atlas_ab.analysis.runs.unit_runs",
    "from_run":              "atlas_ab.analysis.runs.unit_runs",
    "check_distinct":        "atlas_ab.analysis.runs.provenance",
    "provenance_mismatches": "atlas_ab.analysis.runs.provenance",
    "unchecked_provenance":  "atlas_ab.analysis.runs.provenance",
    "check_provenance":      "atlas_ab.analysis.runs.provenance",
    "is_run":                "atlas_ab.analysis.runs.run_dirs",
    "expand":                "atlas_ab.analysis.runs.run_dirs",
    "CodeOf":                "atlas_ab.analysis.runs.code_check",
    "code_of":               "atlas_ab.analysis.runs.code_check",
    "code_mismatches":       "atlas_ab.analysis.runs.code_check",
    "check_code":            "atlas_ab.analysis.runs.code_check",
    "code_header":           "atlas_ab.analysis.runs.code_check",
    "warning_lines":         "atlas_ab.analysis.runs.code_check",
    "top_lines":             "atlas_ab.analysis.runs.code_check",
    "code_json":             "atlas_ab.analysis.runs.code_check",
    "completion_hashes":     "atlas_ab.analysis.runs.completion_match",
    "TextCheck":             "atlas_ab.analysis.runs.completion_match",
    "check_texts":           "atlas_ab.analysis.runs.completion_match",
    "without_steps":         "atlas_ab.analysis.runs.completion_match",
    "without_units":         "atlas_ab.analysis.runs.completion_match",
    "refuse_timing_only":    "atlas_ab.analysis.runs.timing_only",
    "FORMATS":               "atlas_ab.analysis.runs.vllm_export",
    "ExportResult":          "atlas_ab.analysis.runs.vllm_export",
    "export":                "atlas_ab.analysis.runs.vllm_export",
    "spec_object":           "atlas_ab.analysis.runs.vllm_export",
}

__getattr__, __dir__ = exports(__name__, PUBLIC)
