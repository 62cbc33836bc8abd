"""Pre-registrations: a YAML file fixing the decision before the data exist.

Verdicts, in this order:
  UNDERPOWERED  an arm has fewer than min_n_per_arm steps in the metric's denominator
  MET           the effect is in the registered direction, >= min_effect, at >= threshold_sd
                (measured with the registered sd)
  UNDERPOWERED  not met, and the power to detect min_effect at the threshold, given the
                observed sd, is below 0.8: the run could not have shown it (a null is no evidence)
  NOT MET       otherwise
A MET result needs no power check: the threshold was crossed.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import yaml

from atlas_ab import AtlasError
from atlas_ab.analysis.metrics import canonical
from atlas_ab.analysis.sizing import power_at
from atlas_ab.analysis.stats import SD_KINDS, Difference, format_delta

MIN_POWER = 0.8
FIELDS = ("hypothesis", "primary_metric", "direction", "min_effect", "threshold_sd", "decides",
          "arms", "min_n_per_arm")


@dataclass(frozen=True)
class Prereg:
    path: Path
    sha256: str
    name: str
    hypothesis: str
    primary_metric: str
    direction: str          # increase | decrease
    min_effect: float
    threshold_sd: float
    decides: str            # binomial | cluster | bootstrap
    control: str
    treatment: str
    min_n_per_arm: int

    def criterion(self) -> str:
        word = "up" if self.direction == "increase" else "down"
        return (f"{self.primary_metric} {word} by >= {self.min_effect:g} at >= {self.threshold_sd:g} sd "
                f"({self.decides} sd decides), {self.treatment} vs {self.control}, "
                f">= {self.min_n_per_arm:,} steps per arm")


def load_prereg(path: str | Path) -> Prereg:
    p = Path(path)
    try:
        raw = p.read_bytes()
        doc = yaml.safe_load(raw)
    except (OSError, yaml.YAMLError) as e:
        raise AtlasError(f"{p}: unreadable pre-registration ({e.__class__.__name__})") from None
    if not isinstance(doc, dict):
        raise AtlasError(f"{p}: a pre-registration is a YAML mapping")
    missing = [f for f in FIELDS if f not in doc]
    if missing:
        raise AtlasError(f"{p}: missing field {missing[0]!r}")
    arms = doc["arms"]
    if not isinstance(arms, dict) or not {"control", "treatment"} <= set(arms):
        raise AtlasError(f"{p}: arms must name control and treatment")
    if doc["direction"] not in ("increase", "decrease"):
        raise AtlasError(f"{p}: direction must be increase or decrease, got {doc['direction']!r}")
    if doc["decides"] not in SD_KINDS:
        raise AtlasError(f"{p}: decides must be one of {', '.join(SD_KINDS)}, got {doc['decides']!r}")
    try:
        metric = canonical(str(doc["primary_metric"]))
        numbers = float(doc["min_effect"]), float(doc["threshold_sd"]), int(doc["min_n_per_arm"])
    except (AtlasError, TypeError, ValueError) as e:
        raise AtlasError(f"{p}: {e}") from None
    if numbers[0] <= 0 or numbers[1] <= 0:
        raise AtlasError(f"{p}: min_effect and threshold_sd must be > 0")
    return Prereg(path=p, sha256=hashlib.sha256(raw).hexdigest(), name=str(doc.get("name", p.stem)),
                  hypothesis=str(doc["hypothesis"]).strip(), primary_metric=metric,
                  direction=doc["direction"], min_effect=numbers[0], threshold_sd=numbers[1],
                  decides=doc["decides"], control=str(arms["control"]), treatment=str(arms["treatment"]),
                  min_n_per_arm=numbers[2])


@dataclass(frozen=True)
class Verdict:
    status: str   # MET | NOT MET | UNDERPOWERED
    reason: str
    delta: float
    sd: float
    z: float      # in the registered direction
    power_at_min_effect: float
    n_control: int
    n_treatment: int
    prereg: Prereg

    def summary(self) -> str:
        return (f"{self.status}: {self.reason}\n  criterion: {self.prereg.criterion()}\n"
                f"  observed {format_delta(self.delta, self.z)} with the {self.prereg.decides} sd "
                f"{self.sd:.4f}; power to detect the minimum effect {self.power_at_min_effect:.2f}")

    __str__ = summary

    def to_dict(self) -> dict:
        return {"status": self.status, "reason": self.reason, "delta": self.delta, "sd": self.sd,
                "z": self.z, "power_at_min_effect": self.power_at_min_effect,
                "n_control": self.n_control, "n_treatment": self.n_treatment,
                "criterion": self.prereg.criterion(), "prereg": str(self.prereg.path),
                "prereg_sha256": self.prereg.sha256, "decides": self.prereg.decides}


def evaluate(pr: Prereg, diff: Difference) -> Verdict:
    """Judge a measured difference (treatment - control of the primary metric) against pr."""
    if diff.metric != pr.primary_metric:
        raise AtlasError(f"{pr.path}: primary metric is {pr.primary_metric}, the difference is {diff.metric}")
    sd = diff.sd_by(pr.decides)
    sign = 1.0 if pr.direction == "increase" else -1.0
    effect = sign * diff.delta
    z = effect / sd if sd else float("nan")
    power = power_at(pr.min_effect, sd, pr.threshold_sd)
    nc, nt = diff.control.n, diff.treatment.n
    common = dict(delta=diff.delta, sd=sd, z=z, power_at_min_effect=power, n_control=nc,
                  n_treatment=nt, prereg=pr)
    if min(nc, nt) < pr.min_n_per_arm:
        return Verdict("UNDERPOWERED", f"n below the pre-registered minimum of {pr.min_n_per_arm:,} per arm "
                       f"({pr.control} n={nc:,}, {pr.treatment} n={nt:,})", **common)
    if effect >= pr.min_effect and z >= pr.threshold_sd:
        return Verdict("MET", f"{pr.primary_metric} moved {diff.delta:+.4f} ({z:.1f} sd), "
                       f">= {pr.min_effect:g} at >= {pr.threshold_sd:g} sd", **common)
    if power < MIN_POWER:
        return Verdict("UNDERPOWERED", f"not met, and the power to detect the minimum effect "
                       f"{pr.min_effect:g} at {pr.threshold_sd:g} sd is {power:.2f} < {MIN_POWER} "
                       f"given the observed {pr.decides} sd {sd:.4f}", **common)
    why = (f"effect {diff.delta:+.4f} is below the minimum {pr.min_effect:g} in the registered direction"
           if effect < pr.min_effect else f"z {z:.1f} is below the threshold {pr.threshold_sd:g} sd")
    return Verdict("NOT MET", why, **common)
