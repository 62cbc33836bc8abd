"""`report RUN... [--prereg FILE] [--out DIR]`: a Markdown report with PNGs next to it
(and report.json with every number), readable without the terminal."""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from atlas_ab import AtlasError
from atlas_ab.analysis import cli, paired, plots
from atlas_ab.analysis.compare import Comparison, compare_runs, headline_metrics
from atlas_ab.analysis.load import Run, check_provenance
from atlas_ab.analysis.metrics import TURN_CLASSES, Cells, arm_metrics, cell_counts
from atlas_ab.analysis.prereg import Prereg, Verdict, evaluate, load_prereg
from atlas_ab.analysis.stats import compare as compare_cells, format_delta

HEAD = [("n_verify", "n"), ("p1", "p1"), ("p2_uncond", "p2_uncond"), ("p2_cond", "p2_cond"),
        ("tokens_per_step", "tokens/step")]


@dataclass(frozen=True)
class Report:
    path: Path                      # report.md
    verdict: Verdict | None
    comparisons: tuple[Comparison, ...]
    data: dict                      # everything report.json holds


def _pick_arms(runs: list[Run], pr: Prereg | None) -> tuple[Run, list[Run]]:
    if pr is None:
        return runs[0], runs[1:]
    by_arm: dict[str, list[Run]] = {}
    for r in runs:
        by_arm.setdefault(r.arm, []).append(r)
    picked = []
    for role, name in (("control", pr.control), ("treatment", pr.treatment)):
        found = by_arm.get(name, [])
        if len(found) != 1:
            have = ", ".join(f"{r.arm} ({r.path})" for r in runs)
            raise AtlasError(f"{pr.path}: {role} arm {name!r} matches {len(found)} of the runs given "
                             f"(need exactly one; runs: {have})")
        picked.append(found[0])
    control, treatment = picked
    return control, [treatment] + [r for r in runs if r is not control and r is not treatment]


def _fmt(v, col: str) -> str:
    if pd.isna(v):
        return "n/a"
    if col.startswith("n"):
        return f"{int(v):,}"
    return f"{v:.3f}" if col == "tokens_per_step" else f"{v:.4f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(r) + " |" for r in rows])


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


def _uncertainty(comps: list[Comparison]) -> list[str]:
    rows = []
    for c in comps:
        for m, d in c.headline.items():
            b = d.bootstrap
            rows.append([f"{c.treatment.arm} - {c.control.arm}", m, f"{d.delta:+.4f}",
                         f"{d.sd:.4f} ({d.sd_kind}) {format_delta(d.delta, d.z)}",
                         f"{d.cluster_sd:.4f} {format_delta(d.delta, d.z_by('cluster'))}",
                         f"{d.deff:.2f}",
                         f"[{b.ci_low:+.4f}, {b.ci_high:+.4f}] sd {b.sd:.4f}" if b else "n/a"])
    return _table(["comparison", "metric", "delta", "i.i.d. sd", "cluster sd (docs)", "design effect",
                   "bootstrap 95% CI (docs)"], rows)


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
                d = compare_cells(a, b, m, B=0)
                if not (d.control.n and d.treatment.n):
                    continue
                rows.append([f"{t.arm} - {control.arm}", tc, m, f"{d.control.value:.4f}",
                             f"{d.treatment.value:.4f}", str(d),
                             format_delta(d.delta, d.z_by("cluster"))])
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


