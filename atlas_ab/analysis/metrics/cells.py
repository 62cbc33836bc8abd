"""A run's count cells, the sufficient statistic of every acceptance metric (definitions:
docs/telemetry.md, telemetry/acceptance.py: each metric's denominator and outcome).

All of them (and their uncertainty) follow from one sufficient statistic: the
count of steps per (doc_id, turn, k, accept_len) cell. That table is built with
one np.bincount over the rows and is tiny, so everything downstream is cheap.

Sampled runs (a `accept_prob` column) add the exact-probability metrics, whose y is no
longer 0/1, so they are summed per (doc_id, turn) instead (`Cells.expected`):
  p{i}_expected  y = [accept_len >= i-1] * accept_prob_i   over rows with k >= i
  alpha1         y = alpha1 = sum_x min(p_1(x), q_1(x))    over rows with k >= 1
accept_prob_i is the probability that the verifier accepts the draft of depth i, given the
drafts and that depths < i were accepted, so E[y | accepted through i-1] = P(accepted through i)
and p{i}_expected estimates p{i} without the noise of depth i's accept coin (and alpha1 without
that of the drafts). The accept indicators of depths < i stay: past the first rejection the
target's distribution is known live but not in replay (only the stored trajectory's is), so
the product of every depth's probability could not be the one definition both modes compute.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from atlas_ab import AtlasError
from atlas_ab.analysis.metrics.units import Units, unit_sums
from atlas_ab.analysis.stats import Difference, DocSums, compare_sums
from atlas_ab.telemetry.acceptance import DAR, denominator, outcome, parse_metric, weight
from atlas_ab.telemetry.schema import TURN_CLASSES

#: The steps columns the exact-probability metrics read.
EXPECTED_COLUMNS = ("accept_prob", "alpha1")


@dataclass(frozen=True)
class Cells:
    """Step counts per (doc_id, turn, k, accept_len): the sufficient statistic.

    `clusters` maps doc_id -> the unit outcomes cluster in (index = doc_id), when documents
    are not independent (several windows cut from one source file); None: each document is
    its own cluster."""

    arm: str
    K: int
    table: pd.DataFrame  # columns doc_id, turn, k, accept_len, n
    clusters: np.ndarray | None = None
    cluster_unit: str = "document"
    # sampled runs: per (doc_id, turn), each exact-probability metric's "<m>:y", "<m>:y2", "<m>:n"
    expected: pd.DataFrame | None = None

    def _sub(self, keep) -> "Cells":
        e = self.expected
        return replace(self, table=self.table[keep(self.table["turn"])],
                       expected=None if e is None else e[keep(e["turn"])])

    def where(self, turn_class: str) -> "Cells":
        if turn_class == "all":
            return self
        if turn_class == "cold":
            return self._sub(lambda t: t == 0)
        if turn_class == "warm":
            return self._sub(lambda t: t >= 1)
        raise AtlasError(f"unknown turn class {turn_class!r} ({', '.join(TURN_CLASSES)})")

    def turn(self, turn: int) -> "Cells":
        return self._sub(lambda t: t == turn)


def _codes(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense codes for non-negative ids: the ids themselves when compact, else factorize."""
    hi = int(x.max()) + 1
    if hi <= 4 * x.size + 1024:
        return x, np.arange(hi)
    codes, uniques = pd.factorize(x, sort=True)
    return codes, np.asarray(uniques)


