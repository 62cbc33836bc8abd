"""Engine runs pair only what is really paired: two arms' requests (and the steps inside them)
pair when both decoded the same text, which greedy decoding guarantees and a sampling server
does not. The collector stores each completion's sha256 in the counts table
(`completion_sha256`, ingest/completion_hash.py); `pairs` and `mcnemar` compare them on
(doc_id, turn) and refuse requests whose texts differ, or leave them out (counted) when told
`--drop-differing`. Our own runs decode greedily under the lossless gate and have no such
column: nothing to compare.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from atlas_ab import AtlasError

FLAG = "--drop-differing"


def completion_hashes(run) -> pd.DataFrame | None:
    """doc_id, turn, completion_sha256 of an engine run's requests (None: the run stores none)."""
    m = run.manifest or {}
    if m.get("telemetry") is None:
        return None
    rel = next((s.get("counts") for s in m.get("shards") or [] if isinstance(s, dict) and s.get("counts")), None)
    if rel is None:
        return None
    path = run.path / rel
    try:
        if "completion_sha256" not in pq.read_schema(path).names:
            return None
        df = pq.read_table(path, columns=["doc_id", "turn", "completion_sha256"]).to_pandas()
    except (pa.ArrowException, OSError) as e:
        raise AtlasError(f"{path}: unreadable Parquet ({e.__class__.__name__})") from None
    df = df.dropna()
    return None if df.empty else df


@dataclass(frozen=True)
class TextCheck:
    compared: int                       # requests both runs hold a completion hash for
    differ: tuple[tuple[int, int], ...]  # (doc_id, turn) whose texts differ
    note: str | None = None             # what to say about it (None: nothing)

    def to_dict(self) -> dict:
        return {"compared": self.compared, "differ": len(self.differ), "dropped": [list(k) for k in self.differ],
                "note": self.note}


def check_texts(a, b, drop: bool) -> TextCheck:
    """Compare two runs' completion hashes; refuse differing texts unless `drop`."""
    ha, hb = completion_hashes(a), completion_hashes(b)
    if ha is None or hb is None:
        engine = [r for r in (a, b) if (r.manifest or {}).get("telemetry") is not None]
        if not engine:
            return TextCheck(0, ())
        lacking = a if ha is None and a in engine else b
        return TextCheck(0, (), f"texts not compared: {lacking.path} stores no completion hashes (collected or "
                                "ingested before they were recorded, or its records carry no text)")
    m = ha.merge(hb, on=["doc_id", "turn"], suffixes=("_a", "_b"))
    bad = m[m["completion_sha256_a"] != m["completion_sha256_b"]]
    keys = tuple((int(d), int(t)) for d, t in zip(bad["doc_id"], bad["turn"]))
    if not keys:
        return TextCheck(len(m), ())
    if not drop:
        d, t = keys[0]
        raise AtlasError(f"{a.path} vs {b.path}: the completions differ in {len(keys)} of {len(m)} requests "
                         f"(first: doc {d} turn {t}): the arms did not decode one text (a server that samples?), "
                         f"so their requests and steps do not pair; pass {FLAG} to leave those requests out")
    return TextCheck(len(m), keys, f"left out {len(keys)} of {len(m)} requests whose completions differ "
                                   f"between the runs ({FLAG})")


def _keep(df: pd.DataFrame, keys) -> pd.Series:
    drop = set(keys)
    return pd.Series([(int(d), int(t)) not in drop for d, t in zip(df["doc_id"], df["turn"])], index=df.index)


def without_steps(run, keys):
    """A step run (runs.Run) without the steps of the (doc_id, turn) in `keys`."""
    return replace(run, steps=run.steps[_keep(run.steps, keys)].reset_index(drop=True)) if keys else run


def without_units(run, keys):
    """A per-unit run (runs.UnitRun) without the units of the (doc_id, turn) in `keys`."""
    if not keys:
        return run
    t = run.units.table
    return replace(run, units=replace(run.units, table=t[_keep(t, keys)].reset_index(drop=True)))
