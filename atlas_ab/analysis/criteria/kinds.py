"""The kinds of pre-registration judged on runs (difference, equivalence, noninferiority, maximum,
oracle), and
`judge`, which picks the registration's kind; `evaluate` judges a difference on a measured one."""
from __future__ import annotations

import math

from atlas_ab import AtlasError
from atlas_ab.analysis.comparison import figure, oracle_probe
from atlas_ab.analysis.criteria.measured import Measured, effect_of, measure, measure_replicated
from atlas_ab.analysis.criteria.rules import (
    difference_verdict,
    equivalence_verdict,
    maximum_verdict,
    noninferiority_verdict,
    panel,
    sensitivity_of,
)
from atlas_ab.analysis.criteria.verdict import DifferenceItem, Judgement, Verdict
from atlas_ab.analysis.fingerprints import fingerprint_table, read_events
from atlas_ab.analysis.metrics import rates
from atlas_ab.analysis.runs import AnyRun
from atlas_ab.analysis.stats import Difference
from atlas_ab.config.prereg import ESTIMAND_WORDS, UNIT_WORDS, Estimand, Prereg, Turns

# ---- the data a comparison is judged on ---------------------------------------------------

def arm_run(runs: list[AnyRun], name: str, role: str, pr: Prereg) -> AnyRun:
    found = [r for r in runs if r.arm == name]
    if len(found) != 1:
        have = ", ".join(f"{r.arm} ({r.path})" for r in runs)
        raise AtlasError(f"{pr.path.name}: {role} arm {name!r} matches {len(found)} of the runs given "
                         f"(need exactly one; runs: {have})")
    return found[0]


def arm_replicates(runs: list[AnyRun], name: str, role: str, pr: Prereg) -> list[AnyRun]:
    """An arm's replicate runs for a registration with `replicates` R: at least R, each in its own process
    (the manifest's host.process; config/ladder_order.py says why a process matters)."""
    found = [r for r in runs if r.arm == name]
    need = pr.spec.replicates
    procs = [((r.manifest or {}).get("host") or {}).get("process") for r in found]
    if len(found) < need:
        raise AtlasError(f"{pr.path.name}: {role} arm {name!r} has {len(found)} run(s); the registration asks for "
                         f">= {need} replicates, each its own process (one sweep a process)")
    if None in procs or len(set(procs)) < len(procs):
        raise AtlasError(f"{pr.path.name}: {role} arm {name!r}: its {len(found)} runs are not each in their own "
                         "process (" + ("a run does not record its process" if None in procs else
                                        "two ran in one process") + "): replicates must be separate processes")
    return found


# ---- the kinds -------------------------------------------------------------------------------

def _judge_pair(pr: Prereg, runs: list[AnyRun], n_boot: int, seed: int, verdict, label: str, **item) -> Judgement:
    """A control/treatment kind: measure the pair, decide with `verdict(pr, spec, measured)`, and
    the same decision under the other estimand (the sensitivity line)."""
    spec = pr.spec
    if getattr(spec, "replicates", 1) > 1:
        m = measure_replicated(pr, arm_replicates(runs, spec.arms.control, "control", pr),
                               arm_replicates(runs, spec.arms.treatment, "treatment", pr))
    else:
        m = measure(pr, arm_run(runs, spec.arms.control, "control", pr),
                    arm_run(runs, spec.arms.treatment, "treatment", pr), n_boot, seed)
    v = verdict(pr, spec, m)
    sens = sensitivity_of(pr, lambda p, s, ms: verdict(p, s, ms[0]), [m])
    details = {**m.details(), "estimand": spec.estimand.value, "sensitivity": sens.to_dict()}
    return Judgement(v, details, (panel(pr, f"{spec.arms.treatment} - {spec.arms.control}{label}", v.delta, v.se,
                                         v.status, **item),), sens)


def judge_difference(pr: Prereg, runs: list[AnyRun], n_boot: int, seed: int) -> Judgement:
    spec = pr.spec
    return _judge_pair(pr, runs, n_boot, seed, difference_verdict, "", min_effect=spec.min_effect,
                       direction=spec.direction.value)


