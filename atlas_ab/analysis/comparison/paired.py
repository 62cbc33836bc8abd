"""Paired outcomes: McNemar tests (stats/mcnemar.py) and the paired difference.

Two pairings exist: (a) within a run, the ORACLE_P2 teacher-forced probe (the
real draft 2 vs the one recomputed from the target's true hidden, on the same
step); (b) between two runs, steps matched on (doc_id, turn, position).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from atlas_ab import AtlasError
from atlas_ab.analysis.metrics import row_values
from atlas_ab.analysis.runs import Run
from atlas_ab.analysis.stats import DocSums, McNemarResult, few_clusters, fields_dict, mcnemar
from atlas_ab.analysis.stats.rates import cluster
from atlas_ab.telemetry.acceptance import canonical


@dataclass(frozen=True)
class OracleProbe:
    """ORACLE_P2: the real p2_cond vs the teacher-forced oracle's, paired per step."""

    arm: str
    test: McNemarResult
    real_p2_cond_all: float  # over every step with accept_len >= 1 and k >= 2
    n_cond_all: int

    @property
    def real_p2_cond(self) -> float:
        return self.test.first_rate

    @property
    def oracle_p2_cond(self) -> float:
        return self.test.second_rate

    def summary(self) -> str:
        return (f"{self.arm}: oracle p2_cond {self.oracle_p2_cond:.4f} vs real p2_cond {self.real_p2_cond:.4f} "
                f"on {self.test.n_pairs:,} probed steps ({self.oracle_p2_cond - self.real_p2_cond:+.4f}); "
                f"real p2_cond over all {self.n_cond_all:,} eligible steps {self.real_p2_cond_all:.4f}\n"
                + self.test.summary())

    __str__ = summary

    def to_dict(self) -> dict:
        return {"arm": self.arm, "real_p2_cond": self.real_p2_cond, "oracle_p2_cond": self.oracle_p2_cond,
                "delta": self.oracle_p2_cond - self.real_p2_cond, "real_p2_cond_all": self.real_p2_cond_all,
                "n_cond_all": self.n_cond_all, "mcnemar": self.test.to_dict()}


def oracle_probe(run: Run) -> OracleProbe:
    """Within-run McNemar on steps with accept_len >= 1, k >= 2 and oracle_hit2 not null."""
    df = run.steps
    if "oracle_hit2" not in df.columns or not df["oracle_hit2"].notna().any():
        raise AtlasError(f"{run.path}: arm {run.arm!r} ran without the ORACLE_P2 probe, so there is nothing to "
                         "pair within it; run it with the probe (`python -m atlas_ab +arm=oracle_p2`, or "
                         "arm.oracle_p2=true) or give two runs to pair them (`mcnemar RUN_A RUN_B`)")
    k, a = df["k"].to_numpy(), df["accept_len"].to_numpy()
    eligible = (a >= 1) & (k >= 2)
    hit = df["oracle_hit2"]
    probed = eligible & hit.notna().to_numpy()
    if not probed.any():
        raise AtlasError(f"{run.path}: no step accepted draft 1 with k >= 2, so the ORACLE_P2 probe never ran")
    real = a[probed] >= 2
    oracle = hit.to_numpy()[probed].astype(bool)
    test = mcnemar(real, oracle, label=f"oracle probe, {run.arm}", names=("real", "oracle"))
    return OracleProbe(arm=run.arm, test=test, real_p2_cond_all=float((a[eligible] >= 2).mean()),
                       n_cond_all=int(eligible.sum()))


@dataclass(frozen=True)
class MatchedPairs:
    """Two runs' steps matched position by position (`matched_pairs`)."""
    control: np.ndarray        # [pairs] the control's metric value at each matched row
    treatment: np.ndarray      # [pairs] the treatment's
    n_control: int             # the control's rows in the metric's denominator
    n_treatment: int
    sums: DocSums              # per-cluster sums of treatment - control


KEY = ["doc_id", "turn", "position"]


def _sampling(run: Run) -> tuple[bool, str | None]:
    """(whether the run sampled its text, the trajectory it replayed) from its manifest."""
    m = run.manifest or {}
    s = (((m.get("config") or {}).get("workload") or {}).get("sampling") or {})
    sampled = bool(s) and float(s.get("temperature") or 0.0) > 0.0
    traj = (m.get("replay") or {}).get("hash") if m.get("mode") == "replay" else None
    return sampled, traj


