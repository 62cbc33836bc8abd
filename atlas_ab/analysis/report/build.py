"""`report RUN...`: a Markdown report with PNGs next to it (and report.json with every number),
readable without the terminal, that judges the runs' pre-registrations.

Which pre-registrations: by default the ones the runs' study locked before its first step
(their text is in every manifest). A pre-registration is locked only if every arm it names
holds its sha256 (config.prereg.registrations); arms that locked different texts are refused.
A `--prereg FILE` whose name the study locked with another text gets `PREREG CHANGED` and no
verdict, naming both hashes and the changed fields (`--evaluate-edited` judges it anyway); any
other text not locked by every arm is `UNLOCKED` and gets no verdict (`--evaluate-unlocked`
judges it anyway). Either way the report says so at its very top.
Runs whose lossless gate checked nothing are refused for a verdict unless `allow_ungated`.

Runs without a step table (engine runs ingested at the request or counter grain: runs.UnitRun)
get the same report: every figure their grain makes exact, a bound or a refusal with the reason
where it does not, and "not available from this grain" where a section needs per-step rows.
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path

from atlas_ab import AtlasError
from atlas_ab.analysis import cli
from atlas_ab.analysis.comparison import (
    Comparison,
    UnitComparison,
    compare_runs,
    compare_units,
    figure,
    figure_names,
    oracle_probe,
)
from atlas_ab.analysis.criteria import Verdict
from atlas_ab.analysis.metrics import arm_metrics
from atlas_ab.analysis.report.judged import Judged, judge_registered, preregs_to_judge
from atlas_ab.analysis.report.markdown import table as _table
from atlas_ab.analysis.report.sections import (
    difference_items,
    not_from_grain,
    run_dict,
    run_row,
    sequential_png,
    unit_figure_table,
    verdict_lines,
)
from atlas_ab.analysis.report.step_tables import (
    UNCERTAINTY,
    class_deltas,
    class_table,
    depth_table,
    headline_table,
    histogram_table,
    turn_table,
    uncertainty_table,
    variance_saved,
)
from atlas_ab.analysis.runs import AnyRun, from_run


@dataclass(frozen=True)
class Report:
    path: Path                      # report.md
    judged: tuple[Judged, ...]
    comparisons: tuple[Comparison | UnitComparison, ...]
    data: dict                      # everything report.json holds

    @property
    def verdict(self) -> Verdict | None:
        """The first pre-registration's verdict (None without one)."""
        return self.judged[0].verdict if self.judged else None


