"""The acceptance regression gate: is the candidate's metric no worse than the baseline's by more
than a margin, on an always-valid confidence sequence, so a CI job may re-run it as requests
accumulate and stop at the first answer.

Terms:
  unit          a request: (doc_id, turn) of an engine run's counts table, or of one of our step runs
  paired        the two runs' requests matched on (doc_id, turn): only where both decoded one text
                (equal completion hashes; our greedy runs under the lossless gate), as `pairs` does.
                Else unpaired: each run's requests are an independent sample, each run gets a CS at
                alpha / 2 and the difference's CS is [lo_c - hi_b, hi_c - lo_b] (a union bound).
  estimand      pooled: the metric over all verify steps of a run (sum of numerators / sum of
                denominators; what the engines' own counters report); per_request: the mean over
                requests of each request's own value (every request weighs the same). They can
                rank two drafters in opposite order (vllm-project/vllm #42508); the gate says which.
  sequence      per_request: the hedged-capital CS (confidence_sequence.hedged_cs; exact at every n)
                on the bounded per-request values; pooled: the asymptotic CS of the linearised ratio
                (influence values (y - R n) / mean(n); confidence_sequence.mixture_radius), which
                has no bounded per-request quantity and is valid as the requests grow.
  verdict       PASS (exit 0): the CS lies above -margin (shown no worse than the margin);
                REGRESSION (exit 1): it lies below -margin (shown worse by more than the margin);
                UNDECIDED (exit 3): neither, with how many more units would probably decide it at
                the current estimate and sd.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pyarrow.parquet as pq

from atlas_ab import AtlasError
from atlas_ab.analysis.comparison import figure
from atlas_ab.analysis.metrics import unit_parts
from atlas_ab.analysis.runs import UnitRun
from atlas_ab.analysis.stats import hedged_cs, mixture_radius
from atlas_ab.telemetry.acceptance import canonical, parse_metric

PASS, REGRESSION, UNDECIDED = "PASS", "REGRESSION", "UNDECIDED"
EXIT = {PASS: 0, REGRESSION: 1, UNDECIDED: 3}
ESTIMANDS = {"pooled": "pooled over verify steps", "per_request": "averaged over requests"}
#: the asymptotic CS is tightest at this many units (fixed in advance: a data-chosen one is no CS)
T_OPT = 500
MIN_UNITS = 10       # the asymptotic CS says nothing before (its sd is the CLT's)
BREAKS = 4000


@dataclass(frozen=True)
class Margin:
    """The largest drop that is no regression: absolute (0.01) or relative to the baseline ('1%')."""
    value: float
    relative: bool

    @classmethod
    def parse(cls, text: str) -> "Margin":
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(%?)\s*", str(text))
        v = float(m.group(1)) if m else float("nan")
        if not m or not math.isfinite(v) or v < 0 or (m.group(2) and v >= 100):
            raise AtlasError(f"--max-drop {text!r}: an absolute drop >= 0 (0.01) or a percentage of the baseline "
                             "below 100 (1%)")
        return cls(v / 100 if m.group(2) else v, bool(m.group(2)))

    def absolute(self, baseline_value: float) -> float:
        return self.value * baseline_value if self.relative else self.value

    def words(self, baseline_value: float) -> str:
        return (f"{self.value:.2%} of the baseline's {baseline_value:.4f} = {self.absolute(baseline_value):.4f}"
                if self.relative else f"{self.value:g}")


@dataclass(frozen=True)
class GateResult:
    verdict: str
    metric: str
    estimand: str
    pairing: str              # "paired by request" | "unpaired"
    pairing_why: str
    method: str
    alpha: float
    baseline: str
    candidate: str
    baseline_value: float
    candidate_value: float
    estimate: float           # candidate - baseline, on the estimand
    lower: float
    upper: float
    margin: float             # absolute
    margin_words: str
    n_units: int              # paired: requests in both; unpaired: the smaller run's requests
    more_units: int | None    # UNDECIDED: units that would probably decide it (None: no n would, at this estimate)

    @property
    def exit_code(self) -> int:
        return EXIT[self.verdict]

    def line(self) -> str:
        what = (f"{self.metric} ({ESTIMANDS[self.estimand]}) of {self.candidate} vs {self.baseline}: "
                f"{self.estimate:+.4f} ({self.baseline_value:.4f} -> {self.candidate_value:.4f}), "
                f"{1 - self.alpha:.0%} confidence sequence [{self.lower:+.4f}, {self.upper:+.4f}] over "
                f"{self.n_units:,} requests {self.pairing} "
                f"({self.pairing_why}; {self.method})")
        unit = "requests in both runs" if self.pairing != "unpaired" else "requests per run"
        if self.verdict == PASS:
            return f"PASS: no regression beyond the margin {self.margin_words}: the sequence lies above " \
                   f"{-self.margin:+.4f}; {what}"
        if self.verdict == REGRESSION:
            return f"REGRESSION: worse by more than the margin {self.margin_words}: the sequence lies below " \
                   f"{-self.margin:+.4f}; {what}"
        more = ("no number of requests would decide it at this estimate (it sits on the margin)"
                if self.more_units is None else f"probably ~{self.more_units:,} more {unit} would decide it "
                                                f"at the current estimate and sd")
        return f"UNDECIDED: the sequence holds {-self.margin:+.4f} (the margin {self.margin_words}); {more}; {what}"

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d.update(exit_code=self.exit_code, line=self.line(), estimand_words=ESTIMANDS[self.estimand])
        return d


# ---- per-request values -----------------------------------------------------------------------

def _parts(run: UnitRun, metric: str):
    """(keys [U], y [U], n [U]) of the run's requests in the metric's denominator, in (doc_id, turn) order."""
    f = figure(run, metric)
    if f.status != "exact":
        what = "is known only within bounds" if f.status == "bounds" else "is not available"
        raise AtlasError(f"{run.path}: {f.metric} {what}: {f.reason}")
    if run.units.clusters is None:
        raise AtlasError(f"{run.path}: global counters have no requests: the gate needs per-request telemetry "
                         "(docs/ci_gate.md)")
    y, n, _ = unit_parts(run.units, metric)
    t = run.units.table
    keys = t["doc_id"].to_numpy(np.int64) * 1_000_003 + t["turn"].to_numpy(np.int64)
    live = n > 0
    order = np.argsort(keys[live], kind="stable")
    return keys[live][order], y[live][order], n[live][order]


def value_range(metric: str, K: int) -> tuple[float, float]:
    """The range of one request's value: [0, 1] for a rate, [1, K + 1] for tokens per step."""
    return (1.0, K + 1.0) if parse_metric(metric)[0] == "tokens" else (0.0, 1.0)


