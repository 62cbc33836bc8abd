"""Pre-registrations: a YAML file fixing the decision before the data exist (parse, validate,
hash, lock). The run side locks them through this module, so it needs yaml, hashlib and
OmegaConf only; judging them against runs is analysis/criteria/.

One typed structure per kind (`KINDS`); the type is the validation: a missing field, a field
of another kind, a wrong type or an unknown value is one line naming the field, and the value
checks a type cannot express (finite, positive, two different arms) are in `__post_init__`.

Identity is the content: a pre-registration is locked for a set of runs only if every arm it
names holds its sha256 in its manifest (`registrations`). The first job of a study copies each
pre-registration into the sweep directory (`lock`) before its first step; every job records
the locked copy's sha256 and text in its manifest, and the report judges that text.
"""
from __future__ import annotations

import copy
import hashlib
import math
import typing
from dataclasses import dataclass, fields
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, List, Optional, Union

import yaml
from omegaconf import MISSING, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from atlas_ab import AtlasError
from atlas_ab.atomic import link_bytes
from atlas_ab.telemetry.acceptance import THROUGHPUT, canonical


class Turns(str, Enum):
    all = "all"      # every turn
    cold = "cold"    # turn 0
    warm = "warm"    # turns >= 1


class Direction(str, Enum):
    increase = "increase"
    decrease = "decrease"


class Decides(str, Enum):
    """The sd a criterion is decided on (docs/analysis.md, "The sds, side by side")."""
    binomial = "binomial"     # i.i.d. steps, independent arms (the delta method for ratio metrics)
    cluster = "cluster"       # CRV1 over the cluster unit, one cluster in both arms
    bootstrap = "bootstrap"   # clusters resampled jointly in both arms
    paired = "paired"         # CRV1 over clusters of matched-position differences


class Estimand(str, Enum):
    matched_positions = "matched_positions"   # steps of both arms at the same (doc_id, turn, position)
    whole_arm = "whole_arm"                   # each arm's value over all its steps (docs/telemetry.md)


class LookUnit(str, Enum):
    wave = "wave"          # a look when a wave (runner.batch_width documents) ends
    cluster = "cluster"    # a look every N clusters of the cluster unit (at the end of the wave that completes them)


class ClusterUnit(str, Enum):
    source_file = "source_file"   # the workload's doc_cluster map: documents cut from one file are one cluster
    document = "document"


#: the words the report and docs/analysis.md use for each estimand and cluster unit
ESTIMAND_WORDS = {Estimand.matched_positions: "matched positions", Estimand.whole_arm: "whole arm"}
UNIT_WORDS = {ClusterUnit.source_file: "source file", ClusterUnit.document: "document"}
#: the sd each estimand is decided on by default, and the other estimand's (the sensitivity line)
NATURAL_SE = {Estimand.matched_positions: Decides.paired, Estimand.whole_arm: Decides.cluster}


class Invalid(ValueError):
    """A value a type cannot refuse: (field, what is wrong)."""

    def __init__(self, name: str, why: str):
        super().__init__(f"{name}: {why}")
        self.field, self.why = name, why


def _finite_positive(name: str, v: float) -> None:
    if not math.isfinite(v) or v <= 0:
        raise Invalid(name, f"must be a finite number > 0, got {v}")


def _arm(name: str, v: str) -> None:
    if not isinstance(v, str) or not v.strip():
        raise Invalid(name, f"must be an arm name, got {v!r}")


@dataclass
class _Question:
    """Fields every kind has. The registered minimum names the unit it counts: steps per arm
    (`min_n_per_arm`), matched pairs (`min_pairs`), clusters of the cluster unit (`min_clusters`)."""
    KIND: ClassVar[str] = ""
    hypothesis: str = MISSING
    threshold_sd: float = MISSING
    name: Optional[str] = None
    turns: Turns = Turns.all
    min_n_per_arm: Optional[int] = None
    min_pairs: Optional[int] = None
    min_clusters: Optional[int] = None
    notes: Any = None      # free text for the reader; never judged
    power: Any = None      # the power calculation, as free text

    def __post_init__(self) -> None:
        _finite_positive("threshold_sd", self.threshold_sd)
        mins = self.minimums()
        if not mins:
            raise Invalid("min_n_per_arm", "missing: register at least one of min_n_per_arm (steps per arm), "
                                           "min_pairs (matched pairs), min_clusters")
        for f, v in mins.items():
            if v < 1:
                raise Invalid(f, f"must be a whole number >= 1, got {v}")

    def minimums(self) -> dict[str, int]:
        """The registered minimum counts, by field."""
        return {f: getattr(self, f) for f in ("min_n_per_arm", "min_pairs", "min_clusters")
                if getattr(self, f) is not None}

    def _where(self) -> str:
        return "" if self.turns == Turns.all else f" on {self.turns.value} turns"

    def _counts(self, steps: str = "steps per arm", unit: str = "cluster") -> str:
        words = {"min_n_per_arm": steps, "min_pairs": "matched pairs", "min_clusters": f"{unit}s"}
        return ", ".join(f">= {v:,} {words[f]}" for f, v in self.minimums().items())


