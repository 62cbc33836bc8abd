"""Judging pre-registrations (config/prereg.py) against runs: every verdict kind in one place.

Verdicts, in this order:
  PREREG CHANGED   the file given is not the text the study locked under that name; no verdict
  UNLOCKED         an arm it names did not lock its text; no verdict unless the user asks
  UNDERPOWERED     the registered sd cannot be computed, or a count is below its registered
                   minimum (steps per arm, matched pairs, clusters: each counted as registered)
  NOT INFORMATIVE  the arms gave identical outcomes at every step the estimand compares (IDENTICAL)
  MET / NOT MET    the kind's rule (RULES) on the registered estimand with the registered sd
  UNDERPOWERED     not met, and the power to detect min_effect at the threshold, given the
                   observed sd, is below 0.8: the run could not have shown it (a null is no evidence)
A MET result needs no power check: the threshold was crossed. Every comparison of arms also
gets a sensitivity line: the same rule on the other estimand, and whether it would decide
differently. The estimates come from the library: `stats.compare` (binomial / cluster /
bootstrap sd), `paired.paired_difference` (the paired sd), `economics.throughput_difference`,
`paired.oracle_probe` (McNemar) and `fingerprints.fingerprint_table`.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from atlas_ab import AtlasError
from atlas_ab.analysis.economics import ThroughputDifference, throughput_difference
from atlas_ab.analysis.fingerprints import fingerprint_table, read_events
from atlas_ab.analysis.load import Run
from atlas_ab.analysis.metrics import Cells, Units, cell_counts, doc_sums, rates
from atlas_ab.analysis.paired import PairedDifference, oracle_probe, paired_difference
from atlas_ab.analysis.plots import DifferenceItem
from atlas_ab.analysis.sizing import power_at
from atlas_ab.analysis.stats import (
    Difference,
    compare as compare_cells,
    format_delta,
    relative_cluster_se,
    relative_se_independent,
)
from atlas_ab.analysis.unit_runs import figure
from atlas_ab.config.prereg import (
    ESTIMAND_WORDS,
    NATURAL_SE,
    UNIT_WORDS,
    ClusterUnit,
    Decides,
    Direction,
    Estimand,
    Prereg,
    Registration,
    Turns,
    changed_fields,
)
from atlas_ab.telemetry.acceptance import THROUGHPUT

MIN_POWER = 0.8

#: Each kind's decision rule, in the words the report and docs/analysis.md print.
RULES = {
    "difference": "MET when the effect is in the registered direction, >= min_effect (relative to the "
                  "control's value with relative: true) and >= threshold_sd of the registered sd",
    "equivalence": "MET when abs(delta) + threshold_sd x sd <= margin; UNDERPOWERED when threshold_sd x sd "
                   "alone exceeds the margin",
    "maximum": "MET when best is above each of the others by >= threshold_sd of the registered sd (and its "
               "fingerprint table reads 100% with fingerprints: true)",
    "oracle": "MET when the probe's McNemar z >= threshold_sd (oracle better) and it recovers >= min_share of "
              "the p1 - p2_cond gap",
}
#: What each registered minimum counts.
COUNTED = {"min_n_per_arm": "steps per arm in the metric's denominator on the registered turns",
           "min_pairs": "matched pairs: steps of both arms at the same (doc_id, turn, position), both in the "
                        "metric's denominator",
           "min_clusters": "clusters of the cluster unit that hold a step of either arm"}
#: When a comparison is NOT INFORMATIVE.
IDENTICAL = ("the two arms' outcomes are identical at every step the estimand compares: on matched "
             "positions, every step of each arm is matched and no pair is discordant (b = c = 0, so the "
             "paired sd is exactly 0); on whole arms, every (document, turn, k, accept_len) cell holds the "
             "same count in both arms. The data then cannot tell a lever that does nothing from arms that "
             "run one code path on this subset (identical by construction), so the criterion could not "
             "have decided otherwise")


#: Each kind's estimand and cluster unit, in the report's words.
ESTIMANDS = {
    "difference": "`estimand`: matched positions (decided on the paired sd) or whole arm (the binomial, cluster "
                  "or bootstrap sd); by default the one its `decides` implies",
    "equivalence": "as difference",
    "maximum": "as difference, for each best - other comparison",
    "oracle": "within the arm: the real draft 2 vs the oracle's on the same probed step (steps that accepted "
              "draft 1 with k >= 2)",
}
CLUSTER_UNITS = {
    "difference": "`cluster`: source file (default: the workload's doc_cluster map; a workload with one document "
                  "per file clusters by document) or document; the binomial sd is not clustered",
    "equivalence": "as difference",
    "maximum": "as difference",
    "oracle": "none: McNemar's test on the probed steps",
}


def verdict_table() -> str:
    """docs/analysis.md's table of the verdict kinds (checked by tests/analysis/test_criteria.py)."""
    rows = ["| kind | estimand | counted unit | cluster unit | decision rule |", "|---|---|---|---|---|"]
    counted = "; ".join(f"`{f}`: {w}" for f, w in COUNTED.items())
    for kind in RULES:
        unit = (counted if kind != "oracle" else
                "`min_n_per_arm` or `min_pairs`: the arm's probed steps (each is a pair)")
        rows.append(f"| `{kind}` | {ESTIMANDS[kind]} | {unit if kind in ('difference', 'oracle') else 'as difference'}"
                    f" | {CLUSTER_UNITS[kind]} | {RULES[kind]} |")
    return "\n".join(rows)


