"""Column buffers for the steps and events tables (docs/telemetry.md)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

STEP_SCHEMA = pa.schema([
    ("doc_id", pa.int64()), ("turn", pa.int32()), ("step", pa.int64()),
    ("k", pa.int32()), ("accept_len", pa.int32()), ("arm", pa.string()),
    ("seq", pa.int32()), ("position", pa.int64()),
    ("drafts", pa.list_(pa.int32())), ("target", pa.list_(pa.int32())),
    ("conf", pa.list_(pa.float32())), ("gated", pa.bool_()), ("oracle_hit2", pa.bool_()),
    ("topk_ids", pa.list_(pa.list_(pa.int32()))), ("topk_probs", pa.list_(pa.list_(pa.float32()))),
    ("committed", pa.list_(pa.int32())), ("step_ms", pa.float32()),
    ("drafter_rows", pa.int32()), ("fed_rows", pa.int32()),
])

EVENT_SCHEMA = pa.schema([
    ("doc_id", pa.int64()), ("turn", pa.int32()), ("step", pa.int64()), ("seq", pa.int32()),
    ("order", pa.int64()), ("kind", pa.string()), ("label", pa.int64()), ("key", pa.int64()),
    ("rope", pa.int64()), ("slot", pa.int64()), ("position", pa.int64()),
    ("fp", pa.int64()), ("fp2", pa.int64()),
])


class Columns:
    """Append-only column lists, turned into one Arrow table at the end of a wave."""

    def __init__(self, schema: pa.Schema):
        self.schema = schema
        self.cols = {name: [] for name in schema.names}

    def extend(self, **cols) -> None:
        n = None
        for name, values in cols.items():
            values = list(values) if not isinstance(values, list) else values
            if n is None:
                n = len(values)
            elif len(values) != n:
                raise ValueError(f"column {name}: {len(values)} values, expected {n}")
            self.cols[name].extend(values)
        for name in self.schema.names:
            if name not in cols:
                self.cols[name].extend([None] * (n or 0))

    def __len__(self) -> int:
        return len(self.cols[self.schema.names[0]])

    def table(self) -> pa.Table:
        return pa.table({n: pa.array(v, type=self.schema.field(n).type) for n, v in self.cols.items()},
                        schema=self.schema)


def as_int64_bits(u: np.ndarray) -> np.ndarray:
    return np.asarray(u).astype(np.int64, copy=False)
