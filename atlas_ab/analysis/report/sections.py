"""The report's sections about its runs and verdicts: a line per run, each pre-registration's
verdict, the panels of the difference figure, and what a run's grain gives or lacks."""
from __future__ import annotations

import math

from atlas_ab.analysis.comparison import Comparison, UnitComparison
from atlas_ab.analysis.criteria import DifferenceItem, power_words
from atlas_ab.analysis.metrics import Cells
from atlas_ab.analysis.report.judged import Judged
from atlas_ab.analysis.report.markdown import table as _table
from atlas_ab.analysis.runs import AnyRun, UnitRun, code_of
from atlas_ab.config.prereg import Prereg


def difference_items(judged: list[Judged], comps: list[Comparison | UnitComparison]) -> list[DifferenceItem]:
    items = [it for j in judged for it in j.judgement.items]
    if items:
        return items
    return [DifferenceItem(label=f"{d.treatment.arm} - {d.control.arm}\n{d.metric}", delta=d.delta,
                                 se=d.cluster_se if d.cluster_se is not None else d.se if math.isfinite(d.se) else None,
                                 se_kind="cluster" if d.cluster_se is not None else d.se_kind)
            for d in (c.primary for c in comps) if d is not None]


def verdict_lines(j: Judged) -> list[str]:
    pr, v = j.prereg, j.verdict
    lines = [f"### {pr.name}: **{v.status}**", "", f"{v.reason}.", "",
             f"- criterion: {pr.criterion()}", f"- hypothesis: {pr.hypothesis}",
             f"- pre-registration: `{pr.path.name}` (sha256 `{pr.sha256}`; {j.origin}"
             + (f", locked sha256 `{j.locked_sha256}`" if j.locked_sha256 else "") + ")"]
    if v.status in ("PREREG CHANGED", "UNLOCKED"):
        return lines
    if j.sequential is not None:
        lines[0] = f"### {pr.name}: **{j.sequential.result.decision}** (sequential)"
        lines[2] = (f"Decided by its confidence sequence; the fixed-n reading of the same data: {v.status} "
                    f"({v.reason}).")
        return lines + j.sequential.lines() + ["", f"![sequential path]({sequential_png(pr)})"]
    lines.append(f"- observed: {v.measured()}")
    if v.se is not None and v.power_at_min_effect is not None:
        lines.append(f"- power to {power_words(pr)} at {pr.spec.threshold_sd:g} sd given that sd: "
                     f"{v.power_at_min_effect:.2f}")
    if j.judgement.sensitivity is not None:
        lines.append(f"- {j.judgement.sensitivity.line(v)}")
    # the pairing behind a matched-positions estimand (whole-arm ones show it in the sensitivity line)
    p = j.judgement.details.get("paired") if j.judgement.details.get("estimand") == "matched_positions" else None
    if p:
        saved = (f"; its sd is {p['saved_vs_iid']:.0%} below the unpaired i.i.d. sd and {p['saved_vs_cluster']:+.0%} "
                 "vs the unpaired cluster sd" if p.get("saved_vs_cluster") is not None else "")
        lines.append(f"- paired on {p['n_pairs']:,} matched steps ({p['matched_share']:.0%} of the smaller arm's)"
                     f"{saved}")
    return lines


def sequential_png(pr: Prereg) -> str:
    return f"sequential_{pr.name}.png"


def run_row(r: AnyRun, c: Cells | None) -> list[str]:
    """One line of the Runs table: a step run's steps and clusters, or a per-unit run's units."""
    size, clusters = (f"{len(r.steps):,}", _clusters(c)) if c is not None else \
        (f"{len(r.units.table):,} units", _unit_clusters(r))
    return [r.arm, f"`{r.path}`", r.status, r.gate_status, str(r.K), size, clusters, f"`{r.hash('workload')}`",
            f"`{r.hash('model')}`", code_of(r).short]


def run_dict(r: AnyRun) -> dict:
    size = {"steps": len(r.steps)} if r.has_steps else \
        {"units": len(r.units.table), "source": r.source, "grain": r.grain, "clusters": r.clusters}
    return {"arm": r.arm, "path": str(r.path), "status": r.status, "gate": r.gate_status, "K": r.K, **size,
            "workload_hash": r.hash("workload"), "model_hash": r.hash("model"), "code": code_of(r).to_dict()}


def _unit_clusters(r: UnitRun) -> str:
    u = r.units
    if u.clusters is None:
        return "none (global counters)"
    docs = u.table["doc_id"].unique()
    if u.cluster_map is None:
        return f"{len(docs)} {u.cluster_unit}s"
    return f"{len(set(u.cluster_map[docs]))} {u.cluster_unit}s ({len(docs)} documents)"


def _fmt4(v) -> str:
    return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.4f}"


def unit_figure_table(figures: dict[str, dict]) -> list[str]:
    """Each run's figures as its grain gives them: exact, bounds, or not available and why."""
    rows = []
    for arm, fs in figures.items():
        for f in fs.values():
            if f.status == "exact":
                rows.append([arm, f.metric, _fmt4(f.value), f"{f.n:,}", _fmt4(f.iid_se), _fmt4(f.cluster_se),
                             "exact"])
            elif f.status == "bounds":
                rows.append([arm, f.metric, f"[{_fmt4(f.low)}, {_fmt4(f.high)}]", "", "", "", "bounds: " + f.reason])
            else:
                rows.append([arm, f.metric, "", "", "", "", "not available from this grain: " + f.reason])
    return _table(["arm", "metric", "value", "n", "i.i.d. sd", "cluster sd", "status"], rows)


#: The sections drawn from per-step cells, and the telemetry figure that says why a grain lacks them.
STEP_SECTIONS = (("Per depth", None, "the per-depth plot and tables read per-step cells (the per-depth "
                                     "figures this grain gives are under Figures)"),
                 ("Acceptance-length histogram", "histogram", "the per-unit table keeps no acceptance-length "
                                                              "histogram"),
                 ("Cold vs warm turns", "by_turn", "figures per turn class are computed from per-step cells"),
                 ("By turn", "by_turn", "figures per turn are computed from per-step cells"))


def not_from_grain(runs: list[UnitRun]) -> list[str]:
    """The step report's per-step sections, each refused with the reason."""
    md = []
    for title, fig, why in STEP_SECTIONS:
        md += ["", f"## {title}", ""]
        md += [f"- {r.arm}: not available from this grain ({r.grain}): {(fig and r.why_not(fig)) or why}"
               for r in runs]
    return md


def _clusters(c: Cells) -> str:
    docs = c.table["doc_id"].nunique()
    if c.clusters is None:
        return f"{docs} documents"
    return f"{len(set(c.clusters[c.table['doc_id'].unique()]))} {c.cluster_unit}s ({docs} documents)"
