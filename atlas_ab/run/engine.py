"""The contract between the run session and an engine that runs waves (`runner.engine`).

The real one is `runner.Runner`; tests plug in a deterministic double. Torch-free, so a
double needs nothing heavy. A run is `waves` (lists of doc_ids, `batch_width` each); the
session asks for wave i, stores what comes back as shard i, and resumes by wave.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Optional, Protocol

import pyarrow as pa


@dataclass(frozen=True)
class RunInfo:
    """What the engine actually loaded: the manifest's provenance sections."""
    model: dict          # name, path, hash, init, tokenizer_hash, architecture, params, handoff, draft
    workload: dict       # hash, corpus hash, selection, doc -> cluster map, ...
    device: str          # "cpu" or the GPU's name
    dtype: str
    row_space: str
    proposer: str
    levers: dict         # the levers as they take effect
    mode: str = "live"   # live | replay
    replay: Optional[dict] = None   # replay: the trajectory replayed (key, path, hash, build time, ...)
    # how the steps were timed: each on its own (step_by_step) or as a chunk's mean (run_ahead:
    # speculative/run_ahead.py); analysis compares step times only between runs of one loop
    loop: str = "step_by_step"
    # the step's bookkeeping ran compiled (runtime/fusion.py: GPU graphs and runner.fuse_bookkeeping);
    # like the loop, it changes step times only, so analysis compares runs of one setting
    fused: bool = False
    # a timing arm's reason (DRAFTER_SKIP: config.structured.timing_only): its steps' acceptance means
    # nothing, and the analysis refuses to judge it; absent from the manifest otherwise
    timing_only: Optional[str] = None

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["timing_only"] is None:
            del d["timing_only"]
        return d


@dataclass
class WaveResult:
    steps: pa.Table
    events: Optional[pa.Table]
    gate: dict           # lossless_gate.GateResult.to_dict()
    n_tokens: int        # tokens committed by the wave's steps
    replay_check: Optional[dict] = None   # replay: this wave also ran live (replay_check.compare_live)
    live_check_s: float = 0.0             # replay: seconds of the wave that running it live and gating that took


#: on_step(n_tokens_committed, k, accept_len) after each batched step; k and accept_len hold one entry per step row.
OnStep = Callable[..., None]


class Engine(Protocol):
    info: RunInfo
    waves: list[list[int]]

    def run_wave(self, i: int, on_step: Optional[OnStep] = None) -> WaveResult: ...
