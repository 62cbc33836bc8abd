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
from dataclasses import dataclass, fields
from pathlib import Path

import yaml

from atlas_ab import AtlasError
from atlas_ab.atomic import link_bytes
from atlas_ab.analysis.metrics import canonical
from atlas_ab.telemetry.schema import TURN_CLASSES
from atlas_ab.analysis.stats import SD_KINDS, Difference, format_delta

MIN_POWER = 0.8
#: the one timing metric (economics.py): committed tokens per second of step time, live runs only
THROUGHPUT = "tokens_per_second"
KINDS = ("difference", "equivalence", "maximum", "oracle")
#: the sd a criterion may be decided on: stats.SD_KINDS, and `paired` (steps of the two arms
#: matched on (doc_id, turn, position): analysis/paired.py)
DECIDES = SD_KINDS + ("paired",)
_COMMON = ("hypothesis", "threshold_sd", "min_n_per_arm")
_NEEDS = {
    "difference": _COMMON + ("primary_metric", "direction", "min_effect", "decides", "arms"),
    "equivalence": _COMMON + ("primary_metric", "margin", "decides", "arms"),
    "maximum": _COMMON + ("primary_metric", "decides", "best", "others"),
    "oracle": _COMMON + ("arm", "min_share"),
}


@dataclass(frozen=True)
class Prereg:
    """One pre-registered question. Kinds (what `criterion()` says in words):
      difference   treatment - control of a metric, in a direction, >= min_effect at >= threshold_sd
      equivalence  |treatment - control| + threshold_sd * sd <= margin (the two arms do not differ)
      maximum      the `best` arm beats every one of `others` by >= threshold_sd sd (+ optionally
                   its fingerprint table reads 100%)
      oracle       within one ORACLE_P2 arm: the probe's McNemar z >= threshold_sd and it recovers
                   >= min_share of the p1 - p2_cond gap
    `turns` restricts any of them to a turn class (all | cold | warm)."""
    path: Path
    sha256: str
    name: str
    kind: str
    hypothesis: str
    threshold_sd: float
    min_n_per_arm: int
    primary_metric: str = "p2_uncond"
    direction: str = "increase"     # difference
    min_effect: float = 0.0         # difference
    decides: str = "binomial"       # one of DECIDES (oracle: McNemar's own z)
    control: str = ""               # difference, equivalence
    treatment: str = ""
    turns: str = "all"
    margin: float = 0.0             # equivalence
    best: str = ""                  # maximum
    others: tuple = ()
    fingerprints: bool = False      # maximum: the best arm's fingerprint table must read 100%
    relative: bool = False          # difference: min_effect and the sd are relative to the control's value
    arm: str = ""                   # oracle
    min_share: float = 0.0

    @property
    def arms(self) -> tuple[str, ...]:
        if self.kind == "oracle":
            return (self.arm,)
        if self.kind == "maximum":
            return (self.best, *self.others)
        return self.control, self.treatment

    def criterion(self) -> str:
        where = "" if self.turns == "all" else f" on {self.turns} turns"
        n = f">= {self.min_n_per_arm:,} steps per arm"
        if self.kind == "difference":
            word = "up" if self.direction == "increase" else "down"
            size = f"{self.min_effect:.0%} (relative)" if self.relative else f"{self.min_effect:g}"
            return (f"{self.primary_metric}{where} {word} by >= {size} at >= {self.threshold_sd:g} sd "
                    f"({self.decides} sd decides), {self.treatment} vs {self.control}, {n}")
        if self.kind == "equivalence":
            return (f"{self.primary_metric}{where}: |{self.treatment} - {self.control}| + {self.threshold_sd:g} sd "
                    f"<= {self.margin:g} ({self.decides} sd decides), {n}")
        if self.kind == "maximum":
            fp = "; its fingerprint table reads 100%" if self.fingerprints else ""
            return (f"{self.primary_metric}{where}: {self.best} above each of {', '.join(self.others)} by "
                    f">= {self.threshold_sd:g} sd ({self.decides} sd decides){fp}, {n}")
        return (f"{self.arm}{where}: ORACLE_P2 McNemar z >= {self.threshold_sd:g} (oracle better) and it "
                f"recovers >= {self.min_share:.0%} of the p1 - p2_cond gap, >= {self.min_n_per_arm:,} probed steps")


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
    kind = doc.get("kind", "difference")
    if kind not in KINDS:
        raise AtlasError(f"{p}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    missing = [f for f in _NEEDS[kind] if f not in doc]
    if missing:
        raise AtlasError(f"{p}: missing field {missing[0]!r} (a {kind} pre-registration needs "
                         f"{', '.join(_NEEDS[kind])})")
    known = set(_NEEDS[kind]) | {"name", "kind", "turns", "fingerprints", "relative", "notes", "power"}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise AtlasError(f"{p}: unknown field {unknown[0]!r} for a {kind} pre-registration")
    kw: dict = {}
    try:
        kw["threshold_sd"], kw["min_n_per_arm"] = float(doc["threshold_sd"]), int(doc["min_n_per_arm"])
        if "primary_metric" in doc:
            m = str(doc["primary_metric"])
            kw["primary_metric"] = m if m == THROUGHPUT else canonical(m)
        for f in ("min_effect", "margin", "min_share"):
            if f in doc:
                kw[f] = float(doc[f])
    except (AtlasError, TypeError, ValueError) as e:
        raise AtlasError(f"{p}: {e}") from None
    if kw["threshold_sd"] <= 0 or kw.get("min_effect", 1) <= 0 or kw.get("margin", 1) <= 0:
        raise AtlasError(f"{p}: threshold_sd, min_effect and margin must be > 0")
    if "direction" in doc:
        if doc["direction"] not in ("increase", "decrease"):
            raise AtlasError(f"{p}: direction must be increase or decrease, got {doc['direction']!r}")
        kw["direction"] = doc["direction"]
    if "decides" in doc:
        if doc["decides"] not in DECIDES:
            raise AtlasError(f"{p}: decides must be one of {', '.join(DECIDES)}, got {doc['decides']!r}")
        kw["decides"] = doc["decides"]
    turns = doc.get("turns", "all")
    if turns not in TURN_CLASSES:
        raise AtlasError(f"{p}: turns must be one of {', '.join(TURN_CLASSES)}, got {turns!r}")
    if "arms" in doc:
        arms = doc["arms"]
        if not isinstance(arms, dict) or not {"control", "treatment"} <= set(arms):
            raise AtlasError(f"{p}: arms must name control and treatment")
        kw["control"], kw["treatment"] = str(arms["control"]), str(arms["treatment"])
    kw["relative"] = bool(doc.get("relative", False))
    if kw.get("primary_metric") == THROUGHPUT and kind != "difference":
        raise AtlasError(f"{p}: {THROUGHPUT} is judged as a difference only")
    if kind == "maximum":
        if not isinstance(doc["others"], list) or not doc["others"]:
            raise AtlasError(f"{p}: others must be a non-empty list of arm names")
        kw["best"], kw["others"] = str(doc["best"]), tuple(str(a) for a in doc["others"])
        kw["fingerprints"] = bool(doc.get("fingerprints", False))
    if kind == "oracle":
        kw["arm"] = str(doc["arm"])
        if not 0 < kw["min_share"] <= 10:
            raise AtlasError(f"{p}: min_share must be in (0, 10], got {kw['min_share']}")
    return Prereg(path=p, sha256=hashlib.sha256(raw).hexdigest(), name=str(doc.get("name", p.stem)), kind=kind,
                  hypothesis=str(doc["hypothesis"]).strip(), turns=turns, **kw)


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
        s = f"{self.status} ({self.prereg.name}): {self.reason}\n  criterion: {self.prereg.criterion()}\n"
        if self.sd is None:
            return s + f"  observed {self.delta:+.4f}; no {self.prereg.decides} sd"
        power = ("" if self.power_at_min_effect is None
                 else f"; power to detect the minimum effect {self.power_at_min_effect:.2f}")
        return s + f"  observed {format_delta(self.delta, self.z)} with the {self.prereg.decides} sd {self.sd:.4f}{power}"

    __str__ = summary

    def to_dict(self) -> dict:
        return {"name": self.prereg.name, "kind": self.prereg.kind, "status": self.status, "reason": self.reason,
                "delta": self.delta, "sd": self.sd, "z": self.z, "power_at_min_effect": self.power_at_min_effect,
                "n_control": self.n_control, "n_treatment": self.n_treatment,
                "criterion": self.prereg.criterion(), "prereg": str(self.prereg.path),
                "prereg_sha256": self.prereg.sha256, "decides": self.prereg.decides}


def evaluate(pr: Prereg, diff: Difference) -> Verdict:
    """Judge a measured difference (treatment - control of the primary metric) against a
    `difference` pre-registration (decided on one of stats.SD_KINDS; criteria.py judges the
    other kinds and the paired sd)."""
    if diff.metric != pr.primary_metric:
        raise AtlasError(f"{pr.path}: primary metric is {pr.primary_metric}, the difference is {diff.metric}")
    nc, nt = diff.control.n, diff.treatment.n
    if not diff.has(pr.decides):
        try:
            diff.sd_by(pr.decides)
        except AtlasError as e:
            why = str(e)
        return unavailable(pr, diff.delta, nc, nt, why)
    return judge_effect(pr, diff.delta, diff.sd_by(pr.decides), nc, nt)


def unavailable(pr: Prereg, delta: float, nc: int, nt: int, why: str) -> Verdict:
    return Verdict("UNDERPOWERED", f"the registered {pr.decides} sd cannot be computed: {why}",
                   delta=delta, sd=None, z=float("nan"), power_at_min_effect=None, n_control=nc, n_treatment=nt,
                   prereg=pr)


def judge_effect(pr: Prereg, delta: float, sd: float, nc: int, nt: int) -> Verdict:
    """The difference criterion on an estimate and its registered sd."""
    sign = 1.0 if pr.direction == "increase" else -1.0
    effect = sign * delta
    z = effect / sd if sd else float("nan")
    from atlas_ab.analysis.sizing import power_at    # scipy on first use: see analysis/__init__.py

    power = power_at(pr.min_effect, sd, pr.threshold_sd)
    common = dict(delta=delta, sd=sd, z=z, power_at_min_effect=power, n_control=nc, n_treatment=nt, prereg=pr)
    if min(nc, nt) < pr.min_n_per_arm:
        return Verdict("UNDERPOWERED", f"n below the pre-registered minimum of {pr.min_n_per_arm:,} per arm "
                       f"({pr.control} n={nc:,}, {pr.treatment} n={nt:,})", **common)
    if effect >= pr.min_effect and z >= pr.threshold_sd:
        return Verdict("MET", f"{pr.primary_metric} moved {delta:+.4f} ({z:.1f} sd), "
                       f">= {pr.min_effect:g} at >= {pr.threshold_sd:g} sd", **common)
    if power < MIN_POWER:
        return Verdict("UNDERPOWERED", f"not met, and the power to detect the minimum effect "
                       f"{pr.min_effect:g} at {pr.threshold_sd:g} sd is {power:.2f} < {MIN_POWER} "
                       f"given the observed {pr.decides} sd {sd:.4f}", **common)
    why = (f"effect {delta:+.4f} is below the minimum {pr.min_effect:g} in the registered direction"
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
    link_bytes(dst, raw)                     # atomic and exclusive: the first job wins
    locked = dst.read_bytes()
    return {"path": str(path), "locked_copy": str(dst.resolve()), "sha256": digest(locked),
            "source_sha256": digest(raw), "text": locked.decode("utf-8")}


def changed_fields(a: Prereg, b: Prereg) -> list[str]:
    """The decision fields that differ between two pre-registrations."""
    names = [f.name for f in fields(Prereg) if f.name not in ("path", "sha256")]
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


def changed(locked: Prereg, given: Prereg) -> Verdict:
    """The verdict when the file given is not the one the study locked: none, and why."""
    diffs = changed_fields(locked, given)
    return Verdict("PREREG CHANGED",
                   f"{given.path.name} was locked at sha256 {locked.sha256[:12]} when the study began and is "
                   f"{given.sha256[:12]} now ({'; '.join(diffs) or 'comments/whitespace only'}); judged "
                   "against neither (pass --evaluate-edited to evaluate the edited file anyway)",
                   delta=float("nan"), sd=None, z=float("nan"), power_at_min_effect=None,
                   n_control=0, n_treatment=0, prereg=given)
