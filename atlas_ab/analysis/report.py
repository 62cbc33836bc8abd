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

Runs without a step table (engine runs ingested at the request or counter grain: units.UnitRun)
get the same report: every figure their grain makes exact, a bound or a refusal with the reason
where it does not, and "not available from this grain" where a section needs per-step rows.
"""
from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from atlas_ab import AtlasError
from atlas_ab.analysis import cli, criteria, paired, plots
from atlas_ab.analysis.code_check import code_of
from atlas_ab.analysis.comparison import Comparison, compare_runs, headline_metrics
from atlas_ab.analysis.criteria import Judgement, Verdict
from atlas_ab.analysis.load import Run
from atlas_ab.analysis.markdown import table as _table
from atlas_ab.analysis.metrics import TURN_CLASSES, Cells, arm_metrics
from atlas_ab.analysis.stats import compare as compare_cells, format_delta
from atlas_ab.analysis.unit_runs import UnitComparison, UnitRun, compare_units, figure, from_run, metrics
from atlas_ab.config.prereg import Prereg, Registration, registrations

HEAD = [("n_verify", "n"), ("p1", "p1"), ("p2_uncond", "p2_uncond"), ("p2_cond", "p2_cond"),
        ("tokens_per_step", "tokens/step")]


@dataclass(frozen=True)
class Judged:
    """One pre-registration as this report judged it."""
    prereg: Prereg
    origin: str                      # locked | unlocked | changed (no verdict) | edited | evaluated unlocked
    judgement: Judgement
    locked_sha256: str | None = None
    why: str = ""                    # unlocked: which arms did not lock it
    sequential: object = None        # a sequential registration: its path (sequential_report.SequentialView)

    @property
    def verdict(self) -> Verdict:
        return self.judgement.verdict

    @property
    def locked(self) -> bool:
        return self.origin == "locked"

    def warning(self) -> str | None:
        """The line the report opens with when this verdict is not the pre-registered one."""
        name = f"`{self.prereg.path.name}` (sha256 `{self.prereg.sha256}`)"
        if self.origin == "edited":
            return (f"**WARNING: JUDGED AGAINST AN EDITED PRE-REGISTRATION.** `{self.prereg.path.name}` was locked at "
                    f"sha256 `{self.locked_sha256}` when the study began; this report evaluated the edited text "
                    f"(sha256 `{self.prereg.sha256}`) at the user's request (--evaluate-edited). Its verdict is not "
                    "the pre-registered one.")
        if self.origin == "evaluated unlocked":
            return (f"**WARNING: UNLOCKED PRE-REGISTRATION, JUDGED AT THE USER'S REQUEST.** {name}: {self.why}. "
                    "Its verdict is not a pre-registered one (--evaluate-unlocked).")
        if self.origin == "unlocked":
            return (f"**UNLOCKED PRE-REGISTRATION: NO VERDICT.** {name}: {self.why}. A text counts as locked only "
                    "if every arm it names holds its sha256 (pass --evaluate-unlocked to judge it anyway).")
        if self.origin == "changed":
            return (f"**PREREG CHANGED: NO VERDICT.** {name} is not the text the study locked under that name "
                    f"(sha256 `{self.locked_sha256}`).")
        return None

    def summary(self) -> str:
        """What stdout says about it."""
        j = self.judgement.summary() if self.sequential is None else \
            f"{self.prereg.name}: {self.sequential.summary()}"
        if self.origin == "edited":
            return "WARNING: judged against an EDITED pre-registration (--evaluate-edited)\n" + j
        if self.origin == "evaluated unlocked":
            return (f"WARNING: UNLOCKED pre-registration {self.prereg.path.name} ({self.why}), judged at the user's "
                    "request (--evaluate-unlocked)\n" + j)
        return j

    def to_dict(self) -> dict:
        sens = self.judgement.sensitivity
        return {"origin": self.origin, "locked": self.locked, "locked_sha256": self.locked_sha256,
                **self.verdict.to_dict(), "details": self.judgement.details,
                "sensitivity": None if sens is None else {**sens.to_dict(), "line": sens.line(self.verdict)},
                **({} if self.sequential is None else {"sequential": self.sequential.to_dict()})}


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


def preregs_to_judge(runs: list[Run], given: str | Path | None = None) -> list[Registration]:
    """The pre-registrations to judge over `runs` and how the runs hold them (locked or not)."""
    return registrations({r.arm: r.manifest for r in runs}, given)


def judge_registered(runs: list[Run], todo: list[Registration], n_boot: int, seed: int, allow_ungated: bool,
                     evaluate_edited: bool = False, evaluate_unlocked: bool = False) -> list[Judged]:
    """Each registration's judgement: a verdict where it is locked (or the user asked), none otherwise."""
    out = []
    for reg in todo:
        pr = reg.prereg
        for name in pr.arms:
            r = next((r for r in runs if r.arm == name), None)
            if r is not None and r.gate_status == "not run" and not allow_ungated:
                raise AtlasError(f"{r.path}: its lossless gate checked no sequence, so nothing shows its drafts "
                                 f"were verified losslessly; no verdict on it (pass --allow-ungated to judge anyway)")
        lk = reg.locked.sha256 if reg.locked else None
        if reg.status == "changed" and not evaluate_edited:
            out.append(Judged(pr, "changed", Judgement(criteria.changed(reg.locked, pr)), lk))
        elif reg.status == "unlocked" and not evaluate_unlocked:
            out.append(Judged(pr, "unlocked", Judgement(criteria.unlocked(reg)), lk, reg.why))
        else:
            origin = {"locked": "locked", "changed": "edited", "unlocked": "evaluated unlocked"}[reg.status]
            seq = None
            if getattr(pr.spec, "sequential", None) is not None:    # decided by its confidence sequence
                from atlas_ab.analysis.sequential_report import view
                seq = view(pr, runs)
            out.append(Judged(pr, origin, criteria.judge(pr, runs, n_boot=n_boot, seed=seed), lk, reg.why, seq))
    return out


