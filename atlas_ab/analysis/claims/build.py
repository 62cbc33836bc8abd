"""The claims report: the reference engine's claims (and one question they did not ask) settled by their
locked pre-registrations, on every model the study ran, in one Markdown report.

Input: the run directories of the claims sweeps (`+study=claims`, `+study=claims_conf`), for one
or more models. Runs are grouped by model (manifest `model.hash`); each group's locked
pre-registrations are judged (criteria/), and the descriptive panels the questions need are
drawn from the same runs: per-depth acceptance by arm, acceptance by turn, acceptance by
chain-confidence bin and the DRAFT_CONF costs, SHADOW_TOPK's top-k coverage by depth, the
fingerprint table of the REFEED arm. Deterministic: no timestamps, seeded bootstraps, so
regenerating from the same runs reproduces every table.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from atlas_ab import AtlasError
from atlas_ab.analysis import cli, criteria
from atlas_ab.analysis.claims.groups import ModelRuns, facts_table, group_by_model, temperature, workload_facts
from atlas_ab.analysis.metrics import arm_metrics, rates, realized
from atlas_ab.analysis.report.markdown import table as _table
from atlas_ab.analysis.runs import Run, code_of
from atlas_ab.config.prereg import Prereg, lock_status, locked_texts
from atlas_ab.telemetry.acceptance import THROUGHPUT, parse_metric

#: What the reference engine's studies measured, per question (docs/reference_engine.md).
REFERENCE = {
    "claims_q1_cliff": "p2_cond 0.5265 -> 0.7196 with the target's true hidden, McNemar z = +18.4, "
                       "recovering 1.40x the p1 - p2_cond gap (dgx1, W4A4 27B)",
    "claims_q2_prefill_warm": "+0.086 p1 / +0.101 p2_uncond / +10.2% accepted tokens per verify step "
                              "(dgx2, n ~ 10k per arm)",
    "claims_q2_prefill_cold": "a de-confounding pair (drafter coverage held at zero) attributed 92% of the "
                              "p1 effect to coverage",
    "claims_q3_refeed": "+0.027 p2_uncond (3.9 binomial sd), n ~ 10k per arm (dgx2)",
    "claims_q3_refeed_prefill": "not measured (\"build (2) first, then re-measure this\")",
    "claims_q4_shift": "the shift hatch was specified, and the fingerprint table read 100% "
                       "(658/658, 422/422, 93/93 on the non-tautological row); the shift sweep itself "
                       "is not reported",
    "claims_q5_draft_conf": "verify ~35 ms vs decode+propose ~21 ms on a 35B MoE: a draft pays when "
                            "p(accept) >~ 0.66",
    "claims_q6_ring_prefill": "not asked",
    **dict.fromkeys(("claims_q9_head_fp8", "claims_q9_head_fp8_p2_uncond"),
                    "not measured: shipped on (2.66 -> ~1.33 ms per draft sweep); its acceptance cost never measured"),
    **dict.fromkeys(("claims_q10_kv_fp8", "claims_q10_kv_fp8_p2_uncond"),
                    "not measured: the GLM head's KV is FP8 by construction (KvCacheDtype::Fp8)"),
    **{f"claims_q7_refeed_sampled_{t}{d}": "not asked (the reference engine verifies greedily)"
       for t in ("t07", "t10") for d in ("", "_greedy_drafts")},
}
OPTIONAL = ("position", "oracle_hit2", "topk_ids", "target", "drafts")


def _fmt(v, digits=4) -> str:
    if v is None or v != v:
        return "n/a"
    return f"{v:.{digits}f}"


def _judge_all(group: ModelRuns, n_boot: int, seed: int) -> list[tuple[Prereg, criteria.Judgement | None, str]]:
    """Every text the group's runs locked, judged where every arm it names locked it."""
    out = []
    manifests = {r.arm: r.manifest for r in group.runs}
    for pr in locked_texts(manifests):
        missing = [a for a in pr.arms if group.arm(a) is None]
        if missing:
            out.append((pr, None, f"not judged: arm {missing[0]} was not run for this model"))
            continue
        reg = lock_status(pr, manifests)
        if reg.status != "locked":
            out.append((pr, None, f"not judged: UNLOCKED: {reg.why}"))
            continue
        try:
            out.append((pr, criteria.judge(pr, list(group.runs), n_boot=n_boot, seed=seed), ""))
        except AtlasError as e:      # a question these runs cannot answer: say why, judge the rest
            out.append((pr, None, f"not judged: {e}"))
    return out


