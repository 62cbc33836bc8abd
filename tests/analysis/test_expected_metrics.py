"""The exact-probability metrics of sampled runs: p{i}_expected and alpha1 (analysis/metrics/)."""
import math

import numpy as np
import pandas as pd
import pytest

from atlas_ab import AtlasError
from atlas_ab.analysis.metrics import cell_counts, compare, doc_sums, rates, realized, row_values
from atlas_ab.telemetry.acceptance import parse_metric

NAN = float("nan")


def literal_steps():
    return pd.DataFrame({
        "doc_id": [0, 0, 1, 1], "turn": [0, 0, 0, 1], "step": [0, 1, 0, 0],
        "k": [2, 2, 0, 2], "accept_len": [2, 0, 0, 0],
        "accept_prob": [np.array([0.9, 0.5]), np.array([0.3, 0.7]), np.array([]), np.array([0.2, NAN])],
        "alpha1": [0.8, 0.4, NAN, 0.5]})


def test_literal_values():
    df = literal_steps()
    c = cell_counts(df, "arm", K=2)
    r = rates(c)
    # depth 1: every verify step's accept probability; the gated step (k = 0) is in no denominator
    assert r["p1_expected"] == pytest.approx((0.9 + 0.3 + 0.2) / 3) and r["n_p1_expected"] == 3
    # depth 2: the accept probability where depth 1 was accepted, 0 where it was not (NaN there is unused)
    assert r["p2_expected"] == pytest.approx(0.5 / 3) and r["n_p2_expected"] == 3
    assert r["alpha1"] == pytest.approx((0.8 + 0.4 + 0.5) / 3)
    assert r["p1"] == pytest.approx(1 / 3) and r["p2_uncond"] == pytest.approx(1 / 3)
    s = doc_sums(c, "p2_expected")
    assert s.doc_id.tolist() == [0, 1] and s.n.tolist() == [2, 1] and s.y.tolist() == pytest.approx([0.5, 0.0])
    assert s.y2.tolist() == pytest.approx([0.25, 0.0])
    warm = rates(c.where("warm"))
    assert warm["p1_expected"] == pytest.approx(0.2) and warm["n_alpha1"] == 1


def test_names():
    assert parse_metric("p2_expected") == ("expected", 2) and parse_metric("alpha1") == ("alpha", 1)
    assert realized("p2_expected") == "p2_uncond" and realized("alpha1") == "p1"
    with pytest.raises(AtlasError, match="not an exact-probability metric"):
        realized("p2_uncond")


def test_a_greedy_run_has_no_expected_metrics():
    df = literal_steps().drop(columns=["accept_prob", "alpha1"])
    c = cell_counts(df, "arm", K=2)
    assert c.expected is None and "p2_expected" not in rates(c)
    with pytest.raises(AtlasError, match="only a sampled run records"):
        doc_sums(c, "p2_expected")
    with pytest.raises(AtlasError, match="needs exact acceptance probabilities"):
        row_values(df, "alpha1")


def test_a_missing_probability_in_the_denominator_is_refused():
    df = literal_steps()
    df.loc[0, "accept_prob"] = np.array([0.9, NAN])       # depth 1 accepted, depth 2's probability lost
    with pytest.raises(AtlasError, match="no accept probability at depth 2"):
        cell_counts(df, "arm", K=2)


def simulated(n_docs=40, steps=400, seed=0, shift=0.0):
    """Steps of a sampled K=2 arm: per step, accept probabilities drawn around a document's level,
    the accept coins drawn from them (as the verifier does)."""
    rng = np.random.default_rng(seed)
    rows = []
    for d in range(n_docs):
        level = rng.uniform(0.3, 0.8) + shift
        a1 = np.clip(rng.normal(level, 0.2, steps), 0, 1)
        a2 = np.clip(rng.normal(level - 0.1, 0.2, steps), 0, 1)
        acc1 = rng.random(steps) < a1
        acc2 = acc1 & (rng.random(steps) < a2)
        for s in range(steps):
            rows.append((d, 0, s, 2, int(acc1[s]) + int(acc2[s]), np.array([a1[s], a2[s]]), a1[s]))
    return pd.DataFrame(rows, columns=["doc_id", "turn", "step", "k", "accept_len", "accept_prob", "alpha1"])


def test_expected_metrics_estimate_the_realized_ones_with_less_variance():
    df = simulated()
    c = cell_counts(df, "arm", K=2)
    r = rates(c)
    n = r["n_p2_uncond"]
    # unbiased: the two estimate one rate (4.5 binomial sd apart at most; the draw is fixed by the seed)
    assert abs(r["p2_expected"] - r["p2_uncond"]) < 4.5 * math.sqrt(r["p2_uncond"] * (1 - r["p2_uncond"]) / n)
    assert abs(r["p1_expected"] - r["p1"]) < 4.5 * math.sqrt(r["p1"] * (1 - r["p1"]) / n)
    # and with a smaller sd: the accept coin's variance is gone
    assert doc_sums(c, "p2_expected").iid_se < doc_sums(c, "p2_uncond").iid_se
    assert doc_sums(c, "p1_expected").iid_se < 0.8 * doc_sums(c, "p1").iid_se


def test_compare_and_the_variance_ratio():
    from atlas_ab.analysis.comparison import Comparison
    from atlas_ab.analysis.metrics import arm_metrics
    a, b = (cell_counts(simulated(seed=s, shift=x), arm, K=2) for s, x, arm in ((1, 0.0, "A"), (2, 0.05, "B")))
    d = compare(a, b, "p2_expected", n_boot=200)
    assert d.metric == "p2_expected" and d.cluster_se is not None and d.delta > 0
    names = ["p1", "p2_uncond", "alpha1", "p2_expected"]
    comp = Comparison(control=arm_metrics(a), treatment=arm_metrics(b), primary=d,
                      headline={m: compare(a, b, m, n_boot=0) for m in names})
    v = comp.variance_ratios
    assert set(v) == {"alpha1", "p2_expected"} and v["p2_expected"]["realized"] == "p2_uncond"
    assert v["p2_expected"]["sd_kind"] == "cluster"
    assert v["p2_expected"]["ratio"] == pytest.approx((comp.headline["p2_expected"].cluster_se
                                                       / comp.headline["p2_uncond"].cluster_se) ** 2)
    assert "p2_uncond needs" in comp.summary()
