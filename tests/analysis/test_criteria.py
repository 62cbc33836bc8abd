"""Pre-registration kinds and the paired sd, against hand-computed values."""
import json

import numpy as np
import pandas as pd
import pytest

from atlas_ab import AtlasError
from atlas_ab.analysis.comparison import paired_difference
from atlas_ab.analysis.criteria import judge
from atlas_ab.analysis.runs import load_run
from atlas_ab.config.prereg import load_prereg
from tests.helpers import synth


def _pair_runs(tmp_path, n_docs=12, per_doc=200, p=(0.6, 0.3), lift=0.05, shared=0.9, seed=0):
    """Two arms on the same positions whose depth-1/2 outcomes share a latent per position
    (what one trajectory makes both arms see): the treatment's rates are `lift` higher."""
    rng = np.random.default_rng(seed)
    n = n_docs * per_doc
    doc = np.repeat(np.arange(n_docs), per_doc)
    step = np.tile(np.arange(per_doc), n_docs)
    u = rng.random((n, 2))
    own = rng.random((2, n, 2))
    arms = []
    for j, bump in enumerate((0.0, lift)):
        v = np.where(rng.random((n, 2)) < shared, u, own[j])
        hit1 = v[:, 0] < p[0] + bump
        hit2 = hit1 & (v[:, 1] < (p[1] + bump) / (p[0] + bump))
        a = hit1.astype(np.int32) + hit2.astype(np.int32)
        arms.append(pd.DataFrame({"doc_id": doc, "turn": np.zeros(n, np.int32), "step": step,
                                  "k": np.full(n, 2, np.int32), "accept_len": a, "position": step * 3}))
    return [load_run(synth.write_run(tmp_path / name, df, name), optional=("position",))
            for name, df in zip(("ctl", "trt"), arms)]


def test_paired_difference_is_the_clustered_mean_of_pair_differences(tmp_path):
    ctl, trt = _pair_runs(tmp_path)
    p = paired_difference(ctl, trt, "p2_uncond", n_boot=0)
    ya = (ctl.steps["accept_len"].to_numpy() >= 2).astype(float)
    yb = (trt.steps["accept_len"].to_numpy() >= 2).astype(float)
    d, g = yb - ya, ctl.steps["doc_id"].to_numpy()
    G, N = 12, len(d)
    S = np.array([(d[g == j] - d.mean()).sum() for j in range(G)])
    se = np.sqrt(G / (G - 1) * (S ** 2).sum()) / N          # CRV1, intercept only, by hand
    assert p.n_pairs == N and p.delta == pytest.approx(d.mean()) and p.se == pytest.approx(se, rel=1e-9)
    assert p.control_value == pytest.approx(ya.mean()) and p.treatment_value == pytest.approx(yb.mean())


def test_pairing_saves_sd_against_independent_arms_not_against_document_pairing(tmp_path):
    """The reference engine's binomial sd treats the arms as independent; two arms on one trajectory are
    not, and pairing their steps removes most of that sd. The cluster sd of the unpaired
    difference already pairs the arms by document (one cluster in both), so with every step
    matched it and the paired sd agree: pairing by position adds nothing beyond that."""
    from atlas_ab.analysis.metrics import compare

    ctl, trt = _pair_runs(tmp_path, shared=0.9)
    unpaired = compare(ctl.cells(), trt.cells(), "p2_uncond", n_boot=0)
    p = paired_difference(ctl, trt, "p2_uncond", n_boot=0, unpaired=unpaired)
    assert p.saved_vs_iid > 0.7 and abs(p.saved_vs_cluster) < 0.01
    assert p.delta == pytest.approx(unpaired.delta)          # every step matched here
    apart = paired_difference(*_pair_runs(tmp_path / "x", shared=0.0), "p2_uncond", n_boot=0)
    assert apart.se > 3 * p.se                                # nothing shared: nothing to cancel