def _fmt(v, col: str) -> str:
    if pd.isna(v):
        return "n/a"
    if col.startswith("n"):
        return f"{int(v):,}"
    return f"{v:.3f}" if col == "tokens_per_step" else f"{v:.4f}"


def _headline(comps: list[Comparison], control_arm) -> list[str]:
    arms = [control_arm] + [c.treatment for c in comps]
    rows = [[a.arm] + [_fmt(a.by_class.loc["all"].get(col), col) for col, _ in HEAD] for a in arms]
    for c in comps:
        row = [f"delta {c.treatment.arm} - {c.control.arm}", ""]
        for col, _ in HEAD[1:]:
            d = c.headline.get(col)
            if d is None:
                row.append("n/a")
            elif col == "tokens_per_step":
                row.append(f"{d.delta:+.3f} ({abs(d.z):.1f} sd), {d.relative:+.1%}")
            else:
                row.append(str(d))
        rows.append(row)
    return _table(["arm"] + [h for _, h in HEAD], rows)


def _uncertainty(comps: list[Comparison | UnitComparison]) -> list[str]:
    rows = []
    for c in comps:
        for m, d in c.headline.items():
            b = d.bootstrap
            none = f"not computed ({d.cluster_note})" if d.cluster_note else "n/a"
            rows.append([f"{d.treatment.arm} - {d.control.arm}", m, f"{d.delta:+.4f}",
                         f"{d.se:.4f} ({d.se_kind}) {format_delta(d.delta, d.z)}" if math.isfinite(d.se) else "n/a",
                         f"{d.cluster_se:.4f} {format_delta(d.delta, d.z_by('cluster'))}"
                         if d.cluster_se is not None else none,
                         f"{d.deff:.2f}" if d.deff is not None and math.isfinite(d.deff) else "n/a",
                         f"[{b.ci_low:+.4f}, {b.ci_high:+.4f}] sd {b.se:.4f}" if b else none])
    return _table(["comparison", "metric", "delta", "i.i.d. sd", "cluster sd", "design effect",
                   "bootstrap 95% CI (clusters)"], rows)


