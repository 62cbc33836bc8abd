"""DRAFT_CONF economics: when does verifying a propose pay, in this runner?

The reference engine's rule (docs/reference_engine.md): a step that verifies K drafts costs `c_spec` and
commits 1 + accept_len tokens; a serial step costs `c_serial` and commits 1. Verifying a
propose whose chain confidence is c pays when E[1 + accept_len | c] / c_spec >= 1 / c_serial,
i.e. when E[1 + a | c] >= c_spec / c_serial (the break-even). So:
  - acceptance by confidence bin comes from a run that verifies everything (tau = 0), each
    step's chain confidence being the min over its drafts' top-1 probs (the `conf` column);
  - the costs come from live runs at batch width 1, where a gated step really decodes one
    token: c_spec = the median wall time of its verify steps, c_serial of its serial steps;
  - tau* = the lowest confidence from which every bin pays;
  - throughput (committed tokens per second of step time) per arm, with a clustered sd (a ratio
    estimator, linearised; clusters are the run's source files unless told otherwise), and the
    difference between two arms, absolute and relative (stats.ratio_difference_se).
Timings exist only in live runs: a replay run carries no step time and is refused here.
Warm-up steps (the first of each kind in a wave, or one that captured a graph: `warmup_ms`,
speculative/timing.py) carry no `step_ms` and are left out of costs and throughput, tokens and
time alike. A run whose step times still show a warm-up-sized outlier is refused (`outliers`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from atlas_ab import AtlasError
from atlas_ab.analysis.runs import Run, load_run
from atlas_ab.analysis.stats import few_clusters, ratio_difference_se

BINS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0 + 1e-9)
#: A step slower than OUTLIER_X times the median step of its kind (verify, serial) in its run is an
#: outlier: steady steps stay within a few times their median, while a graph capture or first call
#: costs ten times and more (the measured spreads are in the commit that set these).
OUTLIER_X = 5.0
#: Outliers refuse the run once they make this share of its step time: an isolated stall of the
#: host is not worth a refusal, a cost that moves tokens/s by a percent is.
OUTLIER_SHARE = 0.01


def kind_of(k) -> np.ndarray:
    return np.where(np.asarray(k) >= 1, "verify", "serial")


def outliers(path, steps: pd.DataFrame) -> None:
    """Refuse step times with a warm-up-sized outlier (see OUTLIER_X, OUTLIER_SHARE), naming the worst."""
    s = steps[steps["step_ms"].notna()]
    if s.empty:
        return
    ms = s["step_ms"].to_numpy(np.float64)
    kind = kind_of(s["k"])
    med = pd.Series(ms).groupby(kind).transform("median").to_numpy()
    ratio = ms / med
    out = ratio > OUTLIER_X
    share = ms[out].sum() / ms.sum()
    if out.any() and share >= OUTLIER_SHARE:
        w = int(np.argmax(ratio))
        r = s.iloc[w]
        raise AtlasError(
            f"{path}: doc {int(r['doc_id'])} turn {int(r['turn'])} step {int(r['step'])} took {ms[w]:.1f} ms, "
            f"{ratio[w]:.0f}x the median {kind[w]} step ({med[w]:.3f} ms); {int(out.sum())} step(s) above "
            f"{OUTLIER_X:g}x their kind's median make {share:.1%} of the step time: warm-up inside step_ms? "
            + ("(a run made before warm-up was timed apart in warmup_ms: re-run it)" if "warmup_ms" not in s.columns
               else "(its warm-up was timed apart: a busy host or a one-time cost outside it; re-run on an idle "
                    "machine)"))


def one_loop(runs: list[Run]) -> None:
    """Refuse step times from different loops: a run-ahead chunk's steps share its mean time, a
    step-by-step step has its own, and the host's part differs (run/engine.py RunInfo.loop)."""
    loops = {r.path: loop_of(r.manifest or {}) for r in runs}
    if len(set(loops.values())) > 1:
        raise AtlasError("step times from different loops: " + ", ".join(f"{p} ({v})" for p, v in loops.items())
                         + "; compare runs made with one runner.run_ahead and runner.fuse_bookkeeping setting")


def loop_of(manifest: dict) -> str:
    """The loop a run's steps were timed in: step_by_step | run_ahead, '+ fused' where its
    bookkeeping ran compiled (manifests before that field: not)."""
    return manifest.get("loop", "step_by_step") + (" + fused" if manifest.get("fused") else "")