@dataclass(frozen=True)
class Verdict:
    status: str   # MET | NOT MET | UNDERPOWERED | NOT INFORMATIVE | PREREG CHANGED | UNLOCKED
    reason: str
    delta: float
    se: float | None     # the registered sd (None: it could not be computed)
    z: float             # in the registered direction
    power_at_min_effect: float | None
    n_control: int
    n_treatment: int
    prereg: Prereg
    se_kind: str = ""    # binomial | cluster | bootstrap | paired | McNemar
    clusters: str = ""   # what a clustered sd was clustered over: "14 source files"
    counts: dict = field(default_factory=dict)   # what the registered minimums were checked against

    def measured(self) -> str:
        """'+0.046 (11.6 sd) with the paired sd 0.0040 over 14 source files'."""
        if self.se is None:
            return f"{self.delta:+.4f}; the {self.se_kind} sd was not computed"
        over = f" over {self.clusters}" if self.clusters else ""
        return f"{format_delta(self.delta, self.z)} with the {self.se_kind} sd {self.se:.4f}{over}"

    def observed(self) -> str:
        power = ("" if self.power_at_min_effect is None or self.se is None
                 else f"; power to detect the minimum effect {self.power_at_min_effect:.2f}")
        return f"observed {self.measured()}{power}"

    def summary(self) -> str:
        s = f"{self.status} ({self.prereg.name}): {self.reason}\n  criterion: {self.prereg.criterion()}"
        if self.status in ("PREREG CHANGED", "UNLOCKED"):
            return s
        return s + "\n  " + self.observed()

    __str__ = summary

    def to_dict(self) -> dict:
        # report.json keeps its keys: an se is written as "sd" (keys.JSON_KEY)
        spec = self.prereg.spec
        return {"name": self.prereg.name, "kind": self.prereg.kind, "status": self.status, "reason": self.reason,
                "delta": self.delta, "sd": self.se, "z": self.z, "power_at_min_effect": self.power_at_min_effect,
                "n_control": self.n_control, "n_treatment": self.n_treatment, "counts": self.counts,
                "criterion": self.prereg.criterion(), "prereg": str(self.prereg.path),
                "prereg_sha256": self.prereg.sha256, "sd_kind": self.se_kind, "clusters": self.clusters,
                "decides": getattr(getattr(spec, "decides", None), "value", "McNemar"),
                "estimand": getattr(getattr(spec, "estimand", None), "value", None),
                "cluster_unit": getattr(getattr(spec, "cluster", None), "value", None)}


