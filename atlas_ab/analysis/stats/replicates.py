"""A quantity timed in independent replicates (separate jobs, separately built graphs): its pooled value
with the between-replicate variance inside the interval, and the ratio of two such quantities.

Every tokens-per-second verdict compares timings of different jobs, and what differs between jobs (the
graphs and compiled bookkeeping each builds, the host's state while it runs, drift over a sweep) is
most of the spread: a job's own step-to-step spread misses it. So a timed quantity is measured in
R replicates, each giving an estimate y_r with its within-replicate variance v_r (its steps' or its
clusters' spread), and pooled by one-way random effects:

  DerSimonian-Laird   w_r = 1 / v_r, y_FE = sum w y / sum w, Q = sum w (y - y_FE)^2 (Cochran's Q, R - 1 df),
                      c = sum w - sum w^2 / sum w, tau^2 = max(0, (Q - (R - 1)) / c) (the between-replicate
                      variance); w*_r = 1 / (v_r + tau^2), mean = sum w* y / sum w*, se_DL^2 = 1 / sum w*.
  the se that decides se^2 = max(se_DL^2, se_HK^2), se_HK^2 = sum w* (y - mean)^2 / ((R - 1) sum w*)
                      (Hartung-Knapp-Sidik-Jonkman, floored at DL: the "modified" HK of Roever et al. 2015),
                      with a t of R - 1 df: with three replicates tau^2 is estimated from two degrees of
                      freedom, and a normal quantile would cover far less than it says.
  I^2                 = max(0, (Q - (R - 1)) / Q): the share of the variance that lies between replicates.
  disagree            Cochran's Q test at the registered level (chi^2, R - 1 df): the replicates differ beyond
                      their own spreads (a host stall in one job, a graph built differently).

Why not statsmodels' combine_effects (method_re="dl"): in statsmodels 0.15 its DL tau^2 is (Q - df) / c
unclipped, negative when the replicates agree better than their spreads say (and I^2 negative with it),
which gives weights above the fixed effect's; the test checks the two agree wherever Q > R - 1.

One replicate is no random effect: its se is its own within-replicate one, with a normal quantile (the
interval a single job gives, which is why a single-replicate result is never a verdict).

A ratio of such quantities (a throughput over another: X_K / X_0, tokens/s of arm B over arm A) is one
definition for the package (`log_ratio`): log r with variance the sum of its independent parts' relative
variances (delta method), each part with its degrees of freedom (infinite for a part with a normal
se, such as a cluster-robust acceptance), combined by Welch-Satterthwaite into one t quantile.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from atlas_ab import AtlasError

#: the normal quantile of a two-sided 95% interval (ladder.Z95's value)
Z95 = 1.959964
#: what a result whose timing comes from one job per cell (or per arm) is, wherever it is printed
SINGLE = "single replicate: not a verdict"


def level_of(z: float) -> float:
    """The two-sided level a normal quantile z gives (1.959964 -> 0.95)."""
    return 2 * stats.norm.cdf(z) - 1


def quantile(z: float, df: float) -> float:
    """The critical value at the level normal z gives: z itself where df is infinite, else the t's."""
    return z if math.isinf(df) else float(stats.t.ppf(stats.norm.cdf(z), df))


@dataclass(frozen=True)
class RandomEffects:
    """A quantity pooled over replicates (statsmodels style: the numbers as fields, `summary()` the words)."""
    y: tuple[float, ...]       # per-replicate estimates
    v: tuple[float, ...]       # their within-replicate variances
    mean: float                # the pooled value (DL weights)
    se: float                  # the se that decides: max(DL, HK); the within se for one replicate
    df: float                  # its t's degrees of freedom (R - 1; inf for one replicate)
    se_dl: float
    se_hk: float
    tau2: float                # between-replicate variance (nan for one replicate)
    q: float                   # Cochran's Q
    q_p: float                 # its chi^2 p-value (R - 1 df)
    i2: float                  # share of the variance between replicates
    z: float = Z95

    @property
    def n(self) -> int:
        return len(self.y)

    @property
    def single(self) -> bool:
        return self.n == 1

    @property
    def interval(self) -> tuple[float, float]:
        c = quantile(self.z, self.df)
        return self.mean - c * self.se, self.mean + c * self.se

    def disagree(self, alpha: float | None = None) -> bool:
        """Cochran's Q rejects one common value at `alpha` (default: 1 - the interval's level)."""
        a = 1 - level_of(self.z) if alpha is None else alpha
        return not self.single and self.q_p < a

    def summary(self) -> str:
        if self.single:
            return f"{self.mean:.4g} (se {self.se:.3g}, one replicate: within-replicate spread only)"
        lo, hi = self.interval
        return (f"{self.mean:.4g} (se {self.se:.3g}, t {self.df:g} df) [{lo:.4g}, {hi:.4g}] over {self.n} "
                f"replicates; tau^2 {self.tau2:.3g}, I^2 {self.i2:.0%}, Cochran's Q {self.q:.2f} (p {self.q_p:.3g})"
                + ("; the replicates disagree beyond their spreads" if self.disagree() else ""))