def require_same_text(first: Run, second: Run) -> None:
    """Steps pair by (doc_id, turn, position) only where both arms committed the same text there:
    greedy runs do (one target trajectory), and so do sampled runs replaying one stored trajectory
    (coupled replay); live sampled arms write different texts, so a position names two contexts."""
    (sa, ta), (sb, tb) = _sampling(first), _sampling(second)
    if not (sa or sb):
        return
    if ta is None or tb is None:
        live = first.path if ta is None else second.path
        raise AtlasError(f"{live}: a live sampled run commits its own text, so its steps do not pair by position "
                         "with another arm's; run both arms with runner.mode=replay (one coupled trajectory) or "
                         "compare them unpaired (compare, or a registration decided on the cluster sd)")
    if ta != tb:
        raise AtlasError(f"{first.path} vs {second.path}: the two sampled runs replayed different trajectories "
                         f"({ta[:19]} vs {tb[:19]}), so their steps do not pair by position")


def _outcomes(run: Run, depth: int) -> pd.DataFrame:
    if "position" not in run.steps.columns:
        raise AtlasError(f"{run.path}: no position column, so steps cannot be matched between runs")
    df = run.steps[KEY + ["k", "accept_len"]]
    if df["position"].isna().any():
        raise AtlasError(f"{run.path}: position is null on {int(df['position'].isna().sum())} steps")
    df = df[df["k"] >= depth]
    dup = df.duplicated(KEY)
    if dup.any():
        r = df[dup].iloc[0]
        raise AtlasError(f"{run.path}: duplicate (doc_id, turn, position) = "
                         f"({r.doc_id}, {r.turn}, {r.position}) among steps with k >= {depth}")
    return pd.DataFrame({**{c: df[c].to_numpy() for c in KEY}, "hit": df["accept_len"].to_numpy() >= depth})


def between_runs(first: Run, second: Run, depth: int = 2) -> McNemarResult:
    """McNemar between two runs at one depth, on steps matched by (doc_id, turn, position)
    where both runs observed the depth (k >= depth)."""
    for r in (first, second):
        if r.K < depth:
            raise AtlasError(f"{r.path}: depth {depth} never observed (K={r.K})")
    require_same_text(first, second)
    m = _outcomes(first, depth).merge(_outcomes(second, depth), on=KEY, suffixes=("_a", "_b"))
    if m.empty:
        raise AtlasError(f"{first.path} vs {second.path}: no step matched on (doc_id, turn, position) "
                         f"with k >= {depth} in both")
    return mcnemar(m["hit_a"].to_numpy(), m["hit_b"].to_numpy(),
                   label=f"depth {depth}, matched on (doc_id, turn, position)",
                   names=(first.arm, second.arm))


# ---- paired differences of rates -------------------------------------------------------

@dataclass(frozen=True)
class PairedDifference:
    """treatment - control of one metric on matched steps: pairs of steps of the two arms that
    start at the same (doc_id, turn, position), both in the metric's denominator.

    The estimand is the difference on the positions where both arms proposed (under greedy
    verification both follow one trajectory, so these are the same situations), which is
    why it can differ slightly from the unpaired difference of all steps. Its sd comes from
    the per-cluster sums of the paired differences d = y_treatment - y_control (CRV1 and a
    cluster bootstrap that resamples clusters with their pairs), so what the two arms share
    at a position cancels. `saved_vs_iid`: how much smaller that sd is than the unpaired
    i.i.d. sd (the reference engine's binomial sd, which assumes independent arms); `saved_vs_cluster`:
    than the unpaired cluster sd of the difference, which already pairs the arms by document
    (the same document is one cluster in both), so with every step matched the two nearly
    agree: pairing by position then adds little beyond pairing by document (tested).
    """

    metric: str
    control: str
    treatment: str
    n_pairs: int
    n_control: int           # the arms' own denominators (all their steps), for the matched share
    n_treatment: int
    control_value: float     # on the matched pairs
    treatment_value: float
    delta: float
    se: float | None         # CRV1 over clusters of the paired differences (None: too few clusters)
    bootstrap: object     # cluster.Bootstrap or None
    n_clusters: int
    cluster_note: str | None = None
    unpaired_iid_se: float | None = None       # the unpaired difference's i.i.d. sd (binomial/delta)
    unpaired_cluster_se: float | None = None   # and its cluster sd
    n_discordant: int = 0                      # pairs whose outcomes differ (0: the arms agree at every pair)
    cluster_unit: str = "document"

    @property
    def matched_share(self) -> float:
        return self.n_pairs / max(1, min(self.n_control, self.n_treatment))

    def _saved(self, ref: float | None) -> float | None:
        if self.se is None or not ref:
            return None
        return 1.0 - self.se / ref

    @property
    def saved_vs_iid(self) -> float | None:
        return self._saved(self.unpaired_iid_se)

    @property
    def saved_vs_cluster(self) -> float | None:
        return self._saved(self.unpaired_cluster_se)

    @property
    def z(self) -> float:
        return self.delta / self.se if self.se else float("nan")

    def summary(self) -> str:
        s = (f"paired {self.metric}: {self.control} {self.control_value:.4f} -> {self.treatment} "
             f"{self.treatment_value:.4f} on {self.n_pairs:,} matched steps "
             f"({self.matched_share:.0%} of the smaller arm's), delta {self.delta:+.4f}")
        if self.se is None:
            return s + f"; {self.cluster_note}"
        s += f" ({abs(self.z):.1f} paired sd; sd {self.se:.4f} over {self.n_clusters} clusters"
        if self.saved_vs_iid is not None:
            s += f"; {self.saved_vs_iid:.0%} below the unpaired i.i.d. sd {self.unpaired_iid_se:.4f}"
        if self.saved_vs_cluster is not None:
            s += f", {self.saved_vs_cluster:+.0%} vs the unpaired cluster sd {self.unpaired_cluster_se:.4f}"
        return s + ")"

    __str__ = summary

    def to_dict(self) -> dict:
        d = fields_dict(self, skip=("bootstrap",))
        d.update(matched_share=self.matched_share, saved_vs_iid=self.saved_vs_iid,
                 saved_vs_cluster=self.saved_vs_cluster, z=self.z,
                 bootstrap=self.bootstrap.to_dict() if self.bootstrap else None)
        return d