def _bounded_cs(v: np.ndarray, lo: float, hi: float, alpha: float):
    """(lower, upper) of the mean of v in [lo, hi] at every t (the hedged capital)."""
    x = np.clip((v - lo) / (hi - lo), 0.0, 1.0)
    l_, u_ = hedged_cs(x, alpha=alpha, breaks=BREAKS)
    return lo + (hi - lo) * l_, lo + (hi - lo) * u_


def _ratio_cs(parts: list[tuple[np.ndarray, np.ndarray, float]], alpha: float):
    """(estimate, lower, upper) at every t of sum_j sign_j (sum y_j / sum n_j) over the first t units:
    the asymptotic CS on the influence values psi_i = sum_j sign_j (y_ji - R_j n_ji) / mean(n_j),
    every R_j and mean(n_j) the running ones (the variance of psi from cumulative moments)."""
    T = len(parts[0][0])
    t = np.arange(1, T + 1)
    u = np.stack([a for y, n, _ in parts for a in (y, n)], axis=1).astype(np.float64)    # [T, 2J]
    M = np.cumsum(u[:, :, None] * u[:, None, :], axis=0)                                 # [T, 2J, 2J]
    S = np.cumsum(u, axis=0)                                                             # [T, 2J]
    coef, est = [], np.zeros(T)
    for j, (_, _, sign) in enumerate(parts):
        Y, N = S[:, 2 * j], S[:, 2 * j + 1]
        R = Y / N
        est += sign * R
        nbar = N / t
        coef += [sign / nbar, -sign * R / nbar]
    c = np.stack(coef, axis=1)                                                           # [T, 2J]
    second = np.einsum("ti,tij,tj->t", c, M, c) / t          # mean psi^2 (mean psi is 0 at the plug-ins)
    sd = np.sqrt(np.maximum(second, 0) * t / np.maximum(t - 1, 1))
    r = mixture_radius(t, sd, alpha, T_OPT)
    r[: MIN_UNITS - 1] = np.inf
    return est, np.maximum.accumulate(est - r), np.minimum.accumulate(est + r), sd


