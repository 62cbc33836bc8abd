"""Confidence sequences: intervals for a mean that hold at every sample size at once, so the data
may be looked at after every observation and the study stopped when they decide.

Terms:
  confidence sequence (CS)  intervals C_1, C_2, ... with P(mean in C_t for every t) >= 1 - alpha
  capital process           the wealth K_t(m) of a gambler betting against "the mean is m"; under
                            that null it is a nonnegative martingale, so by Ville's inequality it
                            ever reaches 1/alpha with probability <= alpha, and {m: K_t(m) < 1/alpha}
                            is a CS
  hedged capital            K_t(m) = max(theta K+_t(m), (1 - theta) K-_t(m)), betting on both sides

`hedged_cs` is the hedged-capital CS of Waudby-Smith & Ramdas, "Estimating means of bounded random
variables by betting" (JRSS-B 2024, sec. 4, eq. 27, with the predictable plug-in bets of eq. 26),
exactly as `confseq.betting.hedged_cs` (github.com/gostevehoward/confseq) computes it with its
defaults (theta 1/2, truncation 1/2, a grid of `breaks` + 1 candidate means, each bound widened
by one grid step, the running intersection); tests/analysis/test_confidence_sequence.py checks
it against that function's numbers. Observations must lie in [0, 1].

`asymptotic_cs` is the asymptotic CS of Waudby-Smith, Arbour, Sinha, Kennedy & Ramdas,
"Time-uniform central limit theory and asymptotic confidence sequences" (Ann. Statist. 2024,
Theorem 2.2): the Robbins normal-mixture boundary with the running variance; for unbounded or
linearised quantities (a pooled ratio), valid as the sample grows.
"""
from __future__ import annotations

import math

import numpy as np

#: confseq's grid: candidate means 0, 1/breaks, ..., 1
BREAKS = 1000
_CHUNK = 256     # grid rows per block: bounds memory at _CHUNK x n floats


def plugin_bets(x: np.ndarray, alpha: float) -> np.ndarray:
    """The predictable plug-in bets lambda_t = sqrt(2 log(1/alpha) / (sigma2_{t-1} t log(1 + t))),
    with the regularised running mean and variance (prior mean 1/2, variance 1/4, one fake
    observation), as confseq.predmix.lambda_predmix_eb. x: [..., n] (the last axis is time)."""
    x = np.asarray(x, np.float64)
    n = x.shape[-1]
    t = np.arange(1, n + 1)                                                # [n]
    mu = np.minimum((0.5 + np.cumsum(x, axis=-1)) / (t + 1), 1)            # [..., n]
    sigma2 = (0.25 + np.cumsum((x - mu) ** 2, axis=-1)) / (t + 1)          # [..., n]
    sigma2_prev = np.concatenate([np.full(x.shape[:-1] + (1,), 0.25), sigma2[..., :-1]], axis=-1)   # [..., n]
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = np.sqrt(2 * np.log(1 / alpha) / (t * np.log(1 + t) * sigma2_prev))
    lam[np.isnan(lam)] = 0
    return lam


def capitals(x: np.ndarray, m, alpha: float, theta: float = 0.5, trunc: float = 0.5):
    """(K+_t(m), K-_t(m)): the two sides' capital, each betting alpha * its weight's plug-in bet
    truncated at trunc / m (positive side) and trunc / (1 - m) (negative side). x: [..., n];
    m broadcasts against it ([G, 1] against [n]: every candidate mean at once)."""
    x = np.asarray(x, np.float64)
    m = np.asarray(m, np.float64)
    lam_pos, lam_neg = plugin_bets(x, alpha * theta), plugin_bets(x, alpha * (1 - theta))   # [..., n]
    with np.errstate(divide="ignore"):
        lp = np.minimum(lam_pos, trunc / m)
        ln = np.minimum(lam_neg, trunc / (1 - m))
    with np.errstate(invalid="ignore", over="ignore"):
        kp = np.cumprod(1 + lp * (x - m), axis=-1)
        kn = np.cumprod(1 - ln * (x - m), axis=-1)
    kp[np.isnan(kp)] = 0     # 0 * inf: no capital (confseq's convention)
    kn[np.isnan(kn)] = 0
    return kp, kn


