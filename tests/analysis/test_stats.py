"""The reference engine's powered A/B to the digit, clustered vs i.i.d. uncertainty, the bootstrap."""
import math

import numpy as np
import pytest
from statsmodels.regression.linear_model import OLS

from atlas_ab.analysis.metrics import cell_counts, compare, doc_sums
from atlas_ab.analysis.stats import cluster, difference, format_delta, rate, se_at
from tests.helpers.synth import simulate_steps, steps_from_counts

# speculative.rs.txt, POWERED A/B (2026-07-21, dgx2), nd = 2 so every verify step has k = 2.
OFF_N, ON_N = 10_400, 10_100
# counts that round to the printed rates: 6344/10400 = .6100, 4349/10400 = .4182,
# 6325/10100 = .6262, 4497/10100 = .4452
OFF_COUNTS = {0: OFF_N - 6344, 1: 6344 - 4349, 2: 4349}
ON_COUNTS = {0: ON_N - 6325, 1: 6325 - 4497, 2: 4497}


def test_seeds_ab_from_summary_numbers():
    p1 = difference(rate(0.6100, OFF_N), rate(0.6262, ON_N))
    p2 = difference(rate(0.4182, OFF_N), rate(0.4452, ON_N))
    assert str(p1) == "+0.016 (2.4 sd)"
    assert str(p2) == "+0.027 (3.9 sd)"
    # by hand: sqrt(.4182*.5818/10400 + .4452*.5548/10100) = sqrt(2.3395e-5 + 2.4455e-5) = .006917
    assert p2.se == pytest.approx(0.006917, abs=2e-6)
    assert p2.z == pytest.approx(0.027 / 0.006917, abs=0.01)


def test_seeds_n700_is_one_sd():
    d = difference(rate(0.4182, 700), rate(0.4452, 700))
    # by hand: sqrt(.4182*.5818/700 + .4452*.5548/700) = 0.02646, z = .027/.02646 = 1.02
    assert d.se == pytest.approx(0.02646, abs=1e-5)
    assert d.z == pytest.approx(1.02, abs=0.005)
    assert str(d) == "+0.027 (1.0 sd)"
    # the power module's reverse question gives the same sd
    assert se_at(0.4182, 0.027, 700) == pytest.approx(0.02646, abs=1e-5)


def test_seeds_ab_from_step_tables():
    off = cell_counts(steps_from_counts(OFF_COUNTS, seed=0), "refeed_off")
    on = cell_counts(steps_from_counts(ON_COUNTS, seed=1), "refeed_on")
    p1 = compare(off, on, "p1", n_boot=200)
    p2 = compare(off, on, "p2_uncond", n_boot=200)
    assert (round(p1.control.value, 4), round(p1.treatment.value, 4)) == (0.6100, 0.6262)
    assert (round(p2.control.value, 4), round(p2.treatment.value, 4)) == (0.4182, 0.4452)
    assert (p2.control.n, p2.treatment.n) == (OFF_N, ON_N)
    assert str(p1) == "+0.016 (2.4 sd)"
    assert str(p2) == "+0.027 (3.9 sd)"
    assert p2.se_kind == "binomial"
    # p2_cond and tokens/step are ratios: delta-method sd, not labelled binomial
    assert compare(off, on, "p2_cond", n_boot=0).se_kind == "delta"


def test_format_delta_sign():
    assert format_delta(-0.0234, -1.71) == "-0.023 (1.7 sd)"
    assert format_delta(0.0, float("nan")) == "+0.000 (n/a sd)"


def test_cluster_sd_equals_row_level_ols():
    """The per-document WLS sandwich is the row-level OLS cluster sandwich, exactly."""
    a = simulate_steps(3000, n_docs=12, doc_sd=0.6, serial_frac=0.1, seed=4)
    b = simulate_steps(2500, (0.65, 0.7), n_docs=12, doc_sd=0.6, seed=5)
    for metric, den, y in [("p2_uncond", lambda d: d.k >= 2, lambda d: d.accept_len >= 2),
                           ("p2_cond", lambda d: (d.k >= 2) & (d.accept_len >= 1), lambda d: d.accept_len >= 2),
                           ("tokens_per_step", lambda d: d.k >= 1, lambda d: 1 + d.accept_len)]:
        sa = doc_sums(cell_counts(a, "a"), metric)
        sb = doc_sums(cell_counts(b, "b"), metric)
        ra, rb = a[den(a)], b[den(b)]
        ya = y(ra).to_numpy(float)
        one = OLS(ya, np.ones(len(ya))).fit(cov_type="cluster", cov_kwds={"groups": ra.doc_id.to_numpy()})
        assert cluster.cluster_se(sa) == pytest.approx(one.bse[0], rel=1e-9)
        Y = np.r_[ya, y(rb).to_numpy(float)]
        X = np.column_stack([np.ones(len(Y)), np.r_[np.zeros(len(ra)), np.ones(len(rb))]])
        g = np.r_[ra.doc_id.to_numpy(), rb.doc_id.to_numpy()]
        two = OLS(Y, X).fit(cov_type="cluster", cov_kwds={"groups": g})
        assert cluster.cluster_se_difference(sa, sb) == pytest.approx(two.bse[1], rel=1e-9)