def cell_counts(steps: pd.DataFrame, arm: str = "", K: int | None = None, clusters=None,
                cluster_unit: str = "document") -> Cells:
    """Count steps per (doc_id, turn, k, accept_len) with one bincount.

    K: the arm's configured K (a run's manifest knows it); default the largest k observed.
    clusters / cluster_unit: see Cells."""
    if len(steps) == 0:
        raise AtlasError(f"{arm or 'run'}: no steps")
    k = steps["k"].to_numpy(np.int64)
    a = steps["accept_len"].to_numpy(np.int64)
    dc, docs = _codes(steps["doc_id"].to_numpy(np.int64))
    tc, turns = _codes(steps["turn"].to_numpy(np.int64))
    seen = int(k.max())
    if K is None:
        K = seen
    elif seen > K:
        raise AtlasError(f"{arm or 'run'}: a step has k={seen}, above the arm's configured K={K}")
    w = K + 1
    size = len(docs) * len(turns) * w * w
    if size > 50_000_000:  # too sparse for a dense bincount: hash-group instead
        g = steps.groupby(["doc_id", "turn", "k", "accept_len"], sort=True).size()
        table = g.rename("n").reset_index()
    else:
        code = ((dc * len(turns) + tc) * w + k) * w + a
        counts = np.bincount(code, minlength=size)
        nz = np.flatnonzero(counts)
        a_, rest = nz % w, nz // w
        k_, rest = rest % w, rest // w
        t_, d_ = rest % len(turns), rest // len(turns)
        table = pd.DataFrame({"doc_id": docs[d_], "turn": turns[t_], "k": k_,
                              "accept_len": a_, "n": counts[nz]})
    for c in ("doc_id", "turn", "k", "accept_len", "n"):
        table[c] = table[c].astype(np.int64)
    expected = expected_sums(steps, K)
    if clusters is not None:
        clusters = np.asarray(clusters, dtype=np.int64)
        if int(table["doc_id"].max()) >= len(clusters):
            raise AtlasError(f"{arm or 'run'}: doc_id {int(table['doc_id'].max())} has no cluster in the "
                             f"manifest's map of {len(clusters)} documents")
    return Cells(arm=arm, K=K, table=table, clusters=clusters, cluster_unit=cluster_unit, expected=expected)


def sampled(steps: pd.DataFrame) -> bool:
    """Whether the steps carry exact acceptance probabilities (a sampled run)."""
    return "accept_prob" in steps.columns and bool(steps["accept_prob"].notna().any())


def _accept_probs(steps: pd.DataFrame, K: int) -> np.ndarray:
    """[rows, K] accept_prob per depth (NaN where the row has none)."""
    col = steps["accept_prob"].to_numpy()
    lens = np.array([0 if v is None or (isinstance(v, float) and np.isnan(v)) else len(v) for v in col])
    out = np.full((len(col), K), np.nan)
    if lens.sum():
        flat = np.concatenate([np.asarray(v, dtype=np.float64) for v, n in zip(col, lens) if n])
        rows = np.repeat(np.arange(len(col)), lens)
        depth = np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens)
        out[rows, depth] = flat
    return out