@dataclass(frozen=True)
class Sensitivity:
    """The registered rule on the other estimand (its natural sd), beside the registered verdict."""
    estimand: Estimand
    verdict: Verdict | None
    note: str = ""       # why there is no such estimate

    def line(self, registered: Verdict) -> str:
        """'sensitivity (whole arm): +0.007 (4.8 sd) with the cluster sd ...: MET; it would decide
        differently (the registered estimand reads NOT MET)'."""
        words = ESTIMAND_WORDS[self.estimand]
        if self.verdict is None:
            return f"sensitivity ({words}): not available: {self.note}"
        v = self.verdict
        if v.status == registered.status:
            return f"sensitivity ({words}): {v.measured()}: {v.status} as well"
        return (f"sensitivity ({words}): {v.measured()}: {v.status}; it would decide differently "
                f"(the registered estimand reads {registered.status})")

    def to_dict(self) -> dict:
        return {"estimand": self.estimand.value, "note": self.note,
                "verdict": None if self.verdict is None else self.verdict.to_dict()}


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    details: dict = field(default_factory=dict)
    items: tuple[DifferenceItem, ...] = ()
    sensitivity: Sensitivity | None = None

    def summary(self) -> str:
        s = self.verdict.summary()
        if self.sensitivity is not None and self.verdict.status not in ("PREREG CHANGED", "UNLOCKED"):
            s += "\n  " + self.sensitivity.line(self.verdict)
        return s

    __str__ = summary


def _no_verdict(status: str, pr: Prereg, reason: str) -> Verdict:
    return Verdict(status, reason, delta=float("nan"), se=None, z=float("nan"), power_at_min_effect=None,
                   n_control=0, n_treatment=0, prereg=pr)


def changed(locked: Prereg, given: Prereg) -> Verdict:
    """The verdict when the file given is not the one the study locked: none, and why."""
    diffs = changed_fields(locked, given)
    return _no_verdict("PREREG CHANGED", given,
                       f"{given.path.name} was locked at sha256 {locked.sha256[:12]} when the study began and is "
                       f"{given.sha256[:12]} now ({'; '.join(diffs) or 'comments/whitespace only'}); judged "
                       "against neither (pass --evaluate-edited to evaluate the edited file anyway)")


def unlocked(reg: Registration) -> Verdict:
    """The verdict on a pre-registration the arms did not all lock: none, and why."""
    return _no_verdict("UNLOCKED", reg.prereg, f"{reg.prereg.path.name} is not locked by the runs: {reg.why}; "
                                               "judged against nothing (pass --evaluate-unlocked to evaluate it "
                                               "anyway, marked UNLOCKED)")


# ---- the data a comparison is judged on ---------------------------------------------------

def _run(runs: list[Run], name: str, role: str, pr: Prereg) -> Run:
    found = [r for r in runs if r.arm == name]
    if len(found) != 1:
        have = ", ".join(f"{r.arm} ({r.path})" for r in runs)
        raise AtlasError(f"{pr.path.name}: {role} arm {name!r} matches {len(found)} of the runs given "
                         f"(need exactly one; runs: {have})")
    return found[0]


def _turns(run: Run, turns: Turns) -> Run:
    """The run restricted to a turn class (cold: turn 0; warm: turns >= 1)."""
    if turns == Turns.all:
        return run
    if not hasattr(run, "steps"):
        raise AtlasError(f"{run.path}: a run without a step table is judged over all turns only, not "
                         f"{turns.value} turns")
    t = run.steps["turn"]
    return dataclasses.replace(run, steps=run.steps[(t == 0) if turns == Turns.cold else (t >= 1)])


def _clusters(run: Run, unit: ClusterUnit) -> tuple:
    """(doc_id -> cluster map or None, unit words) for the declared cluster unit; a workload whose
    documents each come from their own file has no map, and its source files are its documents."""
    if not hasattr(run, "steps"):                       # an engine run: its own clusters (_cells)
        return None, run.cells().cluster_unit
    if unit == ClusterUnit.document:
        return None, "document"
    cmap, words = run.clusters
    return (cmap, words) if cmap is not None else (None, "document")