SEQUENTIAL_METHODS = ("hedged_capital", "asymptotic")
#: the kinds a `sequential:` block may judge (analysis/sequential/judge.py)
SEQUENTIAL_KINDS = ("difference", "noninferiority")


@dataclass
class Sequential:
    """A sequential study: judge after each look with an always-valid confidence sequence
    (analysis/sequential/judge.py) and stop when it decides or the budget ends.
      method       hedged_capital: the betting CS of Waudby-Smith & Ramdas (JRSS-B 2024), exact at
                   every n; asymptotic: the asymptotic CS of Waudby-Smith et al. (Ann. Statist. 2024),
                   valid as the clusters grow, tighter when the differences fill little of their range
      alpha        the level every look shares (valid at all looks at once)
      look_every   a look every N `look_unit`s (whole waves: the runner looks when a wave ends)
      max_waves / max_clusters   the budget (at least one); UNDERPOWERED when it ends undecided"""
    alpha: float = MISSING
    look_every: int = 1
    look_unit: LookUnit = LookUnit.wave
    method: str = "hedged_capital"
    max_waves: Optional[int] = None
    max_clusters: Optional[int] = None

    def __post_init__(self) -> None:
        if self.method not in SEQUENTIAL_METHODS:
            raise Invalid("sequential.method", f"must be one of {', '.join(SEQUENTIAL_METHODS)}, got {self.method!r}")
        if not (math.isfinite(self.alpha) and 0 < self.alpha < 1):
            raise Invalid("sequential.alpha", f"must be in (0, 1), got {self.alpha}")
        if self.look_every < 1:
            raise Invalid("sequential.look_every", f"must be a whole number >= 1 of {self.look_unit.value}s, got "
                                                   f"{self.look_every}: a look finer than a wave cannot happen")
        if self.max_waves is None and self.max_clusters is None:
            raise Invalid("sequential.max_waves", "missing: register the budget (max_waves or max_clusters), "
                                                  "where an undecided study stops as UNDERPOWERED")
        for f in ("max_waves", "max_clusters"):
            v = getattr(self, f)
            if v is not None and v < 1:
                raise Invalid(f"sequential.{f}", f"must be a whole number >= 1, got {v}")

    def check_wave(self, batch_width: int, docs_per_cluster: float = 1.0) -> None:
        """Refuse a look schedule finer than a wave of `batch_width` documents (the runner looks
        only when a wave ends); `docs_per_cluster`: documents per cluster of the cluster unit."""
        if self.look_unit == LookUnit.cluster and self.look_every * docs_per_cluster < batch_width:
            raise AtlasError(f"sequential.look_every: a look every {self.look_every} clusters is finer than a wave "
                             f"of {batch_width} documents (runner.batch_width); the runner looks only when a wave "
                             "ends: look every wave (look_unit: wave) or every >= "
                             f"{math.ceil(batch_width / docs_per_cluster)} clusters")

    def words(self) -> str:
        budget = " and ".join(f"{v:,} {w}" for v, w in ((self.max_waves, "waves"), (self.max_clusters, "clusters"))
                              if v is not None)
        every = f"every {self.look_unit.value}" if self.look_every == 1 else \
            f"every {self.look_every} {self.look_unit.value}s"
        return f"sequential ({self.method}, alpha {self.alpha:g}, a look {every}, at most {budget})"