def row_values(steps: pd.DataFrame, metric: str, K: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(in the denominator [rows] bool, y [rows] float) of one metric, row by row (the definitions
    in this module's docstring)."""
    kind, i = parse_metric(metric)
    k, a = steps["k"].to_numpy(np.int64), steps["accept_len"].to_numpy(np.int64)
    if kind == "dar":
        raise AtlasError(f"{DAR} is a ratio of token totals: it has no outcome per step to pair")
    if kind in ("p", "cond", "tokens"):
        return denominator(metric, k, a), outcome(metric, a)
    if not sampled(steps):
        raise AtlasError(f"{metric} needs exact acceptance probabilities (a sampled run's accept_prob column)")
    if kind == "alpha":
        y = steps["alpha1"].to_numpy(np.float64)
        return (k >= 1) & ~np.isnan(y), np.nan_to_num(y)
    ap = _accept_probs(steps, max(int(k.max()), i) if K is None else max(K, i))[:, i - 1]
    den = k >= i
    if (den & (a >= i - 1) & np.isnan(ap)).any():
        raise AtlasError(f"{metric}: a step in its denominator has no accept probability at depth {i}")
    return den, np.where(a >= i - 1, np.nan_to_num(ap), 0.0)


def expected_names(K: int) -> list[str]:
    """The exact-probability metrics of a sampled arm of K."""
    return ["alpha1"] + [f"p{i}_expected" for i in range(1, K + 1)]


def expected_sums(steps: pd.DataFrame, K: int) -> pd.DataFrame | None:
    """Per (doc_id, turn): y, y^2 and n of every exact-probability metric (None: not a sampled run)."""
    if not sampled(steps):
        return None
    keys = steps[["doc_id", "turn"]].to_numpy(np.int64)
    groups, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    G = len(groups)
    out = {"doc_id": groups[:, 0], "turn": groups[:, 1]}
    for m in expected_names(K):
        den, y = row_values(steps, m, K)
        w = den.astype(np.float64)
        out[f"{m}:y"] = np.bincount(inv, weights=w * y, minlength=G)
        out[f"{m}:y2"] = np.bincount(inv, weights=w * y * y, minlength=G)
        out[f"{m}:n"] = np.bincount(inv, weights=w, minlength=G).astype(np.int64)
    return pd.DataFrame(out)


def _expected_doc_sums(cells: Cells, metric: str) -> DocSums:
    e = cells.expected
    if e is None:
        raise AtlasError(f"{cells.arm or 'run'}: {metric} needs exact acceptance probabilities, which only "
                         "a sampled run records (workload.sampling.temperature > 0)")
    if f"{metric}:y" not in e.columns:
        raise AtlasError(f"{cells.arm or 'run'}: {metric} needs depth {parse_metric(metric)[1]}, "
                         f"but this run never observed it (K={cells.K})")
    unit = e["doc_id"].to_numpy() if cells.clusters is None else cells.clusters[e["doc_id"].to_numpy()]
    n = e[f"{metric}:n"].to_numpy()
    docs, inv = np.unique(unit[n > 0], return_inverse=True)
    G = len(docs)
    pick = lambda c: np.bincount(inv, weights=e[f"{metric}:{c}"].to_numpy()[n > 0], minlength=G)  # noqa: E731
    return DocSums(metric=metric, doc_id=docs, y=pick("y"), n=pick("n").astype(np.int64), y2=pick("y2"),
                   unit=cells.cluster_unit)


def doc_sums(cells: "Cells | Units", metric: str) -> DocSums:
    """Per-document (y, n, y^2) sums of one metric, from the cell counts or the per-unit table (the
    exact-probability metrics: from the per-(doc_id, turn) sums)."""
    if isinstance(cells, Units):
        return unit_sums(cells, metric)
    kind, i = parse_metric(metric)
    if kind in ("expected", "alpha"):
        return _expected_doc_sums(cells, metric)
    t = cells.table
    k, a, c = t["k"].to_numpy(), t["accept_len"].to_numpy(), t["n"].to_numpy()
    den, yv, w = denominator(metric, k, a), outcome(metric, a), weight(metric, k)
    unit = t["doc_id"].to_numpy() if cells.clusters is None else cells.clusters[t["doc_id"].to_numpy()]
    docs, inv = np.unique(unit[den], return_inverse=True)
    cd = c[den].astype(np.float64)
    yd = yv[den]
    G = len(docs)
    if w is not None:
        return DocSums(metric=metric, doc_id=docs, y=np.bincount(inv, weights=cd * yd, minlength=G),
                       n=np.bincount(inv, weights=cd * w[den], minlength=G).astype(np.int64),
                       y2=np.full(G, np.nan), unit=cells.cluster_unit)
    return DocSums(metric=metric, doc_id=docs,
                   y=np.bincount(inv, weights=cd * yd, minlength=G),
                   n=np.bincount(inv, weights=cd, minlength=G).astype(np.int64),
                   y2=np.bincount(inv, weights=cd * yd * yd, minlength=G), unit=cells.cluster_unit)


def compare(control: Cells, treatment: Cells, metric: str, n_boot: int = 2000, seed: int = 0) -> Difference:
    """treatment - control for one metric, with every sd (binomial/delta, cluster, bootstrap).
    Either side may be a run's cells or its per-unit table (metrics.Units)."""
    return compare_sums(doc_sums(control, metric), doc_sums(treatment, metric), control.arm, treatment.arm,
                        n_boot=n_boot, seed=seed)