def _variance_saved(comps: list[Comparison]) -> list[str]:
    """Sampled runs: each exact-probability metric's difference variance relative to the realized one."""
    rows = [[f"{c.treatment.arm} - {c.control.arm}", m, v["realized"], f"{v['sd']:.4f}", f"{v['realized_sd']:.4f}",
             v["sd_kind"], f"{v['ratio']:.3f}", f"{1 / v['ratio']:.2f}x" if v["ratio"] else "n/a"]
            for c in comps for m, v in c.variance_ratios.items()]
    if not rows:
        return []
    return ["", "## Exact acceptance probabilities", "",
            "Under sampling the verifier's accept probability of every draft is known (`accept_prob`), so "
            "`p{i}_expected` replaces depth i's accept coin by its probability and `alpha1` the whole depth-1 "
            "outcome by sum_x min(p_1, q_1). Each estimates the realized metric beside it without that noise; "
            "whether a difference's variance falls too depends on how the two arms' outcomes correlate, so the "
            "ratio is measured on these runs (the variance of the difference; cluster sd where both have one, "
            "and the paired sd where the arms pair, as coupled replays of one trajectory do).",
            ""] + _table(["comparison", "metric", "estimates", "sd", "realized sd", "sd kind", "variance ratio",
                          "steps the realized metric needs"], rows)


def _by_class(arms) -> list[str]:
    rows = [[a.arm, tc] + [_fmt(a.by_class.loc[tc].get(col), col) for col, _ in HEAD]
            + [_fmt(a.by_class.loc[tc]["n_serial"], "n")] for a in arms for tc in TURN_CLASSES]
    return _table(["arm", "turns"] + [h for _, h in HEAD] + ["serial steps"], rows)


def _class_deltas(control: Cells, others: list[Cells]) -> tuple[list[str], list[dict]]:
    """Headline deltas within cold and within warm turns (binomial and cluster sd)."""
    rows, data = [], []
    for t in others:
        for tc in ("cold", "warm"):
            a, b = control.where(tc), t.where(tc)
            if a.table.empty or b.table.empty:
                continue
            for m in headline_metrics(a, b):
                d = compare_cells(a, b, m, n_boot=0)
                if not (d.control.n and d.treatment.n):
                    continue
                rows.append([f"{t.arm} - {control.arm}", tc, m, f"{d.control.value:.4f}",
                             f"{d.treatment.value:.4f}", str(d),
                             format_delta(d.delta, d.z_by("cluster")) if d.cluster_se is not None else "n/a"])
                data.append({"treatment": t.arm, "turn_class": tc, **d.to_dict()})
    return _table(["comparison", "turns", "metric", "control", "treatment", "delta (binomial/delta sd)",
                   "delta (cluster sd)"], rows), data


def _depths(arms) -> list[str]:
    K = max(a.K for a in arms)
    cols = [f"p{i}" if i != 2 else "p2_uncond" for i in range(1, K + 1)] + [f"p{i}_cond" for i in range(2, K + 1)]
    rows = [[a.arm, str(a.K)] + [_fmt(a.by_class.loc["all"].get(c), c) for c in cols] for a in arms]
    return _table(["arm", "K"] + cols, rows)


def _histograms(arms) -> list[str]:
    K = max(a.K for a in arms)
    rows = []
    for a in arms:
        for (tc, k), row in a.histogram.iterrows():
            if tc == "all":
                rows.append([a.arm, str(k)] + [f"{int(row.get(j, 0)):,}" if j <= k else "" for j in range(K + 1)])
    return _table(["arm", "k"] + [f"accept_len={j}" for j in range(K + 1)], rows)


