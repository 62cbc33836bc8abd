"""The report's tables of per-step figures: the headline, the uncertainty of each difference, per
depth, the acceptance-length histogram, turn classes and turns."""
from __future__ import annotations

import math

import pandas as pd

from atlas_ab.analysis.comparison import Comparison, UnitComparison, headline_metrics
from atlas_ab.analysis.metrics import Cells, compare as compare_cells
from atlas_ab.analysis.report.markdown import table as _table
from atlas_ab.analysis.stats import format_delta
from atlas_ab.telemetry.schema import TURN_CLASSES

HEAD = [("n_verify", "n"), ("p1", "p1"), ("p2_uncond", "p2_uncond"), ("p2_cond", "p2_cond"),
        ("tokens_per_step", "tokens/step")]


def _fmt(v, col: str) -> str:
    if pd.isna(v):
        return "n/a"
    if col.startswith("n"):
        return f"{int(v):,}"
    return f"{v:.3f}" if col == "tokens_per_step" else f"{v:.4f}"


def headline_table(comps: list[Comparison], control_arm) -> list[str]:
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


def uncertainty_table(comps: list[Comparison | UnitComparison]) -> list[str]:
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


def variance_saved(comps: list[Comparison]) -> list[str]:
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


def class_table(arms) -> list[str]:
    rows = [[a.arm, tc] + [_fmt(a.by_class.loc[tc].get(col), col) for col, _ in HEAD]
            + [_fmt(a.by_class.loc[tc]["n_serial"], "n")] for a in arms for tc in TURN_CLASSES]
    return _table(["arm", "turns"] + [h for _, h in HEAD] + ["serial steps"], rows)


def class_deltas(control: Cells, others: list[Cells]) -> tuple[list[str], list[dict]]:
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


def depth_table(arms) -> list[str]:
    K = max(a.K for a in arms)
    cols = [f"p{i}" if i != 2 else "p2_uncond" for i in range(1, K + 1)] + [f"p{i}_cond" for i in range(2, K + 1)]
    rows = [[a.arm, str(a.K)] + [_fmt(a.by_class.loc["all"].get(c), c) for c in cols] for a in arms]
    return _table(["arm", "K"] + cols, rows)


def histogram_table(arms) -> list[str]:
    K = max(a.K for a in arms)
    rows = []
    for a in arms:
        for (tc, k), row in a.histogram.iterrows():
            if tc == "all":
                rows.append([a.arm, str(k)] + [f"{int(row.get(j, 0)):,}" if j <= k else "" for j in range(K + 1)])
    return _table(["arm", "k"] + [f"accept_len={j}" for j in range(K + 1)], rows)


def turn_table(arms) -> list[str]:
    rows = [[a.arm, str(t)] + [_fmt(r.get(col), col) for col, _ in HEAD]
            for a in arms for t, r in a.by_turn.iterrows()]
    return _table(["arm", "turn"] + [h for _, h in HEAD], rows)


UNCERTAINTY = ("Outcomes cluster by document (by source file where the workload cut several documents from "
               "one file), so the i.i.d. (binomial; delta method for p2_cond and tokens/step) sd misstates the "
               "variance of a rate. The cluster sd is CRV1 over those clusters (the same cluster in both arms "
               "is one cluster); the bootstrap resamples clusters jointly in both arms. Neither is reported "
               "with fewer than 10 clusters. Design effect = (cluster sd / i.i.d. sd)^2. When the arms run "
               "the same documents (a sweep does), the shared content correlates the arms and the design "
               "effect of a difference can fall below 1; under greedy verification both arms also commit the "
               "same text, so `mcnemar RUN_A RUN_B` pairs their steps position by position.")
