"""What a judgement of a pre-registration says: the verdict, its sensitivity line, the panels it
draws (plain data: matplotlib is imported only where a figure is drawn), the rules in words, and
the verdicts given without judging (a changed or unlocked text)."""
from __future__ import annotations

from dataclasses import dataclass, field

from atlas_ab.analysis.stats import format_delta
from atlas_ab.config.prereg import ESTIMAND_WORDS, Estimand, Prereg, Registration, changed_fields

#: Each kind's decision rule, in the words the report and docs/analysis.md print.
RULES = {
    "difference": "MET when the effect is in the registered direction, >= min_effect (relative to the "
                  "control's value with relative: true) and >= threshold_sd of the registered sd",
    "equivalence": "MET when abs(delta) + threshold_sd x sd <= margin; UNDERPOWERED when threshold_sd x sd "
                   "alone exceeds the margin",
    "noninferiority": "MET when the one-sided bound of treatment - control in the registered (better) direction, "
                      "delta - threshold_sd x sd, is >= -margin; NOT MET when its other bound, delta + threshold_sd "
                      "x sd, is < -margin (shown worse than the margin), or neither and the power to show it were "
                      "the arms equal is >= 0.8; else UNDERPOWERED",
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
    "noninferiority": "as difference",
    "maximum": "as difference, for each best - other comparison",
    "oracle": "within the arm: the real draft 2 vs the oracle's on the same probed step (steps that accepted "
              "draft 1 with k >= 2)",
}


CLUSTER_UNITS = {
    "difference": "`cluster`: source file (default: the workload's doc_cluster map; a workload with one document "
                  "per file clusters by document) or document; the binomial sd is not clustered",
    "equivalence": "as difference",
    "noninferiority": "as difference",
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


def power_words(pr: Prereg) -> str:
    """What a two-arm verdict's power is the power to do, in the report's words."""
    if pr.kind == "noninferiority":
        return f"show non-inferiority (margin {pr.spec.margin:g}) were the arms equal"
    return f"detect the minimum effect ({pr.spec.min_effect:g})"


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
        what = ("show non-inferiority were the arms equal" if self.prereg.kind == "noninferiority" else
                "detect the minimum effect")
        power = ("" if self.power_at_min_effect is None or self.se is None
                 else f"; power to {what} {self.power_at_min_effect:.2f}")
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
class DifferenceItem:
    """One comparison as the difference figure draws it."""
    label: str              # "refeed_on - catchup_on: p2_uncond"
    delta: float
    se: float | None        # the deciding sd (None: not computed)
    se_kind: str
    verdict: str | None = None      # MET / NOT MET / ... (None: no pre-registration)
    min_effect: float | None = None
    threshold_sd: float | None = None
    direction: str = "increase"
    margin: float | None = None     # an equivalence criterion's +-margin


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
