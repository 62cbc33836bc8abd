"""The data a comparison is judged on: treatment - control of the registered metric on the
registered turns, both estimands, clustered by the declared unit, and the counts the registered
minimums are checked against."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from atlas_ab import AtlasError
from atlas_ab.analysis.comparison import PairedDifference, paired_difference
from atlas_ab.analysis.economics import ThroughputDifference, throughput, throughput_difference
from atlas_ab.analysis.ladder.throughput import ThroughputRatio, throughput_ratio
from atlas_ab.analysis.metrics import Cells, compare as compare_cells, doc_sums
from atlas_ab.analysis.runs import AnyRun
from atlas_ab.analysis.stats import Difference, relative_cluster_se, relative_se_independent
from atlas_ab.analysis.stats.replicates import quantile
from atlas_ab.config.prereg import Decides, Estimand, Prereg
from atlas_ab.telemetry.acceptance import THROUGHPUT


@dataclass(frozen=True)
class Measured:
    """treatment - control of one metric on the registered turns, both estimands, and the counts
    the registered minimums are checked against."""
    metric: str
    whole: Difference | ThroughputDifference | ThroughputRatio
    paired: PairedDifference | None
    paired_note: str | None          # why there is no matched-positions estimate
    n_control: int                   # steps in the metric's denominator
    n_treatment: int
    n_clusters: int                  # clusters of the declared unit holding a step of either arm
    cluster_unit: str
    whole_identical: bool            # every (document, turn, k, accept_len) count equal in both arms
    relative_cluster_se: float | None = None

    @property
    def control_value(self) -> float:
        return self.whole.control.value

    def counts(self) -> dict:
        return {"min_n_per_arm": min(self.n_control, self.n_treatment),
                "min_pairs": None if self.paired is None else self.paired.n_pairs,
                "min_clusters": self.n_clusters}

    def identical(self, estimand: Estimand) -> bool:
        if estimand == Estimand.whole_arm:
            return self.whole_identical
        p = self.paired
        return p is not None and p.n_discordant == 0 and p.n_pairs == p.n_control == p.n_treatment

    def details(self) -> dict:
        key = {ThroughputDifference: "throughput", ThroughputRatio: "throughput_replicated"}.get(
            type(self.whole), "unpaired")
        d = {key: self.whole.to_dict(), "control_value": self.control_value,
             "counts": {"steps": [self.n_control, self.n_treatment],
                        "pairs": None if self.paired is None else self.paired.n_pairs,
                        "clusters": self.n_clusters, "cluster_unit": self.cluster_unit}}
        if self.paired is not None:
            d["paired"] = self.paired.to_dict()
        return d


def measure(pr: Prereg, control: AnyRun, treatment: AnyRun, n_boot: int, seed: int) -> Measured:
    """Both estimands of treatment - control of the registered metric, clustered by the declared unit."""
    spec = pr.spec
    a, b = control.of_turns(spec.turns.value), treatment.of_turns(spec.turns.value)
    clusters = a.declared_clusters(spec.cluster.value)
    metric = spec.primary_metric
    if metric == THROUGHPUT:
        d = throughput_difference(a, b, clusters)
        return Measured(metric, d, None, f"{THROUGHPUT} has no matched-positions estimand (a step's time is not "
                        "paired between arms)", d.control.n_steps, d.treatment.n_steps, d.n_clusters,
                        d.control.cluster_unit, False)
    ca, cb = a.counts(clusters), b.counts(clusters)
    d = compare_cells(ca, cb, metric, n_boot=n_boot, seed=seed)
    sa, sb = doc_sums(ca, metric), doc_sums(cb, metric)
    paired, note = None, None
    if not (a.has_steps and b.has_steps):
        note = "runs without a step table have no positions to match"
    elif "position" in a.steps.columns and "position" in b.steps.columns:
        try:
            paired = paired_difference(a, b, metric, n_boot=n_boot, seed=seed, unpaired=d, clusters=clusters)
        except AtlasError as e:
            note = str(e)
    else:
        note = "the runs have no position column, so no step of one arm can be matched to the other's"
    same = isinstance(ca, Cells) and ca.table.reset_index(drop=True).equals(cb.table.reset_index(drop=True))
    rel = relative_cluster_se(sa, sb) if spec.KIND == "difference" and spec.relative and d.cluster_se is not None \
        else None
    return Measured(metric, d, paired, note, sa.N, sb.N, len(np.union1d(sa.doc_id, sb.doc_id)), clusters[1],
                    same, rel)


def measure_replicated(pr: Prereg, control: list[AnyRun], treatment: list[AnyRun]) -> Measured:
    """tokens_per_second over each arm's replicate runs (a registration's `replicates`): the ladder's
    definition (analysis/ladder/throughput.throughput_ratio), the between-run variance inside the se."""
    spec = pr.spec
    cs, ts = [r.of_turns(spec.turns.value) for r in control], [r.of_turns(spec.turns.value) for r in treatment]
    clusters = cs[0].declared_clusters(spec.cluster.value)
    ratio = throughput_ratio(cs, ts, clusters)
    steps = [sum(throughput(r, clusters).n_steps for r in rs) for rs in (cs, ts)]
    n = throughput(cs[0], clusters)
    return Measured(THROUGHPUT, ratio, None, f"{THROUGHPUT} has no matched-positions estimand (a step's time is not "
                    "paired between arms)", steps[0], steps[1], n.n_clusters, n.cluster_unit, False)


def effect_of(spec, m: Measured, estimand: Estimand, decides: Decides) -> tuple[float, float | None, str | None]:
    """(delta, its sd or None, why not) of the estimand with the sd `decides` (relative when registered)."""
    relative = spec.KIND == "difference" and spec.relative
    if estimand == Estimand.matched_positions:
        p = m.paired
        if p is None:
            return float("nan"), None, m.paired_note
        return p.delta, p.se, p.cluster_note
    d = m.whole
    if isinstance(d, ThroughputRatio):
        # the t of the replicates' df at the level threshold_sd registers, as an sd the normal rule reads:
        # z / se_eff >= threshold_sd exactly when the t statistic passes the t's critical value there
        r = d.ratio
        return r.value - 1, r.se * quantile(spec.threshold_sd, r.df) / spec.threshold_sd, None
    if isinstance(d, ThroughputDifference):
        why = None if d.se is not None else f"too few {d.control.cluster_unit}s ({d.n_clusters})"
        return (d.relative, d.relative_se, why) if relative else (d.delta, d.se, why)
    try:
        se = d.se_by(decides.value)
    except AtlasError as e:
        return d.delta, None, str(e)
    if not relative:
        return d.delta, se, None
    a, b = d.control, d.treatment
    if decides == Decides.binomial:
        return d.relative, relative_se_independent(a.value, a.se, b.value, b.se), None
    return d.relative, m.relative_cluster_se, None
