"""McNemar's test for paired binary outcomes.

Orientation: b = second-only successes (oracle / run B hit, real / run A missed),
c = first-only; z = (b - c)/sqrt(b + c) is positive when the second is better,
which is how the reference engine's notes quote the oracle probe (McNemar z = +18.4). The exact
test's statistic is min(b, c), a count, so only its p-value is reported.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar

from atlas_ab import AtlasError
from atlas_ab.analysis.stats.keys import fields_dict


@dataclass(frozen=True)
class McNemarResult:
    """Paired 2x2 test. Rates are over the paired steps only."""

    label: str
    first: str
    second: str
    n_pairs: int
    both: int          # a: both succeeded
    b: int             # second only
    c: int             # first only
    neither: int       # d
    p_exact: float     # two-sided exact binomial on the discordant pairs
    z: float           # (b - c)/sqrt(b + c), signed
    chi2: float        # (b - c)^2/(b + c)
    p_chi2: float
    chi2_cc: float     # (|b - c| - 1)^2/(b + c), continuity-corrected
    p_chi2_cc: float

    @property
    def first_rate(self) -> float:
        return (self.both + self.c) / self.n_pairs

    @property
    def second_rate(self) -> float:
        return (self.both + self.b) / self.n_pairs

    def summary(self) -> str:
        return "\n".join([
            f"McNemar {self.label}: {self.n_pairs:,} pairs",
            f"  {self.first} {self.first_rate:.4f} -> {self.second} {self.second_rate:.4f} "
            f"({self.second_rate - self.first_rate:+.4f})",
            f"  discordant: b={self.b:,} ({self.second} only), c={self.c:,} ({self.first} only); "
            f"concordant both={self.both:,} neither={self.neither:,}",
            f"  exact p={self.p_exact:.3g}; z={self.z:+.1f}; "
            f"chi2={self.chi2:.2f} (p={self.p_chi2:.3g}); chi2 corrected={self.chi2_cc:.2f} (p={self.p_chi2_cc:.3g})",
        ])

    __str__ = summary

    def to_dict(self) -> dict:
        d = fields_dict(self)
        d.update(first_rate=self.first_rate, second_rate=self.second_rate,
                 delta=self.second_rate - self.first_rate)
        return d


def mcnemar(first: np.ndarray, second: np.ndarray, label: str = "", names=("first", "second")) -> McNemarResult:
    """McNemar on two aligned boolean arrays."""
    first = np.asarray(first, bool)
    second = np.asarray(second, bool)
    if first.size == 0:
        raise AtlasError(f"{label or 'McNemar'}: no paired steps")
    a = int((first & second).sum())
    b = int((~first & second).sum())
    c = int((first & ~second).sum())
    d = int((~first & ~second).sum())
    table = [[a, c], [b, d]]
    exact = sm_mcnemar(table, exact=True)
    disc = b + c
    if disc:
        plain = sm_mcnemar(table, exact=False, correction=False)
        cc = sm_mcnemar(table, exact=False, correction=True)
        z, chi2, p2, chi2cc, p2cc = ((b - c) / math.sqrt(disc), float(plain.statistic), float(plain.pvalue),
                                     float(cc.statistic), float(cc.pvalue))
    else:  # no discordant pair: no evidence either way
        z, chi2, p2, chi2cc, p2cc = 0.0, 0.0, 1.0, 0.0, 1.0
    return McNemarResult(label=label, first=names[0], second=names[1], n_pairs=int(first.size),
                         both=a, b=b, c=c, neither=d, p_exact=float(exact.pvalue), z=z,
                         chi2=chi2, p_chi2=p2, chi2_cc=chi2cc, p_chi2_cc=p2cc)
