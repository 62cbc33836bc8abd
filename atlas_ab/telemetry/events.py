"""Fingerprint events (FINGERPRINTS): host metadata now, device hashes later.

Every hidden that enters or leaves the ring, every row fed to the drafter and
every propose's target hidden is snapshotted (as the BF16 row that is hashed)
when the event happens, and all rows of a wave are hashed on the device in one
kernel call when the wave ends, so the lever costs no host sync per row (the
seeds' engine paid a copy and a sync per row). One call instead of one per
event also keeps the CPU fallback (a loop over byte columns) cheap.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import torch

from atlas_ab.telemetry.records import EVENT_SCHEMA


class EventLog:
    def __init__(self, fingerprint_rows):
        self.fingerprint_rows = fingerprint_rows
        self.meta: list[dict] = []      # one dict of equal-length numpy columns per batch
        self.rows: list[torch.Tensor] = []   # BF16 snapshots, hashed at the end
        self.rows2: list[torch.Tensor] = []
        self.fp2_valid: list[np.ndarray] = []
        self.order = 0

    def add(self, kind: str, *, doc_id, turn, step, seq, rows: torch.Tensor,
            rows2: torch.Tensor | None = None, fp2_valid: np.ndarray | None = None,
            label=-1, key=-1, rope=-1, slot=-1, position=-1) -> None:
        n = len(seq)
        if n == 0:
            return
        full = lambda v: np.broadcast_to(np.asarray(v, dtype=np.int64), (n,))
        self.meta.append(dict(doc_id=full(doc_id), turn=full(turn), step=full(step), seq=full(seq),
                              order=np.arange(self.order, self.order + n), kind=np.full(n, kind, dtype=object),
                              label=full(label), key=full(key), rope=full(rope), slot=full(slot),
                              position=full(position)))
        self.order += n
        # rows are fresh gathers, never views of live state; .to(bf16) keeps them as hashed
        self.rows.append(rows.to(torch.bfloat16))
        self.rows2.append(rows.new_zeros(rows.shape, dtype=torch.bfloat16) if rows2 is None
                          else rows2.to(torch.bfloat16))
        valid = np.zeros(n, bool) if rows2 is None else (np.ones(n, bool) if fp2_valid is None else fp2_valid)
        self.fp2_valid.append(valid)

    def table(self) -> pa.Table:
        if not self.meta:
            return EVENT_SCHEMA.empty_table()
        cols = {k: np.concatenate([m[k] for m in self.meta]) for k in self.meta[0]}
        n = len(cols["order"])
        fps = self.fingerprint_rows(torch.cat(self.rows + self.rows2)).cpu().numpy()
        fp, fp2 = fps[:n], fps[n:]
        valid = np.concatenate(self.fp2_valid)
        arrays = {k: pa.array(v.astype(str) if k == "kind" else v, type=EVENT_SCHEMA.field(k).type)
                  for k, v in cols.items()}
        arrays["fp"] = pa.array(fp, type=pa.int64())
        arrays["fp2"] = pa.array(fp2, type=pa.int64(), mask=~valid)
        return pa.table({n: arrays[n] for n in EVENT_SCHEMA.names}, schema=EVENT_SCHEMA)