def timed(run: Run) -> Run:
    """The run with the columns economics needs (step time, committed tokens, confidences);
    refuses runs whose step times are not each document's own."""
    m = run.manifest or {}
    if m.get("mode") == "replay":
        raise AtlasError(f"{run.path}: a replay run carries no step times (timing comes from live runs only)")
    bw = (m.get("waves") or {}).get("batch_width")
    if bw is not None and bw != 1:
        raise AtlasError(f"{run.path}: batch width {bw}: a step's time is shared by its {bw} documents, so "
                         "tokens per second per document needs runner.batch_width=1")
    full = load_run(run.path, columns=("step_ms", "committed", "conf"), optional=("warmup_ms",),
                    allow_incomplete=run.status != "complete")
    s = full.steps
    warm = s["warmup_ms"].notna() if "warmup_ms" in s.columns else pd.Series(False, index=s.index)
    untimed = s["step_ms"].isna() & ~warm
    if untimed.any():
        raise AtlasError(f"{run.path}: step_ms is null on {int(untimed.sum())} step(s) that are not warm-up")
    outliers(run.path, s)
    return full


@dataclass(frozen=True)
class Throughput:
    """Committed tokens per second of step time, clustered by the cluster unit."""
    arm: str
    tokens: int
    seconds: float
    n_steps: int
    n_clusters: int
    se: float | None           # CRV1-style sd of the ratio (None: too few clusters)
    per_cluster: pd.DataFrame  # cluster, tokens, seconds
    cluster_unit: str = "document"
    n_warmup: int = 0          # warm-up steps left out (their tokens and time)
    warmup_seconds: float = 0.0

    @property
    def value(self) -> float:
        return self.tokens / self.seconds

    def to_dict(self) -> dict:
        # report.json keeps its keys: an se is written as "sd" (keys.JSON_KEY)
        return {"arm": self.arm, "tokens_per_second": self.value, "sd": self.se, "tokens": self.tokens,
                "seconds": self.seconds, "n_steps": self.n_steps, "n_clusters": self.n_clusters,
                "n_warmup": self.n_warmup, "warmup_seconds": self.warmup_seconds}


def throughput(run: Run, clusters: tuple | None = None) -> Throughput:
    """`clusters`: (doc_id -> cluster map or None, unit), default the run's own (runs.Run.clusters)."""
    full = timed(run)
    s = full.steps[full.steps["step_ms"].notna()]
    warm = full.steps["warmup_ms"].dropna() if "warmup_ms" in full.steps.columns else pd.Series([], dtype=float)
    cmap, unit = run.clusters if clusters is None else clusters
    doc = s["doc_id"].to_numpy()
    per = pd.DataFrame({"cluster": doc if cmap is None else np.asarray(cmap)[doc], "tokens": s["committed"].map(len),
                        "seconds": s["step_ms"].astype(np.float64) / 1e3}).groupby("cluster").sum().reset_index()
    T, S = per["tokens"].to_numpy(float), per["seconds"].to_numpy(float)
    R, G = T.sum() / S.sum(), len(per)
    se = None if few_clusters(G, unit) else math.sqrt(G / (G - 1) * ((T - R * S) ** 2).sum()) / S.sum()
    return Throughput(run.arm, int(T.sum()), float(S.sum()), len(s), G, se, per, unit, len(warm),
                      float(warm.sum()) / 1e3)


@dataclass(frozen=True)
class ThroughputDifference:
    control: Throughput
    treatment: Throughput
    delta: float               # treatment - control, tokens/s
    se: float | None           # clustered (the same cluster in both arms is one cluster)
    relative_se: float | None = None   # the sd of `relative`, both arms' uncertainty (delta method)
    n_clusters: int = 0

    @property
    def relative(self) -> float:
        return self.delta / self.control.value

    def to_dict(self) -> dict:
        # report.json keeps its keys: an se is written as "sd" (keys.JSON_KEY)
        return {"control": self.control.to_dict(), "treatment": self.treatment.to_dict(), "delta": self.delta,
                "sd": self.se, "relative": self.relative, "relative_sd": self.relative_se,
                "n_clusters": self.n_clusters, "cluster_unit": self.control.cluster_unit}


def throughput_difference(control: Run, treatment: Run, clusters: tuple | None = None) -> ThroughputDifference:
    """The linearised ratio difference over clusters g present in either arm (stats.ratio_difference_se):
    absolute z_g = (T_bg - R_b S_bg)/S_b - (T_ag - R_a S_ag)/S_a, sd = sqrt(G/(G-1) sum z_g^2)."""
    one_loop([control, treatment])
    a, b = throughput(control, clusters), throughput(treatment, clusters)
    m = a.per_cluster.merge(b.per_cluster, on="cluster", how="outer", suffixes=("_a", "_b")).fillna(0.0)
    G = len(m)
    sums = [m[c].to_numpy() for c in ("tokens_a", "seconds_a", "tokens_b", "seconds_b")]
    few = few_clusters(G, a.cluster_unit)
    return ThroughputDifference(a, b, b.value - a.value, None if few else ratio_difference_se(*sums),
                                None if few else ratio_difference_se(*sums, relative=True), G)


