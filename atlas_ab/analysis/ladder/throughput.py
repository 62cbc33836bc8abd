"""Tokens per second of an arm timed in replicate runs, and one arm over another: the ladder's machinery
(analysis/stats/replicates.py) for every other tokens-per-second comparison across jobs (DRAFT_CONF's arms,
`+study=claims_conf`; the tree study's cost side, tree_top2 over tree_linear2).

Each run of an arm is one replicate: its committed tokens per second of step time, warm-up apart
(economics.throughput), with its cluster-robust se as the within-replicate spread. An arm's runs are
pooled by random effects (replicates.random_effects: the between-run variance inside the se, a t of
R - 1 df), and treatment over control is replicates.log_ratio of the two pooled values, the same
definition the ladder's gains use. An arm timed in one run has only its within-run interval, and the
result is marked replicates.SINGLE: a job's documents share its graphs, its compiled bookkeeping and the
host's state, so their spread is not the spread of the next job.
"""
from __future__ import annotations

from dataclasses import dataclass

from atlas_ab import AtlasError
from atlas_ab.analysis.economics import one_loop, throughput
from atlas_ab.analysis.runs import Run
from atlas_ab.analysis.stats.replicates import (
    SINGLE,
    Z95,
    LogRatio,
    RandomEffects,
    log_ratio,
    random_effects,
    relative_part,
)


@dataclass(frozen=True)
class ArmThroughput:
    """One arm's tokens/s over its replicate runs."""
    arm: str
    runs: tuple[str, ...]
    pooled: RandomEffects         # y: each run's tokens/s; v: its clustered se^2

    @property
    def value(self) -> float:
        return self.pooled.mean

    def to_dict(self) -> dict:
        p = self.pooled
        return {"arm": self.arm, "runs": list(self.runs), "tokens_per_second": p.mean, "se": p.se, "df": p.df,
                "per_run": list(p.y), "tau2": p.tau2, "i2": p.i2, "q_p": p.q_p, "disagree": p.disagree()}


@dataclass(frozen=True)
class ThroughputRatio:
    """Treatment over control tokens/s (statsmodels style: the numbers as fields, `summary()` the words)."""
    control: ArmThroughput
    treatment: ArmThroughput
    ratio: LogRatio

    @property
    def single_replicate(self) -> bool:
        return min(self.control.pooled.n, self.treatment.pooled.n) <= 1

    @property
    def faster(self) -> bool:
        """The treatment's tokens/s is above the control's outside the interval."""
        return self.ratio.lo > 1

    @property
    def slower(self) -> bool:
        return self.ratio.hi < 1

    def verdict(self) -> str:
        w = f"{self.treatment.arm} over {self.control.arm}: {self.ratio.summary()}"
        said = "faster" if self.faster else "slower" if self.slower else "tied (the interval holds 0)"
        return (f"{SINGLE}: " if self.single_replicate else "") + f"{w}, {said}"

    def summary(self) -> str:
        lines = ["| arm | runs | tokens/s | se | I^2 | Q p |", "|---|---|---|---|---|---|"]
        for a in (self.control, self.treatment):
            p = a.pooled
            het = "- | -" if p.single else f"{p.i2:.0%} | {p.q_p:.3g}" + (" (runs disagree)" if p.disagree() else "")
            lines.append(f"| {a.arm} | {p.n} | {p.mean:,.1f} | {p.se:,.1f} | {het} |")
        return "\n".join(lines + ["", self.verdict()])

    def to_dict(self) -> dict:
        r = self.ratio
        return {"control": self.control.to_dict(), "treatment": self.treatment.to_dict(), "ratio": r.value,
                "se_log": r.se_log, "df": r.df, "lo": r.lo, "hi": r.hi, "single_replicate": self.single_replicate,
                "verdict": self.verdict()}


def arm_throughput(runs: list[Run], clusters: tuple | None = None, z: float = Z95) -> ArmThroughput:
    """One arm's runs pooled by random effects; refuses runs of several arms and a run without a se."""
    if not runs:
        raise AtlasError("throughput: an arm with no run")
    arms = sorted({r.arm for r in runs})
    if len(arms) > 1:
        raise AtlasError(f"throughput: replicates of one arm expected, got runs of {', '.join(map(str, arms))}")
    ts = [throughput(r, clusters) for r in runs]
    for r, t in zip(runs, ts):
        if t.se is None:
            raise AtlasError(f"{r.path}: its tokens/s has no within-run se ({t.n_clusters} {t.cluster_unit}s, "
                             "fewer than 10), so it cannot be pooled with the arm's other runs")
    return ArmThroughput(arms[0], tuple(str(r.path) for r in runs),
                         random_effects([t.value for t in ts], [t.se ** 2 for t in ts], z))


def throughput_ratio(control: list[Run], treatment: list[Run], clusters: tuple | None = None,
                     z: float = Z95) -> ThroughputRatio:
    """Treatment over control tokens/s, each arm pooled over its replicate runs (module docstring)."""
    one_loop([*control, *treatment])
    a, b = arm_throughput(control, clusters, z), arm_throughput(treatment, clusters, z)
    return ThroughputRatio(a, b, log_ratio(b.value / a.value, [relative_part(a.pooled), relative_part(b.pooled)], z))