def test_only_matched_steps_pair(tmp_path):
    ctl, trt = _pair_runs(tmp_path)
    from dataclasses import replace
    trt = replace(trt, steps=trt.steps.assign(position=trt.steps["position"] + (trt.steps["step"] % 2)))
    p = paired_difference(ctl, trt, "p1", n_boot=0)
    assert p.n_pairs == len(ctl.steps) // 2 and p.matched_share == pytest.approx(0.5)


def _prereg(tmp_path, name, **doc):
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps({"hypothesis": "h", "threshold_sd": 3.0, "min_n_per_arm": 100, **doc}))
    return load_prereg(path)


def test_difference_decided_on_the_paired_sd(tmp_path):
    runs = _pair_runs(tmp_path)
    pr = _prereg(tmp_path, "d", primary_metric="p2_uncond", direction="increase", min_effect=0.02,
                 decides="paired", arms={"control": "ctl", "treatment": "trt"})
    j = judge(pr, runs, n_boot=0)
    p = paired_difference(*runs, "p2_uncond", n_boot=0)
    assert j.verdict.se == pytest.approx(p.se) and j.verdict.delta == pytest.approx(p.delta)
    assert j.verdict.status == "MET" and j.details["paired"]["n_pairs"] == 2400


def test_equivalence(tmp_path):
    same = _pair_runs(tmp_path / "s", lift=0.0)
    pr = _prereg(tmp_path, "e", kind="equivalence", primary_metric="p1", margin=0.03, threshold_sd=2.0,
                 decides="paired", arms={"control": "ctl", "treatment": "trt"})
    v = judge(pr, same, n_boot=0).verdict
    assert v.status == "MET" and abs(v.delta) + 2 * v.se <= 0.03
    apart = _pair_runs(tmp_path / "a", lift=0.08)
    assert judge(pr, apart, n_boot=0).verdict.status == "NOT MET"
    tight = _prereg(tmp_path, "t", kind="equivalence", primary_metric="p1", margin=0.001, threshold_sd=2.0,
                    decides="paired", arms={"control": "ctl", "treatment": "trt"})
    assert judge(tight, same, n_boot=0).verdict.status == "UNDERPOWERED"    # 2 sd alone exceed the margin


def test_maximum(tmp_path):
    low, high = _pair_runs(tmp_path, lift=0.08)
    from dataclasses import replace
    others = [replace(low, arm=f"s{i}") for i in (-1, 1)]
    best = replace(high, arm="s0")
    pr = _prereg(tmp_path, "m", kind="maximum", primary_metric="p2_uncond", decides="paired", best="s0",
                 others=["s-1", "s1"])
    j = judge(pr, [best, *others], n_boot=0)
    assert j.verdict.status == "MET" and len(j.items) == 2
    tie = replace(_pair_runs(tmp_path / "t", lift=0.08, seed=1)[1], arm="s1")    # the same rates, other draws
    assert judge(pr, [best, others[0], tie], n_boot=0).verdict.status == "NOT MET"
    same = replace(high, arm="s1")            # identical outcomes at every pair: no comparison was made
    assert judge(pr, [best, others[0], same], n_boot=0).verdict.status == "NOT INFORMATIVE"
    with pytest.raises(AtlasError, match="other arm 's1' matches 0"):
        judge(pr, [best, others[0]], n_boot=0)


def test_oracle(tmp_path):
    # 1000 steps that accepted draft 1 (k=2): real depth 2 on 400, the oracle on 700;
    # b (oracle only) = 350, c (real only) = 50; plus 1000 steps with nothing accepted
    a = np.r_[np.full(400, 2), np.full(600, 1), np.zeros(1000, int)]
    oracle = np.r_[np.ones(350, bool), np.zeros(50, bool), np.ones(350, bool), np.zeros(250, bool),
                   np.zeros(1000, bool)]
    df = pd.DataFrame({"doc_id": np.arange(2000) % 20, "turn": 0, "step": np.arange(2000) // 20, "k": 2,
                       "accept_len": a, "oracle_hit2": pd.array(np.where(a >= 1, oracle, pd.NA), dtype="boolean")})
    run = load_run(synth.write_run(tmp_path / "o", df, "oracle_p2"), optional=("oracle_hit2",))
    pr = _prereg(tmp_path, "o", kind="oracle", arm="oracle_p2", min_share=0.5)
    j = judge(pr, [run], n_boot=0)
    z = (350 - 50) / np.sqrt(400)                     # +15.0
    gap = 1000 / 2000 - 400 / 1000                     # p1 0.5 - p2_cond 0.4
    assert j.details["probe"]["mcnemar"]["b"] == 350 and j.verdict.z == pytest.approx(z)
    assert j.details["share"] == pytest.approx((0.7 - 0.4) / gap)
    assert j.verdict.status == "MET"
    strict = _prereg(tmp_path, "o2", kind="oracle", arm="oracle_p2", min_share=4.0)
    assert judge(strict, [run], n_boot=0).verdict.status == "NOT MET"


