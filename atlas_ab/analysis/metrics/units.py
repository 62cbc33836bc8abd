"""The per-unit table every run reduces to (telemetry/schema.py COUNT_COLUMNS): a request of an
engine run, a (doc_id, turn) of a step run, or the one global row of counters, and each metric's
per-cluster sums from it."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from atlas_ab import AtlasError
from atlas_ab.analysis.stats import DocSums
from atlas_ab.telemetry.acceptance import DAR, canonical, parse_metric


@dataclass(frozen=True)
class Units:
    """Per-unit counts (telemetry/schema.py COUNT_COLUMNS): a request of an engine run, a
    (doc_id, turn) of a step run, or the one global row of counters. Every metric is a ratio of
    their sums, so the cluster sandwich and the bootstrap need nothing finer.

    table: doc_id, turn, n, D, A, y2_tok, k_max, n_recorded, zero_max and the per-depth lists
    a_ge, k_ge, cond_den (length K; None items where the source does not determine them).
    clusters: the cluster unit (document, request) or None (global counters: no clusters).
    why_not: figure -> why the run's grain cannot give it (an engine run's manifest)."""

    arm: str
    K: int
    table: pd.DataFrame
    clusters: str | None = "document"
    cluster_map: np.ndarray | None = None     # doc_id -> cluster (a step run's workload map)
    why_not: dict = field(default_factory=dict)
    where: str = ""                           # the run directory, for messages

    @property
    def cluster_unit(self) -> str:
        return self.clusters or "global counter"


def _isnull(v) -> bool:
    return v is None or (isinstance(v, float) and np.isnan(v))


def units_from_steps(steps: pd.DataFrame, arm: str = "", K: int | None = None, clusters=None,
                     cluster_unit: str = "document") -> Units:
    """A step run as its per-unit table: one unit per (doc_id, turn), its verify steps summed."""
    v = steps[steps["k"] >= 1]
    K = int(v["k"].max()) if K is None and len(v) else (K or 0)
    rows = []
    for (d, t), g in v.groupby(["doc_id", "turn"], sort=True):
        k, a = g["k"].to_numpy(np.int64), g["accept_len"].to_numpy(np.int64)
        rows.append({"doc_id": int(d), "turn": int(t), "n": len(g), "D": int(k.sum()), "A": int(a.sum()),
                     "k_max": K, "n_recorded": None, "zero_max": None,
                     "a_ge": [int((a >= i).sum()) for i in range(1, K + 1)],
                     "k_ge": [int((k >= i).sum()) for i in range(1, K + 1)],
                     "cond_den": [int(((a >= i - 1) & (k >= i)).sum()) for i in range(1, K + 1)],
                     "y2_tok": float(((1 + a) ** 2).sum())})
    cmap = None if clusters is None else np.asarray(clusters, dtype=np.int64)
    return Units(arm=arm, K=K, table=pd.DataFrame(rows, columns=UNIT_COLUMNS), clusters=cluster_unit,
                 cluster_map=cmap)


UNIT_COLUMNS = ("doc_id", "turn", "n", "D", "A", "k_max", "n_recorded", "zero_max", "a_ge", "k_ge", "cond_den",
                "y2_tok")


def units_from_counts(df: pd.DataFrame, arm: str, clusters: str | None, why_not: dict | None = None,
                      where: str = "") -> Units:
    """An ingested counts table (COUNT_COLUMNS) as the per-unit table: read, nothing derived."""
    K = max([len(x) for col in ("drafted", "accepted", "cond_den") for x in df[col] if not _isnull(x)] or [0])

    def num(v):
        return None if _isnull(v) else int(v)

    def lst(x):
        return None if _isnull(x) else [None if _isnull(v) else int(v) for v in x]

    rows = [{"doc_id": r.doc_id, "turn": r.turn, "n": num(r.n_steps), "D": num(r.draft_tokens),
             "A": num(r.accepted_tokens), "k_max": num(r.k_max), "n_recorded": num(r.n_recorded),
             "zero_max": num(r.zero_max), "a_ge": lst(r.accepted), "k_ge": lst(r.drafted),
             "cond_den": lst(r.cond_den), "y2_tok": None if _isnull(r.y2_tok) else float(r.y2_tok)}
            for r in df.itertuples(index=False)]
    return Units(arm=arm, K=K, table=pd.DataFrame(rows, columns=UNIT_COLUMNS), clusters=clusters,
                 why_not=dict(why_not or {}), where=where)


def unit_column(units: Units, col: str, i: int | None = None) -> np.ndarray | None:
    """One count per unit (depth i of a per-depth list), or None when any unit lacks it."""
    vals = units.table[col].tolist()
    if any(_isnull(v) for v in vals):
        return None
    if i is None:
        return np.asarray(vals, np.float64)
    if any(i > len(x) or x[i - 1] is None for x in vals):
        return None
    return np.asarray([x[i - 1] for x in vals], np.float64)


#: the figure each metric kind is, by the name an engine run's manifest gives it (ingest/tables.py)
FIGURE = {"p": "p_i", "cond": "p_i_cond", "tokens": "tokens_per_step", "dar": DAR}


def unit_parts(units: Units, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | str:
    """(y, n, y^2) per unit of one metric, or why the run's counts do not give them."""
    kind, i = parse_metric(metric)
    if kind in ("expected", "alpha"):
        return "exact acceptance probabilities are recorded by sampled step runs only"
    if kind == "p":
        y, n = unit_column(units, "a_ge", i), unit_column(units, "k_ge", i)
        y2 = y  # 0/1 outcomes: y^2 = y
    elif kind == "cond":
        y, n = unit_column(units, "a_ge", i), unit_column(units, "cond_den", i)
        y2 = y
    elif kind == "tokens":
        steps, A = unit_column(units, "n"), unit_column(units, "A")
        y, n = (None, None) if steps is None or A is None else (steps + A, steps)
        y2 = unit_column(units, "y2_tok")
        y2 = np.full(len(units.table), np.nan) if y2 is None else y2
    else:
        y, n = unit_column(units, "A"), unit_column(units, "D")
        y2 = np.full(len(units.table), np.nan)
    if y is None or n is None:
        why = units.why_not.get(FIGURE[kind]) or {
            "p": "no per-depth counts of k and accept_len",
            "cond": "needs the joint count of k and accept_len per step",
            "tokens": "the number of verify steps is not reported",
            "dar": "drafted and accepted token totals are not reported"}[kind]
        return why
    return y, n, y2


