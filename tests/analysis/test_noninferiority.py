"""The noninferiority kind judged (criteria/rules.py noninferiority_verdict, sequential/judge.py), against
values worked by hand: two binomial arms, a cluster sd from literal per-document sums, the boundary
itself, a confidence sequence's radius, and `report` end to end on synthetic runs."""
import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml

from atlas_ab.analysis.__main__ import main as analysis_main
from atlas_ab.analysis.criteria import Measured, judge, noninferiority_verdict
from atlas_ab.analysis.runs import load_run
from atlas_ab.analysis.sequential import MET, NOT_MET, UNDERPOWERED, judge_path, judge_sequential
from atlas_ab.analysis.stats import Difference, rate
from atlas_ab.config.prereg import load_prereg
from tests.helpers import synth

Z95 = 1.6449      # the one-sided 5% level, as a registration writes it


def _prereg(tmp_path, name="ni", **over):
    doc = {"kind": "noninferiority", "hypothesis": "h", "primary_metric": "p1", "direction": "increase",
           "margin": 0.03, "threshold_sd": Z95, "decides": "binomial", "arms": {"control": "ctl", "treatment": "trt"},
           "min_n_per_arm": 100, **over}
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _binomial_runs(tmp_path, control_hits: int, treatment_hits: int, n: int):
    """Two arms of n verify steps (k = 2) each, exactly `hits` of them accepting draft 1 (p1 = hits / n)."""
    out = []
    for arm, hits in (("ctl", control_hits), ("trt", treatment_hits)):
        df = synth.steps_from_counts({0: n - hits, 1: hits}, K=2, n_docs=16, turns=1)
        out.append(load_run(synth.write_run(tmp_path / arm, df, arm), optional=("position",)))
    return out


# Two binomial arms, p1 decided on the binomial sd sqrt(pA qA / nA + pB qB / nB), one-sided at 1.6449:
#  A  control 1400 / 2000 = 0.70, treatment 1380 / 2000 = 0.69: delta -0.01,
#     sd^2 = 0.7 x 0.3 / 2000 + 0.69 x 0.31 / 2000 = 0.000105 + 0.00010695 = 0.00021195, sd 0.0145585;
#     bounds -0.01 -+ 1.6449 x 0.0145585 = -0.01 -+ 0.023947 = [-0.033947, +0.013947]
#     margin 0.04: -0.033947 >= -0.04: MET
#     margin 0.03: neither bound decides; power Phi(0.03 / 0.0145585 - 1.6449) = Phi(0.4157) = 0.661: UNDERPOWERED
#  B  treatment 1240 / 2000 = 0.62: delta -0.08, sd^2 = 0.000105 + 0.62 x 0.38 / 2000 = 0.0002228, sd 0.0149265;
#     upper bound -0.08 + 1.6449 x 0.0149265 = -0.055447 < -0.03: NOT MET, shown worse (its power, 0.642,
#     is not asked: a decision needs no power check)
#  C  control 5600 / 8000 = 0.70, treatment 5440 / 8000 = 0.68: delta -0.02,
#     sd^2 = (0.21 + 0.2176) / 8000 = 0.00005345, sd 0.0073110; bounds -0.02 -+ 0.012026 = [-0.032026, -0.007974]
#     margin 0.02: not shown, not shown worse; power Phi(0.02 / 0.007311 - 1.6449) = Phi(1.0907) = 0.862: NOT MET
#  A with direction decrease (lower p1 better): the treatment's drop is a gain; bound delta + 1.6449 sd =
#     +0.013947 <= +0.03: MET
@pytest.mark.parametrize("hits,n,margin,direction,status,se,bound,power,words", [
    ((1400, 1380), 2000, 0.04, "increase", "MET", 0.0145585, -0.033947, 0.865, "is within the margin -0.04"),
    ((1400, 1380), 2000, 0.03, "increase", "UNDERPOWERED", 0.0145585, -0.033947, 0.661, "0.66 < 0.8"),
    ((1400, 1240), 2000, 0.03, "increase", "NOT MET", 0.0149265, -0.104553, 0.642,
     "= -0.0554 is past the margin -0.03: trt is worse than ctl by more than 0.03"),
    ((5600, 5440), 8000, 0.02, "increase", "NOT MET", 0.0073110, -0.032026, 0.862, "was 0.86"),
    ((1400, 1380), 2000, 0.03, "decrease", "MET", 0.0145585, 0.013947, 0.661, "= +0.0139 is within the margin +0.03"),
])
def test_two_binomial_arms(tmp_path, hits, n, margin, direction, status, se, bound, power, words):
    runs = _binomial_runs(tmp_path, *hits, n)
    pr = load_prereg(_prereg(tmp_path, margin=margin, direction=direction))
    v = judge(pr, runs, n_boot=0).verdict
    delta = (hits[1] - hits[0]) / n
    assert v.status == status and words in v.reason, v.reason
    assert v.delta == pytest.approx(delta, abs=1e-12) and v.se == pytest.approx(se, abs=5e-7)
    sign = 1 if direction == "increase" else -1
    assert delta - sign * Z95 * v.se == pytest.approx(bound, abs=5e-6)
    assert v.power_at_min_effect == pytest.approx(power, abs=5e-4)


