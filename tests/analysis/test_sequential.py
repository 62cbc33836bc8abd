"""Sequential judging (analysis/sequential/judge.py): the decision rule, the looks, the clusters' order,
and agreement with the fixed-n judge on what both compute."""
import json

import numpy as np
import pytest
import yaml

from atlas_ab import AtlasError
from atlas_ab.analysis.runs import load_run
from atlas_ab.analysis.sequential import (
    MET,
    NOT_MET,
    UNDECIDED,
    UNDERPOWERED,
    clusters_of,
    decide,
    judge_path,
    judge_sequential,
    sequence,
)
from atlas_ab.analysis.stats import hedged_cs
from atlas_ab.config.prereg import load_prereg
from tests.helpers.synth import simulate_steps, write_run

SEQ = {"alpha": 0.05, "max_clusters": 1000}


def _prereg(tmp_path, name="q", **over):
    doc = {"hypothesis": "h", "primary_metric": "p1", "direction": "increase", "min_effect": 0.01,
           "threshold_sd": 3.0, "decides": "paired", "cluster": "document", "arms": {"control": "a", "treatment": "b"},
           "min_n_per_arm": 10, "sequential": SEQ, **over}
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _runs(tmp_path, pa=0.6, pb=0.6, n=6000, docs=30, seed=0):
    a = simulate_steps(n, p_cond=(pa, 0.6), n_docs=docs, turns=2, doc_sd=0.3, seed=seed)
    b = simulate_steps(n, p_cond=(pb, 0.6), n_docs=docs, turns=2, doc_sd=0.3, seed=seed + 1)
    return [write_run(tmp_path / "a", a, "a"), write_run(tmp_path / "b", b, "b")]


@pytest.mark.parametrize("lo,hi,direction,expected", [
    (0.02, 0.05, "increase", MET), (0.01, 0.05, "increase", MET), (-0.1, 0.009, "increase", NOT_MET),
    (0.0, 0.02, "increase", UNDECIDED), (-0.05, -0.02, "decrease", MET), (-0.005, 0.1, "decrease", NOT_MET),
    (-0.02, 0.0, "decrease", UNDECIDED),
])
def test_the_decision_rule(lo, hi, direction, expected):
    assert decide(lo, hi, 0.01, direction) == expected


def test_the_sequence_is_the_hedged_cs_of_the_rescaled_differences():
    d = np.array([0.1, -0.05, 0.2, 0.0, 0.15, 0.05, 0.1, 0.12])
    est, lo, hi = sequence(d, 1.0, 0.05, np.array([2, 5, 8]), breaks=1000)
    l_, u_ = hedged_cs((d + 1) / 2, 0.05, 1000)
    np.testing.assert_allclose(lo, 2 * l_[[1, 4, 7]] - 1, rtol=0, atol=1e-12)
    np.testing.assert_allclose(hi, 2 * u_[[1, 4, 7]] - 1, rtol=0, atol=1e-12)
    np.testing.assert_allclose(est, [0.025, 0.08, 0.08375], rtol=1e-12)
    # tokens per step with K = 3: differences in [-3, 3]
    _, lo3, _ = sequence(d, 3.0, 0.05, np.array([8]), breaks=1000)
    assert lo3[0] == pytest.approx(6 * hedged_cs((d + 3) / 6, 0.05, 1000)[0][7] - 3, abs=1e-12)


def test_the_path_decides_once_and_the_budget_ends_undecided_as_underpowered():
    ones = np.ones(30)
    d = np.full(30, 0.9)               # every cluster +0.9: the lower bound rises past 0.01 after a few
    looks, decision, at = judge_path(d, (ones * 0, ones, d, ones), ones.astype(int), R=1.0, alpha=0.05,
                                     min_effect=0.01, direction="increase")
    assert decision == MET and at is not None and all(lk.decision == MET for lk in looks[at - 1:])
    assert all(lk.decision == UNDECIDED for lk in looks[:at - 1])
    assert [lk.n_clusters for lk in looks] == list(range(1, 31)) and looks[-1].n_steps == 30
    z = np.zeros(5)
    looks, decision, at = judge_path(z, (z, z + 1, z, z + 1), z.astype(int) + 2, R=1.0, alpha=0.05,
                                     min_effect=0.01, direction="increase", looks=[2, 5])
    assert (decision, at, [lk.decision for lk in looks]) == (UNDECIDED, None, [UNDECIDED, UNDECIDED])
    _, decision, _ = judge_path(z, (z, z + 1, z, z + 1), z.astype(int), R=1.0, alpha=0.05, min_effect=0.01,
                                direction="increase", looks=[2, 5], final=True)
    assert decision == UNDERPOWERED


@pytest.mark.parametrize("looks,needle", [([3, 2], "increasing"), ([0, 4], "from 1"), ([5, 31], "the runs hold 30")])
def test_bad_looks_are_refused(tmp_path, looks, needle):
    with pytest.raises(AtlasError, match=needle):
        judge_sequential(_prereg(tmp_path), _runs(tmp_path), looks=looks)


