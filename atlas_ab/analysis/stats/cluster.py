"""Document-clustered uncertainty: CRV1 sandwich (statsmodels) and a cluster bootstrap.

Steps of one document share its content, and the arms emit different text, so
rows are not independent and the binomial sd understates the variance.

Both estimators run on per-document sums, never on rows. For the sandwich this
is exact: WLS of the per-document means on [1, treatment] with weights = the
document's row count has the same coefficients, the same bread (X'WX) and the
same per-cluster scores (sum over the document's rows of x*(y - fit)) as the
row-level OLS. Only statsmodels' small-sample factor counts observations, so it
is switched off and applied with the row count: G/(G-1) * (N-1)/(N-p), the
factor a row-level `OLS(...).fit(cov_type='cluster')` uses.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from statsmodels.regression.linear_model import WLS

from atlas_ab.analysis.stats.sums import DocSums


@dataclass(frozen=True)
class Bootstrap:
    """Cluster (document) bootstrap of a rate or of a difference of rates."""

    estimate: float
    se: float
    ci_low: float
    ci_high: float
    level: float
    n_boot: int
    seed: int
    n_clusters: int

    def summary(self) -> str:
        return (f"bootstrap over {self.n_clusters} documents (B={self.n_boot}, seed={self.seed}): "
                f"sd {self.se:.4f}, {self.level:.0%} CI [{self.ci_low:.4f}, {self.ci_high:.4f}]")

    __str__ = summary

    def to_dict(self) -> dict:
        # report.json keeps its keys: an se is written as "sd", n_boot as "B" (keys.JSON_KEY)
        return {"sd": self.se, "ci": [self.ci_low, self.ci_high], "level": self.level,
                "B": self.n_boot, "seed": self.seed, "n_clusters": self.n_clusters}


def _crv1(means: np.ndarray, weights: np.ndarray, exog: np.ndarray, groups: np.ndarray,
          n_rows: int) -> np.ndarray:
    keep = weights > 0
    G = len(np.unique(groups[keep]))
    p = exog.shape[1]
    if G < 2 or keep.sum() < p:  # one document: no between-document variance to estimate
        return np.full(p, np.nan)
    res = WLS(means[keep], exog[keep], weights=weights[keep]).fit(
        cov_type="cluster", cov_kwds={"groups": groups[keep], "use_correction": False})
    factor = G / (G - 1) * (n_rows - 1) / (n_rows - p)
    return np.sqrt(np.maximum(np.diag(res.cov_params()), 0.0) * factor)   # (an exact 0 can round below it)


def cluster_se(s: DocSums) -> float:
    """Cluster-robust (documents) sd of one arm's rate."""
    n = s.n.astype(np.float64)
    means = np.divide(s.y, n, out=np.zeros_like(n), where=n > 0)
    return float(_crv1(means, n, np.ones((len(n), 1)), np.arange(len(n)), s.N)[0])


def align(a: DocSums, b: DocSums):
    """(the union of both arms' clusters, [(y, n) of each arm on it]): a missing cluster counts 0."""
    docs = np.union1d(a.doc_id, b.doc_id)
    out = []
    for s in (a, b):
        idx = np.searchsorted(docs, s.doc_id)
        y, n = np.zeros(len(docs)), np.zeros(len(docs))
        y[idx], n[idx] = s.y, s.n
        out.append((y, n))
    return docs, out


def cluster_se_difference(control: DocSums, treatment: DocSums) -> float:
    """Cluster-robust sd of treatment - control, documents as clusters.

    One regression over both arms (y ~ 1 + treatment, clustered by doc_id): the
    same document in both arms is one cluster, so the covariance that matched
    content induces between the arms is counted rather than assumed away.
    """
    docs, ((ya, na), (yb, nb)) = align(control, treatment)
    G = len(docs)
    n = np.concatenate([na, nb])
    y = np.concatenate([ya, yb])
    means = np.divide(y, n, out=np.zeros_like(n), where=n > 0)
    exog = np.column_stack([np.ones(2 * G), np.r_[np.zeros(G), np.ones(G)]])
    groups = np.r_[np.arange(G), np.arange(G)]
    return float(_crv1(means, n, exog, groups, control.N + treatment.N)[1])


def _summarise(draws: np.ndarray, estimate: float, level: float, n_boot: int, seed: int, G: int) -> Bootstrap:
    ok = draws[np.isfinite(draws)]  # a draw can miss every denominator row of an arm
    if ok.size < 2:
        nan = float("nan")
        return Bootstrap(estimate, nan, nan, nan, level, n_boot, seed, G)
    lo, hi = np.quantile(ok, [(1 - level) / 2, (1 + level) / 2])
    return Bootstrap(estimate=estimate, se=float(ok.std(ddof=1)), ci_low=float(lo), ci_high=float(hi),
                     level=level, n_boot=n_boot, seed=seed, n_clusters=G)


@functools.lru_cache(maxsize=8)
def _weights(G: int, n_boot: int, seed: int) -> np.ndarray:
    """n_boot x G resampling counts: how often each of G documents is drawn in each of n_boot
    resamples of G documents with replacement (multinomial counts, built by one
    bincount over the drawn indices, much faster than n_boot multinomial draws).
    Cached: every metric of a comparison reuses the same draws."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, G, size=(n_boot, G)) + (np.arange(n_boot) * G)[:, None]
    W = np.bincount(idx.ravel(), minlength=n_boot * G).reshape(n_boot, G).astype(np.float64)
    W.flags.writeable = False
    return W


def bootstrap(s: DocSums, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> Bootstrap:
    """Percentile CI and sd of one arm's rate, resampling documents."""
    W = _weights(len(s.doc_id), n_boot, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        draws = (W @ s.y) / (W @ s.n.astype(np.float64))
    return _summarise(draws, s.value, level, n_boot, seed, len(s.doc_id))


def bootstrap_difference(control: DocSums, treatment: DocSums, n_boot: int = 2000, seed: int = 0,
                         level: float = 0.95) -> Bootstrap:
    """Percentile CI and sd of treatment - control, resampling documents jointly
    (one draw picks the same documents in both arms: content is matched)."""
    docs, ((ya, na), (yb, nb)) = align(control, treatment)
    W = _weights(len(docs), n_boot, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        draws = (W @ yb) / (W @ nb) - (W @ ya) / (W @ na)
    return _summarise(draws, treatment.value - control.value, level, n_boot, seed, len(docs))