# Cluster sd from literal per-document sums: 10 documents x 10 verify steps per arm, draft 1 accepted
#   control   [7, 8, 6, 7, 9, 5, 7, 8, 6, 7] = 70 / 100 = 0.70
#   treatment [7, 7, 6, 7, 8, 5, 7, 7, 6, 6] = 66 / 100 = 0.66        delta -0.04
# The CRV1 sd of the treatment coefficient (one cluster per document in both arms) is
#   sqrt(G / (G - 1) x (N - 1) / (N - 2) x sum_g (v_g / N_B - u_g / N_A)^2), G = 10, N_A = N_B = 100, N = 200,
#   u_g = yA_g - 0.7 x 10, v_g = yB_g - 0.66 x 10
#   v_g - u_g = [+.4, -.6, +.4, +.4, -.6, +.4, +.4, -.6, +.4, -.6]: squares sum 6 x 0.16 + 4 x 0.36 = 2.40, / 100^2
#   sd^2 = 10/9 x 199/198 x 2.4e-4 = 2.680135e-4, sd 0.0163711
# bounds -0.04 -+ 1.6449 x 0.0163711 = -0.04 -+ 0.026929 = [-0.066929, -0.013071]
#   margin 0.07: -0.066929 >= -0.07: MET
#   margin 0.05: not shown, not shown worse; power Phi(0.05 / 0.0163711 - 1.6449) = Phi(1.4093) = 0.921: NOT MET
# The same data on the binomial sd sqrt(0.21 / 100 + 0.2244 / 100) = 0.0659090: bound -0.148414; power
#   Phi(0.07 / 0.065909 - 1.6449) = Phi(-0.5828) = 0.280 at margin 0.07: UNDERPOWERED. The registered sd decides.
CONTROL = [7, 8, 6, 7, 9, 5, 7, 8, 6, 7]
TREATMENT = [7, 7, 6, 7, 8, 5, 7, 7, 6, 6]


def _document_runs(tmp_path):
    out = []
    for arm, hits in (("ctl", CONTROL), ("trt", TREATMENT)):
        rows = [(g, s, int(s < h)) for g, h in enumerate(hits) for s in range(10)]
        doc, step, acc = (np.array(c) for c in zip(*rows))
        df = pd.DataFrame({"doc_id": doc, "turn": np.zeros(len(doc), np.int32), "step": step,
                           "k": np.full(len(doc), 2, np.int32), "accept_len": acc.astype(np.int32),
                           "position": step * 3})
        out.append(load_run(synth.write_run(tmp_path / arm, df, arm), optional=("position",)))
    return out