def _by_turn(arms) -> list[str]:
    rows = [[a.arm, str(t)] + [_fmt(r.get(col), col) for col, _ in HEAD]
            for a in arms for t, r in a.by_turn.iterrows()]
    return _table(["arm", "turn"] + [h for _, h in HEAD], rows)


def _difference_items(judged: list[Judged], comps: list[Comparison | UnitComparison]) -> list[plots.DifferenceItem]:
    items = [it for j in judged for it in j.judgement.items]
    if items:
        return items
    return [plots.DifferenceItem(label=f"{d.treatment.arm} - {d.control.arm}\n{d.metric}", delta=d.delta,
                                 se=d.cluster_se if d.cluster_se is not None else d.se if math.isfinite(d.se) else None,
                                 se_kind="cluster" if d.cluster_se is not None else d.se_kind)
            for d in (c.primary for c in comps) if d is not None]


def _verdict_lines(j: Judged) -> list[str]:
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
        return lines + j.sequential.lines() + ["", f"![sequential path]({_seq_png(pr)})"]
    lines.append(f"- observed: {v.measured()}")
    if v.se is not None and v.power_at_min_effect is not None:
        lines.append(f"- power to detect the minimum effect ({pr.spec.min_effect:g}) at {pr.spec.threshold_sd:g} sd "
                     f"given that sd: {v.power_at_min_effect:.2f}")
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


def _seq_png(pr: Prereg) -> str:
    return f"sequential_{pr.name}.png"


