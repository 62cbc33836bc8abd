"""Power and sample size for a two-arm difference of rates.

Unpooled normal approximation, the same sd the reference engine's z uses:
    sd(n) = sqrt( (p q + p' q') / n * deff ),   p' = p + delta,  q = 1 - p
    deff  = 1 + (m - 1) * ICC                   (m steps per document)
A run "shows" z = delta / sd(n). It clears a threshold of z* sd with probability
    power = Phi(z - z*)          (the far tail, a wrong-signed crossing, is ignored)
so the steps per arm needed for a given power are
    n = (z* + Phi^-1(power))^2 * (p q + p' q') / delta^2 * deff.
The threshold is given in sd directly, or as a two-sided alpha: z* = Phi^-1(1 - alpha/2).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

# scipy.stats' norm is these two functions; scipy.special alone imports in a fraction of the time
from scipy.special import ndtr, ndtri

from atlas_ab import AtlasError
from atlas_ab.analysis.stats.keys import fields_dict


def threshold_z(threshold_sd: float | None = None, alpha: float | None = None) -> float:
    if (threshold_sd is None) == (alpha is None):
        raise AtlasError("give exactly one of a threshold in sd or an alpha")
    if alpha is not None:
        if not 0 < alpha < 1:
            raise AtlasError(f"alpha must be in (0, 1), got {alpha}")
        return float(-ndtri(alpha / 2))
    if threshold_sd <= 0:
        raise AtlasError(f"threshold in sd must be > 0, got {threshold_sd}")
    return float(threshold_sd)


def design_effect(icc: float = 0.0, m: float = 1.0) -> float:
    if not 0 <= icc <= 1 or m < 1:
        raise AtlasError(f"need 0 <= ICC <= 1 and m >= 1, got ICC={icc}, m={m}")
    return 1.0 + (m - 1.0) * icc


def power_at(delta: float, se: float, z_threshold: float) -> float:
    """Probability that an effect of size delta, measured with this sd, shows >= z_threshold sd."""
    return float(ndtr(abs(delta) / se - z_threshold))


@dataclass(frozen=True)
class PowerResult:
    p: float
    delta: float
    z_threshold: float
    power: float
    deff: float
    n_iid: int          # steps per arm with independent steps
    n_per_arm: int      # inflated by the design effect
    n: int | None = None            # the reverse question, when asked
    se_at_n: float | None = None
    z_at_n: float | None = None
    power_at_n: float | None = None
    alpha: float | None = None
    icc: float = 0.0
    m: float = 1.0

    def summary(self) -> str:
        thr = (f"{self.z_threshold:.2f} sd (two-sided alpha {self.alpha:g})" if self.alpha is not None
               else f"{self.z_threshold:g} sd")
        lines = [f"base rate {self.p:.4f}, effect {self.delta:+.4f}, threshold {thr}, power {self.power:.2f}",
                 f"design effect {self.deff:.3f} (ICC {self.icc:g}, m {self.m:g} steps/document)",
                 f"steps per arm needed: {self.n_per_arm:,} ({self.n_iid:,} if steps were independent)"]
        if self.n is not None:
            lines.append(f"at n={self.n:,} per arm: sd {self.se_at_n:.5f}, the effect shows "
                         f"{self.z_at_n:.2f} sd, power {self.power_at_n:.3f}")
        return "\n".join(lines)

    __str__ = summary

    def to_dict(self) -> dict:
        return fields_dict(self)


def unit_variance(p: float, delta: float) -> float:
    p2 = p + delta
    if not (0 <= p <= 1 and 0 <= p2 <= 1):
        raise AtlasError(f"rates must stay in [0, 1]: p={p}, p+delta={p2}")
    return p * (1 - p) + p2 * (1 - p2)


def se_at(p: float, delta: float, n: int, deff: float = 1.0) -> float:
    """The unpooled sd of the difference at n steps per arm."""
    if n <= 0:
        raise AtlasError(f"n must be > 0, got {n}")
    return math.sqrt(unit_variance(p, delta) / n * deff)


def solve(p: float, delta: float, threshold_sd: float | None = None, alpha: float | None = None,
          power: float = 0.8, icc: float = 0.0, m: float = 1.0, n: int | None = None) -> PowerResult:
    """Steps per arm for `power` to show `delta` at the threshold; and, given n, what n shows."""
    if delta == 0:
        raise AtlasError("the effect delta must be non-zero")
    if not 0 < power < 1:
        raise AtlasError(f"power must be in (0, 1), got {power}")
    zt = threshold_z(threshold_sd, alpha)
    deff = design_effect(icc, m)
    base = (zt + ndtri(power)) ** 2 * unit_variance(p, delta) / delta ** 2
    extra = {}
    if n is not None:
        s = se_at(p, delta, n, deff)
        extra = dict(n=n, se_at_n=s, z_at_n=abs(delta) / s, power_at_n=power_at(delta, s, zt))
    return PowerResult(p=p, delta=delta, z_threshold=zt, power=power, deff=deff,
                       n_iid=math.ceil(base), n_per_arm=math.ceil(base * deff), alpha=alpha,
                       icc=icc, m=m, **extra)
