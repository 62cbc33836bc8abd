"""The K ladder: which K to serve at each batch width (fit), its inputs from our live runs (live)
or from engine telemetry (collected), and the configs engines read (configs); tokens per second of
arms timed in several jobs, one over another, by the ladder's interval (throughput).
"""
from atlas_ab.analysis.lazy import exports

#: each public name and the module that defines it, imported on first use (a verb loads only what it
#: uses: `power` no regression library, `compare` no plotting one)
PUBLIC = {
    "Acceptance":      "atlas_ab.analysis.ladder.fitting",
    "acceptance_of":   "atlas_ab.analysis.ladder.fitting",
    "Cell":            "atlas_ab.analysis.ladder.fitting",
    "Gain":            "atlas_ab.analysis.ladder.fitting",
    "Choice":          "atlas_ab.analysis.ladder.fitting",
    "LadderResult":    "atlas_ab.analysis.ladder.fitting",
    "fit":             "atlas_ab.analysis.ladder.fitting",
    "width_and_k":     "atlas_ab.analysis.ladder.live",
    "step_times":      "atlas_ab.analysis.ladder.live",
    "acceptance_from": "atlas_ab.analysis.ladder.live",
    "times_from":      "atlas_ab.analysis.ladder.live",
    "model_of":        "atlas_ab.analysis.ladder.live",
    "is_collected":    "atlas_ab.analysis.ladder.collected",
    "engine_inputs":   "atlas_ab.analysis.ladder.collected",
    "ranges":          "atlas_ab.analysis.ladder.configs",
    "vllm_config":     "atlas_ab.analysis.ladder.configs",
    "trtllm_config":   "atlas_ab.analysis.ladder.configs",
    "atlas_lines":     "atlas_ab.analysis.ladder.configs",
    "write_configs":   "atlas_ab.analysis.ladder.configs",
    "FILES":           "atlas_ab.analysis.ladder.configs",
    "ALLOW_SINGLE":    "atlas_ab.analysis.ladder.configs",
    "SINGLE_NOTE":     "atlas_ab.analysis.ladder.configs",
    "SINGLE":          "atlas_ab.analysis.stats.replicates",
    "ArmThroughput":   "atlas_ab.analysis.ladder.throughput",
    "ThroughputRatio": "atlas_ab.analysis.ladder.throughput",
    "throughput_ratio": "atlas_ab.analysis.ladder.throughput",
}

__getattr__, __dir__ = exports(__name__, PUBLIC)