def judge_equivalence(pr: Prereg, runs: list[AnyRun], n_boot: int, seed: int) -> Judgement:
    return _judge_pair(pr, runs, n_boot, seed, equivalence_verdict, " (equivalence)", margin=pr.spec.margin)


def judge_noninferiority(pr: Prereg, runs: list[AnyRun], n_boot: int, seed: int) -> Judgement:
    # the figure's dashed line: the margin as a signed minimum effect (-margin, in the better direction)
    return _judge_pair(pr, runs, n_boot, seed, noninferiority_verdict, " (non-inferiority)",
                       min_effect=-pr.spec.margin, direction=pr.spec.direction.value)


def judge_maximum(pr: Prereg, runs: list[AnyRun], n_boot: int, seed: int) -> Judgement:
    spec = pr.spec
    best = arm_run(runs, spec.best, "best", pr)
    ms = [measure(pr, arm_run(runs, name, "other", pr), best, n_boot, seed) for name in spec.others]
    fp = fingerprints_of(best) if spec.fingerprints else None
    v = maximum_verdict(pr, spec, ms, fp)
    sens = sensitivity_of(pr, lambda p, s, ms_: maximum_verdict(p, s, ms_, fp), ms)
    rows, items = [], []
    for name, m in zip(spec.others, ms):
        delta, se, why = effect_of(spec, m, spec.estimand, spec.decides)
        z = delta / se if se else (0.0 if delta == 0 else math.copysign(math.inf, delta))
        rows.append({"other": name, "delta": delta, "sd": se, "z": z, "n_best": m.n_treatment,
                     "n_other": m.n_control, "why_no_sd": why, **m.details()})
        items.append(panel(pr, f"{spec.best} - {name}", delta, se, v.status))
    return Judgement(v, {"comparisons": rows, "fingerprints": fp, "estimand": spec.estimand.value,
                         "sensitivity": sens.to_dict()}, tuple(items), sens)


def fingerprints_of(run: AnyRun) -> dict:
    events, manifest = read_events(run.path)
    table = fingerprint_table(events, (manifest or {}).get("row_space", "compact"))
    return {"ok": table.ok, "failed": [r.name for r in table.rows if not r.ok], **table.to_dict()}


def judge_oracle(pr: Prereg, runs: list[AnyRun], n_boot: int, seed: int) -> Judgement:
    spec = pr.spec
    run = arm_run(runs, spec.arm, "oracle", pr).of_turns(spec.turns.value)
    probe = oracle_probe(run)
    r = rates(run.cells())
    gap = r["p1"] - r["p2_cond"]
    recovered = probe.oracle_p2_cond - probe.real_p2_cond
    share = recovered / gap if gap > 0 else float("nan")
    t = probe.test
    se = abs(recovered) / abs(t.z) if t.z else None
    details = {"probe": probe.to_dict(), "p1": r["p1"], "p2_cond": r["p2_cond"], "gap": gap,
               "recovered": recovered, "share": share}
    counts = {"min_n_per_arm": t.n_pairs, "min_pairs": t.n_pairs}
    common = dict(delta=recovered, se=se, z=t.z, power_at_min_effect=None, n_control=t.n_pairs,
                  n_treatment=t.n_pairs, prereg=pr, se_kind="McNemar", counts=counts)
    short = next((f"{t.n_pairs:,} probed steps, below the pre-registered {need:,}"
                  for f, need in spec.minimums().items() if t.n_pairs < need), None)
    if short:
        v = Verdict("UNDERPOWERED", short, **common)
    elif t.z >= spec.threshold_sd and share >= spec.min_share:
        v = Verdict("MET", f"the oracle's p2_cond {probe.oracle_p2_cond:.4f} vs the real {probe.real_p2_cond:.4f} "
                    f"(McNemar b={t.b:,} c={t.c:,}, exact p={t.p_exact:.2g}, z={t.z:+.1f}) recovers {share:.2f}x the "
                    f"p1 - p2_cond gap of {gap:.4f}", **common)
    else:
        v = Verdict("NOT MET", f"McNemar z={t.z:+.1f} (needs >= {spec.threshold_sd:g}) and a recovered share of "
                    f"{share:.2f} (needs >= {spec.min_share:g}) of the gap {gap:.4f}", **common)
    return Judgement(v, details, (DifferenceItem(
        label=f"oracle - real p2_cond ({spec.arm})\n[{pr.name}]", delta=recovered, se=se, se_kind="McNemar",
        verdict=v.status, threshold_sd=spec.threshold_sd),))