def _variance_saving(pr: Prereg, group: ModelRuns, se, n_boot: int, seed: int) -> dict | None:
    """An exact-probability metric's deciding sd against the realized metric's, the same estimand and
    sd kind on the same runs: how many steps the exact probabilities saved."""
    spec = pr.spec
    if pr.kind != "difference" or se is None or spec.primary_metric == THROUGHPUT \
            or parse_metric(spec.primary_metric)[0] not in ("expected", "alpha"):
        return None
    other = realized(spec.primary_metric)
    twin = replace(pr, spec=replace(spec, primary_metric=other))
    m = criteria.measure(twin, group.arm(spec.arms.control), group.arm(spec.arms.treatment), n_boot, seed)
    alt = criteria.effect_of(spec, m, spec.estimand, spec.decides)[1]
    if not alt:
        return None
    ratio = (se / alt) ** 2
    return {"realized": other, "sd": se, "realized_sd": alt, "variance_ratio": ratio,
            "line": f"- exact acceptance probabilities: {spec.decides.value} sd {_fmt(se)} against {_fmt(alt)} for "
                    f"the realized {other} on the same runs: variance x{ratio:.3f}, so {other} would need "
                    f"{1 / ratio:.2f}x the steps for the same sd"}


def _descriptives(group: ModelRuns, out: Path, tag: str) -> tuple[list[str], dict]:
    from atlas_ab.analysis.report import plots  # matplotlib: imported when a figure is drawn

    md, data = [], {}
    acc = [r for r in group.runs if (r.manifest or {}).get("mode", "live") == "replay" or
           r.arm not in ("draft_conf_000", "draft_conf_030", "draft_conf_050", "draft_conf_066", "draft_conf_080")]
    cells = [r.cells() for r in acc]
    if acc:     # a group of DRAFT_CONF's live runs alone (claims_conf_replicated) has no acceptance arm
        plots.depth_figure(cells, out / f"depth_{tag}.png")
        md += ["#### Per-depth acceptance by arm", "", f"![per-depth acceptance](depth_{tag}.png)", ""]
        rows = []
        for r, c in zip(acc, cells):
            x = rates(c)
            rows.append([r.arm, f"{x['n_verify']:,}", _fmt(x.get("p1")), _fmt(x.get("p2_uncond")),
                         _fmt(x.get("p2_cond")), _fmt(x.get("tokens_per_step"), 3)])
            data.setdefault("arms", {})[r.arm] = {k: v for k, v in x.items()}
        md += _table(["arm", "verify steps", "p1", "p2_uncond", "p2_cond", "tokens/step"], rows) + [""]
    pair = [r for r in (group.arm("baseline"), group.arm("drafter_prefill_on")) if r is not None]
    if pair:
        plots.turn_figure([r.cells() for r in pair], out / f"turns_{tag}.png")
        md += ["#### Acceptance by turn (turn 0 is cold)", "", f"![acceptance by turn](turns_{tag}.png)", ""]
        rows = []
        for r in pair:
            for t, row in arm_metrics(r.cells()).by_turn.iterrows():
                rows.append([r.arm, t, _fmt(row.get("p1")), _fmt(row.get("p2_uncond")),
                             _fmt(row.get("tokens_per_step"), 3)])
        md += _table(["arm", "turn", "p1", "p2_uncond", "tokens/step"], rows) + [""]
    ungated = group.arm("draft_conf_000")
    gated = [r for r in (group.arm(n) for n in ("draft_conf_030", "draft_conf_050", "draft_conf_066",
                                                "draft_conf_080")) if r is not None]
    if ungated is not None and gated:
        from atlas_ab.analysis.economics import economics

        md += ["#### DRAFT_CONF economics (live, batch width 1)", ""]
        try:
            e = economics(ungated, gated)
        except AtlasError as ex:      # step times that are not the steps' own: say so, draw nothing
            md += [f"Not computed: {ex}", ""]
            data["economics"] = {"refused": str(ex)}
        else:
            plots.confidence_figure(e.bins, e.break_even, out / f"confidence_{tag}.png")
            md += [f"![acceptance by confidence bin](confidence_{tag}.png)", "", e.summary(), ""]
            data["economics"] = e.to_dict()
    topk = group.arm("shadow_topk_4")
    if topk is not None:
        from atlas_ab.analysis.tree import topk_coverage

        cov = topk_coverage(topk.steps, topk.arm)
        plots.coverage_figure(cov, out / f"coverage_{tag}.png")
        md += ["#### SHADOW_TOPK: conditional top-k coverage by depth", "",
               f"![top-k coverage](coverage_{tag}.png)", "", cov.summary(), ""]
        data["coverage"] = cov.to_dict()
    refeed = group.arm("refeed_on")
    if refeed is not None and (refeed.path / "events").is_dir():
        fp = criteria.fingerprints_of(refeed)
        md += ["#### The fingerprint table of refeed_on (the reference engine's REFEED checks)", ""]
        md += _table(["row", "check", "matched", "checked"],
                     [[r["check"], r["description"], f"{r['matched']:,}", f"{r['checked']:,}"] for r in fp["rows"]])
        md.append("")
        data["fingerprints"] = {k: v for k, v in fp.items() if k != "context"}
    return md, data