@pytest.mark.parametrize("doc,needle", [
    ({"kind": "nope"}, "kind must be one of"),
    ({"kind": "oracle", "arm": "x"}, "missing field 'min_share'"),
    ({"kind": "maximum", "primary_metric": "p1", "decides": "paired", "best": "a", "others": []},
     "others: must be a non-empty list"),
    ({"primary_metric": "p1", "direction": "up", "min_effect": 0.1, "decides": "paired",
      "arms": {"control": "a", "treatment": "b"}}, "direction: must be one of increase, decrease"),
    ({"primary_metric": "p1", "direction": "increase", "min_effect": 0.1, "decides": "robust",
      "arms": {"control": "a", "treatment": "b"}}, "decides: must be one of binomial, cluster, bootstrap, paired"),
    ({"primary_metric": "p1", "direction": "increase", "min_effect": 0.1, "decides": "paired",
      "arms": {"control": "a", "treatment": "b"}, "turns": "hot"}, "turns: must be one of all, cold, warm"),
    ({"primary_metric": "p1", "direction": "increase", "min_effect": 0.1, "decides": "paired",
      "arms": {"control": "a", "treatment": "b"}, "treshold": 1}, "unknown field 'treshold'"),
])
def test_bad_preregs_are_one_line(tmp_path, doc, needle):
    with pytest.raises(AtlasError, match=needle):
        _prereg(tmp_path, "bad", **doc)


# -- the registered counts, estimand and cluster unit (issue 18 sections 1, 2, 9) ---------------

def _half_matched(tmp_path):
    """12 documents x 200 steps per arm; the treatment's odd steps sit one position over, so
    only 1,200 of its 2,400 steps match a control step."""
    from dataclasses import replace

    ctl, trt = _pair_runs(tmp_path)
    return [ctl, replace(trt, steps=trt.steps.assign(position=trt.steps["position"] + (trt.steps["step"] % 2)))]


def test_the_judge_counts_the_unit_the_registration_names(tmp_path):
    runs = _half_matched(tmp_path)
    doc = dict(primary_metric="p2_uncond", direction="increase", min_effect=0.02, decides="paired",
               arms={"control": "ctl", "treatment": "trt"})
    steps = judge(_prereg(tmp_path, "steps", **doc, min_n_per_arm=2000), runs, n_boot=0).verdict
    assert steps.status == "MET"           # 2,400 steps per arm >= 2,000, though only 1,200 pairs
    assert steps.counts == {"min_n_per_arm": 2400, "min_pairs": 1200, "min_clusters": 12}
    pairs = judge(_prereg(tmp_path, "pairs", **doc, min_n_per_arm=None, min_pairs=2000), runs, n_boot=0).verdict
    assert pairs.status == "UNDERPOWERED" and pairs.reason == \
        "1,200 matched pairs, below the pre-registered minimum of 2,000 (min_pairs)"
    files = judge(_prereg(tmp_path, "files", **doc, min_clusters=13), runs, n_boot=0).verdict
    assert files.status == "UNDERPOWERED" and files.reason.startswith("12 documents, below")


