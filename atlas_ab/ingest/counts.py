"""The analysis of runs that have no step table: what per-request totals and global counters
make exact, with the uncertainty they support, and a refusal naming why for the rest.

Per unit (request, or the global counter delta) the counts table gives some of:
n = verify steps, D = drafted tokens, A = accepted tokens, #(accept_len >= i),
#(k >= i), the accept_len histogram. Each metric is a ratio of unit sums, so a run's
figure is exact exactly when every unit has its numerator and denominator:

  p_i              #(accept_len >= i) / #(k >= i)     both per depth; with #(k >= i) missing
                                                      (k varied) only bounds: each unit's
                                                      #(k >= i) lies in [max(#(a >= i),
                                                      ceil((D - n(i-1)) / (K - i + 1))),
                                                      min(n, floor((D - n) / (i - 1)))]
  p_i_cond         #(accept_len >= i) / #(accept_len >= i-1 and k >= i): the joint count, known
                                                      only where every step drafted depth i
  tokens_per_step  (n + A) / n; its i.i.d. sd needs the histogram (sum of (1 + a)^2)
  draft_acceptance_rate   A / D; drafted tokens of one step are not independent draws, so
                                                      only the clustered and bootstrap sds

Clustered sds need clusters: documents when the client carried doc_id, else requests;
global counters have none (binomial/delta sd only). Two runs pair by document (the same
document in both arms is one cluster), or request by request on (doc_id, turn) (`pairs`).
"""
from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from atlas_ab import AtlasError
from atlas_ab.analysis import cluster
from atlas_ab.analysis.load import load_run, read_manifest
from atlas_ab.analysis.metrics import DocSums, canonical
from atlas_ab.analysis.stats import Difference, Rate, format_delta
from atlas_ab.ingest.grain import Telemetry, from_manifest
from atlas_ab.ingest.tables import REQUIRED_COUNT_COLUMNS

DAR = "draft_acceptance_rate"


def parse(metric: str) -> tuple[str, int]:
    if metric in (DAR, "acceptance_rate"):
        return "dar", 0
    from atlas_ab.analysis.metrics import parse_metric
    return parse_metric(metric)


def name(metric: str) -> str:
    return DAR if parse(metric)[0] == "dar" else canonical(metric)


@dataclass(frozen=True)
class CountsRun:
    """A run read as per-unit counts: an ingested counts table, or one derived from steps."""

    path: Path
    arm: str
    manifest: dict | None
    telemetry: Telemetry | None
    units: pd.DataFrame       # doc_id, turn, n, D, A, a_ge (list), k_ge (list), cond_den (list), y2_tok
    K: int

    @property
    def clusters(self) -> str | None:
        return "doc_id" if self.telemetry is None else self.telemetry.clusters

    @property
    def source(self) -> str:
        return "atlas" if self.telemetry is None else f"{self.telemetry.source} ({self.telemetry.format})"

    @property
    def grain(self) -> str:
        return "steps" if self.telemetry is None else self.telemetry.grain

    def why_not(self, figure: str) -> str | None:
        return None if self.telemetry is None else self.telemetry.why_not(figure)

    def hash(self, section: str) -> str | None:
        """`workload.hash` / `model.hash`, for the same provenance check as step runs."""
        return ((self.manifest or {}).get(section) or {}).get("hash")


def needs_counts(path, allow_incomplete: bool = False) -> bool:
    """True for an ingested run whose manifest says it has no step table."""
    root = Path(path)
    if not root.is_dir():
        return False
    t = from_manifest(read_manifest(root, allow_incomplete), str(root / "manifest.json"))
    return t is not None and not t.has_steps