def build_claims(runs: list[Run], out: Path, n_boot: int = 2000, seed: int = 0,
                 mismatches: tuple[str, ...] = ()) -> dict:
    if not runs:
        raise AtlasError("claims needs the runs of the claims sweeps")
    out.mkdir(parents=True, exist_ok=True)
    groups = group_by_model(runs)
    md = [f"> **WARNING: {m}** (compared anyway: --allow-mismatch)" for m in mismatches] + ([""] if mismatches else [])
    md += ["# The reference engine's claims, settled", "",
          "Every question has a pre-registration under `analysis/prereg/claims_*.yaml`, written and committed "
          "before its runs and locked by the study before its first step (the hash below is the one every run "
          "of the study carries). Verdicts: MET / NOT MET / UNDERPOWERED (a null that the sample could not "
          "have shown is not evidence). Regenerate with `python -m atlas_ab.analysis claims RUN... --out DIR`.",
          ""]
    data: dict = {"models": {}, **({"mismatches": list(mismatches)} if mismatches else {})}
    judged = {g.label: _judge_all(g, n_boot, seed) for g in groups}
    names = sorted({pr.name for js in judged.values() for pr, _, _ in js})
    md += ["## Verdicts at each model size", ""]
    header = ["question"] + [g.label for g in groups] + ["the reference engine"]
    rows = []
    for n in names:
        row = [n]
        for g in groups:
            j = next(((pr, jj, why) for pr, jj, why in judged[g.label] if pr.name == n), None)
            if j is None or j[1] is None:
                row.append(j[2] if j else "not run")
                continue
            v = j[1].verdict
            z = "" if v.se is None or v.z != v.z else f", {v.z:+.1f} sd"
            row.append(f"**{v.status}** ({v.delta:+.4f}{z})")
        row.append(REFERENCE.get(n, ""))
        rows.append(row)
    md += _table(header, rows) + [""]
    for g in groups:
        tag = "".join(ch for ch in g.label.split(" ")[0] if ch.isalnum()) or "model"
        tag = f"{tag}_{(g.manifest.get('model') or {}).get('params', {}).get('total', 0)}"
        if temperature(g.runs[0]):
            tag += f"_t{temperature(g.runs[0]):g}".replace(".", "")
        gd: dict = {"runs": [{"arm": r.arm, "path": str(r.path), "manifest": str(r.path / "manifest.json"),
                              "model_hash": r.hash("model"), "workload_hash": r.hash("workload"),
                              "mode": (r.manifest or {}).get("mode"), "gate": r.gate_status,
                              "code": code_of(r).to_dict()} for r in g.runs],
                    "questions": {}}
        facts = workload_facts(g)
        gd["workload"] = facts
        md += [f"## {g.label}", "", "Workloads (every clustered sd clusters by source file):", ""]
        md += facts_table(facts) + ["", "Runs (each one's manifest is `<run>/manifest.json`):", ""]
        md += _table(["arm", "run", "mode", "gate", "workload.hash", "code"],
                     [[r.arm, f"`{r.path}`", (r.manifest or {}).get("mode", "?"), r.gate_status,
                       f"`{(r.hash('workload') or '')[:19]}`", code_of(r).short] for r in g.runs]) + [""]
        items = []
        for pr, j, why in judged[g.label]:
            md += [f"### {pr.name}", "", f"- hypothesis: {pr.hypothesis}", f"- criterion: {pr.criterion()}",
                   f"- pre-registration: `analysis/prereg/{pr.path.name}` (sha256 `{pr.sha256}`)",
                   f"- the reference engine: {REFERENCE.get(pr.name, 'n/a')}"]
            if j is None:
                md += [f"- {why}", ""]
                continue
            v = j.verdict
            over = f" over {v.clusters}" if v.clusters else ""
            md += [f"- **{v.status}**: {v.reason}",
                   f"- estimate: {v.delta:+.4f}" + ("" if v.se is None else
                                                    f", {v.se_kind} sd {v.se:.4f}{over} ({v.z:+.1f} sd in the "
                                                    "registered sense)")]
            if j.sensitivity is not None:
                md.append(f"- {j.sensitivity.line(v)}")
            p = j.details.get("paired") if j.details.get("estimand") == "matched_positions" else None
            if p:
                md.append(f"- paired on {p['n_pairs']:,} matched steps ({p['matched_share']:.0%} of the smaller "
                          f"arm's); unpaired i.i.d. sd {_fmt(p['unpaired_iid_sd'])}, unpaired cluster sd "
                          f"{_fmt(p['unpaired_cluster_sd'])}, paired sd {_fmt(p['sd'])}")
            saving = _variance_saving(pr, g, v.se, n_boot, seed)
            if saving:
                md.append(saving["line"])
                j.details["variance_saving"] = {k: x for k, x in saving.items() if k != "line"}
            md.append("")
            items += list(j.items)
            gd["questions"][pr.name] = {"verdict": v.to_dict(), "details": j.details,
                                        "sensitivity": None if j.sensitivity is None else
                                        {**j.sensitivity.to_dict(), "line": j.sensitivity.line(v)}}
        if items:
            from atlas_ab.analysis.report import plots

            plots.difference_figure(items, out / f"difference_{tag}.png")
            md += ["### The differences that decide", "", f"![paired differences with their thresholds]"
                   f"(difference_{tag}.png)", ""]
        dmd, dd = _descriptives(g, out, tag)
        md += ["### Descriptives", ""] + dmd
        gd.update(dd)
        data["models"][g.label] = gd
    (out / "report.md").write_text("\n".join(md) + "\n")
    (out / "report.json").write_text(cli.dump_json(data))
    return data
