"""The K ladder: which K to serve at each batch width, and how sure that is.

Terms (docs/analysis.md, "The K ladder"):
  B          the batch width: sequences that verify together in one batched step.
  K          drafts per verify step; K = 0 is plain decode (one target token per forward, no drafter).
  E_K        E[1 + accepted | K] = 1 + sum_{i=1..K} prod_{j<=i} p_j_cond (p_1 = p1, p_2_cond, ...):
             tokens one sequence commits per step. E_0 = 1 exactly.
  t(B, K)    the mean wall time of one batched step at width B (ms): warm-up steps apart, one
             number per batched step (its rows share it), from live runs of one loop.
  X(B, K)    = B x E_K / t(B, K): committed tokens per second with every slot busy (a serving engine
             refills a slot as a sequence ends; the wave's ragged tail is not the steady state).

Uncertainty, from both halves, taken as independent of each other:
  - E_K is cluster-robust: the ratio sum(1 + a) / steps over clusters (documents, or the source
    files the workload cut them from), linearised (CRV1, G/(G-1)); two K share clusters, so their
    covariance enters every comparison between them;
  - t(B, K) has its own spread. Timed in R >= 2 replicates (independent jobs of a `+study=ladder`
    sweep, run in a seeded interleaved order), it is the random-effects pool of the replicates' mean
    step times, each with its within-replicate se (s / sqrt(n)), the between-replicate variance inside
    its se, with a t of R - 1 df (analysis/stats/replicates.py: DerSimonian-Laird, the HK se floored at
    DL's); a cell reports its replicates, I^2 (the share of variance between them) and Cochran's Q
    (its replicates disagree beyond their spreads at the interval's level). Timed in one job, it is
    that job's step-to-step se alone, which misses what differs between jobs: a ladder with a cell
    of one replicate is marked "single replicate: not a verdict" (SINGLE).
  `delta`: the delta method on log X (and on log X_K / X_K' for a gain); intervals are exp(log +- q se),
  q normal, or a t at the parts' Welch-Satterthwaite df where replicates pool the timing
  (replicates.log_ratio: the one definition of a tokens-per-second comparison).
  `bootstrap`: clusters resampled jointly for every K (the same draw), batched steps resampled within
  each (B, K) (replicates drawn first, then steps within each, where there are replicates); percentile
  intervals. tests/analysis/test_ladder.py checks one against the other. With fewer than
  MIN_BOOT_REPLICATES replicates a bootstrap over them is too coarse to decide, and is refused as such.

The answer at each width: the best K (largest X), its gain over K = 0 and over the next-best K, each
with an interval. A K whose gap to the best has an interval that holds 0 is TIED with it; the ladder
then serves the smallest K among the best and its ties (the same throughput within the data, fewer
drafts and less memory), and says so. When K = 0 is the best or tied with it, "no K pays".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from atlas_ab import AtlasError
from atlas_ab.analysis.ladder.machines import OnMachines, pool
from atlas_ab.analysis.stats import few_clusters
from atlas_ab.analysis.stats.replicates import SINGLE, Z95, log_ratio, relative_part

METHODS = ("delta", "bootstrap")
#: the fewest replicates per cell a bootstrap over replicates may decide from (3 replicates give 10 draws)
MIN_BOOT_REPLICATES = 10


@dataclass(frozen=True)
class Acceptance:
    """Per-cluster sums of one K's verify steps: clusters [G], steps [G], tokens [G] (sum of 1 + a),
    ge [G, K] (#(accept_len >= i) for i = 1..K)."""
    K: int
    clusters: np.ndarray
    steps: np.ndarray
    tokens: np.ndarray
    ge: np.ndarray

    @property
    def E(self) -> float:
        return float(self.tokens.sum() / self.steps.sum())

    def p_cond(self) -> list[float]:
        """p_i_cond = #(a >= i) / #(a >= i-1), i = 1..K (p_1 = p1)."""
        ge = np.concatenate([[self.steps.sum()], self.ge.sum(axis=0)])
        return [float(ge[i] / ge[i - 1]) if ge[i - 1] else float("nan") for i in range(1, self.K + 1)]


def acceptance_of(K: int, clusters, accept_len) -> Acceptance:
    """A K's verify steps (cluster and accept_len per step row) as per-cluster sums."""
    c, a = np.asarray(clusters), np.asarray(accept_len, dtype=np.int64)
    if len(a) == 0:
        raise AtlasError(f"K={K}: no verify step to take acceptance from")
    if (a < 0).any() or (a > K).any():
        raise AtlasError(f"K={K}: accept_len outside 0..{K}")
    u, inv = np.unique(c, return_inverse=True)
    steps = np.bincount(inv, minlength=len(u)).astype(float)
    tokens = np.bincount(inv, weights=1.0 + a, minlength=len(u))
    ge = np.stack([np.bincount(inv, weights=(a >= i).astype(float), minlength=len(u)) for i in range(1, K + 1)],
                  axis=1)
    return Acceptance(K, u, steps, tokens, ge)


@dataclass(frozen=True)
class _Sums:
    """Every K's sums over the union of clusters (zeros where a K has none): T, N [G, nK]."""
    Ks: tuple[int, ...]
    clusters: np.ndarray
    T: np.ndarray
    N: np.ndarray

    @staticmethod
    def of(acc: dict[int, Acceptance]) -> "_Sums":
        Ks = tuple(sorted(acc))
        allc = np.unique(np.concatenate([acc[k].clusters for k in Ks])) if Ks else np.zeros(0)
        T, N = np.zeros((len(allc), len(Ks))), np.zeros((len(allc), len(Ks)))
        for j, k in enumerate(Ks):
            idx = np.searchsorted(allc, acc[k].clusters)
            T[idx, j], N[idx, j] = acc[k].tokens, acc[k].steps
        return _Sums(Ks, allc, T, N)

    def cov(self) -> np.ndarray:
        """CRV1 covariance of the E_K [nK, nK]: z_gK = (T_gK - E_K N_gK) / N_K, G/(G-1) sum_g z z'."""
        G = len(self.clusters)
        E = self.T.sum(0) / self.N.sum(0)
        z = (self.T - E * self.N) / self.N.sum(0)                               # [G, nK]
        return G / (G - 1) * z.T @ z


@dataclass(frozen=True)
class Cell:
    """One (B, K): E_K, t(B, K), X and their ses (delta method) and bootstrap intervals."""
    B: int
    K: int
    E: float
    E_se: float
    t_ms: float
    t_se: float
    n_timed: int
    X: float
    X_se: float
    X_lo: float
    X_hi: float
    X_boot_se: float | None = None
    X_boot_lo: float | None = None
    X_boot_hi: float | None = None
    replicates: int = 1        # jobs that timed this cell
    machines: int = 1          # machines they ran on (> 1: the machines are the top level: ladder/machines.py)
    t_df: float = math.inf     # the t's df of t_se (R - 1; inf: one replicate, a normal quantile)
    tau2: float = math.nan     # between-replicate variance of the mean step (ms^2)
    i2: float = math.nan       # its share of the variance (I^2)
    q_p: float = math.nan      # Cochran's Q p-value
    disagree: bool = False     # the replicates differ beyond their spreads at the interval's level


@dataclass(frozen=True)
class Gain:
    """X_K / X_K' - 1 at one width: the point, its se and interval (delta), and the bootstrap's."""
    K: int
    over: int
    value: float
    se: float
    lo: float
    hi: float
    boot_se: float | None = None
    boot_lo: float | None = None
    boot_hi: float | None = None

    def interval(self, method: str = "delta") -> tuple[float, float]:
        return (self.lo, self.hi) if method == "delta" else (self.boot_lo, self.boot_hi)

    def holds_zero(self, method: str = "delta") -> bool:
        lo, hi = self.interval(method)
        return lo <= 0 <= hi

    def words(self, method: str = "delta") -> str:
        lo, hi = self.interval(method)
        return f"{self.value:+.1%} [{lo:+.1%}, {hi:+.1%}]"


@dataclass(frozen=True)
class Choice:
    """The answer at one width."""
    B: int
    best: int                  # the largest X (point estimate)
    K: int                     # what the ladder serves: the smallest of best and its ties
    tied: tuple[int, ...]      # K within the best's interval (the gap's interval holds 0)
    over_0: Gain | None        # the best over K = 0 (None when the best is K = 0)
    over_next: Gain | None     # the best over the next-best K
    pays: bool                 # some K > 0 beats K = 0 outside the interval
    plain: bool = True         # K = 0 was measured at this width (engine runs may lack it)
    names: dict | None = None  # a family ladder's option -> family (0: plain); None: the options are K

    def label(self, k) -> str:
        return label(k, self.names)

    def labels(self, ks) -> str:
        return labels(ks, self.names)

    def verdict(self, method: str = "delta") -> str:
        none = "no family pays" if self.names else "no K pays"
        if not self.plain:
            tie = f", tied with {self.labels(self.tied)}" if self.tied else ""
            return (f"{self.label(self.best)} is the best of those measured{tie} (serve {self.label(self.K)}); "
                    f"no {self.label(0)} run, so whether any {'family' if self.names else 'K'} pays is not known")
        if self.best == 0:
            return f"{none}: plain decode is the fastest"
        w = f"{self.label(self.best)} {self.over_0.words(method)} over {self.label(0)}"
        if not self.pays:
            return f"{none}: the best, {w}, is within the interval of plain decode"
        tie = f"; tied with {self.labels(self.tied)} (ladder serves {self.label(self.K)})" if self.tied else ""
        nxt = f", {self.over_next.words(method)} over {self.label(self.over_next.over)}" \
            if self.over_next and self.over_next.over != 0 else ""
        return f"{self.label(self.best)} pays: {w}{nxt}{tie}"


def label(k, names: dict | None) -> str:
    """An option in words: K=k, or a family ladder's family name."""
    return f"K={k}" if names is None else str(names[k])


def labels(ks, names: dict | None) -> str:
    return f"K={', '.join(map(str, ks))}" if names is None else ", ".join(str(names[k]) for k in ks)


@dataclass
class LadderResult:
    """The fitted ladder (statsmodels style: the numbers as attributes, `summary()` the table)."""
    cells: pd.DataFrame          # one row per (B, K): Cell's fields
    choices: dict[int, Choice]   # B -> the answer
    acceptance: pd.DataFrame     # one row per K: steps, clusters, E, E_se, p1, p2_cond, ...
    method: str = "delta"        # which interval decides ties and "pays"
    z: float = Z95
    n_boot: int = 0
    notes: list[str] = field(default_factory=list)
    names: dict | None = None    # a family ladder: option -> family (0: plain decode); None: options are K

    @property
    def replicates(self) -> int:
        """The fewest replicates any cell had (1: the ladder is not a verdict)."""
        return int(self.cells["replicates"].min()) if len(self.cells) else 0

    @property
    def machines(self) -> int:
        """The machines every cell was timed on (1: one machine, or runs that do not say)."""
        return int(self.cells["machines"].min()) if len(self.cells) else 1

    @property
    def single_replicate(self) -> bool:
        return self.replicates <= 1

    @property
    def ladder(self) -> dict[int, int]:
        """B -> the K the ladder serves (0: plain decode)."""
        return {b: c.K for b, c in sorted(self.choices.items())}

    def summary(self) -> str:
        """The ladder in words: acceptance, cells and answers as markdown tables (words.py)."""
        from atlas_ab.analysis.ladder.words import summary
        return summary(self)

    def to_dict(self) -> dict:
        def gain(g):
            return None if g is None else g.__dict__.copy()
        return {"method": self.method, "z": self.z, "n_boot": self.n_boot, "notes": list(self.notes),
                "replicates": self.replicates, "machines": self.machines,
                "verdict": SINGLE if self.single_replicate else "replicated",
                "acceptance": self.acceptance.to_dict(orient="records"),
                "cells": self.cells.to_dict(orient="records"),
                "ladder": {str(b): (k if self.names is None else self.names[k]) for b, k in self.ladder.items()},
                **({"families": {str(k): v for k, v in self.names.items()}} if self.names is not None else {}),
                "choices": {str(b): {"K": c.K, "best": c.best, "tied": list(c.tied), "pays": c.pays,
                                     "over_0": gain(c.over_0), "over_next": gain(c.over_next),
                                     "verdict": c.verdict(self.method)} for b, c in sorted(self.choices.items())}}


def norm_cdf(z: float) -> float:
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def replicates_of(t):
    """A cell's timing as replicates: one array [n] is one replicate, a list of arrays several, an
    OnMachines several per machine (kept as it is)."""
    if isinstance(t, OnMachines):
        return t
    if isinstance(t, np.ndarray) and t.ndim == 1:
        return [t]
    return [np.asarray(r, dtype=np.float64) for r in t]


def fit(acceptance: dict[int, Acceptance], times: dict[tuple[int, int], np.ndarray | list[np.ndarray]],
        z: float = Z95, n_boot: int = 2000, seed: int = 0, method: str = "delta", cluster_unit: str = "document",
        require_plain: bool = True, names: dict | None = None) -> LadderResult:
    """The ladder from per-K acceptance and per-(B, K) batched step times (ms; K = 0 among them).

    acceptance: K -> Acceptance for every K >= 1 that times holds; times: (B, K) -> [n] step ms (one
    replicate), or a list of such arrays, one per replicate (random effects over them).
    require_plain False (engine runs): a width without K = 0 compares the K measured, and says so.
    names: a family ladder (analysis/ladder/families.py): each option k is a family's index (0: plain
    decode, ties served to the smallest index), named names[k] in the words; the numbers are the same."""
    if method not in METHODS:
        raise AtlasError(f"ladder: method {method!r} must be one of {', '.join(METHODS)}")
    if method == "bootstrap" and n_boot < 1:
        raise AtlasError("ladder: the bootstrap decides but n_boot is 0")
    widths = sorted({b for b, _ in times})
    for b in widths:
        if (b, 0) not in times and require_plain:
            raise AtlasError(f"ladder: no K=0 (plain decode) timing at batch width {b}: the gains over K=0 "
                             "need it (run arm.num_drafts=0 at that width)")
    missing = sorted({k for _, k in times if k > 0 and k not in acceptance})
    if missing:
        raise AtlasError(f"ladder: no acceptance for K={missing[0]} (timed, but no verify steps of that K)")
    times = {c: replicates_of(t) for c, t in times.items()}
    machines = max((len(r.machines) for r in times.values() if isinstance(r, OnMachines)), default=1)
    if machines > 1 and method == "bootstrap":
        raise AtlasError("ladder: the bootstrap has no machine level; let the delta method decide timing on machines")
    for (b, k), reps in times.items():
        for i, t in enumerate(reps.replicates if isinstance(reps, OnMachines) else reps):
            if len(t) < 2:
                raise AtlasError(f"ladder: batch width {b} K={k}" + (f" replicate {i}" if len(reps) > 1 else "")
                                 + f": {len(t)} timed step(s); a spread needs >= 2")
    few_reps = min(len(r) for r in times.values()) if times else 0
    if method == "bootstrap" and 1 < few_reps < MIN_BOOT_REPLICATES:
        raise AtlasError(f"ladder: the bootstrap cannot decide from {few_reps} replicates per cell (fewer than "
                         f"{MIN_BOOT_REPLICATES}: too few distinct draws); let the delta method decide")
    sums = _Sums.of({k: acceptance[k] for k in sorted({k for _, k in times if k > 0})})
    G = len(sums.clusters)
    why = few_clusters(G, cluster_unit) if sums.Ks else None
    if why:
        raise AtlasError(f"ladder: {why} (acceptance needs >= 10 clusters for its cluster-robust se)")
    col = {k: j for j, k in enumerate(sums.Ks)}
    E = {0: 1.0, **{k: float(sums.T[:, j].sum() / sums.N[:, j].sum()) for k, j in col.items()}}
    V = sums.cov() if sums.Ks else np.zeros((0, 0))

    def var_e(k, k2):        # cov(E_k, E_k2); K = 0 is exact
        return 0.0 if k == 0 or k2 == 0 else float(V[col[k], col[k2]])

    # per replicate its mean step and se^2; pooled by random effects (one replicate: the mean and se as they are)
    pooled = {c: pool(r, z) for c, r in times.items()}
    tm = {c: re.mean for c, re in pooled.items()}
    tse = {c: re.se for c, re in pooled.items()}
    X = {(b, k): b * E[k] / tm[(b, k)] * 1e3 for (b, k) in times}

    boot = _bootstrap(sums, times, n_boot, seed) if n_boot and machines == 1 else None
    rows = []
    for (b, k) in sorted(times):
        re = pooled[(b, k)]
        x = log_ratio(X[(b, k)], [(var_e(k, k) / E[k] ** 2, math.inf), relative_part(re)], z)
        row = dict(B=b, K=k, E=E[k], E_se=math.sqrt(var_e(k, k)), t_ms=tm[(b, k)], t_se=tse[(b, k)],
                   n_timed=sum(len(t) for t in replicates_flat(times[(b, k)])), X=X[(b, k)], X_se=x.se, X_lo=x.lo,
                   X_hi=x.hi,
                   X_boot_se=None, X_boot_lo=None, X_boot_hi=None, replicates=len(times[(b, k)]),
                   machines=re.n if machines > 1 else 1, t_df=re.df, tau2=re.tau2,
                   i2=re.i2, q_p=re.q_p, disagree=re.disagree())
        if boot is not None:
            xs = boot[(b, k)]
            row.update(X_boot_se=float(np.std(xs, ddof=1)), X_boot_lo=float(np.quantile(xs, (1 - _lvl(z)) / 2)),
                       X_boot_hi=float(np.quantile(xs, (1 + _lvl(z)) / 2)))
        rows.append(row)
    cells = pd.DataFrame(rows, columns=list(Cell.__dataclass_fields__))

    def gain(b, k, k2) -> Gain:
        r = X[(b, k)] / X[(b, k2)]
        acc = var_e(k, k) / E[k] ** 2 + var_e(k2, k2) / E[k2] ** 2 - 2 * var_e(k, k2) / (E[k] * E[k2])
        x = log_ratio(r, [(acc, math.inf), relative_part(pooled[(b, k)]), relative_part(pooled[(b, k2)])], z)
        g = dict(K=k, over=k2, value=r - 1, se=x.se, lo=x.lo - 1, hi=x.hi - 1)
        if boot is not None:
            rs = boot[(b, k)] / boot[(b, k2)] - 1
            g.update(boot_se=float(np.std(rs, ddof=1)), boot_lo=float(np.quantile(rs, (1 - _lvl(z)) / 2)),
                     boot_hi=float(np.quantile(rs, (1 + _lvl(z)) / 2)))
        return Gain(**g)

    choices = {}
    for b in widths:
        ks = sorted(k for bb, k in times if bb == b)
        order = sorted(ks, key=lambda k: (-X[(b, k)], k))
        best = order[0]
        gaps = {k: gain(b, best, k) for k in ks if k != best}
        tied = tuple(sorted(k for k, g in gaps.items() if g.holds_zero(method)))
        plain = 0 in ks
        pays = plain and best != 0 and 0 not in tied
        serve = min((best, *tied)) if pays or not plain else 0
        choices[b] = Choice(b, best, serve, tied, gaps.get(0), gaps[order[1]] if len(order) > 1 else None, pays,
                            plain, names)
    acc_rows = [{"K": k, "steps": int(sums.N[:, col[k]].sum()), "clusters": int((sums.N[:, col[k]] > 0).sum()),
                 "E": E[k], "E_se": math.sqrt(var_e(k, k)), "p_cond": acceptance[k].p_cond()} for k in sums.Ks]
    return LadderResult(cells, choices, pd.DataFrame(acc_rows, columns=["K", "steps", "clusters", "E", "E_se",
                                                                          "p_cond"]),
                        method, z, n_boot if boot is not None else 0, names=names)


def replicates_flat(reps) -> list[np.ndarray]:
    return reps.replicates if isinstance(reps, OnMachines) else reps


def _lvl(z: float) -> float:
    return 2 * norm_cdf(z) - 1


def _bootstrap(sums: _Sums, times: dict, n_boot: int, seed: int) -> dict[tuple[int, int], np.ndarray]:
    """X* [n_boot] per (B, K): clusters drawn once per replicate for every K, steps within each cell."""
    rng = np.random.default_rng(seed)
    G = len(sums.clusters)
    Eb = {0: np.ones(n_boot)}
    if G:
        W = rng.multinomial(G, np.full(G, 1.0 / G), size=n_boot).astype(float)       # [n_boot, G]
        Eb.update({k: (W @ sums.T[:, j]) / (W @ sums.N[:, j]) for j, k in enumerate(sums.Ks)})
    out = {}
    for (b, k) in sorted(times):
        reps = times[(b, k)]
        if len(reps) == 1:
            means = _step_means(reps[0], n_boot, rng)
        else:          # hierarchical: replicates drawn with replacement, then steps within each drawn one
            R = len(reps)
            # [slot, replicate, n_boot]: a fresh step resample for every slot, so a replicate drawn twice is
            # resampled twice
            within = np.stack([np.stack([_step_means(r, n_boot, rng) for r in reps]) for _ in range(R)])
            pick = rng.integers(0, R, size=(n_boot, R))
            means = within[np.arange(R)[None, :], pick, np.arange(n_boot)[:, None]].mean(axis=1)
        out[(b, k)] = b * Eb[k] / means * 1e3
    return out


def _step_means(t, n_boot: int, rng) -> np.ndarray:
    """[n_boot] means of one replicate's steps drawn with replacement."""
    t = np.asarray(t, dtype=np.float64)
    means = np.empty(n_boot)
    for lo in range(0, n_boot, 256):          # [chunk, n] draws at a time
        hi = min(n_boot, lo + 256)
        means[lo:hi] = t[rng.integers(0, len(t), size=(hi - lo, len(t)))].mean(axis=1)
    return means