def hedged_capital(x: np.ndarray, m: np.ndarray, alpha: float, theta: float = 0.5,
                   trunc: float = 0.5) -> np.ndarray:
    """K_t(m) = max(theta K+, (1 - theta) K-) for each candidate mean m: [len(m), len(x)]."""
    kp, kn = capitals(np.asarray(x, np.float64)[None, :], np.asarray(m, np.float64)[:, None], alpha, theta, trunc)
    return np.maximum(theta * kp, (1 - theta) * kn)


def hedged_cs(x, alpha: float = 0.05, breaks: int = BREAKS, running_intersection: bool = True):
    """(lower, upper) at every t of the hedged-capital CS for the mean of x in [0, 1]: [n] each."""
    x = np.asarray(x, np.float64)
    if x.ndim != 1 or len(x) == 0:
        raise ValueError("hedged_cs: x must be a non-empty vector")
    if np.any((x < 0) | (x > 1)) or not np.all(np.isfinite(x)):
        raise ValueError("hedged_cs: observations must lie in [0, 1]")
    grid = np.arange(0, 1 + 1 / breaks, step=1 / breaks)                   # [G]
    n = len(x)
    first = np.full(n, len(grid))        # the lowest grid index in the CS at each t
    last = np.full(n, -1)                # the highest
    for s in range(0, len(grid), _CHUNK):
        inside = hedged_capital(x, grid[s:s + _CHUNK], alpha) <= 1 / alpha   # [g, n]
        any_in = inside.any(axis=0)                                          # [n]
        lo = s + np.argmax(inside, axis=0)
        hi = s + inside.shape[0] - 1 - np.argmax(inside[::-1], axis=0)
        first = np.where(any_in, np.minimum(first, lo), first)
        last = np.where(any_in, np.maximum(last, hi), last)
    empty = last < 0                     # nothing inside: confseq reports [0, 1]
    lower = np.where(empty, 0.0, grid[np.minimum(first, len(grid) - 1)])
    upper = np.where(empty, 1.0, grid[np.maximum(last, 0)])
    lower = np.maximum(0, lower - 1 / breaks)
    upper = np.minimum(1, upper + 1 / breaks)
    if running_intersection:
        lower, upper = np.maximum.accumulate(lower), np.minimum.accumulate(upper)
    return lower, upper


def mixture_rho2(alpha: float, t_opt: int) -> float:
    """The normal mixture's precision that makes the boundary tightest at t_opt observations
    (standardised data): rho^2 = (-2 log alpha + log(-2 log alpha + 1)) / t_opt."""
    a = -2 * math.log(alpha)
    return (a + math.log(a + 1)) / t_opt


def mixture_radius(t, sd, alpha: float, t_opt: int):
    """The half-width of the two-sided normal-mixture boundary at t observations of sd `sd`:
    sd * sqrt(2 (t rho^2 + 1) / (t^2 rho^2) * log(sqrt(t rho^2 + 1) / alpha))."""
    t = np.asarray(t, np.float64)
    r2 = mixture_rho2(alpha, t_opt)
    return np.asarray(sd) * np.sqrt(2 * (t * r2 + 1) / (t * t * r2) * np.log(np.sqrt(t * r2 + 1) / alpha))


def asymptotic_cs(x, alpha: float = 0.05, t_opt: int = 100, running_intersection: bool = True):
    """(lower, upper) at every t of the asymptotic CS for the mean of x (running mean +- the
    normal-mixture radius with the running sd; the sd of one observation is taken as 0)."""
    x = np.asarray(x, np.float64)
    t = np.arange(1, len(x) + 1)
    mean = np.cumsum(x) / t                                                # [n]
    var = np.maximum(np.cumsum(x * x) / t - mean * mean, 0) * t / np.maximum(t - 1, 1)   # [n]
    r = mixture_radius(t, np.sqrt(var), alpha, t_opt)
    r[0] = np.inf                        # one observation says nothing about the spread
    lower, upper = mean - r, mean + r
    if running_intersection:
        lower, upper = np.maximum.accumulate(lower), np.minimum.accumulate(upper)
    return lower, upper
