"""The report of runs without a step table: what their grain makes exact (with the sds it
supports), bounds, and refusals with the reason; the pre-registered verdict where the
registered sd exists. The figures and differences come from analysis/units.py (stats.estimate
and stats.compare_sums, as for step runs)."""
from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass
from pathlib import Path

from atlas_ab import AtlasError
from atlas_ab.analysis.markdown import table as _table
from atlas_ab.analysis.stats import format_delta
from atlas_ab.analysis.units import UnitRun, exact_difference, figure, metrics


def _fmt(v, digits=4) -> str:
    return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{digits}f}"


@dataclass(frozen=True)
class GrainReport:
    path: Path
    verdict: object
    data: dict


def grain_report(runs: list[UnitRun], out: Path, prereg=None, B: int = 2000, seed: int = 0,
                 mismatches: tuple[str, ...] = (), warning: str | None = None) -> GrainReport:
    """`warning`: a line the report opens with (a pre-registration the runs did not lock)."""
    from atlas_ab.analysis import criteria

    names = [r.arm for r in runs]
    if len(set(names)) != len(names):
        raise AtlasError(f"two runs carry the same arm name ({', '.join(names)}); a report needs distinct arms")
    spec = prereg.spec if prereg is not None else None
    if prereg is not None:
        if prereg.kind != "difference":
            raise AtlasError(f"{prereg.path}: runs without a step table are judged on a difference only, not a "
                             f"{prereg.kind}")
        by = {r.arm: r for r in runs}
        for role, arm in (("control", spec.arms.control), ("treatment", spec.arms.treatment)):
            if arm not in by:
                raise AtlasError(f"{prereg.path}: {role} arm {arm!r} matches none of the runs given "
                                 f"({', '.join(names)})")
        control = by[spec.arms.control]
        others = [by[spec.arms.treatment]] + [r for r in runs if r.arm not in spec.arm_names]
    else:
        control, others = runs[0], runs[1:]
    ordered = [control] + others
    mets = metrics(max(max(r.K for r in ordered), 1))
    figs = {r.arm: {m: figure(r, m) for m in mets} for r in ordered}
    verdict, comps = None, []
    for t in others:
        for m in mets:
            fa, fb = figs[control.arm][m], figs[t.arm][m]
            if fa.status == "exact" and fb.status == "exact":
                comps.append(exact_difference(control, t, m, B=B, seed=seed))
    if prereg is not None:
        primary, decides = spec.primary_metric, spec.decides.value
        d = exact_difference(control, others[0], primary, B=B, seed=seed)
        if decides == "binomial" and not math.isfinite(d.sd):
            raise AtlasError(f"{prereg.path}: decides by the i.i.d. sd, which {primary} does not have at this grain "
                             f"(the histogram is missing)")
        if decides in ("cluster", "bootstrap") and None in (control.units.clusters, others[0].units.clusters):
            raise AtlasError(f"{prereg.path}: decides by the {decides} sd; global counters have no "
                             "requests or documents to cluster (binomial sd only)")
        if spec.turns.value != "all":
            raise AtlasError(f"{prereg.path}: judges {spec.turns.value} turns; runs without a step table are judged "
                             "over all turns only")
        verdict = criteria.judge(prereg, ordered, B=B, seed=seed).verdict  # the one judge: UnitRun.cells() -> Units

    out.mkdir(parents=True, exist_ok=True)
    md = [f"> {warning}", ""] if warning else []
    md += [f"# Acceptance report: {' vs '.join(r.arm for r in ordered)}", "",
          f"Generated {_dt.datetime.now().isoformat(timespec='seconds')} by `python -m atlas_ab.analysis report` "
          "from runs without a step table: only what their telemetry makes exact is reported.", "", "## Runs", ""]
    md += _table(["arm", "run directory", "source", "grain", "units", "clusters"],
                 [[r.arm, f"`{r.path}`", r.source, r.grain, f"{len(r.units.table):,}", r.clusters or "none"]
                  for r in ordered])
    if mismatches:
        md += ["", "**Provenance mismatch, compared anyway (--allow-mismatch):**", ""] + [f"- {m}" for m in mismatches]
    if verdict is not None:
        md += ["", "## Pre-registered verdict", "", f"**{verdict.status}**: {verdict.reason}.", "",
               f"- criterion: {prereg.criterion()}", f"- pre-registration: `{prereg.path}` (sha256 `{prereg.sha256}`)",
               f"- observed: {verdict.measured()}"]
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
                                           "units": len(r.units.table), "clusters": r.clusters,
                                           "telemetry": r.telemetry.to_dict() if r.telemetry else None}
                                          for r in ordered],
            "figures": {a: {m: f.to_dict() for m, f in fs.items()} for a, fs in figs.items()},
            "comparisons": [d.to_dict() for d in comps],
            "verdicts": [verdict.to_dict()] if verdict is not None else [], "mismatches": list(mismatches)}
    from atlas_ab.analysis.cli import dump_json
    (out / "report.json").write_text(dump_json(data))
    return GrainReport(path, verdict, data)
