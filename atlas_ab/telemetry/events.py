"""Fingerprint events (FINGERPRINTS): host metadata now, device hashes later.

Every hidden that enters or leaves the ring, every row fed to the drafter and
every propose's target hidden is hashed on the device, all rows of a step in
one kernel call; the hashes stay on the device until the wave ends, so the
lever costs no host sync (the seeds' engine paid a copy and a sync per row).
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
        self.fp: list[torch.Tensor] = []
        self.fp2: list[torch.Tensor] = []
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
        both = rows if rows2 is None else torch.cat([rows, rows2])
        fps = self.fingerprint_rows(both)
        self.fp.append(fps[:n])
        self.fp2.append(fps[n:] if rows2 is not None else torch.zeros(n, dtype=torch.int64, device=fps.device))
        valid = np.zeros(n, bool) if rows2 is None else (np.ones(n, bool) if fp2_valid is None else fp2_valid)
        self.fp2_valid.append(valid)

    def table(self) -> pa.Table:
        if not self.meta:
            return EVENT_SCHEMA.empty_table()
        cols = {k: np.concatenate([m[k] for m in self.meta]) for k in self.meta[0]}
        fp = torch.cat(self.fp).cpu().numpy()
        fp2 = torch.cat(self.fp2).cpu().numpy()
        valid = np.concatenate(self.fp2_valid)
        arrays = {k: pa.array(v.astype(str) if k == "kind" else v, type=EVENT_SCHEMA.field(k).type)
                  for k, v in cols.items()}
        arrays["fp"] = pa.array(fp, type=pa.int64())
        arrays["fp2"] = pa.array(fp2, type=pa.int64(), mask=~valid)
        return pa.table({n: arrays[n] for n in EVENT_SCHEMA.names}, schema=EVENT_SCHEMA)