JUDGES = {"difference": judge_difference, "equivalence": judge_equivalence,
          "noninferiority": judge_noninferiority, "maximum": judge_maximum, "oracle": judge_oracle}


def _refuse_without_steps(pr: Prereg, runs: list) -> None:
    """One line for what a run without a step table (runs.UnitRun) cannot be judged on: a
    question other than a difference, a metric its grain does not make exact, a registered sd
    it lacks, a turn class."""
    if all(r.has_steps for r in runs if r.arm in pr.arms):
        return
    if pr.kind != "difference":
        raise AtlasError(f"{pr.path}: runs without a step table are judged on a difference only, not a {pr.kind}")
    spec = pr.spec
    pair = [arm_run(runs, spec.arms.control, "control", pr), arm_run(runs, spec.arms.treatment, "treatment", pr)]
    figs = []
    for r in pair:
        f = figure(r, spec.primary_metric)
        if f.status != "exact":
            what = "is known only within bounds" if f.status == "bounds" else "is not available"
            raise AtlasError(f"{r.path}: {f.metric} {what}: {f.reason}")
        figs.append(f)
    decides = spec.decides.value
    if decides == "binomial" and any(f.iid_se is None for f in figs):
        raise AtlasError(f"{pr.path}: decides by the i.i.d. sd, which {spec.primary_metric} does not have at this "
                         "grain (the histogram is missing)")
    if decides in ("cluster", "bootstrap") and any(r.units.clusters is None for r in pair):
        raise AtlasError(f"{pr.path}: decides by the {decides} sd; global counters have no requests or documents "
                         "to cluster (binomial sd only)")
    if spec.turns != Turns.all:
        raise AtlasError(f"{pr.path}: judges {spec.turns.value} turns; runs without a step table are judged over "
                         "all turns only")


def judge(pr: Prereg, runs: list[AnyRun], n_boot: int = 2000, seed: int = 0) -> Judgement:
    """The verdict of a pre-registration on the runs (each arm it names must be among them once;
    runs without a step table, runs.UnitRun, are judged on what their grain makes exact)."""
    _refuse_without_steps(pr, runs)
    return JUDGES[pr.kind](pr, runs, n_boot, seed)


def evaluate(pr: Prereg, diff: Difference) -> Verdict:
    """A `difference` pre-registration judged on a measured whole-arm stats.Difference (runs
    without a step table: an engine run's counts table, ingest/tables.py): the registered sd, the
    registered counts per arm."""
    spec = pr.spec
    if pr.kind != "difference" or spec.estimand != Estimand.whole_arm or spec.relative:
        raise AtlasError(f"{pr.path}: runs without a step table are judged on an absolute whole-arm difference "
                         f"only (this pre-registration is a {pr.kind} on {ESTIMAND_WORDS[spec.estimand]}"
                         if pr.kind != "oracle" else f"{pr.path}: an oracle question needs a step table")
    if diff.metric != spec.primary_metric:
        raise AtlasError(f"{pr.path}: primary metric is {spec.primary_metric}, the difference is {diff.metric}")
    if set(spec.minimums()) - {"min_n_per_arm"}:
        raise AtlasError(f"{pr.path}: runs without a step table count steps per arm only (min_n_per_arm), not "
                         f"{', '.join(sorted(set(spec.minimums()) - {'min_n_per_arm'}))}")
    clusters = diff.control.n_clusters or 0
    m = Measured(spec.primary_metric, diff, None, "runs without a step table have no positions", diff.control.n,
                 diff.treatment.n, clusters, UNIT_WORDS[spec.cluster], False)
    return difference_verdict(pr, spec, m)