def random_effects(y, v, z: float = Z95) -> RandomEffects:
    """DerSimonian-Laird over replicates (module docstring); y [R] estimates, v [R] within variances."""
    y, v = np.asarray(y, dtype=np.float64), np.asarray(v, dtype=np.float64)
    if y.ndim != 1 or y.shape != v.shape or len(y) == 0:
        raise AtlasError(f"random effects: {len(y)} estimate(s) and {len(v)} variance(s): one of each per replicate")
    if not (np.isfinite(y).all() and np.isfinite(v).all()) or (v <= 0).any():
        raise AtlasError("random effects: a replicate's estimate is not finite or its within variance is not > 0 "
                         "(a replicate needs >= 2 timed steps that differ)")
    R = len(y)
    if R == 1:
        se = math.sqrt(v[0])
        nan = float("nan")
        return RandomEffects((float(y[0]),), (float(v[0]),), float(y[0]), se, math.inf, se, nan, nan, 0.0, nan,
                             nan, z)
    w = 1 / v
    fe = float((w * y).sum() / w.sum())
    q = float((w * (y - fe) ** 2).sum())
    c = float(w.sum() - (w ** 2).sum() / w.sum())
    tau2 = max(0.0, (q - (R - 1)) / c)
    ws = 1 / (v + tau2)
    mean = float((ws * y).sum() / ws.sum())
    se_dl = math.sqrt(1 / ws.sum())
    se_hk = math.sqrt(float((ws * (y - mean) ** 2).sum()) / ((R - 1) * ws.sum()))
    i2 = max(0.0, (q - (R - 1)) / q) if q > 0 else 0.0
    return RandomEffects(tuple(map(float, y)), tuple(map(float, v)), mean, max(se_dl, se_hk), float(R - 1), se_dl,
                         se_hk, tau2, q, float(stats.chi2.sf(q, R - 1)), i2, z)


@dataclass(frozen=True)
class LogRatio:
    """r = a / b of two timed quantities, its se on the log scale and a t interval (Welch-Satterthwaite df)."""
    value: float               # r
    se_log: float
    df: float                  # inf where every part's se is a normal one
    lo: float
    hi: float
    z: float = Z95

    @property
    def se(self) -> float:
        """The se of r itself (delta method)."""
        return self.value * self.se_log

    def holds(self, x: float) -> bool:
        return self.lo <= x <= self.hi

    def summary(self) -> str:
        dfs = "normal" if math.isinf(self.df) else f"t {self.df:.1f} df"
        return f"{self.value - 1:+.1%} [{self.lo - 1:+.1%}, {self.hi - 1:+.1%}] ({dfs})"


def welch_df(parts) -> float:
    """Welch-Satterthwaite: (sum var)^2 / sum var^2 / df over (var, df) parts; inf when every df is."""
    tot = sum(v for v, _ in parts)
    den = sum(v * v / d for v, d in parts if not math.isinf(d) and v > 0)
    return math.inf if den == 0 else tot * tot / den


def log_ratio(value: float, parts, z: float = Z95) -> LogRatio:
    """The interval of a ratio r from its independent parts [(variance of their log, df)], every
    tokens-per-second comparison's one definition: r x exp(+- q se), q the t quantile at welch_df(parts)."""
    if not (value > 0 and math.isfinite(value)):
        raise AtlasError(f"ratio {value!r}: a ratio of throughputs must be positive and finite")
    var = sum(v for v, _ in parts)
    se = math.sqrt(max(var, 0.0))
    df = welch_df(parts)
    c = quantile(z, df)
    return LogRatio(value, se, df, value * math.exp(-c * se), value * math.exp(c * se), z)


def relative_part(re: RandomEffects) -> tuple[float, float]:
    """A pooled quantity's part of a log ratio: ((se / mean)^2, df)."""
    return (re.se / re.mean) ** 2, re.df