def _cells(run: Run, clusters: tuple) -> Cells | Units:
    """The run's counts clustered as declared: a step run's cells, or an engine run's per-unit
    table (analysis/unit_runs.py; its clusters are its documents or requests, whatever is declared)."""
    if not hasattr(run, "steps"):
        return run.cells()
    return cell_counts(run.steps, run.arm, K=run.K, clusters=clusters[0], cluster_unit=clusters[1])


@dataclass(frozen=True)
class Measured:
    """treatment - control of one metric on the registered turns, both estimands, and the counts
    the registered minimums are checked against."""
    metric: str
    whole: Difference | ThroughputDifference
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
        key = "throughput" if isinstance(self.whole, ThroughputDifference) else "unpaired"
        d = {key: self.whole.to_dict(), "control_value": self.control_value,
             "counts": {"steps": [self.n_control, self.n_treatment],
                        "pairs": None if self.paired is None else self.paired.n_pairs,
                        "clusters": self.n_clusters, "cluster_unit": self.cluster_unit}}
        if self.paired is not None:
            d["paired"] = self.paired.to_dict()
        return d


def measure(pr: Prereg, control: Run, treatment: Run, n_boot: int, seed: int) -> Measured:
    """Both estimands of treatment - control of the registered metric, clustered by the declared unit."""
    spec = pr.spec
    a, b = _turns(control, spec.turns), _turns(treatment, spec.turns)
    clusters = _clusters(a, spec.cluster)
    metric = spec.primary_metric
    if metric == THROUGHPUT:
        d = throughput_difference(a, b, clusters)
        return Measured(metric, d, None, f"{THROUGHPUT} has no matched-positions estimand (a step's time is not "
                        "paired between arms)", d.control.n_steps, d.treatment.n_steps, d.n_clusters,
                        d.control.cluster_unit, False)
    ca, cb = _cells(a, clusters), _cells(b, clusters)
    d = compare_cells(ca, cb, metric, n_boot=n_boot, seed=seed)
    sa, sb = doc_sums(ca, metric), doc_sums(cb, metric)
    paired, note = None, None
    if not (hasattr(a, "steps") and hasattr(b, "steps")):
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


def _effect(spec, m: Measured, estimand: Estimand, decides: Decides) -> tuple[float, float | None, str | None]:
    """(delta, its sd or None, why not) of the estimand with the sd `decides` (relative when registered)."""
    relative = spec.KIND == "difference" and spec.relative
    if estimand == Estimand.matched_positions:
        p = m.paired
        if p is None:
            return float("nan"), None, m.paired_note
        return p.delta, p.se, p.cluster_note
    d = m.whole
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


def _se_words(decides: Decides, m: Measured) -> dict:
    """The Verdict's se_kind and clusters."""
    if decides == Decides.binomial:
        return {"se_kind": "binomial", "clusters": ""}
    G, unit = m.n_clusters, m.cluster_unit
    return {"se_kind": decides.value, "clusters": f"{G} {unit}{'s' if G != 1 else ''}"}


def _short(spec, counts: dict, m: Measured | None = None, names: tuple = ()) -> str | None:
    """Why the counts fall short of the registered minimums (None: they do not)."""
    for f, need in spec.minimums().items():
        have = counts.get(f)
        if have is None:
            why = m.paired_note if m is not None else "not counted"
            return f"{f} is registered but matched pairs cannot be counted: {why}"
        if have >= need:
            continue
        if f == "min_n_per_arm" and m is not None and names:
            return (f"n below the pre-registered minimum of {need:,} steps per arm ({names[0]} n={m.n_control:,}, "
                    f"{names[1]} n={m.n_treatment:,})")
        unit = {"min_n_per_arm": "steps per arm", "min_pairs": "matched pairs",
                "min_clusters": f"{m.cluster_unit}s" if m is not None else "clusters"}[f]
        return f"{have:,} {unit}, below the pre-registered minimum of {need:,} ({f})"
    return None