@dataclass
class _Compared(_Question):
    """A metric compared between arms: its estimand, the sd that decides, the cluster unit."""
    primary_metric: str = MISSING
    decides: Decides = MISSING
    estimand: Optional[Estimand] = None      # default: matched_positions iff decides is paired
    cluster: ClusterUnit = ClusterUnit.source_file
    sequential: Optional[Sequential] = None  # None: a fixed-n registration

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.primary_metric != THROUGHPUT:
            try:
                self.primary_metric = canonical(self.primary_metric)
            except AtlasError as e:
                raise Invalid("primary_metric", str(e)) from None
        if self.estimand is None:
            self.estimand = Estimand.matched_positions if self.decides == Decides.paired else Estimand.whole_arm
        if (self.estimand == Estimand.matched_positions) != (self.decides == Decides.paired):
            raise Invalid("estimand", f"{self.estimand.value} is decided on "
                          + ("the paired sd (decides: paired)" if self.estimand == Estimand.matched_positions
                             else "a whole-arm sd (decides: binomial, cluster or bootstrap), not the paired one"))
        if self.primary_metric == THROUGHPUT and (self.decides != Decides.cluster or self.KIND != "difference"):
            raise Invalid("decides", f"{THROUGHPUT} is judged as a difference of whole arms on the cluster sd")
        if self.sequential is not None and (self.KIND not in SEQUENTIAL_KINDS or self.primary_metric == THROUGHPUT):
            raise Invalid("sequential", "a sequential study judges a difference of an acceptance metric, not "
                          + (THROUGHPUT if self.primary_metric == THROUGHPUT else
                             f"kind: {self.KIND} (the kinds it judges: {', '.join(SEQUENTIAL_KINDS)})"))

    @property
    def se_words(self) -> str:
        """'paired sd clustered by source file' (what decides, in the report's words)."""
        if self.decides == Decides.binomial:
            return "binomial sd"
        return f"{self.decides.value} sd clustered by {UNIT_WORDS[self.cluster]}"

    def _rule(self) -> str:
        return f"decided on the {self.se_words}; estimand: {ESTIMAND_WORDS[self.estimand]}"

    def _counts(self, steps: str = "steps per arm", unit: str = "") -> str:
        return super()._counts(steps, UNIT_WORDS[self.cluster])


@dataclass
class Arms:
    control: str = MISSING
    treatment: str = MISSING


@dataclass
class DifferenceSpec(_Compared):
    """treatment - control of a metric, in a direction, >= min_effect at >= threshold_sd sd
    (relative: min_effect and the sd are relative to the control's value)."""
    KIND: ClassVar[str] = "difference"
    direction: Direction = MISSING
    min_effect: float = MISSING
    arms: Arms = MISSING
    relative: bool = False
    # tokens_per_second only: the runs an arm is timed in, each its own process, pooled by random effects
    # (analysis/ladder/throughput.py): one job's spread misses what differs between jobs (issue 51)
    replicates: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        _finite_positive("min_effect", self.min_effect)
        _two_arms(self.arms)
        if isinstance(self.replicates, bool) or not isinstance(self.replicates, int) or self.replicates < 1:
            raise Invalid("replicates", f"must be a whole number >= 1, got {self.replicates!r}")
        if self.replicates > 1 and (self.primary_metric != THROUGHPUT or not self.relative):
            other = "an absolute one" if self.primary_metric == THROUGHPUT else self.primary_metric
            raise Invalid("replicates", f"replicate runs decide a relative {THROUGHPUT} difference (relative: "
                                        f"true), not {other}")
        if self.relative and self.decides not in (Decides.binomial, Decides.cluster):
            raise Invalid("relative", "a relative difference is decided on a whole-arm binomial or cluster sd "
                                      f"(the delta method), not the {self.decides.value} sd")
        if self.relative and self.sequential is not None:
            raise Invalid("sequential", "a sequential study judges an absolute difference (relative: false)")

    @property
    def arm_names(self) -> tuple[str, ...]:
        return self.arms.control, self.arms.treatment

    def criterion(self) -> str:
        word = "up" if self.direction == Direction.increase else "down"
        size = f"{self.min_effect:.0%} (relative)" if self.relative else f"{self.min_effect:g}"
        seq = "" if self.sequential is None else f"; {self.sequential.words()}"
        reps = "" if self.replicates == 1 else \
            f", over >= {self.replicates} runs an arm, each its own process (random effects, a t of R - 1 df)"
        return (f"{self.primary_metric}{self._where()} {word} by >= {size} at >= {self.threshold_sd:g} sd "
                f"({self._rule()}), {self.arms.treatment} vs {self.arms.control}, {self._counts()}{reps}{seq}")