@pytest.mark.parametrize("decides,margin,status,se,power", [
    ("cluster", 0.07, "MET", 0.0163711, 0.996),
    ("cluster", 0.05, "NOT MET", 0.0163711, 0.921),
    ("binomial", 0.07, "UNDERPOWERED", 0.0659090, 0.280),
])
def test_a_cluster_sd_from_literal_document_sums(tmp_path, decides, margin, status, se, power):
    runs = _document_runs(tmp_path)
    pr = load_prereg(_prereg(tmp_path, margin=margin, decides=decides, estimand="whole_arm", cluster="document"))
    v = judge(pr, runs, n_boot=0).verdict
    assert v.status == status and v.delta == pytest.approx(-0.04, abs=1e-12)
    assert v.se == pytest.approx(se, abs=5e-7) and v.power_at_min_effect == pytest.approx(power, abs=5e-4)
    assert math.sqrt(10 / 9 * 199 / 198 * 2.4e-4) == pytest.approx(0.0163711, abs=5e-8)    # the comment's arithmetic


# The boundary, in binary fractions so every bound is exact: sd 0.125, threshold 2 sd, margin 0.25, so
# 2 sd = 0.25 and the power to show it were the arms equal is Phi(0.25 / 0.125 - 2) = Phi(0) = 0.5.
#   delta 0:              lower bound 0 - 0.25 = -0.25 = -margin: MET (the bound at the margin is shown)
#   delta -2^-20:         lower bound below -0.25, upper above: not shown, power 0.5: UNDERPOWERED
#   delta -0.5:           upper bound -0.5 + 0.25 = -0.25, not below -margin: not shown worse: UNDERPOWERED
#   delta -0.5 - 2^-20:   upper bound below -0.25: NOT MET (shown worse)
# and mirrored for direction decrease (treatment - control <= +margin).
TINY = 2.0 ** -20


@pytest.mark.parametrize("delta,direction,status", [
    (0.0, "increase", "MET"), (-TINY, "increase", "UNDERPOWERED"), (-0.5, "increase", "UNDERPOWERED"),
    (-0.5 - TINY, "increase", "NOT MET"),
    (0.0, "decrease", "MET"), (TINY, "decrease", "UNDERPOWERED"), (0.5, "decrease", "UNDERPOWERED"),
    (0.5 + TINY, "decrease", "NOT MET"),
])
def test_the_boundary(tmp_path, delta, direction, status):
    pr = load_prereg(_prereg(tmp_path, margin=0.25, threshold_sd=2.0, direction=direction))
    a, b = rate(0.5, 1000, "p1", "ctl"), rate(0.5, 1000, "p1", "trt")     # the rule reads delta and sd only
    d = Difference("p1", a, b, delta=delta, se=0.125)
    m = Measured("p1", d, None, "no positions here", 1000, 1000, 16, "document", False)
    v = noninferiority_verdict(pr, pr.spec, m)
    assert v.status == status and v.power_at_min_effect == 0.5, v.reason