def build_report(runs: list[Run | UnitRun], out: Path, prereg: str | Path | None = None, n_boot: int = 2000,
                 seed: int = 0, mismatches: tuple[str, ...] = (), evaluate_edited: bool = False,
                 allow_ungated: bool = False, evaluate_unlocked: bool = False) -> Report:
    """The report of `runs`; `prereg` is a file to judge instead of the locked ones. Beside a run
    without a step table (units.UnitRun) every run is read at the per-unit grain, the one all have."""
    if len(runs) < 1:
        raise AtlasError("report needs at least one run")
    names = [r.arm for r in runs]
    if len(set(names)) != len(names):
        raise AtlasError(f"two runs carry the same arm name ({', '.join(names)}); "
                         "a report needs distinct arms")
    if any(isinstance(r, UnitRun) for r in runs):
        runs = [r if isinstance(r, UnitRun) else from_run(r) for r in runs]
    steps = not isinstance(runs[0], UnitRun)
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
        probes = [paired.oracle_probe(r) for r in runs
                  if "oracle_hit2" in r.steps.columns and r.steps["oracle_hit2"].notna().any()]
    else:   # what each grain makes exact, bounds or why not, of every metric any run drafted
        names = metrics(max(max(r.K for r in ordered), 1))
        unit_figures = {r.arm: {m: figure(r, m) for m in names} for r in ordered}
        comps = [compare_units(control, t, names, metric, n_boot=n_boot, seed=seed) for t in others]
        probes = []

    out.mkdir(parents=True, exist_ok=True)
    cells = [r.cells() for r in ordered] if steps else [None] * len(ordered)
    if steps:
        # a single run has no comparison: its own figures only
        arms = [comps[0].control] + [c.treatment for c in comps] if comps else [arm_metrics(cells[0])]
    figs = {}
    if comps or judged:
        figs["difference"] = plots.difference_figure(_difference_items(judged, comps), out / "difference.png")
    for j in judged:
        if j.sequential is not None:
            from atlas_ab.analysis.sequential_report import figure as path_figure
            figs[f"sequential_{j.prereg.name}"] = path_figure(j.sequential, j.prereg.name, out / _seq_png(j.prereg))
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
                  "code"], [_run_row(r, c) for r, c in zip(ordered, cells)])
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
            md += _verdict_lines(j) + [""]
    if "difference" in figs:
        md += ["", "## The difference that decides", "",
               "Each comparison's difference with the 95% CI of the sd that decides (thin) and +-threshold sd "
               "(thick: the criterion needs it clear of zero), zero and the minimum effect as lines.", "",
               "![paired difference with the threshold](difference.png)"]
    if not steps:
        md += ["", "## Figures (what each run's grain makes exact)", ""] + _unit_figures(unit_figures)
    if comps:
        if steps:
            md += ["", f"## Headline (deltas vs {control.arm}; sd = unpooled i.i.d. sd)", ""]
            md += _headline(comps, arms[0])
        md += ["", "## Uncertainty", "", UNCERTAINTY, ""]
        md += _uncertainty(comps)
        md += _variance_saved(comps) if steps else []
    class_data = []
    if steps:
        md += ["", "## Per depth", "", "![per-depth acceptance](depth.png)", ""] + _depths(arms)
        md += ["", "## Acceptance-length histogram", "", "![acceptance-length histogram](histogram.png)", ""]
        md += _histograms(arms)
        md += ["", "## Cold vs warm turns", ""] + _by_class(arms)
        class_table, class_data = _class_deltas(cells[0], cells[1:])
        if class_data:
            md += ["", "Deltas within each turn class:", ""] + class_table
        md += ["", "## By turn", "", "![acceptance by turn](turns.png)", ""] + _by_turn(arms)
    else:
        md += _not_from_grain(ordered)
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
            "runs": [_run_dict(r) for r in ordered],
            "mismatches": list(mismatches), "verdicts": [j.to_dict() for j in judged],
            "comparisons": [c.to_dict() for c in comps], "turn_class_deltas": class_data,
            "arms": {a.arm: a.to_dict() for a in arms} if steps else
            {a: {"arm": a, "K": r.K, "figures": {m: f.to_dict() for m, f in unit_figures[a].items()}}
             for a, r in zip(unit_figures, ordered)},
            "oracle_probes": [p.to_dict() for p in probes],
            "telemetry": {r.arm: t.to_dict() for r, t in tels}}
    (out / "report.json").write_text(cli.dump_json(data))
    return Report(path=path, judged=tuple(judged), comparisons=tuple(comps), data=data)


UNCERTAINTY = ("Outcomes cluster by document (by source file where the workload cut several documents from "
               "one file), so the i.i.d. (binomial; delta method for p2_cond and tokens/step) sd misstates the "
               "variance of a rate. The cluster sd is CRV1 over those clusters (the same cluster in both arms "
               "is one cluster); the bootstrap resamples clusters jointly in both arms. Neither is reported "
               "with fewer than 10 clusters. Design effect = (cluster sd / i.i.d. sd)^2. When the arms run "
               "the same documents (a sweep does), the shared content correlates the arms and the design "
               "effect of a difference can fall below 1; under greedy verification both arms also commit the "
               "same text, so `mcnemar RUN_A RUN_B` pairs their steps position by position.")


def _run_row(r: Run | UnitRun, c: Cells | None) -> list[str]:
    """One line of the Runs table: a step run's steps and clusters, or a per-unit run's units."""
    size, clusters = (f"{len(r.steps):,}", _clusters(c)) if c is not None else \
        (f"{len(r.units.table):,} units", _unit_clusters(r))
    return [r.arm, f"`{r.path}`", r.status, r.gate_status, str(r.K), size, clusters, f"`{r.hash('workload')}`",
            f"`{r.hash('model')}`", code_of(r).short]


def _run_dict(r: Run | UnitRun) -> dict:
    size = {"steps": len(r.steps)} if isinstance(r, Run) else \
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


def _unit_figures(figures: dict[str, dict]) -> list[str]:
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


def _not_from_grain(runs: list[UnitRun]) -> list[str]:
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