def matched_pairs(control: Run, treatment: Run, metric: str, clusters: tuple | None = None) -> MatchedPairs:
    """The two runs' rows in the denominator of `metric`, matched on (doc_id, turn, position) (a
    position twice in one run is refused: it would pair many-to-many), and the per-cluster sums of
    their differences. `clusters`: (doc_id -> cluster map or None, unit), default the control's own."""
    require_same_text(control, treatment)
    frames = []
    for r in (control, treatment):
        if "position" not in r.steps.columns:
            raise AtlasError(f"{r.path}: no position column, so steps cannot be paired between runs")
        keep, y = row_values(r.steps, metric)
        df = r.steps[KEY].assign(y=y)
        dup = df[keep].duplicated(KEY)
        if dup.any():           # a position twice would pair many-to-many: no such estimand
            d = df[keep][dup].iloc[0]
            raise AtlasError(f"{r.path}: duplicate (doc_id, turn, position) = ({d.doc_id}, {d.turn}, {d.position}) "
                             f"in the denominator of {metric}, so its steps cannot be paired")
        frames.append((df[keep], int(keep.sum())))
    m = frames[0][0].merge(frames[1][0], on=KEY, suffixes=("_a", "_b"))
    if m.empty:
        raise AtlasError(f"{control.path} vs {treatment.path}: no step pairs on (doc_id, turn, position) "
                         f"in the denominator of {metric}")
    ya, yb = m["y_a"].to_numpy(np.float64), m["y_b"].to_numpy(np.float64)                  # [pairs]
    d = yb - ya
    cmap, unit = control.clusters if clusters is None else clusters
    doc = m["doc_id"].to_numpy(np.int64)
    ids, inv = np.unique(doc if cmap is None else np.asarray(cmap, np.int64)[doc], return_inverse=True)
    sums = DocSums(metric=metric, doc_id=ids, y=np.bincount(inv, weights=d), n=np.bincount(inv).astype(np.int64),
                   y2=np.bincount(inv, weights=d * d), unit=unit)
    return MatchedPairs(ya, yb, frames[0][1], frames[1][1], sums)


def paired_difference(control: Run, treatment: Run, metric: str, n_boot: int = 2000, seed: int = 0,
                      unpaired=None, clusters: tuple | None = None) -> PairedDifference:
    """The paired difference of `metric` between two runs (see PairedDifference). `unpaired`: the
    unpaired stats.Difference of the same metric, for the sd pairing saved; `clusters`: (doc_id ->
    cluster map or None, unit), default the control run's own (runs.Run.clusters)."""
    mp = matched_pairs(control, treatment, metric, clusters)
    ya, yb, sums = mp.control, mp.treatment, mp.sums
    d = yb - ya
    note = few_clusters(len(sums.doc_id), sums.unit)
    return PairedDifference(
        metric=canonical(metric), control=control.arm, treatment=treatment.arm, n_pairs=len(d),
        n_control=mp.n_control, n_treatment=mp.n_treatment, control_value=float(ya.mean()),
        treatment_value=float(yb.mean()), delta=float(d.mean()),
        se=None if note else cluster.cluster_se(sums),
        bootstrap=cluster.bootstrap(sums, n_boot=n_boot, seed=seed) if n_boot and not note else None,
        n_clusters=len(sums.doc_id), cluster_note=note,
        unpaired_iid_se=None if unpaired is None else unpaired.se,
        unpaired_cluster_se=None if unpaired is None else unpaired.cluster_se,
        n_discordant=int(np.count_nonzero(d)), cluster_unit=sums.unit)


def mcnemar_by_depth(control: Run, treatment: Run) -> list[McNemarResult]:
    """McNemar at every depth both runs observed, on steps matched by (doc_id, turn, position)."""
    return [between_runs(control, treatment, depth) for depth in range(1, min(control.K, treatment.K) + 1)]