def _difference_verdict(pr: Prereg, spec, m: Measured) -> Verdict:
    """The difference rule on the estimand `spec` names (the registered one, or the sensitivity's)."""
    delta, se, why = _effect(spec, m, spec.estimand, spec.decides)
    sign = 1.0 if spec.direction == Direction.increase else -1.0
    effect = sign * delta
    z = effect / se if se else (math.copysign(math.inf, effect) if se == 0 and effect else float("nan"))
    power = None if se is None else (1.0 if se == 0 else power_at(spec.min_effect, se, spec.threshold_sd))
    common = _common(pr, spec, m, delta, se, z, power)
    early = _not_judgeable(spec, m, se, why, common, "the data cannot tell a lever that does nothing from arms "
                           "that run one code path here")
    if early:
        return early
    rel = " (relative)" if spec.relative else ""
    if effect >= spec.min_effect and z >= spec.threshold_sd:
        return Verdict("MET", f"{spec.primary_metric}{rel} moved {delta:+.4f} ({z:.1f} sd), "
                       f">= {spec.min_effect:g} at >= {spec.threshold_sd:g} sd", **common)
    if power < MIN_POWER:
        return Verdict("UNDERPOWERED", f"not met, and the power to detect the minimum effect "
                       f"{spec.min_effect:g} at {spec.threshold_sd:g} sd is {power:.2f} < {MIN_POWER} "
                       f"given the observed {spec.decides.value} sd {se:.4f}", **common)
    why = (f"effect {delta:+.4f} is below the minimum {spec.min_effect:g} in the registered direction"
           if effect < spec.min_effect else f"z {z:.1f} is below the threshold {spec.threshold_sd:g} sd")
    return Verdict("NOT MET", why, **common)


def _common(pr: Prereg, spec, m: Measured, delta: float, se, z: float, power) -> dict:
    """The fields every two-arm Verdict carries."""
    return dict(delta=delta, se=se, z=z, power_at_min_effect=power, n_control=m.n_control,
                n_treatment=m.n_treatment, prereg=pr, **_se_words(spec.decides, m), counts=m.counts())


def _not_judgeable(spec, m: Measured, se, why, common: dict, identical_means: str) -> Verdict | None:
    """A two-arm rule's verdicts before its decision: no sd, fewer units than registered, or arms
    identical by construction (`identical_means`: what that leaves the rule unable to say)."""
    c, t = spec.arms.control, spec.arms.treatment
    if se is None:
        return Verdict("UNDERPOWERED", f"the registered {spec.decides.value} sd cannot be computed: {why}", **common)
    short = _short(spec, m.counts(), m, (c, t))
    if short:
        return Verdict("UNDERPOWERED", short, **common)
    if m.identical(spec.estimand):
        return Verdict("NOT INFORMATIVE", f"{t} and {c} gave identical outcomes at every compared step "
                       f"({_identity_words(m, spec.estimand)}): {identical_means}", **common)
    return None


def _identity_words(m: Measured, estimand: Estimand) -> str:
    if estimand == Estimand.matched_positions:
        return f"{m.paired.n_pairs:,} matched pairs, none discordant"
    return f"the same count in every (document, turn, k, accept_len) cell, {m.n_control:,} steps each"


def _equivalence_verdict(pr: Prereg, spec, m: Measured) -> Verdict:
    delta, se, why = _effect(spec, m, spec.estimand, spec.decides)
    z = abs(delta) / se if se else (0.0 if se == 0 and delta == 0 else float("nan"))
    common = _common(pr, spec, m, delta, se, z, None)
    early = _not_judgeable(spec, m, se, why, common, "an equivalence that could not have failed is no evidence "
                           "that the arms do not differ")
    if early:
        return early
    bound = abs(delta) + spec.threshold_sd * se
    if bound <= spec.margin:
        return Verdict("MET", f"|{delta:+.4f}| + {spec.threshold_sd:g} x {se:.4f} = {bound:.4f} <= the margin "
                       f"{spec.margin:g}: the arms do not differ by more than the margin", **common)
    if spec.threshold_sd * se > spec.margin:
        return Verdict("UNDERPOWERED", f"{spec.threshold_sd:g} sd = {spec.threshold_sd * se:.4f} alone exceeds the "
                       f"margin {spec.margin:g}: this n cannot show equivalence", **common)
    return Verdict("NOT MET", f"|{delta:+.4f}| + {spec.threshold_sd:g} sd = {bound:.4f} > the margin "
                   f"{spec.margin:g}", **common)


