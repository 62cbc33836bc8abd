"""The verbs that carry engine telemetry in and out of the contract: `ingest` (an engine's files -> a
run) and `export` (a run -> an engine's format)."""
