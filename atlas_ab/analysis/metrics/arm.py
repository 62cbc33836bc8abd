"""Every figure of one arm: per turn class, per turn and the acceptance-length histogram, from its
count cells (metrics/cells.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from atlas_ab import AtlasError
from atlas_ab.analysis.metrics.cells import Cells, doc_sums, expected_names
from atlas_ab.telemetry.acceptance import canonical, metric_depth, metric_names, parse_metric
from atlas_ab.telemetry.schema import TURN_CLASSES

HEADLINE = ("p1", "p2_uncond", "p2_cond", "tokens_per_step")


#: The exact-probability headline metrics of a sampled run (beside HEADLINE).
EXPECTED_HEADLINE = ("alpha1", "p2_expected")


def rates(cells: Cells, K: int | None = None) -> dict[str, float]:
    """Point values of every metric plus the step counts, for one subset of cells."""
    K = cells.K if K is None else K
    t = cells.table
    k, c = t["k"].to_numpy(), t["n"].to_numpy()
    out: dict[str, float] = {"n_steps": int(c.sum()), "n_serial": int(c[k == 0].sum()),
                             "n_verify": int(c[k >= 1].sum())}
    names = metric_names(K) + (expected_names(K) if cells.expected is not None else [])
    for m in names:
        s = doc_sums(cells, m)
        out[canonical(m)] = s.value
        out[f"n_{canonical(m)}"] = s.N
    return out


def realized(metric: str) -> str:
    """The realized metric an exact-probability one estimates: p{i}_expected -> p{i}, alpha1 -> p1."""
    kind, i = parse_metric(metric)
    if kind not in ("expected", "alpha"):
        raise AtlasError(f"{metric} is not an exact-probability metric")
    return canonical(f"p{i}")


def histogram(cells: Cells) -> pd.DataFrame:
    """Acceptance-length counts: rows k (verify steps only), columns accept_len 0..K."""
    t = cells.table[cells.table["k"] >= 1]
    h = t.pivot_table(index="k", columns="accept_len", values="n", aggfunc="sum", fill_value=0)
    return h.reindex(columns=range(cells.K + 1), fill_value=0).astype(np.int64)


@dataclass(frozen=True)
class ArmMetrics:
    """Every figure for one arm: per turn class, per turn, and the histogram."""

    arm: str
    K: int
    by_class: pd.DataFrame  # index all/cold/warm
    by_turn: pd.DataFrame   # index turn
    histogram: pd.DataFrame  # index (turn_class, k), columns accept_len

    def summary(self) -> str:
        cols = [c for c in ("n_verify", "n_serial", "p1", "p2_uncond", "p2_cond", "tokens_per_step")
                if c in self.by_class]
        return (f"arm {self.arm} (K={self.K})\n" + self.by_class[cols].to_string(float_format="%.4f")
                + "\n\nacceptance-length histogram\n" + self.histogram.to_string())

    __str__ = summary

    def to_dict(self) -> dict:
        return {"arm": self.arm, "K": self.K,
                "by_class": _records(self.by_class), "by_turn": _records(self.by_turn),
                "histogram": {f"{tc}/k={k}": [int(x) for x in row]
                              for (tc, k), row in self.histogram.iterrows()}}


def _records(df: pd.DataFrame) -> dict:
    return {str(i): {c: (None if pd.isna(v) else (int(v) if c.startswith("n_") else float(v)))
                     for c, v in row.items()} for i, row in df.iterrows()}


def _frame(rows: dict) -> pd.DataFrame:
    df = pd.DataFrame.from_dict(rows, orient="index")
    counts = [c for c in df.columns if c.startswith("n_")]
    df[counts] = df[counts].astype(np.int64)
    return df


def arm_metrics(cells: Cells) -> ArmMetrics:
    """All figures for one arm (K = the arm's max k)."""
    by_class = _frame({tc: rates(cells.where(tc), cells.K) for tc in TURN_CLASSES})
    turns = np.unique(cells.table["turn"].to_numpy())
    by_turn = _frame({int(t): rates(cells.turn(int(t)), cells.K) for t in turns})
    by_turn.index.name = "turn"
    hists = {tc: histogram(cells.where(tc)) for tc in TURN_CLASSES}
    hist = pd.concat(hists, names=["turn_class", "k"])
    return ArmMetrics(arm=cells.arm, K=cells.K, by_class=by_class, by_turn=by_turn, histogram=hist)


def require_depth(cells: Cells, metric: str, where: str) -> None:
    """A metric at depth i needs steps with k >= i; comparing at an unobserved depth is an error."""
    i = metric_depth(metric)
    if cells.K < i:
        raise AtlasError(f"{where}: {metric} needs depth {i}, but this run never observed it (K={cells.K})")