def _other(spec):
    """The spec with the other estimand (and its natural sd), or None and why."""
    est = (Estimand.whole_arm if spec.estimand == Estimand.matched_positions else Estimand.matched_positions)
    try:
        return dataclasses.replace(spec, estimand=est, decides=NATURAL_SE[est]), est, ""
    except ValueError as e:                # config.prereg.Invalid: the other estimand does not exist here
        return None, est, str(e)


def _sensitivity(pr: Prereg, decide, ms: list[Measured]) -> Sensitivity:
    other, est, why = _other(pr.spec)
    if est == Estimand.matched_positions and any(m.paired is None for m in ms):
        return Sensitivity(est, None, next(m.paired_note for m in ms if m.paired is None))
    if other is None:
        return Sensitivity(est, None, why)
    return Sensitivity(est, decide(pr, other, ms))


def _item(pr: Prereg, label: str, delta: float, se: float | None, status: str, **kw) -> DifferenceItem:
    """One panel of the difference figure."""
    spec = pr.spec
    rel = " (relative)" if getattr(spec, "relative", False) else ""
    turns = "" if spec.turns == Turns.all else f" ({spec.turns.value})"
    return DifferenceItem(label=f"{label}\n{spec.primary_metric}{rel}{turns} [{pr.name}]", delta=delta, se=se,
                          se_kind=spec.decides.value, verdict=status, threshold_sd=spec.threshold_sd, **kw)


# ---- the kinds -------------------------------------------------------------------------------

def _judge_pair(pr: Prereg, runs: list[Run], n_boot: int, seed: int, verdict, label: str, **item) -> Judgement:
    """A control/treatment kind: measure the pair, decide with `verdict(pr, spec, measured)`, and
    the same decision under the other estimand (the sensitivity line)."""
    spec = pr.spec
    control = _run(runs, spec.arms.control, "control", pr)
    treatment = _run(runs, spec.arms.treatment, "treatment", pr)
    m = measure(pr, control, treatment, n_boot, seed)
    v = verdict(pr, spec, m)
    sens = _sensitivity(pr, lambda p, s, ms: verdict(p, s, ms[0]), [m])
    details = {**m.details(), "estimand": spec.estimand.value, "sensitivity": sens.to_dict()}
    return Judgement(v, details, (_item(pr, f"{spec.arms.treatment} - {spec.arms.control}{label}", v.delta, v.se,
                                        v.status, **item),), sens)


def judge_difference(pr: Prereg, runs: list[Run], n_boot: int, seed: int) -> Judgement:
    spec = pr.spec
    return _judge_pair(pr, runs, n_boot, seed, _difference_verdict, "", min_effect=spec.min_effect,
                       direction=spec.direction.value)


def judge_equivalence(pr: Prereg, runs: list[Run], n_boot: int, seed: int) -> Judgement:
    return _judge_pair(pr, runs, n_boot, seed, _equivalence_verdict, " (equivalence)", margin=pr.spec.margin)


def _maximum_verdict(pr: Prereg, spec, ms: list[Measured], fp: dict | None = None) -> Verdict:
    worst = None
    for name, m in zip(spec.others, ms):
        delta, se, why = _effect(spec, m, spec.estimand, spec.decides)
        common = dict(delta=delta, se=se, power_at_min_effect=None, n_control=m.n_control,
                      n_treatment=m.n_treatment, prereg=pr, **_se_words(spec.decides, m), counts=m.counts())
        if se is None:
            return Verdict("UNDERPOWERED", f"the registered {spec.decides.value} sd cannot be computed "
                           f"({spec.best} - {name}): {why}", z=float("nan"), **common)
        short = _short(spec, m.counts(), m, (name, spec.best))
        if short:
            return Verdict("UNDERPOWERED", short, z=float("nan"), **common)
        if m.identical(spec.estimand):
            return Verdict("NOT INFORMATIVE", f"{spec.best} and {name} gave identical outcomes at every compared step "
                           f"({_identity_words(m, spec.estimand)})", z=0.0, **common)
        z = delta / se if se else (0.0 if delta == 0 else math.copysign(math.inf, delta))
        if worst is None or z < worst[1]:
            worst = (name, z, common)
    name, z, common = worst
    delta = common["delta"]
    if z >= spec.threshold_sd and (fp is None or fp["ok"]):
        return Verdict("MET", f"{spec.best} is above every other arm, the closest {name} by {delta:+.4f} ({z:.1f} sd)"
                       + ("; its fingerprint table reads 100%" if fp else ""), z=z, **common)
    if z >= spec.threshold_sd:
        return Verdict("NOT MET", f"{spec.best} is the maximum, but its fingerprint table fails rows {fp['failed']}",
                       z=z, **common)
    return Verdict("NOT MET", f"{spec.best} is not above {name} by {spec.threshold_sd:g} sd ({delta:+.4f}, {z:.1f} sd)",
                   z=z, **common)


