"""Rates, their sds, and the difference between two arms.

The reference engine's convention: a difference is printed as `+0.027 (3.9 sd)`, where sd is
the unpooled two-proportion sd sqrt(pA qA/nA + pB qB/nB) and z = delta / sd.
Beside that (i.i.d.) sd every estimate carries the document-clustered sd, a
document bootstrap, and the design effect (clustered variance / i.i.d. variance).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from atlas_ab import AtlasError
from atlas_ab.analysis.stats import cluster
from atlas_ab.analysis.stats.sums import DocSums
from atlas_ab.telemetry.acceptance import canonical, is_proportion

SE_KINDS = ("binomial", "cluster", "bootstrap")

#: Fewer clusters than this and no cluster-robust or bootstrap sd is reported: with few
#: clusters CRV1 and the cluster bootstrap are biased low (Cameron & Miller 2015, "A
#: Practitioner's Guide to Cluster-Robust Inference", sec. VI: rejection rates far above
#: nominal below ~10-20 clusters), and with one cluster the bootstrap sd is exactly 0 (a
#: report once printed MET at 6e15 sd from it). docs/analysis.md states the rule.
MIN_CLUSTERS = 10


def few_clusters(G: int, unit: str = "document") -> str | None:
    """Why a clustered sd is not computed (None when it is)."""
    if G >= MIN_CLUSTERS:
        return None
    return (f"only {G} {unit}{'s' if G != 1 else ''}: fewer than {MIN_CLUSTERS}, so no cluster or "
            f"bootstrap sd is reported")


def format_delta(delta: float, z: float) -> str:
    """The reference engine's form: `+0.027 (3.9 sd)` (sd count unsigned: the sign is on the delta)."""
    zs = "n/a" if not math.isfinite(z) else f"{abs(z):.1f}"
    return f"{delta:+.3f} ({zs} sd)"


def binomial_se(p: float, n: int) -> float:
    return math.sqrt(p * (1 - p) / n) if n > 0 else float("nan")


@dataclass(frozen=True)
class Rate:
    """One arm's value of one metric, with its uncertainties.

    se is the i.i.d. sd: binomial for unconditional rates (se_kind 'binomial'),
    the delta method for ratio metrics (p_cond, tokens/step; se_kind 'delta').
    """

    metric: str
    arm: str
    value: float
    n: int
    se: float
    se_kind: str = "binomial"
    cluster_se: float | None = None
    bootstrap: cluster.Bootstrap | None = None
    n_clusters: int | None = None
    cluster_note: str | None = None    # why cluster_se / bootstrap are None

    @property
    def deff(self) -> float | None:
        """Design effect: clustered variance over i.i.d. variance."""
        if self.cluster_se is None or not self.se:
            return None
        return (self.cluster_se / self.se) ** 2

    def summary(self) -> str:
        s = f"{self.arm} {self.metric} = {self.value:.4f} (n={self.n:,}, {self.se_kind} sd {self.se:.4f}"
        if self.cluster_se is not None:
            s += f", cluster sd {self.cluster_se:.4f} over {self.n_clusters} clusters, deff {self.deff:.2f}"
        elif self.cluster_note:
            s += f"; {self.cluster_note}"
        s += ")"
        if self.bootstrap is not None:
            s += f"\n  {self.bootstrap}"
        return s

    __str__ = summary

    def to_dict(self) -> dict:
        # report.json keeps its keys: an se is written as "sd" (keys.JSON_KEY)
        return {"metric": self.metric, "arm": self.arm, "value": self.value, "n": self.n,
                "sd": self.se, "sd_kind": self.se_kind, "cluster_sd": self.cluster_se,
                "n_clusters": self.n_clusters, "deff": self.deff, "cluster_note": self.cluster_note,
                "bootstrap": self.bootstrap.to_dict() if self.bootstrap else None}


def rate(value: float, n: int, metric: str = "p", arm: str = "") -> Rate:
    """A binomial rate from summary numbers (value, n)."""
    return Rate(metric=metric, arm=arm, value=value, n=n, se=binomial_se(value, n))


