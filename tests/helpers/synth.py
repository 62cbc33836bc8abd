"""Synthetic runs in the telemetry layout, for the tests and bench/bench_analysis.py.

Not a simulator of a drafter: just step tables with chosen acceptance rates,
optional document-level random effects (clustering), and exact counts when a
golden value must come out to the digit.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from atlas_ab.atomic import write_table
from atlas_ab.telemetry.schema import step_type


def _layout(n: int, n_docs: int, turns: int) -> pd.DataFrame:
    """Spread n rows over n_docs x turns as evenly as possible, steps numbered per (doc, turn)."""
    cell = np.arange(n) % (n_docs * turns)
    doc, turn = cell // turns, cell % turns
    order = np.lexsort((np.arange(n), turn, doc))
    doc, turn = doc[order], turn[order]
    key = doc * turns + turn
    start = np.r_[0, np.flatnonzero(np.diff(key)) + 1]
    step = np.arange(n) - np.repeat(start, np.diff(np.r_[start, n]))
    return pd.DataFrame({"doc_id": doc.astype(np.int64), "turn": turn.astype(np.int32),
                         "step": step.astype(np.int64)})


def steps_from_counts(accept_counts: dict[int, int], K: int = 2, n_docs: int = 16, turns: int = 8,
                      serial: int = 0, seed: int = 0) -> pd.DataFrame:
    """A step table with exactly accept_counts[a] verify steps (k = K) at accept_len a,
    plus `serial` k = 0 steps, shuffled over n_docs x turns."""
    a = np.concatenate([np.full(c, v, np.int32) for v, c in sorted(accept_counts.items())] +
                       [np.zeros(serial, np.int32)])
    k = np.r_[np.full(len(a) - serial, K, np.int32), np.zeros(serial, np.int32)]
    perm = np.random.default_rng(seed).permutation(len(a))
    df = _layout(len(a), n_docs, turns)
    df["k"], df["accept_len"] = k[perm], a[perm]
    df["position"] = df["step"] * (K + 1)
    return df


def simulate_steps(n: int, p_cond=(0.61, 0.686), K: int | None = None, n_docs: int = 16, turns: int = 8,
                   doc_sd: float = 0.0, serial_frac: float = 0.0, seed: int = 0) -> pd.DataFrame:
    """n steps; depth i accepted given depth i-1 with probability p_cond[i-1], shifted per
    document by a N(0, doc_sd) random effect on the logit scale (doc_sd > 0 clusters outcomes)."""
    rng = np.random.default_rng(seed)
    K = len(p_cond) if K is None else K
    df = _layout(n, n_docs, turns)
    logit = np.log(np.asarray(p_cond[:K]) / (1 - np.asarray(p_cond[:K])))[None, :]
    if doc_sd:
        logit = logit + rng.normal(0.0, doc_sd, n_docs)[df["doc_id"].to_numpy()][:, None]
    p = (1 / (1 + np.exp(-logit))).astype(np.float32)
    hits = rng.random((n, K), dtype=np.float32) < p
    a = np.cumprod(hits, axis=1, dtype=np.int8).sum(axis=1, dtype=np.int32)
    k = np.full(n, K, np.int32)
    if serial_frac:
        serial = rng.random(n) < serial_frac
        k[serial], a[serial] = 0, 0
    df["k"], df["accept_len"] = k, a
    df["position"] = df["step"] * (K + 1)
    return df


def write_run(root: str | Path, steps: pd.DataFrame, arm: str, shards: int = 1, status: str = "complete",
              workload_hash: str = "sha256:workload", model_hash: str = "sha256:model",
              manifest: bool = True, code_hash: str | None = "sha256:code") -> Path:
    """Write steps as Parquet shards plus a manifest, per docs/telemetry.md (code_hash None: a
    manifest without `code`, as runs made before code hashes were recorded)."""
    root = Path(root)
    (root / "steps").mkdir(parents=True, exist_ok=True)
    listed = []
    for i, part in enumerate(np.array_split(np.arange(len(steps)), shards)):
        rel = f"steps/part-{i:05d}.parquet"
        chunk = steps.iloc[part] if len(part) < len(steps) else steps
        schema = pa.schema([(c, step_type(c) or pa.array(chunk[c]).type) for c in chunk.columns])
        sha = write_table(root / rel, pa.Table.from_pandas(chunk, schema=schema, preserve_index=False))
        listed.append({"steps": rel, "events": None, "rows": len(part), "sha256": {"steps": sha},
                       "docs": sorted(int(d) for d in pd.unique(chunk["doc_id"]))})
    if manifest:
        (root / "manifest.json").write_text(json.dumps({
            "schema": 1, "status": status, "arm": arm, "levers": {},
            "model": {"name": "synthetic", "hash": model_hash},
            "workload": {"hash": workload_hash},
            **({"code": {"hash": code_hash, "commit": None}} if code_hash is not None else {}),
            "shards": listed, "rows": {"steps": len(steps), "events": 0}}, indent=1))
    return root