def judge_maximum(pr: Prereg, runs: list[Run], n_boot: int, seed: int) -> Judgement:
    spec = pr.spec
    best = _run(runs, spec.best, "best", pr)
    ms = [measure(pr, _run(runs, name, "other", pr), best, n_boot, seed) for name in spec.others]
    fp = _fingerprints(best) if spec.fingerprints else None
    v = _maximum_verdict(pr, spec, ms, fp)
    sens = _sensitivity(pr, lambda p, s, ms_: _maximum_verdict(p, s, ms_, fp), ms)
    rows, items = [], []
    for name, m in zip(spec.others, ms):
        delta, se, why = _effect(spec, m, spec.estimand, spec.decides)
        z = delta / se if se else (0.0 if delta == 0 else math.copysign(math.inf, delta))
        rows.append({"other": name, "delta": delta, "sd": se, "z": z, "n_best": m.n_treatment,
                     "n_other": m.n_control, "why_no_sd": why, **m.details()})
        items.append(_item(pr, f"{spec.best} - {name}", delta, se, v.status))
    return Judgement(v, {"comparisons": rows, "fingerprints": fp, "estimand": spec.estimand.value,
                         "sensitivity": sens.to_dict()}, tuple(items), sens)


def _fingerprints(run: Run) -> dict:
    events, manifest = read_events(run.path)
    table = fingerprint_table(events, (manifest or {}).get("row_space", "compact"))
    return {"ok": table.ok, "failed": [r.name for r in table.rows if not r.ok], **table.to_dict()}


def judge_oracle(pr: Prereg, runs: list[Run], n_boot: int, seed: int) -> Judgement:
    spec = pr.spec
    run = _turns(_run(runs, spec.arm, "oracle", pr), spec.turns)
    probe = oracle_probe(run)
    r = rates(run.cells())
    gap = r["p1"] - r["p2_cond"]
    recovered = probe.oracle_p2_cond - probe.real_p2_cond
    share = recovered / gap if gap > 0 else float("nan")
    t = probe.test
    se = abs(recovered) / abs(t.z) if t.z else None
    details = {"probe": probe.to_dict(), "p1": r["p1"], "p2_cond": r["p2_cond"], "gap": gap,
               "recovered": recovered, "share": share}
    counts = {"min_n_per_arm": t.n_pairs, "min_pairs": t.n_pairs}
    common = dict(delta=recovered, se=se, z=t.z, power_at_min_effect=None, n_control=t.n_pairs,
                  n_treatment=t.n_pairs, prereg=pr, se_kind="McNemar", counts=counts)
    short = next((f"{t.n_pairs:,} probed steps, below the pre-registered {need:,}"
                  for f, need in spec.minimums().items() if t.n_pairs < need), None)
    if short:
        v = Verdict("UNDERPOWERED", short, **common)
    elif t.z >= spec.threshold_sd and share >= spec.min_share:
        v = Verdict("MET", f"the oracle's p2_cond {probe.oracle_p2_cond:.4f} vs the real {probe.real_p2_cond:.4f} "
                    f"(McNemar b={t.b:,} c={t.c:,}, exact p={t.p_exact:.2g}, z={t.z:+.1f}) recovers {share:.2f}x the "
                    f"p1 - p2_cond gap of {gap:.4f}", **common)
    else:
        v = Verdict("NOT MET", f"McNemar z={t.z:+.1f} (needs >= {spec.threshold_sd:g}) and a recovered share of "
                    f"{share:.2f} (needs >= {spec.min_share:g}) of the gap {gap:.4f}", **common)
    return Judgement(v, details, (DifferenceItem(
        label=f"oracle - real p2_cond ({spec.arm})\n[{pr.name}]", delta=recovered, se=se, se_kind="McNemar",
        verdict=v.status, threshold_sd=spec.threshold_sd),))