def test_clustered_data_widen_the_sd():
    """Document random effects (independent per arm: the arms emit different text):
    the cluster and bootstrap sds are clearly wider than the binomial one."""
    a = cell_counts(simulate_steps(20_000, n_docs=40, doc_sd=0.8, seed=6), "a")
    b = cell_counts(simulate_steps(20_000, (0.63, 0.7), n_docs=40, doc_sd=0.8, seed=7), "b")
    d = compare(a, b, "p2_uncond", n_boot=1000, seed=1)
    assert d.deff > 3
    assert d.control.deff > 3 and d.treatment.deff > 3
    assert d.cluster_se > 1.7 * d.se
    assert d.bootstrap.se > 1.7 * d.se
    assert d.bootstrap.ci_low < d.delta < d.bootstrap.ci_high
    assert abs(d.z_by("cluster")) < abs(d.z)


def test_iid_data_agree():
    """Independent steps: cluster, bootstrap and binomial sds agree within sampling noise."""
    a = cell_counts(simulate_steps(20_000, n_docs=80, seed=8), "a")
    b = cell_counts(simulate_steps(20_000, n_docs=80, seed=9), "b")
    d = compare(a, b, "p2_uncond", n_boot=1000, seed=2)
    # with 80 clusters the sd of an sd estimate is ~ 1/sqrt(2*80) ~ 8%
    assert d.cluster_se == pytest.approx(d.se, rel=0.25)
    assert d.bootstrap.se == pytest.approx(d.se, rel=0.25)
    assert 0.6 < d.deff < 1.6
    t = compare(a, b, "tokens_per_step", n_boot=0)
    assert t.cluster_se == pytest.approx(t.se, rel=0.25)


def test_bootstrap_is_seeded():
    a = cell_counts(simulate_steps(2000, n_docs=10, seed=1), "a")
    s = doc_sums(a, "p1")
    one, two = cluster.bootstrap(s, n_boot=300, seed=5), cluster.bootstrap(s, n_boot=300, seed=5)
    assert (one.se, one.ci_low, one.ci_high) == (two.se, two.ci_low, two.ci_high)
    assert cluster.bootstrap(s, n_boot=300, seed=6).se != one.se
    # every resample draws G documents
    W = cluster._weights(10, 300, 5)
    assert (W.sum(axis=1) == 10).all()


def test_ratio_delta_sd_matches_the_mean_se():
    """tokens/step is a mean over verify steps: its delta-method sd is the sample se."""
    df = simulate_steps(5000, n_docs=10, serial_frac=0.2, seed=3)
    s = doc_sums(cell_counts(df, "a"), "tokens_per_step")
    v = (1 + df.accept_len[df.k >= 1]).to_numpy(float)
    assert s.iid_se == pytest.approx(v.std(ddof=0) / math.sqrt(len(v)), rel=1e-9)


def test_a_relative_difference_carries_both_arms_uncertainty():
    """Delta method by hand on three clusters: a = 12/30 = 0.4, b = 15/30 = 0.5, b/a = 1.25.
    u = (ta - a sa)/30 = [-1, 1, 0]/30, v = (tb - b sb)/30 = [1, -1, 0]/30.
    b - a:     z = v - u = [2, -2, 0]/30,                  Var = 3/2 * 8/900 = 0.0133333
    b/a - 1:   z = (v - 1.25 u)/0.4 = [0.1875, -0.1875, 0],  Var = 3/2 * 0.0703125 = 0.10546875
    (the control's sd alone, sd(b - a)/a = 0.2887, would understate it: the arms co-vary here)."""
    from atlas_ab.analysis.stats import ratio_difference_se, relative_se_independent

    ta, sa, tb, sb = [3, 5, 4], [10, 10, 10], [6, 4, 5], [10, 10, 10]
    assert ratio_difference_se(ta, sa, tb, sb) == pytest.approx(math.sqrt(1.5 * 8 / 900), rel=1e-12)
    assert ratio_difference_se(ta, sa, tb, sb, relative=True) == pytest.approx(math.sqrt(0.10546875), rel=1e-12)
    # independent arms: (b/a)^2 (Var a / a^2 + Var b / b^2) = 1.5625 (0.01/0.16 + 0.04/0.25) = 0.34765625
    assert relative_se_independent(0.4, 0.1, 0.5, 0.2) == pytest.approx(math.sqrt(0.34765625), rel=1e-12)


def test_json_keys_outlive_the_code_names():
    """In code a standard error is `se` and the bootstrap draws `n_boot`; report.json, read by
    outside checkers, keeps `sd`, `sd_kind`, `cluster_sd` and `B` (analysis/stats/keys.py)."""
    from atlas_ab.analysis.stats import solve

    off = cell_counts(steps_from_counts(OFF_COUNTS, seed=0), "refeed_off")
    on = cell_counts(steps_from_counts(ON_COUNTS, seed=1), "refeed_on")
    d = compare(off, on, "p2_uncond", n_boot=50)
    j = d.to_dict()
    assert (j["sd"], j["sd_kind"], j["cluster_sd"]) == (d.se, d.se_kind, d.cluster_se)
    assert (j["control"]["sd"], j["control"]["cluster_sd"]) == (d.control.se, d.control.cluster_se)
    assert (j["bootstrap"]["B"], j["bootstrap"]["sd"]) == (50, d.bootstrap.se) and d.bootstrap.n_boot == 50
    r = solve(0.4182, 0.027, threshold_sd=3.0, n=700)
    assert r.to_dict()["sd_at_n"] == r.se_at_n and "se_at_n" not in r.to_dict()
