"""Column buffers for the steps table (its columns: telemetry/schema.py)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from atlas_ab.telemetry.schema import STEP_SCHEMA


class StepBlocks:
    """Per-step numpy blocks, turned into one Arrow table at the end of a wave.

    The hot loop only appends arrays it already holds (no per-row Python); the
    list columns are built here from flat values and offsets."""

    def __init__(self, K: int, topk: int):
        self.K, self.topk = K, topk
        self.blocks: list[dict] = []

    def add(self, **cols) -> None:
        self.blocks.append(cols)

    def __len__(self) -> int:
        return sum(len(b["doc_id"]) for b in self.blocks)

    def table(self) -> pa.Table:
        if not self.blocks:
            return STEP_SCHEMA.empty_table()
        col = {k: np.concatenate([b[k] for b in self.blocks]) for k in self.blocks[0]}
        N, K = len(col["doc_id"]), self.K

        def ragged(values2d, lengths, typ):
            mask = np.arange(values2d.shape[1])[None, :] < lengths[:, None]
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
            v = values2d[mask]
            items = pa.array(v, type=typ, mask=np.isnan(v)) if v.dtype.kind == "f" else pa.array(v, type=typ)
            return pa.ListArray.from_arrays(pa.array(offsets), items)

        def fixed(values2d, typ):
            w = values2d.shape[1]
            return pa.ListArray.from_arrays(pa.array(np.arange(0, N * w + 1, w, dtype=np.int32)),
                                            pa.array(values2d.reshape(-1), type=typ))

        arrays = {
            "doc_id": pa.array(col["doc_id"], pa.int64()), "turn": pa.array(col["turn"], pa.int32()),
            "step": pa.array(col["step"], pa.int64()), "k": pa.array(col["k"], pa.int32()),
            "accept_len": pa.array(col["accept_len"], pa.int32()),
            "arm": pa.array(np.full(N, col["arm"][0], dtype=object), pa.string()),
            "seq": pa.array(col["seq"], pa.int32()), "position": pa.array(col["position"], pa.int64()),
            "drafts": fixed(col["drafts"], pa.int32()),
            "target": ragged(col["target"], col["k"] + 1, pa.int32()),
            "conf": fixed(col["conf"], pa.float32()), "gated": pa.array(col["gated"], pa.bool_()),
            "committed": ragged(col["target"], col["n_committed"], pa.int32()),
            "step_ms": pa.array(col["step_ms"], pa.float32(), mask=np.isnan(col["step_ms"])),  # null: replay
            "warmup_ms": pa.array(col["warmup_ms"], pa.float32(), mask=np.isnan(col["warmup_ms"])),  # null: not warm-up
            "drafter_rows": pa.array(col["drafter_rows"], pa.int32()),
            "fed_rows": pa.array(col["fed_rows"], pa.int32()),
        }
        if "oracle" in col:
            o = col["oracle"]
            arrays["oracle_hit2"] = pa.array(o == 1, pa.bool_(), mask=o < 0)
        else:
            arrays["oracle_hit2"] = pa.nulls(N, pa.bool_())
        if self.topk:
            k = self.topk
            inner = lambda v, t: pa.ListArray.from_arrays(
                pa.array(np.arange(0, N * K * k + 1, k, dtype=np.int32)), pa.array(v.reshape(-1), type=t))
            outer = lambda inner_arr: pa.ListArray.from_arrays(
                pa.array(np.arange(0, N * K + 1, K, dtype=np.int32)), inner_arr)
            arrays["topk_ids"] = outer(inner(col["topk_ids"], pa.int32()))
            arrays["topk_probs"] = outer(inner(col["topk_probs"], pa.float32()))
        else:
            arrays["topk_ids"] = pa.nulls(N, STEP_SCHEMA.field("topk_ids").type)
            arrays["topk_probs"] = pa.nulls(N, STEP_SCHEMA.field("topk_probs").type)
        if "pit" in col:        # a sampled run
            arrays["accept_prob"] = ragged(col["accept_prob"], col["k"], pa.float32())
            arrays["alpha1"] = pa.array(col["alpha1"], pa.float32(), mask=np.isnan(col["alpha1"]))
            arrays["pit"] = ragged(col["pit"], col["n_committed"], pa.float32())
        else:
            for name in ("accept_prob", "alpha1", "pit"):
                arrays[name] = pa.nulls(N, STEP_SCHEMA.field(name).type)
        if "tree_path" in col:  # a tree arm
            arrays["tree_nodes"] = pa.array(col["tree_nodes"], pa.int32())
            arrays["tree_path"] = ragged(col["tree_path"], col["accept_len"] + 1, pa.int32())
        else:
            arrays["tree_nodes"] = pa.nulls(N, pa.int32())
            arrays["tree_path"] = pa.nulls(N, STEP_SCHEMA.field("tree_path").type)
        return pa.table({n: arrays[n] for n in STEP_SCHEMA.names}, schema=STEP_SCHEMA)
