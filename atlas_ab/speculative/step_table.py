"""A wave's step table: one telemetry record per active sequence per step (telemetry/step_blocks.py,
docs/telemetry.md), each step's written while the device runs the next one."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from atlas_ab.config.tree import parse_tree
from atlas_ab.speculative.host_io import StepRead
from atlas_ab.telemetry.events import EventLog
from atlas_ab.telemetry.step_blocks import StepBlocks


@dataclass
class WaveTrace:
    """What a wave produced: telemetry and each sequence's tokens per turn (for the gate)."""
    steps: StepBlocks
    events: EventLog | None
    generated: list = field(default_factory=list)   # [seq][turn] -> list[int] of G tokens
    n_tokens: int = 0
    pit: list = field(default_factory=list)         # sampled runs: float32 arrays, the PIT of every committed token


class StepRecord(NamedTuple):
    """What the table needs of one step, once the host has booked it."""
    h: StepRead                  # the step's read
    act: np.ndarray              # [A] its active sequences
    n: np.ndarray                # [B] their positions (the last committed token's)
    rows_at_propose: np.ndarray  # [B] the drafter's rows at the propose
    fed: np.ndarray              # [B] catch-up rows fed
    step_no: np.ndarray          # [A] the active sequences' step numbers
    turn: int


class StepTable:
    """A wave's step records into its trace."""

    def __init__(self, trace: WaveTrace, arm, doc_ids: np.ndarray):
        self.trace, self.arm, self.K, self.doc_ids = trace, arm, arm.num_drafts, doc_ids
        self.pending = None       # the last step's record and timing, written while the device runs the next

    def hold(self, record: StepRecord, timing: tuple) -> None:
        self.pending = (record, timing)

    def flush(self) -> None:
        if self.pending is not None:
            self.write(*self.pending)
            self.pending = None

    def write(self, record: StepRecord, timing: tuple) -> None:
        """A step's records (one per active sequence); timing: (step_ms, warmup_ms)."""
        h, act, n, rows_at_propose, fed, step_no, turn = record
        step_ms, warmup_ms = timing
        c = h.committed
        k = np.where(h.gated[act], 0, self.K if h.n_valid is None else h.n_valid[act])   # a variable K: the row's
        extra = {}
        if h.oracle is not None:
            extra["oracle"] = h.oracle[act]
        if h.topk_ids is not None:
            extra["topk_ids"], extra["topk_probs"] = h.topk_ids[act], h.topk_probs[act]
        if h.tree_path is not None:              # TREE: the accepted path and the tree's size
            extra["tree_path"] = h.tree_path[act]
            extra["tree_nodes"] = np.full(len(act), len(parse_tree(self.arm.tree).paths))
        if h.pit is not None:
            extra.update(accept_prob=h.accept_prob[act], alpha1=h.alpha1[act], pit=h.pit[act])
            self.trace.pit.append(h.pit[act][np.arange(self.K + 1)[None, :] < c[act][:, None]])
        self.trace.steps.add(
            doc_id=self.doc_ids[act], turn=np.full(len(act), turn), step=step_no, k=k,
            accept_len=h.acc[act], arm=[self.arm.name], seq=act, position=n[act], drafts=h.drafts[act],
            target=h.target[act], conf=h.conf[act], gated=h.gated[act], n_committed=c[act],
            step_ms=np.full(len(act), step_ms), warmup_ms=np.full(len(act), warmup_ms),
            drafter_rows=rows_at_propose[act], fed_rows=fed[act], **extra)