# A sequential non-inferiority on the asymptotic confidence sequence (stats.asymptotic_cs: the running mean
# +- the normal-mixture radius), alpha 0.05, tightest at t_opt = 20 clusters:
#   rho^2 = (-2 ln 0.05 + ln(-2 ln 0.05 + 1)) / 20 = (5.991465 + 1.944691) / 20 = 0.3968078
#   at t = 20: t rho^2 + 1 = 8.936155; 2 (t rho^2 + 1) / (t^2 rho^2) = 17.872311 / 158.72309 = 0.1126003;
#   ln(sqrt(8.936155) / 0.05) = ln(59.78681) = 4.090786; radius = sd x sqrt(0.1126003 x 4.090786) = sd x 0.678692
# Cluster differences alternating -0.03, +0.01 (ten of each, the low one first): mean -0.01 at every even t,
#   sd (ddof 1) at t = 20: 0.02 x sqrt(20 / 19) = 0.0205196, radius 0.0139265, lower bound -0.0239265 (odd t
#   have a lower mean and even t a wider radius, so the running intersection leaves t = 20's lower bound)
#   margin 0.03: -0.0239265 >= -0.03: MET;  margin 0.02: undecided at the budget's end: UNDERPOWERED
# Alternating -0.03, -0.07 (the high one first): mean -0.05, upper bound -0.05 + 0.0139265 = -0.0360735 < -0.03:
#   NOT MET at t = 20. Looked at after every cluster it decides at t = 12: at t = 10 (the first look the
#   asymptotic sequence makes) the upper bound is -0.05 + 0.02 sqrt(10/9) x 0.975110 = -0.029443, above -0.03;
#   at t = 11 the mean is higher (-0.53 / 11 = -0.048182) and the running intersection keeps t = 10's bound;
#   at t = 12 it is -0.05 + 0.02 sqrt(12/11) x 0.883588 = -0.031542, below -0.03.
def _rho_radius(t: int, sd: float, alpha: float = 0.05, t_opt: int = 20) -> float:
    a = -2 * math.log(alpha)
    r2 = (a + math.log(a + 1)) / t_opt
    return sd * math.sqrt(2 * (t * r2 + 1) / (t * t * r2) * math.log(math.sqrt(t * r2 + 1) / alpha))


@pytest.mark.parametrize("d,margin,direction,decision,lower,upper", [
    ([-0.03, 0.01], 0.03, "increase", MET, -0.0239265, None),
    ([-0.03, 0.01], 0.02, "increase", UNDERPOWERED, -0.0239265, None),
    ([-0.03, -0.07], 0.03, "increase", NOT_MET, None, -0.0360735),
    ([0.03, 0.07], 0.03, "decrease", NOT_MET, 0.0360735, None),     # the same, mirrored: lower is better
])
def test_a_sequential_non_inferiority_on_the_asymptotic_sequence(d, margin, direction, decision, lower, upper):
    d = np.tile(np.array(d), 10)
    one = np.ones(20)
    looks, dec, at = judge_path(d, (0 * one, one, d, one), one.astype(int), R=1.0, alpha=0.05, min_effect=-margin,
                                direction=direction, looks=[20], final=True, method="asymptotic", t_opt=20)
    assert dec == decision and looks[0].n_clusters == 20
    assert _rho_radius(20, 0.02 * math.sqrt(20 / 19)) == pytest.approx(0.0139265, abs=5e-8)
    if lower is not None:
        assert looks[0].lower == pytest.approx(lower, abs=5e-8)
    if upper is not None:
        assert looks[0].upper == pytest.approx(upper, abs=5e-8)


def test_looked_at_after_every_cluster_it_stops_at_the_first_look_past_the_margin():
    d = np.tile(np.array([-0.03, -0.07]), 10)
    one = np.ones(20)
    looks, dec, at = judge_path(d, (0 * one, one, d, one), one.astype(int), R=1.0, alpha=0.05, min_effect=-0.03,
                                direction="increase", method="asymptotic", t_opt=20)
    assert (dec, at) == (NOT_MET, 12)
    assert looks[9].upper == pytest.approx(-0.05 + _rho_radius(10, 0.02 * math.sqrt(10 / 9)), abs=1e-12)
    assert looks[9].upper == looks[10].upper == pytest.approx(-0.029443, abs=5e-7)
    assert [lk.decision for lk in looks[9:11]] == ["UNDECIDED", "UNDECIDED"]
    assert looks[11].upper == pytest.approx(-0.031542, abs=5e-7) and looks[11].decision == NOT_MET


# -- end to end: `python -m atlas_ab.analysis report RUN_A RUN_B --prereg FILE --evaluate-unlocked` -------------

