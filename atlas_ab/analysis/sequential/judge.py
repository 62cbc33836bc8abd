"""Sequential judging of a `difference` or `noninferiority` registration: an always-valid confidence
sequence for treatment - control over clusters taken in the workload's order, evaluated at every look.

Terms:
  cluster difference  d_g = the treatment's value of the metric on cluster g minus the control's
                      (matched positions: the mean of the per-pair differences in g; whole arm:
                      each arm's ratio over its own steps in g). It is bounded: in [-1, 1] for a
                      rate, [-K, K] for tokens per step. Clusters are the registered cluster unit
                      (source file or document; an engine run's documents or requests), the
                      independent draw; a cluster without a step of one arm in the metric's
                      denominator has no difference and is skipped (counted in `skipped`).
  estimand            the CS bounds the cluster mean E[d_g] (every cluster weighs the same); the
                      pooled difference (sums over all steps, what the fixed-n report decides on)
                      is printed beside it at every look as `pooled`. The two differ when the
                      effect varies with cluster size; the cluster mean decides.
  look                the sequence read after the first n clusters (n: the look's cumulative count)
  decision            MET when the CS lies at or above min_effect in the registered direction;
                      NOT MET when it lies below min_effect (the effect is shown smaller than what
                      was worth registering); else UNDECIDED, and UNDERPOWERED once the budget ends.
                      A non-inferiority is the same rule at min_effect = -margin: MET when the CS
                      lies at or above -margin in the better direction (no worse than the margin),
                      NOT MET when it lies below (worse than the margin). The CS is two-sided at
                      alpha, so each one-sided statement holds at alpha (conservatively).

The CS is confidence_sequence.hedged_cs on (d + R) / 2R, valid at all looks at once (Ville's
inequality), so looking after every wave and stopping at the first decision keeps the level.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from atlas_ab import AtlasError
from atlas_ab.analysis.metrics import doc_sums
from atlas_ab.analysis.stats import DocSums, asymptotic_cs, hedged_cs
from atlas_ab.config.prereg import SEQUENTIAL_KINDS, Estimand, Prereg, load_prereg
from atlas_ab.telemetry.acceptance import parse_metric

METHODS = {"hedged_capital": "hedged-capital confidence sequence (Waudby-Smith & Ramdas, JRSS-B 2024) over "
                             "per-cluster differences",
           "asymptotic": "asymptotic confidence sequence (Waudby-Smith et al., Ann. Statist. 2024) over per-cluster "
                         "differences"}
#: the asymptotic CS decides nothing on fewer clusters (its variance estimate is the CLT's; stats.MIN_CLUSTERS)
MIN_ASYMPTOTIC = 10
#: the asymptotic CS is tightest here without a registered max_clusters (fixed: a data-chosen one is no CS)
T_OPT = 100
MET, NOT_MET, UNDECIDED, UNDERPOWERED = "MET", "NOT MET", "UNDECIDED", "UNDERPOWERED"
#: the grid of candidate means (confidence_sequence.BREAKS is confseq's 1000; finer here: 2R / 4000 per step)
BREAKS = 4000
#: a bound on the grid (k / BREAKS, rescaled) equal to min_effect up to rounding counts as equal
EPS = 1e-12


@dataclass(frozen=True)
class Look:
    """The sequence after the first `n_clusters` clusters. estimate, lower, upper: the cluster
    mean of treatment - control and its CS (the metric's units, not the registered direction);
    pooled: the pooled difference on the same clusters; n_steps: rows of both arms there."""
    index: int
    n_clusters: int
    n_steps: int
    estimate: float
    lower: float
    upper: float
    decision: str
    pooled: float = float("nan")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class SequentialResult:
    """Every look of one sequential judgement; `decided_at`: the index of the first look that
    decided (None: none did), whose decision stands (`decision`)."""
    method: str
    alpha: float
    estimand: str          # matched_positions | whole_arm, averaged over clusters (see the module docstring)
    metric: str
    min_effect: float
    direction: str
    looks: tuple[Look, ...]
    decision: str
    decided_at: int | None
    cluster_unit: str = "document"
    skipped: int = 0       # clusters with no difference (an arm without a step in the denominator)
    margin: float | None = None   # a non-inferiority's margin (min_effect is then -margin); None: a difference

    @property
    def decided_look(self) -> Look | None:
        return None if self.decided_at is None else self.looks[self.decided_at - 1]

    def claim(self) -> str:
        """'p1 up by >= 0.01', or a non-inferiority's 'p1: treatment - control >= -0.01'."""
        if self.margin is not None:
            bound = f">= -{self.margin:g}" if self.direction == "increase" else f"<= +{self.margin:g}"
            return f"{self.metric}: treatment - control {bound} (non-inferiority)"
        word = "up" if self.direction == "increase" else "down"
        return f"{self.metric} {word} by >= {self.min_effect:g}"

    def summary(self) -> str:
        last = self.decided_look or self.looks[-1]
        return (f"{self.decision}: {self.claim()}; after {last.n_clusters} "
                f"{self.cluster_unit}s (look {last.index} of {len(self.looks)}) the cluster-mean difference is "
                f"{last.estimate:+.4f}, {1 - self.alpha:.0%} confidence sequence [{last.lower:+.4f}, "
                f"{last.upper:+.4f}] (pooled {last.pooled:+.4f}; estimand: the cluster mean of "
                f"{self.estimand.replace('_', ' ')}; {METHODS[self.method]})")

    __str__ = summary

    def markdown(self) -> str:
        """The path as a table: one row per look, the deciding one in bold."""
        rows = [f"| look | {self.cluster_unit}s | steps | cluster mean | {1 - self.alpha:.0%} sequence | pooled | "
                "decision |", "|---|---|---|---|---|---|---|"]
        for lk in self.looks:
            dec = f"**{lk.decision}**" if lk.index == self.decided_at else lk.decision
            rows.append(f"| {lk.index} | {lk.n_clusters:,} | {lk.n_steps:,} | {lk.estimate:+.4f} | "
                        f"[{lk.lower:+.4f}, {lk.upper:+.4f}] | {lk.pooled:+.4f} | {dec} |")
        return "\n".join(rows)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["looks"] = [lk.to_dict() for lk in self.looks]
        if self.margin is None:          # a difference's record keeps the keys it always had
            del d["margin"]
        return d


# ---- the decision ----------------------------------------------------------------------------

def decide(lower: float, upper: float, min_effect: float, direction: str) -> str:
    """MET / NOT MET / UNDECIDED from a CS [lower, upper] of treatment - control."""
    lo, hi = (lower, upper) if direction == "increase" else (-upper, -lower)
    if lo >= min_effect - EPS:
        return MET
    if hi < min_effect - EPS:
        return NOT_MET
    return UNDECIDED


def metric_range(metric: str, K: int) -> float:
    """R with every cluster difference in [-R, R]: 1 for a rate, K for tokens per step (in [1, K + 1])."""
    kind, _ = parse_metric(metric)
    return float(K) if kind == "tokens" else 1.0


def sequence(d: np.ndarray, R: float, alpha: float, looks: np.ndarray, breaks: int = BREAKS,
             method: str = "hedged_capital", t_opt: int | None = None):
    """(estimate, lower, upper) of the cluster mean at each look (cumulative counts) from the
    cluster differences d in [-R, R], taken in order: [len(looks)] each. asymptotic: tightest at
    t_opt clusters (default T_OPT), and [-R, R] before MIN_ASYMPTOTIC clusters."""
    d = np.asarray(d, np.float64)                  # [G]
    idx = np.asarray(looks, np.int64) - 1
    est = np.cumsum(d)[idx] / (idx + 1)
    if method == "asymptotic":
        lo, hi = asymptotic_cs(d, alpha=alpha, t_opt=int(t_opt or T_OPT), running_intersection=False)
        early = np.arange(len(d)) < MIN_ASYMPTOTIC - 1
        lo, hi = np.where(early, -R, np.maximum(lo, -R)), np.where(early, R, np.minimum(hi, R))
        lo, hi = np.maximum.accumulate(lo), np.minimum.accumulate(hi)
        return est, lo[idx], hi[idx]
    if method != "hedged_capital":
        raise AtlasError(f"unknown confidence sequence {method!r} (one of {', '.join(METHODS)})")
    x = np.clip((d + R) / (2 * R), 0.0, 1.0)      # [G] (clip: rounding at the bounds only)
    lo, hi = hedged_cs(x, alpha=alpha, breaks=breaks)
    return est, 2 * R * lo[idx] - R, 2 * R * hi[idx] - R


def schedule(n: int, looks) -> np.ndarray:
    """The looks as cumulative cluster counts within 1..n (None: one per cluster)."""
    if looks is None:
        return np.arange(1, n + 1)
    arr = np.asarray(list(looks), np.int64)
    if arr.size == 0 or np.any(np.diff(arr) <= 0) or arr[0] < 1:
        raise AtlasError(f"looks {list(looks)}: cumulative cluster counts, increasing, from 1")
    if arr[-1] > n:
        raise AtlasError(f"looks {list(looks)}: the last look is after {arr[-1]} clusters, but the runs hold {n} "
                         "clusters with a difference")
    return arr


def judge_path(d, pooled_parts, steps, *, R, alpha, min_effect, direction, looks=None, final=False,
               breaks: int = BREAKS, method: str = "hedged_capital",
               t_opt: int | None = None) -> tuple[tuple[Look, ...], str, int | None]:
    """The looks, the decision and the look it was made at, from ordered cluster differences.
    pooled_parts: (yA, nA, yB, nB) per cluster, for the pooled difference; steps: rows per cluster."""
    n = len(d)
    if n == 0:
        raise AtlasError("no cluster holds a step of both arms in the metric's denominator: nothing to judge")
    at = schedule(n, looks)
    est, lo, hi = sequence(d, R, alpha, at, breaks, method, t_opt)
    ya, na, yb, nb = (np.cumsum(np.asarray(v, np.float64))[at - 1] for v in pooled_parts)
    with np.errstate(invalid="ignore", divide="ignore"):
        pooled = yb / nb - ya / na
    cost = np.cumsum(np.asarray(steps, np.int64))[at - 1]
    out, decided_at = [], None
    for i in range(len(at)):
        dec = decide(lo[i], hi[i], min_effect, direction)
        if dec == UNDECIDED and final and i == len(at) - 1:
            dec = UNDERPOWERED
        if decided_at is None and dec in (MET, NOT_MET):
            decided_at = i + 1
        out.append(Look(i + 1, int(at[i]), int(cost[i]), float(est[i]), float(lo[i]), float(hi[i]), dec,
                        float(pooled[i])))
    decision = out[decided_at - 1].decision if decided_at else out[-1].decision
    return tuple(out), decision, decided_at


# ---- clusters of two runs ----------------------------------------------------------------------

@dataclass(frozen=True)
class Clusters:
    """Per-cluster sums of both arms, in the order the sequence takes them."""
    ids: np.ndarray        # [G] cluster ids
    ya: np.ndarray         # [G] the control's numerator (matched positions: 0, the pairs' sum goes to yb)
    na: np.ndarray         # [G] its denominator
    yb: np.ndarray
    nb: np.ndarray
    steps: np.ndarray      # [G] rows of both arms
    unit: str
    skipped: int

    @property
    def d(self) -> np.ndarray:
        return self.yb / self.nb - self.ya / self.na


def _first_doc(ids: np.ndarray, cmap) -> np.ndarray:
    """Each cluster's position in the workload: its first document's doc_id."""
    if cmap is None:
        return ids.astype(np.int64)
    cm = np.asarray(cmap, np.int64)
    first = np.full(int(cm.max()) + 1, np.iinfo(np.int64).max)
    np.minimum.at(first, cm, np.arange(len(cm)))
    return first[ids.astype(np.int64)]


def _join(sa: DocSums, sb: DocSums):
    """The clusters both arms hold, and how many of either arm's are not in both."""
    both = np.intersect1d(sa.doc_id[sa.n > 0], sb.doc_id[sb.n > 0])
    ia, ib = np.searchsorted(sa.doc_id, both), np.searchsorted(sb.doc_id, both)
    skipped = len(np.union1d(sa.doc_id, sb.doc_id)) - len(both)
    return both, ia, ib, skipped


def decisive_look(looks: list[dict], decided_at: int | None) -> dict | None:
    """The look that decided (1-based `decided_at`), else the last one; None before any look."""
    return looks[decided_at - 1] if decided_at else (looks[-1] if looks else None)


def saving_words(saving: dict) -> str:
    """A study's saving (study.json's `saving`) in words: the steps each arm ran against the fixed-n
    registration's, and the waves not run."""
    used = ", ".join(f"{a} {n:,}" for a, n in saving["steps_per_arm"].items())
    fixed = (f" of the fixed-n registration's {saving['fixed_n_per_arm']:,} per arm ({saving['saved_share']:.0%} "
             "not run)" if saving.get("fixed_n_per_arm") else "")
    return f"verify steps run {used}{fixed}; {saving['waves_not_run']} of {saving['waves_total']} waves not run"


def clusters_of(pr: Prereg, control, treatment) -> Clusters:
    """Both arms' per-cluster sums on the registered turns, estimand and cluster unit, in the
    workload's document order (a cluster's first document)."""
    from atlas_ab.analysis.comparison import matched_pairs

    spec = pr.spec
    a, b = control.of_turns(spec.turns.value), treatment.of_turns(spec.turns.value)
    clusters = a.declared_clusters(spec.cluster.value)
    cmap, unit = clusters
    metric = spec.primary_metric
    if spec.estimand == Estimand.matched_positions:
        if not (a.has_steps and b.has_steps):
            raise AtlasError(f"{pr.path}: matched positions need step tables; runs without one are judged on "
                             "the whole arm")
        s = matched_pairs(a, b, metric, clusters).sums
        keep = s.n > 0
        ids = s.doc_id[keep]
        ya, na, yb, nb = np.zeros(len(ids)), s.n[keep].astype(np.float64), s.y[keep], s.n[keep].astype(np.float64)
        skipped = 0
    else:
        sa, sb = doc_sums(a.counts(clusters), metric), doc_sums(b.counts(clusters), metric)
        ids, ia, ib, skipped = _join(sa, sb)
        ya, na, yb, nb = sa.y[ia], sa.n[ia].astype(np.float64), sb.y[ib], sb.n[ib].astype(np.float64)
    order = np.argsort(_first_doc(ids, cmap), kind="stable")     # a unit run's declared map is None
    steps = control.rows_per_cluster(cmap, ids) + treatment.rows_per_cluster(cmap, ids)
    return Clusters(ids[order], ya[order], na[order], yb[order], nb[order], steps[order], unit, skipped)


def _load(run_dirs) -> list:
    """Runs as the report reads them (step runs, or every run at its per-unit grain beside an engine run)."""
    from atlas_ab.analysis.cli import warn
    from atlas_ab.analysis.runs import AnyRun, expand, load_run, load_units, needs_units

    given = [run_dirs] if isinstance(run_dirs, (str, Path)) else list(run_dirs)
    if all(isinstance(r, AnyRun) for r in given):
        return given
    paths = expand(given, warn)
    if any(needs_units(p, True) for p in paths):
        return [load_units(p, allow_incomplete=True) for p in paths]
    return [load_run(p, optional=("oracle_hit2", "position"), allow_incomplete=True) for p in paths]


def judge_sequential(prereg, run_dirs, *, looks=None, final: bool = False) -> SequentialResult:
    """The sequential judgement of a `difference` or `noninferiority` registration with a
    `sequential:` block (a Prereg or its file) on the arms' runs (directories, or runs already loaded): the sequence at
    each look (cumulative cluster counts in document order; None: after every cluster). The
    runs may be incomplete (a study between waves). final: the budget has ended, so a last look
    that has not decided is UNDERPOWERED (as it is when the last look reaches max_clusters)."""
    from atlas_ab.analysis.criteria import arm_run

    pr = prereg if isinstance(prereg, Prereg) else load_prereg(Path(prereg))
    spec = pr.spec
    seq = getattr(spec, "sequential", None)
    if pr.kind not in SEQUENTIAL_KINDS or seq is None:
        raise AtlasError(f"{pr.path}: no sequential: block (a fixed-n registration is judged by `report`)")
    margin = spec.margin if pr.kind == "noninferiority" else None
    bound = spec.min_effect if margin is None else -margin      # the line the sequence must clear
    runs = _load(run_dirs)
    control = arm_run(runs, spec.arms.control, "control", pr)
    treatment = arm_run(runs, spec.arms.treatment, "treatment", pr)
    c = clusters_of(pr, control, treatment)
    R = metric_range(spec.primary_metric, max(control.K, treatment.K))
    at = schedule(len(c.ids), looks)
    final = final or (seq.max_clusters is not None and int(at[-1]) >= seq.max_clusters)
    path, decision, decided_at = judge_path(c.d, (c.ya, c.na, c.yb, c.nb), c.steps, R=R, alpha=seq.alpha,
                                            min_effect=bound, direction=spec.direction.value,
                                            looks=at, final=final, method=seq.method, t_opt=seq.max_clusters)
    return SequentialResult(seq.method, seq.alpha, spec.estimand.value, spec.primary_metric, bound,
                            spec.direction.value, path, decision, decided_at, cluster_unit=c.unit,
                            skipped=c.skipped, margin=margin)


__all__ = ["Look", "SequentialResult", "judge_sequential", "decide", "sequence", "judge_path", "clusters_of"]