@pytest.mark.parametrize("estimand,decides", [("matched_positions", "paired"), ("whole_arm", "cluster")])
def test_the_last_look_holds_the_fixed_n_point_estimate(tmp_path, estimand, decides):
    """Pooled over every cluster, the last look's difference is the fixed-n judge's delta (the
    same steps); the cluster mean is the mean of the per-document differences."""
    from atlas_ab.analysis.criteria import measure

    runs = _runs(tmp_path, 0.6, 0.65)
    p = _prereg(tmp_path, estimand=estimand, decides=decides)
    res = judge_sequential(p, runs)
    assert len(res.looks) == 30 and [lk.n_clusters for lk in res.looks] == list(range(1, 31))
    loaded = [load_run(r, optional=("position",)) for r in runs]
    m = measure(load_prereg(p), loaded[0], loaded[1], 0, 0)
    delta = m.paired.delta if estimand == "matched_positions" else m.whole.delta
    assert res.looks[-1].pooled == pytest.approx(delta, abs=1e-12)
    a, b = (r.steps[r.steps["k"] >= 1] for r in loaded)
    per_doc = (b.groupby("doc_id")["accept_len"].apply(lambda s: (s >= 1).mean())
               - a.groupby("doc_id")["accept_len"].apply(lambda s: (s >= 1).mean()))
    if estimand == "whole_arm":
        assert res.looks[-1].estimate == pytest.approx(per_doc.mean(), abs=1e-12)
    assert res.looks[-1].n_steps == len(loaded[0].steps) + len(loaded[1].steps)
    assert res.estimand == estimand and res.cluster_unit == "document" and res.decided_at is None
    assert res.looks[-1].lower < res.looks[-1].estimate < res.looks[-1].upper


def test_clusters_are_taken_in_the_workloads_document_order(tmp_path):
    """Source-file clusters in the order of their first document, not by cluster id."""
    runs = _runs(tmp_path, docs=6)
    cmap = [2, 2, 0, 0, 1, 1]
    for r in runs:
        m = json.loads((r / "manifest.json").read_text())
        m["workload"].update(doc_cluster=cmap, cluster_unit="source file")
        (r / "manifest.json").write_text(json.dumps(m))
    pr = load_prereg(_prereg(tmp_path, cluster="source_file"))
    loaded = [load_run(r, optional=("position",)) for r in runs]
    c = clusters_of(pr, loaded[0], loaded[1])
    assert c.ids.tolist() == [2, 0, 1] and c.unit == "source file"
    rows = [sum(int(np.isin(r.steps["doc_id"], np.flatnonzero(np.asarray(cmap) == g)).sum()) for r in loaded)
            for g in (2, 0, 1)]
    assert c.steps.tolist() == rows and sum(rows) == 12000


def test_a_large_effect_decides_met_early_and_a_null_one_not_met(tmp_path):
    runs = _runs(tmp_path, 0.2, 0.9, n=12000, docs=60)
    res = judge_sequential(_prereg(tmp_path), runs)
    assert res.decision == MET and res.decided_at < 30 and res.decided_look.lower >= 0.01
    assert "MET: p1 up by >= 0.01; after" in res.summary()
    table = res.markdown().splitlines()
    assert len(table) == 2 + len(res.looks) and "| **MET** |" in table[1 + res.decided_at]
    assert table[2].startswith("| 1 | 1 | ") and "| UNDECIDED |" in table[2]
    # shown smaller than a large registered minimum: NOT MET
    res = judge_sequential(_prereg(tmp_path, "big", min_effect=0.9), runs)
    assert res.decision == NOT_MET and res.decided_look.upper < 0.9
    # decrease: the same runs read as a decrease of >= 0.01 are NOT MET (the CS lies above -0.01)
    res = judge_sequential(_prereg(tmp_path, "dec", direction="decrease"), runs)
    assert res.decision == NOT_MET


def test_the_asymptotic_method_decides_sooner_on_the_same_runs(tmp_path):
    runs = _runs(tmp_path, 0.5, 0.62, n=12000, docs=60)
    hedged = judge_sequential(_prereg(tmp_path), runs)
    asym = judge_sequential(_prereg(tmp_path, "asym", sequential={**SEQ, "method": "asymptotic"}), runs)
    assert asym.decision == MET and asym.decided_at >= 10
    assert hedged.decided_at is None or asym.decided_at < hedged.decided_at
    assert all(lk.lower == -1 and lk.upper == 1 for lk in asym.looks[:9])


def test_a_fixed_n_registration_or_another_kind_is_refused(tmp_path):
    runs = _runs(tmp_path)
    doc = yaml.safe_load(_prereg(tmp_path).read_text())
    doc.pop("sequential")
    (tmp_path / "fixed.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(AtlasError, match="no sequential: block"):
        judge_sequential(tmp_path / "fixed.yaml", runs)


def test_final_or_the_cluster_budget_turns_undecided_into_underpowered(tmp_path):
    runs = _runs(tmp_path)
    res = judge_sequential(_prereg(tmp_path), runs, looks=[10, 20])
    assert res.decision == UNDECIDED
    assert judge_sequential(_prereg(tmp_path), runs, looks=[10, 20], final=True).decision == UNDERPOWERED
    res = judge_sequential(_prereg(tmp_path, "budget", sequential={**SEQ, "max_clusters": 20}), runs, looks=[10, 20])
    assert res.decision == UNDERPOWERED and res.looks[0].decision == UNDECIDED