def build_report(runs: list[AnyRun], out: Path, prereg: str | Path | None = None, n_boot: int = 2000,
                 seed: int = 0, mismatches: tuple[str, ...] = (), evaluate_edited: bool = False,
                 allow_ungated: bool = False, evaluate_unlocked: bool = False) -> Report:
    """The report of `runs`; `prereg` is a file to judge instead of the locked ones. Beside a run
    without a step table (runs.UnitRun) every run is read at the per-unit grain, the one all have."""
    if len(runs) < 1:
        raise AtlasError("report needs at least one run")
    names = [r.arm for r in runs]
    if len(set(names)) != len(names):
        raise AtlasError(f"two runs carry the same arm name ({', '.join(names)}); "
                         "a report needs distinct arms")
    if not all(r.has_steps for r in runs):
        runs = [from_run(r) if r.has_steps else r for r in runs]
    steps = runs[0].has_steps
    judged = judge_registered(runs, preregs_to_judge(runs, prereg), n_boot, seed, allow_ungated, evaluate_edited,
                              evaluate_unlocked)
    # the control: the first judged pre-registration's, else the first run
    first = judged[0].prereg if judged else None
    control = next((r for r in runs if first is not None and r.arm == first.arms[0]), runs[0])
    others = [r for r in runs if r is not control]
    metric = first.spec.primary_metric if first is not None and first.kind != "oracle" else \
        ("p2_uncond" if min(r.K for r in runs) >= 2 else "p1")
    ordered = [control] + others
    if steps:
        comps = [compare_runs(control, t, metric, n_boot=n_boot, seed=seed, mismatches=mismatches) for t in others]
        probes = [oracle_probe(r) for r in runs
                  if "oracle_hit2" in r.steps.columns and r.steps["oracle_hit2"].notna().any()]
    else:   # what each grain makes exact, bounds or why not, of every metric any run drafted
        names = figure_names(max(max(r.K for r in ordered), 1))
        unit_figures = {r.arm: {m: figure(r, m) for m in names} for r in ordered}
        comps = [compare_units(control, t, names, metric, n_boot=n_boot, seed=seed) for t in others]
        probes = []

    from atlas_ab.analysis.report import plots  # matplotlib: imported when a figure is drawn

    out.mkdir(parents=True, exist_ok=True)
    cells = [r.cells() for r in ordered] if steps else [None] * len(ordered)
    if steps:
        # a single run has no comparison: its own figures only
        arms = [comps[0].control] + [c.treatment for c in comps] if comps else [arm_metrics(cells[0])]
    figs = {}
    if comps or judged:
        figs["difference"] = plots.difference_figure(difference_items(judged, comps), out / "difference.png")
    for j in judged:
        if j.sequential is not None:
            figs[f"sequential_{j.prereg.name}"] = _sequential_path(plots, j.sequential, j.prereg.name,
                                                                   out / sequential_png(j.prereg))
    if steps:
        figs.update({"depth": plots.depth_figure(cells, out / "depth.png"),
                     "histogram": plots.histogram_figure(arms, out / "histogram.png"),
                     "turns": plots.turn_figure(cells, out / "turns.png")})

    md = []
    if mismatches:    # at the top: what follows compares arms that may not be comparable
        md += ["> **WARNING: Provenance mismatch, compared anyway (--allow-mismatch):**", ">"]
        md += [f"> - {m}" for m in mismatches] + [""]
    for j in judged:
        if j.warning():
            md += [f"> {j.warning()}", ""]
    md += [f"# Acceptance report: {' vs '.join(r.arm for r in ordered)}", "",
           f"Generated {_dt.datetime.now().isoformat(timespec='seconds')} by `python -m atlas_ab.analysis report`.",
           "", "## Runs", ""]
    md += _table(["arm", "run directory", "status", "gate", "K", "steps", "clusters", "workload.hash", "model.hash",
                  "code"], [run_row(r, c) for r, c in zip(ordered, cells)])
    tels = [(r, r.telemetry) for r in ordered if r.telemetry is not None]
    if tels:  # ingested engine runs: say what their grain could not give (atlas_ab/ingest/grain.py)
        md += ["", "## Engine telemetry", ""]
        for r, t in tels:
            md.append(f"- {r.arm}: {t.source} ({t.format}), grain {t.grain}, clusters {t.clusters or 'none'}")
            md += [f"  - not available: {k}: {v}" for k, v in t.not_available.items()]
            md += [f"  - note: {n}" for n in t.notes]
    if judged:
        md += ["", "## Pre-registered verdicts", ""]
        for j in judged:
            md += verdict_lines(j) + [""]
    if "difference" in figs:
        md += ["", "## The difference that decides", "",
               "Each comparison's difference with the 95% CI of the sd that decides (thin) and +-threshold sd "
               "(thick: the criterion needs it clear of zero), zero and the minimum effect as lines.", "",
               "![paired difference with the threshold](difference.png)"]
    if not steps:
        md += ["", "## Figures (what each run's grain makes exact)", ""] + unit_figure_table(unit_figures)
    if comps:
        if steps:
            md += ["", f"## Headline (deltas vs {control.arm}; sd = unpooled i.i.d. sd)", ""]
            md += headline_table(comps, arms[0])
        md += ["", "## Uncertainty", "", UNCERTAINTY, ""]
        md += uncertainty_table(comps)
        md += variance_saved(comps) if steps else []
    class_data = []
    if steps:
        md += ["", "## Per depth", "", "![per-depth acceptance](depth.png)", ""] + depth_table(arms)
        md += ["", "## Acceptance-length histogram", "", "![acceptance-length histogram](histogram.png)", ""]
        md += histogram_table(arms)
        md += ["", "## Cold vs warm turns", ""] + class_table(arms)
        deltas_table, class_data = class_deltas(cells[0], cells[1:])
        if class_data:
            md += ["", "Deltas within each turn class:", ""] + deltas_table
        md += ["", "## By turn", "", "![acceptance by turn](turns.png)", ""] + turn_table(arms)
    else:
        md += not_from_grain(ordered)
    if probes:
        md += ["", "## ORACLE_P2 probe (McNemar, paired within run)", ""]
        md += ["```"] + [p.summary() for p in probes] + ["```"]
    md += ["", "## Definitions", "",
           "- depth i accepted when accept_len >= i; steps with k < i are left out of depth i's denominator.",
           "- p_i = #(accept_len >= i) / #(k >= i); p_i_cond = #(accept_len >= i) / #(accept_len >= i-1, k >= i).",
           "- tokens/step = mean of 1 + accept_len over steps with k >= 1; serial steps (k = 0) count only "
           "as serial steps. n = verify steps (k >= 1).", ""]
    path = out / "report.md"
    path.write_text("\n".join(md))
    data = {"report": str(path), "figures": {k: str(v) for k, v in figs.items()},
            "runs": [run_dict(r) for r in ordered],
            "mismatches": list(mismatches), "verdicts": [j.to_dict() for j in judged],
            "comparisons": [c.to_dict() for c in comps], "turn_class_deltas": class_data,
            "arms": {a.arm: a.to_dict() for a in arms} if steps else
            {a: {"arm": a, "K": r.K, "figures": {m: f.to_dict() for m, f in unit_figures[a].items()}}
             for a, r in zip(unit_figures, ordered)},
            "oracle_probes": [p.to_dict() for p in probes],
            "telemetry": {r.arm: t.to_dict() for r, t in tels}}
    (out / "report.json").write_text(cli.dump_json(data))
    return Report(path=path, judged=tuple(judged), comparisons=tuple(comps), data=data)


def _sequential_path(plots, v, name: str, path: Path) -> Path:
    """A sequential registration's path over its looks (v: sequential.SequentialView)."""
    r = v.result
    sv = (v.record or {}).get("saving") or {}
    return plots.sequential_figure(v.looks, path, min_effect=r.min_effect, direction=r.direction,
                                   decided_at=r.decided_at, title=f"{name}: {r.metric}, {r.decision}",
                                   budget=sv.get("documents_budget"),
                                   line="minimum effect" if r.margin is None else "margin")
