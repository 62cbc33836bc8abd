"""The ladder's inputs from engine telemetry: collector runs (`atlas_ab.collect`) made at
several `--concurrency` values against an engine serving one K each.

A collected run says its load level (the manifest's `collect.concurrency`, C) and, per answer, how many
requests were in flight when it was sent (`in_flight` in raw/responses.jsonl) and how long it took
(`seconds`); its counts table holds the engine's own per-request verify steps and accepted drafts
(ingest/, the engine's format). Only answers sent at the full level (in_flight == C) are read: the ramp
and the tail of a collection ran at lighter loads. Then, with B = C:
  acceptance  E_K from the engine's counts, clustered by document: steps n_steps, tokens n_steps + accepted;
  step time   per request, its wall time over its steps (n_steps + 1: the prefill commits the first token),
              so queueing and the prefill are inside it (an upper bound on the engine's step); its spread is
              over requests.
A run whose engine served no drafts cannot be collected (the engine reports no spec-decode telemetry),
so the engine ladder has no K = 0: it compares the K measured and says that whether any K pays is not
known (ladder.fit, require_plain=False).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from atlas_ab import AtlasError
from atlas_ab.analysis.ladder.fitting import Acceptance
from atlas_ab.analysis.runs import read_manifest, read_shards

RAW = "raw/responses.jsonl"


def is_collected(path) -> bool:
    m = read_manifest(Path(path), allow_incomplete=True) or {}
    return "collect" in m


def _requests(root: Path, manifest: dict) -> pd.DataFrame:
    """One row per request: doc_id, turn, n_steps, accepted_tokens, k_max, seconds, in_flight."""
    tables, _, _ = read_shards(root, manifest, "counts", ["doc_id", "turn", "n_steps", "accepted_tokens", "k_max"])
    counts = pd.concat([t.to_pandas() for t in tables], ignore_index=True)
    raw = [json.loads(line) for line in (root / RAW).read_text().splitlines() if line.strip()]
    if not raw or any("in_flight" not in r for r in raw):
        raise AtlasError(f"{root / RAW}: answers without in_flight (collected before the collector recorded its "
                         "load level): re-collect with --concurrency N")
    lat = pd.DataFrame({"doc_id": [r["doc_id"] for r in raw], "turn": [r["turn"] for r in raw],
                        "seconds": [r["seconds"] for r in raw], "in_flight": [r["in_flight"] for r in raw]})
    df = counts.merge(lat, on=["doc_id", "turn"], how="inner")
    if len(df) != len(counts) or df[["n_steps", "accepted_tokens"]].isna().any().any():
        raise AtlasError(f"{root}: the engine's counts do not give every request's verify steps and accepted "
                         "drafts (n_steps, accepted_tokens)")
    return df


def engine_inputs(paths) -> tuple[dict[int, Acceptance], dict[tuple[int, int], np.ndarray], list[str]]:
    """K -> Acceptance and (C, K) -> per-request step times (ms) from collected runs."""
    by_k: dict[int, list[pd.DataFrame]] = {}
    times: dict[tuple[int, int], np.ndarray] = {}
    notes = []
    for p in paths:
        root = Path(p)
        m = read_manifest(root)
        c = int(m["collect"]["concurrency"])
        df = _requests(root, m)
        k = int(df["k_max"].max())
        full = df[df["in_flight"] == c]
        if len(full) < 2:
            raise AtlasError(f"{root}: {len(full)} answer(s) sent at the full load ({c} in flight): collect more "
                             "documents than --concurrency")
        if (c, k) in times:
            raise AtlasError(f"{root}: a second collected run at concurrency {c} K={k}")
        times[(c, k)] = (full["seconds"] / (full["n_steps"] + 1)).to_numpy(np.float64) * 1e3
        by_k.setdefault(k, []).append(full)
        notes.append(f"{root}: concurrency {c}, K={k}: {len(full)} of {len(df)} answers sent at the full load")
    acc = {}
    for k, parts in by_k.items():
        d = pd.concat(parts)
        g = d.groupby("doc_id")[["n_steps", "accepted_tokens"]].sum()
        steps = g["n_steps"].to_numpy(float)
        acc[k] = Acceptance(k, g.index.to_numpy(), steps, steps + g["accepted_tokens"].to_numpy(float),
                            np.full((len(g), k), np.nan))
    return acc, times, notes