JUDGES = {"difference": judge_difference, "equivalence": judge_equivalence, "maximum": judge_maximum,
          "oracle": judge_oracle}


def _refuse_without_steps(pr: Prereg, runs: list) -> None:
    """One line for what a run without a step table (units.UnitRun) cannot be judged on: a
    question other than a difference, a metric its grain does not make exact, a registered sd
    it lacks, a turn class."""
    if all(hasattr(r, "steps") for r in runs if r.arm in pr.arms):
        return
    if pr.kind != "difference":
        raise AtlasError(f"{pr.path}: runs without a step table are judged on a difference only, not a {pr.kind}")
    spec = pr.spec
    pair = [_run(runs, spec.arms.control, "control", pr), _run(runs, spec.arms.treatment, "treatment", pr)]
    figs = []
    for r in pair:
        f = figure(r, spec.primary_metric)
        if f.status != "exact":
            what = "is known only within bounds" if f.status == "bounds" else "is not available"
            raise AtlasError(f"{r.path}: {f.metric} {what}: {f.reason}")
        figs.append(f)
    decides = spec.decides.value
    if decides == "binomial" and any(f.iid_se is None for f in figs):
        raise AtlasError(f"{pr.path}: decides by the i.i.d. sd, which {spec.primary_metric} does not have at this "
                         "grain (the histogram is missing)")
    if decides in ("cluster", "bootstrap") and any(r.units.clusters is None for r in pair):
        raise AtlasError(f"{pr.path}: decides by the {decides} sd; global counters have no requests or documents "
                         "to cluster (binomial sd only)")
    if spec.turns != Turns.all:
        raise AtlasError(f"{pr.path}: judges {spec.turns.value} turns; runs without a step table are judged over "
                         "all turns only")


def judge(pr: Prereg, runs: list[Run], n_boot: int = 2000, seed: int = 0) -> Judgement:
    """The verdict of a pre-registration on the runs (each arm it names must be among them once;
    runs without a step table, units.UnitRun, are judged on what their grain makes exact)."""
    _refuse_without_steps(pr, runs)
    return JUDGES[pr.kind](pr, runs, n_boot, seed)


def evaluate(pr: Prereg, diff: Difference) -> Verdict:
    """A `difference` pre-registration judged on a measured whole-arm stats.Difference (runs
    without a step table: ingest/counts.py): the registered sd, the registered counts per arm."""
    spec = pr.spec
    if pr.kind != "difference" or spec.estimand != Estimand.whole_arm or spec.relative:
        raise AtlasError(f"{pr.path}: runs without a step table are judged on an absolute whole-arm difference "
                         f"only (this pre-registration is a {pr.kind} on {ESTIMAND_WORDS[spec.estimand]}"
                         if pr.kind != "oracle" else f"{pr.path}: an oracle question needs a step table")
    if diff.metric != spec.primary_metric:
        raise AtlasError(f"{pr.path}: primary metric is {spec.primary_metric}, the difference is {diff.metric}")
    if set(spec.minimums()) - {"min_n_per_arm"}:
        raise AtlasError(f"{pr.path}: runs without a step table count steps per arm only (min_n_per_arm), not "
                         f"{', '.join(sorted(set(spec.minimums()) - {'min_n_per_arm'}))}")
    clusters = diff.control.n_clusters or 0
    m = Measured(spec.primary_metric, diff, None, "runs without a step table have no positions", diff.control.n,
                 diff.treatment.n, clusters, UNIT_WORDS[spec.cluster], False)
    return _difference_verdict(pr, spec, m)
