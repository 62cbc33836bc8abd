"""Each kind's decision rule on measured data (criteria/measure.py): the two-arm verdicts, in the
order the criteria package's docstring gives, and the same rule on the other estimand (the
sensitivity line)."""
from __future__ import annotations

import dataclasses
import math

from atlas_ab.analysis.criteria.measured import Measured, effect_of
from atlas_ab.analysis.criteria.verdict import DifferenceItem, Sensitivity, Verdict
from atlas_ab.analysis.ladder.throughput import ThroughputRatio
from atlas_ab.analysis.stats import power_at
from atlas_ab.config.prereg import NATURAL_SE, Decides, Direction, Estimand, Prereg, Turns

MIN_POWER = 0.8


def _se_words(decides: Decides, m: Measured) -> dict:
    """The Verdict's se_kind and clusters."""
    if decides == Decides.binomial:
        return {"se_kind": "binomial", "clusters": ""}
    if isinstance(m.whole, ThroughputRatio):      # a registration's replicates decide, not one run's clusters
        r = m.whole
        return {"se_kind": f"replicates' random-effects (t of {r.ratio.df:.1f} df, as an sd at the registered level;"
                           f" within each run clustered by {m.cluster_unit})",
                "clusters": f"{r.control.pooled.n} + {r.treatment.pooled.n} runs"}
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


def _directed(spec, m: Measured) -> tuple[float, float | None, str | None, float, float]:
    """(delta, its sd, why not, the effect in the registered better direction, its z) of the estimand
    `spec` names, on the sd it registers: what the difference and non-inferiority rules both start from."""
    delta, se, why = effect_of(spec, m, spec.estimand, spec.decides)
    effect = (1.0 if spec.direction == Direction.increase else -1.0) * delta
    z = effect / se if se else (math.copysign(math.inf, effect) if se == 0 and effect else float("nan"))
    return delta, se, why, effect, z


def difference_verdict(pr: Prereg, spec, m: Measured) -> Verdict:
    """The difference rule on the estimand `spec` names (the registered one, or the sensitivity's)."""
    delta, se, why, effect, z = _directed(spec, m)
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


def equivalence_verdict(pr: Prereg, spec, m: Measured) -> Verdict:
    delta, se, why = effect_of(spec, m, spec.estimand, spec.decides)
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


def noninferiority_verdict(pr: Prereg, spec, m: Measured) -> Verdict:
    """The one-sided rule. With effect = treatment - control in the better direction and t = threshold_sd:
    MET when its lower bound effect - t sd >= -margin (at the boundary: shown, as a difference's z >= t);
    NOT MET when its upper bound effect + t sd < -margin (shown worse than the margin), or when neither
    and the power to show non-inferiority were the arms equal, Phi(margin / sd - t), is >= MIN_POWER;
    UNDERPOWERED when neither and that power is below it. A decision needs no power check."""
    delta, se, why, effect, z = _directed(spec, m)
    power = None if se is None else (1.0 if se == 0 else power_at(spec.margin, se, spec.threshold_sd))
    common = _common(pr, spec, m, delta, se, z, power)
    early = _not_judgeable(spec, m, se, why, common, "a non-inferiority that could not have failed is no "
                           "evidence that the treatment costs nothing")
    if early:
        return early
    t, c, k = spec.arms.treatment, spec.arms.control, spec.threshold_sd
    up = spec.direction == Direction.increase
    lower, upper = effect - k * se, effect + k * se
    # the bound in the metric's units: delta - t sd against -margin (increase), delta + t sd against +margin
    near, far, op, edge = ((delta - k * se, delta + k * se, "-", -spec.margin) if up else
                           (delta + k * se, delta - k * se, "+", spec.margin))
    bound = f"{delta:+.4f} {op} {k:g} x {se:.4f} = {near:+.4f}"
    if lower >= -spec.margin:
        return Verdict("MET", f"{spec.primary_metric} moved {delta:+.4f}; its one-sided bound {bound} is within the "
                       f"margin {edge:+g}: {t} is no worse than {c} by more than {spec.margin:g}", **common)
    if upper < -spec.margin:
        return Verdict("NOT MET", f"{spec.primary_metric} moved {delta:+.4f}; even its other bound {delta:+.4f} "
                       f"{'+' if up else '-'} {k:g} x {se:.4f} = {far:+.4f} is past the margin {edge:+g}: {t} is "
                       f"worse than {c} by more than {spec.margin:g}", **common)
    if power < MIN_POWER:
        return Verdict("UNDERPOWERED", f"not shown: the one-sided bound {bound} is past the margin {edge:+g}, and "
                       f"the power to show non-inferiority were the arms equal is {power:.2f} < {MIN_POWER} given "
                       f"the observed {spec.decides.value} sd {se:.4f}", **common)
    return Verdict("NOT MET", f"not shown: the one-sided bound {bound} is past the margin {edge:+g} (the power to "
                   f"show non-inferiority were the arms equal was {power:.2f})", **common)


def _other(spec):
    """The spec with the other estimand (and its natural sd), or None and why."""
    est = (Estimand.whole_arm if spec.estimand == Estimand.matched_positions else Estimand.matched_positions)
    try:
        return dataclasses.replace(spec, estimand=est, decides=NATURAL_SE[est]), est, ""
    except ValueError as e:                # config.prereg.Invalid: the other estimand does not exist here
        return None, est, str(e)


def sensitivity_of(pr: Prereg, decide, ms: list[Measured]) -> Sensitivity:
    other, est, why = _other(pr.spec)
    if est == Estimand.matched_positions and any(m.paired is None for m in ms):
        return Sensitivity(est, None, next(m.paired_note for m in ms if m.paired is None))
    if other is None:
        return Sensitivity(est, None, why)
    return Sensitivity(est, decide(pr, other, ms))


def panel(pr: Prereg, label: str, delta: float, se: float | None, status: str, **kw) -> DifferenceItem:
    """One panel of the difference figure."""
    spec = pr.spec
    rel = " (relative)" if getattr(spec, "relative", False) else ""
    turns = "" if spec.turns == Turns.all else f" ({spec.turns.value})"
    return DifferenceItem(label=f"{label}\n{spec.primary_metric}{rel}{turns} [{pr.name}]", delta=delta, se=se,
                          se_kind=spec.decides.value, verdict=status, threshold_sd=spec.threshold_sd, **kw)


def maximum_verdict(pr: Prereg, spec, ms: list[Measured], fp: dict | None = None) -> Verdict:
    worst = None
    for name, m in zip(spec.others, ms):
        delta, se, why = effect_of(spec, m, spec.estimand, spec.decides)
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