def _synthetic_runs(tmp_path, p_treatment: float):
    """40 documents x 2 turns; the control's p1 0.6, the treatment's `p_treatment`."""
    out = []
    for i, (arm, p) in enumerate((("ctl", 0.6), ("trt", p_treatment))):
        df = synth.simulate_steps(8000, p_cond=(p, 0.6), n_docs=40, turns=2, seed=i)
        out.append(str(synth.write_run(tmp_path / arm, df, arm)))
    return out


@pytest.mark.parametrize("p_treatment,status", [(0.6, "MET"), (0.5, "NOT MET")])
def test_report_end_to_end(tmp_path, capsys, p_treatment, status):
    """The same p1 (MET: a 0.6 vs 0.6 difference's bound clears -0.03 on 8,000 steps an arm) or 0.1
    lower (NOT MET: shown worse than 0.03), on the cluster sd by document."""
    runs = _synthetic_runs(tmp_path, p_treatment)
    pre = _prereg(tmp_path, decides="cluster", cluster="document", min_n_per_arm=1000)
    code = analysis_main(["report", *runs, "--prereg", str(pre), "--out", str(tmp_path / "rep"), "--bootstrap", "0",
                          "--evaluate-unlocked"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("WARNING: UNLOCKED pre-registration ni.yaml")
    assert f"\n{status} (ni): " in out
    data = json.loads((tmp_path / "rep" / "report.json").read_text())["verdicts"][0]
    assert (data["kind"], data["status"]) == ("noninferiority", status)
    md = (tmp_path / "rep" / "report.md").read_text()
    assert f"### ni: **{status}**" in md and "- power to show non-inferiority (margin 0.03) were the arms equal" in md


def test_report_end_to_end_sequential(tmp_path, capsys):
    """A sequential registration no study drove: judged after every document, the budget taken as ended."""
    runs = _synthetic_runs(tmp_path, 0.6)
    pre = _prereg(tmp_path, decides="cluster", cluster="document", min_n_per_arm=1000,
                  sequential={"alpha": 0.05, "method": "asymptotic", "max_clusters": 40})
    res = judge_sequential(load_prereg(pre), runs)
    assert res.decision == MET and res.margin == 0.03 and res.min_effect == -0.03
    lk = res.decided_look
    assert lk.lower >= -0.03 and all(x.lower < -0.03 for x in res.looks[:res.decided_at - 1])
    assert res.summary().startswith("MET: p1: treatment - control >= -0.03 (non-inferiority); after ")
    assert res.to_dict()["margin"] == 0.03
    code = analysis_main(["report", *runs, "--prereg", str(pre), "--out", str(tmp_path / "rep"), "--bootstrap", "0",
                          "--evaluate-unlocked"])
    assert code == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "### ni: **MET** (sequential)" in md and (tmp_path / "rep" / "sequential_ni.png").stat().st_size > 0


def test_a_bad_registration_is_one_line_and_exit_2(tmp_path, capsys):
    runs = _synthetic_runs(tmp_path, 0.6)
    bad = _prereg(tmp_path, "bad", margin=0)
    code = analysis_main(["report", *runs, "--prereg", str(bad), "--out", str(tmp_path / "rep"), "--bootstrap", "0",
                          "--evaluate-unlocked"])
    out, err = capsys.readouterr()
    assert code == 2 and len(err.splitlines()) == 1 and "margin: must be a finite number > 0, got 0" in err, err
    assert "MET" not in out and not (tmp_path / "rep").exists()


def test_a_difference_keeps_its_sequential_record():
    """The sequential result of a difference has no `margin` key: its records and reports keep their bytes."""
    from atlas_ab.analysis.sequential import SequentialResult
    r = SequentialResult("hedged_capital", 0.05, "whole_arm", "p1", 0.01, "increase", (), "UNDECIDED", None)
    assert "margin" not in r.to_dict() and r.claim() == "p1 up by >= 0.01"