@dataclass(frozen=True)
class Economics:
    bins: pd.DataFrame        # lo, hi, n, tokens (mean 1 + accept_len), p1, pays
    c_spec_ms: float
    c_serial_ms: float
    n_spec: int
    n_serial: int
    tau_star: float
    throughput: tuple[Throughput, ...]

    @property
    def break_even(self) -> float:
        return self.c_spec_ms / self.c_serial_ms

    def summary(self) -> str:
        lines = [f"costs (live, batch width 1): a verify step {self.c_spec_ms:.3f} ms (median of {self.n_spec:,}), "
                 f"a serial step {self.c_serial_ms:.3f} ms (median of {self.n_serial:,}): verifying pays when "
                 f"E[1 + accept_len | confidence] >= {self.break_even:.3f}",
                 f"tau* = {self.tau_star:g} (the lowest chain confidence from which every bin pays)", "",
                 "| confidence | steps | E[1 + accept_len] | p1 | pays |", "|---|---|---|---|---|"]
        for r in self.bins.itertuples():
            lines.append(f"| [{r.lo:.1f}, {min(r.hi, 1.0):.1f}) | {r.n:,} | {r.tokens:.3f} | {r.p1:.3f} | "
                         f"{'yes' if r.pays else 'no'} |")
        lines += ["", "| arm | tokens/s | sd | steps | warm-up steps left out |", "|---|---|---|---|---|"]
        lines += [f"| {t.arm} | {t.value:,.1f} | {'n/a' if t.se is None else f'{t.se:.1f}'} | {t.n_steps:,} | "
                  f"{t.n_warmup:,} ({t.warmup_seconds * 1e3:,.1f} ms) |" for t in self.throughput]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"bins": self.bins.to_dict(orient="records"), "c_spec_ms": self.c_spec_ms,
                "c_serial_ms": self.c_serial_ms, "break_even": self.break_even, "n_spec": self.n_spec,
                "n_serial": self.n_serial, "tau_star": self.tau_star,
                "throughput": [t.to_dict() for t in self.throughput]}


def confidence_bins(run: Run, break_even: float = float("inf")) -> pd.DataFrame:
    """E[1 + accept_len] and p1 by chain-confidence bin over a run's verify steps."""
    s = timed(run).steps if "conf" not in run.steps.columns else run.steps
    s = s[s["k"] >= 1]
    chain = np.array([min(c[:k]) for c, k in zip(s["conf"], s["k"])], dtype=np.float64)
    a = s["accept_len"].to_numpy()
    idx = np.digitize(chain, BINS) - 1
    rows = []
    for i in range(len(BINS) - 1):
        sel = idx == i
        n = int(sel.sum())
        tok = float((1 + a[sel]).mean()) if n else float("nan")
        rows.append({"lo": BINS[i], "hi": BINS[i + 1], "n": n, "tokens": tok,
                     "p1": float((a[sel] >= 1).mean()) if n else float("nan"), "pays": bool(n and tok >= break_even)})
    return pd.DataFrame(rows)


def economics(ungated: Run, gated: list[Run]) -> Economics:
    """Costs from the gated runs' serial and verify steps, bins from the ungated run, tau*."""
    one_loop([ungated, *gated])
    spec, serial = [], []
    for r in [ungated, *gated]:
        s = timed(r).steps
        s = s[s["step_ms"].notna()]          # warm-up steps cost what a first time costs
        spec.append(s.loc[s["k"] >= 1, "step_ms"].to_numpy())
        serial.append(s.loc[s["k"] == 0, "step_ms"].to_numpy())
    spec, serial = np.concatenate(spec), np.concatenate(serial)
    if len(serial) == 0:
        raise AtlasError("no serial step in the gated runs: raise their tau so some proposes are dropped")
    c_spec, c_serial = float(np.median(spec)), float(np.median(serial))
    bins = confidence_bins(timed(ungated), c_spec / c_serial)
    tau = 1.0
    for r in reversed(list(bins.itertuples())):       # from the top: the run of bins that pay
        if r.n and not r.pays:
            break
        tau = r.lo if r.n else tau
    return Economics(bins, c_spec, c_serial, len(spec), len(serial), float(tau),
                     tuple(throughput(r) for r in [ungated, *gated]))