def unit_sums(units: Units, metric: str, pairing: str = "doc") -> DocSums:
    """Per-cluster (y, n, y^2) sums of one metric from the per-unit table: the same sums
    doc_sums gives from a step run's cells. Clusters: documents (or the run's cluster map),
    requests (pairing="request": (doc_id, turn)), or one for global counters."""
    parts = unit_parts(units, metric)
    if isinstance(parts, str):
        raise AtlasError(f"{units.where or units.arm}: {canonical(metric)} is not available: {parts}")
    y, n, y2 = parts
    t = units.table
    if pairing == "request":
        keys = t["doc_id"].to_numpy(np.int64) * 1_000_003 + t["turn"].to_numpy(np.int64)
    elif units.clusters is None:
        keys = np.zeros(len(t), np.int64)
    else:
        keys = t["doc_id"].to_numpy(np.int64)
        keys = keys if units.cluster_map is None else units.cluster_map[keys]
    live = n > 0  # a unit outside the metric's denominator is no cluster of it (as doc_sums drops it)
    docs, inv = np.unique(keys[live], return_inverse=True)
    G = len(docs)
    return DocSums(metric=metric, doc_id=docs, y=np.bincount(inv, weights=y[live], minlength=G),
                   n=np.bincount(inv, weights=n[live], minlength=G).astype(np.int64),
                   y2=np.bincount(inv, weights=y2[live], minlength=G), unit=units.cluster_unit)
