"""What a run's grain (runs/unit_runs.py: its per-unit table) gives of each metric: exact (estimated
by stats.estimate, as every figure is), bounds, or refused with the reason; and two runs compared,
or paired request by request, at that grain. Each metric is a ratio of unit sums, so
a run's figure is exact exactly when every unit has its numerator and denominator:

  p_i              #(accept_len >= i) / #(k >= i)     both per depth; with #(k >= i) missing
                                                      (k varied) only bounds: each unit's
                                                      #(k >= i) lies in [max(#(a >= i),
                                                      ceil((D - n(i-1)) / (K - i + 1))),
                                                      min(n, floor((D - n) / (i - 1)))]; where
                                                      steps without a draft may hide in n
                                                      (n_recorded), min(n, floor(D / i)) above
  p_i_cond         #(accept_len >= i) / #(accept_len >= i-1 and k >= i): the joint count
  tokens_per_step  (n + A) / n; its i.i.d. sd needs the histogram (sum of (1 + a)^2)
  draft_acceptance_rate   A / D; drafted tokens of one step are not independent draws, so
                                                      only the clustered and bootstrap sds

Clustered sds need clusters: documents when the client carried doc_id, else requests;
global counters have none (binomial/delta sd only). Two runs pair by document (the same
document in both arms is one cluster), or request by request on (doc_id, turn) (`pairs`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from atlas_ab import AtlasError
from atlas_ab.analysis.metrics import Units, unit_column, unit_sums
from atlas_ab.analysis.runs import UnitRun
from atlas_ab.analysis.stats import Difference, Rate, compare_sums, estimate, format_delta
from atlas_ab.telemetry.acceptance import DAR, canonical, parse_metric


@dataclass(frozen=True)
class Figure:
    """One metric of one arm: exact (the estimate), bounds, or refused with the reason."""

    arm: str
    metric: str
    status: str                     # exact | bounds | refused
    rate: Rate | None = None
    low: float | None = None
    high: float | None = None
    reason: str = ""
    clustered: bool = True          # False: global counters, no clusters

    @property
    def value(self) -> float | None:
        return None if self.rate is None else self.rate.value

    @property
    def n(self) -> int | None:
        return None if self.rate is None else self.rate.n

    @property
    def iid_se(self) -> float | None:
        return None if self.rate is None or not math.isfinite(self.rate.se) else self.rate.se

    @property
    def se_kind(self) -> str:
        return "n/a" if self.rate is None else self.rate.se_kind

    @property
    def cluster_se(self) -> float | None:
        return None if self.rate is None else self.rate.cluster_se

    @property
    def n_clusters(self) -> int | None:
        return self.rate.n_clusters if self.rate is not None and self.clustered else None

    def summary(self) -> str:
        if self.status == "refused":
            return f"{self.metric}: not available: {self.reason}"
        if self.status == "bounds":
            return f"{self.metric}: in [{self.low:.4f}, {self.high:.4f}] (bounds only: {self.reason})"
        s = f"{self.metric} = {self.value:.4f} (n={self.n:,}"
        s += f", {self.se_kind} sd {self.iid_se:.4f}" if self.iid_se is not None else ", no i.i.d. sd"
        s += (f", cluster sd {self.cluster_se:.4f} over {self.n_clusters} clusters)" if self.cluster_se is not None
              else ", no clusters)" if not self.clustered else f", {self.rate.cluster_note or 'no cluster sd'})")
        return s

    __str__ = summary

    def to_dict(self) -> dict:
        # report.json keeps its keys: an se is written as "sd" (keys.JSON_KEY)
        return {"arm": self.arm, "metric": self.metric, "status": self.status, "value": self.value, "low": self.low,
                "high": self.high, "n": self.n, "iid_sd": self.iid_se, "sd_kind": self.se_kind,
                "cluster_sd": self.cluster_se, "n_clusters": self.n_clusters, "reason": self.reason}


def bounds(units: Units, i: int) -> tuple[float, float] | None:
    """p_i's range over every per-step k the units' totals allow: n steps of k in 1..K drafting
    D tokens; where n may include steps with no draft (n_recorded), k in 0..K over those."""
    a = unit_column(units, "a_ge", i)
    t = units.table
    rec = np.asarray([np.nan if v is None or (isinstance(v, float) and math.isnan(v)) else v
                      for v in t["n_recorded"]], np.float64)
    zero = np.isfinite(rec)
    n = np.asarray([np.nan if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in t["n"]],
                   np.float64)
    n = np.where(zero, rec, n)
    D = unit_column(units, "D")
    if a is None or np.isnan(n).any():
        return None
    hi = n.copy()
    if D is not None:
        hi = np.where(zero, np.minimum(hi, np.floor(D / i)),  # a step with no draft frees its tokens
                      np.minimum(hi, np.floor((D - n) / (i - 1))) if i >= 2 else hi)
    lo = a.copy()
    K = np.asarray([np.nan if v is None or (isinstance(v, float) and math.isnan(v)) else v
                    for v in t["k_max"]], np.float64)
    if D is not None and (i >= 2 or zero.any()):
        with np.errstate(invalid="ignore", divide="ignore"):
            need = np.ceil((D - n * (i - 1)) / (K - i + 1))
        lo = np.maximum(lo, np.where(np.isfinite(need) & (K >= i), need, 0))
    A = a.sum()
    return (A / hi.sum() if hi.sum() else float("nan"), A / lo.sum() if lo.sum() else float("nan"))


def figure(run: UnitRun, metric: str, pairing: str = "doc", n_boot: int = 0, seed: int = 0) -> Figure:
    kind, i = parse_metric(metric)
    m = canonical(metric)
    u = run.units
    clustered = u.clusters is not None

    def refused(why):
        return Figure(run.arm, m, "refused", reason=why, clustered=clustered)

    if kind in ("p", "cond") and i > u.K and u.K and unit_column(u, "a_ge", 1) is not None:
        return refused(f"depth {i} was never drafted (K={u.K})")
    if kind == "p" and unit_column(u, "a_ge", i) is not None and unit_column(u, "k_ge", i) is None:
        lo, hi = bounds(u, i)
        return Figure(run.arm, m, "bounds", low=lo, high=hi, reason=run.why_not("p_i") or
                      "#(k >= i) unknown: k varied", clustered=clustered)
    try:
        s = unit_sums(u, metric, pairing)
    except AtlasError as e:
        return refused(str(e).split(" is not available: ", 1)[-1])
    if s.N == 0:
        return refused(f"no step in the denominator of {m}")
    r = estimate(s, run.arm, n_boot, seed)
    if not clustered:
        r = Rate(**{**r.__dict__, "cluster_note": run.why_not("cluster_sd") or "global counters: no clusters"})
    return Figure(run.arm, m, "exact", rate=r, clustered=clustered)


def figure_names(K: int) -> list[str]:
    """Every metric of a run drafting up to K tokens, by its canonical name."""
    return ([canonical(f"p{i}") for i in range(1, K + 1)] + [f"p{i}_cond" for i in range(2, K + 1)]
            + ["tokens_per_step", DAR])


def _exact(run: UnitRun, metric: str, pairing: str = "doc"):
    f = figure(run, metric, pairing)
    if f.status != "exact":
        what = "is known only within bounds" if f.status == "bounds" else "is not available"
        raise AtlasError(f"{run.path}: {f.metric} {what}: {f.reason}")
    return unit_sums(run.units, metric, pairing)


def exact_difference(control: UnitRun, treatment: UnitRun, metric: str, n_boot: int = 2000, seed: int = 0,
            pairing: str = "doc") -> Difference:
    """treatment - control where both grains make the metric exact (stats.compare_sums); else
    one line naming the run and why."""
    sa, sb = _exact(control, metric, pairing), _exact(treatment, metric, pairing)
    d = compare_sums(sa, sb, control.arm, treatment.arm, n_boot=n_boot, seed=seed)
    if control.units.clusters is None or treatment.units.clusters is None:
        why = (control.why_not("cluster_sd") or treatment.why_not("cluster_sd")
               or "global counters: no clusters")
        d = Difference(**{**d.__dict__, "cluster_se": None, "bootstrap": None, "cluster_note": why})
    return d


@dataclass(frozen=True)
class UnitComparison:
    """Two runs at their per-unit grain: treatment - control of every metric both grains make
    exact (report/ renders it beside comparison.Comparison, the step runs' result)."""

    control: str
    treatment: str
    headline: dict[str, Difference]
    primary: Difference | None      # the report's deciding metric, else the first both grains make exact

    def to_dict(self) -> dict:
        return {"control": self.control, "treatment": self.treatment,
                "metric": None if self.primary is None else self.primary.metric,
                "headline": {m: d.to_dict() for m, d in self.headline.items()}}


def compare_units(control: UnitRun, treatment: UnitRun, names: list[str], primary: str, n_boot: int = 2000,
                  seed: int = 0) -> UnitComparison:
    """exact_difference of each metric in `names` that both runs' grains make exact."""
    diffs = {m: exact_difference(control, treatment, m, n_boot=n_boot, seed=seed) for m in names
             if figure(control, m).status == figure(treatment, m).status == "exact"}
    return UnitComparison(control.arm, treatment.arm, diffs,
                          diffs.get(canonical(primary)) or next(iter(diffs.values()), None))


@dataclass(frozen=True)
class Pairs:
    """Two runs paired request by request on (doc_id, turn)."""

    difference: Difference
    matched: int
    only_control: int
    only_treatment: int

    def summary(self) -> str:
        d = self.difference
        lines = [f"{d.control.arm} vs {d.treatment.arm}, {d.metric}, paired by request on (doc_id, turn): "
                 f"{self.matched:,} requests in both ({self.only_control:,} only in {d.control.arm}, "
                 f"{self.only_treatment:,} only in {d.treatment.arm}: missing there)",
                 f"  {d.control.value:.4f} (n={d.control.n:,}) -> {d.treatment.value:.4f} (n={d.treatment.n:,})"]
        if d.cluster_se is not None:
            lines.append(f"  delta {format_delta(d.delta, d.z_by('cluster'))} with the paired sd {d.cluster_se:.4f} "
                         f"(requests as clusters, CRV1)")
        elif d.cluster_note:
            lines.append(f"  {d.cluster_note}")
        if d.bootstrap is not None:
            b = d.bootstrap
            lines.append(f"  bootstrap over requests: sd {b.se:.4f}, {b.level:.0%} CI "
                         f"[{b.ci_low:+.4f}, {b.ci_high:+.4f}]")
        if math.isfinite(d.se):
            lines.append(f"  unpaired {d.se_kind} sd {d.se:.4f}: {d}")
        return "\n".join(lines)

    __str__ = summary

    def to_dict(self) -> dict:
        return {"pairing": "request (doc_id, turn)", "matched": self.matched, "only_control": self.only_control,
                "only_treatment": self.only_treatment, "difference": self.difference.to_dict()}


def _keep(r: UnitRun, both: set) -> UnitRun:
    t = r.units.table
    mask = [(d, tn) in both for d, tn in zip(t["doc_id"], t["turn"])]
    units = Units(**{**r.units.__dict__, "table": t[mask].reset_index(drop=True)})
    return UnitRun(r.path, r.arm, r.manifest, r.telemetry, units)


def pairs(control: UnitRun, treatment: UnitRun, metric: str, n_boot: int = 2000, seed: int = 0) -> Pairs:
    for r in (control, treatment):
        if r.units.clusters is None:
            raise AtlasError(f"{r.path}: global counters have no requests to pair")
        if r.clusters == "request" and r.telemetry is not None:
            raise AtlasError(f"{r.path}: {r.telemetry.why_not('request_pairing')}")
    ka = set(zip(control.units.table["doc_id"], control.units.table["turn"]))
    kb = set(zip(treatment.units.table["doc_id"], treatment.units.table["turn"]))
    both = ka & kb
    if not both:
        raise AtlasError(f"{control.path} vs {treatment.path}: no (doc_id, turn) in both runs")
    d = exact_difference(_keep(control, both), _keep(treatment, both), metric, n_boot=n_boot, seed=seed,
                         pairing="request")
    return Pairs(d, len(both), len(ka - both), len(kb - both))