def _lists(x, K):
    """A per-depth list padded with zeros to K (deeper depths were not drafted); None items stay."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    x = [None if v is None or (isinstance(v, float) and math.isnan(v)) else int(v) for v in x]
    return x + [0] * (K - len(x))


def _from_counts(df: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    K = 0
    for col in ("hist", "drafted", "accepted"):
        for v in df[col]:
            if v is not None and not (isinstance(v, float) and math.isnan(v)):
                K = max(K, len(v) - (1 if col == "hist" else 0))
    K = max(K, int(df["k_fixed"].max()) if df["k_fixed"].notna().any() else 0)
    rows = []
    for r in df.itertuples(index=False):
        n = None if pd.isna(r.n_steps) else int(r.n_steps)
        hist = _lists(r.hist, K + 1)
        a_ge = _lists(r.accepted, K)
        if a_ge is None and hist is not None:
            a_ge = [sum(hist[i:]) for i in range(1, K + 1)]
        k_ge = _lists(r.drafted, K)
        kf = None if pd.isna(r.k_fixed) else int(r.k_fixed)
        if k_ge is None and kf is not None and n is not None:
            k_ge = [n if i <= kf else 0 for i in range(1, K + 1)]
        if k_ge is None and n is not None:
            k_ge = [n] + [None] * (K - 1) if K else []  # a verify step drafted >= 1: #(k >= 1) = n
        cond = None
        if a_ge is not None and k_ge is not None and n is not None:
            # #(a >= i-1 and k >= i) is known where every step drafted depth i (then it is #(a >= i-1)),
            # or where no step did (0)
            ge = [n] + a_ge
            cond = [ge[i - 1] if k_ge[i - 1] == n else 0 if k_ge[i - 1] == 0 else None for i in range(1, K + 1)]
        y2 = None if hist is None else float(sum(c * (1 + j) ** 2 for j, c in enumerate(hist)))
        rows.append({"doc_id": r.doc_id, "turn": r.turn, "n": n,
                     "D": None if pd.isna(r.draft_tokens) else int(r.draft_tokens),
                     "A": None if pd.isna(r.accepted_tokens) else int(r.accepted_tokens),
                     "k_max": None if pd.isna(r.k_max) else int(r.k_max),
                     "a_ge": a_ge, "k_ge": k_ge, "cond_den": cond, "y2_tok": y2})
    return pd.DataFrame(rows), K


def _from_steps(steps: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    v = steps[steps["k"] >= 1]
    K = int(v["k"].max()) if len(v) else 0
    rows = []
    for (d, t), g in v.groupby(["doc_id", "turn"], sort=True):
        k, a = g["k"].to_numpy(), g["accept_len"].to_numpy()
        rows.append({"doc_id": int(d), "turn": int(t), "n": len(g), "D": int(k.sum()), "A": int(a.sum()),
                     "k_max": K, "a_ge": [int((a >= i).sum()) for i in range(1, K + 1)],
                     "k_ge": [int((k >= i).sum()) for i in range(1, K + 1)],
                     "cond_den": [int(((a >= i - 1) & (k >= i)).sum()) for i in range(1, K + 1)],
                     "y2_tok": float(((1 + a) ** 2).sum())})
    return pd.DataFrame(rows), K


def load_counts(path, allow_incomplete: bool = False) -> CountsRun:
    root = Path(path)
    if not root.is_dir():
        raise AtlasError(f"{root}: run directory does not exist")
    manifest = read_manifest(root, allow_incomplete)
    tel = from_manifest(manifest, str(root / "manifest.json"))
    arm = str((manifest or {}).get("arm") or root.resolve().name)
    if tel is not None and tel.grain == "events":
        raise AtlasError(f"{root}: {tel.source} telemetry holds fingerprint events only; `fingerprints RUN` reads it")
    if tel is not None and "counts" in tel.tables:
        rel = next((s.get("counts") for s in manifest.get("shards") or [] if isinstance(s, dict) and s.get("counts")),
                   None)
        if rel is None or not (root / rel).exists():
            raise AtlasError(f"{root / 'manifest.json'}: telemetry lists a counts table but no shard holds one")
        try:
            df = pq.read_table(root / rel).to_pandas()
        except (pa.ArrowException, OSError) as e:
            raise AtlasError(f"{root / rel}: unreadable Parquet ({e.__class__.__name__})") from None
        missing = [c for c in REQUIRED_COUNT_COLUMNS if c not in df.columns]
        if missing:
            raise AtlasError(f"{root / rel}: missing column {missing[0]!r}")
        units, K = _from_counts(df)
    else:
        run = load_run(root, allow_incomplete=allow_incomplete)
        units, K = _from_steps(run.steps)
    if units.empty:
        raise AtlasError(f"{root}: no unit with a verify step")
    return CountsRun(root, arm, manifest, tel, units, K)


# ---- one metric of one run -------------------------------------------------------------------

@dataclass(frozen=True)
class Figure:
    """One metric of one arm: exact (with what sds the grain supports), bounds, or refused."""

    arm: str
    metric: str
    status: str                     # exact | bounds | refused
    value: float | None = None
    low: float | None = None
    high: float | None = None
    n: int | None = None
    iid_sd: float | None = None
    sd_kind: str = "binomial"
    cluster_sd: float | None = None
    n_clusters: int | None = None
    reason: str = ""
    sums: DocSums | None = field(default=None, repr=False, compare=False)

    def summary(self) -> str:
        if self.status == "refused":
            return f"{self.metric}: not available: {self.reason}"
        if self.status == "bounds":
            return f"{self.metric}: in [{self.low:.4f}, {self.high:.4f}] (bounds only: {self.reason})"
        s = f"{self.metric} = {self.value:.4f} (n={self.n:,}"
        s += f", {self.sd_kind} sd {self.iid_sd:.4f}" if self.iid_sd is not None else ", no i.i.d. sd"
        s += (f", cluster sd {self.cluster_sd:.4f} over {self.n_clusters} clusters)" if self.cluster_sd is not None
              else ", no clusters)")
        return s

    __str__ = summary

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("arm", "metric", "status", "value", "low", "high", "n", "iid_sd",
                                               "sd_kind", "cluster_sd", "n_clusters", "reason")}


def _keys(run: CountsRun, pairing: str) -> np.ndarray:
    u = run.units
    if pairing == "request":
        return (u["doc_id"].astype(np.int64) * 1_000_003 + u["turn"].astype(np.int64)).to_numpy()
    return u["doc_id"].to_numpy(np.int64) if run.clusters else np.zeros(len(u), np.int64)


def _col(run: CountsRun, col: str, i: int | None = None) -> np.ndarray | None:
    vals = run.units[col].tolist()
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in vals):
        return None
    if i is None:
        return np.asarray(vals, np.float64)
    if any(i > len(x) or x[i - 1] is None for x in vals):
        return None
    return np.asarray([x[i - 1] for x in vals], np.float64)


def _sums(run: CountsRun, metric: str, y, n, y2, pairing: str) -> DocSums:
    keys = _keys(run, pairing)
    docs, inv = np.unique(keys, return_inverse=True)
    G = len(docs)
    return DocSums(metric=metric, doc_id=docs, y=np.bincount(inv, weights=y, minlength=G),
                   n=np.bincount(inv, weights=n, minlength=G).astype(np.int64),
                   y2=np.bincount(inv, weights=y2, minlength=G))


def _bounds(run: CountsRun, i: int) -> tuple[float, float] | None:
    a = _col(run, "a_ge", i)
    n, D = _col(run, "n"), _col(run, "D")
    if a is None or n is None:
        return None
    hi = n.copy()
    if i >= 2 and D is not None:
        hi = np.minimum(hi, np.floor((D - n) / (i - 1)))
    lo = a.copy()
    K = np.asarray([k if k is not None and not (isinstance(k, float) and math.isnan(k)) else np.nan
                    for k in run.units["k_max"]], np.float64)
    if D is not None and i >= 2:
        with np.errstate(invalid="ignore", divide="ignore"):
            need = np.ceil((D - n * (i - 1)) / (K - i + 1))
        lo = np.maximum(lo, np.where(np.isfinite(need) & (K >= i), need, 0))
    A = a.sum()
    return (A / hi.sum() if hi.sum() else float("nan"), A / lo.sum() if lo.sum() else float("nan"))


def figure(run: CountsRun, metric: str, pairing: str = "doc", B: int = 0, seed: int = 0) -> Figure:
    kind, i = parse(metric)
    m = name(metric)
    refused = lambda why: Figure(run.arm, m, "refused", reason=why)  # noqa: E731
    if kind in ("p", "cond") and i > run.K and run.K and _col(run, "a_ge", 1) is not None:
        return refused(f"depth {i} was never drafted (K={run.K})")
    if kind == "p":
        y, n = _col(run, "a_ge", i), _col(run, "k_ge", i)
        if y is None:
            return refused(run.why_not("p_i") or "no per-depth acceptance counts")
        if n is None:
            lo, hi = _bounds(run, i)
            return Figure(run.arm, m, "bounds", low=lo, high=hi, reason=run.why_not("p_i") or
                          "#(k >= i) unknown: k varied")
        y2, sd_kind = y, "binomial"
    elif kind == "cond":
        y, n = _col(run, "a_ge", i), _col(run, "cond_den", i)
        if y is None or n is None:
            return refused(run.why_not("p_i_cond") or "needs the joint count of k and accept_len per step")
        y2, sd_kind = y, "delta"
    elif kind == "tokens":
        steps, A = _col(run, "n"), _col(run, "A")
        if steps is None or A is None:
            return refused(run.why_not("tokens_per_step") or "the number of verify steps is not reported")
        y, n = steps + A, steps
        y2 = _col(run, "y2_tok")
        sd_kind = "delta"
    else:
        y, n = _col(run, "A"), _col(run, "D")
        if y is None or n is None:
            return refused(run.why_not(DAR) or "drafted and accepted token totals are not reported")
        y2, sd_kind = None, "n/a"
    s = _sums(run, m, y, n, np.zeros_like(y) if y2 is None else y2, pairing)
    if s.N == 0:
        return refused(f"no step in the denominator of {m}")
    iid = s.iid_sd if y2 is not None else None
    csd = cluster.cluster_sd(s) if run.clusters else None
    return Figure(run.arm, m, "exact", value=s.value, n=s.N, iid_sd=iid, sd_kind=sd_kind,
                  cluster_sd=csd if csd is None or math.isfinite(csd) else None,
                  n_clusters=len(s.doc_id) if run.clusters else None, sums=s)


def metrics(run: CountsRun) -> list[str]:
    K = run.K
    return ([f"p{i}" for i in range(1, K + 1)] + [f"p{i}_cond" for i in range(2, K + 1)]
            + ["tokens_per_step", DAR])


def _align_pairs(a: CountsRun, b: CountsRun) -> tuple[CountsRun, CountsRun, int, int]:
    """Keep the requests both runs have (missing = no verify step, or not sent)."""
    ka = set(zip(a.units["doc_id"], a.units["turn"]))
    kb = set(zip(b.units["doc_id"], b.units["turn"]))
    both = ka & kb

    def keep(r: CountsRun) -> CountsRun:
        mask = [(d, t) in both for d, t in zip(r.units["doc_id"], r.units["turn"])]
        return CountsRun(r.path, r.arm, r.manifest, r.telemetry, r.units[mask].reset_index(drop=True), r.K)

    return keep(a), keep(b), len(ka - both), len(kb - both)


def difference(control: CountsRun, treatment: CountsRun, metric: str, B: int = 2000, seed: int = 0,
               pairing: str = "doc") -> Difference:
    """treatment - control with the sds both grains support; a figure either cannot give is refused."""
    fa, fb = figure(control, metric, pairing), figure(treatment, metric, pairing)
    for r, f in ((control, fa), (treatment, fb)):
        if f.status != "exact":
            what = "is known only within bounds" if f.status == "bounds" else "is not available"
            raise AtlasError(f"{r.path}: {f.metric} {what}: {f.reason}")
    clustered = control.clusters is not None and treatment.clusters is not None

    def rate(f: Figure) -> Rate:
        return Rate(metric=f.metric, arm=f.arm, value=f.value, n=f.n,
                    sd=f.iid_sd if f.iid_sd is not None else float("nan"),
                    sd_kind=f.sd_kind if f.iid_sd is not None else "n/a",
                    cluster_sd=f.cluster_sd, n_clusters=f.n_clusters,
                    bootstrap=cluster.bootstrap(f.sums, B=B, seed=seed) if (B and clustered) else None)

    ra, rb = rate(fa), rate(fb)
    sd = math.hypot(ra.sd, rb.sd)
    return Difference(metric=fa.metric, control=ra, treatment=rb, delta=fb.value - fa.value, sd=sd,
                      sd_kind=ra.sd_kind if math.isfinite(sd) else "n/a",
                      cluster_sd=cluster.cluster_sd_difference(fa.sums, fb.sums) if clustered else None,
                      bootstrap=cluster.bootstrap_difference(fa.sums, fb.sums, B=B, seed=seed)
                      if (B and clustered) else None)


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
        if d.cluster_sd is not None:
            lines.append(f"  delta {format_delta(d.delta, d.z_by('cluster'))} with the paired sd {d.cluster_sd:.4f} "
                         f"(requests as clusters, CRV1)")
        if d.bootstrap is not None:
            b = d.bootstrap
            lines.append(f"  bootstrap over requests: sd {b.sd:.4f}, {b.level:.0%} CI [{b.ci_low:+.4f}, {b.ci_high:+.4f}]")
        if math.isfinite(d.sd):
            lines.append(f"  unpaired {d.sd_kind} sd {d.sd:.4f}: {d}")
        return "\n".join(lines)

    __str__ = summary

    def to_dict(self) -> dict:
        return {"pairing": "request (doc_id, turn)", "matched": self.matched, "only_control": self.only_control,
                "only_treatment": self.only_treatment, "difference": self.difference.to_dict()}


def pairs(control: CountsRun, treatment: CountsRun, metric: str, B: int = 2000, seed: int = 0) -> Pairs:
    for r in (control, treatment):
        if r.clusters is None:
            raise AtlasError(f"{r.path}: global counters have no requests to pair")
        if r.clusters == "request" and r.telemetry is not None:
            raise AtlasError(f"{r.path}: {r.telemetry.why_not('request_pairing')}")
    a, b, only_a, only_b = _align_pairs(control, treatment)
    if a.units.empty:
        raise AtlasError(f"{control.path} vs {treatment.path}: no (doc_id, turn) in both runs")
    d = difference(a, b, metric, B=B, seed=seed, pairing="request")
    return Pairs(d, len(a.units), only_a, only_b)


# ---- the report of runs without a step table ----------------------------------------------

def _fmt(v, digits=4) -> str:
    return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{digits}f}"


def _table(header, rows) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(map(str, r)) + " |" for r in rows])


@dataclass(frozen=True)
class CountsReport:
    path: Path
    verdict: object
    data: dict


def build_report(runs: list[CountsRun], out: Path, prereg=None, B: int = 2000, seed: int = 0,
                 mismatches: tuple[str, ...] = ()) -> CountsReport:
    from atlas_ab.analysis.prereg import evaluate

    names = [r.arm for r in runs]
    if len(set(names)) != len(names):
        raise AtlasError(f"two runs carry the same arm name ({', '.join(names)}); a report needs distinct arms")
    if prereg is not None:
        by = {r.arm: r for r in runs}
        for role, arm in (("control", prereg.control), ("treatment", prereg.treatment)):
            if arm not in by:
                raise AtlasError(f"{prereg.path}: {role} arm {arm!r} matches none of the runs given "
                                 f"({', '.join(names)})")
        control = by[prereg.control]
        others = [by[prereg.treatment]] + [r for r in runs if r.arm not in (prereg.control, prereg.treatment)]
    else:
        control, others = runs[0], runs[1:]
    ordered = [control] + others
    K = max(max(r.K for r in ordered), 1)
    mets = [f"p{i}" for i in range(1, K + 1)] + [f"p{i}_cond" for i in range(2, K + 1)] + ["tokens_per_step", DAR]
    figs = {r.arm: {m: figure(r, m) for m in mets} for r in ordered}
    verdict, comps = None, []
    for t in others:
        for m in mets:
            fa, fb = figs[control.arm][m], figs[t.arm][m]
            if fa.status == "exact" and fb.status == "exact":
                comps.append(difference(control, t, m, B=B, seed=seed))
    if prereg is not None:
        primary = prereg.primary_metric
        d = difference(control, others[0], primary, B=B, seed=seed)
        if prereg.decides == "binomial" and not math.isfinite(d.sd):
            raise AtlasError(f"{prereg.path}: decides by the i.i.d. sd, which {primary} does not have at this grain "
                             f"(the histogram is missing)")
        if prereg.decides in ("cluster", "bootstrap") and (control.clusters is None or others[0].clusters is None):
            raise AtlasError(f"{prereg.path}: decides by the {prereg.decides} sd; global counters have no "
                             "requests or documents to cluster (binomial sd only)")
        verdict = evaluate(prereg, d)

    out.mkdir(parents=True, exist_ok=True)
    md = [f"# Acceptance report: {' vs '.join(r.arm for r in ordered)}", "",
          f"Generated {_dt.datetime.now().isoformat(timespec='seconds')} by `python -m atlas_ab.analysis report` "
          "from runs without a step table: only what their telemetry makes exact is reported.", "", "## Runs", ""]
    md += _table(["arm", "run directory", "source", "grain", "units", "clusters"],
                 [[r.arm, f"`{r.path}`", r.source, r.grain, f"{len(r.units):,}", r.clusters or "none"]
                  for r in ordered])
    if mismatches:
        md += ["", "**Provenance mismatch, compared anyway (--allow-mismatch):**", ""] + [f"- {m}" for m in mismatches]
    if verdict is not None:
        md += ["", "## Pre-registered verdict", "", f"**{verdict.status}**: {verdict.reason}.", "",
               f"- criterion: {prereg.criterion()}", f"- pre-registration: `{prereg.path}` (sha256 `{prereg.sha256}`)",
               f"- observed: {format_delta(verdict.delta, verdict.z)} with the {prereg.decides} sd {verdict.sd:.4f}"
               if verdict.sd is not None else f"- observed: {verdict.delta:+.4f}; the {prereg.decides} sd was not computed"]
    md += ["", "## Figures", ""]
    rows = []
    for r in ordered:
        for m in mets:
            f = figs[r.arm][m]
            if f.status == "exact":
                rows.append([r.arm, f.metric, _fmt(f.value), f"{f.n:,}", _fmt(f.iid_sd), _fmt(f.cluster_sd), "exact"])
            elif f.status == "bounds":
                rows.append([r.arm, f.metric, f"[{_fmt(f.low)}, {_fmt(f.high)}]", "", "", "", "bounds: " + f.reason])
            else:
                rows.append([r.arm, f.metric, "", "", "", "", "not available: " + f.reason])
    md += _table(["arm", "metric", "value", "n", "i.i.d. sd", "cluster sd", "status"], rows)
    if comps:
        md += ["", f"## Differences (vs {control.arm})", ""]
        md += _table(["comparison", "metric", "delta", "i.i.d. sd", "cluster sd", "bootstrap 95% CI"],
                     [[f"{d.treatment.arm} - {d.control.arm}", d.metric, f"{d.delta:+.4f}",
                       format_delta(d.delta, d.z) if math.isfinite(d.sd) else "n/a",
                       format_delta(d.delta, d.z_by("cluster")) if d.cluster_sd is not None else "n/a",
                       f"[{d.bootstrap.ci_low:+.4f}, {d.bootstrap.ci_high:+.4f}]" if d.bootstrap else "n/a"]
                      for d in comps])
    md += ["", "## What the telemetry cannot give", ""]
    for r in ordered:
        if r.telemetry is None:
            md.append(f"- {r.arm}: a step table: everything")
            continue
        md += [f"- {r.arm}: {k}: {v}" for k, v in r.telemetry.not_available.items()]
        md += [f"- {r.arm}: note: {n}" for n in r.telemetry.notes]
    path = out / "report.md"
    path.write_text("\n".join(md) + "\n")
    data = {"report": str(path), "runs": [{"arm": r.arm, "path": str(r.path), "source": r.source, "grain": r.grain,
                                           "units": len(r.units), "clusters": r.clusters,
                                           "telemetry": r.telemetry.to_dict() if r.telemetry else None}
                                          for r in ordered],
            "figures": {a: {m: f.to_dict() for m, f in fs.items()} for a, fs in figs.items()},
            "comparisons": [d.to_dict() for d in comps],
            "verdicts": [verdict.to_dict()] if verdict is not None else [], "mismatches": list(mismatches)}
    from atlas_ab.analysis.cli import dump_json
    (out / "report.json").write_text(dump_json(data))
    return CountsReport(path, verdict, data)