def _filed_runs(tmp_path, n_docs=30, per_file=3):
    """Two paired arms whose manifests say documents were cut `per_file` to a source file."""
    ctl, trt = _pair_runs(tmp_path, n_docs=n_docs, per_doc=80)
    for r in (ctl, trt):
        m = json.loads((r.path / "manifest.json").read_text())
        m["workload"].update(cluster_unit="source file", doc_cluster=(np.arange(n_docs) // per_file).tolist())
        (r.path / "manifest.json").write_text(json.dumps(m))
    return [load_run(r.path, optional=("position",)) for r in (ctl, trt)]


def _crv1_by_hand(d, groups):
    G, N = len(np.unique(groups)), len(d)
    S = np.array([(d[groups == g] - d.mean()).sum() for g in np.unique(groups)])
    return np.sqrt(G / (G - 1) * (S ** 2).sum()) / N


def test_the_sd_clusters_by_the_declared_unit(tmp_path):
    runs = _filed_runs(tmp_path)
    ya, yb = ((r.steps["accept_len"].to_numpy() >= 2).astype(float) for r in runs)
    doc = runs[0].steps["doc_id"].to_numpy()
    reg = dict(primary_metric="p2_uncond", direction="increase", min_effect=0.02, decides="paired",
               arms={"control": "ctl", "treatment": "trt"})
    by_file = judge(_prereg(tmp_path, "f", **reg), runs, n_boot=0).verdict          # the default: source file
    assert by_file.se == pytest.approx(_crv1_by_hand(yb - ya, doc // 3), rel=1e-9)
    assert by_file.clusters == "10 source files" and by_file.counts["min_clusters"] == 10
    by_doc = judge(_prereg(tmp_path, "d", **reg, cluster="document"), runs, n_boot=0).verdict
    assert by_doc.se == pytest.approx(_crv1_by_hand(yb - ya, doc), rel=1e-9) and by_doc.clusters == "30 documents"


def test_the_other_estimand_is_a_sensitivity_line(tmp_path):
    runs = _pair_runs(tmp_path)
    reg = dict(primary_metric="p2_uncond", direction="increase", min_effect=0.02,
               arms={"control": "ctl", "treatment": "trt"})
    j = judge(_prereg(tmp_path, "p", **reg, decides="paired"), runs, n_boot=0)
    whole = judge(_prereg(tmp_path, "w", **reg, decides="cluster", estimand="whole_arm"), runs, n_boot=0).verdict
    s = j.sensitivity.verdict
    assert (s.status, s.delta, s.se) == (whole.status, whole.delta, whole.se) and s.se_kind == "cluster"
    assert j.sensitivity.line(j.verdict) == f"sensitivity (whole arm): {whole.measured()}: MET as well"
    assert j.details["sensitivity"]["estimand"] == "whole_arm"


def test_arms_identical_by_construction_are_not_informative(tmp_path):
    """Two arms with the same outcome at every position (one code path): zero discordant pairs,
    paired sd exactly 0. An equivalence could not have failed; no verdict."""
    from dataclasses import replace

    ctl, _ = _pair_runs(tmp_path)
    runs = [ctl, replace(ctl, arm="trt")]
    eq = judge(_prereg(tmp_path, "e", kind="equivalence", primary_metric="p1", margin=0.01, threshold_sd=2.0,
                       decides="paired", arms={"control": "ctl", "treatment": "trt"}), runs, n_boot=0)
    assert eq.verdict.status == "NOT INFORMATIVE" and (eq.verdict.delta, eq.verdict.se) == (0.0, 0.0)
    assert "2,400 matched pairs, none discordant" in eq.verdict.reason
    assert eq.sensitivity.verdict.status == "NOT INFORMATIVE"           # whole arms: every cell equal
    diff = judge(_prereg(tmp_path, "d", primary_metric="p1", direction="increase", min_effect=0.01,
                         decides="cluster", arms={"control": "ctl", "treatment": "trt"}), runs, n_boot=0)
    assert diff.verdict.status == "NOT INFORMATIVE"


def test_docs_state_every_verdict_kind_in_the_judges_words():
    from pathlib import Path

    from atlas_ab.analysis.criteria import IDENTICAL, verdict_table

    doc = (Path(__file__).resolve().parents[2] / "docs/analysis.md").read_text()
    assert verdict_table() in doc and IDENTICAL in doc
