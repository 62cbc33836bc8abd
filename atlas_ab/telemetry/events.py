"""Fingerprint events (FINGERPRINTS): host metadata now, device hashes later.

Every hidden that enters or leaves the ring, every row fed to the drafter and
every propose's target hidden is fingerprinted as the BF16 row it was when the
event happened, with no host sync per row (the reference engine paid a copy and a
sync per row). Two ways, one hash:
  - an eager wave snapshots the rows and hashes all rows of the wave on the device in
    one kernel call when it ends (one call also keeps the CPU fallback, a loop over
    byte columns, cheap);
  - a wave of captured steps hashes them inside the step's graph and hands the
    fingerprints over with the step's one read (`fp=`): no snapshot, no gather.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import torch

from atlas_ab.telemetry.schema import EVENT_SCHEMA

#: An event's integer fields, in the order each batch keeps them (one [len(FIELDS), n] block a batch).
FIELDS = ("doc_id", "turn", "step", "seq", "label", "key", "rope", "slot", "position")


class EventLog:
    def __init__(self, fingerprint_rows):
        self.fingerprint_rows = fingerprint_rows
        self.meta: list[tuple] = []     # per batch: (n, kind, its FIELDS block); events are numbered in this order
        self.rows: list[torch.Tensor] = []   # BF16 snapshots, hashed at the end
        self.rows2: list[torch.Tensor] = []
        self.fp2_valid: list[np.ndarray] = []
        self.fps: list = []                  # (fp, fp2) int64 arrays for events hashed in the step, else None

    def add(self, kind: str, *, doc_id, turn, step, seq, rows: torch.Tensor | None = None,
            rows2: torch.Tensor | None = None, fp2_valid: np.ndarray | None = None,
            label=-1, key=-1, rope=-1, slot=-1, position=-1, fp=None, fp2=None) -> None:
        """Record n events; fields are scalars or length-n arrays, laid out here as one int64 block
        (a loop step calls this while the device runs the next step, so the table at the wave's end
        only joins the blocks). Give the rows (snapshotted, hashed at the end) or their fingerprints
        `fp` (and `fp2`) already hashed on the device."""
        n = len(seq)
        if n == 0:
            return
        block = np.empty((len(FIELDS), n), dtype=np.int64)
        for i, v in enumerate((doc_id, turn, step, seq, label, key, rope, slot, position)):
            block[i] = v
        self.meta.append((n, kind, block))
        if fp is not None:
            self.fps.append((np.asarray(fp, dtype=np.int64), None if fp2 is None else np.asarray(fp2, dtype=np.int64)))
            self.rows.append(None)
            self.rows2.append(None)
        else:
            self.fps.append(None)
            # rows are fresh gathers, never views of live state; .to(bf16) keeps them as hashed
            self.rows.append(rows.to(torch.bfloat16))
            self.rows2.append(None if rows2 is None else rows2.to(torch.bfloat16))
        self.fp2_valid.append(fp2_valid)

    def table(self) -> pa.Table:
        if not self.meta:
            return EVENT_SCHEMA.empty_table()
        blocks = np.concatenate([b for _, _, b in self.meta], axis=1)             # [len(FIELDS), N]
        cols = dict(zip(FIELDS, blocks))
        N = blocks.shape[1]
        cols["order"] = np.arange(N)            # batches are numbered in the order they were added
        kinds = [k for _, k, _ in self.meta]
        # one hashing call for every snapshotted row of the wave (second rows only where an event has them)
        first = [r for r in self.rows if r is not None]
        second = [r2 for r2 in self.rows2 if r2 is not None]
        rows = first + second
        fps = self.fingerprint_rows(rows[0] if len(rows) == 1 else torch.cat(rows)).cpu().numpy() if rows \
            else np.zeros(0, np.int64)                                     # (one batch: no copy to join)
        fp = np.zeros(N, dtype=np.int64)
        fp2 = np.zeros(N, dtype=np.int64)
        valid = np.zeros(N, dtype=bool)
        at, at1, at2 = 0, 0, sum(len(r) for r in first)
        for (n, _, _), r2, v, done in zip(self.meta, self.rows2, self.fp2_valid, self.fps):
            if done is not None:
                fp[at:at + n] = done[0]
                if done[1] is not None:
                    fp2[at:at + n] = done[1]
                    valid[at:at + n] = True if v is None else v
            else:
                fp[at:at + n] = fps[at1:at1 + n]
                at1 += n
                if r2 is not None:
                    fp2[at:at + n] = fps[at2:at2 + n]
                    valid[at:at + n] = True if v is None else v
                    at2 += n
            at += n
        arrays = {k: pa.array(v, type=EVENT_SCHEMA.field(k).type) for k, v in cols.items()}
        names = sorted(set(kinds))     # the kind column taken from codes (no Python string per event)
        codes = np.repeat(np.array([names.index(k) for k in kinds], dtype=np.int32), [m[0] for m in self.meta])
        arrays["kind"] = pa.array(names, type=pa.string()).take(pa.array(codes))
        arrays["fp"] = pa.array(fp, type=pa.int64())
        arrays["fp2"] = pa.array(fp2, type=pa.int64(), mask=~valid)
        return pa.table({n: arrays[n] for n in EVENT_SCHEMA.names}, schema=EVENT_SCHEMA)