def build_report(runs: list[Run], out: Path, prereg: Prereg | None = None, B: int = 2000, seed: int = 0,
                 mismatches: tuple[str, ...] = ()) -> Report:
    if len(runs) < 1:
        raise AtlasError("report needs at least one run")
    names = [r.arm for r in runs]
    if len(set(names)) != len(names):
        raise AtlasError(f"two runs carry the same arm name ({', '.join(names)}); "
                         "a report needs distinct arms")
    control, others = _pick_arms(runs, prereg)
    metric = prereg.primary_metric if prereg else "p2_uncond"
    if prereg is None and min(r.K for r in runs) < 2:
        metric = "p1"  # without a pre-registration, fall back to a depth every arm observed
    comps = [compare_runs(control, t, metric, B=B, seed=seed, mismatches=mismatches) for t in others]
    verdict = evaluate(prereg, comps[0].primary) if prereg else None
    probes = [paired.oracle_probe(r) for r in runs
              if "oracle_hit2" in r.steps.columns and r.steps["oracle_hit2"].notna().any()]

    out.mkdir(parents=True, exist_ok=True)
    ordered = [control] + others
    cells = [cell_counts(r.steps, r.arm) for r in ordered]
    # a single run has no comparison: its own figures only
    arms = [comps[0].control] + [c.treatment for c in comps] if comps else [arm_metrics(cells[0])]
    figs = {"depth": plots.depth_figure(cells, out / "depth.png"),
            "histogram": plots.histogram_figure(arms, out / "histogram.png"),
            "turns": plots.turn_figure(arms, out / "turns.png")}

    md = [f"# Acceptance report: {' vs '.join(r.arm for r in ordered)}", "",
          f"Generated {_dt.datetime.now().isoformat(timespec='seconds')} by `python -m atlas_ab.analysis report`.",
          "", "## Runs", ""]
    md += _table(["arm", "run directory", "status", "K", "steps", "workload.hash", "model.hash"],
                 [[r.arm, f"`{r.path}`", r.status, str(r.K), f"{len(r.steps):,}",
                   f"`{r.hash('workload')}`", f"`{r.hash('model')}`"] for r in ordered])
    tels = [(r, r.telemetry) for r in ordered if r.telemetry is not None]
    if tels:  # ingested engine runs: say what their grain could not give (atlas_ab/ingest/grain.py)
        md += ["", "## Engine telemetry", ""]
        for r, t in tels:
            md.append(f"- {r.arm}: {t.source} ({t.format}), grain {t.grain}, clusters {t.clusters or 'none'}")
            md += [f"  - not available: {k}: {v}" for k, v in t.not_available.items()]
            md += [f"  - note: {n}" for n in t.notes]
    if mismatches:
        md += ["", "**Provenance mismatch, compared anyway (--allow-mismatch):**", ""]
        md += [f"- {m}" for m in mismatches]
    if verdict:
        md += ["", "## Pre-registered verdict", "", f"**{verdict.status}**: {verdict.reason}.", "",
               f"- criterion: {prereg.criterion()}", f"- hypothesis: {prereg.hypothesis}",
               f"- pre-registration: `{prereg.path}` (sha256 `{prereg.sha256}`)",
               f"- observed: {format_delta(verdict.delta, verdict.z)} with the {prereg.decides} sd "
               f"{verdict.sd:.4f}",
               f"- power to detect the minimum effect ({prereg.min_effect:g}) at {prereg.threshold_sd:g} sd "
               f"given that sd: {verdict.power_at_min_effect:.2f}"]
    if comps:
        md += ["", f"## Headline (deltas vs {control.arm}; sd = unpooled i.i.d. sd)", ""]
        md += _headline(comps, arms[0])
        md += ["", "## Uncertainty", "",
               "Outcomes cluster by document, so the i.i.d. (binomial; delta method for p2_cond "
               "and tokens/step) sd misstates the variance of a rate. The cluster sd treats documents "
               "as clusters (CRV1, the same document in both arms is one cluster); the bootstrap "
               "resamples documents jointly in both arms. Design effect = (cluster sd / i.i.d. sd)^2. "
               "When the arms run the same documents (a sweep does), the shared content correlates "
               "the arms and the design effect of a difference can fall below 1; under greedy "
               "verification both arms also commit the same text, so `mcnemar RUN_A RUN_B` pairs "
               "their steps position by position.", ""]
        md += _uncertainty(comps)
    md += ["", "## Per depth", "", "![per-depth acceptance](depth.png)", ""] + _depths(arms)
    md += ["", "## Acceptance-length histogram", "", "![acceptance-length histogram](histogram.png)", ""]
    md += _histograms(arms)
    md += ["", "## Cold vs warm turns", ""] + _by_class(arms)
    class_table, class_data = _class_deltas(cells[0], cells[1:])
    if class_data:
        md += ["", "Deltas within each turn class:", ""] + class_table
    md += ["", "## By turn", "", "![acceptance by turn](turns.png)", ""] + _by_turn(arms)
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
            "runs": [{"arm": r.arm, "path": str(r.path), "status": r.status, "K": r.K, "steps": len(r.steps),
                      "workload_hash": r.hash("workload"), "model_hash": r.hash("model")} for r in ordered],
            "mismatches": list(mismatches), "verdict": verdict.to_dict() if verdict else None,
            "comparisons": [c.to_dict() for c in comps], "turn_class_deltas": class_data,
            "arms": {a.arm: a.to_dict() for a in arms},
            "oracle_probes": [p.to_dict() for p in probes],
            "telemetry": {r.arm: t.to_dict() for r, t in tels}}
    (out / "report.json").write_text(cli.dump_json(data))
    return Report(path=path, verdict=verdict, comparisons=tuple(comps), data=data)


def run(args) -> int:
    from atlas_ab.ingest import counts

    out = Path(args.out) if args.out else Path("analysis/reports") / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    if any(counts.needs_counts(p, args.allow_incomplete) for p in args.runs):
        # engine runs without a step table: the report of what their grain makes exact
        runs = [counts.load_counts(p, args.allow_incomplete) for p in args.runs]
        mismatches = check_provenance(runs, args.allow_mismatch) if len(runs) > 1 else []
        pr = load_prereg(args.prereg) if args.prereg else None
        rep = counts.build_report(runs, out, prereg=pr, B=args.bootstrap, seed=args.seed,
                                  mismatches=tuple(mismatches))
    else:
        runs, mismatches = cli.load_runs(args.runs, args, optional=("oracle_hit2",))
        pr = load_prereg(args.prereg) if args.prereg else None
        rep = build_report(runs, out, prereg=pr, B=args.bootstrap, seed=args.seed, mismatches=tuple(mismatches))
    if args.json:
        cli.emit_json(rep.data)
    else:
        if rep.verdict:
            print(rep.verdict.summary())
        print(f"report: {rep.path}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("report", help="Markdown report (+ PNGs, report.json); evaluates a pre-registration")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories; the first is the control "
                                                          "unless --prereg names the arms")
    p.add_argument("--prereg", help="pre-registration YAML (analysis/prereg/*.yaml)")
    p.add_argument("--out", help="output directory (default analysis/reports/<timestamp>)")
    p.add_argument("--json", action="store_true", help="also print every number as one JSON object")
    cli.add_run_flags(p)
    cli.add_boot_flags(p)
    p.set_defaults(func=run)