def _more_units(distance: float, sd: float, t: int, alpha: float, paired: bool) -> int | None:
    """Units beyond t at which the normal-mixture radius at the current sd falls below the estimate's
    distance from the margin (unpaired: each run's radius at alpha / 2, added)."""
    if not distance > 0 or not sd >= 0:
        return None
    a = alpha if paired else alpha / 2
    k = 1.0 if paired else 2.0

    def radius(n):
        return k * float(mixture_radius(n, sd, a, T_OPT))

    if radius(t) < distance:
        return 1
    hi = t
    while radius(hi) >= distance:
        hi *= 2
        if hi > 10 ** 9:
            return None
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if radius(mid) < distance else (mid, hi)
    return hi - t


# ---- the gate ---------------------------------------------------------------------------------

def check_workloads(baseline: UnitRun, candidate: UnitRun) -> None:
    """Refuse runs of different workloads: their workload hashes where both have one, else their
    requests' prompt lengths on the (doc_id, turn) both hold."""
    ha, hb = baseline.hash("workload"), candidate.hash("workload")
    if ha is not None and hb is not None and ha != hb:
        raise AtlasError(f"{baseline.path} vs {candidate.path}: runs of different workloads (workload.hash "
                         f"{str(ha)[:19]} vs {str(hb)[:19]}): the gate compares one workload")
    ta, tb = baseline.units.table, candidate.units.table
    if baseline.units.clusters is None or candidate.units.clusters is None:
        return
    m = ta[["doc_id", "turn"]].assign(i=np.arange(len(ta))).merge(tb[["doc_id", "turn"]].assign(j=np.arange(len(tb))),
                                                                    on=["doc_id", "turn"])
    if m.empty:
        raise AtlasError(f"{baseline.path} vs {candidate.path}: runs of different workloads: no (doc_id, turn) in "
                         "both")
    pa_, pb_ = _prompt_tokens(baseline), _prompt_tokens(candidate)
    if pa_ is not None and pb_ is not None:
        x, y = pa_[m["i"].to_numpy()], pb_[m["j"].to_numpy()]
        ok = ~(np.isnan(x) | np.isnan(y))
        bad = np.flatnonzero(ok & (x != y))
        if bad.size:
            r = m.iloc[bad[0]]
            raise AtlasError(f"{baseline.path} vs {candidate.path}: runs of different workloads: request (doc "
                             f"{int(r.doc_id)}, turn {int(r.turn)}) has {int(x[bad[0]])} prompt tokens in one and "
                             f"{int(y[bad[0]])} in the other ({bad.size} of {int(ok.sum())} requests differ)")


def _prompt_tokens(run: UnitRun) -> np.ndarray | None:
    """An engine run's prompt_tokens per unit (the counts table's order, as units.load_units reads
    it), or None."""
    m = run.manifest or {}
    if m.get("telemetry") is None:
        return None
    rel = next((s.get("counts") for s in m.get("shards") or [] if isinstance(s, dict) and s.get("counts")), None)
    if rel is None or "prompt_tokens" not in pq.read_schema(run.path / rel).names:
        return None
    col = pq.read_table(run.path / rel, columns=["prompt_tokens"]).column(0).to_pylist()
    return np.asarray([np.nan if v is None else float(v) for v in col])


def pairing(baseline: UnitRun, candidate: UnitRun) -> tuple[bool, str]:
    """(paired, why): requests pair on (doc_id, turn) only where both runs decoded one text."""
    from atlas_ab.analysis.runs import completion_hashes as hashes

    for r in (baseline, candidate):
        if r.telemetry is not None and r.telemetry.clusters != "doc_id":
            return False, (f"{r.path.name} carries no doc_id (its requests are numbered by arrival, so they do not "
                           "name the same prompt in both runs)")
    engine = [r.telemetry is not None for r in (baseline, candidate)]
    if not any(engine):
        from atlas_ab.analysis.comparison import require_same_text

        try:
            require_same_text(baseline, candidate)
        except AtlasError as e:
            return False, str(e).split(": ", 1)[-1].split(";")[0]
        return True, "greedy runs of one trajectory"
    ha, hb = hashes(baseline), hashes(candidate)
    if ha is None or hb is None:
        lacking = baseline if ha is None else candidate
        return False, f"{lacking.path.name} stores no completion hashes, so equal texts cannot be checked"
    m = ha.merge(hb, on=["doc_id", "turn"], suffixes=("_a", "_b"))
    differ = int((m["completion_sha256_a"] != m["completion_sha256_b"]).sum())
    if differ:
        return False, f"the completions differ in {differ} of {len(m)} requests (a sampling server?)"
    return True, f"equal completion hashes on all {len(m):,} requests in both"


