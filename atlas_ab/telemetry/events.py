"""Fingerprint events (FINGERPRINTS): host metadata now, device hashes later.

Every hidden that enters or leaves the ring, every row fed to the drafter and
every propose's target hidden is snapshotted (as the BF16 row that is hashed)
when the event happens, and all rows of a wave are hashed on the device in one
kernel call when the wave ends, so the lever costs no host sync per row (the
reference engine paid a copy and a sync per row). One call instead of one per
event also keeps the CPU fallback (a loop over byte columns) cheap.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import torch

from atlas_ab.telemetry.schema import EVENT_SCHEMA


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
        """Record n events; fields are scalars or length-n arrays (expanded at the end:
        the hot loop does no per-event work)."""
        n = len(seq)
        if n == 0:
            return
        self.meta.append((n, self.order, kind, dict(doc_id=doc_id, turn=turn, step=step, seq=seq, label=label,
                                                     key=key, rope=rope, slot=slot, position=position)))
        self.order += n
        # rows are fresh gathers, never views of live state; .to(bf16) keeps them as hashed
        self.rows.append(rows.to(torch.bfloat16))
        self.rows2.append(None if rows2 is None else rows2.to(torch.bfloat16))
        self.fp2_valid.append(fp2_valid)

    def table(self) -> pa.Table:
        if not self.meta:
            return EVENT_SCHEMA.empty_table()
        cols = {k: np.concatenate([np.broadcast_to(np.asarray(f[k], dtype=np.int64), (n,)) for n, _, _, f in self.meta])
                for k in self.meta[0][3]}
        cols["order"] = np.concatenate([np.arange(o, o + n) for n, o, _, _ in self.meta])
        kinds = [k for _, _, k, _ in self.meta]
        # one hashing call for every row of the wave (second rows only where an event has them)
        second = [r2 for r2 in self.rows2 if r2 is not None]
        fps = self.fingerprint_rows(torch.cat(self.rows + second)).cpu().numpy()
        N = len(cols["order"])
        fp = fps[:N]
        fp2 = np.zeros(N, dtype=np.int64)
        valid = np.zeros(N, dtype=bool)
        at, at2 = 0, N
        for (n, _, _, _), r2, v in zip(self.meta, self.rows2, self.fp2_valid):
            if r2 is not None:
                fp2[at:at + n] = fps[at2:at2 + n]
                valid[at:at + n] = True if v is None else v
                at2 += n
            at += n
        arrays = {k: pa.array(v, type=EVENT_SCHEMA.field(k).type) for k, v in cols.items()}
        arrays["kind"] = pa.array(np.repeat(np.array(kinds, dtype=object), [m[0] for m in self.meta]),
                                  type=pa.string())
        arrays["fp"] = pa.array(fp, type=pa.int64())
        arrays["fp2"] = pa.array(fp2, type=pa.int64(), mask=~valid)
        return pa.table({n: arrays[n] for n in EVENT_SCHEMA.names}, schema=EVENT_SCHEMA)