@dataclass
class _Margined(_Compared):
    """Two arms judged against a margin (equivalence, non-inferiority): each kind declares its `margin`
    and `arms` fields itself, after its own, so their order (and the errors that list them) is the kind's."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _finite_positive("margin", self.margin)
        _two_arms(self.arms)

    @property
    def arm_names(self) -> tuple[str, ...]:
        return self.arms.control, self.arms.treatment


@dataclass
class EquivalenceSpec(_Margined):
    """|treatment - control| + threshold_sd * sd <= margin: the arms do not differ."""
    KIND: ClassVar[str] = "equivalence"
    margin: float = MISSING
    arms: Arms = MISSING

    def criterion(self) -> str:
        return (f"{self.primary_metric}{self._where()}: |{self.arms.treatment} - {self.arms.control}| + "
                f"{self.threshold_sd:g} sd <= {self.margin:g} ({self._rule()}), {self._counts()}")


@dataclass
class NoninferioritySpec(_Margined):
    """The treatment is no worse than the control by more than `margin` (the metric's units), in the
    `direction` that is better (increase: treatment - control >= -margin; decrease: <= +margin), shown
    by the one-sided bound at threshold_sd of the registered sd (1.6449: a one-sided 5% level)."""
    KIND: ClassVar[str] = "noninferiority"
    direction: Direction = MISSING
    margin: float = MISSING
    arms: Arms = MISSING

    def criterion(self) -> str:
        t, c = self.arms.treatment, self.arms.control
        bound = f">= -{self.margin:g} (higher is better)" if self.direction == Direction.increase else \
            f"<= +{self.margin:g} (lower is better)"
        seq = "" if self.sequential is None else f"; {self.sequential.words()}"
        return (f"{self.primary_metric}{self._where()}: {t} - {c} {bound} at {self.threshold_sd:g} sd, one-sided "
                f"({self._rule()}), {self._counts()}{seq}")


@dataclass
class MaximumSpec(_Compared):
    """The `best` arm is above every one of `others` by >= threshold_sd sd (and, with
    `fingerprints`, its fingerprint table reads 100%)."""
    KIND: ClassVar[str] = "maximum"
    best: str = MISSING
    others: List[str] = MISSING
    fingerprints: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _arm("best", self.best)
        if not self.others:
            raise Invalid("others", "must be a non-empty list of arm names")
        for a in self.others:
            _arm("others", a)
        if self.best in self.others or len(set(self.others)) != len(self.others):
            raise Invalid("others", f"must name each other arm once and not the best arm {self.best!r}")

    @property
    def arm_names(self) -> tuple[str, ...]:
        return (self.best, *self.others)

    def criterion(self) -> str:
        fp = "; its fingerprint table reads 100%" if self.fingerprints else ""
        return (f"{self.primary_metric}{self._where()}: {self.best} above each of {', '.join(self.others)} by "
                f">= {self.threshold_sd:g} sd ({self._rule()}){fp}, {self._counts()}")


@dataclass
class OracleSpec(_Question):
    """Within one ORACLE_P2 arm: the probe's McNemar z >= threshold_sd (oracle better) and it
    recovers >= min_share of the p1 - p2_cond gap. Its pairs are the arm's probed steps, so
    min_n_per_arm and min_pairs count the same thing."""
    KIND: ClassVar[str] = "oracle"
    arm: str = MISSING
    min_share: float = MISSING

    def __post_init__(self) -> None:
        super().__post_init__()
        _arm("arm", self.arm)
        if not (math.isfinite(self.min_share) and 0 < self.min_share <= 10):
            raise Invalid("min_share", f"must be in (0, 10], got {self.min_share}")
        if self.min_clusters is not None:
            raise Invalid("min_clusters", "the oracle probe is a within-run McNemar test: it counts probed steps "
                                          "(min_n_per_arm or min_pairs), not clusters")

    @property
    def arm_names(self) -> tuple[str, ...]:
        return (self.arm,)

    def criterion(self) -> str:
        return (f"{self.arm}{self._where()}: ORACLE_P2 McNemar z >= {self.threshold_sd:g} (oracle better) and it "
                f"recovers >= {self.min_share:.0%} of the p1 - p2_cond gap, "
                f"{self._counts(steps='probed steps')}")


def _two_arms(arms: Arms) -> None:
    _arm("arms.control", arms.control)
    _arm("arms.treatment", arms.treatment)
    if arms.control == arms.treatment:
        raise Invalid("arms", f"control and treatment are the same arm {arms.control!r}: nothing to compare")


Spec = Union[DifferenceSpec, EquivalenceSpec, NoninferioritySpec, MaximumSpec, OracleSpec]
KINDS: dict[str, type] = {c.KIND: c for c in (DifferenceSpec, EquivalenceSpec, NoninferioritySpec, MaximumSpec,
                                              OracleSpec)}


@dataclass(frozen=True)
class Prereg:
    """One pre-registered question: where its text came from, the text's sha256, its typed spec."""
    path: Path
    sha256: str
    spec: Spec

    @property
    def kind(self) -> str:
        return self.spec.KIND

    @property
    def name(self) -> str:
        return self.spec.name or self.path.stem

    @property
    def arms(self) -> tuple[str, ...]:
        return self.spec.arm_names

    def criterion(self) -> str:
        return self.spec.criterion()

    @property
    def hypothesis(self) -> str:
        return self.spec.hypothesis.strip()


def digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def _enum_of(t) -> type | None:
    """The Enum a field's type names (through Optional), or None."""
    return next((a for a in (typing.get_args(t) or (t,)) if isinstance(a, type) and issubclass(a, Enum)), None)


def _allowed(hint, value) -> bool:
    """A field of Enum type takes only its values (or None)."""
    enum = _enum_of(hint)
    return enum is None or value is None or value in [e.value for e in enum]


def _merged_whole(base, doc: dict, hints: dict):
    """The document merged into `base` at once, or None where that fails (parse then merges key by key
    to name the field). One merge, not one a key: a claims study parses each of its registrations 21
    times an arm, and a merge per key cost ~4 s of a 13-arm study on the H200 (bench/RESULTS.md,
    "Time to a verdict")."""
    if not all(_allowed(hints.get(k), v) for k, v in doc.items()):
        return None
    try:
        return OmegaConf.merge(base, doc)
    except OmegaConfBaseException:
        return None


def _one_line(e: OmegaConfBaseException) -> str:
    return str(getattr(e, "msg", e)).splitlines()[0]


def parse(doc: Any, where: str) -> Spec:
    """The typed spec of a parsed YAML document (`where` names it in errors)."""
    if not isinstance(doc, dict):
        raise AtlasError(f"{where}: a pre-registration is a YAML mapping")
    doc = dict(doc)
    kind = doc.pop("kind", "difference")
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise AtlasError(f"{where}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    hints = typing.get_type_hints(cls)
    need = [f.name for f in fields(cls) if f.default is MISSING]
    missing = [f for f in need if f not in doc]
    if missing:
        raise AtlasError(f"{where}: missing field {missing[0]!r} (a {kind} pre-registration needs "
                         f"{', '.join(need)})")
    base = OmegaConf.structured(cls)
    cfg = _merged_whole(base, doc, hints)
    if cfg is None:
        cfg = base
        for key, value in doc.items():      # one key at a time, so the error names its field
            if not _allowed(hints.get(key), value):
                enum = _enum_of(hints.get(key))
                raise AtlasError(f"{where}: {key}: must be one of {', '.join(e.value for e in enum)}, "
                                 f"got {value!r}")
            try:
                cfg = OmegaConf.merge(cfg, {key: value})
            except OmegaConfBaseException as e:
                full = getattr(e, "full_key", None) or key
                if "not in" in _one_line(e):
                    raise AtlasError(f"{where}: unknown field {full!r} for a {kind} pre-registration") from None
                raise AtlasError(f"{where}: {full}: {_one_line(e)}") from None
        raise AssertionError(f"{where}: the merge failed whole but not key by key")  # pragma: no cover
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise AtlasError(f"{where}: missing field {missing[0]!r}")
    try:
        return OmegaConf.to_object(cfg)
    except Invalid as e:
        raise AtlasError(f"{where}: {e.field}: {e.why}") from None


def load_prereg(path: str | Path, text: bytes | None = None) -> Prereg:
    """Parse a pre-registration from its file (or from `text`, e.g. a manifest's locked copy)."""
    p = Path(path)
    try:
        raw = p.read_bytes() if text is None else text
    except OSError as e:
        raise AtlasError(f"{p}: unreadable pre-registration ({e.__class__.__name__})") from None
    sha = digest(raw)
    key = (str(p), sha)
    if key not in _PARSED:          # a text parses to one spec; each caller gets its own copy of it
        try:
            doc = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise AtlasError(f"{p}: unreadable pre-registration ({e.__class__.__name__})") from None
        _PARSED[key] = parse(doc, str(p))
    return Prereg(path=p, sha256=sha, spec=copy.deepcopy(_PARSED[key]))


#: (path, sha256 of the text) -> its parsed spec: a sweep's arms load the same texts again and again
_PARSED: dict = {}


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


def from_lock(entry: dict) -> Prereg:
    """The Prereg a manifest's locked entry holds (its text, not today's file)."""
    return load_prereg(entry.get("locked_copy") or entry["path"], text=entry["text"].encode("utf-8"))


def _value(v: Any) -> Any:
    return v.value if isinstance(v, Enum) else v


def changed_fields(a: Prereg, b: Prereg) -> list[str]:
    """The decision fields that differ between two pre-registrations."""
    if a.kind != b.kind:
        return [f"kind: {a.kind!r} -> {b.kind!r}"]
    out = []
    for f in fields(a.spec):
        x, y = getattr(a.spec, f.name), getattr(b.spec, f.name)
        if x != y:
            out.append(f"{f.name}: {_value(x)!r} -> {_value(y)!r}")
    return out


# ---- which texts the runs locked -------------------------------------------------------

@dataclass(frozen=True)
class Registration:
    """A pre-registration to judge and how the runs hold it:
      locked    every arm it names holds its sha256 (the text the study locked)
      unlocked  some arm it names does not: said at the top of the report, judged only on request
      changed   the file given is not the text the study locked under that file name (no verdict
                unless asked): `locked` is that text"""
    prereg: Prereg
    status: str
    why: str = ""
    locked: Prereg | None = None


def _entries(manifest: dict | None) -> list[dict]:
    return list((manifest or {}).get("preregs") or [])


def _held(manifests: dict[str, dict | None]) -> dict[str, dict[str, dict]]:
    """arm -> {sha256: locked entry} of the pre-registrations its manifest holds."""
    return {arm: {_bare(e["sha256"]): e for e in _entries(m)} for arm, m in manifests.items()}


def _status(pr: Prereg, held: dict[str, dict[str, dict]]) -> Registration:
    """locked, or unlocked and why; refuses arms that locked different texts."""
    holders = [a for a in pr.arms if pr.sha256 in held.get(a, {})]
    lacking = [a for a in pr.arms if a not in holders]
    if not lacking:
        return Registration(pr, "locked")
    others = [a for a in lacking if held.get(a)]
    if holders and others:
        a, b = holders[0], others[0]
        theirs = ", ".join(f"{Path(e['path']).name} {sha[:12]}" for sha, e in sorted(held[b].items()))
        raise AtlasError(f"pre-registration {pr.path.name}: the runs carry different locked hashes ({a} locked "
                         f"{pr.sha256[:12]}, {b} locked {theirs}): arms that locked different texts are "
                         "not judged together (one study, one criterion)")
    why = (f"no run of {', '.join(pr.arms)} locked this text (sha256 {pr.sha256[:12]})" if not holders else
           f"{', '.join(holders)} locked it but {', '.join(lacking)} ran outside any study "
           f"(sha256 {pr.sha256[:12]})")
    return Registration(pr, "unlocked", why)


def locked_texts(manifests: dict[str, dict | None]) -> list[Prereg]:
    """Every distinct text the runs' manifests hold (arm -> manifest), by file name."""
    seen: dict[str, Prereg] = {}
    for sha_entries in _held(manifests).values():
        for sha, e in sha_entries.items():
            if sha not in seen:
                seen[sha] = from_lock(e)
    return sorted(seen.values(), key=lambda p: (p.path.name, p.sha256))


def lock_status(pr: Prereg, manifests: dict[str, dict | None]) -> Registration:
    """How the runs (arm -> manifest) hold `pr`: locked, or unlocked and why; refuses the arms
    it names when they locked different texts."""
    return _status(pr, _held(manifests))


def registrations(manifests: dict[str, dict | None], given: str | Path | None = None) -> list[Registration]:
    """The pre-registrations to judge over runs (arm -> manifest) and how those runs hold them.

    Without `given`: every text a run locked whose arms are all among the runs. With `given`: that
    file; a file whose name the arms locked with another text is `changed`. A text is locked only
    if every arm it names holds its sha256; arms of it that locked different texts are refused."""
    held = _held(manifests)
    if given is None:
        return [_status(pr, held) for pr in locked_texts(manifests) if set(pr.arms) <= set(manifests)]
    pr = load_prereg(given)
    if not any(pr.sha256 in held.get(a, {}) for a in pr.arms):
        same_name = [from_lock(e) for a in pr.arms for sha, e in held.get(a, {}).items()
                     if Path(e["path"]).name == pr.path.name and sha != pr.sha256]
        if same_name:
            return [Registration(pr, "changed", "", same_name[0])]
    return [_status(pr, held)]