def gate(baseline: UnitRun, candidate: UnitRun, metric: str, margin: Margin, estimand: str = "pooled",
         alpha: float = 0.05) -> GateResult:
    """The gate's verdict on candidate - baseline of `metric` (module docstring)."""
    if estimand not in ESTIMANDS:
        raise AtlasError(f"--estimand {estimand!r}: pooled or per_request")
    if not 0 < alpha < 1:
        raise AtlasError(f"--alpha {alpha}: must be in (0, 1)")
    metric = canonical(metric)
    check_workloads(baseline, candidate)
    paired, why = pairing(baseline, candidate)
    (ka, ya, na), (kb, yb, nb) = _parts(baseline, metric), _parts(candidate, metric)
    lo_v, hi_v = value_range(metric, max(baseline.K, candidate.K))
    if paired:
        both, ia, ib = np.intersect1d(ka, kb, return_indices=True)
        if len(both) == 0:
            raise AtlasError(f"{baseline.path} vs {candidate.path}: no request in both runs' {metric} denominator")
        ya, na, yb, nb = ya[ia], na[ia], yb[ib], nb[ib]
        n_units = len(both)
    else:
        n_units = min(len(ka), len(kb))
    if estimand == "per_request":
        va, vb = ya / na, yb / nb
        base_value, cand_value = float(va.mean()), float(vb.mean())
        method = "hedged-capital confidence sequence (Waudby-Smith & Ramdas 2024) on per-request values"
        if paired:
            R = hi_v - lo_v
            lo, hi = _bounded_cs(vb - va, -R, R, alpha)
            est = float((vb - va).mean())
            sd = float(np.std(vb - va, ddof=1)) if len(va) > 1 else float("nan")
        else:
            la, ua = _bounded_cs(va, lo_v, hi_v, alpha / 2)
            lb, ub = _bounded_cs(vb, lo_v, hi_v, alpha / 2)
            lo, hi = lb[-1:] - ua[-1:], ub[-1:] - la[-1:]
            est = cand_value - base_value
            sd = float(max(np.std(va, ddof=1), np.std(vb, ddof=1))) if min(len(va), len(vb)) > 1 else float("nan")
        lower, upper = float(lo[-1]), float(hi[-1])
    else:
        base_value, cand_value = float(ya.sum() / na.sum()), float(yb.sum() / nb.sum())
        method = "asymptotic confidence sequence (Waudby-Smith et al. 2024) on the linearised pooled ratio"
        if paired:
            e, lo, hi, sds = _ratio_cs([(yb, nb, 1.0), (ya, na, -1.0)], alpha)
            lower, upper, sd = float(lo[-1]), float(hi[-1]), float(sds[-1])
        else:
            _, la, ua, sa = _ratio_cs([(ya, na, 1.0)], alpha / 2)
            _, lb, ub, sb = _ratio_cs([(yb, nb, 1.0)], alpha / 2)
            lower, upper = float(lb[-1] - ua[-1]), float(ub[-1] - la[-1])
            sd = float(max(sa[-1], sb[-1]))
        est = cand_value - base_value
    m_abs = margin.absolute(base_value)
    if lower > -m_abs:
        verdict, more = PASS, None
    elif upper < -m_abs:
        verdict, more = REGRESSION, None
    else:
        verdict = UNDECIDED
        more = _more_units(abs(est + m_abs), sd, n_units, alpha, paired)
    return GateResult(verdict, metric, estimand, "paired by request" if paired else "unpaired", why, method, alpha,
                      baseline.arm, candidate.arm, base_value, cand_value, est, lower, upper, m_abs,
                      margin.words(base_value), n_units, more)
