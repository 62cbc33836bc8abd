"""Two arms compared: every headline figure and their differences (B - A), as a named result."""
from __future__ import annotations

from dataclasses import dataclass, field

from atlas_ab import AtlasError
from atlas_ab.analysis.metrics import (
    EXPECTED_HEADLINE,
    HEADLINE,
    ArmMetrics,
    Cells,
    arm_metrics,
    compare as compare_cells,
    realized,
    require_depth,
)
from atlas_ab.analysis.runs import Run
from atlas_ab.analysis.stats import Difference
from atlas_ab.telemetry.acceptance import canonical, metric_depth


@dataclass(frozen=True)
class Comparison:
    """Two arms: their per-arm metrics, the primary difference and the headline ones."""

    control: ArmMetrics
    treatment: ArmMetrics
    primary: Difference
    headline: dict[str, Difference]
    mismatches: tuple[str, ...] = field(default=())
    # sampled runs that pair on positions (coupled replay): {metric: paired sd} of the exact-probability
    # metrics and the realized ones they estimate
    paired_se: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        lines = [f"{self.control.arm} (K={self.control.K}) vs {self.treatment.arm} (K={self.treatment.K})"]
        lines += [f"NOTE: {m} (--allow-mismatch)" for m in self.mismatches]
        w = max(len(m) for m in self.headline) if self.headline else 8
        lines.append("")
        for m, d in self.headline.items():
            clustered = (f"cluster {d.cluster_se:.4f} deff {d.deff:.2f}" if d.cluster_se is not None
                         else "no cluster sd")
            lines.append(f"{m:<{w}}  {d.control.value:.4f} (n={d.control.n:,}) -> {d.treatment.value:.4f} "
                         f"(n={d.treatment.n:,})  {d}  {clustered}")
        for m, r in self.variance_ratios.items():
            lines.append(f"{m} vs {r['realized']}: variance of the difference x{r['ratio']:.2f} ({r['sd_kind']} sd): "
                         f"{r['realized']} needs {1 / r['ratio'] if r['ratio'] else float('inf'):.1f}x the steps "
                         "for the same sd")
        lines += ["", self.primary.summary()]
        return "\n".join(lines)

    @property
    def variance_ratios(self) -> dict[str, dict]:
        """For each exact-probability metric compared (sampled runs), the variance of its difference
        relative to that of the realized metric it estimates, measured on these runs: the cluster sd's
        when both have one, else the i.i.d. sd's."""
        out = {}
        for m, d in self.headline.items():
            if m not in EXPECTED_HEADLINE or realized(m) not in self.headline:
                continue
            r = self.headline[realized(m)]
            kind = "cluster" if d.cluster_se is not None and r.cluster_se is not None else "i.i.d."
            num, den = (d.cluster_se, r.cluster_se) if kind == "cluster" else (d.se, r.se)
            out[m] = {"realized": realized(m), "sd_kind": kind, "sd": num, "realized_sd": den,
                      "ratio": (num / den) ** 2 if den else float("nan")}
            if m in self.paired_se and realized(m) in self.paired_se:   # what a paired verdict decides on
                num, den = self.paired_se[m], self.paired_se[realized(m)]
                out[f"{m} (paired)"] = {"realized": realized(m), "sd_kind": "paired", "sd": num, "realized_sd": den,
                                        "ratio": (num / den) ** 2 if den else float("nan")}
        return out

    __str__ = summary

    def to_dict(self) -> dict:
        return {"control": self.control.arm, "treatment": self.treatment.arm,
                "metric": self.primary.metric, "difference": self.primary.to_dict(),
                "headline": {m: d.to_dict() for m, d in self.headline.items()},
                "arms": {a.arm: a.to_dict() for a in (self.control, self.treatment)},
                "mismatches": list(self.mismatches), "variance_ratios": self.variance_ratios}


def headline_metrics(*cells: Cells) -> list[str]:
    """The headline metrics every given arm observed (p2 needs K >= 2 in all of them)."""
    K = min(c.K for c in cells)
    names = HEADLINE + (EXPECTED_HEADLINE if all(c.expected is not None for c in cells) else ())
    return [m for m in names if metric_depth(m) <= K]


def compare_runs(control: Run, treatment: Run, metric: str = "p2_uncond", n_boot: int = 2000, seed: int = 0,
                 mismatches: tuple[str, ...] = ()) -> Comparison:
    metric = canonical(metric)
    ca, cb = control.cells(), treatment.cells()
    require_depth(ca, metric, str(control.path))
    require_depth(cb, metric, str(treatment.path))
    names = headline_metrics(ca, cb)
    if metric not in names:
        names.append(metric)
    diffs = {m: compare_cells(ca, cb, m, n_boot=n_boot, seed=seed) for m in names}
    return Comparison(control=arm_metrics(ca), treatment=arm_metrics(cb), primary=diffs[metric],
                      headline=diffs, mismatches=tuple(mismatches), paired_se=_paired_ses(control, treatment, names))


def _paired_ses(control: Run, treatment: Run, names: list[str]) -> dict[str, float]:
    """Paired sds (clustered) of the exact-probability metrics and their realized twins, where the
    runs pair on (doc_id, turn, position) with enough clusters; {} otherwise (live sampled arms,
    greedy runs)."""
    from atlas_ab.analysis.comparison.paired import paired_difference

    wanted = [m for m in names if m in EXPECTED_HEADLINE] + [realized(m) for m in names if m in EXPECTED_HEADLINE]
    out = {}
    for m in dict.fromkeys(wanted):
        try:
            se = paired_difference(control, treatment, m, n_boot=0).se
        except AtlasError:
            return {}
        if se is None:
            return {}
        out[m] = se
    return out