@dataclass(frozen=True)
class Difference:
    """treatment - control for one metric. str() is the reference engine's `+0.027 (3.9 sd)`."""

    metric: str
    control: Rate
    treatment: Rate
    delta: float
    se: float
    se_kind: str = "binomial"
    cluster_se: float | None = None
    bootstrap: cluster.Bootstrap | None = None
    cluster_note: str | None = None    # why cluster_se / bootstrap are None

    @property
    def z(self) -> float:
        return self.delta / self.se if self.se else float("nan")

    @property
    def relative(self) -> float:
        return self.delta / self.control.value if self.control.value else float("nan")

    @property
    def deff(self) -> float | None:
        if self.cluster_se is None or not self.se:
            return None
        return (self.cluster_se / self.se) ** 2

    def se_by(self, kind: str) -> float:
        """The sd a pre-registration names: binomial (the i.i.d. one), cluster, bootstrap."""
        if kind == "binomial":
            return self.se
        if kind == "cluster" and self.cluster_se is not None:
            return self.cluster_se
        if kind == "bootstrap" and self.bootstrap is not None:
            return self.bootstrap.se
        if kind in ("cluster", "bootstrap") and self.cluster_note:
            raise AtlasError(f"{self.metric}: no {kind} sd: {self.cluster_note}")
        raise AtlasError(f"{self.metric}: no {kind} sd was computed (one of {', '.join(SE_KINDS)})")

    def has(self, kind: str) -> bool:
        try:
            self.se_by(kind)
            return True
        except AtlasError:
            return False

    def z_by(self, kind: str) -> float:
        se = self.se_by(kind)
        return self.delta / se if se else float("nan")

    def __str__(self) -> str:
        return format_delta(self.delta, self.z)

    def summary(self) -> str:
        lines = [f"{self.metric}: {self.control.arm} {self.control.value:.4f} (n={self.control.n:,}) -> "
                 f"{self.treatment.arm} {self.treatment.value:.4f} (n={self.treatment.n:,})",
                 f"  delta {self} [{self.se_kind} sd {self.se:.4f}; relative {self.relative:+.1%}]"]
        if self.cluster_se is not None:
            lines.append(f"  cluster sd {self.cluster_se:.4f}: {format_delta(self.delta, self.z_by('cluster'))}"
                         f"; design effect {self.deff:.2f}")
        if self.bootstrap is not None:
            b = self.bootstrap
            lines.append(f"  bootstrap sd {b.se:.4f}: {format_delta(self.delta, self.z_by('bootstrap'))}"
                         f"; {b.level:.0%} CI [{b.ci_low:+.4f}, {b.ci_high:+.4f}] "
                         f"({b.n_clusters} clusters, B={b.n_boot}, seed={b.seed})")
        if self.cluster_note:
            lines.append(f"  {self.cluster_note}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        # report.json keeps its keys: an se is written as "sd" (keys.JSON_KEY)
        return {"metric": self.metric, "control": self.control.to_dict(),
                "treatment": self.treatment.to_dict(), "delta": self.delta, "relative": self.relative,
                "sd": self.se, "sd_kind": self.se_kind, "z": self.z, "text": str(self),
                "cluster_sd": self.cluster_se,
                "z_cluster": self.z_by("cluster") if self.cluster_se is not None else None,
                "deff": self.deff,
                "bootstrap": self.bootstrap.to_dict() if self.bootstrap else None,
                "z_bootstrap": self.z_by("bootstrap") if self.bootstrap else None,
                "cluster_note": self.cluster_note}


def difference(control: Rate, treatment: Rate) -> Difference:
    """Unpooled two-sample difference (the reference engine's sd): sqrt(sdA^2 + sdB^2)."""
    return Difference(metric=treatment.metric, control=control, treatment=treatment,
                      delta=treatment.value - control.value,
                      se=math.hypot(control.se, treatment.se), se_kind=control.se_kind)


def ratio_difference_se(ta: np.ndarray, sa: np.ndarray, tb: np.ndarray, sb: np.ndarray,
                        relative: bool = False) -> float:
    """Clustered sd of b - a, or of b / a - 1 (`relative`), for two ratio estimators a = sum(ta) / sum(sa)
    and b = sum(tb) / sum(sb) given per-cluster sums on one cluster index (zeros where an arm has
    no step in a cluster). Delta method: each cluster's linearised contribution
    u_g = (ta_g - a sa_g) / sum(sa), v_g = (tb_g - b sb_g) / sum(sb) to a and b; to b - a it is
    v_g - u_g, to b / a - 1 it is (v_g - (b / a) u_g) / a, and the variance is G / (G - 1) times
    the sum of their squares. The same cluster in both arms enters once, so their covariance is
    counted; for independent arms the relative variance is (b/a)^2 (Var a / a^2 + Var b / b^2)."""
    ta, sa, tb, sb = (np.asarray(x, dtype=np.float64) for x in (ta, sa, tb, sb))
    a, b = ta.sum() / sa.sum(), tb.sum() / sb.sum()
    u, v = (ta - a * sa) / sa.sum(), (tb - b * sb) / sb.sum()
    z = (v - (b / a) * u) / a if relative else v - u
    G = len(z)
    return float(math.sqrt(G / (G - 1) * float((z ** 2).sum())))


def relative_se_independent(a: float, se_a: float, b: float, se_b: float) -> float:
    """sd of b / a - 1 for independent estimates (delta method): |b/a| sqrt((sd_a/a)^2 + (sd_b/b)^2)."""
    return abs(b / a) * math.hypot(se_a / a, se_b / b)


def relative_cluster_se(control: DocSums, treatment: DocSums) -> float:
    """Clustered sd of treatment / control - 1 of one metric (ratio_difference_se over the
    clusters of either arm)."""
    _, ((ya, na), (yb, nb)) = cluster.align(control, treatment)
    return ratio_difference_se(ya, na, yb, nb, relative=True)


def estimate(s: DocSums, arm: str = "", n_boot: int = 2000, seed: int = 0) -> Rate:
    """One arm's metric with i.i.d., clustered and bootstrap uncertainty (the last two only
    with at least MIN_CLUSTERS clusters)."""
    note = few_clusters(len(s.doc_id), s.unit)
    return Rate(metric=canonical(s.metric), arm=arm, value=s.value, n=s.N, se=s.iid_se,
                se_kind="n/a" if np.isnan(s.y2).any() else "binomial" if is_proportion(s.metric) else "delta",
                cluster_se=None if note else cluster.cluster_se(s), n_clusters=len(s.doc_id),
                bootstrap=cluster.bootstrap(s, n_boot=n_boot, seed=seed) if n_boot and not note else None,
                cluster_note=note)


def compare_sums(sa: DocSums, sb: DocSums, control_arm: str, treatment_arm: str, n_boot: int = 2000,
                 seed: int = 0) -> Difference:
    """treatment - control from the two arms' per-cluster sums (the same cluster in both is one)."""
    for arm, s in ((control_arm, sa), (treatment_arm, sb)):
        if s.N == 0:
            raise AtlasError(f"{arm}: no steps in the denominator of {s.metric}")
    ra, rb = estimate(sa, control_arm, n_boot, seed), estimate(sb, treatment_arm, n_boot, seed)
    d = difference(ra, rb)
    note = few_clusters(len(np.union1d(sa.doc_id, sb.doc_id)), sa.unit)
    return Difference(metric=d.metric, control=ra, treatment=rb, delta=d.delta, se=d.se,
                      se_kind=d.se_kind, cluster_se=None if note else cluster.cluster_se_difference(sa, sb),
                      bootstrap=cluster.bootstrap_difference(sa, sb, n_boot=n_boot, seed=seed)
                      if n_boot and not note else None,
                      cluster_note=note)
