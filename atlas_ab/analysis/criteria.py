"""Judging a pre-registration against runs, one function per kind (prereg.KINDS).

Each returns a `Judgement`: the verdict, the numbers it was decided on (`details`, into
report.json) and the items the difference figure draws. The estimates come from the
library: `stats.compare` (binomial / cluster / bootstrap sd), `paired.paired_difference`
(the paired sd), `paired.oracle_probe` (McNemar) and `fingerprints.fingerprint_table`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from atlas_ab import AtlasError
from atlas_ab.analysis import paired
from atlas_ab.analysis.load import Run
from atlas_ab.analysis.metrics import rates
from atlas_ab.analysis.plots import DifferenceItem
from atlas_ab.analysis.prereg import THROUGHPUT, Prereg, Verdict, judge_effect, unavailable
from atlas_ab.analysis.stats import compare as compare_cells


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    details: dict = field(default_factory=dict)
    items: tuple[DifferenceItem, ...] = ()


def _run(runs: list[Run], name: str, role: str, pr: Prereg) -> Run:
    found = [r for r in runs if r.arm == name]
    if len(found) != 1:
        have = ", ".join(f"{r.arm} ({r.path})" for r in runs)
        raise AtlasError(f"{pr.path.name}: {role} arm {name!r} matches {len(found)} of the runs given "
                         f"(need exactly one; runs: {have})")
    return found[0]


def _turns(run: Run, turns: str) -> Run:
    """The run restricted to a turn class (cold: turn 0; warm: turns >= 1)."""
    if turns == "all":
        return run
    from dataclasses import replace

    t = run.steps["turn"]
    return replace(run, steps=run.steps[(t == 0) if turns == "cold" else (t >= 1)])


def estimate(pr: Prereg, control: Run, treatment: Run, B: int, seed: int):
    """(delta, sd or None, why-not, n_control, n_treatment, details) of treatment - control
    of the registered metric with the registered sd, on the registered turns (relative to the
    control's value when the pre-registration says `relative`)."""
    est = _throughput(pr, control, treatment) if pr.primary_metric == THROUGHPUT else \
        _acceptance(pr, control, treatment, B, seed)
    if pr.relative:
        delta, sd, why, nc, nt, details = est
        base = details["control_value"]
        return delta / base, None if sd is None else sd / base, why, nc, nt, details
    return est


def _throughput(pr: Prereg, control: Run, treatment: Run):
    from atlas_ab.analysis.economics import throughput_difference

    if pr.decides not in ("cluster", "binomial"):
        raise AtlasError(f"{pr.path.name}: {THROUGHPUT} is decided on the cluster sd (documents), not {pr.decides}")
    d = throughput_difference(_turns(control, pr.turns), _turns(treatment, pr.turns))
    details = {"throughput": d.to_dict(), "control_value": d.control.value}
    return d.delta, d.sd, None if d.sd is not None else "too few documents", d.control.n_steps, \
        d.treatment.n_steps, details


def _acceptance(pr: Prereg, control: Run, treatment: Run, B: int, seed: int):
    a, b = _turns(control, pr.turns), _turns(treatment, pr.turns)
    d = compare_cells(a.cells(), b.cells(), pr.primary_metric, B=B, seed=seed)
    details = {"unpaired": d.to_dict(), "control_value": d.control.value}
    if pr.decides != "paired":
        if not d.has(pr.decides):
            try:
                d.sd_by(pr.decides)
            except AtlasError as e:
                return d.delta, None, str(e), d.control.n, d.treatment.n, details
        return d.delta, d.sd_by(pr.decides), None, d.control.n, d.treatment.n, details
    p = paired.paired_difference(a, b, pr.primary_metric, B=B, seed=seed, unpaired=d)
    details["paired"] = p.to_dict()
    return p.delta, p.sd, p.cluster_note, p.n_pairs, p.n_pairs, details


def _item(pr: Prereg, label: str, delta: float, sd, status: str, **kw) -> DifferenceItem:
    return DifferenceItem(label=f"{label}\n{pr.primary_metric}{' (relative)' if pr.relative else ''}{'' if pr.turns == 'all' else ' (' + pr.turns + ')'}"
                          f" [{pr.name}]", delta=delta, sd=sd, sd_kind=pr.decides, verdict=status,
                          threshold_sd=pr.threshold_sd, **kw)


def judge_difference(pr: Prereg, runs: list[Run], B: int, seed: int) -> Judgement:
    control, treatment = _run(runs, pr.control, "control", pr), _run(runs, pr.treatment, "treatment", pr)
    delta, sd, why, nc, nt, details = estimate(pr, control, treatment, B, seed)
    v = unavailable(pr, delta, nc, nt, why) if sd is None else judge_effect(pr, delta, sd, nc, nt)
    return Judgement(v, details, (_item(pr, f"{pr.treatment} - {pr.control}", delta, sd, v.status,
                                        min_effect=pr.min_effect, direction=pr.direction),))


def judge_equivalence(pr: Prereg, runs: list[Run], B: int, seed: int) -> Judgement:
    control, treatment = _run(runs, pr.control, "control", pr), _run(runs, pr.treatment, "treatment", pr)
    delta, sd, why, nc, nt, details = estimate(pr, control, treatment, B, seed)
    z = abs(delta) / sd if sd else (0.0 if sd == 0 and delta == 0 else float("nan"))
    common = dict(delta=delta, sd=sd, z=z, power_at_min_effect=None,
                  n_control=nc, n_treatment=nt, prereg=pr)
    if sd is None:
        v = unavailable(pr, delta, nc, nt, why)
    elif min(nc, nt) < pr.min_n_per_arm:
        v = Verdict("UNDERPOWERED", f"n below the pre-registered minimum of {pr.min_n_per_arm:,} per arm", **common)
    elif abs(delta) + pr.threshold_sd * sd <= pr.margin:
        v = Verdict("MET", f"|{delta:+.4f}| + {pr.threshold_sd:g} x {sd:.4f} = "
                    f"{abs(delta) + pr.threshold_sd * sd:.4f} <= the margin {pr.margin:g}: the arms do not differ "
                    f"by more than the margin", **common)
    elif pr.threshold_sd * sd > pr.margin:
        v = Verdict("UNDERPOWERED", f"{pr.threshold_sd:g} sd = {pr.threshold_sd * sd:.4f} alone exceeds the margin "
                    f"{pr.margin:g}: this n cannot show equivalence", **common)
    else:
        v = Verdict("NOT MET", f"|{delta:+.4f}| + {pr.threshold_sd:g} sd = {abs(delta) + pr.threshold_sd * sd:.4f} "
                    f"> the margin {pr.margin:g}", **common)
    return Judgement(v, details, (_item(pr, f"{pr.treatment} - {pr.control} (equivalence)", delta, sd, v.status,
                                        margin=pr.margin),))


def judge_maximum(pr: Prereg, runs: list[Run], B: int, seed: int) -> Judgement:
    best = _run(runs, pr.best, "best", pr)
    rows, items, worst = [], [], None
    for name in pr.others:
        other = _run(runs, name, "other", pr)
        delta, sd, why, nc, nt, details = estimate(pr, other, best, B, seed)
        z = delta / sd if sd else (0.0 if delta == 0 else math.copysign(math.inf, delta))
        rows.append({"other": name, "delta": delta, "sd": sd, "z": z, "n_best": nt, "n_other": nc,
                     "why_no_sd": why, **details})
        items.append(_item(pr, f"{pr.best} - {name}", delta, sd, None))
        if sd is None:
            return Judgement(unavailable(pr, delta, nc, nt, why), {"comparisons": rows}, tuple(items))
        if worst is None or z < worst[1]:
            worst = (name, z, delta, sd, nc, nt)
    name, z, delta, sd, nc, nt = worst
    common = dict(delta=delta, sd=sd, z=z, power_at_min_effect=None, n_control=nc, n_treatment=nt, prereg=pr)
    fp = None
    if pr.fingerprints:
        fp = _fingerprints(best)
    if min(min(r["n_best"], r["n_other"]) for r in rows) < pr.min_n_per_arm:
        v = Verdict("UNDERPOWERED", f"n below the pre-registered minimum of {pr.min_n_per_arm:,} per arm", **common)
    elif z >= pr.threshold_sd and (fp is None or fp["ok"]):
        v = Verdict("MET", f"{pr.best} is above every other arm, the closest {name} by {delta:+.4f} ({z:.1f} sd)"
                    + ("; its fingerprint table reads 100%" if fp else ""), **common)
    elif z >= pr.threshold_sd:
        v = Verdict("NOT MET", f"{pr.best} is the maximum, but its fingerprint table fails rows {fp['failed']}",
                    **common)
    else:
        v = Verdict("NOT MET", f"{pr.best} is not above {name} by {pr.threshold_sd:g} sd "
                    f"({delta:+.4f}, {z:.1f} sd)", **common)
    items = tuple(DifferenceItem(**{**it.__dict__, "verdict": v.status}) for it in items)
    return Judgement(v, {"comparisons": rows, "fingerprints": fp}, items)


def _fingerprints(run: Run) -> dict:
    from atlas_ab.analysis.fingerprints import fingerprint_table, read_events

    events, manifest = read_events(run.path)
    table = fingerprint_table(events, (manifest or {}).get("row_space", "compact"))
    return {"ok": table.ok, "failed": [r.name for r in table.rows if not r.ok], **table.to_dict()}


def judge_oracle(pr: Prereg, runs: list[Run], B: int, seed: int) -> Judgement:
    run = _turns(_run(runs, pr.arm, "oracle", pr), pr.turns)
    probe = paired.oracle_probe(run)
    r = rates(run.cells())
    gap = r["p1"] - r["p2_cond"]
    recovered = probe.oracle_p2_cond - probe.real_p2_cond
    share = recovered / gap if gap > 0 else float("nan")
    t = probe.test
    sd = abs(recovered) / abs(t.z) if t.z else None
    details = {"probe": probe.to_dict(), "p1": r["p1"], "p2_cond": r["p2_cond"], "gap": gap,
               "recovered": recovered, "share": share}
    common = dict(delta=recovered, sd=sd, z=t.z, power_at_min_effect=None, n_control=t.n_pairs,
                  n_treatment=t.n_pairs, prereg=pr)
    if t.n_pairs < pr.min_n_per_arm:
        v = Verdict("UNDERPOWERED", f"{t.n_pairs:,} probed steps, below the pre-registered {pr.min_n_per_arm:,}",
                    **common)
    elif t.z >= pr.threshold_sd and share >= pr.min_share:
        v = Verdict("MET", f"the oracle's p2_cond {probe.oracle_p2_cond:.4f} vs the real {probe.real_p2_cond:.4f} "
                    f"(McNemar b={t.b:,} c={t.c:,}, exact p={t.p_exact:.2g}, z={t.z:+.1f}) recovers {share:.2f}x the "
                    f"p1 - p2_cond gap of {gap:.4f}", **common)
    else:
        v = Verdict("NOT MET", f"McNemar z={t.z:+.1f} (needs >= {pr.threshold_sd:g}) and a recovered share of "
                    f"{share:.2f} (needs >= {pr.min_share:g}) of the gap {gap:.4f}", **common)
    return Judgement(v, details, (DifferenceItem(
        label=f"oracle - real p2_cond ({pr.arm})\n[{pr.name}]", delta=recovered, sd=sd, sd_kind="McNemar",
        verdict=v.status, threshold_sd=pr.threshold_sd),))


JUDGES = {"difference": judge_difference, "equivalence": judge_equivalence, "maximum": judge_maximum,
          "oracle": judge_oracle}


def judge(pr: Prereg, runs: list[Run], B: int = 2000, seed: int = 0) -> Judgement:
    return JUDGES[pr.kind](pr, runs, B, seed)
