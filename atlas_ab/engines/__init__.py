"""Real inference engines driven from atlas_ab: each one's checkpoint export, its server's launch
and its stop, kept outside the engine's own environment (an engine is a separate process with its
own pins). The A/B client is `atlas_ab.collect`; what an engine writes is read by `atlas_ab.ingest`."""
