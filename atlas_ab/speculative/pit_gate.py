"""The lossless gate of a sampled run: every committed token must be a draw from the target.

A sampled run cannot be compared token for token with a target-only decode, so the gate checks
what lossless speculative sampling guarantees: each committed token y, at a context whose target
distribution is p, is a draw from p. Its randomized probability integral transform
u = F(y-) + V p(y) (F the CDF of p in vocabulary order, V uniform from its own counter stream) is
then Uniform(0, 1), and the u of a sequence's successive tokens are independent (Rosenblatt
1952), so a wave's u values form an i.i.d. uniform sample exactly when the sampler is lossless.

The test is Kolmogorov-Smirnov: the statistic D_n = sup |F_n(u) - u| computed here, its p-value
from the Kolmogorov distribution's asymptotic series with Stephens' finite-n correction
(lambda = (sqrt(n) + 0.12 + 0.11 / sqrt(n)) D_n; Stephens 1970, as Numerical Recipes' `probks`
uses it). From n = 100 on it is within 2e-4 of the exact p-value wherever that is below 0.05 (where
the gate decides) and within 0.012 anywhere (tests/speculative/test_pit_gate.py checks both against
scipy's `kstwo`). No scipy on the run side: the series is a few lines of Python.

A run fails when some wave's p-value is below ALPHA / waves (Bonferroni: a lossless run fails with
probability at most ALPHA = 1e-3); a wave with fewer than MIN_N u values is not checked (status
"not run", as the greedy gate with runner.gate_sequences=0).
"""
from __future__ import annotations

import math

import numpy as np

#: The run's false-failure probability for a lossless sampler (split over its waves).
ALPHA = 1e-3
#: Fewer u values than this in a wave and its KS test is not run.
MIN_N = 100


def ks_statistic(u: np.ndarray) -> float:
    """D_n = sup_x |F_n(x) - x| of a sample u in [0, 1]."""
    x = np.sort(np.asarray(u, dtype=np.float64))
    n = len(x)
    i = np.arange(1, n + 1)
    return float(max((i / n - x).max(), (x - (i - 1) / n).max()))


def kolmogorov_sf(lam: float) -> float:
    """P(K > lam) for the Kolmogorov distribution K (two series: each converges fast on its side)."""
    if lam <= 0:
        return 1.0
    if lam < 1.18:
        t = math.pi ** 2 / (8 * lam * lam)
        cdf = math.sqrt(2 * math.pi) / lam * sum(math.exp(-(2 * j - 1) ** 2 * t) for j in range(1, 8))
        return min(1.0, max(0.0, 1.0 - cdf))
    return min(1.0, max(0.0, 2 * sum((-1) ** (j - 1) * math.exp(-2 * j * j * lam * lam) for j in range(1, 101))))


def ks_pvalue(d: float, n: int) -> float:
    """The asymptotic p-value of D_n = d, with Stephens' correction."""
    s = math.sqrt(n)
    return kolmogorov_sf((s + 0.12 + 0.11 / s) * d)


def check(u: np.ndarray, sequences: int, alpha: float = ALPHA, min_n: int = MIN_N) -> dict:
    """One wave's gate (the shape of gate.GateResult.to_dict(), `by` "distribution")."""
    u = np.asarray(u, dtype=np.float64)
    n = len(u)
    out = {"checked_sequences": 0, "checked_tokens": 0, "divergences": 0, "near_ties": 0, "arbitrated": 0,
           "passed": None, "margins": [], "arbitrations": [], "first_divergence": None, "status": "not run",
           "by": "distribution",
           "ks": {"n": n, "statistic": None, "p_value": None, "alpha": alpha, "min_n": min_n,
                  "method": "Kolmogorov asymptotic series, Stephens' correction"}}
    if n < min_n:
        return out
    d = ks_statistic(u)
    p = ks_pvalue(d, n)
    passed = p >= alpha
    out["ks"].update(statistic=d, p_value=p)
    out.update(checked_sequences=sequences, checked_tokens=n, passed=passed, divergences=int(not passed),
               status="passed" if passed else "failed")
    if not passed:
        out["first_divergence"] = {"summary": f"the committed tokens are not draws from the target's distribution "
                                              f"(KS on {n} PITs: D = {d:.4f}, p = {p:.3g} < alpha {alpha:.3g})"}
    return out
