"""Pre-registrations: a YAML file fixing the decision before the data exist, locked when the study starts.

Locking (`lock`): the first job of a study copies each pre-registration into the sweep
directory (`<sweep>/prereg/<file>`), atomically, before its first step; every job of the
study records the locked copy's sha256 and text in its manifest. The report then judges
with the locked text (`locked_prereg`), and refuses arms that carry different hashes. A file
edited after the study began gives `PREREG CHANGED` (`changed`) unless the user explicitly
asks to evaluate the edited file, which the report then says at its top.

Verdicts, in this order:
  PREREG CHANGED  the file given is not the text the study locked (see `lock`); no verdict
  UNDERPOWERED  an arm has fewer than min_n_per_arm steps in the metric's denominator, or
                the registered sd could not be computed (too few clusters for a cluster or
                bootstrap sd: stats.MIN_CLUSTERS)
  MET           the effect is in the registered direction, >= min_effect, at >= threshold_sd
                (measured with the registered sd)
  UNDERPOWERED  not met, and the power to detect min_effect at the threshold, given the
                observed sd, is below 0.8: the run could not have shown it (a null is no evidence)
  NOT MET       otherwise
A MET result needs no power check: the threshold was crossed.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
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

    @property
    def arms(self) -> tuple[str, str]:
        return self.control, self.treatment

    def criterion(self) -> str:
        word = "up" if self.direction == "increase" else "down"
        return (f"{self.primary_metric} {word} by >= {self.min_effect:g} at >= {self.threshold_sd:g} sd "
                f"({self.decides} sd decides), {self.treatment} vs {self.control}, "
                f">= {self.min_n_per_arm:,} steps per arm")


def load_prereg(path: str | Path, text: bytes | None = None) -> Prereg:
    """Parse a pre-registration from its file (or from `text`, e.g. a manifest's locked copy)."""
    p = Path(path)
    try:
        raw = p.read_bytes() if text is None else text
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
    status: str   # MET | NOT MET | UNDERPOWERED | PREREG CHANGED
    reason: str
    delta: float
    sd: float | None     # the registered sd (None: it could not be computed)
    z: float      # in the registered direction
    power_at_min_effect: float | None
    n_control: int
    n_treatment: int
    prereg: Prereg

    def summary(self) -> str:
        s = f"{self.status}: {self.reason}\n  criterion: {self.prereg.criterion()}\n"
        if self.sd is None:
            return s + f"  observed {self.delta:+.4f}; no {self.prereg.decides} sd"
        return s + (f"  observed {format_delta(self.delta, self.z)} with the {self.prereg.decides} sd "
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
    nc, nt = diff.control.n, diff.treatment.n
    if not diff.has(pr.decides):
        try:
            diff.sd_by(pr.decides)
        except AtlasError as e:
            why = str(e)
        return Verdict("UNDERPOWERED", f"the registered {pr.decides} sd cannot be computed: {why}",
                       delta=diff.delta, sd=None, z=float("nan"), power_at_min_effect=None,
                       n_control=nc, n_treatment=nt, prereg=pr)
    sd = diff.sd_by(pr.decides)
    sign = 1.0 if pr.direction == "increase" else -1.0
    effect = sign * diff.delta
    z = effect / sd if sd else float("nan")
    power = power_at(pr.min_effect, sd, pr.threshold_sd)
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


def digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def _bare(h: str | None) -> str | None:
    """A sha256 as 64 hex digits (manifests of older runs prefix 'sha256:')."""
    return None if h is None else str(h).removeprefix("sha256:")


def lock(path: str | Path, lock_dir: Path) -> dict:
    """Snapshot a pre-registration once per study (see the module docstring); returns the
    manifest entry: the path as given, the locked copy, its sha256 and text, and the sha256
    the source file has now (equal unless it was edited after the study began)."""
    src = Path(path)
    try:
        raw = src.read_bytes()
    except OSError as e:
        raise AtlasError(f"pre-registration {path} not found ({e.strerror})") from None
    load_prereg(src)                         # a malformed file fails the study before step 1
    dst = Path(lock_dir) / "prereg" / src.name
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=".lock-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, dst)                # atomic and exclusive: the first job wins
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)
    locked = dst.read_bytes()
    return {"path": str(path), "locked_copy": str(dst.resolve()), "sha256": digest(locked),
            "source_sha256": digest(raw), "text": locked.decode("utf-8")}


def changed_fields(a: Prereg, b: Prereg) -> list[str]:
    """The decision fields that differ between two pre-registrations."""
    names = ("primary_metric", "direction", "min_effect", "threshold_sd", "decides", "control",
             "treatment", "min_n_per_arm", "hypothesis")
    return [f"{n}: {getattr(a, n)!r} -> {getattr(b, n)!r}" for n in names if getattr(a, n) != getattr(b, n)]


def locked_preregs(manifests: list[dict]) -> dict[str, dict]:
    """The locked pre-registrations that the runs' manifests carry, by file name.

    All runs of a study must carry the same hash for a given file, or this refuses: a study
    whose arms were judged against different texts has no single criterion."""
    out: dict[str, dict] = {}
    for m in manifests:
        for entry in m.get("preregs") or []:
            name = Path(entry["path"]).name
            seen = out.get(name)
            if seen is not None and _bare(seen["sha256"]) != _bare(entry["sha256"]):
                raise AtlasError(f"pre-registration {name}: the runs carry different locked hashes "
                                 f"({_bare(seen['sha256'])[:12]} in {seen['run']}, {_bare(entry['sha256'])[:12]} "
                                 f"in {m.get('run_dir')}); one study, one criterion")
            out.setdefault(name, {**entry, "run": m.get("run_dir")})
    return out


def from_lock(entry: dict) -> Prereg:
    """The Prereg a manifest's locked entry holds (its text, not today's file)."""
    return load_prereg(entry.get("locked_copy") or entry["path"], text=entry["text"].encode("utf-8"))


def changed(locked: Prereg, given: Prereg, diff: Difference) -> Verdict:
    """The verdict when the file given is not the one the study locked: none, and why."""
    fields = changed_fields(locked, given)
    return Verdict("PREREG CHANGED",
                   f"{given.path.name} was locked at sha256 {locked.sha256[:12]} when the study began and is "
                   f"{given.sha256[:12]} now ({'; '.join(fields) or 'comments/whitespace only'}); judged "
                   "against neither (pass --evaluate-edited to evaluate the edited file anyway)",
                   delta=diff.delta, sd=None, z=float("nan"), power_at_min_effect=None,
                   n_control=diff.control.n, n_treatment=diff.treatment.n, prereg=given)
